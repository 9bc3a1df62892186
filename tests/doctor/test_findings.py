"""Doctor's findings: profile x knowledge base, and machine facts x profile."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from servekit.doctor.facts import DockerReport, GpuInfo, GpuReport, ModelDirReport, ShmReport
from servekit.doctor.findings import (
    Finding,
    condition_holds,
    docker_findings,
    doctor_exit_code,
    gpu_findings,
    model_dir_findings,
    profile_issue_findings,
    shm_findings,
    sorted_findings,
)
from servekit.hardware import lookup_gpu
from servekit.kb import Condition, knowledge_base
from servekit.kb.known_issues import KnowledgeBase
from servekit.profiles import load_profile
from servekit.units import GIB

M3 = "minimax-m3-mxfp8-8xa800"
PATCHED = "minimax-m3-mxfp8-8xa800-v0251-patched"
A800 = lookup_gpu("A800-80GB-SXM")


def _issues(name: str, *overrides: str, cc: str | None = "8.0") -> dict[str, Finding]:
    profile = load_profile(name, overrides=list(overrides))
    return {f.issue_id or "": f for f in profile_issue_findings(profile, compute_capability=cc)}


def _gpu(index: int = 0, **changes: object) -> GpuInfo:
    fields: dict[str, object] = {
        "index": index, "name": "NVIDIA A800-SXM4-80GB", "memory_bytes": 81920 * 2**20,
        "compute_capability": "8.0", "nvlink_links": 8, "mig_enabled": False,
    }  # fmt: skip
    fields.update(changes)
    return GpuInfo(**fields)  # type: ignore[arg-type]


# --- the knowledge base -------------------------------------------------------------------


def test_knowledge_base_is_versioned_and_holds_the_deployments_issues() -> None:
    """The data file validates and carries every issue docs/known-issues.md lists."""
    kb = knowledge_base()
    assert kb.version >= 2
    ids = {issue.id for issue in kb.issues}
    assert {
        "m3-topk-layout-triton", "cudagraph-memory-estimate", "m3-block-size-128",
        "m3-long-context-mm-profiling", "reasoning-content-renamed", "fp8-weight-only-on-sm80",
    } <= ids  # fmt: skip
    topk = next(i for i in kb.issues if i.id == "m3-topk-layout-triton")
    assert topk.engine_versions == ">=0.24.0"
    assert "PR #49149" in topk.fixed_in
    assert "disputed" in topk.fixed_in
    assert "10.0" not in topk.compute_capabilities  # the non-SM100 path only
    assert all(issue.fix.summary and issue.references for issue in kb.issues)


def test_a_condition_names_exactly_one_setting() -> None:
    """A condition with two subjects, or none, is refused."""
    with pytest.raises(ValidationError):
        Condition(env="A", serve_arg="b")
    with pytest.raises(ValidationError):
        Condition()


def test_duplicate_ids_are_refused() -> None:
    """Two entries with one id cannot be loaded."""
    issue = knowledge_base().issues[0].model_dump()
    with pytest.raises(ValidationError, match="appears twice"):
        KnowledgeBase.model_validate({"version": 3, "issues": [issue, issue]})


def test_conditions_read_serve_args_env_speculative_and_patches() -> None:
    """Each kind of condition reads the profile field it names."""
    m3 = load_profile(M3)
    assert condition_holds(Condition(serve_arg="block_size", equals=128), m3)
    assert not condition_holds(Condition(serve_arg="block_size", equals=64), m3)
    assert condition_holds(Condition(env="VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", equals=0), m3)
    assert condition_holds(Condition(speculative="num_speculative_tokens", equals=3), m3)
    assert not condition_holds(Condition(patch="49149"), m3)
    assert condition_holds(Condition(patch="49149"), load_profile(PATCHED))
    assert not condition_holds(Condition(serve_arg="language_model_only"), m3)


# --- profile x knowledge base -------------------------------------------------------------


def test_deployment_profile_topk_bug_is_a_warning_asking_for_the_ladder() -> None:
    """v0.26.0 may contain the fix (disputed): a warning that asks for the proof."""
    found = _issues(M3)
    topk = found["m3-topk-layout-triton"]
    assert topk.severity == "warning"
    assert "concurrency ladder" in topk.detail
    assert "disputed" in topk.detail
    assert found["cudagraph-memory-estimate"].severity == "info"
    assert "mitigated by VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0" in (
        found["cudagraph-memory-estimate"].detail
    )
    assert found["m3-block-size-128"].severity == "info"


def test_unpatched_v0251_is_an_error_and_the_patched_profile_is_mitigated() -> None:
    """0.25.1 without PR #49149 is an error; the patched profile's patch mitigates it."""
    bare = _issues(PATCHED, "engine.patches=[]")["m3-topk-layout-triton"]
    assert bare.severity == "error"
    assert "49149" in bare.fix
    patched = _issues(PATCHED)["m3-topk-layout-triton"]
    assert patched.severity == "info"
    assert patched.fix == ""
    assert "mitigated by patch 49149" in patched.detail


def test_wrong_block_size_is_an_error() -> None:
    """M3 with block size 64 is refused before launch."""
    finding = _issues(M3, "block_size=64")["m3-block-size-128"]
    assert finding.severity == "error"
    assert "--block-size 128" in finding.fix


