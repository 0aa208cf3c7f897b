"""The tables and status lists the commands print (`inspect`, `presets`, `cast`, `doctor`), fitted to where
they go: on a terminal, to its width (free-text columns wrap, headers are never cut); into a pipe or a file,
plain space-aligned rows with full headers and no wrapping, so `| cat`, `| grep` and `| column` see one row
a line."""

from __future__ import annotations

import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

GAP = "  "  # between two columns
# A free-text column narrower than this reads as a word a line: below it the column goes under its row.
MIN_WRAP = 16
INDENT = "    "  # of a free-text column printed under its row


@dataclass(frozen=True)
class Column:
    header: str
    wrap: bool = False  # free text that may wrap on a terminal; the other columns keep their width
    right: bool = False  # numbers: aligned right


def terminal_width(out: TextIO) -> int | None:
    """The width to fit when `out` is a terminal ($COLUMNS first, as `ls` does); None when it is not."""
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError, OSError):
        return None
    return max(shutil.get_terminal_size((80, 24)).columns, 20)


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    out: TextIO | None = None,
) -> None:
    out = out or sys.stdout
    if title:
        print(title, file=out)
    for line in table_lines(columns, rows, terminal_width(out)):
        print(line, file=out)


def table_lines(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> list[str]:
    """The table as lines: `width` None gives plain rows; else every line fits `width` (a header longer
    than the width itself aside)."""
    cells = [[_flat(c) for c in r] for r in rows]
    nat = [max([len(col.header), *(len(r[i]) for r in cells)]) for i, col in enumerate(columns)]
    if width is None or _span(nat) <= width:
        return _rows(columns, nat, cells, rule=width is not None)
    wraps = [i for i, c in enumerate(columns) if c.wrap]
    kept = [i for i in range(len(columns)) if i not in wraps]
    fixed = _shrink([nat[i] for i in kept], [len(columns[i].header) for i in kept], width, len(wraps))
    room = width - sum(fixed) - len(GAP) * (len(columns) - 1)
    need = [max(len(columns[i].header), MIN_WRAP) for i in wraps]
    widths = list(nat)
    for i, w in zip(kept, fixed, strict=True):
        widths[i] = w
    if wraps and room >= sum(need):
        for i, w in zip(wraps, _share(room, [nat[i] for i in wraps], need), strict=True):
            widths[i] = w
        return _rows(columns, widths, cells, rule=True)
    # Too narrow for the free text beside the rest: each free-text cell goes under its row, full width.
    fixed = _shrink([nat[i] for i in kept], [len(columns[i].header) for i in kept], width, 0)
    head = [columns[i] for i in kept]
    lines = _rows(head, fixed, [], rule=True)
    lines[1:1] = [INDENT + columns[i].header for i in wraps]  # under the header, as the cells go
    for r in cells:
        lines += _rows(head, fixed, [[r[i] for i in kept]], header=False)
        for i in wraps:
            lines += textwrap.wrap(r[i], width - len(INDENT), initial_indent=INDENT, subsequent_indent=INDENT)
    return lines


def print_wrapped(first: str, rest: str = "", *, indent: int = 4, out: TextIO | None = None) -> None:
    """A line of prose after a table: whole into a pipe, wrapped under a hanging indent on a terminal."""
    out = out or sys.stdout
    for line in status_lines(first, rest, terminal_width(out), indent):
        print(line, file=out)


def status_lines(first: str, rest: str, width: int | None, indent: int) -> list[str]:
    """`first` + `rest` as one line, or on a terminal wrapped to `width` under a hanging indent."""
    if width is None:
        return [first + rest]
    return textwrap.wrap(first + rest, width, subsequent_indent=" " * indent, break_on_hyphens=False) or [
        first
    ]


def _flat(cell: object) -> str:
    # A cell is one line: a subtitle's line breaks and tabs would break the row apart.
    return " ".join(str(cell).split())


def _span(widths: Sequence[int]) -> int:
    return sum(widths) + len(GAP) * max(len(widths) - 1, 0)


def _shrink(nat: list[int], floor: list[int], width: int, extra_cols: int) -> list[int]:
    """Narrow the widest columns (not below their header) until they fit `width` beside `extra_cols` more
    gaps; cells that no longer fit are shortened with an ellipsis."""
    out = list(nat)
    budget = width - len(GAP) * (len(out) - 1 + extra_cols) - extra_cols * MIN_WRAP
    while sum(out) > budget:
        i = max(range(len(out)), key=lambda k: out[k] - floor[k])
        if out[i] <= floor[i]:
            break
        out[i] -= 1
    return out


def _share(room: int, nat: list[int], need: list[int]) -> list[int]:
    """`room` columns split over the free-text columns: each its minimum, the rest by natural width."""
    out = list(need)
    spare = room - sum(need)
    want = [max(n - m, 0) for n, m in zip(nat, need, strict=True)]
    total = sum(want)
    for k, w in enumerate(want):
        out[k] += min(w, spare * w // total) if total else 0
    return out


def _rows(
    columns: Sequence[Column],
    widths: Sequence[int],
    cells: Sequence[Sequence[str]],
    *,
    rule: bool = False,
    header: bool = True,
) -> list[str]:
    def line(parts: Sequence[str]) -> str:
        out = []
        for col, w, p in zip(columns, widths, parts, strict=True):
            p = p if len(p) <= w else p[: max(w - 1, 0)] + "…"
            out.append(p.rjust(w) if col.right else p.ljust(w))
        return GAP.join(out).rstrip()

    lines = []
    if header:
        lines.append(line([c.header for c in columns]))
        if rule:
            lines.append(GAP.join("─" * w for w in widths))
    for r in cells:
        parts = [_wrapped(p, w) if c.wrap else [p] for c, w, p in zip(columns, widths, r, strict=True)]
        for k in range(max(len(p) for p in parts)):
            lines.append(line([p[k] if k < len(p) else "" for p in parts]))
    return lines


def _wrapped(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]
