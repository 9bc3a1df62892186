"""Every built-in profile's rendered artifacts pass the real tools' schemas and checks.

Kubernetes objects validate (strictly) against the schemas of the cluster version the
profile names, LeaderWorkerSets against the LWS CRD's own schema, compose files pass
`docker-compose config`, launch scripts pass shellcheck at every severity; and broken
fixtures fail each check, so the checks can fail. The helpers are `manifest_checks`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from manifest_checks import (
    BROKEN_DIR,
    LWS_API_VERSION,
    KubernetesVersionError,
    check_compose,
    check_kubernetes_object,
    check_shell,
    read_documents,
    schema_version,
    skip_without_lws_crd,
    strict_schema,
)

from servekit.errors import ConfigError
from servekit.profiles import Profile, load_profile
from servekit.profiles.loader import BUILTIN_DIR
from servekit.render import render
from servekit.render.lws import leader_script, worker_script
from servekit.render.shell import literal_values_directive

REPO = Path(__file__).resolve().parents[2]
# Loaded by path, so a user profile of the same name cannot shadow a built-in.
PROFILE_FILES = sorted(
    [*BUILTIN_DIR.glob("*.yaml"), *(REPO / "benchmarks" / "profiles").glob("*.yaml")]
)
PROFILES = {path.stem: load_profile(str(path)) for path in PROFILE_FILES}
SINGLE_NODE = sorted(name for name, profile in PROFILES.items() if profile.hardware.nodes == 1)
MULTI_NODE = sorted(name for name, profile in PROFILES.items() if profile.hardware.nodes > 1)

# The rendering each new profile field changes, checked by the same tools.
M3 = str(BUILTIN_DIR / "minimax-m3-mxfp8-8xa800.yaml")
BF16 = str(BUILTIN_DIR / "minimax-m3-bf16-2x8xa800.yaml")
CPU = str(REPO / "benchmarks" / "profiles" / "tiny-llama-cpu.yaml")
HOSTILE = "x'; rm -rf / #$(id)"
MULTI_LINE = "two\n  lines $HOME `id` \\"
SHELL_LIKE = "a$b `c` \\"
VARIANTS = {
    "m3-secrets-host-network": load_profile(
        M3, overrides=["secret_env=[HF_TOKEN,WANDB_API_KEY]", "deploy.network=host"]
    ),
    "m3-host-network-all-interfaces": load_profile(
        M3, overrides=["deploy.network=host", "deploy.bind_host=0.0.0.0", "deploy.port=9000"]
    ),
    "bf16-secrets-k8s-1.30": load_profile(
        BF16, overrides=["secret_env=[HF_TOKEN]", "deploy.kubernetes_version=1.30"]
    ),
    "cpu-host-network-secret": load_profile(
        CPU, overrides=["deploy.network=host", "secret_env=[HF_TOKEN]"]
    ),
    # Values that look like shell (expansions, quotes, a trailing backslash, a line break)
    # are quoted literally; the scripts must still pass shellcheck.
    "m3-hostile-values": load_profile(
        M3,
        overrides=[
            f"served_model_name={json.dumps(HOSTILE)}",
            f"env.EXTRA={SHELL_LIKE}",  # env values are taken as written
        ],
    ),
    "bf16-multi-line-name": load_profile(
        BF16, overrides=[f"served_model_name={json.dumps(MULTI_LINE)}"]
    ),
}
ALL = {**PROFILES, **VARIANTS}
# Broken fixtures only the CRD's own schema catches (a bad pod field the core schemas do).
NEEDS_CRD = {"lws-missing-worker-template.yaml", "lws-unknown-field.yaml"}
ALL_SINGLE = sorted(name for name, profile in ALL.items() if profile.hardware.nodes == 1)
ALL_MULTI = sorted(name for name, profile in ALL.items() if profile.hardware.nodes > 1)


def _secret_env(profile: Profile) -> dict[str, str]:
    """A stand-in value for each secret variable, as the launching shell would have."""
    return {name: f"not-a-real-{name.lower()}" for name in profile.secret_env}


def test_every_built_in_profile_is_checked() -> None:
    """The profile list covers the packaged built-ins and the benchmark profiles, both kinds."""
    assert {path.stem for path in BUILTIN_DIR.glob("*.yaml")} <= set(PROFILES)
    assert {"tiny-llama-cpu", "tiny-llama-cpu-spec"} <= set(PROFILES)
    assert SINGLE_NODE
    assert MULTI_NODE


@pytest.mark.parametrize("name", sorted(ALL))
def test_kubernetes_objects_validate_for_the_profiles_cluster_version(name: str) -> None:
    """Each rendered object (Deployment, Service, LeaderWorkerSet) passes the strict schemas
    of the Kubernetes version in deploy.kubernetes_version."""
    profile = ALL[name]
    documents = list(yaml.safe_load_all(render(profile, "k8s")))
    kinds = [doc["kind"] for doc in documents]
    expected = ["LeaderWorkerSet", "Service"] if profile.hardware.nodes > 1 else None
    assert kinds == (expected or ["Deployment", "Service"])
    problems = [
        problem
        for doc in documents
        for problem in check_kubernetes_object(doc, profile.deploy.kubernetes_version)
    ]
    assert problems == []
    if "LeaderWorkerSet" in kinds:
        skip_without_lws_crd()


@pytest.mark.parametrize("name", ALL_SINGLE)
def test_compose_file_passes_docker_compose_config(name: str) -> None:
    """The rendered compose file passes `docker-compose config -q` without a word on stderr."""
    profile = ALL[name]
    assert check_compose(render(profile, "compose"), _secret_env(profile)) == []


@pytest.mark.parametrize("name", MULTI_NODE)
def test_multi_node_profiles_have_no_compose_file(name: str) -> None:
    """A multi-node profile's compose target is refused (as its golden test expects)."""
    with pytest.raises(ConfigError, match="use --target k8s"):
        render(PROFILES[name], "compose")


