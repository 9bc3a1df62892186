"""How k8s, compose and script render `secret_env`, `deploy.network: host` and a CPU host.

Secrets are named, never valued: Kubernetes reads them from a Secret the user creates,
compose passes them through from its environment, the launch script requires them set.
Host networking makes the engine itself listen on bind_host:port. A CPU host reserves
no GPUs anywhere.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from manifest_checks import compose_config

from servekit.profiles import Profile, load_profile
from servekit.profiles.loader import BUILTIN_DIR
from servekit.render import render, vllm_serve_args

REPO = Path(__file__).resolve().parents[2]
M3 = str(BUILTIN_DIR / "minimax-m3-mxfp8-8xa800.yaml")
BF16 = str(BUILTIN_DIR / "minimax-m3-bf16-2x8xa800.yaml")
LLAMA = str(BUILTIN_DIR / "llama-3.1-70b-4xh100.yaml")
CPU = str(REPO / "benchmarks" / "profiles" / "tiny-llama-cpu.yaml")
PLAIN_ENV = {"name": "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "value": "0"}
SECRET_VALUE = "hf_not-a-real-token-4f1c"  # noqa: S105 - a stand-in the tests prove never leaks


def _secret_ref(secret: str, key: str) -> dict[str, Any]:
    """The env entry that reads `key` of the Secret `secret`."""
    return {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _k8s(profile: Profile) -> list[dict[str, Any]]:
    """The rendered Kubernetes documents."""
    return list(yaml.safe_load_all(render(profile, "k8s")))


def _containers(profile: Profile) -> list[dict[str, Any]]:
    """Every container of the rendered Deployment or LeaderWorkerSet."""
    workload = _k8s(profile)[0]
    if workload["kind"] == "Deployment":
        return list(workload["spec"]["template"]["spec"]["containers"])
    lwt = workload["spec"]["leaderWorkerTemplate"]
    return [
        c for role in ("leaderTemplate", "workerTemplate") for c in lwt[role]["spec"]["containers"]
    ]


def _service(profile: Profile) -> dict[str, Any]:
    """The one service of the rendered compose file."""
    (service,) = yaml.safe_load(render(profile, "compose"))["services"].values()
    assert isinstance(service, dict)
    return service


def test_k8s_secret_env_reads_each_variable_from_the_deployments_secret() -> None:
    """Each secret_env variable is a secretKeyRef to `<name>-secrets`, after the plain env."""
    profile = load_profile(M3, overrides=["secret_env=[HF_TOKEN,WANDB_API_KEY]"])
    (container,) = _containers(profile)
    holder = "minimax-m3-mxfp8-8xa800-secrets"
    assert container["env"] == [
        PLAIN_ENV,
        _secret_ref(holder, "HF_TOKEN"),
        _secret_ref(holder, "WANDB_API_KEY"),
    ]


def test_k8s_renders_no_secret_object_and_says_how_to_create_it() -> None:
    """No Secret is rendered (servekit never knows the value); the header gives the command."""
    profile = load_profile(
        M3, overrides=["secret_env=[HF_TOKEN,WANDB_API_KEY]", "deploy.namespace=llm"]
    )
    assert [doc["kind"] for doc in _k8s(profile)] == ["Deployment", "Service"]
    header = render(profile, "k8s").split("\n---\n")[0].splitlines()
    assert header[-2:] == [
        "# Secrets: HF_TOKEN, WANDB_API_KEY come from the Secret "
        "minimax-m3-mxfp8-8xa800-secrets, which servekit never writes; create it first, "
        "with the values from your shell:",
        '# printf \'%s=%s\\n\' HF_TOKEN "$HF_TOKEN" WANDB_API_KEY "$WANDB_API_KEY" | '
        "kubectl create secret generic minimax-m3-mxfp8-8xa800-secrets --namespace llm "
        "--from-env-file=/dev/stdin",
    ]


def test_leader_worker_set_pods_read_the_secret_too() -> None:
    """Leader and worker containers of a multi-node profile both get the secretKeyRef."""
    profile = load_profile(BF16, overrides=["secret_env=[HF_TOKEN]"])
    containers = _containers(profile)
    assert len(containers) == 2
    for container in containers:
        assert container["env"] == [
            PLAIN_ENV,
            _secret_ref("minimax-m3-bf16-2x8xa800-secrets", "HF_TOKEN"),
        ]
    text = render(profile, "k8s")
    assert (
        "# printf '%s=%s\\n' HF_TOKEN \"$HF_TOKEN\" | kubectl create secret generic "
        "minimax-m3-bf16-2x8xa800-secrets --namespace default --from-env-file=/dev/stdin\n"
    ) in text
    assert [doc["kind"] for doc in _k8s(profile)] == ["LeaderWorkerSet", "Service"]


def test_without_secret_env_the_k8s_header_has_no_secret_lines() -> None:
    """A profile without secret_env renders exactly as before: no Secret note, plain env."""
    profile = load_profile(M3)
    assert "Secret" not in render(profile, "k8s")
    (container,) = _containers(profile)
    assert container["env"] == [PLAIN_ENV]


def test_compose_passes_secrets_through_by_name() -> None:
    """compose lists a secret by name only (`- HF_TOKEN`), after the plain `NAME=value` entries."""
    profile = load_profile(M3, overrides=["secret_env=[HF_TOKEN]"])
    assert _service(profile)["environment"] == [
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0",
        "HF_TOKEN",
    ]
    assert "- HF_TOKEN\n" in render(profile, "compose")


def test_compose_takes_the_secret_from_the_environment_it_runs_in() -> None:
    """docker-compose resolves the named secret from its own environment, not from the file."""
    profile = load_profile(CPU, overrides=["secret_env=[HF_TOKEN]"])
    text = render(profile, "compose")
    assert SECRET_VALUE not in text
    (service,) = compose_config(text, {"HF_TOKEN": SECRET_VALUE})["services"].values()
    assert service["environment"] == {"HF_TOKEN": SECRET_VALUE}


def test_compose_host_network_publishes_nothing_and_the_engine_binds_the_host() -> None:
    """network: host gives `network_mode: host`, no ports, and --host/--port for the engine."""
    profile = load_profile(M3, overrides=["deploy.network=host"])
    service = _service(profile)
    assert service["network_mode"] == "host"
    assert "ports" not in service
    assert service["command"] == [
        "/models/MiniMax-M3-MXFP8",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        *vllm_serve_args(profile),
    ]
    assert service["healthcheck"]["test"] == [
        "CMD",
        "curl",
        "-fsS",
        "http://127.0.0.1:8000/health",
    ]


@pytest.mark.parametrize(
    ("bind_host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:9000/health"),  # noqa: S104 - rendered, never bound
        ("::", "http://[::1]:9000/health"),
        ("::1", "http://[::1]:9000/health"),
        ("10.0.0.5", "http://10.0.0.5:9000/health"),
    ],
)
def test_compose_host_network_health_check_reaches_the_bound_address(
    bind_host: str, url: str
) -> None:
    """The health check polls the engine where it listens; an all-interfaces bind via loopback."""
    overrides = ["deploy.network=host", f"deploy.bind_host={bind_host}", "deploy.port=9000"]
    service = _service(load_profile(M3, overrides=overrides))
    assert service["healthcheck"]["test"][-1] == url
    assert service["command"][1:5] == ["--host", bind_host, "--port", "9000"]


def test_compose_bridge_network_is_unchanged() -> None:
    """The default bridge network publishes the port and passes no --host to the engine."""
    service = _service(load_profile(M3))
    assert "network_mode" not in service
    assert service["ports"] == ["127.0.0.1:8000:8000"]
    assert "--host" not in service["command"]
    assert service["healthcheck"]["test"][-1] == "http://localhost:8000/health"


def test_k8s_ignores_the_container_network_setting() -> None:
    """deploy.network is a docker/compose setting: the manifests are the same either way."""
    assert render(load_profile(M3, overrides=["deploy.network=host"]), "k8s") == render(
        load_profile(M3), "k8s"
    )


def test_cpu_host_reserves_no_gpus() -> None:
    """On the catalog's CPU device compose has no GPU reservation and k8s no nvidia.com/gpu."""
    profile = load_profile(CPU)
    assert "deploy" not in _service(profile)
    (container,) = _containers(profile)
    assert "resources" not in container
    for target in ("compose", "k8s"):
        assert "nvidia" not in render(profile, target)


