"""Launch artifacts of a profile (core): engine flags and launch files as text, no I/O.

`render(profile, target)` gives one of `servekit.names.TARGETS`; `vllm_serve_args` and
`vllm_serve_command` give the engine's argument list for code that launches it.
"""

from servekit.render.argv import vllm_serve_args, vllm_serve_command
from servekit.render.container import image as container_image
from servekit.render.targets import render

__all__ = ["container_image", "render", "vllm_serve_args", "vllm_serve_command"]
