"""A real Prometheus (Debian's `prometheus` package) scrapes a real gpupool server (uvicorn on a
free port, simulated GPUs, the fake executor, a real process attributed through /proc), and
every query of the shipped Grafana dashboard returns series; `promtool check metrics` lints the
exposition.

Skipped, saying why, where the `prometheus` / `promtool` binaries are missing (scripts/test
installs them). Waiting is polling Prometheus's HTTP API with a bounded deadline.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Membership, Node, Quota, Role, Tenant, User
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.server.loops.telemetry import TelemetryLoop
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import AllocationRepo, NodeRepo, TenantRepo, UserRepo, open_store
from gpupool.system import SystemSettings, build_system
from gpupool.telemetry import SimulatedSource
from tests.support import ServedApp, free_port, wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpupool.json"
PROMETHEUS = os.environ.get("GPUPOOL_PROMETHEUS") or shutil.which("prometheus")
PROMTOOL = os.environ.get("GPUPOOL_PROMTOOL") or shutil.which("promtool")
HOST = "sim-prom"
#: the server's scrape token (GPUPOOL_METRICS_TOKEN): Prometheus sends it from a file
SCRAPE_TOKEN = "prometheus-scrape-token"

pytestmark = pytest.mark.skipif(
    not (PROMETHEUS and PROMTOOL),
    reason="Prometheus not found (prometheus and promtool on PATH, or GPUPOOL_PROMETHEUS and "
    "GPUPOOL_PROMTOOL); scripts/test installs Debian's prometheus package",
)


class Cluster:
    """The served gpupool app and the handles to drive it."""

    def __init__(self, tmp: Path, metrics_token: str | None = None):
        self.clock = ManualClock(1_780_000_000.0)
        self.store = open_store(f"sqlite:///{tmp / 'gpupool.db'}")
        self.source = SimulatedSource("2xH100", clock=self.clock, hostname=HOST)
        snap = self.source.snapshot()
        now = self.clock.now()
        with self.store.write() as s:
            NodeRepo(s).upsert(Node(HOST, tuple(g.to_domain() for g in snap.gpus), 64000, 512000))
            TenantRepo(s).save(Tenant("lab-a", Quota.gpus(1, 2)), now)
            TenantRepo(s).save(Tenant("lab-b", Quota.gpus(1, 2)), now)
            UserRepo(s).create(User("ann"), None, now)
            UserRepo(s).set_membership(Membership("ann", "lab-a", Role.MEMBER))
        self.executor = FakeExecutor(self.clock)
        settings = Settings(
            database_url=self.store.url, start_loops=False, metrics_token=metrics_token
        )
        engine = FakeEngine(self.executor, sources=[self.source])
        self.app = build_system(
            SystemSettings(server=settings), engine, clock=self.clock, store=self.store
        ).app  # the system gpupool up builds: its telemetry loop samples the source
        self.ctx = self.app.state.ctx
        telemetry = self.ctx.loops.get("telemetry")
        assert isinstance(telemetry, TelemetryLoop)
        self.telemetry = telemetry
        self.token = issue_token(self.ctx, "ann", "test", None).token

    def submit(self, url: str, gpus: int) -> str:
        r = httpx.post(
            f"{url}/api/v1/workloads",
            json={"gpus": gpus, "command": ["train"], "tenant": "lab-a"},
            headers={"Authorization": f"Bearer {self.token}"},
        )
        assert r.status_code == 201, r.text
        self.clock.advance(20)
        return r.json()["id"]


class Prometheus:
    """A real Prometheus scraping `target`; with `token`, as docs/admin-guide.md says: the
    scrape token in a file, `authorization: {credentials_file: ...}`."""

    def __init__(self, tmp: Path, target: str, token: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = tmp / "prometheus.yml"
        auth = ""
        if token is not None:
            (tmp / "scrape-token").write_text(token + "\n")
            auth = f"    authorization:\n      credentials_file: {tmp / 'scrape-token'}\n"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: gpupool\n    metrics_path: /metrics\n"
            f"{auth}    static_configs:\n      - targets: ['{target}']\n"
        )
        self.log = tmp / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )

    def query(self, expr: str) -> list[dict]:
        if self.proc.poll() is not None:
            raise AssertionError(f"Prometheus exited:\n{self.log.read_text()[-3000:]}")
        try:
            r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        except httpx.TransportError:
            return []  # not listening yet
        if r.status_code == 503:
            return []  # listening, but its storage is not ready yet ("Service Unavailable")
        body = r.json()
        assert body.get("status") == "success", (expr, body)
        return body["data"]["result"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """gpupool served with two lab-a workloads running, one waiting and a real process on a
    simulated GPU; Prometheus has scraped it before and after one more admission."""
    tmp = tmp_path_factory.mktemp("prometheus")
    cluster = Cluster(tmp, metrics_token=SCRAPE_TOKEN)  # the other users scrape on 127.0.0.1
    sleeper = None
    prom = None
    served = ServedApp(cluster.app)
    url = served.start()
    try:
        ids = [cluster.submit(url, 1) for _ in range(3)]  # lab-a's limit is 2: one waits
        cluster.ctx.loops.get("scheduler").run_once()
        with cluster.store.read() as s:
            held = {a.workload_id: a for a in AllocationRepo(s).active()}
        assert set(held) == set(ids[:2])
        gpu = held[ids[0]].shares[0].gpu_index
        env = {**os.environ, "GPUPOOL_WORKLOAD_ID": ids[0]}
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
        cluster.source.add_process(gpu, sleeper.pid, memory_mib=4096, sm_util=60)
        wait_for(
            lambda: (
                cluster.telemetry.run_once() is not None
                and sleeper.pid in cluster.telemetry.sampler.latest.owners
            ),
            "the process to be attributed through /proc",
            timeout=30,
        )
        prom = Prometheus(tmp, f"127.0.0.1:{served.port}", token=SCRAPE_TOKEN)
        wait_for(
            lambda: prom.query('gpupool_workload_wait_seconds_count{tenant="lab-a"} == 2'),
            "Prometheus to scrape gpupool",
        )
        # one more admission and more energy between scrapes: rates and increases have data
        cluster.executor.finish(ids[1])
        ReconcilerLoop(cluster.ctx).run_once()
        assert ids[2] in cluster.ctx.loops.get("scheduler").run_once().admitted
        cluster.clock.advance(10)
        cluster.telemetry.run_once()
        wait_for(
            lambda: prom.query('gpupool_workload_wait_seconds_count{tenant="lab-a"} == 3'),
            "Prometheus to scrape the third admission",
        )
        yield url, prom
    finally:
        if prom is not None:
            prom.stop()
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        served.stop()
        cluster.store.close()


def _targets(node) -> list[tuple[str, str]]:
    """(panel title, expr) of every query in the dashboard."""
    out: list[tuple[str, str]] = []
    if isinstance(node, dict):
        if "targets" in node:
            out += [(node.get("title", "?"), t["expr"]) for t in node["targets"] if "expr" in t]
        for k, v in node.items():
            if k != "targets":
                out += _targets(v)
    elif isinstance(node, list):
        for v in node:
            out += _targets(v)
    return out


def _as_grafana_would(expr: str) -> str:
    """The query with the dashboard's variables set to "All" and Grafana's rate interval."""
    expr = expr.replace("$__rate_interval", "1m")
    return re.sub(r"\$\{?(hostname|tenant|user)\}?", ".*", expr)


def test_every_dashboard_query_returns_series_from_prometheus(scraped):
    _, prom = scraped
    queries = _targets(json.loads(DASHBOARD.read_text()))
    assert len(queries) >= 20
    empty: list[str] = []
    for title, expr in queries:
        q = _as_grafana_would(expr)
        try:
            wait_for(lambda q=q: prom.query(q), f"series for {title!r}", timeout=15)
        except AssertionError:
            empty.append(f"{title}: {q}")
    assert not empty, "dashboard queries without series:\n" + "\n".join(empty)


def test_prometheus_sees_fairness_clocks_and_energy(scraped):
    _, prom = scraped

    def value(expr: str) -> float:
        (res,) = wait_for(lambda: prom.query(expr), expr, timeout=15)
        return float(res["value"][1])

    assert value('gpupool_tenant_guaranteed_gpus{tenant="lab-a"}') == 1.0
    assert value('gpupool_tenant_fair_share_gpus{tenant="lab-a"}') == 2.0
    assert value('gpupool_tenant_allocated_gpus{tenant="lab-a"}') == 2.0
    assert value('gpupool_tenant_pending_workloads{tenant="lab-a"}') == 0.0
    # over the cumulative buckets, not a rate: a rate over scrapes taken between the three
    # admissions extrapolates each bucket differently and moved p90 below 30 under load
    p90 = value(
        "histogram_quantile(0.9, sum by (le) "
        '(gpupool_workload_wait_seconds_bucket{tenant="lab-a"}))'
    )
    assert not math.isnan(p90) and 30 <= p90 <= 60  # the third waited 60 s (injected clock)
    assert value(f'max(DCGM_FI_DEV_SM_CLOCK{{Hostname="{HOST}"}})') == 1980.0
    assert value(f'max(DCGM_FI_DEV_MEM_CLOCK{{Hostname="{HOST}"}})') == 2619.0
    assert value(f'max(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{Hostname="{HOST}"}})') > 0
    mem = value('sum(gpupool_gpu_process_memory_bytes{tenant="lab-a", user="ann"})')
    assert mem == 4096 * 2**20


def test_promtool_check_metrics_finds_only_dcgms_own_label_name(scraped):
    url, _ = scraped
    assert httpx.get(f"{url}/metrics").status_code == 401  # the token is set: even locally
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"}).text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    run = subprocess.run(
        [str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True
    )
    findings = {line for line in (run.stdout + run.stderr).splitlines() if line.strip()}
    # dcgm-exporter's label `modelName` is camelCase; keeping its exact name is what makes
    # NVIDIA's DCGM dashboards work unchanged. Nothing else may be reported.
    camel = {m for m in re.findall(r"[{,]([A-Za-z_]+)=", text) if re.search(r"[a-z][A-Z]", m)}
    assert camel == {"modelName"}
    allowed = re.compile(
        r"^(DCGM_FI_\w+|gpupool_gpu_info) label names should be written in 'snake_case' "
        r"not 'camelCase'$"
    )
    assert all(allowed.match(f) for f in findings), findings
