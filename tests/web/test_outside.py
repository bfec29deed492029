"""GPUs used outside gpupool on the dashboard: the cluster view's status `outside` naming the
holder, counted apart from free (plain data), and in a real browser a distinct tile whose
label and tooltip name the holder, plus the legend."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator

import pytest

from gpupool.domain import GPU, GPUHealth, Node, NodeState, OutsideUse
from gpupool.store import AllocationRepo, NodeRepo
from gpupool.web.page_data import cluster_view
from tests.support import ServedApp
from tests.web.conftest import LiveServer, build_app, login, shot

SLURM = OutsideUse("slurm job 4711", "bob", since=1_000.0)


def _node(state: NodeState = NodeState.READY) -> Node:
    return Node(
        "node-a",
        (
            GPU(0, "g0", "H100", 81559),
            GPU(1, "g1", "H100", 81559, outside=SLURM),
            GPU(2, "g2", "H100", 81559, health=GPUHealth.UNHEALTHY, outside=SLURM),
        ),
        state=state,
    )


def test_cluster_view_status_outside_names_the_holder_and_counts_it_apart():
    view = cluster_view([_node()], [], now=2_000.0)
    gpus = view["nodes"][0]["gpus"]
    assert [g["status"] for g in gpus] == ["free", "outside", "down"]  # unhealthy wins
    assert gpus[1]["outside"] == {"ref": "slurm job 4711", "user": "bob", "since": 1_000.0}
    assert gpus[1]["health"] == "healthy" and gpus[0]["outside"] is None
    s = view["summary"]
    assert (s["gpus"], s["free"], s["outside"], s["down"]) == (3, 1, 1, 1)
    down = cluster_view([_node(NodeState.DOWN)], [], now=2_000.0)["nodes"][0]["gpus"]
    assert [g["status"] for g in down] == ["down"] * 3


# -- in a real browser ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """This module's own server (it changes the GPUs)."""
    db = tmp_path_factory.mktemp("web-outside") / "gpupool.db"
    app, seeded = build_app(f"sqlite:///{db}", time.time(), gpus=4, workloads=3)
    with ServedApp(app) as url:
        yield LiveServer(url, app, seeded, app.state.ctx.store)


@pytest.fixture(scope="module")
def outside_gpu(live: LiveServer) -> tuple[str, int]:
    """(node, index) of a GPU no workload holds, now used outside gpupool by a Slurm job."""
    with live.store.write() as s:  # type: ignore[attr-defined]
        held = {sh.gpu_uuid for a in AllocationRepo(s).active() for sh in a.shares}
        (node,) = NodeRepo(s).list()
        free = next(g for g in node.gpus if g.uuid not in held)
        gpus = tuple(dataclasses.replace(g, outside=SLURM) if g is free else g for g in node.gpus)
        NodeRepo(s).upsert(dataclasses.replace(node, gpus=gpus))
    return node.name, free.index


@pytest.mark.slow
def test_an_outside_gpu_shows_as_outside_with_its_holder(page, outside_gpu):
    expect = pytest.importorskip("playwright.sync_api").expect
    node, index = outside_gpu
    login(page, "ann")
    tile = page.locator("li.gpu.outside")
    expect(tile).to_have_count(1)
    expect(tile).to_have_attribute(
        "aria-label",
        f"GPU {index} on {node}: H100-80GB, used outside gpupool by slurm job 4711 (bob)",
    )
    expect(tile).to_have_attribute("title", "used outside gpupool by slurm job 4711 (bob)")
    expect(tile.locator(".badge.state-outside")).to_have_text("outside gpupool")
    expect(tile.locator(".badge.state-outside")).to_have_attribute(
        "title", re.compile(r"^Healthy, but used outside gpupool by slurm job 4711 \(bob\) since ")
    )
    expect(tile.locator(".outside-by")).to_have_text("Outside gpupool: slurm job 4711 · bob")
    # a look of its own: not the red of an unhealthy GPU, not the green of a free one
    colour = tile.evaluate("el => getComputedStyle(el).borderLeftColor")
    free = page.locator("li.gpu.free").first.evaluate("el => getComputedStyle(el).borderLeftColor")
    assert colour == "rgb(124, 58, 237)" and colour != free
    expect(page.locator("#summary")).to_contain_text("Outside gpupool1")
    expect(page.locator(".legend .state-outside")).to_have_text("outside gpupool")
    shot(page, "cluster-outside")
