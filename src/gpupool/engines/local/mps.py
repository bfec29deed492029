"""CUDA MPS: one control daemon per `shared` GPU, managed by gpupool, and the per-client limits.

Each shared GPU gets its own daemon with its own pipe and log directories
(``<base>/<gpu-uuid>/pipe`` and ``.../log``), started as
``CUDA_VISIBLE_DEVICES=<uuid> CUDA_MPS_PIPE_DIRECTORY=... nvidia-cuda-mps-control -d``. A job
joins that GPU's daemon by carrying the same ``CUDA_MPS_PIPE_DIRECTORY``; jobs without it do not
use MPS at all.

Limits of a fractional share (see `limits_for`):

- memory: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=<memory_mib>M"``. The device is named by its
  ordinal *as the client sees it*; a fractional job sees exactly one GPU, so it is always 0.
  MiB are exact, no rounding. A share with no memory (0 MiB) gets no memory limit.
- compute: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = ceil(milli / 10)``, clamped to 1..100
  (250 milli -> 25, 333 -> 34). MPS turns the percentage into whole SMs, rounded down to an
  even count, so a share may get up to one SM pair less than granted (measured on an H100:
  25 % -> 32 of 132 SMs; see docs/sharing.md).

Legacy MPS serves one Unix user per GPU at a time: a client of a second user waits until all
clients of the first have finished. `MPSManager.enforcement_for` applies gpupool's rule: the
first user on a GPU gets `mps`; while that user has MPS clients there, other users' jobs run
without MPS, time-sliced and `policed` by the telemetry agent. An admin may instead name a
service account that runs every job on shared GPUs, so all of them get `mps`.

The control binary is injectable, so tests run a stand-in script that behaves like the daemon.
"""

from __future__ import annotations

import math
import os
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpupool.domain import MILLI_PER_GPU, Enforcement, Share
from gpupool.engines.common.executor import ExecutorError
from gpupool.engines.local.launcher import proc_starttime

DEFAULT_BINARY = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
#: How long one control command (start, query, quit) may take before it counts as failed.
COMMAND_TIMEOUT_S = 10.0


class MPSError(ExecutorError):
    """An MPS daemon could not be started or stopped."""


