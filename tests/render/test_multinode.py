"""Multi-node rendering: LeaderWorkerSet manifests and the Ray launch script.

The shell tests run the rendered text through bash with fake `ray`, `vllm`, `rm`
and `id` programs first on PATH (each records its argv) and a fake `ray` Python
module, so the exact arguments the engine would get are checked without a cluster.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from servekit.errors import ConfigError
from servekit.profiles import Profile, load_profile
from servekit.render import render, vllm_serve_args
from servekit.render.argv import host_flags

BF16 = "minimax-m3-bf16-2x8xa800"
HOSTILE_NAME = "x'; rm -rf / #$(id)"
# A value spanning lines, with an indented second line, `$VAR` and backquotes.
MULTILINE_NAME = "two\n  lines $HOME `id` \\"

# Records its argv NUL-separated in $ARGV_DIR/<program>.<call number>. A fake `ray`
# fails its first call while $ARGV_DIR/ray.fail exists (a head that is not up yet); a
# fake `sleep` sleeps 0.2 s whatever it is asked, so timeouts of 1 s take about 1 s.
FAKE_PROGRAM = """#!/bin/sh
name=$(basename "$0")
i=0
while [ -e "$ARGV_DIR/$name.$i" ]; do i=$((i + 1)); done
: > "$ARGV_DIR/$name.$i"
for arg in "$@"; do printf '%s\\0' "$arg" >> "$ARGV_DIR/$name.$i"; done
if [ "$name" = ray ] && [ -e "$ARGV_DIR/ray.fail" ]; then
  REAL_RM "$ARGV_DIR/ray.fail"
  exit 1
fi
if [ "$name" = sleep ]; then
  exec REAL_SLEEP 0.2
fi
"""

# Stands in for the `ray` package: the cluster holds $FAKE_GPUS GPUs.
FAKE_RAY_MODULE = """import os
def init(**kwargs):
    print("connected to a fake cluster")
def cluster_resources():
    return {"CPU": 64.0, "GPU": float(os.environ["FAKE_GPUS"])}
"""

# Kubernetes expansion of container args and env values: `$$` is `$`, `$(NAME)` is the
# variable's value when it is defined and stays as written otherwise.
_K8S_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _profile(*overrides: str) -> Profile:
    return load_profile(BF16, overrides=list(overrides))


def _hostile_profile(name: str = HOSTILE_NAME) -> Profile:
    """Return the BF16 profile serving under a hostile name, set past the YAML parser."""
    profile = _profile()
    serve_args = profile.serve_args.model_copy(update={"served_model_name": name})
    return profile.model_copy(update={"serve_args": serve_args})


def _docs(profile: Profile) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the rendered LeaderWorkerSet and Service."""
    lws, service = yaml.safe_load_all(render(profile, "k8s"))
    assert (lws["kind"], service["kind"]) == ("LeaderWorkerSet", "Service")
    return lws, service


def _pod(lws: dict[str, Any], role: str) -> dict[str, Any]:
    """Return the leader's or the workers' pod template."""
    template = lws["spec"]["leaderWorkerTemplate"][f"{role}Template"]
    assert isinstance(template, dict)
    return template


