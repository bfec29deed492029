"""Per tenant: guarantee (GPUs), GPU-hours submitted in the busy periods and in all, the
share of the pool's submitted GPU-hours against the share of the guarantees, and fifo / fair
average wait (session18/diag_seed1.md).

    python3 bench/results/burst/session18/diag_tenants.py DIR SEED
"""

import sys

sys.path.insert(0, "bench/results/burst/session18")
from diag_breakdown import load, storms  # noqa: E402

d, seed = sys.argv[1], int(sys.argv[2])
fifo, fair = load(d, "fifo", seed), load(d, "fair", seed)
st = storms(seed)
g = {t: m / 1000 for t, m in fair["guarantees"].items()}
G = sum(g.values())
rows = {}
for j in fair["jobs"]:
    r = rows.setdefault(j["tenant"], [0, 0.0, 0.0])
    r[0] += 1
    gh = j["duration"] * (j["gpus"] or 0) / 3600
    r[2] += gh
    if any(a <= j["submit"] < b for a, b in st):
        r[1] += gh
T = sum(r[2] for r in rows.values())
B = sum(r[1] for r in rows.values())


def avg(res, t):
    w = [j["wait"] for j in res["jobs"] if j["tenant"] == t and j["wait"] is not None]
    return sum(w) / len(w) / 60


print(
    f"seed {seed} | tenant | jobs | guarantee GPUs (share) | GPU-h all (share) | GPU-h busy (share) | busy ÷ guarantee share | fifo avg wait min | fair avg wait min |"  # noqa: E501
)
print("|---|---|---|---|---|---|---|---|---|")
for t in sorted(rows):
    n, b, a = rows[t]
    print(
        f"| {t} | {n} | {g.get(t, 0):.0f} ({g.get(t, 0) / G:.0%}) | {a:.0f} ({a / T:.0%}) | {b:.0f} ({b / B:.0%}) | "  # noqa: E501
        f"{(b / B) / (g.get(t, 0) / G):.1f} | {avg(fifo, t):.1f} | {avg(fair, t):.1f} |"
    )
