"""Service-level objectives (core): one grammar and one type for every command that judges
a run (`bench --slo`, `sim run --slo`, `tune --slo`).

An SLO is a comma-separated list of bounds, each on one statistic of one per-request metric:

    ttft_p99<=2s,tpot_p50<=25ms          TTFT p99 at most 2 s and TPOT p50 at most 25 ms
    per_stream_p50>=60tok/s              the median stream at least 60 tokens per second
    e2e_p90<=30s,itl_mean<=40ms          end-to-end latency p90, mean inter-token latency

Metrics are docs/metrics.md's: `ttft`, `ttfo`, `tpot`, `itl` and `e2e` (also `latency`) are
times and take `<=` with a unit (`s` or `ms`); `per_stream` (1 / TPOT) is a speed and takes
`>=` in `tok/s` (the unit may be left out). The statistic is `mean`, `p50`, `p90` or `p99`;
left out, it is `p50`. A load point meets the SLO when every bound holds on its distribution.
Each bound also applies to single requests: a request is within the SLO (it counts towards
goodput) when it succeeded and its own TTFT, TTFO, TPOT, per-stream speed and end-to-end
latency are within every such bound (ITL has no per-request value; it counts only on the
distribution).

bench's earlier form, `ttft_ms=500,tpot_ms=50,e2e_s=10` (each request within every bound),
is refused with one line that writes it in this grammar (`ttft_p99<=500ms,...`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Protocol

from servekit.errors import UsageError
from servekit.records import RequestRecord
from servekit.results.summary import SloBlock

Metric = Literal["ttft", "ttfo", "tpot", "itl", "e2e", "per_stream"]
Statistic = Literal["mean", "p50", "p90", "p99"]

METRICS: dict[str, Metric] = {
    "ttft": "ttft",
    "ttfo": "ttfo",
    "tpot": "tpot",
    "itl": "itl",
    "e2e": "e2e",
    "latency": "e2e",
    "per_stream": "per_stream",
}
STATISTICS: tuple[Statistic, ...] = ("mean", "p50", "p90", "p99")
_TIME_UNITS = {"s": 1000.0, "ms": 1.0}  # to milliseconds
_TERM = re.compile(
    r"(?P<name>[a-z0-9_]+?)(?:_(?P<stat>mean|p50|p90|p99))?\s*(?P<op><=|>=|<|>|=)\s*"
    r"(?P<value>[0-9.eE+-]+)\s*(?P<unit>[a-zA-Z/]*)"
)
_EXAMPLE = "write e.g. --slo 'ttft_p99<=2s,tpot_p50<=25ms' or --slo 'per_stream_p50>=60tok/s'"


class Stats(Protocol):
    """A distribution's statistics (analyze's Distribution, summary.json's block)."""

    @property
    def mean(self) -> float | None: ...
    @property
    def p50(self) -> float | None: ...
    @property
    def p90(self) -> float | None: ...
    @property
    def p99(self) -> float | None: ...


class PointStats(Protocol):
    """A load point's distributions, in summary.json's units (ms, s, tok/s)."""

    @property
    def ttft_ms(self) -> Stats: ...
    @property
    def ttfo_ms(self) -> Stats: ...
    @property
    def tpot_ms(self) -> Stats: ...
    @property
    def itl_ms(self) -> Stats: ...
    @property
    def latency_s(self) -> Stats: ...
    @property
    def per_stream_tok_s(self) -> Stats: ...


@dataclass(frozen=True, slots=True)
class Bound:
    """One bound: `metric`'s `statistic` at most (times, in ms) or at least (per_stream,
    tok/s) `value`."""

    metric: Metric
    statistic: Statistic
    value: float

    @property
    def at_least(self) -> bool:
        """True for a speed (per_stream >= value), False for a time (<= value)."""
        return self.metric == "per_stream"

    def text(self) -> str:
        """The bound as the SLO string writes it, canonically."""
        if self.at_least:
            return f"{self.metric}_{self.statistic}>={self.value:g}tok/s"
        if self.value >= 1000 and self.value % 100 == 0:
            return f"{self.metric}_{self.statistic}<={self.value / 1000:g}s"
        return f"{self.metric}_{self.statistic}<={self.value:g}ms"

    def observed(self, point: PointStats) -> float | None:
        """The point's value of this statistic (ms for times, tok/s for per_stream)."""
        stats: Stats
        scale = 1.0
        if self.metric == "e2e":
            stats, scale = point.latency_s, 1000.0
        elif self.metric == "per_stream":
            stats = point.per_stream_tok_s
        else:
            stats = getattr(point, f"{self.metric}_ms")
        value: float | None = getattr(stats, self.statistic)
        return None if value is None else value * scale

    def holds(self, observed: float | None) -> bool:
        """True when an observed value satisfies the bound (no value: not met)."""
        if observed is None or math.isnan(observed):
            return False
        return observed >= self.value if self.at_least else observed <= self.value


