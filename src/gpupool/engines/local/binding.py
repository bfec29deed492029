"""How a local job is bound to its GPUs: what ``CUDA_VISIBLE_DEVICES`` names and, for a
fractional share served by CUDA MPS, the MPS client limits and the enforcement really applied.

- A whole GPU or a fractional share is named by its GPU's UUID; a MIG instance by the MIG
  device's UUID (``MIG-…``) as NVML lists it now, which CUDA binds with hardware isolation.
- A fractional share that asks for ``mps`` gets it only if this host runs a healthy MPS daemon
  for its GPU that the job's account may use (`MPSManager.enforcement_for` decides); otherwise
  it is ``policed`` and the reason is kept with the job.
- When the MPS daemons run as one service account, every MPS client job runs as that account.
"""

from __future__ import annotations

from collections.abc import Callable

from gpupool.domain import Allocation, Enforcement, Share, Workload
from gpupool.engines.common.executor import StartError
from gpupool.engines.local.mps import MPSError, MPSManager, limits_for

__all__ = ["GPUBinding"]


class GPUBinding:
    """The GPU side of starting a local job. `mps` manages MPS daemons (None: fractional
    shares are `policed`); `mig_uuid(share)` finds a MIG instance's device UUID (None: not
    listed); `mps_users(gpu_uuid)` lists the Unix users of the live MPS clients on a GPU."""

    def __init__(
        self,
        mps: MPSManager | None,
        mig_uuid: Callable[[Share], str | None] | None,
        mps_users: Callable[[str], list[str]],
    ) -> None:
        self.mps = mps
        self.mig_uuid = mig_uuid
        self.mps_users = mps_users

    def device_uuid(self, s: Share) -> str:
        """What CUDA_VISIBLE_DEVICES names for share `s`: its GPU's UUID, or for a MIG
        instance the MIG device's UUID (`MIG-…`), which CUDA binds with hardware isolation.
        StartError if NVML lists no such MIG device (the instances were not created)."""
        if s.mig_start is None:
            return s.gpu_uuid
        found = self.mig_uuid(s) if self.mig_uuid is not None else None
        if found is None:
            raise StartError(
                f"GPU {s.gpu_index} has no {s.mig_profile} MIG device at start {s.mig_start}: "
                "create the instances of its layout (`sudo nvidia-smi mig -i "
                f"{s.gpu_index} -cgi {s.mig_profile} -C`, or mig-parted) or set the GPU's "
                "layout to the instances it has (gpupool gpu mig-layout)"
            )
        return found

    def service_account(self, allocation: Allocation | None) -> str | None:
        """The MPS service account the job must run as (None: the usual account)."""
        fractional_mps = allocation is not None and any(
            not s.whole and s.enforcement is Enforcement.MPS for s in allocation.shares
        )
        if fractional_mps and self.mps is not None and self.mps.service_account:
            return self.mps.service_account
        return None

    def decide_mps(self, gpu_uuid: str, unix_user: str) -> tuple[Enforcement, str]:
        """The enforcement a fractional MPS share on `gpu_uuid` gets for `unix_user`, and why."""
        if self.mps is None:
            return Enforcement.POLICED, "this executor manages no MPS daemons"
        try:
            healthy = self.mps.ensure(gpu_uuid)
        except MPSError:
            healthy = False
        return self.mps.enforcement_for(
            gpu_uuid, unix_user, self.mps_users(gpu_uuid), healthy=healthy
        )

    def mps_env(self, share: Share) -> dict[str, str]:
        """The MPS client variables of `share` (empty without MPS daemons)."""
        if self.mps is None:
            return {}
        return limits_for(share).env(
            self.mps.pipe_dir(share.gpu_uuid), self.mps.log_dir(share.gpu_uuid)
        )

    def environment(
        self, workload: Workload, allocation: Allocation | None, unix_user: str
    ) -> tuple[dict[str, str], dict[str, str], list[str]]:
        """gpupool's own variables of the job, its enforcement per GPU UUID and why (MPS
        decisions). StartError when a MIG device is missing."""
        env: dict[str, str] = {}
        shares = allocation.shares if allocation else ()
        env["CUDA_VISIBLE_DEVICES"] = ",".join(self.device_uuid(s) for s in shares)
        env["GPUPOOL_WORKLOAD_ID"] = workload.id
        env["GPUPOOL_GPU_MILLI"] = str(sum(s.milli for s in shares))
        enforcement: dict[str, str] = {}
        notes: list[str] = []
        for s in shares:
            wants_mps = not s.whole and s.enforcement is Enforcement.MPS
            if not wants_mps:
                enforcement[s.gpu_uuid] = str(s.enforcement)
                continue
            got, why = self.decide_mps(s.gpu_uuid, unix_user)
            enforcement[s.gpu_uuid] = str(got)
            notes.append(why)
            if got is Enforcement.MPS:
                env.update(self.mps_env(s))
        return env, enforcement, notes
