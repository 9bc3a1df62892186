"""`servekit image build`: the context it writes and the docker command it runs.

A fake `docker` first on PATH records its arguments and the Dockerfile it was
given, so the tests see exactly what a real docker would, without a daemon.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from servekit.cli.main import cli

DATA = Path(__file__).resolve().parents[1] / "render" / "data"
TAG = "vllm/vllm-openai:v0.25.1-m3patch"
PROFILE = "my-m3-patched"

FAKE_DOCKER = """#!/bin/sh
if [ "$1" = image ] && [ "$2" = inspect ]; then
  if [ -n "${FAKE_DOCKER_NO_IMAGE:-}" ]; then echo "Error: No such image: $5" >&2; exit 1; fi
  echo sha256:0123; exit 0
fi
printf '%s\\n' "$@" > "$FAKE_DOCKER_LOG"
for last; do :; done
cp "$last/Dockerfile" "$FAKE_DOCKER_LOG.Dockerfile"
echo "#1 fake docker: building"
printf '%b' "${FAKE_DOCKER_OUTPUT:-}" >&2
exit "${FAKE_DOCKER_EXIT:-0}"
"""


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def write_profile(directory: Path, url: str) -> Path:
    """A user profile extending the built-in patched one, its patch at `url`."""
    path = directory / f"{PROFILE}.yaml"
    path.write_text(
        "extends: minimax-m3-mxfp8-8xa800-v0251-patched\n"
        f"name: {PROFILE}\n"
        "engine:\n"
        "  patches:\n"
        f"    - {{name: vllm-pr-49149, url: {json.dumps(url)}}}\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A current directory holding the PR-shaped diffs and a profile naming one relatively."""
    for name in ("pr-python-only.diff", "pr-with-kernels.diff"):
        shutil.copy(DATA / name, tmp_path / name)
    write_profile(tmp_path, "pr-python-only.diff")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def docker_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a recording fake docker first on PATH; return where it writes its argv."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER, encoding="utf-8")
    fake.chmod(0o755)
    log = tmp_path / "docker-argv.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    return log


def test_dry_run_writes_context_prints_dockerfile_and_never_calls_docker(
    workdir: Path, docker_log: Path
) -> None:
    """--dry-run writes the context and prints the Dockerfile and command; docker is not run."""
    context = workdir / "ctx"
    code, out, err = run("image", "build", f"{PROFILE}.yaml", "--dry-run", "--context", "ctx")
    assert code == 0, err
    assert not docker_log.exists()
    assert f"docker build --force-rm --tag {TAG} {context}" in out
    assert "FROM vllm/vllm-openai:v0.25.1\n" in out
    assert "tests/kernels/attention/test_minimax_m3_topk.py" in out  # reported as dropped
    assert (context / "Dockerfile").read_text(encoding="utf-8") in out
    assert (context / "apply-patches.sh").is_file()
    assert "vllm/model_executor/models/minimax_m3.py" in (
        context / "patches" / "01-vllm-pr-49149.diff"
    ).read_text(encoding="utf-8")


def test_build_calls_docker_build_with_tag_context_and_labels(
    workdir: Path, docker_log: Path
) -> None:
    """A build runs `docker build --tag TAG CONTEXT`; the Dockerfile docker got has the labels."""
    context = workdir / "ctx"
    code, out, err = run("image", "build", f"{PROFILE}.yaml", "--context", str(context))
    assert code == 0, err
    assert docker_log.read_text(encoding="utf-8").splitlines() == [
        "build",
        "--force-rm",
        "--tag",
        TAG,
        str(context),
    ]
    dockerfile = Path(f"{docker_log}.Dockerfile").read_text(encoding="utf-8")
    assert 'io.servekit.patches="vllm-pr-49149"' in dockerfile
    assert f'io.servekit.profile="{PROFILE}"' in dockerfile
    assert 'org.opencontainers.image.base.name="vllm/vllm-openai:v0.25.1"' in dockerfile
    assert "#1 fake docker: building" in err  # docker's output is streamed to stderr
    assert f"built {TAG}" in out
    assert context.is_dir()  # --context is kept


