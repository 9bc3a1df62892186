"""The load `servekit tune` judges candidates under (core): one workload, many load levels.

The workload is bench's: fixed-length requests, multi-turn sessions or agent loops, or a
timestamped trace. Its load level is what the search moves: concurrency (requests in
flight, or concurrent sessions) for a closed loop, requests (or sessions) per second for an
open loop, and for a trace the speed factor its timestamps are divided by. A data-parallel
candidate splits the load evenly over its replicas; each replica is simulated at its share.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from servekit.sim.load_points import sim_points
from servekit.sim.offline import AnyPoint
from servekit.workload.datasets import LengthSpec
from servekit.workload.load import Level, Load
from servekit.workload.sessions import SessionsSpec
from servekit.workload.traces import Trace

Loop = Literal["concurrency", "rate"]


@dataclass(frozen=True, slots=True)
class TuneWorkload:
    """What each candidate is loaded with.

    Attributes:
        loop: "concurrency" (closed loop) or "rate" (open loop); a trace is an open loop
            whose speed factor is the load.
        input_len: prompt tokens (sessions: new tokens per synthetic turn).
        output_len: output tokens.
        temperature: sampling temperature.
        requests: requests (sessions: sessions) per point at full fidelity.
        arrival: the open loop's arrival process.
        sessions: multi-turn sessions or agent loops, or None.
        trace: a trace to replay, or None.
    """

    loop: Loop
    input_len: int
    output_len: int
    temperature: float
    requests: int
    arrival: str = "poisson"
    sessions: SessionsSpec | None = None
    trace: Trace | None = None

    @classmethod
    def of(cls, load: Load, loop: Loop) -> TuneWorkload:
        """The workload of a Load (its levels are what tune searches, so it has none): a
        trace is an open loop; a length distribution is searched at its mean."""
        if load.trace is not None:
            requests = len(load.trace.requests)
        elif load.sessions is not None:
            requests = load.sessions.sessions_per_point
        else:
            requests = load.requests_per_point
        return cls(
            loop="rate" if load.trace is not None else loop,
            input_len=load.input_len.mean,
            output_len=load.output_len.mean,
            temperature=load.temperature,
            requests=requests,
            arrival=load.arrival,
            sessions=load.sessions,
            trace=load.trace,
        )

    @property
    def kind(self) -> str:
        """fixed, sessions, agent or trace."""
        if self.trace is not None:
            return "trace"
        if self.sessions is not None:
            return "agent" if self.sessions.agent is not None else "sessions"
        return "fixed"

    @property
    def load_unit(self) -> str:
        """What a load level counts."""
        if self.trace is not None:
            return "x trace speed"
        what = "sessions" if self.sessions is not None else "requests"
        return f"concurrent {what}" if self.loop == "concurrency" else f"{what}/s"

    @property
    def integer_load(self) -> bool:
        """True when load levels are whole numbers (a closed loop's concurrency)."""
        return self.trace is None and self.loop == "concurrency"

    @property
    def reuses_prefixes(self) -> bool:
        """True when requests share prefixes (sessions re-send history; a trace's hash ids)."""
        if self.sessions is not None:
            return True
        return self.trace is not None and self.trace.block_tokens is not None

    def needed_len(self) -> int:
        """Tokens the longest request needs (prompt + output), as far as it is known."""
        if self.trace is not None:
            return max((r.input_len + r.output_len for r in self.trace.requests), default=1)
        if self.sessions is not None:
            turns = max((len(s.turns) for s in self.sessions.sessions), default=1)
            return turns * (self.input_len + self.output_len) + 64
        return self.input_len + self.output_len

    def closed_twin(self) -> TuneWorkload:
        """The same requests as a closed loop (a trace: fixed-length requests of its mean
        lengths), to find what a replica serves at most."""
        if self.trace is not None:
            n = max(len(self.trace.requests), 1)
            ilen = max(round(sum(r.input_len for r in self.trace.requests) / n), 1)
            olen = max(round(sum(r.output_len for r in self.trace.requests) / n), 1)
            return TuneWorkload("concurrency", ilen, olen, self.temperature, self.requests)
        return dataclasses.replace(self, loop="concurrency")

    def sessions_requests(self) -> float:
        """Mean requests a session sends (its turns; an agent's turn limit at most)."""
        if self.sessions is None:
            return 1.0
        plans = self.sessions.sessions
        turns = sum(len(s.turns) for s in plans) / max(len(plans), 1)
        return max(turns, 1.0)

    def label(self, load: float) -> str:
        """A point label for a load level."""
        if self.trace is not None:
            return f"trace-x{load:.4g}"
        if self.loop == "concurrency":
            return f"c={round(load)}"
        return f"rate={load:.4g}"

    def load_at(self, load: float, requests: int) -> Load:
        """The traffic of one load level, as bench sends it (a trace sped up by `load`;
        sessions: `requests` of them at this one level)."""
        if self.trace is not None:
            trace = speed_up(self.trace, load)
            lengths = LengthSpec(self.input_len), LengthSpec(self.output_len)
            count = len(trace.requests)
            return Load(*lengths, self.temperature, requests_per_point=count, trace=trace)
        level = (
            Level(concurrency=round(load)) if self.loop == "concurrency" else Level(rate_rps=load)
        )
        sessions = None
        if self.sessions is not None:
            sessions = dataclasses.replace(self.sessions, sessions_per_point=requests, points=1)
        return Load(
            LengthSpec(self.input_len),
            LengthSpec(self.output_len),
            self.temperature,
            requests_per_point=requests,
            levels=(level,),
            arrival=self.arrival,
            sessions=sessions,
        )

    def sim_point(self, load: float, requests: int) -> AnyPoint:
        """The simulator's point at one replica's load level: the simulator's reading of
        that level's Load (`load_at`, the traffic bench sends), under tune's label."""
        point = sim_points(self.load_at(load, requests))[0]
        return dataclasses.replace(point, label=self.label(load))


def speed_up(trace: Trace, factor: float) -> Trace:
    """The trace replayed `factor` times faster (its offsets divided by it)."""
    if factor == 1.0:
        return trace
    requests = tuple(dataclasses.replace(r, offset_s=r.offset_s / factor) for r in trace.requests)
    return dataclasses.replace(trace, requests=requests, time_scale=trace.time_scale / factor)
