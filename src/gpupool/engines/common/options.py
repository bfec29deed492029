"""An engine's options as `gpupool up` flags.

Each engine's options are a frozen dataclass (`LocalOptions`, `KubeOptions`, ...). A field is
a flag of `gpupool up` when its metadata has ``help``; fields without it are set by code only
(the system, tests). What the metadata may say:

- ``help``: the flag's help text (what makes it a flag);
- ``flag``: its name (default: ``--<engine>-<field name with dashes>``);
- ``metavar``: the value's placeholder in the help; ``show_default``: False hides the default;
- ``general``: listed among `gpupool up`'s general options, not in the engine's own panel;
- ``min``: an integer flag's lowest value; ``choices``: the only values it takes (others are
  refused with a message naming them);
- ``negate``: a boolean field that the flag turns off (``--no-...``); ``positive``: a hidden
  flag that turns it on again (the default; kept for scripts);
- ``also``: other fields of the same dataclass the flag sets to the same value.

A field whose default is itself a dataclass (`KubeOptions.pods`) holds more flags: its
fields'. A flag that is not given, or given an empty text, leaves the field's default.
Nothing here knows the command line library; `gpupool.cli.up` turns `Flag`s into options.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


class OptionsError(ValueError):
    """A flag's value is refused; the message names the flag and what it takes."""


@dataclass(frozen=True)
class Flag:
    """One flag of one engine: `path` is the field it sets (names from the options down),
    `param` the name its value is passed under, `annotation` the value's type, `default`
    the flag's own default (None: the field's)."""

    engine: str
    path: tuple[str, ...]
    name: str
    annotation: Any
    default: Any
    help: str
    metavar: str | None = None
    general: bool = False
    show_default: bool = True
    min: int | None = None
    hidden: bool = False
    #: the flag turns a boolean field off (`negate`) or, hidden, on again (`positive`)
    sets: bool | None = None

    @property
    def param(self) -> str:
        tail = "" if self.sets is None else ("__off" if self.sets is False else "__on")
        return "__".join((self.engine, *self.path)) + tail


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return value if dataclasses.is_dataclass(value) else None
    return None


def flags(engine: str, options: type) -> list[Flag]:
    """The flags of `engine` whose options are the dataclass `options`, in field order."""
    return list(_walk(engine, options, ()))


def _walk(engine: str, cls: type, prefix: tuple[str, ...]) -> Iterator[Flag]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        default = _default(f)
        path = (*prefix, f.name)
        if dataclasses.is_dataclass(default):
            yield from _walk(engine, type(default), path)
            continue
        meta = f.metadata
        if "help" not in meta:
            continue
        name = meta.get("flag") or f"--{engine}-{f.name.replace('_', '-')}"
        common = {
            "engine": engine,
            "path": path,
            "help": meta["help"],
            "general": bool(meta.get("general", False)),
        }
        if meta.get("negate"):
            yield Flag(name=name, annotation=bool, default=False, sets=False, **common)
            if meta.get("positive"):
                yield Flag(
                    name=meta["positive"],
                    annotation=bool,
                    default=False,
                    sets=True,
                    hidden=True,
                    **{**common, "help": "The default; kept for scripts."},
                )
            continue
        yield Flag(
            name=name,
            annotation=hints[f.name],
            default=default,
            metavar=meta.get("metavar"),
            show_default=meta.get("show_default", True),
            min=meta.get("min"),
            **common,
        )


def build(engine: str, options: type, values: Mapping[str, Any]) -> Any:
    """`options` made from the flags' `values` (by `Flag.param`; missing ones: defaults).
    Raises `OptionsError` for a value the options refuse."""
    return _build(engine, options, (), values)


def _build(engine: str, cls: type, prefix: tuple[str, ...], values: Mapping[str, Any]) -> Any:
    given: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        path = (*prefix, f.name)
        default = _default(f)
        if dataclasses.is_dataclass(default):
            given[f.name] = _build(engine, type(default), path, values)
            continue
        meta = f.metadata
        if "help" not in meta:
            continue
        key = "__".join((engine, *path))
        name = meta.get("flag") or f"--{engine}-{f.name.replace('_', '-')}"
        if meta.get("negate"):
            if values.get(key + "__on"):
                given[f.name] = True
            elif values.get(key + "__off"):
                given[f.name] = False
            continue
        value = values.get(key)
        if value is None or value == "":
            continue
        choices = meta.get("choices")
        if choices is not None and value not in choices:
            raise OptionsError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
        given[f.name] = value
        for other in meta.get("also", ()):
            given[other] = value
    try:
        return cls(**given)
    except ValueError as e:
        raise OptionsError(str(e)) from None
