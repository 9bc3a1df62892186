"""The input profile as the user gave it, against the winner (core): the baseline candidate,
and the verdict's first line.

`as_is_line` says what the winner gains in goodput per GPU against the profile as it is
(tune.json's `as_is`, built by `tune.document`): predicted by one calibration for both at
the full request count, and measured when verification measured both ('measured: not
verified' otherwise), with its edges: a tie within `TIE`, a winner the profile beats, the
profile as the winner itself, meeting the SLO at no load tried, nothing meeting it, a
profile that cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass

from servekit.results.tune import AsIs
from servekit.tune.search import TIE, Candidate


@dataclass(frozen=True, slots=True)
class Baseline:
    """The input profile as the user gave it, as a candidate.

    Attributes:
        candidate: its settings and plan (the space's own candidate when it holds them).
        in_space: the search space holds it, so the search ranked it like any other.
    """

    candidate: Candidate
    in_space: bool


def gain(winner: float | None, as_is: float | None) -> float | None:
    """winner / as_is - 1 (to 4 places), or None when either has no goodput."""
    if winner is None or as_is is None or winner <= 0 or as_is <= 0:
        return None
    return round(winner / as_is - 1, 4)


def _per_gpu(value: float) -> str:
    return f"{value:.4g} req/s per GPU"


def _measured_text(a: AsIs) -> str:
    """The measured half of the comparison, for the parenthesis after 'predicted'."""
    mine, theirs = a.measured_goodput_per_gpu, a.winner_measured_goodput_per_gpu
    if mine is None:
        return "measured: not verified"
    if a.id == a.winner_id:
        return f"measured {_per_gpu(mine)}"
    if theirs is None:
        return "measured: the winner not verified"
    if a.gain_measured is not None:
        return f"measured {a.gain_measured:+.1%}"
    if theirs > 0:
        winner = _per_gpu(theirs)
        return f"measured: your profile as-is met it at no load measured, the winner {winner}"
    if mine > 0:
        own = _per_gpu(mine)
        return f"measured: the winner met it at no load measured, your profile as-is {own}"
    return "measured: neither met it at a load measured"


def as_is_line(a: AsIs, load_unit: str) -> str:
    """The verdict's first line: what the winner gains in goodput per GPU against the input
    profile as it is, predicted (one calibration for both) and measured (when verification
    measured both; else 'measured: not verified').

    Its edges: the profile cannot run, meets the SLO at no load tried, is the winner itself,
    or nothing meets the SLO.
    """
    winner = a.winner_predicted_goodput_per_gpu or 0.0
    mine = a.predicted.goodput_per_gpu if a.predicted is not None else 0.0
    measured = _measured_text(a)
    if a.predicted is None:
        why = f": {a.reason}" if a.reason else ""
        head = (
            f"the winner reaches {_per_gpu(winner)} (predicted; {measured})"
            if winner > 0
            else "no candidate meets the SLO at any load tried"
        )
        return f"{head}; your profile as-is cannot run{why}"
    if winner <= 0 and mine <= 0:
        return "no candidate meets the SLO at any load tried, nor does your profile as-is"
    if winner <= 0:
        return (
            f"your profile as-is meets the SLO up to {a.predicted.load:g} {load_unit}, "
            f"{_per_gpu(mine)} (predicted); no candidate of the space meets it at any load tried"
        )
    if a.id == a.winner_id:
        return (
            f"your profile as-is is already the best found: {_per_gpu(mine)} "
            f"(predicted; {measured})"
        )
    if mine <= 0:
        return (
            f"your profile as-is meets the SLO at no load tried; the winner reaches "
            f"{_per_gpu(winner)} (predicted; {measured})"
        )
    gain = a.gain_predicted if a.gain_predicted is not None else winner / mine - 1
    line = f"{gain:+.1%} goodput per GPU against your profile as-is (predicted; {measured})"
    decided = a.gain_measured if a.gain_measured is not None else gain
    if decided < 0:
        how = "measured" if a.gain_measured is not None else "predicted"
        return f"{line}: your profile as-is {how} better"
    if abs(gain) < TIE and a.gain_measured is None:
        return f"{line}: within {TIE:.0%}, which the search counts as a tie"
    return line
