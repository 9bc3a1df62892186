#!/usr/bin/env python3
"""A stand-in `docker` CLI for launch tests: records every call and plays a container.

Each call appends its argv (JSON) to $FAKE_DOCKER_CALLS. `run -d` prints a container
id and marks the container running; `inspect` answers "true 0" while it runs, else
"false <code>" (with `-f {{.Id}}`: the id, while the container exists); `logs [-f]`
prints $FAKE_DOCKER_LOG, then touches a `.logged` marker; `stop` marks it exited; `rm`
forgets it. $FAKE_DOCKER_EXIT_AFTER_LOGS=1 makes the container exit with code 1 once
its log was printed (an engine that crashed at startup). `image inspect` fails when
$FAKE_DOCKER_NO_IMAGE=1 (then `pull` succeeds); `run` writes the value of $HF_TOKEN it
was given to `.run-env`; $FAKE_DOCKER_BROKEN=1 makes `stop` and `inspect` fail like an
unreachable daemon.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CONTAINER_ID = "3f2a9c1e5b7d" + "0" * 52


def main() -> int:
    args = sys.argv[1:]
    calls = Path(os.environ["FAKE_DOCKER_CALLS"])
    with calls.open("a", encoding="utf-8") as f:
        f.write(json.dumps(args) + "\n")
    state = calls.with_suffix(".state")
    command = args[0] if args else ""
    broken = os.environ.get("FAKE_DOCKER_BROKEN") == "1"
    if broken and command in ("stop", "inspect", "rm"):
        print(
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", file=sys.stderr
        )
        return 1
    if command == "image":
        return 1 if os.environ.get("FAKE_DOCKER_NO_IMAGE") == "1" else 0
    if command == "pull":
        print(f"{args[-1]}: Pulling from library")
        return 0
    if command == "run":
        calls.with_suffix(".run-env").write_text(os.environ.get("HF_TOKEN", "<unset>"))
        state.write_text("true 0")
        print(CONTAINER_ID)
        return 0
    if command == "inspect":
        if not state.exists():
            print("Error: No such object", file=sys.stderr)
            return 1
        print(CONTAINER_ID if "{{.Id}}" in args else state.read_text())
        return 0
    if command == "logs":
        sys.stdout.write(Path(os.environ["FAKE_DOCKER_LOG"]).read_text())
        sys.stdout.flush()
        calls.with_suffix(".logged").touch()
        if os.environ.get("FAKE_DOCKER_EXIT_AFTER_LOGS") == "1":
            state.write_text("false 1")
        return 0
    if command == "stop":
        if not state.exists():
            print("Error: No such container", file=sys.stderr)
            return 1
        state.write_text("false 137")
        print(args[-1])
        return 0
    if command == "rm":
        state.unlink(missing_ok=True)
        print(args[-1])
        return 0
    print(f"fake docker: unsupported {command}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