def test_disable_by_batch_size_is_flagged_as_a_no_op() -> None:
    """A profile still using disable_by_batch_size is told it does nothing and what to use."""
    assert "spec-disable-by-batch-size-noop" not in _issues(M3)
    finding = _issues(M3, "speculative.config.disable_by_batch_size=8")[
        "spec-disable-by-batch-size-noop"
    ]
    assert finding.severity == "warning"
    assert "num_speculative_tokens_per_batch_size" in finding.fix


def test_other_models_and_gpus_do_not_get_m3_findings() -> None:
    """Llama on H100 hears nothing about M3; an sm100 GPU rules the top-k bug out."""
    llama = _issues("llama-3.1-70b-4xh100", cc="9.0")
    assert not any(key.startswith("m3-") for key in llama)
    assert "m3-topk-layout-triton" not in _issues(M3, cc="10.0")


# --- machine facts ------------------------------------------------------------------------


def test_no_gpu_is_one_error_naming_the_reason() -> None:
    """Without NVML the GPU check is one error with NVML's reason."""
    found = gpu_findings(load_profile(M3), GpuReport(error="NVML cannot start: no lib"), A800)
    assert [f.severity for f in found] == ["error"]
    assert "no GPU found" in found[0].title
    assert "no lib" in found[0].detail


def test_eight_good_gpus_are_one_info() -> None:
    """Eight A800s with NVLink: nothing to fix."""
    report = GpuReport(driver_version="535", gpus=tuple(_gpu(i) for i in range(8)))
    found = gpu_findings(load_profile(M3), report, A800)
    assert [f.severity for f in found] == ["info"]
    assert "8 GPU(s)" in found[0].title


@pytest.mark.parametrize(
    ("gpus", "severity", "words"),
    [
        ([_gpu(i) for i in range(4)], "error", "4 GPU(s) found"),
        ([_gpu(i, mig_enabled=i == 0) for i in range(8)], "error", "MIG"),
        ([_gpu(i, memory_bytes=40 * GIB) for i in range(8)], "error", "less than"),
        ([_gpu(i, compute_capability="9.0") for i in range(8)], "warning", "compute capability"),
        ([_gpu(i, nvlink_links=0) for i in range(8)], "warning", "NVLink"),
    ],
)
def test_gpu_problems(gpus: list[GpuInfo], severity: str, words: str) -> None:
    """Too few GPUs, MIG, small memory, another architecture, no NVLink: each named."""
    found = gpu_findings(load_profile(M3), GpuReport(driver_version="535", gpus=tuple(gpus)), A800)
    assert any(f.severity == severity and words in f.title for f in found), found


def test_docker_findings_depend_on_the_runtime() -> None:
    """No daemon is an error for the docker runtime and info for the process runtime."""
    absent = DockerReport(cli_path="/usr/bin/docker", client_version="28.2.2",
                          engine_error="Cannot connect to the Docker daemon")  # fmt: skip
    assert docker_findings(absent, needs_docker=True)[0].severity == "error"
    assert "docker engine absent" in docker_findings(absent, needs_docker=True)[0].title
    assert docker_findings(absent, needs_docker=False)[0].severity == "info"
    assert docker_findings(DockerReport(), needs_docker=True)[0].title == "docker CLI not installed"
    ok = DockerReport(cli_path="d", client_version="1", server_version="28", runtimes=("runc",))
    assert [f.severity for f in docker_findings(ok, needs_docker=True)] == ["info", "warning"]
    nvidia = DockerReport(cli_path="d", client_version="1", server_version="28",
                          runtimes=("nvidia", "runc"))  # fmt: skip
    assert [f.severity for f in docker_findings(nvidia, needs_docker=True)] == ["info"]


def test_small_shm_warns_for_tensor_parallel() -> None:
    """64 MB of /dev/shm is a warning for an 8-GPU profile."""
    found = shm_findings(ShmReport("/dev/shm", 64 * 2**20), load_profile(M3))
    assert found[0].severity == "warning"
    assert "--ipc=host" in found[0].fix


def test_model_dir_findings() -> None:
    """Missing and incomplete directories are errors; a full disk is a warning."""
    missing = ModelDirReport("model", "/models/m", "/data/m", exists=False)
    assert model_dir_findings(missing)[0].severity == "error"
    broken = ModelDirReport("model", "/m", "/m", exists=True, error="missing 1 of 2 shard(s)")
    assert "missing 1 of 2" in model_dir_findings(broken)[0].detail
    full = ModelDirReport("model", "/m", "/m", exists=True, shard_count=2, total_bytes=GIB,
                          free_bytes=GIB)  # fmt: skip
    assert [f.severity for f in model_dir_findings(full)] == ["info", "warning"]


def test_exit_code_by_severity() -> None:
    """Errors exit 3; warnings exit 3 only with strict; infos never."""
    info, warning, error = (Finding("x", s, s) for s in ("info", "warning", "error"))
    assert doctor_exit_code([info]) == 0
    assert doctor_exit_code([info, warning]) == 0
    assert doctor_exit_code([info, warning], strict=True) == 3
    assert doctor_exit_code([error]) == 3
    assert [f.severity for f in sorted_findings([info, error, warning])] == [
        "error", "warning", "info",
    ]  # fmt: skip


def test_a_malformed_pattern_is_a_validation_error() -> None:
    """A log or model pattern that is not a regular expression fails validation, naming it."""
    issue = knowledge_base().issues[0].model_dump()
    issue["symptoms"]["log_patterns"] = ["(unclosed"]
    with pytest.raises(ValidationError, match="not a regular expression"):
        KnowledgeBase.model_validate({"version": 3, "issues": [issue]})
