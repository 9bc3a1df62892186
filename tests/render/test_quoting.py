"""Hostile profile values stay one argument and run nothing, in every target."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from servekit.profiles import Profile, load_profile
from servekit.render import render, vllm_serve_args
from servekit.render.docker import docker_run_options
from servekit.render.script import host_flags

M3 = "minimax-m3-mxfp8-8xa800"
BRIEF_NAME = "x'; touch /tmp/p; '"

# Records its arguments NUL-separated, and the one env var the profiles set, for the test.
FAKE = """#!/bin/sh
: > "$ARGV_OUT"
for arg in "$@"; do printf '%s\\0' "$arg" >> "$ARGV_OUT"; done
printf '%s' "${VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS-unset}" > "$ARGV_OUT.env"
"""


def _hostile_names(tmp_path: Path) -> list[str]:
    """Return served names that would run a command if any layer re-parsed them."""
    return [
        BRIEF_NAME,
        f"x'; touch {tmp_path}/p1; '",
        f'x"; touch {tmp_path}/p2; "',
        f"$(touch {tmp_path}/p3)",
        f"a `touch {tmp_path}/p4` b",
        "a $HOME b \\ c",
    ]


def _profile(name: str) -> Profile:
    return load_profile(M3, overrides=[f"served_model_name={name}"])


def _shell_words(text: str) -> list[str]:
    """Return the words a shell would see, after dropping comments and joining continuations."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return shlex.split(code.replace("\\\n", " "))


def _run_with_fake(tmp_path: Path, program: str, script: str) -> tuple[list[str], str]:
    """Run shell text with a fake `program` first on PATH; return its argv and engine env."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / program
    fake.write_text(FAKE, encoding="utf-8")
    fake.chmod(0o755)
    script_path = tmp_path / "run.sh"
    script_path.write_text(script, encoding="utf-8")
    out = tmp_path / "argv"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "ARGV_OUT": str(out),
        "HOME": str(tmp_path),
    }
    subprocess.run(["bash", str(script_path)], env=env, check=True, cwd=tmp_path, timeout=30)
    argv = out.read_bytes().decode().split("\0")[:-1]
    return argv, Path(f"{out}.env").read_text(encoding="utf-8")


def _assert_nothing_ran(tmp_path: Path, tmp_p_existed: bool) -> None:
    assert not any(tmp_path.glob("p[0-9]"))
    if not tmp_p_existed:
        assert not Path("/tmp/p").exists()


def test_brief_override_loads_as_the_literal_name() -> None:
    """The override keeps the hostile name verbatim as served_model_name."""
    assert _profile(BRIEF_NAME).serve_args.served_model_name == BRIEF_NAME


@pytest.mark.parametrize("target", ["vllm", "docker", "script"])
def test_shell_targets_keep_the_name_one_word(tmp_path: Path, target: str) -> None:
    """In shell targets the hostile name parses back as exactly one word after its flag."""
    for name in _hostile_names(tmp_path):
        words = _shell_words(render(_profile(name), target))
        assert words[words.index("--served-model-name") + 1] == name


@pytest.mark.parametrize(("target", "key"), [("compose", "command"), ("k8s", "args")])
def test_yaml_targets_keep_the_name_one_element(tmp_path: Path, target: str, key: str) -> None:
    """In YAML targets the name is one list element (with `$` doubled against interpolation)."""
    for name in _hostile_names(tmp_path):
        docs = list(yaml.safe_load_all(render(_profile(name), target)))
        if target == "compose":
            (service,) = docs[0]["services"].values()
            args = service[key]
        else:
            args = docs[0]["spec"]["template"]["spec"]["containers"][0][key]
        assert args[args.index("--served-model-name") + 1] == name.replace("$", "$$")


@pytest.mark.integration
def test_script_passes_bash_syntax_check(tmp_path: Path) -> None:
    """The launch script with a hostile name is valid bash (`bash -n`)."""
    for index, name in enumerate(_hostile_names(tmp_path)):
        path = tmp_path / f"launch{index}.sh"
        path.write_text(render(_profile(name), "script"), encoding="utf-8")
        subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


@pytest.mark.integration
@pytest.mark.parametrize("target", ["vllm", "script"])
def test_host_commands_deliver_exact_argv(tmp_path: Path, target: str) -> None:
    """Run through bash, host commands give vllm exactly our argv and env and run nothing else."""
    tmp_p_existed = Path("/tmp/p").exists()
    for name in _hostile_names(tmp_path):
        profile = _profile(name)
        argv, env_value = _run_with_fake(tmp_path, "vllm", render(profile, target))
        flags = [word for group in host_flags(profile) for word in group]
        assert argv == ["serve", profile.model.path, *flags, *vllm_serve_args(profile)]
        assert argv.count(name) == 1
        assert env_value == "0"
    _assert_nothing_ran(tmp_path, tmp_p_existed)


@pytest.mark.integration
def test_docker_command_delivers_exact_argv(tmp_path: Path) -> None:
    """Run through bash, `docker run` gets the name as one argument and nothing else runs."""
    tmp_p_existed = Path("/tmp/p").exists()
    for name in _hostile_names(tmp_path):
        profile = _profile(name)
        argv, _ = _run_with_fake(tmp_path, "docker", render(profile, "docker"))
        options = [word for group in docker_run_options(profile) for word in group]
        image = "vllm/vllm-openai:v0.26.0"
        model = profile.model.path
        assert argv == ["run", *options, image, model, *vllm_serve_args(profile)]
        assert argv.count(name) == 1
    _assert_nothing_ran(tmp_path, tmp_p_existed)


@pytest.mark.integration
def test_hostile_description_stays_a_comment(tmp_path: Path) -> None:
    """A description with a line break cannot end the header comment and run a command."""
    base = load_profile(M3)
    profile = base.model_copy(update={"description": f"ok\ntouch {tmp_path}/p5\n"})
    for target in ["docker", "script"]:
        _run_with_fake(
            tmp_path, "docker" if target == "docker" else "vllm", render(profile, target)
        )
    for target in ["compose", "k8s"]:
        assert list(yaml.safe_load_all(render(profile, target)))
    assert not (tmp_path / "p5").exists()
