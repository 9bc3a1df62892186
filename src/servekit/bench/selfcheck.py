"""The client's self-check (shell, asyncio): is the client, not the server, the bottleneck?

While a point runs, `monitor_loop` samples the event loop's lag (how late a 10 ms sleep
wakes up); afterwards `certify` holds the loop lag, the sends' lag behind their schedule
and the client's CPU use to their bounds, and `length_warnings` and `token_mismatch` flag
output lengths the server did not honour and token counts that disagree with the server's
own counter. Any of these makes the point invalid (`ClientBlock.valid`).
"""

from __future__ import annotations

import asyncio
import time

from servekit.analyze.summarize import distribution
from servekit.records import RequestRecord

LOOP_TICK_S = 0.01
MAX_LOOP_LAG_P99_MS = 20.0  # measured: <1% ITL error at p99 lag up to 17 ms (c=128)
MAX_SEND_LAG_P99_MS = 10.0
MAX_CPU_UTIL = 0.9


async def monitor_loop(lags: list[float], stop: asyncio.Event) -> None:
    """Sample event-loop lag: how late a 10 ms sleep wakes up."""
    while not stop.is_set():
        start = time.monotonic()
        await asyncio.sleep(LOOP_TICK_S)
        lags.append((time.monotonic() - start - LOOP_TICK_S) * 1000)


def certify(
    loop_lags: list[float],
    send_lags: list[float],
    cpu_util: float,
    *,
    max_send_lag_ms: float | None = MAX_SEND_LAG_P99_MS,
) -> tuple[list[str], dict[str, float | None]]:
    """The client's self-check for one point: is the client, not the server, the bottleneck?

    A point is invalid when the event loop's p99 lag exceeds 20 ms, the p99 lag of sends
    behind their schedule exceeds `max_send_lag_ms` (10 ms; None: not checked here, as for
    a trace replay, whose records' lags `analyze.traffic.schedule_block` holds to its own
    bound), or the client process used more than 90% of a core.
    """
    loop_p99 = distribution(loop_lags, ci=False).p99
    send_p99 = distribution(send_lags, ci=False).p99
    warnings = []
    if loop_p99 is not None and loop_p99 > MAX_LOOP_LAG_P99_MS:
        warnings.append(f"client event loop lagged {loop_p99:.1f} ms (p99): timings inflated")
    if send_p99 is not None and max_send_lag_ms is not None and send_p99 > max_send_lag_ms:
        warnings.append(f"requests left {send_p99:.1f} ms behind schedule (p99)")
    if cpu_util > MAX_CPU_UTIL:
        warnings.append(f"client used {cpu_util:.0%} of a core: it may be the bottleneck")
    return warnings, {
        "loop_lag_ms_p99": None if loop_p99 is None else round(loop_p99, 3),
        "send_lag_ms_p99": None if send_p99 is None else round(send_p99, 3),
        "cpu_util": round(cpu_util, 3),
    }


def token_mismatch(records: list[RequestRecord], generated: int | None) -> list[str]:
    """Flag a point whose output tokens disagree with the server's generation counter.

    Only checked when every request succeeded (failed streams leave tokens the client
    never counted) and the server exposes `vllm:generation_tokens_total`.
    """
    if generated is None or not records or not all(r.ok for r in records):
        return []
    counted = sum(r.output_tokens for r in records)
    if int(generated) == counted:
        return []
    return [
        f"the server generated {int(generated)} tokens during the point but the client "
        f"counted {counted}: another client shares the server, or usage is misreported"
    ]


def length_warnings(short: list[tuple[int, int]]) -> list[str]:
    if not short:
        return []
    got, wanted = short[0]
    return [
        f"{len(short)} request(s) did not get the output length asked for (e.g. {got} of "
        f"{wanted} tokens): the server ignored max_tokens/min_tokens/ignore_eos"
    ]
