"""`servekit up --runtime docker` and what follows it, against the tier's real Docker engine.

Each test launches its own deployment (see `up_tier.py`) from the tier's base image, whose
entrypoint stands in for `vllm serve` with `servekit sim serve`: the container runs with
the rendered options, `up` follows its log through the startup stages to a real /health
200 on the host network, and `status`, `logs` and `down` act on that container only.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from docker_tier import Daemon, build_sleeper_image, leftovers, start_daemon, stop_daemon
from up_tier import Deployment, one_error_line

from servekit.hardware import lookup_gpu
from servekit.plan import make_plan, plan_inputs
from servekit.profiles import load_profile

MakeDeployment = Callable[..., Deployment]


@pytest.fixture
def deployment(docker_daemon: Daemon, base_image: str, tmp_path: Path) -> Iterator[MakeDeployment]:
    """Make this test's deployments; afterwards remove every container the test left, so
    a failing test does not leave work for the next one."""
    before = set(docker_daemon.containers())

    def make(
        name: str, *, env: dict[str, str] | None = None, secret_env: list[str] | None = None,
        with_model: bool = True,
    ) -> Deployment:  # fmt: skip
        return Deployment(
            docker_daemon, base_image, tmp_path, name, env=env or {},
            secret_env=secret_env or [], with_model=with_model,
        ).write()  # fmt: skip

    yield make
    left = [ident for ident in docker_daemon.containers() if ident not in before]
    if left:
        docker_daemon.cli("rm", "-f", "-v", *left, check=False)


def _planned(profile: Path) -> tuple[int, float]:
    """The KV capacity (tokens) and maximum concurrency servekit's planner gives a profile."""
    loaded = load_profile(str(profile))
    plan = make_plan(plan_inputs(loaded, lookup_gpu(loaded.hardware.gpu)))
    return plan.kv_cache_tokens, plan.max_concurrency


def _rendered_docker_run(dep: Deployment) -> list[str]:
    """The words of `servekit render --target docker` (comments and continuations dropped)."""
    rendered = dep.servekit("render", str(dep.profile_path), "--target", "docker")
    assert rendered.returncode == 0, rendered.stderr
    body = [line for line in rendered.stdout.splitlines() if not line.startswith("#")]
    return shlex.split(" ".join(line.rstrip("\\") for line in body))


