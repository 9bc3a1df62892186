"""Patched engine images: diff filtering, the Dockerfile, and the apply script run for real.

The diffs in `data/` are shaped like a GitHub pull request's `.diff` (made with
`git diff`): Python files under `vllm/`, a new test, a docs page and, in
`pr-with-kernels.diff`, a CUDA file and CMakeLists.txt. `SITE` is the matching
slice of an installed vllm package, laid out in a temporary site-packages.

Set SERVEKIT_UPDATE_GOLDEN=1 to rewrite the golden files, then review the diff by eye.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servekit.errors import ConfigError
from servekit.profiles import load_profile
from servekit.profiles.loader import BUILTIN_DIR
from servekit.render.image import (
    APPLY_SCRIPT,
    PATCH_DIR,
    ImagePlan,
    check_buildable,
    context_files,
    docker_build_argv,
    plan_image,
    render_dockerfile,
)
from servekit.render.patches import classify_path, filter_patch

DATA = Path(__file__).parent / "data"
GOLDEN_DIR = Path(__file__).parent / "golden"
PATCHED = "minimax-m3-mxfp8-8xa800-v0251-patched"
PR_NAME = "vllm-pr-49149"
TOPK = "vllm/model_executor/layers/sparse_attention/topk_index.py"
MODEL = "vllm/model_executor/models/minimax_m3.py"

SITE = {
    "vllm/__init__.py": "",
    TOPK: '''"""Top-k block indices for indexed sparse attention."""

import torch


def topk_indices(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Return the top-k block indices, laid out [T, H, K]."""
    return torch.topk(scores, k, dim=-1).indices


def to_kernel_layout(indices: torch.Tensor) -> torch.Tensor:
    """Return the indices in the layout the Triton kernel reads."""
    return indices
''',
    MODEL: '''"""MiniMax-M3 (excerpt)."""

from vllm.model_executor.layers.sparse_attention.topk_index import (
    to_kernel_layout,
    topk_indices,
)

