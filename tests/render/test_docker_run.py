"""`docker run` for host networking, CPU hosts and secrets (render/docker.py)."""

from __future__ import annotations

import shlex

from servekit.profiles import Profile, load_profile
from servekit.render import render
from servekit.render.docker import docker_engine_flags, docker_run_options
from servekit.runtime.launch import docker_argv

LLAMA = "llama-3.1-70b-4xh100"


def _profile(name: str = LLAMA, *overrides: str) -> Profile:
    return load_profile(name, overrides=overrides)


def _words(text: str) -> list[str]:
    body = [line for line in text.splitlines() if not line.startswith("#")]
    return shlex.split(" ".join(line.rstrip("\\") for line in body))


def test_host_networking_publishes_nothing_and_the_engine_binds_the_host_port() -> None:
    """network host: `--network host`, no `-p`, and `--host/--port` lead the engine flags."""
    profile = _profile(LLAMA, "deploy.network=host", "deploy.port=8123")
    words = _words(render(profile, "docker"))
    assert words[words.index("--network") + 1] == "host"
    assert "-p" not in words
    after_model = words[words.index("/models/Llama-3.1-70B-Instruct") + 1 :]
    assert after_model[:4] == ["--host", "127.0.0.1", "--port", "8123"]
    assert docker_engine_flags(profile)[:2] == [("--host", "127.0.0.1"), ("--port", "8123")]


def test_bridge_networking_is_unchanged() -> None:
    """The default (bridge) publishes 8000 and passes no --host/--port to the engine."""
    words = _words(render(_profile(), "docker"))
    assert words[words.index("-p") + 1] == "127.0.0.1:8000:8000"
    assert "--network" not in words
    assert "--host" not in words


def test_a_cpu_host_reserves_no_gpus() -> None:
    """A profile on the catalog's CPU device renders no --gpus (docker would refuse it)."""
    profile = load_profile("benchmarks/profiles/tiny-llama-cpu.yaml")
    assert all(group[0] != "--gpus" for group in docker_run_options(profile))
    assert ("--gpus", "4") in docker_run_options(_profile())


def test_secret_env_is_passed_by_name_and_the_header_says_to_export_it() -> None:
    """secret_env renders `-e NAME` only, rendered and launched, and the header comment
    asks for it; plain env keeps its value in the rendered text, not in the launch argv."""
    profile = _profile(LLAMA, "secret_env=[HF_TOKEN]")
    text = render(profile, "docker")
    words = _words(text)
    assert words[words.index("HF_TOKEN") - 1] == "-e"
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("HF_TOKEN" in line and "export" in line for line in header)
    argv = docker_argv(profile)
    assert argv[argv.index("HF_TOKEN") - 1] == "-e"
    assert not any(word.startswith("HF_TOKEN=") for word in argv + words)


def test_the_launch_argv_is_the_rendered_command_with_values_by_name() -> None:
    """`up --runtime docker` runs the rendered command: the same words after the image."""
    profile = _profile(LLAMA, "deploy.network=host", "env.EXAMPLE=1")
    rendered = _words(render(profile, "docker"))
    argv = docker_argv(profile)
    image = profile.engine.image
    assert argv[argv.index(image) :] == rendered[rendered.index(image) :]
    assert argv[argv.index("EXAMPLE") - 1] == "-e"
    assert "EXAMPLE=1" in rendered
