"""`servekit image build` against the private Docker engine: real patches, labels and runs.

A vLLM-like base image (the tier's base plus the small `vllm/` tree of
`data/image-build/site`, on its PYTHONPATH) is patched with the diffs of
`data/image-build/` by servekit run as a subprocess, as a user runs it. Each test
removes the images and containers it made; the failure tests check that the daemon's
other images and containers are untouched and that no image got the tag.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from docker_tier import ROOT, Daemon

DATA = Path(__file__).with_name("data") / "image-build"
VLLM_BASE = "servekit-test-vllm:0.25.1"
TAG = "servekit-test-vllm:0.25.1-patched"
PROFILE = "tier-image-build"
LAYOUT_FILE = "/opt/vllm-site/vllm/model_executor/layers/fused_moe/topk_layout.py"
BUILD_TIMEOUT_S = 300.0

VLLM_DOCKERFILE = """\
FROM {base}
COPY site/ /opt/vllm-site/
ENV PYTHONPATH=/opt/vllm-site:/opt/servekit/lib
{extra}"""


@dataclass(frozen=True)
class Snapshot:
    """What the daemon holds: image ids, tags and container ids."""

    images: frozenset[str]
    tags: frozenset[str]
    containers: frozenset[str]


def snapshot(daemon: Daemon) -> Snapshot:
    """The daemon's images (with intermediate ones), tags and containers, now."""
    tags = daemon.cli("images", "--format", "{{.Repository}}:{{.Tag}}").split()
    return Snapshot(frozenset(daemon.images()), frozenset(tags), frozenset(daemon.containers()))


def build_vllm_base(daemon: Daemon, base: str, tag: str, work: Path, extra: str = "") -> None:
    """Build `tag`: `base` with the stand-in vllm tree (and `extra` Dockerfile lines)."""
    context = work / f"vllm-base-{tag.replace(':', '-')}"
    shutil.copytree(DATA / "site", context / "site")
    (context / "Dockerfile").write_text(
        VLLM_DOCKERFILE.format(base=base, extra=extra), encoding="utf-8"
    )
    daemon.cli("build", "--quiet", "--tag", tag, str(context), timeout_s=BUILD_TIMEOUT_S)
    shutil.rmtree(context)


def remove_new(daemon: Daemon, before: Snapshot) -> None:
    """Remove every container and image the daemon did not hold at `before`."""
    now = snapshot(daemon)
    if containers := now.containers - before.containers:
        daemon.cli("rm", "-f", *containers)
    for tag in now.tags - before.tags:
        daemon.cli("rmi", "--no-prune", tag, check=False)
    # Intermediate images of a build (its layer cache), children before parents.
    for _ in range(10):
        left = set(daemon.images()) - before.images
        if not left:
            return
        daemon.cli("rmi", *left, check=False)
    assert set(daemon.images()) <= before.images, "images of the test are left behind"


