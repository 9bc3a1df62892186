"""A Load as the simulator's points (core): the one adapter from traffic to simulation.

Fixed-length requests become `LoadPoint`s, sessions and agent loops `SessionsPoint`s (each
point takes the next `sessions_per_point` sessions, as bench does) and a trace its one
`TracePoint`. The simulator models fixed lengths: a length distribution runs at its mean.
"""

from __future__ import annotations

from servekit.sim.offline import AnyPoint, LoadPoint
from servekit.sim.traffic import SessionsPoint, TracePoint
from servekit.workload.load import TRACE_LABEL, Load
from servekit.workload.traces import replay_rate


def sim_points(load: Load) -> list[AnyPoint]:
    """The simulator's points for a load, in its order, labelled as bench labels them."""
    if load.trace is not None:
        trace = load.trace
        return [TracePoint(TRACE_LABEL, trace, load.temperature, rate_rps=replay_rate(trace))]
    if load.sessions is not None:
        per_point = load.sessions.sessions_per_point
        return [
            SessionsPoint(
                level.label,
                load.sessions,
                index * per_point,
                load.temperature,
                level.concurrency,
                level.rate_rps,
                load.arrival,
            )
            for index, level in enumerate(load.levels)
        ]
    ilen, olen = load.input_len.mean, load.output_len.mean
    points: list[AnyPoint] = []
    for level in load.levels:
        n = level.requests or load.requests_per_point
        label, temperature = level.label, load.temperature
        if level.rate_rps is not None:
            rate, arrival = level.rate_rps, load.arrival
            points.append(LoadPoint(label, n, ilen, olen, temperature, None, rate, arrival))
        else:
            points.append(LoadPoint(label, n, ilen, olen, temperature, level.concurrency))
    return points
