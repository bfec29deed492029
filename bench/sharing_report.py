"""Pure parts of `bench/sharing.py`: share sizes, throughput math, goals and the Markdown report.

No GPU and no PyTorch needed; unit-tested in `tests/bench/test_sharing_report.py`.

A measurement is one (mode, N, workload) with the per-tenant iteration rates measured over the
same window. `exclusive` is each tenant alone on the whole GPU, one after another, so its
aggregate throughput is one tenant's rate: ``relative = sum(rates of N tenants) / exclusive``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

MODES = ("exclusive", "timeslice", "mps")
WORKLOADS = ("small", "matmul")
#: The enforcement each concurrent mode must have had for its row to count as that mode.
EXPECTED = {"timeslice": "policed", "mps": "mps"}
#: The issue's goals for gpupool shares (mode `mps`).
GOAL_MATMUL = 0.95  # saturating work, aggregate vs exclusive, every N
GOAL_SMALL_N8 = 5.0  # small work, aggregate vs exclusive at N = 8


def share_size(n: int, gpu_memory_mib: int) -> tuple[int, int]:
    """(milli, memory MiB) of one of `n` equal tenants of a GPU: 1000 // n and memory // n."""
    if n < 1:
        raise ValueError(f"tenant count must be >= 1, got {n}")
    if n > 1000:
        raise ValueError(f"at most 1000 tenants share a GPU (1 milli each), got {n}")
    return 1000 // n, gpu_memory_mib // n


