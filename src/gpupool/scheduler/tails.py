"""The summary of a sorted queue that the walk reads to answer the rest of a queue at once
(`Tail`), and its part kept across cycles (`LastKeys`, brought up to date by classification
from the entries each queue dropped and added). Pure: no I/O.

Queue entries are (order key, workload, shape, GPU milli) (gpupool.scheduler.queues.
Candidate), sorted, with unique keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import accumulate
from operator import itemgetter
from typing import Any

from gpupool.scheduler.capacity import Shape

_key_of = itemgetter(0)
_shape_of = itemgetter(2)
_milli_of = itemgetter(3)


class LastKeys:
    """Of one sorted queue, per shape (compared by value): how many entries have it
    (`count`) and the order key of the last one (`last`). Kept across cycles: `update`
    applies what changed (O(changes), plus a scan from the end where a shape's last entry
    went), so a changed queue is not hashed whole again (a Shape hashes all its fields)."""

    __slots__ = ("count", "last")

    def __init__(self) -> None:
        self.count: dict[Shape, int] = {}
        self.last: dict[Shape, tuple] = {}

    def update(self, q: Sequence[Any], drop: Sequence[Any], add: Sequence[Any]) -> None:
        """`q`: the queue now, that is the queue these counts were of without the entries
        `drop` and with the entries `add` (in any order). Built afresh from `q` (C-level
        passes) where the changes are two thirds as many as its entries or more (the first
        cycle, a refill): about 0.37 us per change against 0.23 us per entry."""
        if 3 * (len(drop) + len(add)) >= 2 * len(q):
            self.count = Counter(map(_shape_of, q))
            self.last = dict(zip(map(_shape_of, q), map(_key_of, q), strict=True))
            return
        count, last = self.count, self.last
        stale: set[Shape] = set()  # shapes whose last entry went
        for e in drop:
            s = e[2]
            n = count[s] - 1
            if n:
                count[s] = n
                if last[s] == e[0]:
                    stale.add(s)
            else:
                del count[s], last[s]
                stale.discard(s)
        for e in add:
            s = e[2]
            had = count.get(s)
            if had is None:
                count[s] = 1
                last[s] = e[0]
            else:
                count[s] = had + 1
                if s not in stale and e[0] > last[s]:
                    last[s] = e[0]
        if stale:
            for e in reversed(q):  # each one's last entry now, from the end
                if e[2] in stale:
                    last[e[2]] = e[0]
                    stale.discard(e[2])
                    if not stale:
                        break


class Tail:
    """Per position of a sorted queue: the smallest GPU milli from there to the end, and
    the distinct shapes from there on (the cycle answers the rest of a queue at once with
    them). Built on first use with C-level loops; `last` (LastKeys.last of this very queue,
    where classification keeps one) spares hashing every entry's shape."""

    __slots__ = ("_q", "_min_milli", "_last", "_last_pos")

    def __init__(self, q: list[Any], last: dict[Shape, tuple] | None = None):
        self._q = q
        self._min_milli: list[int] | None = None
        self._last = last
        self._last_pos: dict[Shape, int] | None = None

    @property
    def min_milli(self) -> list[int]:
        """Per position, the smallest GPU milli from there to the end."""
        if self._min_milli is None:
            low = list(accumulate(reversed(list(map(_milli_of, self._q))), min))
            low.reverse()
            self._min_milli = low
        return self._min_milli

    def shapes_from(self, i: int) -> list[Shape]:
        """The distinct shapes of the queue from position `i` on."""
        if self._last is not None:
            key = self._q[i][0]
            return [s for s, k in self._last.items() if k >= key]
        if self._last_pos is None:  # shape -> the last position it occurs at
            q = self._q
            self._last_pos = dict(zip(map(_shape_of, q), range(len(q)), strict=True))
        return [s for s, j in self._last_pos.items() if j >= i]