def test_gpu_hosts_still_reserve_their_gpus() -> None:
    """A GPU profile keeps its nvidia.com/gpu limit and compose device reservation."""
    profile = load_profile(LLAMA)
    (container,) = _containers(profile)
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 4}}
    (device,) = _service(profile)["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": 4, "capabilities": ["gpu"]}


def test_script_requires_each_secret_and_exports_it() -> None:
    """The launch script stops unless each secret is set, then exports them by name."""
    text = render(load_profile(M3, overrides=["secret_env=[HF_TOKEN,WANDB_API_KEY]"]), "script")
    expected = (
        "export VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0\n\n"
        ': "${HF_TOKEN:?is not set; export HF_TOKEN (secret_env) before running this script}"\n'
        ': "${WANDB_API_KEY:?is not set; export WANDB_API_KEY (secret_env) before running '
        'this script}"\n'
        "export HF_TOKEN WANDB_API_KEY\n\n"
        "exec vllm serve /models/MiniMax-M3-MXFP8 \\\n"
    )
    assert expected in text


def test_ray_script_requires_the_secret_on_every_host() -> None:
    """The multi-node script checks the secret before its role is read, so head and workers
    both need it."""
    text = render(load_profile(BF16, overrides=["secret_env=[HF_TOKEN]"]), "script")
    check = text.index(': "${HF_TOKEN:?')
    assert check < text.index("usage() {")
    assert "export HF_TOKEN\n" in text


