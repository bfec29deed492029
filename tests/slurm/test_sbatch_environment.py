"""A workload's declared environment never shapes the sbatch gpupool runs (security review F1).

Through `SlurmExecutor.start` with a real subprocess: a stand-in ``sbatch`` on the server's
own PATH records its environment, arguments and script; the API's refusal of these names
is bypassed, so the executor alone is shown safe. No Slurm needed. The job still gets the
declared variables, exactly: the recorded script is run by /bin/sh with only what Slurm
would give it (`--export=NONE`), and tests/slurm/test_slurm_env.py does it on a real Slurm.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Request, Workload
from gpupool.engines.slurm.cli import SlurmCLI
from gpupool.engines.slurm.executor import SlurmExecutor
from gpupool.engines.slurm.jobscript import START_GUARD, exports

#: what a member might declare to steer sbatch (the review's list)
STEERING = {
    "SBATCH_ARRAY_INX": "0-99",
    "SBATCH_GRES": "gpu:8",
    "SBATCH_GPUS": "8",
    "SBATCH_EXCLUSIVE": "1",
    "SBATCH_WAIT": "1",
    "SBATCH_QOS": "high",
    "SLURM_CONF": "/tmp/member/slurm.conf",
    "SALLOC_GRES": "gpu:8",
    "SRUN_CPUS_PER_TASK": "64",
}
#: values a shell would mangle if they were not quoted
AWKWARD = {
    "SPACES": "a  b\tc",
    "QUOTES": 'it\'s "quoted"',
    "DOLLAR": "$HOME ${PATH} $(id) `id` \\n",
    "NEWLINES": "line 1\nline 2\n",
    "EMPTY": "",
    "DIRECTIVE": "x\n#SBATCH --array=0-99\n#SBATCH --exclusive",
}


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def world(tmp_path, monkeypatch):  # noqa: ANN201
    """(executor, the stand-in's record dir, a dir for the member's files)."""
    record = tmp_path / "record"
    record.mkdir()
    server_bin = tmp_path / "server-bin"
    server_bin.mkdir()
    _exe(
        server_bin / "sbatch",
        "#!/bin/sh\n"
        f"env > {record}/env\n"
        f'printf "%s\\n" "$@" > {record}/args\n'
        f"cat > {record}/script\n"
        "echo 4242\n",
    )
    monkeypatch.setenv("PATH", f"{server_bin}:/usr/bin:/bin")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    member = tmp_path / "member"
    member.mkdir()
    member.chmod(0o755)
    ex = SlurmExecutor(
        SlurmCLI(None),
        ManualClock(1_000.0),
        tmp_path / "out",
        account_of=lambda t: "gp." + t,
        per_user=False,
    )
    return ex, record, member


def _start(ex: SlurmExecutor, env: dict[str, str], command: tuple[str, ...] = ("true",)) -> None:
    w = Workload("w-1", "lab", "ann", Request(gpus=0), command=command)
    ex.start(w, None, env=env)


def _recorded_env(record: Path) -> dict[str, str]:
    lines = (record / "env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_a_declared_path_does_not_choose_the_sbatch_that_runs(world):
    ex, record, member = world
    marker = member / "ran-as-server"
    _exe(member / "sbatch", f"#!/bin/sh\ntouch {marker}\necho 4242\n")
    _start(ex, {"PATH": f"{member}:/usr/bin:/bin"})
    assert not marker.exists(), "the member's sbatch ran as the server"
    assert (record / "script").exists()  # the server's own sbatch ran
    env = _recorded_env(record)
    assert str(member) not in env["PATH"]
    assert env["PATH"].split(":")[0] == str(Path(shutil.which("sbatch") or "").parent)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the preload library")
def test_a_declared_ld_preload_is_never_loaded_by_the_server(world):
    ex, record, member = world
    marker = member / "preloaded"
    src = member / "evil.c"
    src.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void evil(void) {\n"
        f'  FILE *f = fopen("{marker}", "a"); if (f) {{ fputs("loaded\\n", f); fclose(f); }}\n'
        "}\n"
    )
    lib = member / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)
    # the library works: a process that is given it loads it
    subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(lib)}, check=True)
    assert marker.exists()
    marker.unlink()
    _start(ex, {"LD_PRELOAD": str(lib), "LD_LIBRARY_PATH": str(member)})
    assert not marker.exists(), "the server's sbatch loaded the member's library"
    assert not [k for k in _recorded_env(record) if k.startswith("LD_")]


def test_sbatch_and_slurm_variables_never_reach_sbatch(world):
    ex, record, _ = world
    _start(ex, STEERING)
    env = _recorded_env(record)
    leaked = {k for k in env if k.startswith(("SBATCH_", "SLURM_", "SALLOC_", "SRUN_", "LD_"))}
    assert leaked == set(), leaked
    # the whole environment is the server's fixed one (sh itself adds PWD, SHLVL, _)
    assert set(env) - {"PWD", "SHLVL", "_"} == {"PATH"}
    args = (record / "args").read_text().splitlines()
    assert "--export=NONE" in args and "--export=ALL" not in args
    assert not [a for a in args if a.startswith(("--array", "--exclusive", "--wait", "--qos"))]


def test_sbatch_gets_the_servers_slurm_conf_not_the_members(world, tmp_path):
    ex, record, _ = world
    ex.cli.conf = str(tmp_path / "site.conf")
    _start(ex, {"SLURM_CONF": "/tmp/member/slurm.conf"})
    assert _recorded_env(record)["SLURM_CONF"] == str(tmp_path / "site.conf")


def test_the_job_gets_its_declared_variables_exactly(world):
    """The recorded script, run as Slurm runs it (no variables but SLURM_* and the GPUs'),
    gives the command every declared value as it was, and the job's own PATH."""
    ex, record, member = world
    dump = ("env", "-0")
    declared = {**AWKWARD, "PATH": f"{member}:/usr/bin:/bin"}
    _start(ex, declared, dump)
    script = (record / "script").read_text()
    slurm_env = {"SLURM_JOB_ID": "4242", "CUDA_VISIBLE_DEVICES": "0"}
    done = subprocess.run(
        ["/bin/sh", "-c", script], env=slurm_env, capture_output=True, text=True, check=True
    )
    got = dict(item.split("=", 1) for item in done.stdout.split("\0") if item)
    for name, value in declared.items():
        assert got[name] == value, name
    assert got["GPUPOOL_WORKLOAD_ID"] == "w-1"
    assert got["SLURM_JOB_ID"] == "4242" and got["CUDA_VISIBLE_DEVICES"] == "0"  # Slurm's
    assert got["SLURM_EXPORT_ENV"] == "ALL"  # srun in the job passes this environment on
    assert "SBATCH_GRES" not in got and os.environ.get("PATH") != got["PATH"]


def test_sbatch_directives_in_a_value_are_not_directives(world):
    """sbatch reads ``#SBATCH`` lines only before the script's first command: the exports
    are commands, so a value's ``#SBATCH`` lines are just text in the job's variable."""
    ex, record, _ = world
    _start(ex, {"DIRECTIVE": AWKWARD["DIRECTIVE"]})
    lines = (record / "script").read_text().splitlines()
    assert lines[0] == "#!/bin/sh" and lines[1] == START_GUARD.rstrip("\n")
    assert lines[2].startswith("export ")


@pytest.mark.parametrize("comment", ["gpupool:w-1", "gpupool:w-1 stopped-by-gpupool", ""])
def test_a_script_started_after_its_stop_stops_itself_before_its_command(world, comment):
    """Run as slurmd runs it, with a stand-in squeue that reports the job's comment: marked
    stopped, the script ends by SIGTERM before the command; otherwise the command runs."""
    ex, record, member = world
    _start(ex, {}, ("echo", "COMMAND-RAN"))
    bin_dir = member / "slurm-bin"
    bin_dir.mkdir()
    _exe(bin_dir / "squeue", f"#!/bin/sh\necho '{comment}'\n")
    env = {"SLURM_JOB_ID": "4242", "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(
        ["/bin/sh", "-c", (record / "script").read_text()], env=env, capture_output=True, text=True
    )
    if comment.endswith(" stopped-by-gpupool"):
        assert done.returncode == -signal.SIGTERM and "COMMAND-RAN" not in done.stdout
        assert "stopped before it started" in done.stderr
    else:
        assert done.returncode == 0 and done.stdout == "COMMAND-RAN\n"


def test_a_server_variable_the_shell_cannot_export_is_left_out():
    assert exports({"LC_odd-name": "x", "OK": "it's"}) == "export OK='it'\"'\"'s'\n"
