"""Workloads (core): synthetic prompts, arrival processes."""
