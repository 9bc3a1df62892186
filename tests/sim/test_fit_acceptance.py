"""Tests of acceptance measured from a run (servekit.sim.fit_acceptance): known answers."""

from __future__ import annotations

import pytest

from servekit.errors import SimulationError
from servekit.records import RequestRecord
from servekit.sim.fit_acceptance import accepted_counts, conditional_from_counters, fit_acceptance


def record(tokens: tuple[int, ...], output: int | None = None) -> RequestRecord:
    """A successful request whose chunks carried `tokens` (times 1 ms apart)."""
    times = tuple(1_000_000 * (i + 1) for i in range(len(tokens)))
    return RequestRecord(
        id="r", point="c=1", scheduled_ns=0, sent_ns=0, first_token_ns=times[0],
        first_answer_ns=times[0], end_ns=times[-1], chunk_ns=times, chunk_tokens=tokens,
        prompt_tokens=8, output_tokens=sum(tokens) if output is None else output,
    )  # fmt: skip


def test_conditional_from_unconditional_rates() -> None:
    """p_i = a_i / a_(i-1): rates 0.8, 0.4, 0.1 are conditionals 0.8, 0.5, 0.25."""
    assert conditional_from_counters([0.8, 0.4, 0.1]) == pytest.approx((0.8, 0.5, 0.25))
    assert conditional_from_counters([0.0, 0.0]) == (0.0, 0.0)


def test_verify_chunks_count_accepted_drafts_with_all_k_usable() -> None:
    """Each verify chunk is accepted + 1 tokens; the prefill's token and the verifies near
    the end (k or fewer tokens still to generate) are left out."""
    # 15 tokens: prefill 1, then 4, 2, 1, 3, 1 (12 so far), then 3 with only 3 left: dropped
    assert accepted_counts([record((1, 4, 2, 1, 3, 1, 3))], k=3) == [3, 1, 0, 2, 0]


def test_chunk_estimate_and_its_standard_error() -> None:
    """From accepted counts 3, 1, 0, 2, 0: p1 = 3/5, p2 = 2/3, p3 = 1/2, binomial errors."""
    fit = fit_acceptance([((record((1, 4, 2, 1, 3, 1, 3)),), None)], k=3, temperature=0.0)
    assert fit.source == "chunks"
    assert fit.verifies == 5
    assert fit.probabilities == pytest.approx((0.6, 2 / 3, 0.5))
    assert fit.stderr[0] == pytest.approx((0.6 * 0.4 / 5) ** 0.5)
    assert fit.stderr[2] == pytest.approx((0.25 / 2) ** 0.5)


def test_counters_win_when_every_point_has_them() -> None:
    """With the server's per-position rates on every point, the conditionals come from them
    (weighted by each point's verifies); the chunks' estimate is kept beside."""
    a = record((1, 4, 2, 1, 3, 1, 3))  # 5 verifies
    b = record((1, 4, 4, 4, 3))  # 3 verifies (the last had only 3 tokens left)
    fit = fit_acceptance([((a,), [0.6, 0.4, 0.2]), ((b,), [1.0, 1.0, 1.0])], k=3, temperature=0.7)
    pooled = [(5 * 0.6 + 3 * 1.0) / 8, (5 * 0.4 + 3 * 1.0) / 8, (5 * 0.2 + 3 * 1.0) / 8]
    assert fit.source == "counters"
    assert fit.probabilities == pytest.approx(conditional_from_counters(pooled))
    assert fit.from_chunks == pytest.approx((6 / 8, 5 / 6, 4 / 5))
    assert fit.temperature == 0.7


def test_no_verify_and_no_counters_is_an_error() -> None:
    """Speculative training runs that show no verify step say what to measure."""
    with pytest.raises(SimulationError, match="no verify step"):
        fit_acceptance([((record((1,)),), None)], k=3, temperature=0.0)