@pytest.mark.parametrize("name", sorted(ALL))
def test_launch_script_passes_shellcheck(name: str) -> None:
    """The rendered launch script (plain or Ray) has no shellcheck finding of any severity."""
    assert check_shell(render(ALL[name], "script")) == []


@pytest.mark.parametrize("name", ALL_MULTI)
def test_leader_worker_set_container_scripts_pass_shellcheck(name: str) -> None:
    """The bash scripts the LeaderWorkerSet's leader and worker containers run pass shellcheck."""
    profile = ALL[name]
    for script in (leader_script(profile), worker_script(profile)):
        assert check_shell("#!/usr/bin/env bash\n" + script) == []


def test_hostile_values_reach_the_artifacts_verbatim() -> None:
    """The shell-looking variants really carry their values (YAML overrides kept them)."""
    assert VARIANTS["m3-hostile-values"].serve_args.served_model_name == HOSTILE
    assert VARIANTS["m3-hostile-values"].env["EXTRA"] == SHELL_LIKE
    assert VARIANTS["bf16-multi-line-name"].serve_args.served_model_name == MULTI_LINE


@pytest.mark.parametrize(
    ("words", "directive"),
    [
        (["--max-model-len", "2048", '{"a":1}'], []),
        (
            ["--served-model-name", "a$b"],
            ["# shellcheck disable=SC2016 # quoted profile values are literal"],
        ),
        (["x `id`"], ["# shellcheck disable=SC2016 # quoted profile values are literal"]),
        (["a \\"], ["# shellcheck disable=SC1003 # quoted profile values are literal"]),
        (["$x \\"], ["# shellcheck disable=SC1003,SC2016 # quoted profile values are literal"]),
    ],
)
def test_literal_values_directive_names_only_the_notes_the_values_draw(
    words: list[str], directive: list[str]
) -> None:
    """A command gets a shellcheck directive only for the notes its quoted values draw."""
    assert literal_values_directive(words) == directive


def test_a_plain_profile_script_has_no_shellcheck_directive() -> None:
    """The built-ins' scripts pass shellcheck with no directive at all."""
    for name, profile in PROFILES.items():
        assert "shellcheck" not in render(profile, "script"), name


def test_secret_values_never_reach_an_artifact(monkeypatch: pytest.MonkeyPatch) -> None:
    """With secret_env set and the values in the environment, no artifact holds a value,
    only the variables' names."""
    profile = VARIANTS["m3-secrets-host-network"]
    for name, value in _secret_env(profile).items():
        monkeypatch.setenv(name, value)
    for target in ("compose", "k8s", "script", "vllm", "docker"):
        text = render(profile, target)
        assert "not-a-real" not in text, target
    for target in ("compose", "k8s", "script"):
        assert "HF_TOKEN" in render(profile, target)


@pytest.mark.parametrize(
    ("kubernetes_version", "bundled"), [("1.37", "1.37.0"), ("1.30", "1.30.0"), ("1.25", "1.25.0")]
)
def test_kubernetes_version_maps_to_the_newest_bundled_patch(
    kubernetes_version: str, bundled: str
) -> None:
    """A Kubernetes minor maps to the newest schema release kubernetes-validate bundles."""
    assert schema_version(kubernetes_version) == bundled


@pytest.mark.parametrize("kubernetes_version", ["1.99", "1.24", "1.5"])
def test_an_unbundled_kubernetes_version_is_a_clear_error(kubernetes_version: str) -> None:
    """A version without bundled schemas is refused, naming it and the versions bundled,
    never validated against another release's schemas."""
    profile = load_profile(M3, overrides=[f"deploy.kubernetes_version={kubernetes_version}"])
    (deployment, _) = yaml.safe_load_all(render(profile, "k8s"))
    with pytest.raises(KubernetesVersionError) as raised:
        check_kubernetes_object(deployment, profile.deploy.kubernetes_version)
    message = str(raised.value)
    assert repr(kubernetes_version) in message
    assert "1.25" in message
    assert "1.37" in message