TOPK_LAYOUT = "token_major"
''',
}


def _diff(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def _patched_profile_plan(text: str, **options: bool) -> ImagePlan:
    profile = load_profile(str(BUILTIN_DIR / f"{PATCHED}.yaml"))
    return plan_image(profile, {PR_NAME: text}, **options)


def _write_site(root: Path) -> Path:
    site = root / "site-packages"
    for relative, text in SITE.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(text, encoding="utf-8")
    return site


def _write_context(plan: ImagePlan, root: Path) -> Path:
    context = root / "context"
    for relative, text in context_files(plan).items():
        (context / relative).parent.mkdir(parents=True, exist_ok=True)
        (context / relative).write_bytes(text.encode("utf-8"))
    return context


def _run_apply(shell: str, context: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHON": sys.executable}
    return subprocess.run(
        [shell, str(context / APPLY_SCRIPT), str(context / PATCH_DIR)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _snapshot(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in site.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("vllm/attention/ops/topk.py", "package"),
        ("vllm/model_executor/layers/quantization/configs/N=8.json", "package"),
        ("tests/kernels/test_topk.py", "other"),
        ("docs/models/supported_models.md", "other"),
        ("setup.py", "other"),
        ("csrc/attention/topk.cu", "compiled"),
        ("csrc/ops.h", "compiled"),
        ("cmake/utils.cmake", "compiled"),
        ("CMakeLists.txt", "compiled"),
        ("vllm/third_party/kernel.cu", "compiled"),
    ],
)
def test_paths_are_classified_for_a_wheel_install(path: str, kind: str) -> None:
    """Package files apply, compiled sources are refused, everything else is dropped."""
    assert classify_path(path) == kind


def test_pull_request_diff_keeps_only_the_vllm_package() -> None:
    """A multi-file PR diff keeps vllm/ files, drops tests/ and docs/, and re-parses cleanly."""
    result = filter_patch(PR_NAME, "pr.diff", _diff("pr-python-only.diff"))
    assert result.applied == (TOPK, MODEL)
    assert result.dropped == (
        "docs/models/supported_models.md",
        "tests/kernels/attention/test_minimax_m3_topk.py",
    )
    assert result.compiled == ()
    assert "tests/" not in result.text
    assert "docs/" not in result.text
    assert filter_patch(PR_NAME, "kept", result.text).applied == (TOPK, MODEL)


def test_compiled_changes_are_refused_by_name() -> None:
    """A patch touching csrc/ and CMake fails the plan, naming every compiled file and the flag."""
    with pytest.raises(ConfigError) as raised:
        _patched_profile_plan(_diff("pr-with-kernels.diff"))
    message = str(raised.value)
    assert "CMakeLists.txt" in message
    assert "csrc/attention/topk_index.cu" in message
    assert "--allow-skipped-compiled" in message


def test_compiled_changes_can_be_skipped_with_a_warning() -> None:
    """With allow_skipped_compiled the Python part is applied and a warning names the rest."""
    plan = _patched_profile_plan(_diff("pr-with-kernels.diff"), allow_skipped_compiled=True)
    (patch,) = plan.patches
    assert patch.applied == (TOPK, MODEL)
    assert patch.compiled == ("CMakeLists.txt", "csrc/attention/topk_index.cu")
    (warning,) = plan.warnings
    assert "csrc/attention/topk_index.cu" in warning


def test_patch_without_package_files_is_an_error() -> None:
    """A diff that only touches tests changes nothing in the image, which is refused."""
    only_tests = _diff("pr-python-only.diff").split("diff --git a/vllm/")[0]
    with pytest.raises(ConfigError, match="changes no file under vllm/"):
        _patched_profile_plan(only_tests)


@pytest.mark.parametrize("text", ["", "this is not a diff\n", "@@ -1 +1 @@\n-a\n+b\n"])
def test_text_that_is_not_a_diff_is_an_error_naming_the_patch(text: str) -> None:
    """Empty or malformed patch text raises ConfigError naming the patch and its source."""
    with pytest.raises(ConfigError) as raised:
        filter_patch(PR_NAME, "https://example.invalid/x.diff", text)
    assert PR_NAME in str(raised.value)
    assert "https://example.invalid/x.diff" in str(raised.value)


def test_package_file_without_git_prefixes_is_refused() -> None:
    """A diff without a/ and b/ prefixes cannot be applied with -p1 and is refused."""
    text = "--- vllm/x.py\n+++ vllm/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    with pytest.raises(ConfigError, match="prefix"):
        filter_patch(PR_NAME, "x.diff", text)


def test_dockerfile_matches_golden_file(golden: Callable[[str, Path], None]) -> None:
    """The built-in patched profile's Dockerfile renders byte-for-byte as its golden file."""
    plan = _patched_profile_plan(_diff("pr-python-only.diff"))
    for name, text in (
        (f"image.{PATCHED}.Dockerfile", render_dockerfile(plan)),
        (f"image.{PATCHED}.{APPLY_SCRIPT}", context_files(plan)[APPLY_SCRIPT]),
    ):
        golden(text, GOLDEN_DIR / name)


def test_context_holds_filtered_patches_and_manifest() -> None:
    """The context carries the filtered diff under patches/ and a manifest of what was dropped."""
    files = context_files(_patched_profile_plan(_diff("pr-python-only.diff")))
    diff = files[f"{PATCH_DIR}/01-{PR_NAME}.diff"]
    assert diff.startswith(f"diff --git a/{TOPK} b/{TOPK}\n")
    manifest = json.loads(files[f"{PATCH_DIR}/manifest.json"])
    assert manifest["patches"][0]["dropped"] == [
        "docs/models/supported_models.md",
        "tests/kernels/attention/test_minimax_m3_topk.py",
    ]
    assert manifest["labels"]["io.servekit.patches"] == PR_NAME


def test_docker_build_argv_tags_the_patched_image() -> None:
    """docker build is an argument list: no container left by a failed step, the profile's
    patched tag, then the context."""
    plan = _patched_profile_plan(_diff("pr-python-only.diff"))
    assert docker_build_argv(plan, "/ctx dir") == [
        "docker",
        "build",
        "--force-rm",
        "--tag",
        "vllm/vllm-openai:v0.25.1-m3patch",
        "/ctx dir",
    ]


def test_label_values_are_quoted_dockerfile_strings() -> None:
    """Label values are JSON strings with $ escaped, so Docker reads back the exact value."""
    plan = _patched_profile_plan(_diff("pr-python-only.diff"))
    odd = ImagePlan(
        profile='p"1',
        base_image="registry.local:5000/team/vllm:$TAG",
        tag=plan.tag,
        patches=plan.patches,
        warnings=(),
    )
    text = render_dockerfile(odd)
    assert 'io.servekit.profile="p\\"1" \\\n' in text
    assert 'io.servekit.base-image="registry.local:5000/team/vllm:\\$TAG" \\\n' in text


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("engine.patches=[]", "has no engine.patches; nothing to build"),
        ("engine.patched_image_tag=null", "set engine.patched_image_tag"),
        ("engine.patched_image_tag=vllm/vllm-openai:v0.25.1", "is the base image itself"),
        ("engine.patched_image_tag=Bad Tag;rm -rf /", "is not a docker image reference"),
        ("engine.image=vllm/vllm-openai:$TAG", "is not a docker image reference"),
        ("engine.patches=[{name: 'a b', url: x.diff}]", "is not a file-safe word"),
        ("engine.patches=[{name: a, url: x.diff}, {name: a, url: y.diff}]", "appears twice"),
    ],
)
def test_unbuildable_profiles_are_refused_before_any_fetch(override: str, needle: str) -> None:
    """Missing patches or tag, unsafe names and malformed references are ConfigErrors."""
    profile = load_profile(str(BUILTIN_DIR / f"{PATCHED}.yaml"), overrides=[override])
    with pytest.raises(ConfigError) as raised:
        check_buildable(profile)
    assert needle in str(raised.value)
    assert raised.value.exit_code == 1


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_apply_script_patches_the_installed_package(shell: str, tmp_path: Path) -> None:
    """The context's apply script finds vllm with Python and patches its files in place."""
    site = _write_site(tmp_path)
    context = _write_context(_patched_profile_plan(_diff("pr-python-only.diff")), tmp_path)
    result = _run_apply(shell, context, site)
    assert result.returncode == 0, result.stderr
    assert "indices.transpose(0, 1).contiguous()" in (site / TOPK).read_text(encoding="utf-8")
    assert 'TOPK_LAYOUT = "head_major"' in (site / MODEL).read_text(encoding="utf-8")
    assert f"applied patch {PR_NAME}" in result.stderr
    assert str(site) in result.stderr
    assert not (site / "tests").exists()
    assert not list(site.rglob("*.orig"))


def test_apply_script_refuses_a_patch_that_does_not_apply(tmp_path: Path) -> None:
    """A patch for another vLLM exits non-zero naming the patch, leaving every file unchanged."""
    site = _write_site(tmp_path)
    (site / MODEL).write_text('"""MiniMax-M3, another version."""\n', encoding="utf-8")
    before = _snapshot(site)
    context = _write_context(_patched_profile_plan(_diff("pr-python-only.diff")), tmp_path)
    result = _run_apply("bash", context, site)
    assert result.returncode != 0
    assert (
        f"servekit: build failed: patch {PR_NAME} (https://github.com/vllm-project/vllm/pull/"
        f"49149.diff) does not apply to the vllm package in {site} "
        "(vllm/model_executor/models/minimax_m3.py); it was made for another vLLM version\n"
    ) in result.stderr
    assert "servekit: build fix: use the patch made for this image's vLLM version" in (
        result.stderr
    )
    assert _snapshot(site) == before


def test_apply_script_refuses_an_already_applied_patch(tmp_path: Path) -> None:
    """Running the script twice fails the second time instead of reversing the patch."""
    site = _write_site(tmp_path)
    context = _write_context(_patched_profile_plan(_diff("pr-python-only.diff")), tmp_path)
    assert _run_apply("bash", context, site).returncode == 0
    patched = _snapshot(site)
    again = _run_apply("bash", context, site)
    assert again.returncode != 0
    assert f"servekit: build failed: patch {PR_NAME} (" in again.stderr
    assert ") is already applied to the vllm package in " in again.stderr
    assert _snapshot(site) == patched


def test_apply_script_without_vllm_says_so(tmp_path: Path) -> None:
    """With no vllm package importable the script exits non-zero and says so."""
    context = _write_context(_patched_profile_plan(_diff("pr-python-only.diff")), tmp_path)
    # `python -S` skips site-packages, hiding the vllm this test environment may have.
    no_site = tmp_path / "python-no-site"
    no_site.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n', encoding="utf-8")
    no_site.chmod(0o755)
    result = _run_apply_env(context, {"PATH": os.environ["PATH"], "PYTHON": str(no_site)})
    assert result.returncode != 0
    assert "no vllm package is installed" in result.stderr


def test_apply_script_without_patch_or_apt_get_fails_clearly(tmp_path: Path) -> None:
    """A base image with neither `patch` nor apt-get stops the build with that reason."""
    context = _write_context(_patched_profile_plan(_diff("pr-python-only.diff")), tmp_path)
    bare = tmp_path / "bin"
    bare.mkdir()
    result = _run_apply_env(context, {"PATH": str(bare)})
    assert result.returncode == 1
    assert result.stderr.splitlines()[-2:] == [
        "servekit: build failed: the base image has no 'patch' program and no apt-get to "
        "install it",
        "servekit: build fix: use a base image with GNU patch installed",
    ]


def _run_apply_env(context: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    shell = shutil.which("sh") or "/bin/sh"
    return subprocess.run(
        [shell, str(context / APPLY_SCRIPT), str(context / PATCH_DIR)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
