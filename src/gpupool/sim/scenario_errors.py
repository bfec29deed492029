"""Problems with a scenario or trace file, said the way a person fixes them: where (the item
and its id or name) and what (the rule, the fields allowed), one line each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError


class ScenarioError(Exception):
    """A scenario (or trace) cannot be used. The message says what and where; `problems`
    lists every problem found, one line each."""

    def __init__(self, problems: Sequence[str], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        if len(self.problems) == 1:
            msg = head + self.problems[0]
        else:
            msg = (
                head
                + f"{len(self.problems)} problems:\n"
                + "\n".join(f"  - {p}" for p in self.problems)
            )
        super().__init__(msg)

    def __reduce__(self) -> tuple[type[ScenarioError], tuple[list[str], str | None]]:
        """Pickle by problems and source (a replay in another process raises it to its
        parent), not by the message, which would be read back as a list of characters."""
        return (ScenarioError, (self.problems, self.source))


def validate(model: type[BaseModel], data: Any) -> Any:
    """`data` as `model`, else ScenarioError listing every problem."""
    if not isinstance(data, Mapping):
        raise ScenarioError(
            ["the file must be a mapping with keys " + ", ".join(model.model_fields)]
        )
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise ScenarioError(_pydantic_problems(exc, data, model)) from None


def _loc_text(loc: Sequence[Any], data: Any) -> str:
    """`('workloads', 3, 'duration')` -> `workloads[3] (id j4): duration`."""
    out = ""
    node: Any = data
    field_parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
            item = node[part] if isinstance(node, list) and part < len(node) else None
            label = None
            if isinstance(item, Mapping):
                for key in ("id", "name"):
                    if isinstance(item.get(key), str | int):
                        label = f"{key} {item[key]}"
                        break
            if label:
                out += f" ({label})"
            node = item
            rest = [str(p) for p in loc[i + 1 :]]
            if rest:
                field_parts = rest
                break
        else:
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, Mapping) else None
    if field_parts:
        return f"{out}: {'.'.join(field_parts)}"
    return out


_MSG_REWRITES = {
    "greater_than_equal": "must be >= {ge:g}",
    "greater_than": "must be > {gt:g}",
    "less_than_equal": "must be <= {le:g}",
    "less_than": "must be < {lt:g}",
    "missing": "is required",
}


def _pydantic_problems(err: PydanticValidationError, data: Any, model: type[BaseModel]) -> list:
    problems = []
    for e in err.errors():
        loc = e["loc"]
        where = _loc_text(loc, data)
        kind = e["type"]
        ctx = e.get("ctx") or {}
        if kind == "extra_forbidden":
            allowed = _allowed_fields(model, loc[:-1])
            msg = f"unknown field {loc[-1]!r}" + (
                f"; allowed fields: {', '.join(allowed)}" if allowed else ""
            )
            where = _loc_text(loc[:-1], data)
            problems.append(f"{where}: {msg}" if where else msg)
            continue
        if kind in _MSG_REWRITES:
            try:
                msg = _MSG_REWRITES[kind].format(**ctx)
            except (KeyError, ValueError, TypeError):
                msg = e["msg"]
        elif kind == "value_error":
            msg = str(ctx.get("error", e["msg"]))
        else:
            msg = e["msg"][0].lower() + e["msg"][1:]
            if "input" in e and not isinstance(e["input"], dict | list):
                msg += f" (got {e['input']!r})"
        # "workloads[3] (id j4): duration must be >= 0"
        joiner = " " if msg.startswith(("must", "is ")) else ": "
        problems.append(f"{where}{joiner}{msg}" if where else msg)
    return problems


def _allowed_fields(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    cur: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        info = cur.model_fields.get(part) if hasattr(cur, "model_fields") else None
        if info is None:
            return []
        ann = info.annotation
        args = getattr(ann, "__args__", ())
        cur = next(
            (a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None
        )
        if cur is None:
            return []
    return sorted(cur.model_fields) if hasattr(cur, "model_fields") else []
