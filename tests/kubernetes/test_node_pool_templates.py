"""A node request's PodTemplates do not outlive it (issue 34 follow-up, security review): they
are owned by their ProvisioningRequest (an ownerReference by uid, so the garbage collector
removes them with it, whoever deletes it), and gpupool deletes an ended request's objects
once its booking is over, or `KEEP_ENDED_S` after it ended, and forgets it. Against the
fake API server and its fake autoscaler (test_node_pools_k8s.py has the set-up); objects
checked with kubernetes-validate as the other tests do."""

from __future__ import annotations

import pytest

from gpupool.domain.nodepools import RequestState
from gpupool.engines.kubernetes import provisioning as pr
from gpupool.engines.kubernetes.nodepools import KEEP_ENDED_S
from tests.kubernetes.fakeapi_provisioning import _set_condition
from tests.kubernetes.test_node_pools_k8s import NS, autoscaler, system, world  # noqa: F401

pytestmark = pytest.mark.usefixtures("system")


def _asked(w) -> tuple[str, str]:
    """Waiting work that makes a request; (request id, workload id)."""
    w.fill()
    wid = w.submit(gpus=4)
    w.loop("scheduler").run_once()
    w.loop("autoscale").run_once()
    (req,) = w.requests()
    return req.id, wid


def _fulfil(w, scaler) -> None:
    scaler.step()
    w.clock.advance(60)
    scaler.step()
    w.loop("autoscale").run_once()
    assert w.requests()[0].state is RequestState.FULFILLED


def _objects(kube, rid: str) -> tuple[bool, list[tuple[str, str]]]:
    prov = kube.provisioning
    return (NS, rid) in prov.requests, [k for k in prov.templates if k[1].startswith(rid)]


def test_templates_are_owned_by_their_request_by_uid(world, kube):  # noqa: F811
    rid, _ = _asked(world)
    stored = kube.provisioning.requests[(NS, rid)]
    (key,) = _objects(kube, rid)[1]
    template = kube.provisioning.templates[key]
    assert template["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "autoscaling.x-k8s.io/v1",
            "kind": "ProvisioningRequest",
            "name": rid,
            "uid": stored["metadata"]["uid"],
            "controller": True,
        }
    ]
    kv = pytest.importorskip("kubernetes_validate")
    for version in ("1.30.0", "1.34.0"):
        kv.validate(template, version, strict=True)
    # whoever deletes the request (the autoscaler's clean-up, an admin): the garbage
    # collector takes its templates with it, by that uid
    from kubernetes import client  # the official client, as kubectl would

    client.CustomObjectsApi(kube.client()).delete_namespaced_custom_object(
        pr.GROUP, pr.VERSION, NS, pr.PLURAL, rid
    )
    assert _objects(kube, rid) == (False, []) and kube.provisioning.collected == [key]


def test_a_fulfilled_request_goes_once_its_booking_is_over(world, kube, autoscaler):  # noqa: F811
    rid, wid = _asked(world)
    _fulfil(world, autoscaler)
    ex = world.system.ctx.executor
    world.loop("autoscale").run_once()  # reported; its pods may still consume the booking
    has_pr, templates = _objects(kube, rid)
    assert has_pr and templates
    with kube.lock:  # the autoscaler ends the booking (after its 10 minutes)
        obj = kube.provisioning.requests[(NS, rid)]
        _set_condition(obj, "BookingExpired", "True", "BookingExpired", "booking expired")
    world.loop("autoscale").run_once()
    assert _objects(kube, rid) == (False, [])
    assert world.requests()[0].state is RequestState.FULFILLED  # the record stays
    assert ex.consume_annotations(wid) == {}  # forgotten by the executor


def test_a_fulfilled_request_without_an_end_of_booking_goes_after_a_while(
    world,  # noqa: F811
    kube,
    autoscaler,  # noqa: F811
):
    rid, _ = _asked(world)
    _fulfil(world, autoscaler)
    world.clock.advance(KEEP_ENDED_S - 1)
    world.loop("autoscale").run_once()
    assert _objects(kube, rid)[0]
    world.clock.advance(1)
    world.loop("autoscale").run_once()
    assert _objects(kube, rid) == (False, [])


def test_a_request_the_autoscaler_failed_goes_at_the_next_pass(world, kube, autoscaler):  # noqa: F811
    autoscaler.groups["gpu-h100"].max_nodes = 1  # cannot hold a gang of two nodes
    world.fill()
    world.submit(nodes=2, gpus_per_node=8)
    world.loop("scheduler").run_once()
    world.loop("autoscale").run_once()
    (req,) = world.requests()
    autoscaler.step()
    world.clock.advance(60)
    autoscaler.step()
    world.loop("autoscale").run_once()  # withdrawn with the autoscaler's reason: reported
    assert world.requests()[0].state is RequestState.WITHDRAWN
    assert _objects(kube, req.id)[0]
    world.loop("autoscale").run_once()
    assert _objects(kube, req.id) == (False, [])
