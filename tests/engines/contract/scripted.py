"""Adapters of the engines whose work the test plays out: the fake engine (its executor is
scripted), Kubernetes against the stateful fake API server over real HTTP (the test is the
kubelet: `progress` binds, runs and ends pods as their `Behaviour` says), and the template
engine (it runs nothing yet)."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from typing import Any, cast

from gpupool.domain import Node, Workload
from gpupool.domain.nodepools import NodePool
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.common.executor import Executor, Handle
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.engines.kubernetes.podstatus import node_of
from gpupool.engines.template.engine import TemplateEngine
from gpupool.telemetry import SimulatedSource
from tests.engines.contract.adapter import GOT_TERM, Behaviour, EngineUnderTest
from tests.kubernetes.fakeapi import FakeKube
from tests.kubernetes.fakeapi_provisioning import FakeAutoscaler
from tests.kubernetes.rbac_rules import allowed

#: the pod template of a notebook as the hub's KubeSpawner sends it
NOTEBOOK_TEMPLATE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "jupyter-ann", "labels": {"component": "singleuser-server"}},
    "spec": {
        "containers": [
            {
                "name": "notebook",
                "image": "quay.io/jupyter/base-notebook:2026-11-01",
                "args": ["jupyterhub-singleuser"],
                "ports": [{"name": "notebook-port", "containerPort": 8890}],
            }
        ]
    },
}
GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}


def _simulated(name: str, spec: str = "4xH100-80GB") -> Node:
    source = SimulatedSource(spec, hostname=name)
    return Node(name, tuple(g.to_domain() for g in source.snapshot().gpus), 16000, 65536)


class FakeUnderTest(EngineUnderTest):
    """The fake engine on two simulated nodes; `restart` is `FakeExecutor.reborn` (the
    same world of fake processes)."""

    name = "fake"

    def __init__(self) -> None:
        super().__init__()
        self._nodes = [_simulated("fake-1"), _simulated("fake-2")]
        self._ex = self._open(None)
        self._written: set[str] = set()

    def _open(self, executor: FakeExecutor | None) -> FakeExecutor:
        return cast(
            FakeExecutor, FakeEngine(executor, nodes=self._nodes).open(EngineEnv(self.clock))
        )

    @property
    def executor(self) -> Executor:
        return self._ex

    def nodes(self) -> list[str]:
        return [n.name for n in self._nodes]

    def gpu_uuid(self, node: str, index: int) -> str:
        return next(n for n in self._nodes if n.name == node).gpus[index].uuid

    def restart(self) -> Executor:
        self._ex.close()
        self._ex = self._open(self._ex.reborn())
        return self._ex

    cannot_bring_up = None

    def bring_up(self, pool: NodePool) -> None:
        """The fake cloud boots them on the clock (`FakeCloud.advance`)."""
        self.clock.advance(pool.boot_seconds)

    def start(self, wid: str, behaviour: Behaviour | None = None, **kw: Any) -> Handle:
        # the fake's work dies of the polite signal unless it "ignores" it (the trap is
        # played by `progress`: the work then ends with 0 before the forced end)
        self._ex.ignores_term = behaviour is not None and behaviour.on_term != "die"
        return super().start(wid, behaviour, **kw)

    def progress(self) -> None:
        for wid, s in self.started.items():
            p = self._ex.world.processes.get(wid)
            if p is None or not p.state.alive:
                continue
            if wid not in self._written:  # it runs: its container is the engine's
                self._ex.write_log(wid, s.behaviour.output(p.env))
                self._ex.containers.setdefault("pod", {})[_container(wid)] = wid
                self._written.add(wid)
            if p.stop_reason is not None:
                if s.behaviour.on_term == "exit0":
                    self._ex.write_log(wid, GOT_TERM + "\n")
                    self._ex.finish(wid, 0)
                continue
            if s.behaviour.until == "end" or (s.behaviour.until == "release" and s.released):
                self._ex.finish(wid, s.behaviour.exit_code)
                self._ex.times[wid] = (p.started_at, self.clock.now())

    def place_of(self, wid: str) -> str | None:
        return self._ex.world.processes[wid].unix_user

    def containers(self, wid: str) -> tuple[str, list[str]] | None:
        return "pod", [_container(wid)]

    def nodes_of(self, wid: str) -> set[str] | None:
        alloc = self._ex.world.processes[wid].allocation
        return set(alloc.nodes) if alloc else set()


def _container(wid: str) -> str:
    return f"uid-of-{wid}"


class KubernetesUnderTest(EngineUnderTest):
    """The kubernetes engine (no watches: one list per pass) against `FakeKube` with two
    GPU nodes. Every request it made must be one the chart's RBAC grants (checked at
    `close`, as tests/kubernetes does)."""

    name = "kubernetes"
    cannot_reject = None

    def __init__(self) -> None:
        super().__init__()
        self.kube = FakeKube().start()
        for name in ("k8s-1", "k8s-2"):
            # time-slicing with a renamed resource: whole GPUs and shares of them
            self.kube.add_node(name, 4, labels=GFD, extra={"nvidia.com/gpu.shared": "16"})
        self._stuck: set[str] = set()
        self._sticking = False
        #: notebooks' pod templates, as the hub's KubeSpawner sends them (by workload id)
        self.sent: dict[str, dict[str, Any]] = {}
        self._written: set[tuple[str, str]] = set()
        self._open()

    def _open(self) -> None:
        self.engine = KubernetesEngine(KubeOptions(watch=False), api_client=self.kube.client())
        env = EngineEnv(self.clock, notebook_template=self.sent.get)
        self._ex = self.engine.open(env)
        self._nodes = self.engine.inventory()

    @property
    def executor(self) -> Executor:
        return self._ex

    def nodes(self) -> list[str]:
        return [n.name for n in self._nodes]

    def gpu_uuid(self, node: str, index: int) -> str:
        return next(n for n in self._nodes if n.name == node).gpus[index].uuid

    def restart(self) -> Executor:
        self._ex.close()
        self.engine.close()
        self._open()
        return self._ex

    cannot_bring_up = None

    def bring_up(self, pool: NodePool) -> None:
        """The fake Cluster Autoscaler's node group for `pool` adds them, `boot_seconds`
        after it first saw the request (on the clock)."""
        scaler = FakeAutoscaler(self.kube, self.clock, delay_s=pool.boot_seconds)
        scaler.add_group(pool.name, pool.gpus, pool.max_nodes, **GFD)
        scaler.step()
        self.clock.advance(pool.boot_seconds)
        scaler.step()

    def stick(self) -> None:
        self._sticking = True

    def unstick(self) -> None:
        self._sticking = False
        self._stuck.clear()

    def start(self, wid: str, behaviour: Behaviour | None = None, **kw: Any) -> Handle:
        if self._sticking:
            self._stuck.add(wid)
        return super().start(wid, behaviour, **kw)

    def _pods(self, wid: str | None = None) -> list[dict[str, Any]]:
        pods = self.kube.pods_of(m.SELECTOR)
        return [p for p in pods if wid is None or _wid(p) == wid]

    def progress(self) -> None:
        """The kubelet's part: bind and run what is Pending (unless stuck), write the
        output, end what its behaviour ends, answer a graceful delete (SIGTERM)."""
        for pod in self._pods():
            wid, meta = _wid(pod), pod["metadata"]
            s = self.started.get(wid)
            if s is None:
                continue
            ns, name, b = meta["namespace"], meta["name"], s.behaviour
            phase = pod["status"].get("phase")
            if meta.get("deletionTimestamp") and phase == "Running":
                if b.on_term == "exit0":
                    self.kube.write_log(ns, name, GOT_TERM + "\n")
                    self.kube.set_phase(ns, name, "Succeeded", exit_code=0)
                elif b.on_term == "die":
                    self.kube.set_phase(ns, name, "Failed", exit_code=143)
                continue  # "ignore": until the forced delete
            if phase == "Pending" and wid in self._stuck:
                if not pod["status"].get("conditions"):
                    self.kube.set_unschedulable(ns, name, "0/2 nodes are available: contract")
            elif phase == "Pending":
                self.kube.set_phase(ns, name, "Running", node=node_of(pod), pod_ip="10.0.0.7")
                if (ns, name) not in self._written:
                    self._written.add((ns, name))
                    self.kube.write_log(ns, name, b.output(self.kube.env_of(pod), _uid(pod)))
            elif phase == "Running" and (b.until == "end" or (b.until == "release" and s.released)):
                ended = "Succeeded" if b.exit_code == 0 else "Failed"
                self.kube.set_phase(ns, name, ended, exit_code=b.exit_code)

    def notebook(self, wid: str, tenant: str = "lab") -> Workload:
        """A notebook as the hub's KubeSpawner submits it: no command, its pod template."""
        self.sent[wid] = NOTEBOOK_TEMPLATE
        return dataclasses.replace(super().notebook(wid, tenant), command=())

    def templates(self) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
        bad = copy.deepcopy(NOTEBOOK_TEMPLATE)
        bad["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        return NOTEBOOK_TEMPLATE, bad

    def answers(self, endpoint: str) -> bool | None:
        return None  # the pod's IP is the fake's own: nothing listens there

    def uid_of(self, wid: str) -> int | None:
        uids = {_uid(p) for p in self._pods(wid)}
        return max(uids) if 0 not in uids else 0

    def place_of(self, wid: str) -> str | None:
        return self._pods(wid)[0]["metadata"]["namespace"]

    def place_for(self, tenant: str) -> str | None:
        return m.namespace_for(tenant)

    def public_spec(self, wid: str) -> str:
        return json.dumps(self._pods(wid))

    def containers(self, wid: str) -> tuple[str, list[str]] | None:
        return "pod", [p["metadata"]["uid"] for p in self._pods(wid)]

    def nodes_of(self, wid: str) -> set[str] | None:
        return {p["spec"].get("nodeName", "") for p in self._pods(wid)}

    def close(self) -> None:
        self.engine.close()
        self.kube.stop()
        denied = sorted({(mt, p) for mt, p in self.kube.requests if not allowed(mt, p)})
        assert not denied, f"requests the chart's RBAC does not grant: {denied}"


def _wid(pod: Mapping[str, Any]) -> str:
    return str((pod["metadata"].get("annotations") or {}).get(m.WORKLOAD, ""))


def _uid(pod: Mapping[str, Any]) -> int:
    """The uid the pod's container runs as; 0 wherever root is not ruled out (no
    runAsNonRoot, no non-zero runAsUser, or privilege escalation allowed)."""
    psc = pod["spec"].get("securityContext") or {}
    uid = 0
    for c in pod["spec"]["containers"]:
        csc = c.get("securityContext") or {}
        run_as = csc.get("runAsUser", psc.get("runAsUser"))
        non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if not run_as or non_root is not True or csc.get("allowPrivilegeEscalation") is not False:
            return 0
        uid = max(uid, int(run_as))
    return uid


class TemplateUnderTest(EngineUnderTest):
    """The template engine: it opens and answers, but has no nodes and runs nothing."""

    name = "template"
    cannot_run = (
        "the template engine runs nothing (its inventory has no nodes and its start "
        "refuses); a new engine copied from it must fill both and pass this suite"
    )

    def __init__(self) -> None:
        super().__init__()
        self.engine = TemplateEngine()
        self._ex = self.engine.open(EngineEnv(self.clock))

    @property
    def executor(self) -> Executor:
        return self._ex

    def nodes(self) -> list[str]:
        return [n.name for n in self.engine.inventory()]

    def gpu_uuid(self, node: str, index: int) -> str:
        raise AssertionError(self.cannot_run)

    def restart(self) -> Executor:
        self._ex.close()
        self._ex = self.engine.open(EngineEnv(self.clock))
        return self._ex
