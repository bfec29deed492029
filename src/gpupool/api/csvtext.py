"""CSV that a spreadsheet opens as data, never as formulas: the one writer of every CSV
gpupool hands out (`gpupool usage --export csv`, `GET /usage/chargeback?format=csv`; the
dashboard's client-side download follows the same rule in `web/static/common.js`).

Cells come from text others chose: tenant and user names, GPU model names reported by node
agents, workload names. A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return
is taken by Excel, LibreOffice and Google Sheets as a formula (CSV injection: `=HYPERLINK(...)`
, `=cmd|...`). OWASP's rule: such a text cell gets a leading single quote, which the
spreadsheet shows as text. Numbers (int, float) are written as they are; the stdlib `csv`
module quotes separators, quotes and line breaks. Lines end with CRLF (RFC 4180): with a
bare \n as the terminator the `csv` module would leave a cell holding a carriage return
unquoted, and a reader would split the row there.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

#: what makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

Cell = str | int | float | None


def safe_cell(value: Cell) -> str | int | float:
    """`value` as a CSV cell: text that would start a formula gets a leading `'`; None is
    empty; numbers are left alone (a bool is text: True/False)."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_text(rows: Iterable[Sequence[Cell]]) -> str:
    """`rows` as CSV (lines end with \\r\\n), every cell through `safe_cell`."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    for row in rows:
        w.writerow([safe_cell(c) for c in row])
    return buf.getvalue()
