"""Speculative-decoding acceptance measured from a run (core): conditional per position.

Two sources, both per draft position i (1..k):

- the server's counters (`spec_acceptance_per_position` of the summary's server block:
  accepted tokens at position i / drafts, the unconditional rate a_i); the conditional
  probability the engine draws is p_i = a_i / a_(i-1), with a_0 = 1;
- the verify chunks: a verify step streams accepted + 1 tokens, so among verifies with all k
  drafts usable (more than k tokens still to generate), p_i = #(accepted >= i) /
  #(accepted >= i - 1). A chunk that carried more than k + 1 tokens (coalesced steps) is
  left out.

The counters are exact and are used when every training point has them; the chunks give the
number of verifies behind each position, hence the binomial standard error
sqrt(p (1 - p) / n), and are the estimate when counters are missing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from servekit.errors import SimulationError
from servekit.records import RequestRecord


@dataclass(frozen=True, slots=True)
class AcceptanceFit:
    """Conditional acceptance per draft position at one temperature.

    Attributes:
        temperature: the sampling temperature measured.
        probabilities: p_1..p_k.
        stderr: binomial standard error of each (None where no verify reached the position).
        verifies: verify steps seen in the chunks.
        source: "counters" or "chunks".
        from_chunks: the chunks' estimate (beside the counters', to show coalescing or
            truncated drafts where they disagree; equal to probabilities when source is chunks).
    """

    temperature: float
    probabilities: tuple[float, ...]
    stderr: tuple[float | None, ...]
    verifies: int
    source: str
    from_chunks: tuple[float, ...] = ()


def conditional_from_counters(per_position: Sequence[float]) -> tuple[float, ...]:
    """p_i = a_i / a_(i-1) from unconditional per-position rates a_i (a_0 = 1)."""
    out = []
    before = 1.0
    for a in per_position:
        out.append(min(1.0, a / before) if before > 0 else 0.0)
        before = a
    return tuple(out)


def accepted_counts(records: Sequence[RequestRecord], k: int) -> list[int]:
    """Accepted drafts of every verify chunk with all k drafts usable."""
    out = []
    for r in records:
        if not r.ok or len(r.chunk_tokens) < 2:
            continue
        before = r.chunk_tokens[0]
        wanted = max(r.output_tokens, sum(r.chunk_tokens))
        for n in r.chunk_tokens[1:]:
            if wanted - before > k and 1 <= n <= k + 1:
                out.append(n - 1)
            before += n
    return out


def fit_acceptance(
    points: Sequence[tuple[Sequence[RequestRecord], Sequence[float] | None]],
    *,
    k: int,
    temperature: float,
) -> AcceptanceFit:
    """Pool the acceptance of training points (records, server per-position rates or None).

    Raises:
        SimulationError: no verify step in the records and no counters.
    """
    counts = [a for records, _ in points for a in accepted_counts(records, k)]
    reach = [sum(1 for a in counts if a >= i) for i in range(k + 1)]  # reach[i]: accepted >= i
    from_chunks = tuple(reach[i] / reach[i - 1] if reach[i - 1] else 0.0 for i in range(1, k + 1))
    counters = [per for _, per in points]
    if counters and all(per is not None and len(per) == k for per in counters):
        # weight each point's rates by its verifies (equal when the chunks saw none)
        weights = [max(len(accepted_counts(records, k)), 1) for records, _ in points]
        pooled = [
            sum(w * per[i] for w, per in zip(weights, counters, strict=True) if per is not None)
            / sum(weights)
            for i in range(k)
        ]
        probs, source = conditional_from_counters(pooled), "counters"
    elif counts:
        probs, source = from_chunks, "chunks"
    else:
        raise SimulationError(
            "the training runs show no verify step and no spec-decode counters",
            fix="measure the speculative deployment with outputs longer than k + 1 tokens",
        )
    stderr = tuple(
        math.sqrt(p * (1 - p) / reach[i]) if reach[i] else None for i, p in enumerate(probs)
    )
    return AcceptanceFit(temperature, probs, stderr, len(counts), source, from_chunks)
