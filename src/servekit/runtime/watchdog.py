"""Stop an engine when the program that started it dies (shell).

`servekit tune` starts engines one after another and stops each itself; killed with
SIGKILL it cannot. So beside each engine it starts this watchdog, in a session of its own
(a signal to the tune's process group does not reach it):

    python -m servekit.runtime.watchdog --owner PID --owner-created T --state-dir DIR --profile NAME

Every `--interval` seconds it looks at the owner (by pid and creation time, so a reused
pid is not mistaken for it) and at the launcher's state file of the engine. When the state
file is gone, the owner stopped the engine itself and the watchdog exits. When the owner is
gone and the state is still there, it stops exactly what the state records (the process
group, or the container) as `servekit down` does, forgets the state, and exits.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from servekit.runtime.control import stop
from servekit.runtime.state import (
    EngineState,
    process_identity,
    read_state,
    remove_state,
    state_path,
)

INTERVAL_S = 0.5
IDENTITY_TOLERANCE_S = 1.0


def owner_alive(pid: int, created: float) -> bool:
    """True while the process with this pid and creation time runs."""
    when, live = process_identity(pid)
    return live and when is not None and abs(when - created) <= IDENTITY_TOLERANCE_S


def watch(
    owner: int, created: float, directory: Path, profile: str, *, interval_s: float = INTERVAL_S
) -> str:
    """Wait until the engine's state is gone (its owner stopped it) or the owner dies
    (then stop the engine); return what happened."""
    while True:
        if not state_path(directory, profile).exists():
            return "the owner stopped the engine"
        if not owner_alive(owner, created):
            state = read_state(directory, profile)
            if state is None:
                return "the owner stopped the engine"
            done = stop(state, grace_s=10.0)
            remove_state(directory, profile)
            return f"the owner died: {done}"
        time.sleep(interval_s)


def start_watchdog(state: EngineState, directory: Path) -> subprocess.Popen[bytes]:
    """Start the watchdog of an engine this process owns (in its own session)."""
    created, _ = process_identity(os.getpid())
    command = [
        sys.executable,
        "-m",
        "servekit.runtime.watchdog",
        "--owner",
        str(os.getpid()),
        "--owner-created",
        repr(created or 0.0),
        "--state-dir",
        str(directory),
        "--profile",
        state.profile,
    ]
    log = directory / f"{state.profile}.watchdog.log"
    with log.open("ab") as sink:
        return subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def main(argv: list[str]) -> int:
    """The watchdog process."""
    parser = argparse.ArgumentParser(prog="python -m servekit.runtime.watchdog")
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--owner-created", type=float, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--profile", required=True)
    parser.add_argument("--interval", type=float, default=INTERVAL_S)
    args = parser.parse_args(argv)
    said = watch(
        args.owner, args.owner_created, args.state_dir, args.profile, interval_s=args.interval
    )
    print(f"watchdog of {args.profile}: {said}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