@dataclass(frozen=True, slots=True)
class MPSLimits:
    """The client environment of one fractional share under MPS."""

    pinned_mem_limit: str | None  # e.g. "0=20480M"; None when the share has no memory
    active_thread_percentage: int

    def env(self, pipe_dir: Path, log_dir: Path) -> dict[str, str]:
        out = {
            "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(log_dir),
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(self.active_thread_percentage),
        }
        if self.pinned_mem_limit:
            out["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = self.pinned_mem_limit
        return out


def _check_reachable(pipe: Path) -> None:
    """Raise MPSError unless every directory above `pipe` lets other accounts through: a
    client that cannot reach its pipe runs without MPS, unlimited, while its share would
    claim `mps` enforcement."""
    for d in pipe.parents:
        if not os.stat(d).st_mode & stat.S_IXOTH:
            raise MPSError(
                f"cannot use CUDA MPS for {pipe}: {d} is closed to other accounts (mode "
                f"{stat.S_IMODE(os.stat(d).st_mode):o}), so jobs would run without MPS limits; "
                "put the MPS directory where every job's account can reach it"
            )


def thread_percentage(milli: int) -> int:
    """Active thread percentage of a share: ceil(milli / 10), clamped to 1..100."""
    return max(1, min(100, math.ceil(milli * 100 / MILLI_PER_GPU)))


def limits_for(share: Share, device_ordinal: int = 0) -> MPSLimits:
    """MPS limits for `share`; `device_ordinal` is the GPU's ordinal as the client sees it."""
    mem = f"{device_ordinal}={share.memory_mib}M" if share.memory_mib > 0 else None
    return MPSLimits(mem, thread_percentage(share.milli))


@dataclass(frozen=True, slots=True)
class DaemonStatus:
    gpu_uuid: str
    healthy: bool
    pid: int | None
    restarts: int
    detail: str = ""


class MPSManager:
    """Starts, checks, restarts and stops one MPS control daemon per shared GPU.

    `binary` is the control program (a stand-in script in tests). `on_event(kind, message,
    data)` is told about starts, crashes and restarts so the server can record events.
    `service_account`, when set, is the Unix account that runs all jobs on shared GPUs.
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        binary: str = DEFAULT_BINARY,
        service_account: str | None = None,
        on_event: Callable[[str, str, dict[str, object]], None] | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.binary = binary
        self.service_account = service_account
        self.on_event = on_event or (lambda kind, msg, data: None)
        self._gpus: set[str] = set()
        self._restarts: dict[str, int] = {}
        self._last_healthy: dict[str, bool] = {}
        # the executor (at job start) and the reconciler (every pass) both call ensure():
        # one daemon start at a time, or the second start fails on the first's pid file
        self._lock = threading.RLock()

    # -- paths ---------------------------------------------------------------------------
    def pipe_dir(self, gpu_uuid: str) -> Path:
        return self.base_dir / gpu_uuid / "pipe"

    def log_dir(self, gpu_uuid: str) -> Path:
        return self.base_dir / gpu_uuid / "log"

    def _env(self, gpu_uuid: str) -> dict[str, str]:
        env = dict(os.environ)
        env["CUDA_VISIBLE_DEVICES"] = gpu_uuid
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(self.pipe_dir(gpu_uuid))
        env["CUDA_MPS_LOG_DIRECTORY"] = str(self.log_dir(gpu_uuid))
        return env

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def gpus(self) -> frozenset[str]:
        """GPUs this manager keeps a daemon for."""
        return frozenset(self._gpus)

    def manage(self, gpu_uuids: Iterable[str]) -> None:
        """Set the GPUs that should have a daemon (the `shared` ones). Stops dropped ones."""
        wanted = set(gpu_uuids)
        with self._lock:
            for uuid in sorted(self._gpus - wanted):
                self._stop(uuid)
            self._gpus = wanted

    def daemon_pid(self, gpu_uuid: str) -> int | None:
        """The live daemon's pid from its pid file, or None."""
        try:
            pid = int((self.pipe_dir(gpu_uuid) / PID_FILE).read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        info = proc_starttime(pid)
        return pid if info is not None and info[1] != "Z" else None

    def daemons(self) -> dict[int, str]:
        """pid -> GPU UUID of every live control daemon of this manager (its MPS servers are
        their children: telemetry recognises them as gpupool's, not as unowned work)."""
        out = {}
        for uuid in sorted(self._gpus):
            pid = self.daemon_pid(uuid)
            if pid is not None:
                out[pid] = uuid
        return out

    def _control(self, gpu_uuid: str, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary],
            input=command + "\n",
            env=self._env(gpu_uuid),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )

    def healthy(self, gpu_uuid: str) -> bool:
        """True when the daemon runs and answers a query on its control pipe."""
        if self.daemon_pid(gpu_uuid) is None:
            return False
        try:
            return self._control(gpu_uuid, "get_server_list").returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def start(self, gpu_uuid: str) -> None:
        """Start the daemon of `gpu_uuid` (no-op when it is already healthy)."""
        with self._lock:
            self._start(gpu_uuid)

    def _start(self, gpu_uuid: str) -> None:
        if self.healthy(gpu_uuid):
            return
        pipe, log = self.pipe_dir(gpu_uuid), self.log_dir(gpu_uuid)
        pipe.mkdir(parents=True, exist_ok=True)
        log.mkdir(parents=True, exist_ok=True)
        # every job's account must reach the pipe (else it runs without MPS, unlimited),
        # whatever umask made the directories (gpupool up runs with 077)
        for d in (pipe.parent, pipe, log):
            os.chmod(d, 0o755)
        if os.geteuid() == 0:  # jobs run as other accounts: each must reach the pipe
            _check_reachable(pipe)
        (pipe / PID_FILE).unlink(missing_ok=True)  # stale pid file of a crashed daemon
        try:
            proc = subprocess.run(
                [self.binary, "-d"],
                env=self._env(gpu_uuid),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        except FileNotFoundError:
            raise MPSError(
                f"cannot start CUDA MPS for GPU {gpu_uuid}: {self.binary!r} not found; install "
                "the NVIDIA driver utilities or set the GPU's sharing mode to policed"
            ) from None
        except subprocess.TimeoutExpired:
            raise MPSError(f"MPS control daemon for GPU {gpu_uuid} did not start in time") from None
        if proc.returncode != 0:
            raise MPSError(
                f"MPS control daemon for GPU {gpu_uuid} failed to start "
                f"(exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()}"
            )
        self._gpus.add(gpu_uuid)
        self._last_healthy[gpu_uuid] = True
        self.on_event("mps.started", f"MPS daemon started for GPU {gpu_uuid}", {"gpu": gpu_uuid})

    def ensure(self, gpu_uuid: str) -> bool:
        """Keep the daemon of `gpu_uuid` up: restart it if it crashed. True when healthy."""
        with self._lock:
            return self._ensure(gpu_uuid)

    def _ensure(self, gpu_uuid: str) -> bool:
        self._gpus.add(gpu_uuid)
        if self.healthy(gpu_uuid):
            self._last_healthy[gpu_uuid] = True
            return True
        was_up = self._last_healthy.get(gpu_uuid, False)
        if was_up:
            self._restarts[gpu_uuid] = self._restarts.get(gpu_uuid, 0) + 1
            self.on_event(
                "mps.crashed",
                f"MPS daemon for GPU {gpu_uuid} stopped answering; restarting it",
                {"gpu": gpu_uuid, "restarts": self._restarts[gpu_uuid]},
            )
        try:
            self._start(gpu_uuid)
        except MPSError as e:
            self._last_healthy[gpu_uuid] = False
            self.on_event("mps.failed", str(e), {"gpu": gpu_uuid})
            return False
        return True

    def ensure_all(self) -> dict[str, bool]:
        """`ensure` every managed GPU; GPU uuid -> healthy."""
        return {uuid: self.ensure(uuid) for uuid in sorted(self._gpus)}

    def stop(self, gpu_uuid: str) -> None:
        """Quit the daemon of `gpu_uuid` (its MPS server ends with its last client)."""
        with self._lock:
            self._stop(gpu_uuid)

    def _stop(self, gpu_uuid: str) -> None:
        pid = self.daemon_pid(gpu_uuid)
        if pid is None:
            return
        try:
            self._control(gpu_uuid, "quit")
        except (OSError, subprocess.TimeoutExpired):
            os.kill(pid, signal.SIGTERM)
        # Wait (bounded) until it has gone, so that a start right after cannot race it.
        try:
            psutil.Process(pid).wait(timeout=COMMAND_TIMEOUT_S)
        except psutil.TimeoutExpired:
            os.kill(pid, signal.SIGTERM)
        except psutil.Error:
            pass  # already gone
        self._last_healthy[gpu_uuid] = False
        self.on_event("mps.stopped", f"MPS daemon stopped for GPU {gpu_uuid}", {"gpu": gpu_uuid})

    def stop_all(self) -> None:
        for uuid in sorted(self._gpus):
            self.stop(uuid)

    def status(self) -> list[DaemonStatus]:
        out = []
        for uuid in sorted(self._gpus):
            pid = self.daemon_pid(uuid)
            ok = self.healthy(uuid)
            out.append(
                DaemonStatus(
                    uuid, ok, pid, self._restarts.get(uuid, 0), "" if ok else "not answering"
                )
            )
        return out

    # -- the cross-user rule ---------------------------------------------------------------
    def enforcement_for(
        self, gpu_uuid: str, unix_user: str, mps_users_on_gpu: Iterable[str], *, healthy: bool
    ) -> tuple[Enforcement, str]:
        """Enforcement a new fractional client of `unix_user` on `gpu_uuid` gets, and why.

        `mps_users_on_gpu` are the Unix users of live MPS clients on that GPU now.
        """
        if not healthy:
            return Enforcement.POLICED, f"no healthy MPS daemon on GPU {gpu_uuid}"
        others = sorted(set(mps_users_on_gpu) - {unix_user})
        if others:
            return (
                Enforcement.POLICED,
                f"MPS on GPU {gpu_uuid} serves Unix user {others[0]} now and legacy MPS serves "
                "one user per GPU; this job is time-sliced and policed instead",
            )
        return Enforcement.MPS, f"MPS limits on GPU {gpu_uuid}"
