"""Plots for docs/report-philly.md from the runs bench/trace_compare.py wrote.

    python bench/trace_plots.py --results bench/results/trace_philly --out docs/img

Writes, for each (scope, load): `philly-wait-cdf-<scope>-<load>.png` (queueing-delay CDF per
policy, plus `fair` before the reclaim changes of issue 7, dotted, where `--before` holds a
run tagged `before`) and `philly-share-<scope>-<load>.png` (each large tenant's GPUs over
time under fifo and fair, with its reference fair share dashed).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"fifo": "tab:red", "fair": "tab:blue", "las": "tab:green", "fair (before)": "tab:blue"}
STYLES = {"fair (before)": ":"}


def load(results: Path, before: Path | None = None) -> dict:
    groups: dict[tuple, dict] = defaultdict(dict)
    for p in sorted(results.glob("*.json")):
        r = json.loads(p.read_text())
        groups[(r["scope"], r["load"])][r["policy"]] = r
    for p in sorted(before.glob("*-before.json")) if before and before.is_dir() else ():
        r = json.loads(p.read_text())
        if (r["scope"], r["load"]) in groups:
            groups[(r["scope"], r["load"])][f"{r['policy']} (before)"] = r
    return groups


def wait_cdf(runs: dict, title: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for pol, r in sorted(runs.items()):
        xs = [max(w / 3600, 1e-3) for _, w in r["wait_cdf"] if w is not None]
        ys = [q / 100 for q, w in r["wait_cdf"] if w is not None]
        m = r["metrics"]
        ax.plot(
            xs,
            ys,
            label=f"{pol} (avg {m['avg_wait'] / 3600:.2f} h)",
            color=COLORS.get(pol),
            ls=STYLES.get(pol, "-"),
        )
    ax.set_xscale("log")
    ax.set_xlabel("queueing delay (hours, log scale; 0 drawn at 0.001)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def shares(runs: dict, title: str, path: Path, top: int = 5) -> None:
    pols = [p for p in ("fifo", "fair", "las") if p in runs]
    fig, axes = plt.subplots(len(pols), 1, figsize=(8, 2.6 * len(pols)), sharex=True, sharey=True)
    if len(pols) == 1:
        axes = [axes]
    first = runs[pols[0]]
    hours = {t: v["gpu_hours"] for t, v in first["metrics"]["per_tenant"].items()}
    tenants = sorted(hours, key=lambda t: -hours[t])[:top]
    cmap = plt.get_cmap("tab10")
    for ax, pol in zip(axes, pols, strict=True):
        s = runs[pol]["series"]
        t = [h / 24 for h in s["t_hours"]]
        for i, ten in enumerate(tenants):
            ax.plot(t, s["allocated_gpus"][ten], color=cmap(i), lw=1, label=ten)
            ax.plot(t, s["fair_gpus"][ten], color=cmap(i), lw=0.8, ls="--")
        ax.set_title(f"{pol}: GPUs held (solid) vs reference fair share (dashed)", fontsize=9)
        ax.set_ylabel("GPUs")
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("days since first submission")
    axes[0].legend(fontsize=7, ncol=len(tenants), loc="upper right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default="bench/results/trace_philly")
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("--before", default="bench/results/trace_philly/ablations")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for (scope, ld), runs in sorted(load(Path(a.results), Path(a.before)).items()):
        gpus = next(iter(runs.values()))["gpus"]
        what = "whole trace" if scope == "full" else "one week, five largest teams"
        title = f"Philly, {what}: {gpus} GPUs, offered load {ld:.0%}"
        wait_cdf(runs, title, out / f"philly-wait-cdf-{scope}-{ld:g}.png")
        shares(runs, title, out / f"philly-share-{scope}-{ld:g}.png")
        print("wrote", scope, ld)


if __name__ == "__main__":
    main()
