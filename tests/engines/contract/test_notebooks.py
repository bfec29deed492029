"""Notebooks (`ExecutorWithNotebooks`), for every engine that runs them: a notebook workload
as the hub's spawner submits it runs, is reported with the endpoint where it listens once it
does (and answers there, where the test can reach it), and a stop ends it like other work."""

from __future__ import annotations

from gpupool.engines.common.executor import ExecState
from tests.engines.contract.caps import need
from tests.support import wait_for

ENDED = (ExecState.SUCCEEDED, ExecState.FAILED, ExecState.LOST)
#: the hub's environment for its single-user server (its spawner's `env`)
HUB_ENV = {
    "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:8888/user/ann/",
    "JUPYTERHUB_API_TOKEN": "hub-token-for-the-contract",
    "JUPYTERHUB_USER": "ann",
}


def test_a_notebook_reports_where_it_listens_and_stops_like_other_work(engine_under_test):
    eut = engine_under_test
    need(eut, "notebooks")
    wid = eut.id("nb")
    eut.start_notebook(wid, HUB_ENV)

    def endpoint() -> str | None:
        eut.progress()
        eut.executor.tick()
        st = eut.executor.poll(wid)
        assert st.state not in ENDED, f"the notebook ended: {st}"
        return st.endpoint

    where = wait_for(endpoint, f"{eut.name}: the notebook's endpoint", eut.timeout, eut.every)
    assert where.startswith("http://")
    assert eut.answers(where) in (True, None)
    assert HUB_ENV["JUPYTERHUB_API_TOKEN"] not in eut.public_spec(wid)
    eut.executor.stop(wid, "the hub stopped it", grace_s=5)
    st = eut.settle(wid, *ENDED)
    assert st.stop_reason == "the hub stopped it" and st.endpoint is None
