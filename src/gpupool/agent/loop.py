"""The agent's loop: sample, tag, report; again every `interval_s` until stopped.

A report the server refuses for good (a bad, revoked or foreign credential, a body it cannot
take, a GPU registered on another node) stops the agent with `AgentRefused`, whose message
says what to do. A server that cannot be reached or answers 5xx is retried on the next
interval, and the agent says so once per outage, not on every attempt.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gpupool.agent.attribute import HostAttributor
from gpupool.agent.report import build_report
from gpupool.client import (
    ApiError,
    Client,
    GpupoolError,
    ServerError,
    Transport,
    Unreachable,
)
from gpupool.clock import Clock, SystemClock
from gpupool.telemetry.source import GPUSource

log = logging.getLogger(__name__)
#: the report intervals the server accepts (gpupool.api.agents.NodeReportIn)
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0


class AgentError(Exception):
    """A report did not arrive; it is tried again on the next interval."""


class AgentRefused(AgentError):
    """The server refused the report for a reason retrying does not fix."""


class Reporter(Protocol):
    def send(self, report: dict[str, Any]) -> dict[str, Any]:
        """Deliver one report; the server's answer. Raises AgentError / AgentRefused."""
        ...


class HttpReporter:
    """Posts reports to `{url}/api/v1/nodes/{node}/report` with the node credential, through
    gpupool.client."""

    def __init__(
        self,
        url: str,
        node: str,
        token: str,
        *,
        timeout_s: float = 10.0,
        transport: Transport | None = None,
    ):
        self.client = Client(url, token, timeout_s=timeout_s, transport=transport)
        self.url = self.client.url
        self.node = node

    def send(self, report: dict[str, Any]) -> dict[str, Any]:
        try:
            ack = self.client.report_node(self.node, report)
        except Unreachable as e:
            raise AgentError(f"cannot reach the gpupool server at {self.url}: {e.why}") from None
        except ServerError as e:
            raise AgentError(f"the server at {self.url} answered {e.status}: {e.message}") from None
        except ApiError as e:
            raise AgentRefused(
                f"the server refused the report: {e.message} (HTTP {e.status})"
            ) from None
        except GpupoolError as e:
            raise AgentRefused(f"the server's answer is not understood: {e}") from None
        return ack.model_dump(mode="json")

    def close(self) -> None:
        self.client.close()


@dataclass
class AgentStats:
    reports: int = 0
    failures: int = 0
    last_ack: dict[str, Any] | None = None


class Agent:
    """Samples `source`, tags its processes and hands each report to `reporter`."""

    def __init__(
        self,
        source: GPUSource,
        reporter: Reporter,
        *,
        interval_s: float = 5.0,
        clock: Clock | None = None,
        tagger: HostAttributor | None = None,
        host: tuple[int, int] = (0, 0),
    ):
        if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
            raise ValueError(
                f"the report interval must be {MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g} s, "
                f"not {interval_s:g}"
            )
        self.source = source
        self.reporter = reporter
        self.interval_s = interval_s
        self.clock = clock or SystemClock()
        self.tagger = tagger or HostAttributor()
        self.cpu_milli, self.memory_mib = host
        self.stats = AgentStats()
        self._failing = False

    def sample(self) -> dict[str, Any]:
        """One report of the host as it is now (not sent)."""
        snap = self.source.snapshot()
        tags = self.tagger.tag(p.pid for p in snap.processes)
        return build_report(
            snap,
            tags,
            interval_s=self.interval_s,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
        )

    def report_once(self) -> dict[str, Any]:
        """Sample and send one report; the server's answer. Raises AgentError."""
        try:
            ack = self.reporter.send(self.sample())
        except AgentError:
            self.stats.failures += 1
            raise
        self.stats.reports += 1
        self.stats.last_ack = ack
        return ack

    def run(
        self, stop: threading.Event, on_ack: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        """Report every `interval_s` until `stop` is set. Raises AgentRefused."""
        while not stop.is_set():
            try:
                ack = self.report_once()
            except AgentRefused:
                raise
            except AgentError as e:
                if not self._failing:
                    log.warning("%s; retrying every %g s", e, self.interval_s)
                self._failing = True
            else:
                if self._failing:
                    log.warning("reporting again: node %s is %s", ack["node"], ack["state"])
                self._failing = False
                if on_ack is not None:
                    on_ack(ack)
            stop.wait(self.interval_s)
