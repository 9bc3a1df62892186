"""The launch runtime (shell): start, follow, inspect and stop an engine; build its image.

Everything here touches processes, files, docker or the network. The pure pieces it builds
on (engine flags, container facts, the Dockerfile plan) live in `servekit.render`.
"""
