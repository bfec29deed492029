"""Slurm job ids and pod UIDs from real-world `/proc/<pid>/cgroup` lines and environments."""

from __future__ import annotations

import pytest

from gpupool.telemetry.cgroups import (
    CgroupLine,
    parse_cgroup,
    pod_uid_from_cgroup,
    slurm_job_from_cgroup,
    slurm_job_from_environ,
)

UID = "3f1c9a2e-5b7d-4e11-9c0a-8d2f6b4a1e77"

# cgroup v1 with the cgroupfs driver (kubelet default before 1.22, many kubeadm clusters)
K8S_V1_CGROUPFS = f"""\
12:memory:/kubepods/burstable/pod{UID}/0a1b2c3d4e5f
11:cpu,cpuacct:/kubepods/burstable/pod{UID}/0a1b2c3d4e5f
1:name=systemd:/kubepods/burstable/pod{UID}/0a1b2c3d4e5f
"""
# cgroup v1 with the systemd driver: the UID's dashes become underscores inside slice names
K8S_V1_SYSTEMD = (
    "11:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-0a1b2c.scope\n"
    "2:devices:/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-0a1b2c.scope\n"
)
# cgroup v2 with the systemd driver, guaranteed QoS (no QoS slice)
K8S_V2_SYSTEMD = (
    f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-9f8e.scope\n"
)
# cgroup v2 with the cgroupfs driver, best-effort QoS
K8S_V2_CGROUPFS = f"0::/kubepods/besteffort/pod{UID}/9f8e7d6c\n"

SLURM_V1 = """\
10:freezer:/slurm/uid_1000/job_4242/step_0/task_0
7:memory:/slurm/uid_1000/job_4242/step_0/task_0
4:devices:/slurm/uid_1000/job_4242/step_0
1:name=systemd:/system.slice/slurmd.service
"""
# several slurmd on one host: /slurm_<nodename>/...
SLURM_V1_MULTI = "7:memory:/slurm_gpu-a/uid_1000/job_77/step_batch/task_0\n"
# Slurm's cgroup/v2 plugin, under systemd
SLURM_V2 = "0::/system.slice/slurmstepd.scope/job_9001/step_0/user/task_0\n"
# a login shell and a plain systemd service: neither
PLAIN_V2 = "0::/user.slice/user-1000.slice/session-3.scope\n"
PLAIN_V1 = "12:memory:/user.slice\n1:name=systemd:/system.slice/ssh.service\n"


def test_parse_cgroup_lines_of_both_versions():
    assert parse_cgroup(K8S_V1_CGROUPFS)[1] == CgroupLine(
        11, ("cpu", "cpuacct"), f"/kubepods/burstable/pod{UID}/0a1b2c3d4e5f"
    )
    (line,) = parse_cgroup(SLURM_V2)
    assert line.unified and line.path.startswith("/system.slice/slurmstepd.scope")
    assert not parse_cgroup(SLURM_V1)[0].unified


def test_malformed_lines_are_skipped():
    assert parse_cgroup("garbage\n:x:/a\n1:cpu:relative\n\n0::/ok\n") == [CgroupLine(0, (), "/ok")]


@pytest.mark.parametrize(
    "text",
    [K8S_V1_CGROUPFS, K8S_V1_SYSTEMD, K8S_V2_SYSTEMD, K8S_V2_CGROUPFS],
    ids=["v1-cgroupfs", "v1-systemd", "v2-systemd", "v2-cgroupfs"],
)
def test_pod_uid_in_every_driver_and_version(text):
    assert pod_uid_from_cgroup(text) == UID


def test_pod_uid_is_lower_cased():
    assert pod_uid_from_cgroup(f"0::/kubepods/pod{UID.upper()}/c\n") == UID


@pytest.mark.parametrize("text", [SLURM_V1, SLURM_V1_MULTI, SLURM_V2, PLAIN_V1, PLAIN_V2])
def test_no_pod_outside_kubernetes(text):
    assert pod_uid_from_cgroup(text) is None


@pytest.mark.parametrize(
    ("text", "job"),
    [(SLURM_V1, "4242"), (SLURM_V1_MULTI, "77"), (SLURM_V2, "9001")],
    ids=["v1", "v1-multiple-slurmd", "v2"],
)
def test_slurm_job_in_every_plugin(text, job):
    assert slurm_job_from_cgroup(text) == job


@pytest.mark.parametrize("text", [K8S_V1_CGROUPFS, K8S_V2_SYSTEMD, PLAIN_V1, PLAIN_V2, ""])
def test_no_slurm_job_elsewhere(text):
    assert slurm_job_from_cgroup(text) is None


def test_a_job_directory_outside_slurm_is_not_a_job():
    assert slurm_job_from_cgroup("0::/user.slice/job_12/x\n") is None


def test_slurm_job_from_environ():
    assert slurm_job_from_environ({"SLURM_JOB_ID": "123"}) == "123"
    assert slurm_job_from_environ({"SLURM_JOBID": "7"}) == "7"
    assert slurm_job_from_environ({"SLURM_JOB_ID": "", "SLURM_JOBID": "8"}) == "8"
    assert slurm_job_from_environ({"SLURM_JOB_ID": "12; rm -rf"}) is None
    assert slurm_job_from_environ({}) is None
