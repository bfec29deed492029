"""Refusals in the terms of the command line: the API's fields mapped back to the flags.

A request body's field (`gpu_memory_mib`) is filled from a flag (`--gpu-memory 100T`). The
API refuses bad fields with a 422 whose `errors` name the field (`body.gpu_memory_mib`) in
pydantic's words ("Input should be less than or equal to 16777216"). A `Flag` says which flag
fills a field and how the API's numbers are written in the flag's units (16777216 MiB is
"16 TiB"); `rule_text` words a broken bound as the most or least the flag takes, and
`explain` turns a whole 422 into one line per flag. `gpupool run` also checks its body with
the server's own schema before sending it (`check_run_body`), so the usual mistakes are
answered at once, and in the same words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.cli.base import CliError
from gpupool.domain.commands import RESERVED_ENV_NAMES, RESERVED_ENV_PREFIXES


def plain(x: float) -> str:
    return f"{x:g}"


def mib_text(mib: float) -> str:
    """MiB in the largest binary unit that keeps it short: '16 TiB', '20 GiB', '512 MiB'."""
    for unit, size in (("TiB", 1024 * 1024), ("GiB", 1024)):
        if mib >= size:
            return f"{mib / size:.4g} {unit}"
    return f"{mib:g} MiB"


def seconds_text(s: float) -> str:
    """'366 days', '1 day', '90 s'."""
    if s >= 86400 and s % 86400 == 0:
        days = int(s // 86400)
        return f"{days} day" + ("" if days == 1 else "s")
    return f"{s:g} s"


@dataclass(frozen=True, slots=True)
class Flag:
    """The flag that fills an API field, and how that field's numbers read in its units."""

    name: str
    unit: Callable[[float], str] = plain


#: `gpupool run`'s flags by the API field each one fills (tests/cli checks they are all here)
RUN_FLAGS: Mapping[str, Flag] = {
    "gpus": Flag("--gpus"),
    "gpu_fraction": Flag("--gpu-fraction"),
    "nodes": Flag("--nodes"),
    "gpus_per_node": Flag("--gpus-per-node"),
    "gpu_memory_mib": Flag("--gpu-memory", mib_text),
    "gpu_model": Flag("--gpu-model"),
    "mig": Flag("--mig"),
    "engine": Flag("--engine"),
    "node_labels": Flag("--node-label"),
    "tenant": Flag("--tenant"),
    "name": Flag("--name"),
    "priority": Flag("--priority"),
    "cpus": Flag("--cpus"),
    "memory_mib": Flag("--memory", mib_text),
    "max_runtime_s": Flag("--max-runtime", seconds_text),
    "env": Flag("--env"),
    "command": Flag("the command"),
}

#: `gpupool tenant create/set-quota`'s flags (the quota's fields are in GPUs)
TENANT_FLAGS: Mapping[str, Flag] = {
    "name": Flag("the tenant's name"),
    "quota.guaranteed": Flag("--guaranteed"),
    "quota.limit": Flag("--limit"),
    "quota.weight": Flag("--weight"),
    "quota.max_per_user": Flag("--max-per-user"),
    "idle_timeout_s": Flag("--idle-timeout", seconds_text),
}

#: pydantic's bound types -> how the bound reads ('the most allowed is 16 TiB')
_BOUNDS = {
    "le": "the most allowed is {}",
    "lt": "give less than {}",
    "ge": "the least allowed is {}",
    "gt": "give more than {}",
}
#: pydantic's messages for the same bounds, as a server's 422 words them
_BOUND_MESSAGES = (
    (re.compile(r"Input should be less than or equal to (\S+)"), "le"),
    (re.compile(r"Input should be less than (\S+)"), "lt"),
    (re.compile(r"Input should be greater than or equal to (\S+)"), "ge"),
    (re.compile(r"Input should be greater than (\S+)"), "gt"),
)
_MAX_LENGTH = re.compile(r"should have at most (\d+) (characters|items)")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def rule_text(flag: Flag, bound: str, value: float) -> str:
    """A broken bound (`le`, `lt`, `ge`, `gt` of `value` in the API's units) in the flag's."""
    return _BOUNDS[bound].format(flag.unit(value))


def _said(flag: Flag, given: Mapping[str, str], field: str) -> str:
    """'--gpu-memory 100T' (what the user typed), or just the flag."""
    text = given.get(field)
    return flag.name if text is None else f"{flag.name} {text}"


def _gpu_fraction_text(given: str | None, bound: str) -> str:
    """`--gpu-fraction` out of (0, 1): a part of one GPU, or whole GPUs with --gpus."""
    f = _number(given or "")
    if bound in ("lt", "le") and f is not None and f >= 1:
        if f == int(f):
            return (
                f"--gpu-fraction {given} is a part of one GPU, less than 1; "
                f"for whole GPUs use --gpus {int(f)}"
            )
        return (
            f"--gpu-fraction {given} is a part of one GPU, less than 1; for whole GPUs use "
            f"--gpus {int(f)} or --gpus {int(f) + 1}"
        )
    return f"--gpu-fraction {given}: give a part of one GPU between 0 and 1, e.g. 0.25"