@pytest.fixture(scope="module")
def vllm_base(docker_daemon: Daemon, base_image: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[str]:  # fmt: skip
    """A vLLM-like image: the tier's base image with a small vllm package installed."""
    before = snapshot(docker_daemon)
    build_vllm_base(docker_daemon, base_image, VLLM_BASE, tmp_path_factory.mktemp("vllm"))
    yield VLLM_BASE
    remove_new(docker_daemon, before)


@pytest.fixture
def tidy(docker_daemon: Daemon, vllm_base: str) -> Iterator[Snapshot]:
    """The daemon before the test; afterwards whatever the test made is removed."""
    before = snapshot(docker_daemon)
    yield before
    remove_new(docker_daemon, before)


def write_profile(directory: Path, *, patches: list[tuple[str, str]], image: str = VLLM_BASE
                  ) -> Path:  # fmt: skip
    """A user profile extending a built-in one, building TAG from `image` with `patches`."""
    lines = [
        "extends: minimax-m3-mxfp8-8xa800",
        f"name: {PROFILE}",
        "engine:",
        f"  image: {image}",
        f"  patched_image_tag: {TAG}",
        "  patches:",
        *(f"    - {{name: {name}, url: {json.dumps(url)}}}" for name, url in patches),
    ]
    path = directory / f"{PROFILE}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def servekit(daemon: Daemon, *args: str, cwd: Path, **env_extra: str
             ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run this checkout's servekit as a user would, against the private daemon; its
    temporary build context goes under `cwd` (a failed build keeps it)."""
    env = daemon.env(PYTHONPATH=str(ROOT / "src"), TMPDIR=str(cwd), **env_extra)
    env.pop("DOCKER_BUILDKIT", None)
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "servekit", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=BUILD_TIMEOUT_S, check=False,
    )  # fmt: skip


def copy_patches(directory: Path, *names: str) -> None:
    for name in names:
        shutil.copy(DATA / name, directory / name)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("servekit: error:")]


def test_patched_image_is_built_labelled_and_runs(
    docker_daemon: Daemon, tidy: Snapshot, tmp_path: Path
) -> None:
    """Two patches (a path and a file:// URL) apply for real; the image has servekit's labels,
    the patched code, the new file, its base's entrypoint and config, and it runs."""
    copy_patches(tmp_path, "topk-layout.diff", "patch-note.diff")
    note_url = (tmp_path / "patch-note.diff").as_uri()
    profile = write_profile(
        tmp_path, patches=[("topk-layout", "topk-layout.diff"), ("patch-note", note_url)]
    )
    result = servekit(docker_daemon, "image", "build", str(profile), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"built {TAG}"
    assert not list(tmp_path.glob("servekit-image-*"))  # the built context is removed
    assert "servekit: applied patch topk-layout" in result.stderr
    # The legacy builder's notice (docker without buildx) is one line, if it is there at all.
    assert "DEPRECATED" not in result.stderr
    assert result.stderr.count("legacy builder") <= 1
    assert "dropped (not in the installed package): tests/kernels/test_topk_layout.py" in (
        result.stdout
    )

    inspected = json.loads(docker_daemon.cli("image", "inspect", TAG))[0]
    base = json.loads(docker_daemon.cli("image", "inspect", VLLM_BASE))[0]
    assert inspected["Config"]["Labels"] == {
        "io.servekit.patches": "topk-layout,patch-note",
        "io.servekit.profile": PROFILE,
        "io.servekit.base-image": VLLM_BASE,
        "org.opencontainers.image.base.name": VLLM_BASE,
    }
    for key in ("Entrypoint", "Cmd", "Env", "WorkingDir", "User", "Shell"):
        assert inspected["Config"].get(key) == base["Config"].get(key), key

    def run(*argv: str) -> str:
        return docker_daemon.cli("run", "--rm", "--network", "host", *argv)

    layout = run("--entrypoint", "cat", TAG, LAYOUT_FILE)
    assert 'LAYOUT = "H,T,K"' in layout
    assert "heads outermost" in layout
    imported = run("--entrypoint", "python3", TAG, "-c",
                   "import vllm; from vllm.model_executor.layers.fused_moe import "
                   "index_buffer_layout, patch_note; "
                   "print(vllm.__version__, index_buffer_layout(), patch_note.NOTE)")  # fmt: skip
    assert imported.strip() == "0.25.1 H,T,K patched by servekit"
    assert run(TAG, "--help").startswith("usage: vllm serve")  # the base's entrypoint
    manifest = json.loads(run("--entrypoint", "cat", TAG, "/opt/servekit/patches/manifest.json"))
    assert [patch["name"] for patch in manifest["patches"]] == ["topk-layout", "patch-note"]
    # The tests/ file of the diff was dropped, not applied somewhere in the image.
    assert run("--entrypoint", "sh", TAG, "-c",
               "find / -xdev -name test_topk_layout.py | wc -l").strip() == "0"  # fmt: skip
    assert snapshot(docker_daemon).containers == tidy.containers  # --rm: none left


def test_patch_that_does_not_apply_stops_the_build_naming_it(
    docker_daemon: Daemon, tidy: Snapshot, tmp_path: Path
) -> None:
    """A diff whose context is another vLLM's: one error line naming the patch, exit 1, no
    image with the tag, no container left, and every image that was there still is."""
    copy_patches(tmp_path, "topk-layout.diff", "stale-context.diff")
    profile = write_profile(
        tmp_path,
        patches=[("topk-layout", "topk-layout.diff"), ("stale-context", "stale-context.diff")],
    )
    result = servekit(docker_daemon, "image", "build", str(profile), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(
        "servekit: error: patch stale-context (stale-context.diff) does not apply to the vllm "
        "package in /opt/vllm-site"
    )
    assert result.stderr.splitlines()[-1] == errors[0]
    kept = Path(errors[0].split("build context kept in ")[1].split(")")[0])
    assert kept.parent == tmp_path
    assert (kept / "patches" / "02-stale-context.diff").is_file()
    after = snapshot(docker_daemon)
    assert TAG not in after.tags
    assert after.containers == tidy.containers  # the failed step's container is removed
    assert tidy.images <= after.images
    assert tidy.tags <= after.tags


def test_missing_base_image_is_one_clear_line(
    docker_daemon: Daemon, tidy: Snapshot, tmp_path: Path
) -> None:
    """A base image that is not here and cannot be pulled: one line naming it, exit 1."""
    copy_patches(tmp_path, "topk-layout.diff")
    missing = "servekit-test-absent/vllm:0.0.1"
    profile = write_profile(tmp_path, patches=[("topk-layout", "topk-layout.diff")],
                            image=missing)  # fmt: skip
    result = servekit(docker_daemon, "image", "build", str(profile), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(
        f"servekit: error: base image {missing} is not on this machine and could not be pulled"
    )
    assert result.stderr.splitlines()[-1] == errors[0]
    assert snapshot(docker_daemon) == tidy


def test_base_without_patch_and_no_network_is_one_clear_line(
    docker_daemon: Daemon, tidy: Snapshot, tmp_path: Path
) -> None:
    """A base image without `patch` whose apt-get cannot reach a mirror (build steps have no
    network here): one line saying so and how to fix it, exit 1."""
    no_patch = "servekit-test-vllm:no-patch"
    build_vllm_base(docker_daemon, VLLM_BASE, no_patch, tmp_path,
                    extra="RUN rm /usr/bin/patch\n")  # fmt: skip
    copy_patches(tmp_path, "topk-layout.diff")
    profile = write_profile(tmp_path, patches=[("topk-layout", "topk-layout.diff")],
                            image=no_patch)  # fmt: skip
    result = servekit(docker_daemon, "image", "build", str(profile), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(
        "servekit: error: the base image has no 'patch' program and apt-get could not install it"
    )
    assert TAG not in snapshot(docker_daemon).tags


def test_already_patched_image_is_refused_naming_the_patch(
    docker_daemon: Daemon, tidy: Snapshot, tmp_path: Path
) -> None:
    """Building the patched image again from itself: the patch is named as already applied."""
    copy_patches(tmp_path, "topk-layout.diff")
    profile = write_profile(tmp_path, patches=[("topk-layout", "topk-layout.diff")])
    assert servekit(docker_daemon, "image", "build", str(profile), cwd=tmp_path).returncode == 0
    again = write_profile(tmp_path, patches=[("topk-layout", "topk-layout.diff")], image=TAG)
    again.write_text(
        again.read_text(encoding="utf-8").replace(
            f"patched_image_tag: {TAG}", f"patched_image_tag: {TAG}-twice"
        ),
        encoding="utf-8",
    )
    result = servekit(docker_daemon, "image", "build", str(again), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert "patch topk-layout (topk-layout.diff) is already applied" in errors[0]


def test_unreachable_daemon_is_one_line_quoting_docker(
    docker_daemon: Daemon, tidy: Snapshot, tmp_path: Path
) -> None:
    """DOCKER_HOST naming no daemon: one error line with docker's reason, exit 1."""
    copy_patches(tmp_path, "topk-layout.diff")
    profile = write_profile(tmp_path, patches=[("topk-layout", "topk-layout.diff")])
    nowhere = f"unix://{tmp_path / 'no-daemon.sock'}"
    result = servekit(docker_daemon, "image", "build", str(profile), cwd=tmp_path,
                      DOCKER_HOST=nowhere)  # fmt: skip
    assert result.returncode == 1, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(
        "servekit: error: docker build exited with code 1: Cannot connect to the Docker daemon "
        f"at {nowhere}"
    )
    assert snapshot(docker_daemon) == tidy
