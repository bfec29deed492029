"""`gpupool mcp` as an assistant starts it: a subprocess speaking the Model Context Protocol
on stdio, driven by the official `mcp` package's client, against a real server (uvicorn in a
thread, scheduler loop running). It acts with the caller's token and permissions; submit and
cancel exist only with --allow-submit."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters

from gpupool.cli.assistant import READ_TOOLS, WRITE_TOOLS
from gpupool.client import Client
from tests.cli.test_client import as_, server  # noqa: F401 - fixtures

GPUPOOL = [sys.executable, "-c", "from gpupool.cli.main import run; run()"]


def _params(url: str, token: str, tmp_path, *flags: str) -> StdioServerParameters:  # noqa: ANN001
    return StdioServerParameters(
        command=GPUPOOL[0],
        args=[*GPUPOOL[1:], "mcp", *flags],
        env={"GPUPOOL_URL": url, "GPUPOOL_TOKEN": token, "XDG_CONFIG_HOME": str(tmp_path)},
    )


def _value(result: Any) -> Any:
    """A tool's answer: its structured content (MCP wraps a non-object in `result`)."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        sc = result.structured_content
        return sc["result"] if set(sc) == {"result"} else sc
    text = result.content[0].text
    try:
        return json.loads(text)
    except ValueError:
        return text


def session(params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]):  # noqa: ANN201
    """(tool names, each call's result) from one session."""

    async def go() -> tuple[list[str], list[Any]]:
        async with McpClient(params, read_timeout_seconds=60) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            results = [await c.call_tool(name, args) for name, args in calls]
            return names, results

    return asyncio.run(go())


def test_read_tools_act_as_the_caller(server, tmp_path):  # noqa: F811
    url, ctx = server
    ann = as_(ctx, "ann")
    with Client(url, ann) as gp:
        held = gp.submit(gpus=2, command=["sleep", "100"], max_runtime_s=3600)
        gp.wait(held.id, "running", timeout_s=60, poll_s=0.05)
        waiting = gp.submit(gpus=2, command=["sleep", "100"])
        gp.why_pending(waiting.id, poll_s=0.05)
    names, (queue, mine, one, log, quota, usage, cluster, missing) = session(
        _params(url, ann, tmp_path),
        [
            ("queue", {}),
            ("my_workloads", {}),
            ("workload", {"workload_id": held.id}),
            ("logs", {"workload_id": held.id}),
            ("tenant_quota", {"tenant": "lab"}),
            ("my_usage", {}),
            ("cluster", {}),
            ("workload", {"workload_id": "w-nothing"}),
        ],
    )
    assert sorted(names) == sorted(READ_TOOLS)  # no submit, no cancel without the flag
    (entry,) = _value(queue)
    assert entry["workload"]["id"] == waiting.id and entry["reason"]
    assert {w["id"] for w in _value(mine)} == {held.id, waiting.id}
    assert _value(one)["state"] == "running" and _value(one)["events"]
    assert _value(log) == "" or isinstance(_value(log), str)
    assert _value(quota)["quota"]["guaranteed"] == 2
    assert _value(usage)["group_by"] == "day"
    assert {g["uuid"] for n in _value(cluster) for g in n["gpus"]}
    assert missing.is_error and "no workload" in missing.content[0].text

    # another tenant's member does not see ann's work through the assistant either
    _, (theirs,) = session(
        _params(url, as_(ctx, "otto"), tmp_path), [("workload", {"workload_id": held.id})]
    )
    assert theirs.is_error


def test_submit_and_cancel_only_with_the_flag_and_the_callers_rights(server, tmp_path):  # noqa: F811
    url, ctx = server
    names, (made, bad) = session(
        _params(url, as_(ctx, "ann"), tmp_path, "--allow-submit"),
        [
            ("submit", {"command": ["sleep", "100"], "gpu_fraction": 0.5, "gpu_memory": "8G"}),
            ("submit", {"command": ["x"], "gpu_fraction": 0.5, "gpu_memory": "lots"}),
        ],
    )
    assert set(WRITE_TOOLS) <= set(names)
    w = _value(made)
    assert w["owner"] == "ann" and w["request"]["gpu_memory_mib"] == 8192
    assert bad.is_error and "give a size with a unit" in bad.content[0].text
    _, (cancelled,) = session(
        _params(url, as_(ctx, "ann"), tmp_path, "--allow-submit"),
        [("cancel", {"workload_id": w["id"]})],
    )
    assert _value(cancelled)["state"] in ("cancelled", "running", "pending")
    _, (refused,) = session(
        _params(url, as_(ctx, "vic"), tmp_path, "--allow-submit"),
        [("submit", {"command": ["sleep", "1"], "gpus": 1})],
    )
    # a viewer may not submit: the server's own message, which says what to do
    assert refused.is_error and "ask a tenant-admin" in refused.content[0].text
