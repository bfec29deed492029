"""Notebook spawn time, before and after one notebook protocol (issue 31, item 3).

Before: the hub's spawner (a LocalProcessSpawner) waited for a grant file that the server's
hand-off executor wrote, then started jupyterhub-singleuser itself. After: the spawner
submits the server's command, the local engine runs it (launcher, account, GPU binding) and
reports its endpoint, which the spawner waits for over the API.

Each side is the stack of its own tree's tests/jupyterhub/stack.py (a real gpupool server, a
real JupyterHub + configurable-http-proxy, 2 simulated GPUs), run in a child process with
that tree first on the path; both run the same jupyterhub-singleuser (tests/notebook_env.py:
the system Python's, which every account can run). A spawn is timed from the hub's spawn
request (REST) to the hub reporting the server ready (it answered the hub's check at its
URL), on a free GPU, one at a time; the notebook is then stopped and gone before the next spawn.

    python bench/notebook_spawn.py [--old /tmp/gpupool-old] [--spawns 5] [--repeat 1]
        [--out bench/results/notebook_spawn]

Sides run old, new (repeated `--repeat` times: old, new, old, new, ...), in one run on one
machine. Writes <out>.json (every spawn) and <out>.md (medians and the new/old ratio).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEW = Path(__file__).resolve().parents[1]
USERS = ("alice", "bob")


def side(tree: Path, spawns: int, exe: str) -> dict:
    """Run in the child: `spawns` spawns on `tree`'s stack with jupyterhub-singleuser `exe`;
    their seconds, as JSON."""
    sys.path[:0] = [str(tree), str(tree / "src")]
    from tests.jupyterhub import stack as st

    import gpupool

    assert Path(gpupool.__file__).is_relative_to(tree), gpupool.__file__
    extra = f"c.GpupoolSpawner.cmd = [{exe!r}]\n"
    times = []
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-spawn-") as tmp:
        stack = st.build(Path(tmp), extra_config=extra)
        try:
            for u in USERS:
                stack.login(u)
            for i in range(spawns):
                user = USERS[i % len(USERS)]
                t0 = time.monotonic()
                r = stack.spawn(user, {"profile": "gpu"})
                assert r.status_code in (201, 202), r.text
                st.wait_for(lambda u=user: stack.ready(u), f"{user}'s notebook", 300, 0.02)
                times.append(time.monotonic() - t0)
                stack.hub_api("DELETE", f"/users/{user}/server")
                st.wait_for(lambda u=user: not stack.server_model(u), f"{user} stopped", 120)
        finally:
            stack.close()
    return {"tree": str(tree), "spawn_to_ready_s": times}


def run_side(tree: Path, spawns: int, exe: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}:{tree}")
    out = subprocess.run(
        [sys.executable, __file__, "--side", str(tree), "--spawns", str(spawns), "--exe", str(exe)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"the side {tree} failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(rows: dict[str, list[float]], machine: dict, args: argparse.Namespace) -> str:
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratio = med["new"] / med["old"]
    lines = [
        "# Notebook spawn time: hand-off (old) vs the engine runs it (new)",
        "",
        f"`python bench/notebook_spawn.py --spawns {args.spawns} --repeat {args.repeat}` "
        f"on {machine['host']} ({machine['cpus']} CPUs, {machine['platform']}, Python "
        f"{machine['python']}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"old = {args.old}, new = this tree. A spawn: the hub's REST spawn request until the "
        "hub reports the server ready (it answered the hub's check at its URL), free GPU, "
        "one at a time. Both sides run the same jupyterhub-singleuser (tests/notebook_env.py).",
        "",
        "| side | spawns | median s | min s | max s |",
        "|---|---|---|---|---|",
    ]
    for k, v in rows.items():
        lines.append(f"| {k} | {len(v)} | {med[k]:.2f} | {min(v):.2f} | {max(v):.2f} |")
    lines += ["", f"**new / old (medians): {ratio:.2f}x**", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, default=Path("/tmp/gpupool-old"))
    ap.add_argument("--spawns", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default="bench/results/notebook_spawn")
    ap.add_argument("--side", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--exe", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side is not None:
        print(json.dumps(side(args.side, args.spawns, args.exe)))
        return
    sys.path.insert(0, str(NEW))  # the notebooks' Python: the same for both sides
    from tests.notebook_env import singleuser

    exe, why = singleuser()
    if exe is None:
        raise SystemExit(why)
    machine = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    rows: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.repeat):
        for name, tree in (("old", args.old), ("new", NEW)):
            got = run_side(tree, args.spawns, exe)
            rows[name] += got["spawn_to_ready_s"]
            print(name, [f"{t:.2f}" for t in got["spawn_to_ready_s"]], flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"machine": machine, "spawns": rows}, indent=1))
    text = report(rows, machine, args)
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