def test_json_build_in_a_temporary_context_removes_it(workdir: Path, docker_log: Path) -> None:
    """--json prints only JSON; without --context the temporary context is removed afterwards."""
    code, out, err = run("image", "build", f"{PROFILE}.yaml", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["built"] is True
    assert doc["context_kept"] is False
    assert doc["command"] == ["docker", "build", "--force-rm", "--tag", TAG, doc["context"]]
    assert doc["image"]["patches"][0]["dropped"] == [
        "docs/models/supported_models.md",
        "tests/kernels/attention/test_minimax_m3_topk.py",
    ]
    assert docker_log.is_file()
    assert not Path(doc["context"]).exists()


def test_failed_docker_build_reports_exit_code_and_keeps_context(
    workdir: Path, docker_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-zero docker exit is exit 1 naming docker's code and the kept context."""
    monkeypatch.setenv("FAKE_DOCKER_EXIT", "7")
    code, _, err = run("image", "build", f"{PROFILE}.yaml")
    assert code == 1
    assert "docker build exited with code 7: #1 fake docker: building (build context" in err
    kept = err.split("build context kept in ")[1].split(")")[0]
    assert (Path(kept) / "Dockerfile").is_file()
    shutil.rmtree(kept)


def test_patch_that_does_not_apply_is_the_one_error_line(
    workdir: Path, docker_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apply script's reason (even behind BuildKit's step prefix) is the error line, with
    its fix; the legacy builder's several-line deprecation notice is shown as one line."""
    monkeypatch.setenv("FAKE_DOCKER_EXIT", "1")
    monkeypatch.setenv(
        "FAKE_DOCKER_OUTPUT",
        "DEPRECATED: The legacy builder is deprecated and will be removed in a future "
        "release.\\n            Install the buildx component to build images with BuildKit:"
        "\\n            https://docs.docker.com/go/buildx/\\n\\n"
        "#8 0.31 servekit: build failed: patch vllm-pr-49149 (x.diff) does not apply\\n"
        "#8 0.31 servekit: build fix: use the patch made for this image's vLLM version\\n"
        "ERROR: failed to solve: process did not complete successfully: exit code: 1\\n",
    )
    code, _, err = run("image", "build", f"{PROFILE}.yaml", "--context", "ctx")
    assert code == 1
    lines = err.splitlines()
    assert lines[-1] == (
        "servekit: error: patch vllm-pr-49149 (x.diff) does not apply (build context kept in "
        f"{workdir / 'ctx'}); use the patch made for this image's vLLM version"
    )
    assert [line for line in lines if "legacy builder" in line] == [
        "docker: the legacy builder is deprecated; install the buildx component to build "
        "with BuildKit"
    ]
    assert not [line for line in lines if "buildx/" in line or not line.strip()]


def test_base_image_that_is_not_here_is_named(
    workdir: Path, docker_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed build whose base image the daemon does not have says so, quoting docker."""
    monkeypatch.setenv("FAKE_DOCKER_EXIT", "1")
    monkeypatch.setenv("FAKE_DOCKER_NO_IMAGE", "1")
    monkeypatch.setenv(
        "FAKE_DOCKER_OUTPUT", "Error response from daemon: pull access denied for vllm\\n"
    )
    code, _, err = run("image", "build", f"{PROFILE}.yaml", "--context", "ctx")
    assert code == 1
    assert err.splitlines()[-1].startswith(
        "servekit: error: base image vllm/vllm-openai:v0.25.1 is not on this machine and "
        "could not be pulled: pull access denied for vllm (build context kept in "
    )
    assert "docker pull vllm/vllm-openai:v0.25.1" in err


def test_missing_docker_is_a_clear_error(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without docker on PATH the build stops with an error that offers --dry-run."""
    empty = tmp_path / "no-docker"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, _, err = run("image", "build", f"{PROFILE}.yaml", "--context", "ctx")
    assert code == 1
    assert "docker was not found on PATH" in err
    assert "--dry-run" in err


def test_profile_without_patches_has_nothing_to_build() -> None:
    """A profile with no engine.patches is exit 1 with the documented message."""
    code, _, err = run("image", "build", "minimax-m3-mxfp8-8xa800", "--dry-run")
    assert code == 1
    assert "profile minimax-m3-mxfp8-8xa800 has no engine.patches; nothing to build" in err


def test_missing_patch_file_is_named(workdir: Path) -> None:
    """A local patch path that does not exist is exit 1 naming the resolved path."""
    write_profile(workdir, "patches/missing.diff")
    code, _, err = run("image", "build", f"{PROFILE}.yaml", "--dry-run")
    assert code == 1
    assert f"patch file {workdir / 'patches' / 'missing.diff'} does not exist" in err


def test_compiled_changes_need_the_flag(workdir: Path) -> None:
    """csrc/ and CMake changes refuse the build; --allow-skipped-compiled warns and proceeds."""
    write_profile(workdir, str(workdir / "pr-with-kernels.diff"))
    code, _, err = run("image", "build", f"{PROFILE}.yaml", "--dry-run", "--context", "a")
    assert code == 1
    assert "csrc/attention/topk_index.cu" in err
    code, out, err = run(
        "image",
        "build",
        f"{PROFILE}.yaml",
        "--dry-run",
        "--context",
        "b",
        "--allow-skipped-compiled",
    )
    assert code == 0, err
    assert "servekit: warning:" in err
    assert "CMakeLists.txt" in err
    assert "skipped compiled: CMakeLists.txt, csrc/attention/topk_index.cu" in out


def test_context_directory_of_other_files_is_refused(workdir: Path) -> None:
    """--context pointing at a directory servekit did not write is refused, untouched."""
    (workdir / "mine").mkdir()
    (workdir / "mine" / "notes.txt").write_text("keep me", encoding="utf-8")
    code, _, err = run("image", "build", f"{PROFILE}.yaml", "--dry-run", "--context", "mine")
    assert code == 1
    assert "not empty and was not written by servekit" in err
    assert (workdir / "mine" / "notes.txt").read_text(encoding="utf-8") == "keep me"


def test_rewritten_context_drops_stale_patches(workdir: Path) -> None:
    """Writing a context again replaces servekit's earlier files, so no stale diff lingers."""
    args = ["image", "build", f"{PROFILE}.yaml", "--dry-run", "--context", "ctx"]
    assert run(*args)[0] == 0
    stale = workdir / "ctx" / "patches" / "02-old.diff"
    stale.write_text("old", encoding="utf-8")
    code, _, err = run(*args)
    assert code == 0, err
    assert not stale.exists()


@pytest.fixture
def diff_server() -> Iterator[str]:
    """A loopback HTTP server serving tests/render/data; yields its base URL."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(DATA), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            """Keep the test output quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_http_patch_is_downloaded(workdir: Path, diff_server: str) -> None:
    """An http(s) patch url is downloaded and filtered like a local file."""
    write_profile(workdir, f"{diff_server}/pr-python-only.diff")
    code, out, err = run("image", "build", f"{PROFILE}.yaml", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["image"]["patches"][0]["applied"] == [
        "vllm/model_executor/layers/sparse_attention/topk_index.py",
        "vllm/model_executor/models/minimax_m3.py",
    ]
    shutil.rmtree(json.loads(out)["context"])


@pytest.mark.integration
def test_failed_download_names_url_and_fix(workdir: Path, diff_server: str) -> None:
    """A download that fails (here a 404) names the URL and says to download it by hand."""
    url = f"{diff_server}/no-such.diff"
    write_profile(workdir, url)
    code, _, err = run("image", "build", f"{PROFILE}.yaml", "--dry-run")
    assert code == 1
    assert f"cannot download patch {url}" in err
    assert "download it yourself and set the patch's url to the local file" in err