def test_up_status_logs_validate_bench_down_journey(
    deployment: MakeDeployment, docker_daemon: Daemon, base_image: str
) -> None:
    """The whole journey on a real engine: up follows the container's log to /health 200
    and prints the planner's KV capacity; status and logs read that container; validate
    and bench pass through the port; down removes exactly it and leaves a container
    servekit did not start, running the whole time, untouched."""
    dep = deployment("journey")
    foreign = docker_daemon.cli("run", "-d", "--name", "not-servekits", "--network", "host",
                                "--entrypoint", "sleep", base_image, "600").strip()  # fmt: skip
    tokens, concurrency = _planned(dep.profile_path)

    up = dep.servekit("up", str(dep.profile_path), "--runtime", "docker")
    assert up.returncode == 0, up.stdout + up.stderr
    for label in ("loading weights", "profiling memory", "sizing the KV cache", "API server up"):
        assert label in up.stdout
    assert up.stdout.index("loading weights") < up.stdout.index("sizing the KV cache")
    assert "ready in " in up.stdout
    assert dep.url in up.stdout
    assert (
        f"KV capacity: {tokens:,} tokens, max concurrency {concurrency:.2f}x at 2,048 tokens"
        in up.stdout
    )
    state = json.loads(dep.state_file().read_text())
    ident = state["container_id"]
    assert dep.inspect(ident)["Name"] == "/journey"

    status = dep.servekit("status", "journey", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    document = json.loads(status.stdout)
    assert (document["running"], document["healthy"], document["health"]) == (True, True, 200)
    assert document["engine"]["container_id"] == ident
    assert document["served_model"] == "/models/tiny"

    logs = dep.servekit("logs", "journey")
    assert logs.returncode == 0, logs.stderr
    assert "vllm stand-in: serve /models/tiny --host 127.0.0.1" in logs.stdout + logs.stderr
    assert f"Starting vLLM server on {dep.url}" in logs.stdout + logs.stderr

    validate = dep.servekit("validate", "--url", dep.url, "--ladder", "1,2",
                            "--long-context-tokens", "256", "--timeout", "120",
                            "--json")  # fmt: skip
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert json.loads(validate.stdout)["passed"] is True

    out = dep.root / "bench"
    bench = dep.servekit("bench", "--url", dep.url, "--concurrency", "2",
                         "--requests-per-point", "4", "--warmup", "0", "--input-len", "64",
                         "--output-len", "16", "--out", str(out), "--json")  # fmt: skip
    assert bench.returncode == 0, bench.stdout + bench.stderr
    points = json.loads((out / "summary.json").read_text())["points"]
    assert [(p["completed"], p["failed"]) for p in points] == [(4, 0)]

    down = dep.servekit("down", "journey", "--grace", "10")
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"stopped and removed container journey ({ident[:12]})" in down.stdout
    remaining = docker_daemon.containers()
    assert ident not in remaining
    assert foreign in remaining
    assert dep.inspect(foreign)["State"]["Running"] is True
    assert not dep.state_file().exists()
    docker_daemon.cli("rm", "-f", foreign)


def test_the_container_runs_with_the_rendered_options(deployment: MakeDeployment) -> None:
    """docker inspect shows the image, the engine's arguments exactly as `servekit render
    --target docker` renders them, host networking, no GPUs and the model mounted
    read-only."""
    dep = deployment("rendered", env={"SERVEKIT_SIM_NOTE": "rendered"})
    words = _rendered_docker_run(dep)
    image_at = words.index(dep.image)
    up = dep.servekit("up", str(dep.profile_path), "--runtime", "docker", "--no-wait")
    assert up.returncode == 0, up.stdout + up.stderr
    ident = json.loads(dep.state_file().read_text())["container_id"]
    seen = dep.inspect(ident)
    try:
        assert seen["Config"]["Image"] == dep.image
        assert seen["Config"]["Cmd"] == words[image_at + 1 :]
        assert seen["Config"]["Cmd"][:5] == [
            "/models/tiny", "--host", "127.0.0.1", "--port", str(dep.port),
        ]  # fmt: skip
        assert seen["HostConfig"]["NetworkMode"] == "host"
        assert seen["HostConfig"]["DeviceRequests"] in (None, [])
        assert words[words.index("--network") + 1] == "host"
        assert "-p" not in words
        [mount] = seen["Mounts"]
        assert (mount["Source"], mount["Destination"], mount["RW"]) == (
            str(dep.models), "/models", False,
        )  # fmt: skip
        assert "SERVEKIT_SIM_NOTE=rendered" in seen["Config"]["Env"]
        assert words[words.index("--name") + 1] == "rendered" == seen["Name"].lstrip("/")
    finally:
        assert dep.servekit("down", "rendered", "--grace", "5").returncode == 0


def test_an_engine_that_exits_at_once_is_one_error_line(deployment: MakeDeployment) -> None:
    """A model directory without the model: the engine exits with code 1 at once; up says
    so in one line quoting the log's error and exits 1; down removes the container."""
    dep = deployment("exits", with_model=False)
    up = dep.servekit("up", str(dep.profile_path), "--runtime", "docker")
    assert up.returncode == 1, up.stdout + up.stderr
    line = one_error_line(up)
    assert "exits did not become ready: container exits has exited (exit code 1)" in line
    assert "Invalid repository ID or local directory specified: '/models/tiny'" in line
    ident = json.loads(dep.state_file().read_text())["container_id"]
    down = dep.servekit("down", "exits")
    assert down.returncode == 0, down.stderr
    assert ident not in dep.daemon.containers()


def test_a_container_that_never_becomes_healthy_times_out(deployment: MakeDeployment) -> None:
    """An engine stuck loading (slow-start 600 s) and `up --timeout 10`: one line naming the
    timeout and the stage, exit 1; the container is left running for down, which removes
    it."""
    dep = deployment("stuck", env={"SERVEKIT_STANDIN_FAULTS": "slow-start=600"})
    up = dep.servekit("up", str(dep.profile_path), "--runtime", "docker", "--timeout", "10")
    assert up.returncode == 1, up.stdout + up.stderr
    line = one_error_line(up)
    assert "stuck did not become ready: not ready after 10 s during '" in line
    # the stand-in logs the start of loading within a few seconds; a very busy machine may
    # not have got the container's Python that far in 10 s
    assert "during 'loading weights'" in line or "during 'starting the engine'" in line
    ident = json.loads(dep.state_file().read_text())["container_id"]
    assert dep.inspect(ident)["State"]["Running"] is True
    down = dep.servekit("down", "stuck", "--grace", "5")
    assert down.returncode == 0, down.stderr
    assert ident not in dep.daemon.containers()
    assert not dep.state_file().exists()


def test_a_name_taken_by_a_foreign_container_is_refused_and_left_alone(
    deployment: MakeDeployment, docker_daemon: Daemon, base_image: str
) -> None:
    """A container servekit did not start holds the deployment's name: up refuses in one
    line naming it and exits 1; that container keeps its id and state. With a stale
    state file of an earlier start (its container removed by hand since), the start
    still removes nothing."""
    dep = deployment("taken", with_model=False)
    assert dep.servekit("up", str(dep.profile_path), "--runtime", "docker").returncode == 1
    earlier = json.loads(dep.state_file().read_text())["container_id"]
    docker_daemon.cli("rm", "-f", earlier)  # the user removed it; the state file stays
    foreign = docker_daemon.cli("create", "--name", "taken", "--network", "host",
                                "--entrypoint", "sleep", base_image, "600").strip()  # fmt: skip
    before = dep.inspect(foreign)

    up = dep.servekit("up", str(dep.profile_path), "--runtime", "docker")
    assert up.returncode == 1, up.stdout + up.stderr
    line = one_error_line(up)
    assert f"a container named taken ({foreign[:12]}) already exists" in line
    assert "servekit up did not start it" in line
    after = dep.inspect(foreign)
    assert (after["Id"], after["State"], after["Created"]) == (
        before["Id"], before["State"], before["Created"],
    )  # fmt: skip
    named = docker_daemon.cli("ps", "-aq", "--no-trunc", "--filter", "name=^/taken$").split()
    assert named == [foreign]


def test_a_daemon_stopped_mid_run_gives_one_error_line_per_command(
    tmp_path: Path, docker_daemon: Daemon
) -> None:
    """A second private daemon runs the engine container and is stopped under it: status,
    logs and down each print one line naming docker's failure and exit 1; down keeps the
    state for a retry."""
    second = start_daemon()
    try:
        image = build_sleeper_image(second, "servekit-test-sleeper:tier", tmp_path)
        dep = Deployment(second, image, tmp_path, "orphaned").write()
        up = dep.servekit("up", str(dep.profile_path), "--runtime", "docker", "--no-wait")
        assert up.returncode == 0, up.stdout + up.stderr
        assert dep.servekit("status", "orphaned").returncode == 3  # runs; nothing on /health
        second.proc.terminate()
        second.proc.wait(timeout=60)
        for command in (["status", "orphaned"], ["logs", "orphaned"], ["down", "orphaned"]):
            result = dep.servekit(*command)
            assert result.returncode == 1, (command, result.stdout, result.stderr)
            line = one_error_line(result)
            assert "Cannot connect to the Docker daemon" in line, line
            assert "check the docker daemon" in line, line
        assert dep.state_file().exists()
    finally:
        stop_daemon(second)
    assert leftovers(second) == []


def test_a_secret_reaches_the_engine_and_nothing_else(deployment: MakeDeployment) -> None:
    """secret_env: up refuses in one line while the variable is unset; set, its value is in
    the container's environment and nowhere in docker inspect's command line, servekit's
    state file, up's output or its log copy."""
    dep = deployment("secretive", secret_env=["SERVEKIT_TEST_SECRET"])
    refused = dep.servekit("up", str(dep.profile_path), "--runtime", "docker")
    assert refused.returncode == 1
    assert "needs the secret SERVEKIT_TEST_SECRET" in one_error_line(refused)
    assert not dep.state_file().exists()

    secret = "sk-servekit-" + "7f3a9c" * 4
    up = dep.servekit("up", str(dep.profile_path), "--runtime", "docker",
                      extra_env={"SERVEKIT_TEST_SECRET": secret})  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state_text = dep.state_file().read_text()
        state = json.loads(state_text)
        assert "SERVEKIT_TEST_SECRET" in state["env_names"]
        seen = dep.inspect(state["container_id"])
        inside = dep.daemon.cli("exec", state["container_id"], "printenv", "SERVEKIT_TEST_SECRET")
        assert inside.strip() == secret
        command_line = json.dumps([seen["Path"], seen["Args"], seen["Config"]["Cmd"],
                                   seen["Config"]["Entrypoint"]])  # fmt: skip
        assert "SERVEKIT_TEST_SECRET" not in command_line
        log_copy = Path(state["log_path"]).read_text()
        assert "Starting vLLM server" in log_copy
        for text in (command_line, state_text, up.stdout, up.stderr, log_copy):
            assert secret not in text
    finally:
        assert dep.servekit("down", "secretive", "--grace", "5").returncode == 0
