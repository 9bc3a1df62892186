"""The tune journal (shell): what `servekit tune` did, appended and flushed as it happens.

`OUT/tune-journal.jsonl` holds one JSON object per line: the run's inputs first, then each
engine started and stopped, and each point measured on the real engine with its run
directory. A run killed at any moment (kill -9 included) leaves every finished measurement
here; `servekit tune --resume` reads it back, stops an engine a killed run left behind, and
measures only what is missing. A torn last line (the kill came mid-write) is ignored.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit import jsontext
from servekit.errors import ServekitError, UsageError
from servekit.results.tune import LoadBlock

JOURNAL_FILE = "tune-journal.jsonl"
MAX_LINE_BYTES = 1 << 20


@dataclass(slots=True)
class JournalState:
    """What an earlier run of the same tune did.

    Attributes:
        inputs: the run's inputs (the first line).
        measured: (candidate id, load) -> the measured point (a LoadBlock as JSON).
        engines: profile names of engines started and not recorded as stopped.
    """

    inputs: dict[str, Any] | None = None
    measured: dict[tuple[str, float], dict[str, Any]] = field(default_factory=dict)
    engines: list[str] = field(default_factory=list)
    startup_s: dict[str, float] = field(default_factory=dict)


def read_journal(out: Path) -> JournalState:
    """Read a journal (missing: empty).

    Raises:
        ServekitError: a line other than the last is not a JSON object.
    """
    path = out / JOURNAL_FILE
    state = JournalState()
    if not path.is_file():
        return state
    with path.open("rb") as f:
        lines = f.read().split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw[:MAX_LINE_BYTES])
        except ValueError:
            if number >= len(lines) - 1:  # a torn last line
                break
            raise ServekitError(
                f"{path}:{number} is not a JSON object", fix="remove the line, or tune anew"
            ) from None
        if not isinstance(entry, dict):
            continue
        _apply(state, entry)
    return state


def _apply(state: JournalState, entry: dict[str, Any]) -> None:
    event = entry.get("event")
    if event == "inputs" and isinstance(entry.get("inputs"), dict):
        state.inputs = entry["inputs"]
    elif event == "engine_start" and isinstance(entry.get("profile"), str):
        state.engines.append(entry["profile"])
    elif event == "engine_stop" and entry.get("profile") in state.engines:
        state.engines.remove(entry["profile"])
        if isinstance(entry.get("startup_s"), (int, float)) and isinstance(
            entry.get("candidate"), str
        ):
            state.startup_s[entry["candidate"]] = float(entry["startup_s"])
    elif event == "measured" and isinstance(entry.get("point"), dict):
        candidate, load = entry.get("candidate"), entry.get("load")
        if isinstance(candidate, str) and isinstance(load, (int, float)):
            state.measured[(candidate, float(load))] = entry["point"]


class Journal:
    """Appends events to OUT/tune-journal.jsonl, each line flushed and synced."""

    def __init__(self, out: Path) -> None:
        self.path = out / JOURNAL_FILE
        try:
            out.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"cannot write {self.path}: {exc.strerror}", fix="choose a writable --out"
            ) from None

    def write(self, event: str, **fields: Any) -> None:
        """Append one event."""
        self._file.write(jsontext.dumps({"event": event, **fields}, what="a journal line") + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file."""
        self._file.close()


class MeasuredPoints:
    """The points measured on the real engine, by (candidate id, load): those an earlier
    run journaled (`--resume`), and each new one, journaled as it is measured."""

    def __init__(self, journal: Journal, earlier: JournalState | None) -> None:
        self.journal = journal
        self.cache: dict[tuple[str, float], dict[str, Any]] = (
            dict(earlier.measured) if earlier is not None else {}
        )

    def get(self, candidate: str, load: float) -> dict[str, Any] | None:
        """The point measured before at this load (a LoadBlock as JSON), or None."""
        return self.cache.get((candidate, float(load)))

    def add(self, candidate: str, load: float, round_: int, block: LoadBlock) -> None:
        """Journal a point just measured, and keep it."""
        self.journal.write(
            "measured",
            candidate=candidate,
            load=float(load),
            round=round_,
            point=block.as_json(),
        )
        self.cache[(candidate, float(load))] = block.as_json()
