"""Pure parts of `bench/sharing.py`: share sizes, throughput math, goals, isolation verdicts,
and the Markdown report.

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


def isolation_verdict(rec: dict) -> dict:
    """Did the limit hold for the offender, and did every other tenant finish exactly right?"""
    vs = rec.get("victims", [])
    victims_ok = bool(vs) and all(
        v.get("status", {}).get("exit_code") == 0 and v.get("worker", {}).get("ok") for v in vs
    )
    off = rec.get("offender", {})
    w = off.get("worker", {})
    if rec["mode"] == "mps":
        held = (
            off.get("enforcement") == "mps"
            and w.get("state") == "out_of_memory"
            and w.get("allocated_mib", 1 << 30) <= rec["share_memory_mib"]
        )
        how = "offender got CUDA out of memory within its share"
    else:
        ev = rec.get("agent", {}).get("events", [])
        flagged = any(
            e["kind"] == "over_memory" and e["workload"] == off.get("workload") for e in ev
        )
        killed = (
            rec.get("agent", {}).get("killed") and off.get("status", {}).get("exit_code") == 137
        )
        wrong = [e for e in ev if e["workload"] != off.get("workload")]
        held = bool(flagged and killed and not wrong)
        how = "telemetry flagged over_memory, agent SIGKILLed the offender, no one else flagged"
    return {
        "offender_stopped": held,
        "victims_exact": victims_ok,
        "ok": held and victims_ok,
        "criterion": how,
    }


def render_md(res: dict) -> str:
    env = res.get("environment", {})
    g = res.get("goals", {})
    out = [
        "# Fractional GPU sharing: MPS shares vs time-slicing (bench/sharing.py)",
        "",
        *(
            ["**DRY RUN: simulated GPU, workers without PyTorch: the numbers mean nothing.**", ""]
            if env.get("dry_run")
            else []
        ),
        f"Device: **{env.get('gpu_name', '?')}** ({env.get('gpu_memory_mib', '?')} MiB, driver "
        f"{env.get('driver', '?')}), host `{env.get('host', '?')}`, {env.get('date', '?')}.",
        f"Command: `{env.get('command', '?')}`",
        f"Per measurement: {env.get('duration_s')} s common window after "
        f"{env.get('warmup_s')} s warm-up; matmul {env.get('matmul_size')}² bf16; "
        "small = MLP 512-1024-1024-10, batch 64, Adam.",
        "",
        "Aggregate throughput (sum of the tenants' iterations/s over the same window) relative to "
        "exclusive (each tenant alone on the GPU, one after another = one tenant's rate). "
        "Fairness: Jain's index of the tenants' rates (1 = equal).",
        "",
        res.get("table", ""),
        "",
        "## Goals (gpupool shares = MPS)",
        "",
        f"- saturating matmul ≥ {g.get('matmul_goal')}x exclusive at every N: "
        f"{_by_n(g.get('matmul_mps_relative_by_n'))} -> "
        f"**{_met(g, 'matmul')}**",
        f"- small work ≥ {g.get('small_goal_n8')}x at N = 8: "
        f"{_r(g.get('small_mps_relative_n8'))} -> **{_met(g, 'small')}**",
    ]
    if res.get("isolation"):
        out += ["", "## Isolation", ""]
    for mode, rec in res.get("isolation", {}).items():
        v = rec.get("verdict", {})
        off = rec.get("offender", {})
        w = off.get("worker", {})
        out.append(
            f"- **{mode}**: {rec['tenants']} tenants with {rec['share_memory_mib']} MiB shares; "
            f"offender asked {rec['offender_target_mib']} MiB, got {w.get('allocated_mib')} MiB, "
            f"ended `{w.get('state')}` (exit {off.get('status', {}).get('exit_code')}, "
            f"{off.get('seconds_to_end')} s after start). "
            f"Victims exact: {v.get('victims_exact')}; limit held: {v.get('offender_stopped')} "
            f"({v.get('criterion')}). **{'PASS' if v.get('ok') else 'FAIL'}**"
        )
        if w.get("error"):
            out.append(f"  - offender's error: `{w['error']}`")
        for e in rec.get("agent", {}).get("events", []):
            out.append(f"  - agent {e['what']} at +{e['at_s']} s: {e['message']}")
        for t in rec.get("victims", []):
            vw = t.get("worker", {})
            out.append(
                f"  - {t.get('workload')} ({t.get('enforcement')}): {vw.get('iterations')} checked "
                f"matmuls, {vw.get('mismatches')} mismatches, checksum "
                f"{vw.get('checksum')} vs expected {vw.get('expected_checksum')}"
            )
    if res.get("thread_pct_table"):
        out += [
            "",
            "## MPS thread percentage and the SMs a client gets",
            "",
            "Rows marked *override* ran with another CUDA_MPS_ACTIVE_THREAD_PERCENTAGE than "
            "gpupool computes (an experiment; they do not count for the goals above).",
            "",
            res["thread_pct_table"],
        ]
    if res.get("errors"):
        out += ["", "## Errors", ""] + [f"- {e}" for e in res["errors"]]
    return "\n".join(out) + "\n"


def _met(g: dict, what: str) -> str:
    measured = (
        g.get("matmul_mps_relative_by_n") if what == "matmul" else g.get("small_mps_relative_n8")
    )
    if not measured:
        return "not run"
    return "met" if g.get(f"{what}_met") else "NOT met"


def _by_n(d) -> str:
    return ", ".join(f"N={n}: {_r(v)}" for n, v in (d or {}).items()) or "-"


def _r(v) -> str:
    return "-" if v is None else f"{v:.2f}"
