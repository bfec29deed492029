"""`gpupool run` refuses bad input in the user's own terms: the flag they typed, the value in
their units and what to write instead; never the API's field names or pydantic's words. The
CLI checks what it can before sending; a server's 422 is mapped back to the flags."""

from __future__ import annotations

import pytest

from gpupool.cli import flags
from gpupool.cli.client import Api, CliError
from gpupool.cli.flags import flag_terms
from tests.cli.test_client import as_, env, gp, server  # noqa: F401 - fixtures

REFUSED = [
    (["--gpus", "1", "--gpu-memory", "100T"], "--gpu-memory 100T: the most allowed is 16 TiB"),
    (
        ["--gpu-fraction", "2"],
        "--gpu-fraction 2 is a part of one GPU, less than 1; for whole GPUs use --gpus 2",
    ),
    (
        ["--gpu-fraction", "1.5"],
        "--gpu-fraction 1.5 is a part of one GPU, less than 1; for whole GPUs use --gpus 1 or "
        "--gpus 2",
    ),
    (
        ["--gpu-fraction", "0"],
        "--gpu-fraction 0: give a part of one GPU between 0 and 1, e.g. 0.25",
    ),
    (
        ["--gpu-fraction", "0.0001"],
        "--gpu-fraction 0.0001 rounds to 0 GPU; give a part between 0.001 and 0.999",
    ),
    (["--gpus", "1", "--memory", "4096T"], "--memory 4096T: the most allowed is 2048 TiB"),
    (["--gpus", "1", "--priority", "5000"], "--priority 5000: the most allowed is 1000"),
    (["--gpus", "1", "--max-runtime", "0"], "--max-runtime 0: give more than 0 s"),
    (["--gpus", "2000"], "--gpus 2000: the most allowed is 1024"),
    (["--gpus", "1", "--name", "x" * 200], "--name: at most 128 characters"),
    (
        ["--gpus", "1", "--env", "1A=b"],
        "--env 1A=...: a variable's name is letters, digits and _, not starting with a digit",
    ),
    (
        ["--gpus", "1", "--env", "CUDA_VISIBLE_DEVICES=0"],
        "--env CUDA_VISIBLE_DEVICES: gpupool sets it to bind the GPUs it grants; remove it "
        "(ask for GPUs with --gpus, --gpu-fraction or --mig)",
    ),
    (
        ["--gpus", "1", "--gpu-fraction", "0.5"],
        "use --gpus 1 (whole GPUs) or --gpu-fraction (a part of one GPU), not both",
    ),
    (
        ["--gpus", "3", "--nodes", "2", "--gpus-per-node", "2"],
        "--gpus 3 is not --nodes 2 x --gpus-per-node 2; give --gpus-per-node alone",
    ),
]


def _error_line(output: str) -> str:
    """The one `error:` line (the console may wrap it at 80 columns: joined again)."""
    return " ".join(output.split()).removeprefix("error: ")


@pytest.mark.parametrize("args,expected", REFUSED, ids=[" ".join(a)[:40] for a, _ in REFUSED])
def test_run_refuses_bad_flags_in_flag_terms(env, args, expected):  # noqa: F811
    _, ctx = env
    r = gp("run", *args, "--", "python3", "train.py", token=as_(ctx, "ann"))
    assert r.exit_code == 2, r.output
    assert _error_line(r.output) == expected
    assert "body." not in r.output and "Input should" not in r.output


@pytest.mark.parametrize("command", [[], ["--"], ["--", ""]], ids=["none", "bare --", "empty"])
def test_run_without_a_command_says_how_to_give_one(env, command):  # noqa: F811
    _, ctx = env
    r = gp("run", "--gpus", "1", *command, token=as_(ctx, "ann"))
    assert r.exit_code == 2, r.output
    assert _error_line(r.output) == (
        "give the command to run after --, e.g. gpupool run --gpus 1 -- python3 train.py"
    )


@pytest.mark.parametrize(
    "value,hint",
    [
        ("1.5", "--gpus takes whole GPUs (1 or 2); for a part of one GPU use --gpu-fraction"),
        ("0.5", "--gpus takes whole GPUs; for a part of one GPU use --gpu-fraction 0.5"),
    ],
)
def test_gpus_that_are_not_whole_point_at_gpu_fraction(env, value, hint):  # noqa: F811
    _, ctx = env
    r = gp("run", "--gpus", value, "--", "python3", "x", token=as_(ctx, "ann"))
    assert r.exit_code == 2
    text = " ".join(r.output.replace("│", " ").split())
    assert f"Invalid value for '--gpus': {value} is not a whole number: {hint}" in text


def test_a_servers_422_is_mapped_back_to_the_flags(env):  # noqa: F811
    """A server (of another version, say) that refuses a field the CLI let through: its 422
    names `body.gpu_memory_mib` in pydantic's words; the CLI says it with the flag."""
    url, ctx = env
    api = Api(url, as_(ctx, "ann"))
    body = {"command": ["x"], "gpus": 1, "gpu_memory_mib": 1 << 30, "priority": 5000}
    with pytest.raises(CliError) as refused:
        api.post("/workloads", body)
    assert "body.gpu_memory_mib" in str(refused.value)  # what the API says
    said = flag_terms(refused.value, flags.RUN_FLAGS, {"gpu_memory_mib": "1024T"})
    assert str(said) == (
        "--gpu-memory 1024T: the most allowed is 16 TiB; --priority: the most allowed is 1000"
    )
    # a refusal in the server's own words (a domain rule) is left as the server said it
    with pytest.raises(CliError) as refused:
        api.post("/workloads", {"command": ["x"], "gpus": 9})
    assert flag_terms(refused.value, flags.RUN_FLAGS) is refused.value
    assert "needs 9 GPUs" in str(refused.value)


def test_tenant_quota_refusals_name_the_flags(env):  # noqa: F811
    _, ctx = env
    t = as_(ctx, "root")
    r = gp("tenant", "create", "physics", "--guaranteed", "-1", token=t)
    assert r.exit_code == 1 and _error_line(r.output) == "--guaranteed: the least allowed is 0"
    r = gp("tenant", "set-quota", "lab", "--weight", "0", token=t)
    assert r.exit_code == 1 and _error_line(r.output) == "--weight: give more than 0"


def test_every_field_of_a_run_request_has_a_flag():
    from gpupool.server.schemas.workloads import WorkloadIn

    hub_only = {"kind", "profile", "requeue_on_preemption", "pod_spec"}
    # --preemptible/--checkpointing are booleans: no value to refuse
    switches = {"preemptible", "checkpointing"}
    assert set(WorkloadIn.model_fields) - hub_only - switches == set(flags.RUN_FLAGS)


def test_units_read_as_the_user_writes_them():
    assert flags.mib_text(1 << 24) == "16 TiB"
    assert flags.mib_text(20 * 1024) == "20 GiB"
    assert flags.mib_text(1536) == "1.5 GiB"
    assert flags.mib_text(512) == "512 MiB"
    assert flags.seconds_text(366 * 86400) == "366 days"
    assert flags.seconds_text(90) == "90 s"
