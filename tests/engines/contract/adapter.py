"""What the contract suite needs of an engine: `EngineUnderTest`, one small adapter per engine.

An adapter opens its engine (`Engine.open`, as `gpupool up` does) over an injected
`ManualClock` and offers the executor plus what a test cannot get from the contract itself:
a workload and an allocation on one of the engine's nodes, a way to let the cluster move
(`progress`), a fresh executor over the same state (`restart`: a restarted `gpupool up`),
and the few readings the isolation tests compare (who the work runs as, where it landed,
what others can read of it).

Work is described once as a `Behaviour`; engines that run processes (local, Slurm) run it as
a small shell command, scripted engines (the fake executor, the fake Kubernetes API) play it
out in `progress`. No test sleeps for timing: waits are bounded polls for a state
(`settle`, `wait_ready`); grace periods and timeouts move on the injected clock.
"""

from __future__ import annotations

import shlex
import urllib.request
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Request, Share, Workload, WorkloadKind
from gpupool.domain.nodepools import NodePool
from gpupool.engines.common.executor import ExecState, ExecStatus, Executor, Handle, logs_of
from tests.support import wait_for

#: the line every behaviour prints once it is past its setup (its trap is in place)
READY = "contract-ready"
#: the line a behaviour that traps SIGTERM prints when the polite signal comes
GOT_TERM = "contract-got-term"
#: a notebook server's stand-in: it binds where the hub's JUPYTERHUB_SERVICE_URL says (as
#: jupyterhub-singleuser does, after the engine pointed it at the port it chose) and answers
NOTEBOOK_SERVER = """
import http.server, os, urllib.parse
url = urllib.parse.urlsplit(os.environ["JUPYTERHUB_SERVICE_URL"])
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"contract-notebook")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer((url.hostname, url.port or 80), Hello)
print("contract-ready", flush=True)
server.serve_forever()
"""


@dataclass(frozen=True)
class Behaviour:
    """What a piece of work does. `on_term`: "die" (the default action), "exit0" (traps the
    polite signal, prints `GOT_TERM` and exits 0) or "ignore" (only the forced end stops
    it). `until`: "end" (exits with `exit_code` at once), "release" (waits for the adapter's
    `release`, then exits with `exit_code`) or "stopped" (runs until stopped). `lines` are
    printed first, then NAME=value for each of `show`, then ``uid=<uid>`` with `show_uid`,
    then `READY`."""

    exit_code: int = 0
    lines: tuple[str, ...] = ()
    on_term: str = "die"
    until: str = "end"
    show: tuple[str, ...] = ()
    show_uid: bool = False

    def script(self, gate: Path | None = None) -> str:
        """The behaviour as one ``sh -c`` script; `gate`: the FIFO "release" waits on."""
        parts = []
        if self.on_term == "exit0":
            parts.append(f"trap 'echo {GOT_TERM}; exit 0' TERM")
        elif self.on_term == "ignore":
            parts.append("trap '' TERM")
        parts += [f"echo {shlex.quote(line)}" for line in self.lines]
        parts += [f'echo "{n}=${{{n}-<unset>}}"' for n in self.show]
        if self.show_uid:
            parts.append('echo "uid=$(id -u)"')
        parts.append(f"echo {READY}")
        if self.until == "release":
            assert gate is not None
            parts.append(f"read _ < {shlex.quote(str(gate))}")
        elif self.until == "stopped":  # `wait` returns at once when a trapped signal comes;
            # in a loop: the engine may signal the sleep before the shell, and a shell whose
            # wait returned then must still be there for its own signal (and its trap)
            parts.append("while :; do sleep 600 & wait $!; done")
        parts.append(f"exit {self.exit_code}")
        return "; ".join(parts)

    def output(self, env: Mapping[str, str] | None = None, uid: int | None = None) -> str:
        """What a scripted engine writes as the work's output (the script's own lines)."""
        out = [*self.lines, *(f"{n}={(env or {}).get(n, '<unset>')}" for n in self.show)]
        if self.show_uid and uid is not None:
            out.append(f"uid={uid}")
        return "".join(line + "\n" for line in [*out, READY])


@dataclass
class Started:
    """One start made through the adapter."""

    workload: Workload
    allocation: Allocation | None
    behaviour: Behaviour
    handle: Handle
    env: dict[str, str] = field(default_factory=dict)
    released: bool = False


