"""How the fake API server speaks (see fakeapi.py), shared by its parts: a `Status` error
body, label and field selectors, JSON merge patch (RFC 7386) and JSON patch (RFC 6902), and
timestamps as the API writes them. A leaf module: the parts import it, never each other."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from starlette.responses import JSONResponse


def status(code: int, reason: str, message: str) -> JSONResponse:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return JSONResponse(body, status_code=code)


def match_labels(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        term = term.strip()
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.rstrip("=")) != v.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_of(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def match_fields(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if str(field_of(obj, k) or "") == v:
                return False
        else:
            k, v = term.split("=", 1)
            if str(field_of(obj, k.rstrip("=")) or "") != v.lstrip("="):
                return False
    return True


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386); strategic merge treated the same for the maps we patch."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unptr(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/replace/remove (the ops gpupool sends), on a copy."""
    out = copy.deepcopy(obj)
    for op in ops:
        parts = [_unptr(p) for p in op["path"].split("/")[1:]]
        cur: Any = out
        for part in parts[:-1]:
            cur = cur[int(part)] if isinstance(cur, list) else cur[part]
        last = parts[-1]
        if op["op"] == "remove":
            if isinstance(cur, list):
                cur.pop(int(last))
            else:
                del cur[last]
        elif isinstance(cur, list):
            value = copy.deepcopy(op["value"])
            if last == "-":
                cur.append(value)
            elif op["op"] == "add":
                cur.insert(int(last), value)
            else:
                cur[int(last)] = value
        else:
            if op["op"] == "replace" and last not in cur:
                raise KeyError(f"replace of a missing member {op['path']}")
            cur[last] = copy.deepcopy(op["value"])
    return out
