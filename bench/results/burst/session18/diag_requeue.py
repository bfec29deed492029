"""Requeue detail of diag_jobs.py outputs: per (GPUs, run length) class, jobs preempted at
least once, preemptions, and their wait after the first start (session18/diag_seed1.md).

    python3 bench/results/burst/session18/diag_requeue.py DIR SEED VARIANT [VARIANT...]
"""

import sys

sys.path.insert(0, "bench/results/burst/session18")
from diag_breakdown import gpu_class, len_class, load  # noqa: E402

d, seed = sys.argv[1], int(sys.argv[2])
for v in sys.argv[3:]:
    r = load(d, v, seed)
    J = [j for j in r["jobs"] if j["wait"] is not None]
    N = len(J)
    print(
        f"\n{v} seed {seed}: | GPUs | length | jobs | preempted jobs | preemptions | after-start wait s/job of mean | per preempted job, min | lost GPU-h |"  # noqa: E501
    )
    print("|---|---|---|---|---|---|---|---|")
    for g in ("1", "2-8", "16-64 (gang)"):
        for c in ("<2m", "2-10m", "10-60m", ">60m"):
            S = [j for j in J if gpu_class(j) == g and len_class(j) == c]
            if not S:
                continue
            P = [j for j in S if j["preemptions"]]
            post = sum(j["post_wait"] for j in S)
            lost = sum((j["run_time"] - j["duration"]) * j["gpus"] for j in S) / 3600
            print(
                f"| {g} | {c} | {len(S)} | {len(P)} | {sum(j['preemptions'] for j in S)} | "
                f"{post / N:.0f} | {post / max(len(P), 1) / 60:.1f} | {lost:.1f} |"
            )
