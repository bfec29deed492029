"""An ordered bucket index: integer items filed under orderable keys.

Used by the capacity index to find, without scanning every node, the node (or GPU) with the
smallest key at or above a bound that also passes a predicate. Within one key the lowest item
id wins (`find`), or the best score among passing items spread over the whole key
(`find_spread`), so results are deterministic. Each key keeps its items in a sorted list
(`set` moves an item with two binary searches); results depend only on which items are filed
under which keys, never on the history of `set`s.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterator
from functools import lru_cache
from operator import itemgetter
from typing import Any

Key = Any  # an orderable, hashable key (int or tuple of ints)


@lru_cache(maxsize=4096)
def probe_ranges(size: int, limit: int) -> tuple[tuple[int, int], ...]:
    """The rank ranges `find_spread` probes in a bucket of `size` live items (`size` >
    `limit`): `limit` evenly spaced starts, the first and the last rank included, each
    looking at most 4 items and never past the next start."""
    last = limit - 1
    out = []
    for j in range(limit):
        start = j * (size - 1) // last if last else 0
        nxt = (j + 1) * (size - 1) // last if j < last else size
        out.append((start, min(nxt, start + 4)))
    return tuple(out)


@lru_cache(maxsize=4096)
def probe_starts(size: int, limit: int) -> Callable[[list[int]], tuple[int, ...]]:
    """Reads the item at the first rank of each of `probe_ranges(size, limit)` from a
    bucket's live items, in one call (a tuple also for one range: `itemgetter` of one index
    would give the item itself)."""
    starts = [start for start, _ in probe_ranges(size, limit)]
    if len(starts) == 1:
        first = starts[0]
        return lambda live: (live[first],)
    return itemgetter(*starts)


class BucketIndex:
    """Items (ints) filed under keys; `find` returns the smallest key >= bound that passes."""

    __slots__ = ("_keys", "_where", "_sorted")

    def __init__(self) -> None:
        self._keys: list[Key] = []  # sorted keys that hold at least one item
        self._where: dict[int, Key] = {}
        #: per key its items in increasing order
        self._sorted: dict[Hashable, list[int]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def key_of(self, item: int) -> Key | None:
        return self._where.get(item)

    def set(self, item: int, key: Key | None) -> None:
        """File `item` under `key` (None removes it)."""
        where = self._where
        old = where.get(item)
        if old == key:
            return
        if old is not None:
            live = self._sorted[old]
            if len(live) == 1:
                del self._sorted[old]
                self._keys.pop(bisect_left(self._keys, old))
            else:
                del live[bisect_left(live, item)]
        if key is None:
            del where[item]
            return
        where[item] = key
        items = self._sorted.get(key)
        if items is None:
            self._sorted[key] = [item]
            insort(self._keys, key)
        else:
            insort(items, item)

    def load(self, pairs: list[tuple[int, Key]]) -> None:
        """Fill an empty index with (item, key) pairs, items in increasing order."""
        assert not self._where, "load() fills an empty index"
        live = self._sorted
        for item, key in pairs:
            if key is None:
                continue
            self._where[item] = key
            items = live.get(key)
            if items is None:
                live[key] = [item]
            else:
                items.append(item)
        self._keys = sorted(live)

    def max_key(self) -> Key | None:
        return self._keys[-1] if self._keys else None

    def keys(self) -> list[Key]:
        return list(self._keys)

    def counted(self) -> list[tuple[Key, int]]:
        """(key, how many items are filed under it), keys in increasing order."""
        live = self._sorted
        return [(k, len(live[k])) for k in self._keys]

    def buckets_from(self, lo: Key) -> Iterator[tuple[Key, list[int]]]:
        """(key, its items in increasing order) for each key >= `lo`, smallest first. The
        lists are the index's own: read-only, and only until the next `set`."""
        keys = self._keys
        live = self._sorted
        for i in range(bisect_left(keys, lo), len(keys)):
            key = keys[i]
            yield key, live[key]

    def items_under(self, key: Key) -> list[int]:
        """Items under `key`, lowest id first."""
        return list(self._sorted.get(key, ()))

    def find(
        self,
        lo: Key,
        pred: Callable[[int], bool],
        key_ok: Callable[[Key], bool] | None = None,
    ) -> tuple[int, Key] | None:
        """The item with the smallest key >= `lo` (then the lowest id) for which `pred` holds.

        `key_ok` skips whole buckets cheaply. Returns (item, key) or None.
        """
        for key, live in self.buckets_from(lo):
            if key_ok is not None and not key_ok(key):
                continue
            for item in live:
                if pred(item):
                    return item, key
        return None

    def find_spread(
        self,
        lo: Key,
        pred: Callable[[int], bool],
        score: Callable[[int, Key], float],
        key_ok: Callable[[Key], bool] | None = None,
        limit: int = 16,
    ) -> tuple[int, Key] | None:
        """Like `find`, but scoring: the items compared are spread over the whole bucket instead
        of its lowest ids: `limit` probes at evenly spaced ranks of the bucket's live items,
        the first and the last included (all of them when it has no more), each taking the
        first passing item at or after its rank, looking at most 4 items and never past the
        next probe. The lowest `score(item, key)` wins (ties: the lowest id). If no probe
        finds a passing item, the lowest passing id of the bucket (as `find`), so a bucket
        with a passing item always answers. Deterministic: only the live items in id order
        decide.

        Why: ids follow registration order, so the lowest ids are often nodes of one kind;
        comparing only those misses better nodes of another kind."""
        keys = self._keys
        for i in range(bisect_left(keys, lo), len(keys)):
            key = keys[i]
            if key_ok is not None and not key_ok(key):
                continue
            live = self._sorted[key]
            size = len(live)
            best: tuple[float, int] | None = None
            if size <= limit:
                for item in live:
                    if pred(item):
                        cand = (score(item, key), item)
                        if best is None or cand < best:
                            best = cand
                if best is not None:
                    return best[1], key
                continue
            for start, stop in probe_ranges(size, limit):
                for r in range(start, stop):
                    item = live[r]
                    if pred(item):
                        cand = (score(item, key), item)
                        if best is None or cand < best:
                            best = cand
                        break
            if best is not None:
                return best[1], key
            for item in live:
                if pred(item):
                    return item, key
        return None