def parse_counts(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (sorted, unique); a clear ValueError for anything else."""
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"tenant counts must be integers like 1,2,4,8, got {text!r}") from None
    if not counts or counts[0] < 1:
        raise ValueError(f"tenant counts must be >= 1, got {text!r}")
    return counts


@dataclass(frozen=True, slots=True)
class Measurement:
    mode: str
    n: int
    workload: str
    rates: tuple[float, ...]  # iterations/s of each tenant over the common window
    enforcement: tuple[str, ...] = ()
    extra: Mapping[str, object] = field(default_factory=dict)

    @property
    def aggregate(self) -> float:
        return sum(self.rates)


def jain(rates: Sequence[float]) -> float | None:
    """Jain's fairness index of the tenants' rates: 1 = equal, 1/N = one tenant got all."""
    if not rates:
        return None
    sq = sum(r * r for r in rates)
    return (sum(rates) ** 2) / (len(rates) * sq) if sq > 0 else None


def exclusive_rates(ms: Iterable[Measurement]) -> dict[str, float]:
    """Workload -> mean single-tenant rate over every exclusive measurement of it."""
    got: dict[str, list[float]] = {}
    for m in ms:
        if m.mode == "exclusive" and m.rates:
            got.setdefault(m.workload, []).append(m.aggregate)
    return {w: sum(v) / len(v) for w, v in got.items()}


@dataclass(frozen=True, slots=True)
class Row:
    workload: str
    n: int
    mode: str
    aggregate: float
    relative: float | None
    fairness: float | None
    per_tenant_min: float
    per_tenant_max: float
    enforcement: str


def rows(ms: Sequence[Measurement]) -> list[Row]:
    """One row per non-exclusive measurement, relative to the exclusive rate of its workload.

    N = 1 under any mode is the whole GPU, i.e. exclusive: gpupool gives a whole share no MPS."""
    base = exclusive_rates(ms)
    out = []
    for m in ms:
        if m.mode == "exclusive" or not m.rates:
            continue
        ref = base.get(m.workload)
        out.append(
            Row(
                workload=m.workload,
                n=m.n,
                mode=m.mode,
                aggregate=m.aggregate,
                relative=m.aggregate / ref if ref else None,
                fairness=jain(m.rates),
                per_tenant_min=min(m.rates),
                per_tenant_max=max(m.rates),
                enforcement=",".join(sorted(set(m.enforcement))) or "-",
            )
        )
    return sorted(out, key=lambda r: (WORKLOADS.index(r.workload), r.n, MODES.index(r.mode)))


def goals(rs: Sequence[Row]) -> dict[str, object]:
    """The issue's goals for gpupool shares, each with the figures it was judged on.

    Only rows whose tenants really ran as MPS clients count."""
    real = [r for r in rs if r.mode == "mps" and r.enforcement == EXPECTED["mps"]]
    matmul = {r.n: r.relative for r in real if r.workload == "matmul"}
    small8 = next((r.relative for r in real if r.workload == "small" and r.n == 8), None)
    mm_ok = bool(matmul) and all(v is not None and v >= GOAL_MATMUL for v in matmul.values())
    return {
        "matmul_mps_relative_by_n": matmul,
        "matmul_goal": GOAL_MATMUL,
        "matmul_met": mm_ok,
        "small_mps_relative_n8": small8,
        "small_goal_n8": GOAL_SMALL_N8,
        "small_met": small8 is not None and small8 >= GOAL_SMALL_N8,
    }


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def markdown_table(ms: Sequence[Measurement]) -> str:
    """Aggregate throughput vs exclusive: one line per (workload, N), modes side by side."""
    base = exclusive_rates(ms)
    by = {(r.workload, r.n, r.mode): r for r in rows(ms)}
    ns = sorted({r.n for r in by.values()} | {1})
    lines = [
        "| work | N | exclusive it/s (1 tenant) | time-slicing: aggregate it/s (x excl.) "
        "| fairness | gpupool shares (MPS): aggregate it/s (x excl.) | fairness |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in WORKLOADS:
        if w not in base:
            continue
        for n in ns:
            cells = []
            for mode in ("timeslice", "mps"):
                r = by.get((w, n, mode))
                if r is None and n == 1:
                    cells += [f"{base[w]:.1f} (1.00, = exclusive)", "-"]
                elif r is None:
                    cells += ["not run", "-"]
                else:
                    ran = "" if r.enforcement == EXPECTED[mode] else f" ran as {r.enforcement}!"
                    cells += [f"{r.aggregate:.1f} (**{_f(r.relative)}**){ran}", _f(r.fairness)]
            lines.append(f"| {w} | {n} | {base[w]:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_pct_overrides(text: str) -> list[tuple[int, int]]:
    """'8:14,4:26' -> [(8, 14), (4, 26)]: N tenants, MPS thread percentage; '' -> []."""
    out = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        try:
            n, pct = (int(v) for v in item.split(":"))
        except ValueError:
            raise ValueError(
                f"thread percentage overrides look like 8:14,4:26, got {item!r}"
            ) from None
        if n < 2 or not 1 <= pct <= 100:
            raise ValueError(f"override {item!r}: N must be >= 2 and the percentage 1..100")
        out.append((n, pct))
    return out


def thread_pct_table(ms: Sequence[Measurement]) -> str:
    """MPS measurements with the thread percentage and SMs each client saw ('' if none)."""
    base = exclusive_rates(ms)
    mps = [m for m in ms if m.mode == "mps" and m.extra.get("thread_pct") is not None]
    if not mps:
        return ""
    lines = [
        "| work | N | thread % | SMs per client | SMs, all | aggregate it/s | x excl. | run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in sorted(
        mps, key=lambda m: (WORKLOADS.index(m.workload), m.n, int(m.extra["thread_pct"]))
    ):
        sms = m.extra.get("sms_seen")
        total = sms * m.n if isinstance(sms, int) else None
        rel = m.aggregate / base[m.workload] if base.get(m.workload) else None
        how = "override" if m.extra.get("override") else "gpupool"
        lines.append(
            f"| {m.workload} | {m.n} | {m.extra['thread_pct']} | {_f(sms, '{}')} | "
            f"{_f(total, '{}')} | {m.aggregate:.1f} | {_f(rel)} | {how} |"
        )
    return "\n".join(lines)
