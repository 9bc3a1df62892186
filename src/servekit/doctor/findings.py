"""Findings (core): profile x machine facts x knowledge base -> what to fix before launch.

Severity: `error` means the launch will fail or the engine will misbehave, `warning`
needs a look, `info` is a fact worth knowing (including a known issue the profile
already mitigates). `servekit doctor` exits 3 when any finding is an error (with
`--strict`, also a warning), else 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from servekit.doctor.facts import (
    DockerReport,
    GpuReport,
    MachineFacts,
    ModelDirReport,
    ShmReport,
)
from servekit.kb.known_issues import Condition, KnownIssue, Severity, known_issues
from servekit.plan.fit import MemoryPlan, misfit_message
from servekit.plan.model_path import model_path_problem
from servekit.profiles.schema import Profile
from servekit.specs import GpuSpec
from servekit.units import GIB

__all__ = [
    "SEVERITIES",
    "Finding",
    "condition_holds",
    "doctor_exit_code",
    "machine_findings",
    "plan_findings",
    "profile_issue_findings",
    "sorted_findings",
    "summarize",
]

SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
"""Severities, most serious first."""

MIN_SHM_BYTES = 1 * GIB
"""Below this /dev/shm, tensor-parallel workers and NCCL run short (Docker's default is 64 MB)."""

MIN_FREE_DISK_BYTES = 20 * GIB
"""Free space wanted beside the model for compile caches and logs."""

_MEMORY_TOLERANCE = 0.03  # NVML totals differ from the catalog by a few MiB across drivers


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing doctor found.

    Attributes:
        check: the area: gpu, docker, shm, model, plan or known_issue.
        severity: error, warning or info.
        title: one line.
        detail: the evidence.
        fix: what to do (empty for plain facts).
        issue_id: the knowledge-base entry, for known-issue findings.
        references: links or documents.
    """

    check: str
    severity: Severity
    title: str
    detail: str = ""
    fix: str = ""
    issue_id: str | None = None
    references: tuple[str, ...] = ()


def doctor_exit_code(findings: Iterable[Finding], *, strict: bool = False) -> int:
    """3 when a finding is an error (or, with `strict`, a warning), else 0."""
    failing = {"error", "warning"} if strict else {"error"}
    return 3 if any(f.severity in failing for f in findings) else 0


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings ordered by severity (errors first), stable within one severity."""
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


# --- known issues -------------------------------------------------------------------------


def _setting(condition: Condition, profile: Profile) -> tuple[bool, Any]:
    """Whether the condition's setting is present in the profile, and its value."""
    if condition.serve_arg is not None:
        args = profile.serve_args
        name = condition.serve_arg
        if name in type(args).model_fields and name != "extra_args":
            value = getattr(args, name)
        else:
            value = args.extra_args.get(name, args.extra_args.get(name.replace("_", "-")))
        return value is not None, value
    if condition.env is not None:
        value = profile.env.get(condition.env)
        return value is not None, value
    if condition.speculative is not None:
        if profile.speculative is None:
            return False, None
        config = profile.speculative.config.model_dump(mode="json")
        value = config.get(condition.speculative)
        return value is not None, value
    needle = condition.patch or ""
    names = [f"{p.name} {p.url}" for p in profile.engine.patches]
    return any(needle in n for n in names), needle


def condition_holds(condition: Condition, profile: Profile) -> bool:
    """Whether a knowledge-base condition is true of a profile.

    Env values compare as strings; other values compare as parsed (128 == 128).
    """
    present, value = _setting(condition, profile)
    if not present:
        return False
    if condition.equals is None or condition.patch is not None:
        return True
    if condition.env is not None:
        return str(value) == str(condition.equals)
    return bool(value == condition.equals)


def _describe(condition: Condition) -> str:
    if condition.serve_arg is not None:
        flag = "--" + condition.serve_arg.replace("_", "-")
        return flag if condition.equals in (None, True) else f"{flag} {condition.equals}"
    if condition.env is not None:
        return condition.env if condition.equals is None else f"{condition.env}={condition.equals}"
    if condition.speculative is not None:
        return f"speculative_config.{condition.speculative}"
    return f"patch {condition.patch}"


def _model_names(profile: Profile) -> str:
    names = [profile.name, profile.model.path, profile.serve_args.served_model_name or ""]
    return "\n".join(n for n in names if n)


def profile_issue_findings(
    profile: Profile, *, compute_capability: str | None, issues: Iterable[KnownIssue] | None = None
) -> list[Finding]:
    """Known issues whose ranges cover the profile's engine version x GPU x model.

    An issue the profile already mitigates becomes `info` saying how. An `error` whose
    fix is claimed but unproven from the profile's version (`possibly_fixed_from`)
    becomes a `warning` that asks for the behavioural proof.

    Args:
        profile: the deployment.
        compute_capability: the GPUs' (from NVML when present, else the catalog's).
        issues: the entries to judge (the built-in knowledge base by default).
    """
    found = []
    for issue in known_issues() if issues is None else issues:
        rule = issue.doctor
        if rule is None:
            continue
        covered = issue.affects(
            version=profile.engine.version,
            compute_capability=compute_capability,
            model=_model_names(profile),
            quantization=profile.model.quantization,
        )
        if not covered or not all(condition_holds(c, profile) for c in rule.when):
            continue
        mitigations = [c for c in rule.mitigated_by if condition_holds(c, profile)]
        severity: Severity = rule.severity
        detail = f"affects vLLM {issue.engine_versions}; fixed in: {issue.fixed_in}"
        if mitigations:
            severity = "info"
            detail = f"mitigated by {', '.join(_describe(c) for c in mitigations)}; " + detail
        elif severity == "error" and issue.possibly_fixed(profile.engine.version):
            severity = "warning"
            detail = (
                f"v{profile.engine.version} may contain the fix (claimed from "
                f"v{issue.possibly_fixed_from}, disputed): prove it with servekit validate's "
                "concurrency ladder; " + detail
            )
        found.append(
            Finding(
                check="known_issue",
                severity=severity,
                title=f"{issue.id}: {issue.title}",
                detail=detail,
                fix="" if mitigations else issue.fix.summary,
                issue_id=issue.id,
                references=issue.references,
            )
        )
    return found


# --- the machine --------------------------------------------------------------------------


def gpu_findings(profile: Profile, report: GpuReport, spec: GpuSpec) -> list[Finding]:
    """GPUs against the profile: count, model, memory, MIG, NVLink for tensor parallel."""
    want = profile.hardware.gpus_per_node
    if not report.gpus:
        why = report.error or "NVML reports no GPUs"
        return [
            Finding(
                "gpu",
                "error",
                f"no GPU found; the profile needs {want}x {spec.name} per node",
                detail=why,
                fix="run doctor on the GPU node (with the NVIDIA driver installed); the other "
                "checks below still apply here",
            )
        ]
    found = [
        Finding(
            "gpu",
            "info",
            f"{len(report.gpus)} GPU(s): {report.gpus[0].name}, driver {report.driver_version}",
            detail="; ".join(
                f"#{g.index} {g.name} {g.memory_bytes / GIB:.1f} GiB sm{g.compute_capability} "
                f"NVLink x{g.nvlink_links}{' MIG' if g.mig_enabled else ''}"
                for g in report.gpus
            ),
        )
    ]
    if len(report.gpus) < want:
        found.append(
            Finding(
                "gpu",
                "error",
                f"{len(report.gpus)} GPU(s) found, the profile needs {want} per node",
                fix="run on a node with enough GPUs, or use a profile for fewer GPUs",
            )
        )
    usable = report.gpus[:want]
    caps = sorted({g.compute_capability for g in usable})
    if caps != [spec.compute_capability]:
        found.append(
            Finding(
                "gpu",
                "warning",
                f"GPU compute capability {', '.join(caps)} differs from the profile's "
                f"{spec.name} (sm{spec.compute_capability})",
                detail="kernels, FP8 support and known issues depend on it",
                fix="use a profile written for these GPUs (hardware.gpu)",
            )
        )
    expected = spec.memory_mib * 2**20
    small = [g for g in usable if g.memory_bytes < expected * (1 - _MEMORY_TOLERANCE)]
    if small:
        found.append(
            Finding(
                "gpu",
                "error",
                f"{len(small)} GPU(s) have {small[0].memory_bytes / GIB:.1f} GiB, less than "
                f"the {spec.memory_mib / 1024:.0f} GiB the plan assumes",
                fix="use a profile for these GPUs; the memory plan would not hold",
            )
        )
    mig = [g.index for g in usable if g.mig_enabled]
    if mig:
        found.append(
            Finding(
                "gpu",
                "error",
                f"MIG mode is on for GPU(s) {mig}",
                detail="a MIG instance has a fraction of the memory and no NVLink",
                fix="disable MIG (nvidia-smi -i N -mig 0, then reset the GPU)",
            )
        )
    tp = profile.serve_args.tensor_parallel_size
    if tp > 1 and spec.nvlink_gb_s and any(g.nvlink_links == 0 for g in usable[:tp]):
        found.append(
            Finding(
                "gpu",
                "warning",
                f"tensor parallel {tp} but some GPUs have no active NVLink links",
                detail=f"{spec.name} is an NVLink part; all-reduce over PCIe is far slower",
                fix="check nvidia-smi nvlink --status and nvidia-smi topo -m",
            )
        )
    return found


def docker_findings(report: DockerReport, *, needs_docker: bool) -> list[Finding]:
    """The docker CLI, its engine and the NVIDIA runtime (errors only when docker is needed)."""
    missing: Severity = "error" if needs_docker else "info"
    if report.cli_path is None:
        return [
            Finding(
                "docker",
                missing,
                "docker CLI not installed",
                fix="install Docker Engine, or launch as a process: servekit up --runtime process",
            )
        ]
    if report.server_version is None:
        return [
            Finding(
                "docker",
                missing,
                f"docker engine absent: the CLI {report.client_version or ''} cannot reach a "
                "daemon".replace("  ", " "),
                detail=report.engine_error or "",
                fix="start the Docker daemon (systemctl start docker) or check DOCKER_HOST; "
                "or launch as a process: servekit up --runtime process",
            )
        ]
    found = [
        Finding(
            "docker",
            "info",
            f"docker engine {report.server_version} (CLI {report.client_version})",
            detail=f"runtimes: {', '.join(report.runtimes) or 'none reported'}",
        )
    ]
    if "nvidia" not in report.runtimes:
        found.append(
            Finding(
                "docker",
                "warning" if needs_docker else "info",
                "the NVIDIA container runtime is not registered with docker",
                detail="`docker run --gpus` needs the NVIDIA Container Toolkit",
                fix="install nvidia-container-toolkit and run nvidia-ctk runtime configure "
                "--runtime=docker, then restart docker",
            )
        )
    return found


def shm_findings(report: ShmReport, profile: Profile) -> list[Finding]:
    """Shared-memory size: tensor-parallel workers exchange data through it."""
    if report.total_bytes is None:
        return [Finding("shm", "warning", f"cannot read {report.path}", detail=report.error or "")]
    size = f"{report.path} is {report.total_bytes / GIB:.1f} GiB"
    multi_gpu = profile.hardware.gpus_per_node > 1
    if multi_gpu and report.total_bytes < MIN_SHM_BYTES:
        return [
            Finding(
                "shm",
                "warning",
                size,
                detail="tensor-parallel workers and NCCL use shared memory",
                fix="enlarge it (mount -o remount,size=16G /dev/shm); in docker use --ipc=host "
                "or set deploy.shm_size",
            )
        ]
    return [Finding("shm", "info", size)]


def model_dir_findings(report: ModelDirReport) -> list[Finding]:
    """One model directory: present, complete, readable, with room beside it."""
    where = (
        report.host_path
        if report.host_path == report.engine_path
        else f"{report.host_path} (the engine's {report.engine_path})"
    )
    if not report.exists and report.kind is not None:
        return [
            Finding(
                "model",
                "error",
                str(model_path_problem(report.kind, where, report.role)),
                fix="point it at the checkpoint directory (the one holding config.json): fix the "
                "path or symlink, set deploy.host_model_dir, or pass --model-dir",
            )
        ]
    if not report.exists:
        return [
            Finding(
                "model",
                "error",
                str(model_path_problem("missing", where, report.role)),
                fix="download the checkpoint there, set deploy.host_model_dir, or pass --model-dir",
            )
        ]
    if report.error is not None:
        return [Finding("model", "error", f"{report.role} directory {where} is incomplete",
                        detail=report.error, fix="re-download the files it names")]  # fmt: skip
    found = [
        Finding(
            "model",
            "info",
            f"{report.role} {where}: {report.shard_count} shard(s), "
            f"{report.total_bytes / GIB:.1f} GiB of tensors, headers consistent",
        )
    ]
    if report.free_bytes is not None and report.free_bytes < MIN_FREE_DISK_BYTES:
        found.append(
            Finding(
                "model",
                "warning",
                f"{report.free_bytes / GIB:.1f} GiB free beside the {report.role}",
                detail="vLLM writes torch.compile caches and logs; image pulls need room too",
                fix="free disk space",
            )
        )
    return found


def machine_findings(
    profile: Profile, facts: MachineFacts, spec: GpuSpec, *, needs_docker: bool
) -> list[Finding]:
    """Every machine finding: GPUs, docker, /dev/shm, model directories."""
    found = gpu_findings(profile, facts.gpus, spec)
    found += docker_findings(facts.docker, needs_docker=needs_docker)
    found += shm_findings(facts.shm, profile)
    for report in facts.model_dirs:
        found += model_dir_findings(report)
    return found


def plan_findings(plan: MemoryPlan) -> list[Finding]:
    """The memory plan's verdict and warnings."""
    if not plan.fits:
        return [Finding("plan", "error", "the memory plan does not fit",
                        detail=misfit_message(plan),
                        fix="run servekit plan for the budget and what to change")]  # fmt: skip
    found = [
        Finding(
            "plan",
            "info",
            f"the memory plan fits: {plan.kv_cache_tokens:,} KV tokens, "
            f"{plan.max_concurrency:.2f}x at max_model_len",
        )
    ]
    found += [Finding("plan", "warning", text) for text in plan.warnings]
    return found


def summarize(findings: Iterable[Finding]) -> dict[str, int]:
    """Counts per severity."""
    counts: dict[str, int] = dict.fromkeys(SEVERITIES, 0)
    for f in findings:
        counts[f.severity] += 1
    return counts
