"""What a tenant is owed within its guarantee, for `guarantee_kept` (docs/scenarios.md).

The scheduler promises a tenant below its guarantee that work which fits in what is left
of it (usage + request ≤ guarantee) may take borrowed GPUs back; work larger than that
would borrow and has no claim. `PendingSizes` keeps a tenant's waiting requests by size so
that the replay can ask, at every instant, how much of the guarantee its waiting work
could fill: the largest sizes first, as many of each as fit (exact when every size divides
the larger ones, as GPU counts 1, 2, 4, 8… do; a lower bound otherwise). Pure.
"""

from __future__ import annotations


class PendingSizes:
    """A multiset of waiting requests (milli-GPUs) of one tenant."""

    __slots__ = ("_count", "_desc")

    def __init__(self) -> None:
        self._count: dict[int, int] = {}
        self._desc: list[int] = []  # distinct sizes, largest first

    def add(self, milli: int) -> None:
        n = self._count.get(milli, 0)
        self._count[milli] = n + 1
        if n == 0:
            self._desc = sorted(self._count, reverse=True)

    def remove(self, milli: int) -> None:
        n = self._count[milli] - 1
        if n:
            self._count[milli] = n
        else:
            del self._count[milli]
            self._desc = sorted(self._count, reverse=True)

    def fill(self, room: int) -> int:
        """Milli-GPUs of waiting work that fit together in `room` (≤ room)."""
        left = room
        for size in self._desc:
            if size <= left:
                take = min(self._count[size], left // size) if size else 0
                left -= take * size
                if not left:
                    break
        return room - left
