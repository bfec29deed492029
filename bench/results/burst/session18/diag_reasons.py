"""Preemption reasons and the relative-levels ladder of an instrumented diag_jobs.py output.

python3 bench/results/burst/session18/diag_reasons.py DIR NAME SEED
"""

import gzip
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, "bench/results/burst/session18")
from diag_breakdown import gpu_class, len_class, storms  # noqa: E402

d, name, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(Path(d) / f"{name}-seed{seed}-gap2.json.gz", "rt") as f:
    r = json.load(f)
jobs = {row[0]: dict(zip(r["cols"], row, strict=True)) for row in r["rows"]}
st = storms(seed)
print(
    "ladder moves (t min: levels GPU-s):",
    "; ".join(f"{t / 60:.0f}: {', '.join(f'{x:.0f}' for x in lv)}" for t, lv in r["scales"]),
)


def kind(reason: str) -> str:
    if "reclaims its guaranteed share" in reason:
        return "reclaim (tenant under guarantee)"
    if "less attained service" in reason:
        return "service level"
    if reason.startswith("moved to"):
        return "move (whole GPUs on one node)"
    if "nodes at once" in reason:
        return "gang clears / holds nodes"
    return reason[:40]


c = Counter()
for wid, reason, t in r["preempts"]:
    j = jobs[wid]
    busy = "busy" if any(a <= t < b + 600 for a, b in st) else "rest"
    c[(kind(reason), gpu_class(j), len_class(j), busy)] += 1
print("| reason | GPUs | length | at (busy = a busy period or the 10 min after) | preemptions |")
print("|---|---|---|---|---|")
for k, n in sorted(c.items(), key=lambda x: -x[1]):
    if n >= 40:
        print("| " + " | ".join(k) + f" | {n} |")
print("reason kinds:", Counter(kind(x[1]) for x in r["preempts"]).most_common())
# the wait after the first start of jobs preempted only by one kind
by_job: dict = {}
for wid, reason, _t in r["preempts"]:
    by_job.setdefault(wid, set()).add(kind(reason))
N = sum(1 for j in jobs.values() if j["state"] == "succeeded")
post = Counter()
cnt = Counter()
for wid, ks in by_job.items():
    j = jobs[wid]
    if j["state"] != "succeeded":
        continue
    k = next(iter(ks)) if len(ks) == 1 else "several kinds"
    post[k] += j["finished"] - j["first_start"] - j["run_time"]
    cnt[k] += 1
print(
    "| preempted by | jobs | wait after first start, s/job of the mean (all jobs) | per job, min |"
)
print("|---|---|---|---|")
for k, w in post.most_common():
    print(f"| {k} | {cnt[k]} | {w / N:.0f} | {w / cnt[k] / 60:.1f} |")
