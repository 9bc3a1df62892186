"""The paged KV block pool with automatic prefix caching, as vLLM V1 runs it (core).

A full block of a request's tokens is named by a chain hash (its parent block's hash and
its own token ids), so two requests share a block only when everything before it matches
too. A request's blocks are its cached full blocks (always a prefix of its block list,
hashed in order) followed by uncached ones (the partial tail, or full blocks whose token
ids are unknown). Freed blocks keep their hash and wait in vLLM's free queue: uncached
blocks go to its head and are reused first, cached blocks to its tail in the order they
were freed (a request frees its tail first), so a cached block is evicted only when a new
block is needed and no uncached free block is left, oldest first. Blocks held by running
requests are reference-counted and never evicted.

Uncached blocks carry no identity here (any one serves as well as another), so they are a
count; cached blocks are objects, because which one a hit lands on decides what stays.
"""

from __future__ import annotations

from collections.abc import Sequence

# The parent hash of a request's first block (vLLM seeds its chain with a constant too).
ROOT_HASH = 0x5E_4B_17


def chain_hash(parent: int, block_token_ids: tuple[int, ...]) -> int:
    """The hash naming a full block: its parent's hash and its own token ids.

    Python's hash of a tuple of ints does not depend on PYTHONHASHSEED, so the names are
    the same in every process.
    """
    return hash((parent, block_token_ids))


def block_hashes(token_ids: Sequence[int], block_size: int, parent: int = ROOT_HASH) -> list[int]:
    """The chain hashes of every full block of a token sequence (a partial tail has none)."""
    hashes = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = chain_hash(parent, tuple(token_ids[start : start + block_size]))
        hashes.append(parent)
    return hashes


class CachedBlock:
    """A KV block with a hash: found by later requests until it is evicted."""

    __slots__ = ("block_hash", "refs")

    def __init__(self, block_hash: int) -> None:
        self.block_hash = block_hash
        self.refs = 1  # created by the request that filled it


class BlockPool:
    """The engine's KV blocks: free ones (uncached or evictable) and cached ones by hash.

    Attributes:
        num_blocks: blocks in the pool.
        caching: prefix caching on (vLLM's --enable-prefix-caching).
        uncached_free: free blocks without a hash (reused first).
        evictions: cached blocks evicted so far to make room for new ones.
    """

    def __init__(self, num_blocks: int, *, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.uncached_free = num_blocks
        self.evictions = 0
        # vLLM keeps every block of a hash and hands out the first; duplicates appear when
        # a request recomputes a block it could not take from the cache (its last one).
        self._by_hash: dict[int, list[CachedBlock]] = {}
        # Cached blocks nobody holds, in eviction order (dicts keep insertion order).
        self._evictable: dict[CachedBlock, None] = {}

    @property
    def free(self) -> int:
        """Blocks a request could be given now: uncached free ones plus evictable ones."""
        return self.uncached_free + len(self._evictable)

    @property
    def evictable(self) -> int:
        """Cached blocks no request holds (kept for hits, given away under pressure)."""
        return len(self._evictable)

    @property
    def cached(self) -> int:
        """Blocks with a hash, held or not."""
        return sum(len(blocks) for blocks in self._by_hash.values())

    def take(self, count: int) -> None:
        """Give `count` new (uncached) blocks to a request, evicting the oldest cached
        free blocks only once no uncached free block is left.

        The caller checks `count <= free` first.
        """
        if count <= self.uncached_free:
            self.uncached_free -= count
            return
        assert count <= self.free, "take() beyond the free blocks"
        for _ in range(count - self.uncached_free):
            block = next(iter(self._evictable))
            del self._evictable[block]
            self._forget(block)
            self.evictions += 1
        self.uncached_free = 0

    def _forget(self, block: CachedBlock) -> None:
        same = self._by_hash[block.block_hash]
        same.remove(block)
        if not same:
            del self._by_hash[block.block_hash]

    def longest_hit(self, hashes: Sequence[int], max_blocks: int) -> list[CachedBlock]:
        """The cached blocks of the longest run of `hashes` from the start, at most
        `max_blocks` long (a miss ends the run: every later hash chains through it)."""
        hit: list[CachedBlock] = []
        by_hash = self._by_hash
        for block_hash in hashes[:max_blocks]:
            same = by_hash.get(block_hash)
            if same is None:
                break
            hit.append(same[0])
        return hit

    def hold(self, blocks: Sequence[CachedBlock]) -> None:
        """Hold hit blocks for a request (taking evictable ones out of the free queue)."""
        evictable = self._evictable
        for block in blocks:
            if block.refs == 0:
                del evictable[block]
            block.refs += 1

    def cache(self, block_hash: int) -> CachedBlock:
        """Name one of a request's uncached blocks, now full, by its hash."""
        block = CachedBlock(block_hash)
        self._by_hash.setdefault(block_hash, []).append(block)
        return block

    def release(self, cached: Sequence[CachedBlock], uncached: int) -> None:
        """Free a request's blocks: its uncached ones to the head of the free queue, its
        cached ones (tail first) to the tail once no other request holds them."""
        self.uncached_free += uncached
        evictable = self._evictable
        for block in reversed(cached):
            block.refs -= 1
            if block.refs == 0:
                evictable[block] = None