def error_text(
    field: str,
    kind: str,
    ctx: Mapping[str, Any],
    message: str,
    flags: Mapping[str, Flag],
    given: Mapping[str, str],
) -> str | None:
    """One refused field (`kind`: pydantic's error type or bound, `ctx` its values) in the
    flag's terms, or None if no flag fills `field`."""
    top = field.split(".", 1)[0]
    name = field if field in flags else top
    flag = flags.get(name)
    if flag is None:
        return None
    if name == "gpu_fraction" and kind in _BOUNDS:
        return _gpu_fraction_text(given.get(name), kind)
    if kind in _BOUNDS and isinstance(ctx.get(kind), int | float):
        return f"{_said(flag, given, name)}: {rule_text(flag, kind, ctx[kind])}"
    if name == "env" and "." in field:  # env.<NAME>: a bad variable name
        var = field.split(".")[1]
        return (
            f"--env {var}=...: a variable's name is letters, digits and _, "
            "not starting with a digit"
        )
    m = _MAX_LENGTH.search(message)
    if m is not None:
        what = "characters" if m.group(2) == "characters" else "words"
        return f"{flag.name}: at most {m.group(1)} {what}"
    return f"{_said(flag, given, name)}: {message}"


def explain(
    problem: Mapping[str, Any], flags: Mapping[str, Flag], given: Mapping[str, str]
) -> str | None:
    """A server's 422 (problem+json with `errors`) in flag terms, one refusal per flag; None
    if some refused field is filled by no flag (the server's own detail is then clearer)."""
    texts = []
    for e in problem.get("errors") or ():
        field = str(e.get("field", ""))
        field = field.removeprefix("body.")
        message = str(e.get("message", ""))
        kind, ctx = "", {}
        for pattern, bound in _BOUND_MESSAGES:
            m = pattern.search(message)
            if m is not None and _number(m.group(1)) is not None:
                kind, ctx = bound, {bound: _number(m.group(1))}
                break
        if not message.startswith(("Input should", "String should", "List should")) and not kind:
            return None  # the server's own words (a domain rule): already in plain terms
        text = error_text(field, kind, ctx, message, flags, given)
        if text is None:
            return None
        texts.append(text)
    return "; ".join(dict.fromkeys(texts)) or None


def check_run_body(body: Mapping[str, Any], given: Mapping[str, str]) -> str | None:
    """Why the server would refuse `gpupool run`'s body, in flag terms, or None.

    Checks it with the server's schema (`WorkloadIn`) and the rules the CLI can know without
    asking: a command to run, a fraction that does not round to 0 or 1, no variable that
    gpupool sets itself."""
    import pydantic

    from gpupool.api.workloads import WorkloadIn

    command = body.get("command") or []
    if not command or not command[0]:
        return "give the command to run after --, e.g. gpupool run --gpus 1 -- python3 train.py"
    try:
        WorkloadIn.model_validate(body)
    except pydantic.ValidationError as exc:
        texts = []
        for e in exc.errors():
            loc = [str(p) for p in e["loc"] if p != "[key]"]
            field = ".".join(loc)
            text = error_text(
                field, _kind(e["type"]), e.get("ctx") or {}, e["msg"], RUN_FLAGS, given
            )
            texts.append(text or f"{field}: {e['msg']}")
        return "; ".join(dict.fromkeys(texts))
    fraction = body.get("gpu_fraction")
    if fraction is not None and not 0 < round(fraction * 1000) < 1000:
        return (
            f"--gpu-fraction {given.get('gpu_fraction', fraction)} rounds to "
            f"{round(fraction * 1000) / 1000:g} GPU; give a part between 0.001 and 0.999"
        )
    for var in body.get("env") or {}:
        if var in RESERVED_ENV_NAMES or var.startswith(RESERVED_ENV_PREFIXES):
            return (
                f"--env {var}: gpupool sets it to bind the GPUs it grants; remove it "
                "(ask for GPUs with --gpus, --gpu-fraction or --mig)"
            )
    return None


#: pydantic's error types for the bounds -> the bound's key in `ctx`
_TYPES = {
    "less_than_equal": "le",
    "less_than": "lt",
    "greater_than_equal": "ge",
    "greater_than": "gt",
}


def _kind(pydantic_type: str) -> str:
    return _TYPES.get(pydantic_type, pydantic_type)


def flag_terms(
    e: CliError, known: Mapping[str, Flag], given: Mapping[str, str] | None = None
) -> CliError:
    """`e` with a server's 422 about the request's fields said in the command's flags."""
    if e.problem is None or e.problem.get("status") != 422:
        return e
    text = explain(e.problem, known, given or {})
    return e if text is None else CliError(text, e.code, e.retry_after, e.problem)
