"""What a pod says about its workload, read from the pod object alone (pure): its state as an
`ExecStatus`, why it is still Pending, its node and when gpupool started it.

A container the kubelet will never start as configured is a failure, not a wait:
`CreateContainerConfigError` because the image runs as root (or as a user name the kubelet
cannot check) while gpupool's pods run with `runAsNonRoot` (`config_failure`). The message
says what to do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.engines.common.executor import ExecState, ExecStatus
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes import notebooks as nb


def started_at(pod: Mapping[str, Any], default: float) -> float:
    raw = (pod.get("metadata", {}).get("annotations") or {}).get(m.STARTED_AT)
    try:
        return float(raw) if raw is not None else default
    except ValueError:
        return default


def container_state(pod: Mapping[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return dict(statuses[0].get("state") or {}) if statuses else {}


def node_of(pod: Mapping[str, Any]) -> str | None:
    """The node a pod runs on, or the one its required node affinity pins it to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    try:
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        return str(terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0])
    except (KeyError, IndexError, TypeError):
        return None


def pending_reason(pod: Mapping[str, Any], events: list[dict[str, Any]]) -> str:
    """Why a pod is still Pending: its PodScheduled condition, its last warning event, or
    its container's waiting reason."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason', 'Unschedulable')}: {c.get('message', '')}".strip(": ")
    if events:
        e = events[-1]
        return f"{e.get('reason', '')}: {e.get('message', '')}".strip(": ")
    waiting = container_state(pod).get("waiting") or {}
    if waiting:
        return f"{waiting.get('reason', '')}: {waiting.get('message', '')}".strip(": ")
    return "no reason given by Kubernetes"


#: in the kubelet's messages for an image user that `runAsNonRoot` refuses ("container has
#: runAsNonRoot and image will run as root", "... and image has non-numeric user (x) ...")
_NON_ROOT = "runAsNonRoot"


def config_failure(pod: Mapping[str, Any]) -> str | None:
    """Why the pod's container can never start (None: it may still): a
    `CreateContainerConfigError` of `runAsNonRoot` against the image's user, while Pending."""
    if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return None
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        msg = str(waiting.get("message") or "")
        if waiting.get("reason") == "CreateContainerConfigError" and _NON_ROOT in msg:
            return (
                f"the image runs as root or names its user by name ({msg}); gpupool's pods run "
                "as non-root (runAsNonRoot, Pod Security restricted): build the image with a "
                "numeric non-root USER (e.g. USER 1000), or have the admin start gpupool with "
                "--pod-security baseline (docs/kubernetes.md, Pod security)"
            )
    return None


def status_of(workload_id: str, pod: Mapping[str, Any]) -> ExecStatus:
    """A pod's phase and container status as an `ExecStatus` (pure)."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    state = container_state(pod)
    if phase == "Succeeded":
        return ExecStatus(workload_id, ExecState.SUCCEEDED, exit_code=0)
    if phase == "Failed":
        term = state.get("terminated") or {}
        code = term.get("exitCode")
        reason = term.get("reason") or (pod.get("status") or {}).get("reason") or "Failed"
        msg = (pod.get("status") or {}).get("message") or ""
        return ExecStatus(
            workload_id,
            ExecState.FAILED,
            exit_code=int(code) if code is not None else None,
            message=f"{reason}{': ' + msg if msg else ''}",
        )
    if phase == "Running":
        term = state.get("terminated")
        if term is not None:  # the container ended, the pod not yet marked
            code = int(term.get("exitCode", 1))
            st = ExecState.SUCCEEDED if code == 0 else ExecState.FAILED
            return ExecStatus(workload_id, st, exit_code=code, message=term.get("reason", ""))
        return ExecStatus(workload_id, ExecState.RUNNING, endpoint=nb.endpoint_of(pod))
    if phase == "Unknown":
        return ExecStatus(workload_id, ExecState.RUNNING, message="the node stopped reporting")
    why = config_failure(pod)
    if why is not None:
        return ExecStatus(workload_id, ExecState.FAILED, message=why)
    return ExecStatus(workload_id, ExecState.STARTING)
