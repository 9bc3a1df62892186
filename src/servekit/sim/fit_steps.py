"""Engine steps reconstructed from per-request chunk arrivals (core).

vLLM streams what one engine step produced as one chunk per advanced request, all at nearly
the same time; so the chunk arrivals of all requests of a load point fall into clusters, one
per step (or a few coalesced steps). From the clusters:

- a **cluster** starts a new step when the gap to the previous arrival exceeds `gap_ns`
  (a quarter of the median per-request chunk gap by default), or when a request already has
  a chunk in the current cluster (one chunk per request per step);
- the **interval** of a cluster runs from the previous cluster's first arrival to its own
  first arrival (the least delayed chunk); it is *busy* when some request was in flight at
  its start, else it *follows idle* time and starts at the earliest send among the requests
  it served: such an interval also holds the HTTP, tokenization and queueing time before the
  engine saw the request, which the step model does not price, so fits leave them out;
- without speculation a chunk of n > 1 tokens is n coalesced steps (the API server fell
  behind): a cluster holds as many steps as its smallest decode chunk, and each request's
  tokens are mapped back onto consecutive steps; with speculation a chunk is one verify step
  (accepted + 1 tokens), unless it carries more than k + 1;
- a request's **first token** marks the step that finished its prefill; a prompt longer
  than what the token budget leaves (`max_num_batched_tokens` less the step's decodes) was
  prefilled in chunks over the steps before, which deliver no chunk for it: the earlier
  chunks go to the preceding steps that started after the request was sent, and when there
  are none (nothing else was running, so those steps streamed nothing at all) they are
  added to the interval as prefill-only steps nobody saw;
- every request between its prefill step and its last token decodes (or verifies) in each
  step, with context = prompt + tokens so far - 1 (the last sampled token is not cached yet).

Preempted requests are not reconstructed (their recompute is invisible in the chunks); the
caller gets the run's preemption count to judge.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from servekit.errors import SimulationError
from servekit.records import RequestRecord
from servekit.sim.step_time import BatchShape

# A cluster boundary is a gap above this fraction of the median per-request chunk gap
# (about one step): chunks of one step arrive within tens of microseconds of each other.
GAP_FRACTION = 0.25


@dataclass(frozen=True, slots=True)
class StepInterval:
    """The time between two consecutive step ends and the steps it held.

    Attributes:
        start_ns: end of the previous step (or the earliest send after idle time).
        end_ns: first chunk arrival of this step.
        batches: the steps run in the interval, in order (usually one).
        after_idle: the engine had nothing in flight at start_ns (the interval holds the
            time before the engine saw the request).
        unseen_prefill_steps: prefill-only steps added because no chunk showed them.
    """

    start_ns: int
    end_ns: int
    batches: tuple[BatchShape, ...]
    after_idle: bool
    unseen_prefill_steps: int = 0

    @property
    def duration_s(self) -> float:
        """Length of the interval in seconds."""
        return (self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True, slots=True)
class Reconstruction:
    """The steps of one load point.

    Attributes:
        intervals: one per cluster, in time order.
        gap_ns: the cluster gap used.
        coalesced_chunks: chunks that carried more than one step's tokens.
        requests: requests reconstructed.
    """

    intervals: tuple[StepInterval, ...]
    gap_ns: int
    coalesced_chunks: int
    requests: int

    @property
    def steps(self) -> int:
        """Engine steps reconstructed."""
        return sum(len(i.batches) for i in self.intervals)


def default_gap_ns(records: Sequence[RequestRecord]) -> int:
    """A quarter of the median per-request chunk gap (1 ms when no request has two chunks)."""
    gaps = [b - a for r in records for a, b in itertools.pairwise(r.chunk_ns) if b > a]
    return max(1, int(GAP_FRACTION * statistics.median(gaps))) if gaps else 1_000_000


def deliveries(record: RequestRecord, gap_ns: int) -> list[tuple[int, int]]:
    """A request's (time, tokens) deliveries: chunks without tokens dropped, and a chunk
    arriving within `gap_ns` of the request's previous one merged into it (the client read
    both at once, or the server sent one step's output in two writes). The merged delivery
    keeps the later time."""
    out: list[tuple[int, int]] = []
    for t, n in zip(record.chunk_ns, record.chunk_tokens, strict=True):
        if n <= 0:
            continue
        if out and t - out[-1][0] <= gap_ns:
            out[-1] = (t, out[-1][1] + n)
        else:
            out.append((t, n))
    return out


def _clusters(records: Sequence[RequestRecord], gap_ns: int) -> list[list[tuple[int, int, int]]]:
    """Deliveries (time, request index, tokens) grouped into clusters."""
    events = sorted((t, i, n) for i, r in enumerate(records) for t, n in deliveries(r, gap_ns))
    out: list[list[tuple[int, int, int]]] = []
    members: set[int] = set()
    last = None
    for t, i, n in events:
        if last is None or t - last > gap_ns or i in members:
            out.append([])
            members = set()
        out[-1].append((t, i, n))
        members.add(i)
        last = t
    return out


def reconstruct_steps(
    records: Sequence[RequestRecord],
    *,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    gap_ns: int | None = None,
) -> Reconstruction:
    """Rebuild the engine steps of one load point from its records.

    Args:
        records: the point's requests (failed ones and ones without chunks are skipped).
        max_num_batched_tokens: the engine's token budget per step.
        num_speculative_tokens: k (0 without speculative decoding).
        gap_ns: cluster boundary gap; default `default_gap_ns(records)`.

    Raises:
        SimulationError: no successful record carries chunk times.
    """
    recs = [r for r in records if r.ok and r.chunk_ns and any(r.chunk_tokens)]
    if not recs:
        raise SimulationError(
            "no successful request carries chunk times to reconstruct steps from",
            fix="pass records written by servekit bench (streaming) or servekit sim run",
        )
    k = num_speculative_tokens
    gap = default_gap_ns(recs) if gap_ns is None else gap_ns
    clusters = _clusters(recs, gap)
    per_cluster, coalesced = _steps_per_cluster(clusters, k)
    last_of = list(itertools.accumulate(per_cluster))
    last_of = [s - 1 for s in last_of]
    first_of = [last - m + 1 for last, m in zip(last_of, per_cluster, strict=True)]
    reqs = _requests(recs, clusters, last_of, k)
    total = last_of[-1] + 1
    decodes: list[list[tuple[int, bool]]] = [[] for _ in range(total)]
    for req in reqs:
        for step, context, verify in req.decode_steps(k):
            decodes[step].append((context, verify))
    # a step starts at the previous cluster's first arrival (the first ones: the first send)
    starts = [min(r.sent_ns for r in recs)] * total
    for c in range(1, len(clusters)):
        for s in range(first_of[c], last_of[c] + 1):
            starts[s] = clusters[c - 1][0][0]
    prefills: list[list[tuple[int, int]]] = [[] for _ in range(total)]
    unseen: dict[int, list[tuple[int, int]]] = {}
    owner = [c for c, m in enumerate(per_cluster) for _ in range(m)]
    for req in sorted(reqs, key=lambda q: (q.record.sent_ns, q.record.chunk_ns[0])):
        pieces = _prefill_pieces(req, decodes, prefills, starts, max_num_batched_tokens, k)
        for at, piece in pieces:
            if at is None:
                unseen.setdefault(owner[req.prefill_step], []).append(piece)
            else:
                prefills[at].append(piece)
    intervals = []
    for c, cluster in enumerate(clusters):
        batches = [BatchShape((), (), (piece,), k) for piece in unseen.get(c, [])]
        batches += [_batch(decodes[s], prefills[s], k) for s in range(first_of[c], last_of[c] + 1)]
        busy = c > 0 and bool(decodes[first_of[c]])
        if busy:
            start = clusters[c - 1][0][0]
        else:
            sent = min(reqs[i].record.sent_ns for _, i, _ in cluster)
            start = sent if c == 0 else max(clusters[c - 1][0][0], sent)
        intervals.append(
            StepInterval(start, cluster[0][0], tuple(batches), not busy, len(unseen.get(c, [])))
        )
    return Reconstruction(tuple(intervals), gap, coalesced, len(recs))


def _steps_per_cluster(clusters: list[list[tuple[int, int, int]]], k: int) -> tuple[list[int], int]:
    """Steps each cluster holds, and how many chunks carried more than one step."""
    seen: set[int] = set()
    out = []
    coalesced = 0
    for cluster in clusters:
        sizes = [n for _, i, n in cluster if i in seen]
        m = 1
        if sizes:
            m = min(sizes) if k == 0 else max(1, -(-min(sizes) // (k + 1)))
        out.append(m)
        coalesced += sum(1 for _, _, n in cluster if n > k + 1)
        seen.update(i for _, i, _ in cluster)
    return out, coalesced


@dataclass(slots=True)
class _Req:
    record: RequestRecord
    chunks: list[tuple[int, int]]  # (step of the chunk, tokens)

    @property
    def prefill_step(self) -> int:
        """The step that finished the prefill (delivered the first token)."""
        return self.chunks[0][0]

    def decode_steps(self, k: int) -> list[tuple[int, int, bool]]:
        """(step, context, verifying) of every decode step after the prefill."""
        prompt = self.record.prompt_tokens
        wanted = max(self.record.output_tokens, sum(n for _, n in self.chunks))
        out = []
        if k == 0:
            # a chunk of n tokens ends n consecutive steps (never before the previous chunk)
            # (a delivery that cannot fit the steps before its cluster, because the request's
            # previous tokens hold them, is squeezed into its cluster's last step)
            steps: list[int] = []
            for step, n in self.chunks:
                floor = steps[-1] + 1 if steps else step - n + 1
                steps += [min(step, max(floor + j, step - n + 1 + j)) for j in range(n)]
            for before, step in enumerate(steps[1:], start=1):
                if step > steps[before - 1]:
                    out.append((step, prompt + before - 1, False))
            return out
        before = self.chunks[0][1]
        for step, n in self.chunks[1:]:
            # a delivery of more than k + 1 tokens is several verify steps ending here
            q = -(-n // (k + 1))
            for j in range(q):
                piece = min(k + 1, n - j * (k + 1))
                out.append((step - q + 1 + j, prompt + before - 1, wanted - before > 1))
                before += piece
        return out


def _requests(
    recs: list[RequestRecord],
    clusters: list[list[tuple[int, int, int]]],
    last_of: list[int],
    k: int,
) -> list[_Req]:
    reqs = [_Req(r, []) for r in recs]
    for c, cluster in enumerate(clusters):
        for _, i, n in cluster:
            reqs[i].chunks.append((last_of[c], n))
    for req in reqs:  # the first token alone came from the prefill step
        step, n = req.chunks[0]
        if n > 1:
            behind = n - 1 if k == 0 else -(-(n - 1) // (k + 1))  # steps after the prefill
            req.chunks[0] = (step - behind, 1)
            req.chunks.insert(1, (step, n - 1))
    return reqs


def _prefill_pieces(
    req: _Req,
    decodes: list[list[tuple[int, bool]]],
    prefills: list[list[tuple[int, int]]],
    starts: list[int],
    budget: int,
    k: int,
) -> list[tuple[int | None, tuple[int, int]]]:
    """(step or None for an unseen step, (chunk tokens, tokens computed before)) in order.

    The scheduler fills a prefill forward from the first step with room once the request is
    admitted: full room in each step, the rest in the step that finishes it (p). The start
    is the earliest step at or after the send from which the room before p falls short of
    the prompt (starting earlier, the prefill would have finished before p). When even all
    the room from the first step after the send to p is short, the missing tokens were
    prefilled in steps that streamed nothing, before those: full budget each.
    """
    prompt = req.record.prompt_tokens
    p = req.prefill_step

    def room(step: int) -> int:
        used = sum(k + 1 if verify else 1 for _, verify in decodes[step])
        return max(budget - used - sum(c for c, _ in prefills[step]), 0)

    first = p
    while first > 0 and starts[first - 1] >= req.record.sent_ns:
        first -= 1
    rooms = {step: room(step) for step in range(first, p)}
    start = first
    while sum(rooms[s] for s in range(start, p)) >= prompt:
        start += 1
    before = sum(rooms[s] for s in range(start, p))
    unseen: list[int] = []
    short = prompt - before - room(p)
    if start == first and short > 0:
        unseen = [budget] * -(-short // budget)
    plan: list[tuple[int | None, int]] = [(None, n) for n in unseen]
    plan += [(s, rooms[s]) for s in range(start, p) if rooms[s] > 0]
    out: list[tuple[int | None, tuple[int, int]]] = []
    done = 0
    for at, n in plan:
        piece = min(n, prompt - done - 1)  # p keeps at least one token
        if piece > 0:
            out.append((at, (piece, done)))
            done += piece
    out.append((p, (prompt - done, done)))
    return out


def _batch(decodes: list[tuple[int, bool]], prefills: list[tuple[int, int]], k: int) -> BatchShape:
    return BatchShape(
        tuple(c for c, verify in decodes if not verify),
        tuple(c for c, verify in decodes if verify),
        tuple(prefills),
        k,
    )


def running_at(rec: Reconstruction, times_ns: Sequence[int]) -> list[int]:
    """Requests in the step running at each time (0 in idle time): the reconstruction's
    view of /metrics' num_requests_running, to check it against the server's samples."""
    ends = [i.end_ns for i in rec.intervals]
    out = []
    for t in times_ns:
        index = bisect.bisect_left(ends, t)
        if index == len(ends) or t < rec.intervals[index].start_ns:
            out.append(0)
            continue
        batch = rec.intervals[index].batches[-1]
        out.append(
            len(batch.decode_contexts) + len(batch.verify_contexts) + len(batch.prefill_chunks)
        )
    return out
