"""Workloads (core): synthetic prompts, arrival processes, prompt datasets, tool definitions."""