def test_the_check_uses_the_schemas_of_the_version_given() -> None:
    """A native sidecar (init container restartPolicy, Kubernetes 1.28) passes 1.37 and 1.28
    but fails 1.27."""
    (deployment,) = read_documents(BROKEN_DIR / "deployment-sidecar-init-container.yaml")
    assert check_kubernetes_object(deployment, "1.37") == []
    assert check_kubernetes_object(deployment, "1.28") == []
    (problem,) = check_kubernetes_object(deployment, "1.27")
    assert "'restartPolicy' was unexpected" in problem


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("deployment-wrong-type.yaml", "spec.replicas: 'one' is not of type 'integer'"),
        ("deployment-unknown-field.yaml", "('gpus' was unexpected)"),
        ("service-wrong-type.yaml", "spec.ports.0.port: '8000' is not of type 'integer'"),
        (
            "lws-missing-worker-template.yaml",
            "spec.leaderWorkerTemplate: 'workerTemplate' is a required property",
        ),
        ("lws-unknown-field.yaml", "('nodes' was unexpected)"),
        ("lws-bad-pod-field.yaml", "('cmd' was unexpected)"),
    ],
)
def test_broken_kubernetes_fixtures_are_rejected(fixture: str, expected: str) -> None:
    """A wrong type, an unknown field or a missing required field fails the schema check,
    with the field's path in the message."""
    if fixture in NEEDS_CRD:
        skip_without_lws_crd()
    (document,) = read_documents(BROKEN_DIR / fixture)
    problems = check_kubernetes_object(document, "1.37")
    assert problems
    assert any(expected in problem for problem in problems), problems


def test_a_leader_worker_set_of_another_api_version_is_rejected() -> None:
    """An LWS whose apiVersion the CRD does not serve is a problem, not a pass."""
    skip_without_lws_crd()
    (lws, _) = yaml.safe_load_all(render(PROFILES["minimax-m3-bf16-2x8xa800"], "k8s"))
    assert lws["apiVersion"] == LWS_API_VERSION
    lws["apiVersion"] = "leaderworkerset.x-k8s.io/v9"
    (problem,) = check_kubernetes_object(lws, "1.37")
    assert "the CRD serves v1" in problem


def test_a_kind_without_a_schema_is_rejected() -> None:
    """An object of a kind the schemas do not know fails instead of passing unchecked."""
    (deployment, _) = yaml.safe_load_all(render(PROFILES["minimax-m3-mxfp8-8xa800"], "k8s"))
    deployment["kind"] = "Deploymint"
    (problem,) = check_kubernetes_object(deployment, "1.37")
    assert "Couldn't find schema for kind Deploymint" in problem


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("compose-invalid-key.yaml", "Unsupported config option for services.broken: "),
        ("compose-wrong-type.yaml", "healthcheck.retries"),
    ],
)
def test_broken_compose_fixtures_are_rejected(fixture: str, expected: str) -> None:
    """An invalid key or a value of the wrong type fails `docker-compose config`."""
    problems = check_compose((BROKEN_DIR / fixture).read_text(encoding="utf-8"))
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("fixture", "code"),
    [("script-unquoted-variable.sh", "SC2086"), ("script-style-only.sh", "SC2004")],
)
def test_broken_scripts_are_rejected_by_shellcheck(fixture: str, code: str) -> None:
    """An unquoted variable (info) and a style-only finding both fail the shell check."""
    (problem,) = check_shell((BROKEN_DIR / fixture).read_text(encoding="utf-8"))
    assert f"[{code}]" in problem


@pytest.mark.parametrize(
    ("tool", "check"),
    [
        ("shellcheck", lambda: check_shell("#!/usr/bin/env bash\necho ok\n")),
        ("docker-compose", lambda: check_compose("services: {}\n")),
    ],
)
def test_a_missing_tool_fails_with_how_to_install_it(
    tool: str, check: Callable[[], list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without the tool on PATH the check fails the test (never skips), naming the bootstrap
    command and the Debian package."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception) as raised:
        check()
    message = str(raised.value)
    assert f"{tool} is not installed" in message
    assert "scripts/bootstrap --with-engine" in message
    assert f"apt-get install {tool}" in message


def test_strict_crd_schemas_close_objects_but_not_maps() -> None:
    """Undeclared fields are refused where a schema lists properties; maps
    (additionalProperties) and preserve-unknown-fields objects stay open."""
    schema = strict_schema(
        {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "raw": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "x-kubernetes-preserve-unknown-fields": True,
                },
                "items": {"type": "array", "items": {"properties": {"b": {}}}},
            },
        }
    )
    assert schema["additionalProperties"] is False
    assert schema["properties"]["spec"]["additionalProperties"] is False
    assert schema["properties"]["labels"]["additionalProperties"] == {"type": "string"}
    assert "additionalProperties" not in schema["properties"]["raw"]
    assert schema["properties"]["items"]["items"]["additionalProperties"] is False