def _run_script(tmp_path: Path, text: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a launch script with a fake `vllm` that records its environment's HF_TOKEN."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text('#!/bin/sh\nprintf %s "${HF_TOKEN-unset}" > "$SEEN"\n', encoding="utf-8")
    fake.chmod(0o755)
    script = tmp_path / "launch.sh"
    script.write_text(text, encoding="utf-8")
    run_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SEEN": str(tmp_path / "seen"), **env}
    return subprocess.run(
        ["bash", str(script)], env=run_env, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.integration
def test_script_without_the_secret_stops_naming_it(tmp_path: Path) -> None:
    """Unset, the script exits 1 before the engine starts, and bash's message names the
    variable and the fix."""
    text = render(load_profile(CPU, overrides=["secret_env=[HF_TOKEN]"]), "script")
    result = _run_script(tmp_path, text, {})
    assert result.returncode == 1
    assert "HF_TOKEN: is not set; export HF_TOKEN (secret_env)" in result.stderr
    assert not (tmp_path / "seen").exists()


@pytest.mark.integration
def test_script_passes_the_secret_to_the_engine_without_printing_it(tmp_path: Path) -> None:
    """Set, the engine sees the value in its environment and the script prints nothing of it."""
    text = render(load_profile(CPU, overrides=["secret_env=[HF_TOKEN]"]), "script")
    result = _run_script(tmp_path, text, {"HF_TOKEN": SECRET_VALUE})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "seen").read_text(encoding="utf-8") == SECRET_VALUE
    assert SECRET_VALUE not in result.stdout + result.stderr
    assert SECRET_VALUE not in text


# Whole artifacts of the new fields, reviewed once (golden/fields/; SERVEKIT_UPDATE_GOLDEN=1
# rewrites them). The built-ins' own golden files do not change with these fields.
FIELD_GOLDEN_DIR = Path(__file__).parent / "golden" / "fields"
FIELD_VARIANTS = {
    "m3-secret-env-host-network": (M3, ["secret_env=[HF_TOKEN]", "deploy.network=host"]),
    "bf16-secret-env": (BF16, ["secret_env=[HF_TOKEN]"]),
    "tiny-llama-cpu": (CPU, []),
}
FIELD_GOLDENS = [
    (variant, target)
    for variant, (path, _) in FIELD_VARIANTS.items()
    for target in ("compose", "k8s", "script")
    if not (path == BF16 and target == "compose")
]


@pytest.mark.parametrize(("variant", "target"), FIELD_GOLDENS)
def test_new_fields_render_as_their_golden_files(
    variant: str, target: str, golden: Callable[[str, Path], None]
) -> None:
    """secret_env, host networking and a CPU host render byte-for-byte as reviewed."""
    path, overrides = FIELD_VARIANTS[variant]
    text = render(load_profile(path, overrides=overrides), target)
    golden(text, FIELD_GOLDEN_DIR / f"{variant}.{target}.txt")
