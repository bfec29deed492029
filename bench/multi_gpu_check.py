"""Real-GPU check of issue 21 on a host with one or more GPUs (bench/multi_gpu_check.sh, as root).

Starts `gpupool up --mps on` on the real GPUs (single-user mode, jobs as --jobs-account),
creates tenants lab-a/lab-b with users alice/bob and records, per issue 21:

  1a  a `--gpus 2` job (gpupool run) sees exactly its allocation's two GPUs (PyTorch UUIDs);
  1b  alice's and bob's 1-GPU jobs run at once on different GPUs, each seeing only its own;
  3   with those jobs holding memory, `gpupool top --once --json`, the dashboard's API and
      /metrics attribute the process on each GPU to the same workload, user and tenant;
  4   a 2-GPU DDP job (torchrun, NCCL, NVLink multicast off, checked inside the job) runs
      >= 300 steps with the right all-reduce, shown as 2 GPUs busy for that workload;
  2   up to two GPUs `shared`, one MPS daemon each: 2 half-GPU jobs per shared GPU (both
      tenants) allocate inside their 4 GiB (works) and past it (fails near 4 GiB) while the
      other tenant's work on the other GPU keeps running.

Any number of GPUs >= 1 works: the checks use the first GPUs they need (2 for 1a, 1b, 3, 4;
1 or 2 for 2) and leave the others alone. A check that needs more GPUs than the host has is
reported `SKIP` (not run, not a failure): on one GPU only 2 runs, on one GPU.

Each check is independent (its failure is recorded, the next one runs) and has its own
criteria, evidence and timing. Writes OUT/multi_gpu_check.json, job_logs.txt,
snapshots.txt and up.log; exit 0 only if every check passes.

--dry-run runs the same flow on `--simulate <N>xH100-80GB` (N: --simulate-gpus, default 2)
with the tests' stand-in MPS
control program: API, CLI, tenants, submissions, parsing and cleanup run for real; the
criteria that need a GPU (marked gpu_only) are recorded but not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multi_gpu_pool import (  # noqa: E402 - beside this script
    ENDED,
    MULTICAST_OFF,
    T0,
    USERS,
    Check,
    Pool,
    attribution,
    cluster_views,
    field,
    items,
    log,
    snapshot,
    uuids,
    work_dir,
    write_result,
)

LIMIT_MIB = 4096
MPS_DAEMONS: list[int] = []  # control daemons seen (gpupool's), checked after it stops

# ---- the checks ----------------------------------------------------------------------------


def check_two_gpu_job(p: Pool, c: Check) -> None:
    wid = p.run_cli("alice", "bind-2gpu", 2, [p.a.py, p.a.job, "view"])
    c.evidence["workload"] = wid
    w = p.wait_state([wid], ENDED, 180)[0]
    alloc, v = uuids(w), p.wait_line(wid, "view", 10)
    c.evidence.update(state=w["state"], exit_code=w["exit_code"], allocation=alloc, job_view=v)
    c.evidence["note"] = "nvidia-smi -L ignores CUDA_VISIBLE_DEVICES: it lists the host's GPUs"
    c.crit("allocation holds 2 distinct GPUs", len(set(alloc)) == 2)
    cvd = (v.get("CUDA_VISIBLE_DEVICES") or "").split(",")
    c.crit("CUDA_VISIBLE_DEVICES names exactly the allocation's GPUs", sorted(cvd) == sorted(alloc))
    c.crit("NVLink multicast off in the job", v.get("multicast_off"))
    torch_uuids = v.get("torch_uuids") or []
    c.crit(
        "PyTorch sees exactly the allocation's 2 GPUs",
        len(torch_uuids) == 2 and sorted(torch_uuids) == sorted(alloc),
        gpu=True,
    )
    c.crit("the job succeeded", w["state"] == "succeeded", gpu=True)


def start_tenant_jobs(p: Pool, c: Check, release: Path) -> dict[str, str]:
    cmd = [p.a.py, p.a.job, "view", "--hold-mib", "2048", "--max-hold", "240"]
    cmd += ["--release", str(release)]
    jobs = {u: p.submit(u, {"gpus": 1, "name": f"bind-{u}", "command": cmd}) for u in USERS}
    c.evidence["workloads"] = jobs
    p.wait_state(list(jobs.values()), {"running"}, 150)
    return jobs


def check_tenant_binding(p: Pool, c: Check, jobs: dict[str, str]) -> None:
    ws = {u: p.workload(w) for u, w in jobs.items()}
    views = {u: p.wait_line(w, "view", 150) for u, w in jobs.items()}
    c.evidence.update(allocations={u: uuids(w) for u, w in ws.items()}, job_views=views)
    c.crit("both jobs running at once", all(w["state"] == "running" for w in ws.values()))
    a, b = (uuids(ws[u]) for u in USERS)
    c.crit("one GPU each, different GPUs", len(a) == len(b) == 1 and a != b)
    for u in USERS:
        cvd, t = views[u].get("CUDA_VISIBLE_DEVICES"), views[u].get("torch_uuids")
        c.crit(f"{u}: CUDA_VISIBLE_DEVICES is its own GPU only", [cvd] == uuids(ws[u]))
        c.crit(f"{u}: PyTorch sees only its own GPU", t == uuids(ws[u]), gpu=True)


def check_telemetry(p: Pool, c: Check, jobs: dict[str, str]) -> None:
    ws = {u: p.workload(w) for u, w in jobs.items()}
    for w in jobs.values():  # memory held: telemetry has something to attribute
        if "torch_error" not in p.wait_line(w, "view", 60):
            c.guard(lambda w=w: p.wait_line(w, "held", 90))
    expect = {uuids(ws[u])[0]: [[w, u, USERS[u]]] for u, w in jobs.items()}
    holders = {uuids(ws[u])[0]: [w] for u, w in jobs.items()}
    c.evidence["expected"] = expect
    last: dict[str, dict] = {}

    def agree() -> bool:
        last.update(cluster_views(p, set(jobs.values())))
        return all(attribution(v, list(expect)) == expect for v in last.values())

    with contextlib.suppress(TimeoutError):
        p.wait(agree, 60, "telemetry to attribute both processes")
    c.evidence["views"] = last
    for src in ("dashboard", "top"):
        got = {u: field(last[src], "holders", u) for u in holders}
        c.crit(f"{src}: each GPU held by its own workload", got == holders)
    c.crit(
        "metrics: 1 GPU allocated to each tenant",
        all(last["metrics"].get("allocated_gpus", {}).get(t) == 1 for t in USERS.values()),
    )
    for src in ("dashboard", "top", "metrics"):
        c.crit(
            f"{src}: each GPU's process -> the right workload, user and tenant",
            attribution(last[src], list(expect)) == expect,
            gpu=True,
        )


def check_ddp(p: Pool, c: Check, release: Path) -> None:
    cmd = [p.a.py, p.a.job, "ddp-launch", "--release", str(release), "--min-steps", "300"]
    wid = p.run_cli("alice", "ddp-2gpu", 2, cmd)
    c.evidence["workload"] = wid
    env = p.wait_line(wid, "ddp-env", 120)
    c.evidence["job_env"] = env
    c.crit("NVLink multicast variables set in the job before NCCL", env.get("ok"))
    w = p.workload(wid)
    alloc = uuids(w)
    c.evidence["allocation"] = alloc
    c.crit("allocation holds 2 distinct GPUs", len(set(alloc)) == 2)
    views: dict[str, dict] = {}

    def busy() -> bool:
        if p.workload(wid)["state"] in ENDED:
            raise RuntimeError(f"{wid} ended")
        if not p.lines(wid, "ddp-rank"):
            return False
        views.update(cluster_views(p, {wid}))
        d, m = views["dashboard"], views["metrics"]
        return all(
            field(d, "processes", u) and field(d, "status", u) == "busy" for u in alloc
        ) and all(field(m, "processes", u) for u in alloc)

    with contextlib.suppress(TimeoutError, RuntimeError):
        p.wait(busy, 120, "DDP busy on both GPUs")
    c.evidence["views_while_running"] = views
    if views:
        for src in ("dashboard", "top"):
            c.crit(
                f"{src}: both GPUs held by the DDP workload",
                all(field(views[src], "holders", u) == [wid] for u in alloc),
            )
            c.crit(
                f"{src}: its processes on both GPUs, both busy",
                all(
                    field(views[src], "processes", u) and field(views[src], "status", u) == "busy"
                    for u in alloc
                ),
                gpu=True,
            )
        c.crit(
            "metrics: 2 GPUs allocated to lab-a",
            views["metrics"].get("allocated_gpus", {}).get("lab-a") == 2,
        )
        c.crit(
            "metrics: its processes on both GPUs",
            all(field(views["metrics"], "processes", u) for u in alloc),
            gpu=True,
        )
    w = p.finish([wid], release)[0]
    ranks, res = p.lines(wid, "ddp-rank"), (p.lines(wid, "ddp") or [{}])[-1]
    c.evidence.update(state=w["state"], exit_code=w["exit_code"], ranks=ranks, result=res)
    with contextlib.suppress(Exception):
        c.evidence["usage_by_user"] = p.call("GET", "/usage", params={"group_by": "user"})
    c.crit("the job succeeded", w["state"] == "succeeded", gpu=True)
    c.crit(
        "ranks on the allocation's 2 GPUs, multicast off in each",
        sorted(r.get("uuid") for r in ranks) == sorted(alloc)
        and all(r.get("multicast_off") for r in ranks),
        gpu=True,
    )
    c.crit(
        ">= 300 steps, all-reduce == 3.0 everywhere, parameters in sync",
        res.get("steps", 0) >= 300
        and res.get("allreduce") == [3.0] * 4
        and abs(res.get("param_spread", 1.0)) < 1e-6,
        gpu=True,
    )


def mps_servers() -> list[tuple[int, int, str]]:
    """(pid, parent pid, user) of every nvidia-cuda-mps-server on this host."""
    found = []
    for q in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if "nvidia-cuda-mps-server" in (" ".join(q.cmdline()) or q.name()):
                found.append((q.pid, q.ppid(), q.username()))
    return found


def held_mib(line: dict) -> object:
    with contextlib.suppress(ValueError, AttributeError):
        return json.loads(line.get("probe") or "{}").get("allocated_mib")
    return None


def check_mps(p: Pool, c: Check, release: Path, gpus: list[str]) -> None:
    """On the first one or two GPUs (the others stay exclusive): 2 half-GPU jobs each."""
    from gpupool.engines.local.engine import mps_base

    gpus = gpus[:2]
    for u in gpus:
        p.cli("gpu", "set-sharing", u, "shared")
    sharing = {g["uuid"]: g["sharing"] for g in items(p.call("GET", "/gpus"))}
    c.evidence["sharing"] = sharing
    c.crit(f"{len(gpus)} GPU(s) shared", all(sharing.get(u) == "shared" for u in gpus))
    cmd = [p.a.py, p.a.job, "mps", "--limit-mib", str(LIMIT_MIB), "--release", str(release)]
    body = {"gpu_fraction": 0.5, "gpu_memory_mib": LIMIT_MIB, "command": cmd}
    per_user = range(1, len(gpus) + 1)  # 2 jobs per shared GPU, half of them each tenant's
    jobs = [(u, p.submit(u, {**body, "name": f"mps-{u}-{i}"})) for u in USERS for i in per_user]
    c.evidence["workloads"] = jobs
    wids = [w for _, w in jobs]
    try:
        ws = p.wait_state(wids, {"running"}, 150)
        on = {w["id"]: uuids(w)[0] for w in ws}
        c.crit(
            f"{len(wids)} half-GPU jobs run together, 2 per shared GPU",
            sorted(Counter(on.values()).values()) == [2] * len(gpus)
            and set(on.values()) <= set(gpus),
        )
        enf = [s["enforcement"] for w in ws for s in w["allocation"]["shares"]]
        c.crit("every share enforced by MPS", enf == ["mps"] * len(wids))
        probes = {w: p.wait_line(w, "mps", 120) for w in wids}
        holding = {w: p.wait_line(w, "holding", 60) for w in wids}
        states = {w: p.workload(w)["state"] for w in wids}
        base = mps_base(p.data)
        pids = {u: (base / u / "pipe" / "nvidia-cuda-mps-control.pid") for u in gpus}
        daemons = {
            u: int(f.read_text().split()[0]) if f.exists() else None for u, f in pids.items()
        }
        alive = {u: d is not None and Path(f"/proc/{d}").exists() for u, d in daemons.items()}
        MPS_DAEMONS.extend(d for d in daemons.values() if d)
        snapshot(p, "MPS: 4 jobs holding clients")
        servers = mps_servers()
        server_parents = sorted(ppid for _, ppid, _ in servers)
        c.evidence.update(
            on_gpu=on,
            enforcement=enf,
            probes=probes,
            holding=holding,
            states_after_probes=states,
            control_daemons=daemons,
            servers=servers,
        )
        c.crit(
            "one live MPS control daemon per GPU",
            all(alive.values()) and len(set(daemons.values())) == len(gpus),
        )
        c.crit(
            "one MPS server per GPU, under that GPU's daemon",
            server_parents == sorted(d for d in daemons.values() if d),
            gpu=True,
        )
        c.crit(
            f"all {len(wids)} jobs still running after every over-limit try",
            all(s == "running" for s in states.values()),
        )
        for u in gpus:
            here = [w for w in wids if on[w] == u]
            over = [probes[w]["over"] for w in here]
            c.crit(
                f"{u[:12]}: past {LIMIT_MIB} MiB fails near the limit",
                all(
                    o.get("alloc_error") is not None
                    and LIMIT_MIB - 1024 <= o.get("allocated_mib", -1) <= LIMIT_MIB
                    for o in over
                ),
                gpu=True,
            )
            c.crit(
                f"{u[:12]}: {LIMIT_MIB - 1024} MiB inside the limit works",
                all(probes[w]["within"].get("allocated_mib") == LIMIT_MIB - 1024 for w in here),
                gpu=True,
            )
        tenant = dict((w, u) for u, w in jobs)
        pairs = [(x, y) for x in wids for y in wids if tenant[x] != tenant[y] and on[x] != on[y]]
        if len(gpus) > 1:  # one GPU: there is no other GPU
            c.crit(
                "another tenant's job on the other GPU exists and holds its client",
                pairs and all(held_mib(holding[y]) == 1024 for _, y in pairs),
                gpu=True,
            )
    finally:
        ends = p.finish(wids, release)
        c.evidence["final_states"] = {w["id"]: [w["state"], w["exit_code"]] for w in ends}
    c.crit(
        f"all {len(wids)} jobs succeeded", all(w["state"] == "succeeded" for w in ends), gpu=True
    )


# ---- set-up and main -----------------------------------------------------------------------


def jobs_account_can_run(a: argparse.Namespace, pw: pwd.struct_passwd) -> tuple[bool, str]:
    code = "import json, torch; print(json.dumps([torch.__version__, torch.cuda.device_count()]))"
    r = subprocess.run(
        [a.py, "-c", code],
        user=pw.pw_uid,
        group=pw.pw_gid,
        extra_groups=[],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", **MULTICAST_OFF},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=180,
    )
    return r.returncode == 0, (r.stdout + r.stderr)[-1500:]


def preflight(a: argparse.Namespace, c: Check) -> None:
    """The jobs account must run `a.py` with torch; if it cannot, open up (o+rX) the
    Python's prefix and torch's site-packages on this throwaway host, and try again."""
    pw = pwd.getpwnam(a.jobs_account)
    ok, text = jobs_account_can_run(a, pw)
    c.evidence["first_try"] = text
    if not ok and not a.dry_run:
        code = "import json, sys, torch; print(json.dumps([sys.prefix, torch.__file__]))"
        prefix, torch_file = json.loads(subprocess.check_output([a.py, "-c", code], timeout=180))
        site = str(Path(torch_file).parent.parent)
        for d in {prefix, site, os.path.realpath(a.py)}:
            for anc in Path(d).parents:
                anc.chmod(anc.stat().st_mode | 0o001)
        subprocess.run(["chmod", "-R", "o+rX", prefix, site], timeout=240, check=False)
        c.evidence["opened_up"] = [prefix, site]
        ok, text = jobs_account_can_run(a, pw)
        c.evidence["second_try"] = text
    c.crit(f"{a.jobs_account} runs {a.py} with torch", ok, gpu=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/multi_gpu_check_run"))
    ap.add_argument("--dry-run", action="store_true", help="simulated GPUs, stand-in MPS")
    ap.add_argument(
        "--simulate-gpus", type=int, default=2, metavar="N", help="--dry-run: N simulated GPUs"
    )
    ap.add_argument("--jobs-account", default="nobody")
    ap.add_argument("--python", dest="py", help="the jobs' Python (default: python3 on PATH)")
    ap.add_argument("--deadline-s", type=float, default=270.0, help="start no check after this")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    a.py = a.py or ("/usr/bin/python3" if a.dry_run else shutil.which("python3") or sys.executable)
    work, _, a.job_env = work_dir("gpupool-mgc-", ("multi_gpu_job.py", "gpu_probe.py"))
    a.job = str(work / "multi_gpu_job.py")
    deadline = T0 + a.deadline_s
    checks: list[Check] = []
    result: dict[str, object] = {"dry_run": a.dry_run, "python": a.py, "started": time.time()}
    pre = Check("0_preflight")
    checks.append(pre)
    pre.guard(lambda: preflight(a, pre))
    pool = Pool(a, work, a.out, deadline)
    try:
        setup = Check("0_setup")
        checks.append(setup)

        def set_up() -> list[str]:
            pool.set_up_users()
            gpus = sorted(items(pool.call("GET", "/gpus")), key=lambda g: g["index"])
            setup.evidence["gpus"] = gpus
            setup.evidence["cli_gpu_ls"] = pool.cli("gpu", "ls", "-o", "wide")
            setup.crit("gpupool up sees at least 1 GPU", len(gpus) >= 1)
            setup.evidence["gpu_count"] = len(gpus)
            return [g["uuid"] for g in gpus]

        gpus = setup.guard(set_up) or []
        result["gpus"] = gpus

        def run(name: str, fn: Callable[[Check], None], need: int = 2) -> Check:
            c = Check(name)
            checks.append(c)
            if not gpus:
                c.errors.append("not run: set-up failed")
            elif len(gpus) < need:
                c.skip(f"needs {need} GPUs, this host has {len(gpus)}")
            elif time.monotonic() > deadline - 30:
                c.errors.append("not run: out of time (--deadline-s)")
            else:
                log(f"== {name}")
                c.guard(lambda: fn(c))
            return c

        run("1a_two_gpu_job_sees_its_gpus", lambda c: check_two_gpu_job(pool, c))
        rel = work / "release-tenants"
        c1b = run(
            "1b_two_tenants_own_gpus",
            lambda c: c.evidence.update(jobs=start_tenant_jobs(pool, c, rel)),
        )
        jobs = c1b.evidence.get("jobs")
        if c1b.skipped is not None:
            checks.append(Check("3_telemetry_attribution"))
            checks[-1].skip(c1b.skipped)
        elif isinstance(jobs, dict):
            c1b.guard(lambda: check_tenant_binding(pool, c1b, jobs))
            run("3_telemetry_attribution", lambda c: check_telemetry(pool, c, jobs))
            c1b.guard(
                lambda: c1b.evidence.update(
                    final={w["id"]: w["state"] for w in pool.finish(list(jobs.values()), rel)}
                )
            )
        else:
            checks.append(Check("3_telemetry_attribution"))
            checks[-1].errors.append("not run: the two tenants' jobs did not start (see 1b)")
        run("4_ddp_two_gpus", lambda c: check_ddp(pool, c, work / "release-ddp"))
        run("2_shared_mps_limits", lambda c: check_mps(pool, c, work / "release-mps", gpus), 1)
    finally:
        (work / "release-all").touch()
        for f in work.glob("release-*"):
            f.touch()
        pool.deadline = time.monotonic() + 90  # cleanup gets its own time
        with contextlib.suppress(Exception):
            result["active_at_end"] = active = pool.active()
            if active:
                pool.finish(active, work / "release-all")
        pool.save_job_logs(400)
        result["up_exit_code"] = pool.stop()
        snapshot(pool, "after gpupool up stopped")
        left = [d for d in MPS_DAEMONS if Path(f"/proc/{d}").exists()]
        for d in left:  # gpupool's own daemons should be gone; never leave one behind
            with contextlib.suppress(OSError):
                os.kill(d, signal.SIGTERM)
        result["mps_daemons_left_after_stop"] = left
    return write_result(a.out, "multi_gpu_check", checks, result, a.dry_run)


if __name__ == "__main__":
    sys.exit(main())
