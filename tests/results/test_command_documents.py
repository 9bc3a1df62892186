"""Every command with `--json` prints one typed, versioned document (issue #29).

The command table (`servekit.cli.main.command_paths`) is the list: a command that gains
`--json` without a document in `servekit.schemas.COMMAND_DOCUMENTS` fails here, and each
command's real output is checked against its schema and its model. The README's sentence on
`--json` names exactly the commands without it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from servekit.cli.main import cli, command_paths
from servekit.schemas import COMMAND_DOCUMENTS, DOCS, check_command_output

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "launch"))
from sandbox import make_launch_env  # noqa: E402 - the launch tier's fake vllm on PATH

GOLDEN_INPUTS = ROOT / "tests" / "golden" / "inputs"
PATCH_DIFF = ROOT / "tests" / "render" / "data" / "pr-python-only.diff"
LLAMA = "llama-3.1-70b-4xh100"
M3 = "minimax-m3-mxfp8-8xa800"
# Checked where the command already runs, so the suite runs it once (the quick demo: ~40 s).
CHECKED_ELSEWHERE = {"demo": ROOT / "tests" / "test_demo.py"}


def _json_commands() -> set[str]:
    found = set()
    for path in command_paths():
        command: click.Command | None = cli
        for word in path:
            assert isinstance(command, click.Group)
            command = command.get_command(click.Context(command), word)
        assert command is not None
        if any("--json" in p.opts for p in command.params if isinstance(p, click.Option)):
            found.add(" ".join(path))
    return found


def test_every_json_command_has_a_published_document() -> None:
    """The commands with --json are exactly those COMMAND_DOCUMENTS names, and each names a
    model whose schema is checked in under docs/schemas/."""
    assert _json_commands() == set(COMMAND_DOCUMENTS)
    for name in COMMAND_DOCUMENTS.values():
        assert name in DOCS, name
        assert (ROOT / "docs" / "schemas" / name).is_file(), name
        assert "schema_version" in DOCS[name].model_fields, name


def test_the_readme_names_the_commands_without_json() -> None:
    """README: "Every command but `A` and `B` takes `--json`" lists exactly the others."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sentence = re.search(r"Every command but (.+?) takes `--json`", readme, re.DOTALL)
    assert sentence is not None, "README states which commands take --json"
    named = set(re.findall(r"`servekit ([a-z ]+)`", sentence.group(1)))
    every = {" ".join(path) for path in command_paths()}
    assert named == every - _json_commands()


def test_demo_is_checked_where_it_runs() -> None:
    """The commands not run below are checked against their document by the test that runs
    them already."""
    for command, test in CHECKED_ELSEWHERE.items():
        assert f'check_command_output("{command}"' in test.read_text(encoding="utf-8"), test


def _invoke(*args: str, codes: tuple[int, ...] = (0,)) -> str:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code in codes, (args, result.exit_code, result.stderr[-2000:])
    return result.stdout


@pytest.mark.integration
@pytest.mark.slow
def test_every_command_prints_its_document(
    start_server: Callable[..., tuple[object, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each command's --json output, for real, validates against its schema and its model,
    and carries schema_version 1 as its first key."""
    url = start_server()[1]
    bench, sim = tmp_path / "bench", tmp_path / "sim"
    out: dict[str, str] = {}
    out["bench"] = _invoke("bench", "--url", url, "--concurrency", "2", "--requests-per-point",
                           "4", "--warmup", "0", "--input-len", "16", "--output-len", "8",
                           "--out", str(bench))  # fmt: skip
    out["sim run"] = _invoke("sim", "run", "--profile", LLAMA, "--concurrency", "1,2",
                             "--requests-per-point", "8", "--input-len", "64", "--output-len",
                             "8", "--temperature", "0", "--out", str(sim))  # fmt: skip
    out["validate"] = _invoke("validate", "--url", url, "--only", "health,chat", "--out",
                              str(tmp_path / "validate"))  # fmt: skip
    out["plan"] = _invoke("plan", M3)
    out["profiles list"] = _invoke("profiles", "list")
    out["profiles show"] = _invoke("profiles", "show", M3)
    out["profiles gpus"] = _invoke("profiles", "gpus")
    out["compare"] = _invoke("compare", str(bench), str(sim))
    out["render"] = _invoke("render", M3, "--target", "compose")
    out["report"] = _invoke("report", str(bench), "--out", str(tmp_path / "report"))
    out["sim fit"] = _invoke("sim", "fit", str(sim), "--profile", LLAMA)
    out["tune"] = _invoke("tune", str(GOLDEN_INPUTS / "tiny-tune.yaml"), "--space",
                          str(GOLDEN_INPUTS / "tiny-space.yaml"), "--slo", "ttft_p99<=2s",
                          "--requests-per-point", "8", "--out", str(tmp_path / "tune"))  # fmt: skip
    out["logs analyze"] = _invoke(
        "logs",
        "analyze",
        str(ROOT / "tests/doctor/data/m3_v0251_illegal_memory_access.log"),
        codes=(3,),  # the log holds a failure
    )
    out["doctor"] = _invoke("doctor", M3, "--runtime", "process", codes=(0, 3))
    shutil.copy(PATCH_DIFF, tmp_path / PATCH_DIFF.name)
    (tmp_path / "patched.yaml").write_text(
        "extends: minimax-m3-mxfp8-8xa800-v0251-patched\nname: patched\nengine:\n  patches:\n"
        f"    - {{name: vllm-pr-49149, url: {PATCH_DIFF.name}}}\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    out["image build"] = _invoke("image", "build", "patched.yaml", "--dry-run", "--context",
                                 str(tmp_path / "context"))  # fmt: skip
    out["sim serve"] = _sim_serve_line()
    out.update(_engine_documents(tmp_path))

    assert set(out) == set(COMMAND_DOCUMENTS) - set(CHECKED_ELSEWHERE)
    for command, text in out.items():
        document = check_command_output(command, text)
        assert next(iter(document)) == "schema_version", command
        assert document["schema_version"] == 1, command


def _sim_serve_line() -> str:
    """The first stdout line of `sim serve --port 0 --json`: the listening event."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "servekit", "sim", "serve", "--profile", LLAMA, "--port", "0",
         "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        return proc.stdout.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def _engine_documents(tmp_path: Path) -> dict[str, str]:
    """up (followed to ready), status and down of a fake engine on the process runtime."""
    (tmp_path / "launch").mkdir()
    env = make_launch_env(tmp_path / "launch")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    name = env.profile("json-docs", port)
    where = ("--profiles-dir", str(env.profiles_dir))
    up = env.servekit("up", name, *where, "--launcher", "vllm", "--json")
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        assert json.loads(up.stdout)["ready"]["served_model"] == "fake-model"
        status = env.servekit("status", name, *where, "--json")
        assert status.returncode == 0, status.stderr[-2000:]
    finally:
        down = env.servekit("down", name, *where, "--json")
    assert down.returncode == 0, down.stderr[-2000:]
    return {"up": up.stdout, "status": status.stdout, "down": down.stdout}
