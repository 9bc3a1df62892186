"""Run every doctor check for a profile on this machine (shell: probes, then the core)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servekit.doctor.documents import DOCTOR_VERSION, DoctorDocument, SeverityCounts
from servekit.doctor.facts import MachineFacts
from servekit.doctor.findings import (
    Finding,
    doctor_exit_code,
    machine_findings,
    plan_findings,
    profile_issue_findings,
    sorted_findings,
    summarize,
)
from servekit.doctor.probes import probe_docker, probe_gpus, probe_model_dirs, probe_shm
from servekit.errors import ServekitError
from servekit.hardware import lookup_gpu
from servekit.kb import knowledge_base
from servekit.plan import make_plan, plan_inputs
from servekit.profiles.schema import Profile


@dataclass(frozen=True, slots=True)
class Examination:
    """What doctor found for one profile on this machine."""

    profile: Profile
    runtime: str
    compute_capability: str
    facts: MachineFacts
    findings: tuple[Finding, ...]
    exit_code: int

    def document(self) -> DoctorDocument:
        """The `servekit doctor --json` document."""
        return DoctorDocument(
            schema_version=DOCTOR_VERSION,
            profile=self.profile.name,
            runtime=self.runtime,
            engine_version=self.profile.engine.version,
            compute_capability=self.compute_capability,
            kb_version=knowledge_base().version,
            machine=self.facts,
            findings=self.findings,
            counts=SeverityCounts(**summarize(self.findings)),
            exit_code=self.exit_code,
        )


def examine(
    profile: Profile, *, runtime: str, model_dir: Path | None = None, strict: bool = False
) -> Examination:
    """Probe this machine and judge it, the memory plan and the profile's known issues.

    The compute capability the knowledge base is matched with is the GPUs' own when
    NVML finds one kind, else the catalog's for the profile's GPU.

    Args:
        profile: the deployment.
        runtime: "docker" (a docker engine is required) or "process".
        model_dir: the model's directory here, overriding the profile's mount.
        strict: exit 3 on warnings too.
    """
    spec = lookup_gpu(profile.hardware.gpu)
    facts = MachineFacts(
        gpus=probe_gpus(),
        docker=probe_docker(),
        shm=probe_shm(),
        model_dirs=probe_model_dirs(profile, model_dir),
    )
    detected = {g.compute_capability for g in facts.gpus.gpus}
    capability = detected.pop() if len(detected) == 1 else spec.compute_capability
    findings = machine_findings(profile, facts, spec, needs_docker=runtime == "docker")
    try:
        findings += plan_findings(make_plan(plan_inputs(profile, spec)))
    except ServekitError as exc:
        findings.append(Finding("plan", "error", "the memory plan cannot be made", detail=str(exc)))
    findings += profile_issue_findings(profile, compute_capability=capability)
    ordered = tuple(sorted_findings(findings))
    return Examination(
        profile=profile,
        runtime=runtime,
        compute_capability=capability,
        facts=facts,
        findings=ordered,
        exit_code=doctor_exit_code(ordered, strict=strict),
    )
