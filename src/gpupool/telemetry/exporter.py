"""Prometheus metrics: DCGM-exporter-compatible GPU series plus gpupool's own.

DCGM series (same names, units and labels as NVIDIA's dcgm-exporter, so its Grafana
dashboard works unchanged): `DCGM_FI_DEV_GPU_UTIL` (%), `DCGM_FI_DEV_FB_USED` and
`DCGM_FI_DEV_FB_FREE` (MiB), `DCGM_FI_DEV_GPU_TEMP` (C), `DCGM_FI_DEV_POWER_USAGE` (W),
`DCGM_FI_DEV_SM_CLOCK` and `DCGM_FI_DEV_MEM_CLOCK` (MHz),
`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ since the driver loaded; it only goes up: use
`rate()`/`increase()`), labelled `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`,
`DCGM_FI_DRIVER_VERSION`. A value that is N/A is left out rather than faked. All are gauges:
dcgm-exporter types the energy as a counter, but a Prometheus client would rename a counter
to `..._total`, and the name is what dashboards query.

gpupool series: `gpupool_gpu_info` (simulated flag, health, MIG), `gpupool_gpu_healthy`,
`gpupool_gpu_process_memory_bytes` and `gpupool_gpu_process_sm_util` labelled with user,
tenant and workload, and `gpupool_policing_detections` by kind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpupool.telemetry.policing import DetectionKind
from gpupool.telemetry.sampler import Frame
from gpupool.telemetry.source import TelemetryError

DCGM_LABELS = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
]
PROCESS_LABELS = ["gpu", "UUID", "Hostname", "pid", "type", "user", "tenant", "workload"]
_DCGM = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.util_gpu),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda g: g.memory_used_mib),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", lambda g: g.memory_free_mib),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.mem_clock_mhz),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        lambda g: g.energy_mj,
    ),
)


class TelemetryCollector(Collector):
    """A custom collector that renders the latest frame at scrape time."""

    def __init__(self, frame: Callable[[], Frame | None], hostname: str | None = None):
        self.frame = frame
        self.hostname = hostname

    def collect(self) -> Iterator[GaugeMetricFamily]:
        frame = self.frame()
        if frame is None:
            return
        snap = frame.snapshot
        host = self.hostname or snap.hostname
        driver = snap.driver_version or ""
        families = {n: GaugeMetricFamily(n, h, labels=DCGM_LABELS) for n, h, _ in _DCGM}
        info = GaugeMetricFamily(
            "gpupool_gpu_info",
            'GPU identity; simulated="true" marks a simulated GPU.',
            labels=[
                "gpu",
                "UUID",
                "modelName",
                "Hostname",
                "simulated",
                "mig_mode",
                "driver_version",
                "cuda_version",
            ],
        )
        healthy = GaugeMetricFamily(
            "gpupool_gpu_healthy",
            "1 if the GPU answers NVML, 0 if it is lost.",
            labels=["gpu", "UUID", "Hostname"],
        )
        mem = GaugeMetricFamily(
            "gpupool_gpu_process_memory_bytes",
            "GPU memory used by a process (bytes).",
            labels=PROCESS_LABELS,
        )
        sm = GaugeMetricFamily(
            "gpupool_gpu_process_sm_util",
            "SM utilization of a process (in %).",
            labels=PROCESS_LABELS,
        )
        for g in snap.gpus:
            idx = str(g.index)
            if g.healthy:
                labels = [idx, g.uuid, g.pci_bus_id or "", g.device, g.name, host, driver]
                for name, _, get in _DCGM:
                    value = get(g)
                    if value is not None:
                        families[name].add_metric(labels, float(value))
            mig = "" if g.mig_enabled is None else ("enabled" if g.mig_enabled else "disabled")
            info.add_metric(
                [
                    idx,
                    g.uuid,
                    g.name,
                    host,
                    "true" if g.simulated else "false",
                    mig,
                    driver,
                    snap.cuda_version or "",
                ],
                1.0,
            )
            healthy.add_metric([idx, g.uuid, host], 1.0 if g.healthy else 0.0)
            for p in g.processes:
                owner = frame.owners.get(p.pid)
                labels = [
                    idx,
                    g.uuid,
                    host,
                    str(p.pid),
                    str(p.kind),
                    (owner.user or owner.unix_user or "") if owner else "",
                    (owner.tenant or "") if owner else "",
                    (owner.workload_id or "") if owner else "",
                ]
                if p.used_memory_bytes is not None:
                    mem.add_metric(labels, float(p.used_memory_bytes))
                if p.sm_util is not None:
                    sm.add_metric(labels, float(p.sm_util))
        detections = GaugeMetricFamily(
            "gpupool_policing_detections",
            "Current policing detections on this host, by kind.",
            labels=["Hostname", "kind"],
        )
        counts = {k: 0 for k in DetectionKind}
        for d in frame.detections:
            counts[d.kind] += 1
        for kind, n in counts.items():
            detections.add_metric([host, str(kind)], float(n))
        yield from families.values()
        yield from (info, healthy, mem, sm, detections)


def registry_for(frame: Callable[[], Frame | None], hostname: str | None = None):
    """A fresh registry holding only the telemetry collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TelemetryCollector(frame, hostname))
    return registry


def render(frame: Frame, hostname: str | None = None) -> str:
    """The exposition text for one frame."""
    return generate_latest(registry_for(lambda: frame, hostname)).decode()


class MetricsApp:
    """A WSGI app serving /metrics; the text is rendered once per frame and then reused.

    Frames are immutable and change once per sampling interval, so scrapes between two
    samples (Prometheus, Grafana, several scrapers) cost no rendering.
    """

    def __init__(self, frame: Callable[[], Frame | None], hostname: str | None = None):
        self.frame = frame
        self.hostname = hostname
        self._lock = threading.Lock()
        self._cached: tuple[Frame | None, bytes] | None = None

    def body(self) -> bytes:
        frame = self.frame()
        with self._lock:
            if self._cached is None or self._cached[0] is not frame:
                text = b"" if frame is None else render(frame, self.hostname).encode()
                self._cached = (frame, text)
            return self._cached[1]

    def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: metrics are at /metrics\n"]
        body = self.body()
        start_response(
            "200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))]
        )
        return [body]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """No access log on stderr."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve(
    frame: Callable[[], Frame | None], port: int = 9400, host: str = "127.0.0.1"
) -> WSGIServer:
    """Serve /metrics on host:port in a daemon thread (port 0 picks a free port).

    Stop it with `server.shutdown()`. Raises `TelemetryError` when the port is taken.
    """
    try:
        server = make_server(host, port, MetricsApp(frame), _ThreadingServer, handler_class=_Quiet)
    except OSError as exc:
        raise TelemetryError(
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); "
            "choose another --port or stop what uses it"
        ) from exc
    threading.Thread(target=server.serve_forever, name="gpupool-metrics", daemon=True).start()
    return server
