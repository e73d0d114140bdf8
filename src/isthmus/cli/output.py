"""How every command prints what it shows: `-o table|wide|json|yaml`, one meaning everywhere.

- `table`: kubectl's plain columns (`NAME  AGE`, two spaces apart, no box drawing). On a terminal a
  row never wraps: the widest cells are cut to fit its width and end in `…`; into a pipe or a file
  nothing is cut (as kubectl). A cell may hold several lines (a conflict per line): they continue
  under their column.
- `wide`: the same table with the columns marked `wide` too.
- `json` / `yaml`: one document, the same in both. Listings are kubectl's List shape,
  `{"kind": "List", "items": [...]}` (`list_document`), each item a row with every field; other
  commands print their own document (`status`, `version`) or the object they wrote (`export`).

Commands take `OutputOpt` (or `output_option(...)` for a narrower set) and call `print_table`,
`print_document` or `print_list`. Output that is a file or a directory never uses `-o`: it gets a
flag of its own (`deploy-broker --broker-info`, `crds --output-dir`).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Annotated, Any

import typer

from isthmus.cli.app import fail

FORMATS = ("table", "wide", "json", "yaml")
TABLE, WIDE, JSON, YAML = FORMATS
GAP = "  "
"""Between two columns (kubectl's tabwriter look)."""
ELLIPSIS = "…"
MIN_COLUMN = 6
"""A column is never cut narrower than this (or its header, if shorter): below it a cell says nothing."""


def _choices(formats: Sequence[str]) -> str:
    return ", ".join(formats[:-1]) + f" or {formats[-1]}" if len(formats) > 1 else formats[0]


def output_option(formats: Sequence[str] = FORMATS) -> Any:
    """An `--output/-o` option accepting `formats` (checked, and completed by the shell)."""

    def check(value: str) -> str:
        if value not in formats:
            raise fail(f"--output must be {_choices(formats)}, not {value!r}")
        return value

    def complete(incomplete: str) -> list[str]:
        return [f for f in formats if f.startswith(incomplete)]

    return typer.Option(
        "--output", "-o", metavar="|".join(formats), callback=check, autocompletion=complete,
        help=f"Output format: {_choices([f'{f} (more columns)' if f == WIDE else f for f in formats])}.",
    )


OutputOpt = Annotated[str, output_option()]
"""`-o table|wide|json|yaml`, default table."""


# --- documents ----------------------------------------------------------------------------------


def list_document(items: Iterable[Any]) -> dict[str, Any]:
    """kubectl's List shape around a listing's rows."""
    return {"kind": "List", "items": list(items)}


def dump(doc: Any, output: str) -> str:
    """`doc` as JSON (two-space indent, as kubectl) or YAML (block style, keys in their order)."""
    if output == YAML:
        import yaml

        return str(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True))
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def print_document(doc: Any, output: str, file: IO[str] | None = None) -> None:
    """Print `doc` in `output` (json or yaml)."""
    (file or sys.stdout).write(dump(doc, output))


# --- tables -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    header: str
    wide: bool = False
    """Shown with `-o wide` only."""


def _columns(columns: Sequence[Column | str]) -> list[Column]:
    return [c if isinstance(c, Column) else Column(c) for c in columns]


def terminal_width(stream: IO[str] | None = None) -> int | None:
    """The width to fit rows in: the terminal's when `stream` is one, else None (no cutting)."""
    stream = stream or sys.stdout
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size().columns  # honours $COLUMNS, as kubectl does


def _cell_len(text: str) -> int:
    from rich.cells import cell_len

    return int(cell_len(text))


def cut(text: str, width: int) -> str:
    """`text` in at most `width` terminal cells, ending in … when cut."""
    if _cell_len(text) <= width:
        return text
    if width <= 0:
        return ""
    from rich.cells import get_character_cell_size

    out, used = [], 0
    for ch in text:
        size = int(get_character_cell_size(ch))
        if used + size > width - 1:
            break
        out.append(ch)
        used += size
    return "".join(out) + ELLIPSIS


def _fit(natural: list[int], headers: list[int], width: int) -> list[int]:
    """Column widths whose row fits `width`: the widest column gives up a cell, again and again
    (the rightmost of equals first: messages come last, names first)."""
    widths = list(natural)
    floors = [min(n, max(h, MIN_COLUMN)) for n, h in zip(natural, headers, strict=True)]
    excess = sum(widths) + len(GAP) * (len(widths) - 1) - width
    while excess > 0:
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widest = max(reversed(shrinkable), key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def render_table(
    columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *, wide: bool = False, width: int | None = None
) -> list[str]:
    """The lines of a table. Each row has a cell per column (wide ones included, dropped unless
    `wide`); None is shown as `-`. With `width`, no line is longer than it."""
    cols = _columns(columns)
    keep = [i for i, c in enumerate(cols) if wide or not c.wide]
    headers = [cols[i].header for i in keep]
    body: list[list[list[str]]] = []  # row → cell → lines
    for row in rows:
        if len(row) != len(cols):
            raise ValueError(f"a row of {len(row)} cells for {len(cols)} columns")
        body.append([("-" if row[i] is None else str(row[i])).split("\n") for i in keep])
    natural = [_cell_len(h) for h in headers]
    for cells in body:
        for j, lines in enumerate(cells):
            natural[j] = max(natural[j], *(_cell_len(line) for line in lines))
    widths = natural if width is None else _fit(natural, [_cell_len(h) for h in headers], width)
    out = [_line(headers, widths)]
    for cells in body:
        for k in range(max(len(lines) for lines in cells)):
            out.append(_line([lines[k] if k < len(lines) else "" for lines in cells], widths))
    if width is not None:
        out = [cut(line, width) for line in out]  # columns at their floors may still not fit
    return out


def _line(cells: list[str], widths: list[int]) -> str:
    padded = []
    for text, w in zip(cells, widths, strict=True):
        shown = cut(text, w)
        padded.append(shown + " " * (w - _cell_len(shown)))
    return GAP.join(padded).rstrip()


def print_table(
    columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], output: str = TABLE,
    file: IO[str] | None = None,
) -> None:
    """Print a table (`output` table or wide), fitted to the terminal when there is one."""
    stream = file or sys.stdout
    lines = render_table(columns, rows, wide=output == WIDE, width=terminal_width(stream))
    stream.write("\n".join(lines) + "\n")


def print_list(
    items: Sequence[Any], output: str, columns: Sequence[Column | str],
    rows: Callable[[Any], Iterable[Sequence[Any]]], *, empty: str | None = None,
) -> None:
    """A listing: json/yaml the List of `items`; table/wide the rows `rows(item)` gives for each
    item (one, or several for an item with sub-rows). With no items, the table becomes `empty` on
    stderr (kubectl's `No resources found`), the document an empty List."""
    if output in (JSON, YAML):
        print_document(list_document(items), output)
        return
    if not items:
        typer.echo(empty or "No resources found", err=True)
        return
    print_table(columns, [r for item in items for r in rows(item)], output)
