"""Dynamic speculative decoding (core): the draft count k by batch size, checked and expanded.

vLLM V1 (as read in 0.32's `v1/spec_decode/dynamic/utils.py` and `v1/core/sched/
scheduler.py`) takes `speculative_config.num_speculative_tokens_per_batch_size`,
a list of inclusive ranges `[first_batch, last_batch, k]`. When the engine starts it checks
the list and expands it into a dense table, batch size -> k, for every batch size from 1 to
`max_num_seqs`; after each step the scheduler reads the table at the number of requests it
scheduled in that step, and that many drafts are proposed for each request that sampled a
token (verified in its next step). A batch size in a gap between ranges takes the k of the
range before it, one past the last range the last range's k, and every k is capped at
`num_speculative_tokens`. `dynamic_sd_lookup` is that check and expansion; the engine reads
the table (`EngineLimits.dynamic_sd_lookup`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from servekit.errors import SimulationError

__all__ = ["dynamic_sd_lookup"]

_KEY = "num_speculative_tokens_per_batch_size"


def _ranges(schedule: Sequence[Sequence[int]]) -> list[tuple[int, int, int]]:
    """The schedule's ranges checked one by one (as vLLM checks them), sorted by first batch."""
    if not schedule:
        raise SimulationError(
            f"{_KEY} is empty",
            fix="give [first_batch, last_batch, k] ranges, the first starting at batch size 1, "
            "or remove the key for a fixed num_speculative_tokens",
        )
    ranges = []
    for entry in schedule:
        if len(entry) != 3:
            raise SimulationError(
                f"{_KEY} entry {list(entry)} has {len(entry)} numbers, not 3",
                fix="write each range as [first_batch, last_batch, k]",
            )
        first, last, k = (int(value) for value in entry)
        shown = [first, last, k]
        if first < 1 or last < 1:
            raise SimulationError(
                f"{_KEY} range {shown} has a batch size below 1",
                fix="batch sizes count requests in a step and start at 1",
            )
        if first > last:
            raise SimulationError(
                f"{_KEY} range {shown} starts at batch size {first}, after its end {last}",
                fix=f"write the smaller batch size first: [{last}, {first}, {k}]",
            )
        if k < 0:
            raise SimulationError(
                f"{_KEY} range {shown} has k {k}",
                fix="use k 0 to stop drafting at those batch sizes",
            )
        ranges.append((first, last, k))
    ranges.sort(key=lambda entry: entry[0])
    for before, after in pairwise(ranges):
        if after[0] <= before[1]:
            raise SimulationError(
                f"{_KEY} ranges {list(before)} and {list(after)} overlap at batch size {after[0]}",
                fix=f"start the second range after batch size {before[1]}",
            )
    if ranges[0][0] != 1:
        raise SimulationError(
            f"{_KEY} starts at batch size {ranges[0][0]}, so smaller batches have no k",
            fix=f"start the first range at 1, e.g. [1, {ranges[0][1]}, {ranges[0][2]}]",
        )
    return ranges


def dynamic_sd_lookup(
    schedule: Sequence[Sequence[int]], *, max_num_seqs: int, num_speculative_tokens: int
) -> tuple[int, ...]:
    """Check a dynamic speculative decoding schedule and expand it, as vLLM does at start.

    Args:
        schedule: `num_speculative_tokens_per_batch_size`, inclusive `[first_batch,
            last_batch, k]` ranges in any order.
        max_num_seqs: the largest batch size the table must cover.
        num_speculative_tokens: the configured k, the most drafts any batch size gets.

    Returns:
        The table: entry `n` is k for a step that scheduled `n` requests, for `n` from 1 to
        `max_num_seqs`; entry 0 is 0 and unused. Batch sizes in a gap take the k of the
        range before them, those after the last range its k; each k is at most
        `num_speculative_tokens`. E.g. `[[1, 4, 3], [9, 16, 1]]` with `max_num_seqs` 20 and
        k 2 gives 2 for batch sizes 1-8 and 1 for 9-20.

    Raises:
        SimulationError: the schedule is empty, a range is not three numbers, has a batch
            size below 1, starts after its end or has a negative k, two ranges overlap, the
            first range does not start at 1; or `max_num_seqs` or `num_speculative_tokens`
            is below 1 (vLLM refuses to start on each of these).
    """
    if max_num_seqs < 1:
        raise SimulationError(
            f"max_num_seqs {max_num_seqs} leaves no batch size for {_KEY}",
            fix="set max_num_seqs to 1 or more",
        )
    if num_speculative_tokens < 1:
        raise SimulationError(
            f"{_KEY} needs num_speculative_tokens of 1 or more, not {num_speculative_tokens}",
            fix="set num_speculative_tokens to the largest k of the schedule",
        )
    ranges = _ranges(schedule)
    table = [0] * (max_num_seqs + 1)
    # A batch size takes the k of the last range starting at or below it: its own range,
    # or in a gap or past the last range the range before it.
    starts = [first for first, _, _ in ranges[1:]] + [max_num_seqs + 1]
    for (first, _, k), end in zip(ranges, starts, strict=True):
        capped = min(k, num_speculative_tokens)
        for batch_size in range(first, min(end, max_num_seqs + 1)):
            table[batch_size] = capped
    return tuple(table)
