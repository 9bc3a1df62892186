"""The engine's state and the `--json` documents of `up`, `status` and `down` (core): what
`up` started (the state file's model; `runtime.state` reads and writes it) and what was found
about it, frozen and versioned like every other document (docs/schemas/)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from servekit.results import Document

ENGINE_DOC_VERSION: Literal[1] = 1


class EngineState(BaseModel):
    """One launched engine.

    Attributes:
        profile: the profile's name.
        runtime: "process" or "docker".
        url: where the engine's API answers.
        started_at: Unix time `up` started it.
        log_path: the engine log (for docker, a copy `up` followed while waiting).
        argv: the command that was run.
        env_names: the environment variables set from the profile (names only).
        pid: the process group leader (process runtime).
        pid_started_at: its creation time (Unix seconds, psutil), the identity check.
        container: the container name (docker runtime).
        container_id: the container id docker printed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    profile: str
    runtime: Literal["process", "docker"]
    url: str
    started_at: float
    log_path: str
    argv: list[str]
    env_names: list[str] = []
    pid: int | None = None
    pid_started_at: float | None = None
    container: str | None = None
    container_id: str | None = None

    def uptime_s(self, now: float) -> float:
        """Seconds since `up` started the engine, at Unix time `now`."""
        return now - self.started_at


class Readiness(Document):
    """What `up` saw when the engine became ready.

    Attributes:
        ready_after_s: seconds from the launch to /health 200.
        served_model: the first model /v1/models lists (None when it lists none).
        kv_cache_tokens: the KV capacity the engine's log states (None when not logged).
        max_concurrency: the log's maximum concurrency at max_model_len (None when absent).
    """

    ready_after_s: float
    served_model: str | None
    kv_cache_tokens: int | None
    max_concurrency: float | None


class UpDocument(Document):
    """`servekit up --json`: what was started and, unless `--no-wait`, its readiness.

    Attributes:
        engine: the state file `up` wrote (what `status`, `logs` and `down` act on).
        ready: absent with `--no-wait`.
    """

    schema_version: Literal[1]
    engine: EngineState
    ready: Readiness | None = None


class StatusDocument(Document):
    """`servekit status --json`: the state file and what the engine answers now.

    Attributes:
        engine: the state file.
        running: the recorded process group or container is alive.
        healthy: running and /health answered 200.
        detail: how liveness was decided (one line).
        health: /health's HTTP status (None when not running or no answer).
        served_model: the first model /v1/models lists (None when unhealthy or none).
        max_model_len: that model's max_model_len (None when not listed).
        uptime_s: seconds since `up` started it.
    """

    schema_version: Literal[1]
    engine: EngineState
    running: bool
    healthy: bool
    detail: str
    health: int | None
    served_model: str | None
    max_model_len: int | None
    uptime_s: float


class DownDocument(Document):
    """`servekit down --json`: the engine stopped and how.

    Attributes:
        profile: the profile whose engine was stopped.
        stopped: always true (a failure to stop is an error, not a document).
        detail: what was done (signals sent, container removed), one line.
    """

    schema_version: Literal[1]
    profile: str
    stopped: Literal[True]
    detail: str
