"""The Ray cluster steps of a multi-node launch, as bash text (core).

Both multi-node targets (the LeaderWorkerSet manifests and the Ray launch script)
run the same steps, written once here: the head node starts Ray, waits until every
node's GPUs have joined, then runs `vllm serve` with the Ray executor; every other
node joins the head and blocks. Waiting and joining are bounded by
`deploy.startup_timeout_s` and fail with a message on stderr. The text is what bash
sees; a caller that hands it to Kubernetes still has to escape `$`.
"""

from __future__ import annotations

from servekit.profiles.schema import Profile
from servekit.render import shell

RAY_PORT = 6379
"""Port of the Ray head (Ray's default GCS port)."""

POLL_S = 5
"""Seconds between two looks at the cluster while waiting for nodes."""

# Prints the GPUs of every live node in the cluster; connecting as a driver is the one
# way to read them that does not depend on the layout of `ray status` output.
_CLUSTER_GPUS_PY = (
    'import ray; ray.init(address="auto", logging_level="ERROR"); '
    'print(int(ray.cluster_resources().get("GPU", 0)))'
)


def head_start_words() -> list[str]:
    """Return the command that starts the Ray head on this node."""
    return ["ray", "start", "--head", f"--port={RAY_PORT}"]


def wait_for_gpus_function(profile: Profile) -> list[str]:
    """Return the bash function `wait_for_gpus WANT`.

    It polls the cluster every `POLL_S` seconds and returns once it holds WANT GPUs;
    after `deploy.startup_timeout_s` it says how many joined and exits 1.
    """
    timeout_s = profile.deploy.startup_timeout_s
    count = shell.quote_words(["python3", "-c", _CLUSTER_GPUS_PY])
    return [
        "# Wait until the Ray cluster holds WANT GPUs, for at most the startup timeout.",
        "wait_for_gpus() {",
        f"  local want=$1 have=0 deadline=$((SECONDS + {timeout_s}))",
        "  while true; do",
        f"    have=$({count} 2>/dev/null | tail -n 1) || have=0",
        "    [[ $have =~ ^[0-9]+$ ]] || have=0",
        "    if ((have >= want)); then",
        '      echo "servekit: the Ray cluster holds $have of $want GPUs; starting vLLM" >&2',
        "      return 0",
        "    fi",
        "    if ((SECONDS >= deadline)); then",
        '      echo "servekit: the Ray cluster holds $have of $want GPUs after '
        f"{timeout_s} s; start every worker node and check it reaches port {RAY_PORT} "
        'on the head, or raise deploy.startup_timeout_s" >&2',
        "      exit 1",
        "    fi",
        f"    sleep {POLL_S}",
        "  done",
        "}",
    ]


def join_ray_function(profile: Profile) -> list[str]:
    """Return the bash function `join_ray HEAD_ADDRESS`.

    It runs `ray start --address=HEAD_ADDRESS:6379 --block`, retrying every `POLL_S`
    seconds while the head is not up yet (workers may start first); after
    `deploy.startup_timeout_s` without joining it exits 1.
    """
    timeout_s = profile.deploy.startup_timeout_s
    join = f'ray start --address="$head:{RAY_PORT}" --block'
    return [
        "# Join the Ray head and block; retry while the head is not up, up to the startup timeout.",
        "join_ray() {",
        f"  local head=$1 deadline=$((SECONDS + {timeout_s}))",
        "  if [[ -z $head ]]; then",
        '    echo "servekit: no Ray head address given" >&2',
        "    exit 2",
        "  fi",
        f"  until {join}; do",
        "    if ((SECONDS >= deadline)); then",
        f'      echo "servekit: could not join the Ray head at $head:{RAY_PORT} within '
        f"{timeout_s} s; start the head node first and check port {RAY_PORT} is reachable, "
        'or raise deploy.startup_timeout_s" >&2',
        "      exit 1",
        "    fi",
        f'    echo "servekit: the Ray head at $head:{RAY_PORT} is not up yet; retrying" >&2',
        f"    sleep {POLL_S}",
        "  done",
        "}",
    ]
