#!/usr/bin/env python3
"""Render the table of engines and their executor capabilities from the contract.

Rows are the capability mixins of `gpupool.engines.common.executor` (`CAPABILITIES`), with
their methods and the first line of their docstring; columns are the registered engines
(`gpupool.engines.registry.ENGINES`) and the fake and template engines, each marked where
its executor class (`Engine.executor_class`) declares the mixin. docs/executors.md holds the
table between two marker lines; tests/engines/test_contract_table.py fails when it differs.

    python3 scripts/contract_table.py           # print the table
    python3 scripts/contract_table.py --write   # put it into docs/executors.md
    python3 scripts/contract_table.py --check   # exit 1 if docs/executors.md differs
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from pathlib import Path

from gpupool.engines.common.engine import Engine
from gpupool.engines.common.executor import CAPABILITIES
from gpupool.engines.registry import ENGINES

DOC = Path(__file__).resolve().parent.parent / "docs" / "executors.md"
BEGIN = "<!-- contract-table: begin (scripts/contract_table.py --write) -->"
END = "<!-- contract-table: end -->"
#: engines not in the registry, shown too: the tests' fake and the template to copy
UNREGISTERED = {
    "fake": "gpupool.engines.fake.engine:FakeEngine",
    "template": "gpupool.engines.template.engine:TemplateEngine",
}


def _engine(path: str) -> type[Engine]:
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, Engine), path
    return cls


def engines() -> dict[str, type[Engine]]:
    """Column name -> engine class: the registry's, then the unregistered ones."""
    out = {name: spec.engine_class() for name, spec in ENGINES.items()}
    out.update({name: _engine(path) for name, path in UNREGISTERED.items()})
    return out


def _methods(cap: type) -> str:
    names = [n for n in vars(cap) if not n.startswith("_")]
    return ", ".join(f"`{n}`" for n in names)


def _summary(cap: type) -> str:
    doc = inspect.getdoc(cap) or ""
    return doc.split("\n\n")[0].replace("\n", " ").replace("|", "\\|")


def render() -> str:
    """The table, in Markdown (without the markers)."""
    cols = engines()
    head = ["capability", "methods", "contract", *cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cap in CAPABILITIES:
        marks = ["✓" if issubclass(cls.executor_class, cap) else "–" for cls in cols.values()]
        row = [f"`{cap.__name__}`", _methods(cap) or "(a promise)", _summary(cap), *marks]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def in_doc(text: str) -> str:
    """The table between the markers of `text`."""
    start, end = text.index(BEGIN) + len(BEGIN) + 1, text.index(END)
    return text[start:end]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="update docs/executors.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/executors.md differs")
    args = ap.parse_args(argv)
    table = render()
    if not (args.write or args.check):
        sys.stdout.write(table)
        return 0
    text = DOC.read_text()
    if in_doc(text) == table:
        return 0
    if args.check:
        print(f"{DOC} is out of date: run python3 scripts/contract_table.py --write")
        return 1
    start, end = text.index(BEGIN) + len(BEGIN) + 1, text.index(END)
    DOC.write_text(text[:start] + table + text[end:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
