"""Tables the CLI prints: default columns that fit 80 columns, `-o wide` for every column.

A table is a list of `Col`s and the items to show. Columns are never cut short: identifiers,
states and numbers are printed whole (`no_wrap`); only free-text columns (`wrap=True`, e.g.
"why it waits") wrap onto more lines. If even the unwrappable columns need more room than the
terminal has, the table is printed wider rather than with "…" in a cell.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import typer
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table


class Output(enum.StrEnum):
    """What a listing command prints (`-o`)."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"


def output_option() -> Any:
    """The `-o/--output` option every listing command takes."""
    return typer.Option(
        Output.TABLE,
        "--output",
        "-o",
        case_sensitive=False,
        help="table (fits 80 columns), wide (every column) or json (same as --json).",
    )


def json_option() -> Any:
    return typer.Option(False, "--json", help="Print JSON for scripts (same as -o json).")


def wants_json(output: Output, as_json: bool) -> bool:
    return as_json or output is Output.JSON


@dataclass(frozen=True, slots=True)
class Col:
    """One column: its header, how to get its cell from an item, and when it shows.

    `wide`: only with `-o wide`. `wrap`: free text that may wrap onto more lines (every other
    column is printed whole). `right`: right-aligned (numbers). `sparse`: left out when no
    item has a value in it (every cell "-"), so that it takes no room for nothing.
    """

    header: str
    get: Callable[[Any], Any]
    wide: bool = False
    wrap: bool = False
    right: bool = False
    sparse: bool = False


def cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def build(cols: Sequence[Col], items: Iterable[Any], *, wide: bool = False) -> Table:
    """A borderless table of `items` with the default columns (or all of them if `wide`).

    Columns that may not wrap get their widest cell as their minimum width (wrapping ones
    their longest word), so a table that must be narrower than that is printed wider (see
    `print_fit`) instead of cutting cells.
    """
    items = list(items)
    shown = [
        c
        for c in cols
        if (wide or not c.wide) and not (c.sparse and all(cell(c.get(i)) == "-" for i in items))
    ]
    rows = [[cell(c.get(item)) for c in shown] for item in items]
    t = Table(box=None, pad_edge=False, header_style="bold")
    for i, c in enumerate(shown):
        texts = [c.header, *(r[i] for r in rows)]
        widest = max(cell_len(x) for x in texts)
        if c.wrap:  # room for its longest word, and at least a dozen columns where it has more
            longest = max(cell_len(w) for x in texts for w in x.split() or [""])
            least = max(longest, min(widest, 12))
        else:
            least = widest
        t.add_column(
            c.header,
            no_wrap=not c.wrap,
            min_width=least,
            overflow="fold",
            justify="right" if c.right else "left",
        )
    for r in rows:
        t.add_row(*r)
    return t


def print_fit(console: Console, renderable: RenderableType) -> None:
    """Print at the console's width, or wider if unwrappable table columns need more."""
    need = Measurement.get(console, console.options.update(max_width=10_000), renderable).minimum
    if need <= console.width:
        console.print(renderable)
        return
    # Rich's print(width=...) lays tables out wrongly (a column can vanish): widen the console.
    width = console.width
    console.width = need
    try:
        console.print(renderable, crop=False)
    finally:
        console.width = width


def show(
    console: Console,
    cols: Sequence[Col],
    items: Iterable[Any],
    output: Output,
    empty: str | None = None,
) -> None:
    """Print `items` as a table (default or wide columns); `empty` when there are none."""
    items = list(items)
    if not items and empty:
        console.print(empty)
        return
    print_fit(console, build(cols, items, wide=output is Output.WIDE))


def print_json(console: Console, data: Any) -> None:
    console.print_json(json.dumps(data))


def age(t: float | None, now: float | None = None) -> str:
    """How long ago `t` was, in the largest whole unit: 45s, 12m, 3h, 5d."""
    if t is None:
        return "-"
    s = max(0.0, (time.time() if now is None else now) - t)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{int(s // size)}{unit}"
    return f"{int(s)}s"


def duration(s: float | None) -> str:
    """Seconds as 45s, 30m, 2h, 1d12h."""
    if s is None:
        return "-"
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60}s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600}h" + (f"{s % 3600 // 60}m" if s % 3600 // 60 else "")
    return f"{s // 86400}d" + (f"{s % 86400 // 3600}h" if s % 86400 // 3600 else "")


def gpu_list(shares: Iterable[tuple[str, int]]) -> str:
    """(node, GPU index) pairs as 'n1:0-3' or 'n1:0,2 n2:1' (runs of indexes joined)."""
    by_node: dict[str, list[int]] = {}
    for node, idx in shares:
        by_node.setdefault(node, []).append(idx)
    parts = []
    for node, idxs in by_node.items():
        idxs = sorted(set(idxs))
        runs: list[str] = []
        start = prev = idxs[0]
        for i in [*idxs[1:], None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            if i is not None:
                start = prev = i
        parts.append(f"{node}:{','.join(runs)}")
    return " ".join(parts)


def asks_text(r: dict[str, Any]) -> str:
    """A request in a table's few columns: '2 GPUs', '0.25 GPU, 20G', '2x8 H100 GPUs',
    'MIG 1g.10gb', 'CPU only' (`show` gives the whole description)."""
    model = f"{r['gpu_model']} " if r.get("gpu_model") else ""
    if (r.get("nodes") or 1) > 1:
        return f"{r['nodes']}x{r['gpus_per_node']} {model}GPUs"
    if r.get("mig"):
        return f"MIG {r['mig']}" + (f" {r['gpu_model']}" if model else "")
    if r.get("gpus"):
        return f"{r['gpus']} {model}GPU" + ("s" if r["gpus"] > 1 else "")
    if r.get("gpu_fraction"):
        mem = r.get("gpu_memory_mib") or 0
        return f"{r['gpu_fraction']:g} {model}GPU" + (f", {mem / 1024:g}G" if mem else "")
    return "CPU only"
