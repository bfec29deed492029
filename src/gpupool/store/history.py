"""Repository for GPU history: utilization and memory per GPU over time, bounded in size.

Two resolutions share one table (`gpu_history`): per-minute rows (`FINE_S`), written by the
server's history loop from the telemetry samples, and hourly rows (`COARSE_S`), rolled up from
the minutes by `rollup()`. `prune()` drops minutes older than `Retention.fine_keep_s` (two days)
and hours older than `Retention.coarse_keep_s` (90 days), so a GPU never has more than
`Retention.rows_per_gpu` rows (2 880 + 2 160 + 2 = 5 042 by default).

Means (utilization, memory, power) are weighted by each row's `samples` when rows are merged
or rolled up; maxima stay maxima. Times are epoch seconds, each row's `t` the start of its
period. The same SQL runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import case, delete, func, insert, literal_column, select
from sqlalchemy.orm import Session

from gpupool.store.rows import GpuHistoryRow as R

FINE_S = 60
COARSE_S = 3600


@dataclass(frozen=True, slots=True)
class Retention:
    """How long each resolution is kept (seconds)."""

    fine_s: int = FINE_S
    fine_keep_s: int = 2 * 86400
    coarse_s: int = COARSE_S
    coarse_keep_s: int = 90 * 86400

    def __post_init__(self) -> None:
        if not (0 < self.fine_s < self.coarse_s and self.coarse_s % self.fine_s == 0):
            raise ValueError("the coarse resolution must be a multiple of the fine one")
        if self.fine_keep_s < self.coarse_s or self.coarse_keep_s < self.fine_keep_s:
            raise ValueError("keep at least an hour of minutes, and hours longer than minutes")

    @property
    def rows_per_gpu(self) -> int:
        """The most rows one GPU has after a prune (each kept window plus the open periods)."""
        return self.fine_keep_s // self.fine_s + self.coarse_keep_s // self.coarse_s + 2


@dataclass(frozen=True, slots=True)
class GpuPeriod:
    """One GPU over one period: means and maxima of its samples. None: never reported."""

    gpu_uuid: str
    t: int
    samples: int
    util: float | None = None
    util_max: float | None = None
    memory_mib: float | None = None
    memory_mib_max: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    node: str = ""

    def merged(self, other: GpuPeriod) -> GpuPeriod:
        """This period and `other` (same GPU and period) as one: weighted means, maxima."""
        a, b = self.samples, other.samples

        def mean(x: float | None, y: float | None) -> float | None:
            if x is None or y is None:
                return y if x is None else x
            return (x * a + y * b) / (a + b) if a + b else x

        def most(x: float | None, y: float | None) -> float | None:
            return y if x is None else x if y is None else max(x, y)

        return replace(
            self,
            samples=a + b,
            util=mean(self.util, other.util),
            util_max=most(self.util_max, other.util_max),
            memory_mib=mean(self.memory_mib, other.memory_mib),
            memory_mib_max=most(self.memory_mib_max, other.memory_mib_max),
            power_w=mean(self.power_w, other.power_w),
            temperature_c=most(self.temperature_c, other.temperature_c),
            node=self.node or other.node,
        )


#: (middle of the periods averaged, utilization %, memory MiB, power W, temperature C)
BucketPoint = tuple[float, float | None, float | None, float | None, float | None]
_FIELDS = ("util", "util_max", "memory_mib", "memory_mib_max", "power_w", "temperature_c")


def _period(r: R) -> GpuPeriod:
    return GpuPeriod(r.gpu_uuid, int(r.t), r.samples, *(getattr(r, f) for f in _FIELDS), r.node)


def _wmean(col):  # type: ignore[no-untyped-def]
    """The samples-weighted mean of `col` over a group (NULLs left out)."""
    return func.sum(col * R.samples) / func.sum(case((col.is_not(None), R.samples)))


class HistoryRepo:
    def __init__(self, s: Session):
        self.s = s

    def add(self, periods: Iterable[GpuPeriod], resolution_s: int = FINE_S) -> int:
        """Store `periods` at `resolution_s`; a period already stored is merged with the new
        one (weighted by samples). Returns how many periods were given."""
        todo: dict[tuple[str, int], GpuPeriod] = {}
        for p in periods:
            if p.t % resolution_s:
                raise ValueError(f"period start {p.t} is not a multiple of {resolution_s} s")
            key = (p.gpu_uuid, p.t)
            todo[key] = todo[key].merged(p) if key in todo else p
        if not todo:
            return 0
        existing = [
            row
            for row in self.s.scalars(
                select(R).where(
                    R.resolution_s == resolution_s,
                    R.gpu_uuid.in_({u for u, _ in todo}),
                    R.t.in_({t for _, t in todo}),
                )
            )
            if (row.gpu_uuid, int(row.t)) in todo
        ]
        for row in existing:
            p = _period(row).merged(todo.pop((row.gpu_uuid, int(row.t))))
            row.samples = p.samples
            for f in _FIELDS:
                setattr(row, f, getattr(p, f))
            row.node = p.node
        if todo:
            self.s.execute(
                insert(R),
                [
                    {
                        "gpu_uuid": p.gpu_uuid,
                        "resolution_s": resolution_s,
                        "t": p.t,
                        "node": p.node,
                        "samples": p.samples,
                        **{f: getattr(p, f) for f in _FIELDS},
                    }
                    for p in todo.values()
                ],
            )
        self.s.flush()
        return len(todo) + len(existing)

    def rollup(self, since: int, until: int, *, fine_s: int = FINE_S, coarse_s: int = COARSE_S):
        """(Re)compute the `coarse_s` rows of periods in [since, until) from the `fine_s` rows
        (idempotent: those coarse rows are replaced). Returns how many were written."""
        since, until = since - since % coarse_s, until - until % coarse_s
        if until <= since:
            return 0
        self.s.execute(delete(R).where(R.resolution_s == coarse_s, R.t >= since, R.t < until))
        start = R.t - R.t % coarse_s
        rows = (
            select(
                R.gpu_uuid,
                literal_column(str(int(coarse_s))),
                start,
                func.max(R.node),
                func.sum(R.samples),
                _wmean(R.util),
                func.max(R.util_max),
                _wmean(R.memory_mib),
                func.max(R.memory_mib_max),
                _wmean(R.power_w),
                func.max(R.temperature_c),
            )
            .where(R.resolution_s == fine_s, R.t >= since, R.t < until)
            .group_by(R.gpu_uuid, start)
        )
        cols = ["gpu_uuid", "resolution_s", "t", "node", "samples", *_FIELDS]
        self.s.execute(insert(R).from_select(cols, rows))
        written = select(func.count()).where(R.resolution_s == coarse_s, R.t >= since, R.t < until)
        return int(self.s.scalar(written) or 0)

    def prune(self, now: float, retention: Retention) -> int:
        """Drop rows past their resolution's retention. Returns how many were dropped."""
        n = 0
        for res, keep in (
            (retention.fine_s, retention.fine_keep_s),
            (retention.coarse_s, retention.coarse_keep_s),
        ):
            cutoff = int(now) - keep
            cutoff -= cutoff % res
            r = self.s.execute(delete(R).where(R.resolution_s == res, R.t < cutoff))
            n += int(r.rowcount or 0)
        return n

    def newest(self, resolution_s: int) -> int | None:
        """The start of the newest period stored at `resolution_s` (any GPU)."""
        v = self.s.scalar(select(func.max(R.t)).where(R.resolution_s == resolution_s))
        return None if v is None else int(v)

    def oldest(self, resolution_s: int) -> int | None:
        v = self.s.scalar(select(func.min(R.t)).where(R.resolution_s == resolution_s))
        return None if v is None else int(v)

    def periods(self, gpu_uuid: str, resolution_s: int) -> list[GpuPeriod]:
        """One GPU's periods at one resolution, oldest first."""
        q = select(R).where(R.gpu_uuid == gpu_uuid, R.resolution_s == resolution_s).order_by(R.t)
        return [_period(r) for r in self.s.scalars(q)]

    def rows_per_gpu(self) -> dict[str, dict[int, int]]:
        """GPU uuid -> resolution -> rows stored."""
        out: dict[str, dict[int, int]] = {}
        q = select(R.gpu_uuid, R.resolution_s, func.count()).group_by(R.gpu_uuid, R.resolution_s)
        for uuid, res, n in self.s.execute(q):
            out.setdefault(uuid, {})[int(res)] = int(n)
        return out

    def buckets(
        self,
        uuids: Sequence[str],
        *,
        start: int,
        width: int,
        count: int,
        resolution_s: int,
        until: int | None = None,
        since: int | None = None,
    ) -> dict[str, list[BucketPoint]]:
        """Per GPU, the samples-weighted means of its `resolution_s` rows in each of `count`
        slots of `width` seconds from `start` (only slots that have rows; rows in
        [max(start, since), until) count). Each point is at the middle of the periods it
        averages (so a caller may re-bucket it on a grid of its own), oldest first."""
        if not uuids or width <= 0 or count <= 0:
            return {}
        lo = start if since is None else max(start, since)
        hi = start + width * count if until is None else min(until, start + width * count)
        slot = (R.t - start) // width
        q = (
            select(
                R.gpu_uuid,
                func.avg(R.t),
                _wmean(R.util),
                _wmean(R.memory_mib),
                _wmean(R.power_w),
                func.max(R.temperature_c),
            )
            .where(
                R.resolution_s == resolution_s,
                R.gpu_uuid.in_(list(uuids)),
                R.t >= lo,
                R.t < hi,
            )
            .group_by(R.gpu_uuid, slot)
            .order_by(R.gpu_uuid, slot)
        )
        out: dict[str, list[BucketPoint]] = {}
        for uuid, t, u, m, p, temp in self.s.execute(q):
            mid = float(t) + resolution_s / 2  # the middle of the rows the slot holds
            out.setdefault(uuid, []).append((mid, _f(u), _f(m), _f(p), _f(temp)))
        return out


def _f(v: object) -> float | None:
    return None if v is None else float(v)  # type: ignore[arg-type]
