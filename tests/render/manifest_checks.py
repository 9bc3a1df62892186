"""The real tools' checks of rendered artifacts, defined once for the render tests.

Each check returns the problems it found (an empty list when the artifact passes), so a
test can assert both that servekit's output passes and that a broken fixture does not.

- Kubernetes objects: `kubernetes_validate.validate(..., strict=True)` against the
  OpenAPI schemas of the cluster version the profile names (`deploy.kubernetes_version`,
  mapped to the newest bundled patch release of that minor).
- LeaderWorkerSet objects (a CRD, outside the core schemas): the CRD's own
  openAPIV3Schema with jsonschema, made strict the way `kubectl apply` (server-side
  field validation, `Strict` by default) treats unknown fields; their pod templates and
  metadata also go through the core `PodTemplate` schema of the cluster version.
- Compose files: `docker-compose -f FILE config -q` (Debian's docker-compose 1.29.2;
  it needs no daemon); any output on stderr counts as a problem.
- Shell scripts: `shellcheck --severity=style` (every severity: error, warning, info,
  style).

A missing tool fails the test with the command that installs it; it never skips.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(__file__).parent / "data"
BROKEN_DIR = DATA_DIR / "broken"

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_CRD_NAME = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_CRD_SOURCE = (
    "github.com/kubernetes-sigs/lws, tag v0.10.0 (commit "
    "2161f38ff333f9e24d3c44adef7cd5d9787cac00), "
    "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml, Apache-2.0"
)
LWS_CRD_SHA256 = "c5dcad8ed943e495490241f00b9a1b45d51203b6d484020db3636d5bf553568e"
LWS_CRD_ENV = "SERVEKIT_LWS_CRD"
"""Names the CRD file when it is kept somewhere other than the places below."""

BOOTSTRAP = "bash scripts/bootstrap --with-engine"
_DEBIAN_PACKAGE = {"shellcheck": "shellcheck", "docker-compose": "docker-compose"}
_TOOL_TIMEOUT_S = 60
# libyaml reads the 1.3 MB CRD in a fraction of the pure-Python loader's time; both are safe.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class KubernetesVersionError(ValueError):
    """A profile names a Kubernetes version whose schemas kubernetes-validate lacks."""


def lws_crd_candidates() -> list[Path]:
    """Where the LeaderWorkerSet CRD file is looked for, in order.

    `$SERVEKIT_LWS_CRD`, then `tests/render/data/lws/`, then the steering repository's
    `shared/lws/` beside this checkout (as CI lays it out).
    """
    places = [DATA_DIR / "lws" / LWS_CRD_NAME, REPO.parent / "shared" / "lws" / LWS_CRD_NAME]
    named = os.environ.get(LWS_CRD_ENV)
    return [Path(named), *places] if named else places


def find_lws_crd() -> Path | None:
    """Return the LeaderWorkerSet CRD file, or None when it is in none of the places.

    Raises:
        AssertionError: the file found is not the cited release (its SHA-256 differs).
    """
    for path in lws_crd_candidates():
        if path.is_file():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert digest == LWS_CRD_SHA256, (
                f"{path} has SHA-256 {digest}, not the cited CRD ({LWS_CRD_SOURCE}, "
                f"{LWS_CRD_SHA256}); put that file there"
            )
            return path
    return None


def skip_without_lws_crd() -> None:
    """Skip the rest of a test that needs the LeaderWorkerSet CRD when it is not here."""
    if find_lws_crd() is None:
        places = ", ".join(str(path) for path in lws_crd_candidates())
        pytest.skip(
            f"the LeaderWorkerSet CRD ({LWS_CRD_SOURCE}) is not here, so its schema was "
            f"not checked (the core schemas were); looked in {places}"
        )


def schema_version(kubernetes_version: str) -> str:
    """Return the bundled schema release for a Kubernetes minor: `1.37` -> `1.37.0`.

    The newest bundled patch release of that minor is used; kubernetes-validate's own
    fallback to an older minor is not, so a profile never passes against schemas of a
    release it did not name.

    Raises:
        KubernetesVersionError: kubernetes-validate bundles no schemas for that minor.
    """
    bundled = _bundled_versions()
    matching = [v for v in bundled if _minor(v) == _minor(kubernetes_version)]
    if not matching:
        minors = ", ".join(dict.fromkeys(".".join(map(str, _minor(v))) for v in bundled))
        raise KubernetesVersionError(
            f"deploy.kubernetes_version {kubernetes_version!r} has no schemas in "
            f"kubernetes-validate {kubernetes_validate.version.__version__}, which bundles "
            f"{minors}; set deploy.kubernetes_version to one of those, or upgrade "
            "kubernetes-validate (pip install -U kubernetes-validate)"
        )
    return max(matching, key=_release)


def check_kubernetes_object(obj: Mapping[str, Any], kubernetes_version: str) -> list[str]:
    """Return what the real schemas reject in one Kubernetes object (none: it is valid).

    A LeaderWorkerSet is checked against its CRD (see `check_leader_worker_set`); every
    other kind against the core schemas of `kubernetes_version`, strictly (unknown
    fields are errors). A kind without a schema is a problem, not a pass.

    Raises:
        KubernetesVersionError: no schemas for that version.
    """
    if obj.get("kind") == "LeaderWorkerSet":
        return check_leader_worker_set(obj, kubernetes_version)
    return _core_problems(obj, schema_version(kubernetes_version))


def check_leader_worker_set(obj: Mapping[str, Any], kubernetes_version: str) -> list[str]:
    """Return what the LeaderWorkerSet CRD's schema and the core pod schemas reject.

    The pod templates (with the object's metadata) are checked as core `v1`
    PodTemplates of `kubernetes_version` in any case; the CRD's own schema when the CRD
    file is here (`find_lws_crd`; a test calls `skip_without_lws_crd` to say when not).

    Raises:
        KubernetesVersionError: no schemas for that version.
    """
    version = schema_version(kubernetes_version)
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or not api_version.startswith("leaderworkerset.x-k8s.io/"):
        return [f"apiVersion {api_version!r} is not leaderworkerset.x-k8s.io/<version>"]
    problems: list[str] = []
    crd = find_lws_crd()
    if crd is not None:
        validators = _lws_validators(str(crd))
        served = api_version.rsplit("/", 1)[-1]
        if served not in validators:
            return [f"apiVersion {api_version!r}: the CRD serves {', '.join(sorted(validators))}"]
        problems += [
            f"{api_version} {_path(error.absolute_path)}: {error.message}"
            for error in sorted(validators[served].iter_errors(obj), key=lambda e: list(e.path))
        ]
    # The CRD types metadata and the pod templates' metadata only as "object"; the API
    # server checks them as ObjectMeta, and the pods as the cluster's own PodSpec.
    spec = obj.get("spec")
    lwt = spec.get("leaderWorkerTemplate") if isinstance(spec, dict) else None
    for role in ("leaderTemplate", "workerTemplate"):
        template = lwt.get(role) if isinstance(lwt, dict) else None
        if template is None:
            continue
        wrapper = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": obj.get("metadata"),
            "template": template,
        }
        problems += [f"{role} as a v1 PodTemplate: {p}" for p in _core_problems(wrapper, version)]
    return problems


def check_compose(text: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Return what `docker-compose config -q` says about a compose file (none: it passes).

    It runs in a fresh temporary directory with only PATH, HOME and `env` in its
    environment; anything it prints counts.
    """
    returncode, output = _docker_compose_config(text, env, quiet=True)
    problems = [line for line in output.splitlines() if line.strip()]
    if returncode != 0 and not problems:
        problems = [f"docker-compose config exited {returncode}"]
    return problems


def compose_config(text: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return the configuration `docker-compose config` resolves from a compose file.

    Raises:
        AssertionError: docker-compose rejected the file.
    """
    returncode, output = _docker_compose_config(text, env, quiet=False)
    assert returncode == 0, output
    resolved = yaml.safe_load(output)
    assert isinstance(resolved, dict), output
    return resolved


def _docker_compose_config(
    text: str, env: Mapping[str, str] | None, *, quiet: bool
) -> tuple[int, str]:
    program = require_tool("docker-compose")
    with tempfile.TemporaryDirectory(prefix="servekit-compose-") as folder:
        (Path(folder) / "compose.yaml").write_text(text, encoding="utf-8")
        result = subprocess.run(
            [program, "-f", "compose.yaml", "config", *(["-q"] if quiet else [])],
            cwd=folder,
            env={"PATH": os.environ.get("PATH", ""), "HOME": folder, **(env or {})},
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT_S,
            check=False,
        )
    # Quiet, every line is a finding; resolving, stdout is the configuration itself.
    output = result.stdout + result.stderr if quiet or result.returncode else result.stdout
    return result.returncode, output


def check_shell(text: str) -> list[str]:
    """Return shellcheck's findings of every severity for a bash script (none: it passes)."""
    program = require_tool("shellcheck")
    result = subprocess.run(
        [program, "--shell=bash", "--severity=style", "--format=gcc", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=_TOOL_TIMEOUT_S,
        check=False,
    )
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    if result.returncode != 0 and not problems:
        problems = [f"shellcheck exited {result.returncode}"]
    return problems


def require_tool(name: str) -> str:
    """Return the path of a program the checks run, failing the test when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed, and the render tests check every profile's output "
            f"with it: run `{BOOTSTRAP}` (it installs it), or "
            f"`apt-get install {_DEBIAN_PACKAGE.get(name, name)}`",
            pytrace=False,
        )
    return path


def read_documents(path: Path) -> list[dict[str, Any]]:
    """Return the YAML documents of a fixture or rendered manifest file."""
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _core_problems(obj: Mapping[str, Any], version: str) -> list[str]:
    try:
        kubernetes_validate.validate(dict(obj), version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{obj.get('kind')} {_path(error.path)}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [str(error.message)]
    return []


@functools.cache
def _lws_validators(crd_file: str) -> dict[str, jsonschema.protocols.Validator]:
    """The CRD's schema for each version it serves, made strict; built once per file."""
    crd = yaml.load(Path(crd_file).read_text(encoding="utf-8"), Loader=_LOADER)  # noqa: S506
    validators: dict[str, jsonschema.protocols.Validator] = {}
    for entry in crd["spec"]["versions"]:
        if entry.get("served"):
            schema = strict_schema(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))
            validator_class = jsonschema.validators.validator_for(schema)
            validators[entry["name"]] = validator_class(schema)
    return validators


def strict_schema(schema: Any) -> Any:
    """Forbid fields a schema does not declare, as strict field validation does.

    Objects that declare `additionalProperties` (maps) or
    `x-kubernetes-preserve-unknown-fields` keep accepting any field.
    """
    if not isinstance(schema, dict):
        return schema
    for sub in schema.get("properties", {}).values():
        strict_schema(sub)
    for key in ("items", "additionalProperties", "not"):
        strict_schema(schema.get(key))
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key, []):
            strict_schema(sub)
    open_ended = "additionalProperties" in schema or schema.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if "properties" in schema and not open_ended:
        schema["additionalProperties"] = False
    return schema


@functools.cache
def _bundled_versions() -> tuple[str, ...]:
    return tuple(sorted(set(kv_utils.all_versions()), key=_release))


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _minor(version: str) -> tuple[int, ...]:
    return _release(version.removeprefix("v"))[:2]


def _path(parts: Any) -> str:
    return ".".join(str(part) for part in parts) or "(top level)"