def _container(lws: dict[str, Any], role: str) -> dict[str, Any]:
    (container,) = _pod(lws, role)["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def _k8s_expand(text: str, env: dict[str, str]) -> str:
    """Return text as Kubernetes hands it to the container after `$(VAR)` expansion."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _K8S_REFERENCE.sub(replace, text)


def _container_script(container: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """Return the script a `bash -c` container runs and its env, as Kubernetes passes them."""
    assert container["command"] == ["bash", "-c"]
    (script,) = container["args"]
    env = {item["name"]: _k8s_expand(item["value"], {}) for item in container.get("env", [])}
    return _k8s_expand(script, env), env


class FakeHost:
    """A temporary PATH of recording fakes, and a way to run bash text against it."""

    def __init__(self, tmp_path: Path, *, gpus: int) -> None:
        self.argv_dir = tmp_path / "argv"
        self.argv_dir.mkdir()
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        real_rm, real_sleep = shutil.which("rm"), shutil.which("sleep")
        assert real_rm is not None
        assert real_sleep is not None
        text = FAKE_PROGRAM.replace("REAL_RM", real_rm).replace("REAL_SLEEP", real_sleep)
        for program in ["ray", "vllm", "rm", "id", "sleep"]:
            fake = bin_dir / program
            fake.write_text(text, encoding="utf-8")
            fake.chmod(0o755)
        module_dir = tmp_path / "pymodules"
        module_dir.mkdir()
        (module_dir / "ray.py").write_text(FAKE_RAY_MODULE, encoding="utf-8")
        self.env = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(module_dir),
            "ARGV_DIR": str(self.argv_dir),
            "FAKE_GPUS": str(gpus),
            "HOME": str(tmp_path),
        }
        self.cwd = tmp_path

    def run(
        self, args: list[str], *, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with the fakes first on PATH; never raises on failure."""
        return subprocess.run(
            args,
            env={**self.env, **(env or {})},
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def calls(self, program: str) -> list[list[str]]:
        """Return the argv of every call of a fake program, in call order."""
        found = []
        index = 0
        while (path := self.argv_dir / f"{program}.{index}").exists():
            found.append(path.read_bytes().decode().split("\0")[:-1])
            index += 1
        return found

    def assert_no_injection(self) -> None:
        """Nothing a broken quote would have run (`rm`, `id`) was called."""
        assert self.calls("rm") == []
        assert self.calls("id") == []


def test_hostile_name_loads_verbatim_through_an_override() -> None:
    """A YAML-quoted --set keeps the whole hostile name, `#` and `$(id)` included."""
    profile = _profile(f'served_model_name="{HOSTILE_NAME}"')
    assert profile.serve_args.served_model_name == HOSTILE_NAME


def test_leader_worker_set_structure() -> None:
    """One group of `nodes` pods, recreated together, workers started with the leader."""
    lws, _ = _docs(_profile())
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["metadata"]["name"] == BF16
    spec = lws["spec"]
    assert spec["replicas"] == 1
    assert spec["startupPolicy"] == "LeaderCreated"
    template = spec["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert set(template) == {"size", "restartPolicy", "leaderTemplate", "workerTemplate"}


@pytest.mark.parametrize("role", ["leader", "worker"])
def test_each_pod_holds_one_nodes_gpus_shm_models_and_env(role: str) -> None:
    """Every pod reserves gpus_per_node GPUs and mounts /dev/shm, the models and the env."""
    lws, _ = _docs(_profile())
    container = _container(lws, role)
    assert container["image"] == "vllm/vllm-openai:v0.26.0"
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    assert container["env"] == [{"name": "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "value": "0"}]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    volumes = {v["name"]: v for v in _pod(lws, role)["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    assert volumes["models"]["hostPath"] == {"path": "/data/models", "type": "Directory"}


def test_leader_is_probed_on_health_and_workers_are_not() -> None:
    """The leader serves HTTP with the single-node probes; Ray workers have no port or probe."""
    lws, _ = _docs(_profile("deploy.startup_timeout_s=1805"))
    leader, worker = _container(lws, "leader"), _container(lws, "worker")
    assert leader["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    for name in ["startupProbe", "readinessProbe", "livenessProbe"]:
        assert leader[name]["httpGet"] == {"path": "/health", "port": "http"}
    assert leader["startupProbe"]["failureThreshold"] * 10 >= 1805
    assert not {"ports", "startupProbe", "readinessProbe", "livenessProbe"} & set(worker)


def test_service_selects_the_leader_pod_only() -> None:
    """The ClusterIP Service's selector matches the leader template, not the workers'."""
    lws, service = _docs(_profile("deploy.port=9000"))
    selector = service["spec"]["selector"].items()
    assert service["spec"]["type"] == "ClusterIP"
    assert selector <= _pod(lws, "leader")["metadata"]["labels"].items()
    assert not selector <= _pod(lws, "worker")["metadata"]["labels"].items()
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 9000, "targetPort": "http", "protocol": "TCP"}
    ]


def test_multi_node_flags_add_pipeline_parallel_and_the_ray_backend() -> None:
    """The flags carry TP per node, PP across nodes and the Ray executor, once each."""
    args = vllm_serve_args(_profile())
    for flag, value in [
        ("--tensor-parallel-size", "8"),
        ("--pipeline-parallel-size", "2"),
        ("--distributed-executor-backend", "ray"),
    ]:
        assert args.count(flag) == 1
        assert args[args.index(flag) + 1] == value
    assert "--speculative-config" not in args


def test_k8s_dollar_signs_are_escaped_in_container_scripts() -> None:
    """Every `$` in a container script is doubled, so Kubernetes expands nothing in it."""
    lws, _ = _docs(_hostile_profile())
    for role in ["leader", "worker"]:
        (script,) = _container(lws, role)["args"]
        assert "$" not in script.replace("$$", "")
    leader_script = _container(lws, "leader")["args"][0]
    assert "#$$(id)" in leader_script
    assert '"$$LWS_LEADER_ADDRESS"' in _container(lws, "worker")["args"][0]


@pytest.mark.integration
def test_every_shell_text_passes_bash_syntax_check(tmp_path: Path) -> None:
    """The Ray script and both container scripts (after Kubernetes expansion) pass `bash -n`."""
    for profile in [_profile(), _hostile_profile(), _hostile_profile(MULTILINE_NAME)]:
        lws, _ = _docs(profile)
        texts = [render(profile, "script")]
        texts += [_container_script(_container(lws, role))[0] for role in ["leader", "worker"]]
        for index, text in enumerate(texts):
            path = tmp_path / f"check{index}.sh"
            path.write_text(text, encoding="utf-8")
            subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)


@pytest.mark.integration
@pytest.mark.parametrize("name", [HOSTILE_NAME, MULTILINE_NAME])
def test_leader_starts_the_head_waits_then_runs_vllm_with_exact_argv(
    tmp_path: Path, name: str
) -> None:
    """The leader runs `ray start --head`, then vllm gets exactly the profile's flags."""
    profile = _hostile_profile(name)
    lws, _ = _docs(profile)
    script, env = _container_script(_container(lws, "leader"))
    host = FakeHost(tmp_path, gpus=16)
    done = host.run(["bash", "-c", script], env={**env, "LWS_GROUP_SIZE": "2"})
    assert done.returncode == 0, done.stderr
    assert host.calls("ray") == [["start", "--head", "--port=6379"]]
    (argv,) = host.calls("vllm")
    assert argv == ["serve", "/models/MiniMax-M3", *vllm_serve_args(profile)]
    assert argv[argv.index("--served-model-name") + 1] == name
    assert "holds 16 of 16 GPUs" in done.stderr
    host.assert_no_injection()


@pytest.mark.integration
def test_leader_waits_for_group_size_times_gpus_per_node(tmp_path: Path) -> None:
    """With $LWS_GROUP_SIZE 3 the leader waits for 24 GPUs and gives up after the timeout."""
    lws, _ = _docs(_profile("deploy.startup_timeout_s=1"))
    script, env = _container_script(_container(lws, "leader"))
    host = FakeHost(tmp_path, gpus=16)
    done = host.run(["bash", "-c", script], env={**env, "LWS_GROUP_SIZE": "3"})
    assert done.returncode == 1
    assert "holds 16 of 24 GPUs after 1 s" in done.stderr
    assert host.calls("vllm") == []


@pytest.mark.integration
def test_worker_joins_the_leader_address_and_blocks(tmp_path: Path) -> None:
    """A worker pod runs `ray start --address=$LWS_LEADER_ADDRESS:6379 --block`."""
    lws, _ = _docs(_hostile_profile())
    script, env = _container_script(_container(lws, "worker"))
    host = FakeHost(tmp_path, gpus=16)
    leader = {"LWS_LEADER_ADDRESS": "vllm-0.vllm.default", "LWS_GROUP_SIZE": "2"}
    done = host.run(["bash", "-c", script], env={**env, **leader})
    assert done.returncode == 0, done.stderr
    assert host.calls("ray") == [["start", "--address=vllm-0.vllm.default:6379", "--block"]]
    assert host.calls("vllm") == []
    host.assert_no_injection()


@pytest.mark.integration
@pytest.mark.parametrize("name", [HOSTILE_NAME, MULTILINE_NAME])
def test_script_head_runs_vllm_with_host_flags_and_exact_argv(tmp_path: Path, name: str) -> None:
    """`script head` exports the env, starts the head, waits, then execs vllm serve."""
    profile = _hostile_profile(name)
    host = FakeHost(tmp_path, gpus=16)
    path = tmp_path / "launch.sh"
    path.write_text(render(profile, "script"), encoding="utf-8")
    done = host.run(["bash", str(path), "head"])
    assert done.returncode == 0, done.stderr
    assert host.calls("ray") == [["start", "--head", "--port=6379"]]
    (argv,) = host.calls("vllm")
    hosts = [word for group in host_flags(profile) for word in group]
    assert argv == ["serve", "/models/MiniMax-M3", *hosts, *vllm_serve_args(profile)]
    assert argv.count(name) == 1
    host.assert_no_injection()


@pytest.mark.integration
def test_script_head_fails_loudly_when_workers_do_not_join(tmp_path: Path) -> None:
    """With 8 of 16 GPUs after the startup timeout, `script head` exits 1 and says so."""
    host = FakeHost(tmp_path, gpus=8)
    path = tmp_path / "launch.sh"
    path.write_text(render(_profile("deploy.startup_timeout_s=1"), "script"), encoding="utf-8")
    done = host.run(["bash", str(path), "head"])
    assert done.returncode == 1
    assert "holds 8 of 16 GPUs after 1 s" in done.stderr
    assert host.calls("vllm") == []


@pytest.mark.integration
def test_script_worker_retries_until_the_head_is_up(tmp_path: Path) -> None:
    """`script worker ADDRESS` retries `ray start` while the head is down, then blocks."""
    host = FakeHost(tmp_path, gpus=16)
    (host.argv_dir / "ray.fail").touch()
    path = tmp_path / "launch.sh"
    path.write_text(render(_profile(), "script"), encoding="utf-8")
    done = host.run(["bash", str(path), "worker", "10.0.0.7"])
    assert done.returncode == 0, done.stderr
    join = ["start", "--address=10.0.0.7:6379", "--block"]
    assert host.calls("ray") == [join, join]
    assert host.calls("sleep") == [["5"]]
    assert "not up yet" in done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("args", [[], ["head", "extra"], ["worker"], ["worker", ""], ["boss"]])
def test_script_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    """Missing or unknown roles print the usage and exit 2 before starting anything."""
    host = FakeHost(tmp_path, gpus=16)
    path = tmp_path / "launch.sh"
    path.write_text(render(_profile(), "script"), encoding="utf-8")
    done = host.run(["bash", str(path), *args])
    assert done.returncode == 2
    assert "usage:" in done.stderr
    assert host.calls("ray") == []


@pytest.mark.parametrize("target", ["vllm", "docker", "compose"])
def test_single_node_targets_refuse_with_the_fix(target: str) -> None:
    """vllm, docker and compose name the node count and the multi-node targets."""
    with pytest.raises(ConfigError) as raised:
        render(_profile(), target)
    message = str(raised.value)
    assert "spans 2 nodes" in message
    assert f"--target {target}" in message
    assert "use --target k8s (LeaderWorkerSet) or --target script (Ray)" in message


@pytest.mark.parametrize("target", ["k8s", "script"])
def test_tensor_parallel_across_nodes_is_refused(target: str) -> None:
    """A layout other than TP = gpus_per_node and PP = nodes is a ConfigError with the fix."""
    profile = _profile("tensor_parallel_size=16", "pipeline_parallel_size=1")
    with pytest.raises(ConfigError, match="set tensor_parallel_size 8, pipeline_parallel_size 2"):
        render(profile, target)


def test_extra_args_with_another_backend_is_refused() -> None:
    """extra_args setting a backend other than ray is refused for a multi-node profile."""
    profile = _profile("extra_args.distributed-executor-backend=mp")
    with pytest.raises(ConfigError, match="distributed-executor-backend 'mp'"):
        render(profile, "k8s")


def test_extra_args_with_the_ray_backend_renders_it_once() -> None:
    """extra_args already choosing ray is rendered once, where the profile wrote it."""
    args = vllm_serve_args(_profile("extra_args.distributed_executor_backend=ray"))
    assert args.count("--distributed-executor-backend") == 1
    assert args[args.index("--distributed-executor-backend") + 1] == "ray"


def test_single_node_profiles_get_no_backend_flag() -> None:
    """A one-node profile renders no --distributed-executor-backend: vLLM picks mp."""
    assert "--distributed-executor-backend" not in vllm_serve_args(
        load_profile("minimax-m3-mxfp8-8xa800")
    )


def test_bf16_profile_is_the_reference_flags_on_two_nodes() -> None:
    """The BF16 profile keeps the reference flags and env, adds PP 2, drops EAGLE3."""
    base = load_profile("minimax-m3-mxfp8-8xa800")
    bf16 = _profile()
    assert (bf16.hardware.nodes, bf16.hardware.gpus_per_node) == (2, 8)
    assert (bf16.model.path, bf16.model.quantization) == ("/models/MiniMax-M3", "bf16")
    assert bf16.speculative is None
    assert bf16.simulator is None
    assert bf16.env == base.env
    changed = {"pipeline_parallel_size": 2, "served_model_name": "MiniMax-M3"}
    assert bf16.serve_args == base.serve_args.model_copy(update=changed)


@pytest.mark.parametrize("target", ["k8s", "script"])
def test_multi_node_targets_end_with_one_newline(target: str) -> None:
    """Multi-node renderings end with exactly one newline, like the single-node ones."""
    text = render(_profile(), target)
    assert text.endswith("\n")
    assert not text.endswith("\n\n")