class EngineUnderTest(ABC):
    """One engine as the contract suite drives it (see the module docstring)."""

    #: the engine's name (`Engine.name`)
    name: str = "engine"
    #: why this engine cannot run work here (None: it can); tests that run work skip with it
    cannot_run: str | None = None
    #: why the engine never gives up on work it launched (None: it can answer REJECTED)
    cannot_reject: str | None = "it never gives up on work it launched"
    #: why requested nodes of a node pool cannot come up here (None: `bring_up` brings them)
    cannot_bring_up: str | None = "it has no cloud, autoscaler or powered-down node here"
    #: the tenants and the owner of each (Unix accounts where the engine runs processes)
    members: Mapping[str, str] = {"lab": "ann", "other": "bob"}
    #: gpupool runs processes of its own on this host to start work (launcher, sbatch)
    privileged_here: bool = False
    #: seconds between two polls of a wait (0: a scripted engine, nothing to wait for)
    every: float = 0.0
    timeout: float = 30.0

    def __init__(self) -> None:
        self.clock = ManualClock(1_780_000_000.0)
        self.started: dict[str, Started] = {}
        self._tag = uuid.uuid4().hex[:6]

    def id(self, name: str) -> str:
        """A workload id unique to this run (a real Slurm keeps ended jobs listed, by name)."""
        return f"{name}-{self._tag}"

    # -- what each adapter provides --------------------------------------------------------
    @property
    @abstractmethod
    def executor(self) -> Executor:
        """The executor of the engine's latest `open`."""

    @abstractmethod
    def nodes(self) -> list[str]:
        """The engine's nodes with GPUs, as its inventory names them."""

    @abstractmethod
    def gpu_uuid(self, node: str, index: int) -> str:
        """The UUID of GPU `index` of `node`, as the inventory has it."""

    @abstractmethod
    def restart(self) -> Executor:
        """A fresh `open` over the same state (the old executor closed): `gpupool up`
        restarted; the new executor is `executor` from now on."""

    def progress(self) -> None:  # noqa: B027 - engines whose work moves by itself
        """Let the cluster move one step (scripted engines play their behaviours)."""

    def release(self, wid: str) -> None:
        """Let work started with ``until="release"`` go on to its exit."""
        self.started[wid].released = True

    def command(self, wid: str, behaviour: Behaviour) -> tuple[str, ...]:
        """The workload's command for `behaviour` (scripted engines keep it for the record)."""
        return ("sh", "-c", behaviour.script(Path("/gpupool-contract-gate") / wid))

    def bring_up(self, pool: NodePool) -> None:  # noqa: B027 - where cannot_bring_up is None
        """Let the nodes asked for `pool` come up: the engine's cloud, autoscaler or power
        saving acts on the request, its delays passing on the adapter's clock."""

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """End what the adapter started (its fixture's teardown)."""

    # -- isolation readings (None: the engine has nothing of the kind) ------------------------
    def uid_of(self, wid: str) -> int | None:
        """The uid the work runs as (0 wherever the engine would let it run as root): by
        default what a `Behaviour` with `show_uid` printed; None where it printed none."""
        uid = self.reached_work(wid).get("uid")
        return int(uid) if uid is not None else None

    def place_of(self, wid: str) -> str | None:
        """Where the work landed: its namespace, Slurm account or Unix account."""
        return None

    def place_for(self, tenant: str) -> str | None:
        """Where `tenant`'s work must land (None: the engine does not say beforehand)."""
        return None

    def public_spec(self, wid: str) -> str:
        """What others who can list work read of it (pod, squeue record, argv)."""
        return ""

    def privileged_envs(self) -> list[Mapping[str, str]]:
        """The environments of the processes gpupool itself ran to start work (launcher,
        sbatch); empty where it runs none on this host."""
        return []

    def logs(self, wid: str) -> str:
        """The work's whole output (every runnable engine keeps logs)."""
        return logs_of(self.executor).logs(wid)

    def reached_work(self, wid: str) -> Mapping[str, str]:
        """NAME=value lines of the work's own output (what `Behaviour.show` printed)."""
        out = {}
        for line in self.logs(wid).splitlines():
            name, sep, value = line.partition("=")
            if sep and name.isidentifier():
                out[name] = value
        return out

    def containers(self, wid: str) -> tuple[str, list[str]] | None:
        """(container kind, ids) the node agents would report the work's processes in
        (`gpupool.telemetry.containers`); None where its processes run in none."""
        return None

    def pids(self, wid: str) -> set[int]:
        """The work's processes on this host, as the host tracks them (none elsewhere)."""
        return set()

    def nodes_of(self, wid: str) -> set[str] | None:
        """The nodes the work really runs on, as the engine placed it (None: not told)."""
        return None

    def notebook(self, wid: str, tenant: str = "lab") -> Workload:
        """A notebook workload as the hub's spawner submits it: the single-user server's
        command (here `NOTEBOOK_SERVER`), its environment given to `start`."""
        return Workload(
            wid,
            tenant,
            self.members[tenant],
            Request(gpus=1),
            command=("python3", "-c", NOTEBOOK_SERVER),
            kind=WorkloadKind.NOTEBOOK,
        )

    def answers(self, endpoint: str) -> bool | None:
        """Whether something answers HTTP at `endpoint` (None: not reachable from here)."""
        try:
            with urllib.request.urlopen(endpoint, timeout=5) as r:  # noqa: S310 - http only
                return bool(r.status == 200 and r.read() == b"contract-notebook")
        except OSError:
            return False

    def templates(self) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
        """(a notebook template the engine takes, one it must refuse) where it takes any."""
        return None

    def stick(self) -> None:
        """From now on, work started stays waiting in the engine (REJECTED tests)."""
        raise NotImplementedError

    def unstick(self) -> None:
        """Undo `stick`."""
        raise NotImplementedError

    # -- the same for every engine ------------------------------------------------------------
    def allocation(
        self, wid: str, *, gpus: int = 1, milli: int = 1000, nodes: int = 1, first: int = 0
    ) -> Allocation:
        """`gpus` GPUs (from index `first`) on each of the first `nodes` nodes; a fraction
        of one GPU with `milli` < 1000."""
        names = self.nodes()[:nodes]
        assert len(names) == nodes, f"{self.name} has {len(names)} nodes, not {nodes}"
        shares = tuple(
            Share(n, i, self.gpu_uuid(n, i), milli, 1024)
            for n in names
            for i in range(first, first + gpus)
        )
        return Allocation(wid, names[0], shares, self.clock.now())

    def workload(
        self,
        wid: str,
        behaviour: Behaviour,
        *,
        tenant: str = "lab",
        gpus: int = 1,
        milli: int = 1000,
        nodes: int = 1,
    ) -> Workload:
        """`gpus` whole GPUs on each of `nodes` nodes, or `milli` of one GPU."""
        request = (
            Request(gpus=gpus * nodes, nodes=nodes)
            if milli >= 1000
            else Request(gpu_milli=milli, gpu_memory_mib=1024)
        )
        return Workload(
            wid, tenant, self.members[tenant], request, command=self.command(wid, behaviour)
        )

    def start(
        self,
        wid: str,
        behaviour: Behaviour | None = None,
        *,
        tenant: str = "lab",
        env: Mapping[str, str] | None = None,
        gpus: int = 1,
        milli: int = 1000,
        nodes: int = 1,
        first: int = 0,
    ) -> Handle:
        """Start `behaviour` as workload `wid` of `tenant` on the engine's first node(s)."""
        behaviour = behaviour or Behaviour()
        workload = self.workload(wid, behaviour, tenant=tenant, gpus=gpus, milli=milli, nodes=nodes)
        alloc = self.allocation(wid, gpus=gpus, milli=milli, nodes=nodes, first=first)
        handle = self.executor.start(workload, alloc, env=env)
        self.started[wid] = Started(workload, alloc, behaviour, handle, dict(env or {}))
        return handle

    def start_notebook(self, wid: str, env: Mapping[str, str]) -> Handle:
        """Start `notebook(wid)` on one GPU of the first node with the hub's `env`."""
        workload, alloc = self.notebook(wid), self.allocation(wid)
        handle = self.executor.start(workload, alloc, env=env)
        self.started[wid] = Started(workload, alloc, Behaviour(until="stopped"), handle, dict(env))
        return handle

    def settle(self, wid: str, *states: ExecState, timeout: float | None = None) -> ExecStatus:
        """Let the engine move (`progress`, `tick`) until `poll(wid)` is in one of `states`."""

        def reached() -> ExecStatus | None:
            self.progress()
            self.executor.tick()
            st = self.executor.poll(wid)
            return st if st.state in states else None

        what = f"{self.name}: {wid} to become one of {[s.value for s in states]}"
        return wait_for(reached, what, timeout=timeout or self.timeout, every=self.every)

    def wait_ready(self, wid: str) -> None:
        """Until the work is running past its setup (it printed `READY`)."""

        def ready() -> bool:
            self.progress()
            self.executor.tick()
            return READY in self.logs(wid)

        wait_for(ready, f"{self.name}: {wid} to be ready", timeout=self.timeout, every=self.every)
