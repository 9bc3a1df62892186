"""What `servekit plan` plans and reads (shell): the profile or model config, --model-dir,
the startup log, and `--calibrate-from-log`'s write of measured overheads into the profile
file."""

from __future__ import annotations

import datetime
from pathlib import Path

import yaml

from servekit.bench.store import write_atomically
from servekit.cli._log_file import log_line_batches
from servekit.cli._model_profile import build_profile
from servekit.errors import ConfigError, StartupLogError, UsageError
from servekit.plan.calibrate import calibration_document, measured_calibration
from servekit.plan.checkpoint import CheckpointInfo, path_kind
from servekit.plan.fit import MemoryPlan
from servekit.plan.model_path import model_path_problem
from servekit.plan.startup_log import StartupFigures, StartupLogScanner
from servekit.profiles import Profile, available_profiles, load_profile
from servekit.profiles.loader import BUILTIN_DIR


def plan_profile(
    profile: str | None,
    model_config: Path | None,
    gpu: str | None,
    gpus: int | None,
    engine_version: str,
    overrides: tuple[str, ...],
    profiles_dirs: tuple[str, ...],
) -> tuple[Profile, CheckpointInfo | None]:
    """The profile to plan: PROFILE, or one built from --model-config (exactly one).

    Raises:
        UsageError: both or neither given.
    """
    if (profile is None) == (model_config is None):
        raise UsageError(
            "give exactly one of PROFILE or --model-config",
            fix="e.g. servekit plan llama-3.1-70b-4xh100, or servekit plan --model-config "
            "config.json --gpu h100 --gpus 1",
        )
    if model_config is not None:
        name = "model-config"
        return build_profile(name, model_config, gpu, gpus, engine_version, overrides)
    if gpu or gpus:
        raise UsageError("--gpu and --gpus go with --model-config", fix="set hardware in PROFILE")
    return load_profile(str(profile), extra_dirs=profiles_dirs, overrides=overrides), None


def read_figures(path: Path) -> StartupFigures:
    """The startup figures of a log file, streamed."""
    scanner = StartupLogScanner()
    for lines in log_line_batches(path):
        scanner.feed(lines)
    figures = scanner.finish()
    if not figures.found_any:
        raise StartupLogError(
            f"{path.name} holds no vLLM startup figures", fix="pass the engine's full startup log"
        )
    return figures


def _profile_file(profile: str, profiles_dirs: tuple[str, ...]) -> Path:
    candidate = Path(profile)
    if candidate.suffix not in {".yaml", ".yml"} and "/" not in profile:
        candidate = available_profiles(profiles_dirs)[profile].path
    if candidate.resolve().parent == BUILTIN_DIR.resolve():
        raise UsageError(
            f"{profile} is a built-in profile; servekit does not change its own files",
            fix=f"copy it (servekit profiles show {candidate.stem} > my.yaml), set name: my, "
            "and calibrate that file",
        )
    return candidate


def calibrate_profile(
    profile: str | None,
    profiles_dirs: tuple[str, ...],
    plan: MemoryPlan,
    prof: Profile,
    figures: StartupFigures,
    log: Path,
) -> Path:
    """Write the log's measured overheads into PROFILE's file, atomically; return the file.

    Only the file's own calibration entries are kept (not those it inherits through
    `extends:`), and the new document is validated before the file is written.

    Raises:
        UsageError: no profile file to write (--model-config, a built-in).
        ConfigError: the file is not a profile mapping named as the loaded profile, the log
            is of another version or utilization, or the new document does not validate.
    """
    if profile is None:
        raise UsageError(
            "--calibrate-from-log writes into a profile file",
            fix="write one first: servekit profiles new NAME --model-config ... -o NAME.yaml",
        )
    path = _profile_file(profile, profiles_dirs)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("name", path.stem) != prof.name:
        raise ConfigError(f"{path.name} is not the profile {prof.name}", fix="pass its file")
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    entry = measured_calibration(
        plan, figures, engine_version=figures.vllm_version or prof.engine.version,
        source=f"measured from {log.name} on {today}",
    )  # fmt: skip
    merged = load_profile(str(path), extra_dirs=profiles_dirs)  # the file as it is, no --set
    data["calibration"] = calibration_document(data.get("calibration") or [], entry, merged)
    write_atomically(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def check_model_dir(path: Path) -> None:
    """Refuse a --model-dir that is no directory, saying what it is as doctor does.

    Raises:
        UsageError: missing, a file, a FIFO, a symlink loop or a broken symlink.
    """
    if (problem := model_path_problem(path_kind(path), str(path))) is not None:
        raise UsageError(
            f"--model-dir: {problem}",
            fix="point it at the checkpoint directory (the one holding config.json)",
        )