@dataclass(frozen=True, slots=True)
class Judgement:
    """Whether a point meets the SLO, with each bound's observed value."""

    met: bool
    observed: tuple[float | None, ...]
    violated: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Slo:
    """An SLO: every bound must hold."""

    bounds: tuple[Bound, ...]

    def text(self) -> str:
        """The canonical SLO string."""
        return ",".join(b.text() for b in self.bounds)

    def judge(self, point: PointStats) -> Judgement:
        """Judge one load point's distributions."""
        observed = tuple(b.observed(point) for b in self.bounds)
        violated = tuple(
            f"{b.metric}_{b.statistic} {_shown(v, b)}"
            for b, v in zip(self.bounds, observed, strict=True)
            if not b.holds(v)
        )
        return Judgement(not violated, observed, violated)

    def met_by(self, record: RequestRecord) -> bool:
        """True when a request succeeded and its own figures are within every bound."""
        return record.ok and self.request_within(
            ttft_ms=record.ttft_ms,
            ttfo_ms=record.ttfo_ms,
            tpot_ms=record.tpot_ms,
            e2e_s=record.e2e_s,
        )

    def request_within(
        self, *, ttft_ms: float | None, ttfo_ms: float | None, tpot_ms: float | None, e2e_s: float
    ) -> bool:
        """True when one successful request's own figures are within every bound."""
        for b in self.bounds:
            if b.metric == "itl":
                continue
            if b.metric == "e2e":
                value: float | None = e2e_s * 1000.0
            elif b.metric == "per_stream":
                value = 1000.0 / tpot_ms if tpot_ms else None
            else:
                value = {"ttft": ttft_ms, "ttfo": ttfo_ms, "tpot": tpot_ms}[b.metric]
            if b.metric in ("tpot", "per_stream") and value is None:
                continue  # a one-token answer has no TPOT: nothing to hold it to
            if not b.holds(value):
                return False
        return True


def _shown(value: float | None, bound: Bound) -> str:
    if value is None:
        return "has no value"
    unit = "tok/s" if bound.at_least else "ms"
    op = "<" if bound.at_least else ">"
    return f"{value:.4g} {unit} {op} {bound.value:g}"


def parse_slo(text: str, *, option: str = "SLO") -> Slo:
    """Parse an SLO string (module docstring). Errors quote it after `option` (the CLI
    passes its flag, `--slo`).

    Raises:
        UsageError: one line naming the part that is wrong and the fix.
    """
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(parts):
        raise UsageError(f"{option} {text!r} has an empty part", fix=_EXAMPLE)
    if (rewritten := _old_form(parts, text, option)) is not None:
        raise UsageError(
            f"{option} {text!r} is the earlier bench form (each request within every bound)",
            fix=f"write it as --slo {rewritten!r} (the same requests count towards goodput)",
        )
    bounds = []
    for part in parts:
        bounds.append(_parse_bound(part, text, option))
    seen = [(b.metric, b.statistic) for b in bounds]
    if len(set(seen)) != len(seen):
        twice = next(f"{m}_{s}" for m, s in seen if seen.count((m, s)) > 1)
        raise UsageError(
            f"{option} {text!r} bounds {twice} twice", fix="keep one bound per statistic"
        )
    return Slo(tuple(bounds))


def slo_of_block(block: SloBlock, *, where: str = "summary.json") -> Slo:
    """The SLO a summary's `slo` block holds (an earlier summary's per-request bounds read
    as the same bounds at p99).

    Raises:
        UsageError: the block's text is not an SLO (a tampered file), naming the file.
    """
    if block.text is not None:
        return parse_slo(block.text, option=f"{where} slo")
    e2e_ms = None if block.e2e_s is None else block.e2e_s * 1000.0
    legacy: tuple[tuple[Metric, float | None], ...] = (
        ("ttft", block.ttft_ms), ("tpot", block.tpot_ms), ("e2e", e2e_ms)
    )  # fmt: skip
    return Slo(tuple(Bound(metric, "p99", v) for metric, v in legacy if v is not None))


_OLD_KEYS = {"ttft_ms": ("ttft", "ms"), "tpot_ms": ("tpot", "ms"), "e2e_s": ("e2e", "s")}


def _old_form(parts: list[str], text: str, option: str) -> str | None:
    """bench's earlier `ttft_ms=500,tpot_ms=50,e2e_s=10` written in this grammar (p99: the
    report judged such a point met when 99% of its requests were within), or None when
    `parts` are not that form.

    Raises:
        UsageError: the earlier form with a value that is not a positive number.
    """
    written = []
    for part in parts:
        key, sep, raw = (x.strip() for x in part.partition("="))
        if not sep or key not in _OLD_KEYS:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise UsageError(
                f"{option} {text!r}: {key} needs a positive number, got {raw!r}",
                fix="write the SLO as e.g. --slo 'ttft_p99<=500ms,tpot_p99<=50ms'",
            )
        metric, unit = _OLD_KEYS[key]
        written.append(f"{metric}_p99<={raw}{unit}")
    return ",".join(written)


def _parse_bound(part: str, text: str, option: str) -> Bound:
    where = f"{option} {text!r}: {part!r}"
    match = _TERM.fullmatch(part)
    if match is None:
        raise UsageError(f"{where} is not METRIC_STAT<=VALUE", fix=_EXAMPLE)
    name, stat, op, raw, unit = match.group("name", "stat", "op", "value", "unit")
    metric = METRICS.get(name)
    if metric is None:
        raise UsageError(
            f"{where}: unknown metric {name!r}",
            fix="use one of ttft, ttfo, tpot, itl, e2e, per_stream",
        )
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{where}: {raw!r} is not a number", fix=_EXAMPLE) from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{where}: the bound must be positive and finite", fix=_EXAMPLE)
    if metric == "per_stream":
        if op != ">=":
            raise UsageError(f"{where}: per_stream is a speed, bounded from below", fix="write >=")
        if unit not in ("", "tok/s"):
            raise UsageError(f"{where}: per_stream is in tok/s, not {unit!r}", fix="write 60tok/s")
        return Bound(metric, stat or "p50", value)  # type: ignore[arg-type]
    if op != "<=":
        raise UsageError(f"{where}: {metric} is a time, bounded from above", fix="write <=")
    if unit not in _TIME_UNITS:
        raise UsageError(
            f"{where}: a time needs a unit, s or ms (got {unit or 'none'!r})",
            fix="write 2s or 25ms",
        )
    return Bound(metric, stat or "p50", value * _TIME_UNITS[unit])  # type: ignore[arg-type]
