"""The shared printer of every command (cli/output.py): kubectl's plain tables that never wrap on a
terminal and are never cut into a pipe, `wide` columns, and the json/yaml List documents."""

from __future__ import annotations

import io
import json

import pytest
import yaml
from rich.cells import cell_len

from isthmus.cli.output import (
    Column,
    cut,
    list_document,
    print_list,
    print_table,
    render_table,
    terminal_width,
)

COLUMNS = ["NAMESPACE", "NAME", "MESSAGE", Column("EXTRA", wide=True)]
ROWS = [
    ["shop", "web", "Conflict: port \"http\" is TCP/80 in cluster c1 (oldest) but TCP/8080 in cluster c2", "x1"],
    ["default", "a-service-with-a-long-name", None, "x2"],
]


def test_plain_columns_two_spaces_apart_no_box() -> None:
    lines = render_table(COLUMNS, ROWS)
    assert lines[0] == "NAMESPACE  NAME                        MESSAGE"
    assert lines[1].startswith("shop       web                         Conflict: port")
    assert lines[2] == "default    a-service-with-a-long-name  -"  # None is `-`; no trailing blanks
    assert not any(ch in "".join(lines) for ch in "│─┃━╭╮")


def test_wide_adds_its_columns() -> None:
    narrow, wide = render_table(COLUMNS, ROWS), render_table(COLUMNS, ROWS, wide=True)
    assert "EXTRA" not in narrow[0] and wide[0].endswith("EXTRA")
    assert wide[2].split()[-2:] == ["-", "x2"] and narrow[2].split()[-1] == "-"


def test_without_a_width_nothing_is_cut() -> None:
    lines = render_table(COLUMNS, ROWS)
    assert ROWS[0][2] in lines[1] and "…" not in "".join(lines)


@pytest.mark.parametrize("width", [40, 60, 80, 200])
def test_rows_fit_the_terminal_cut_with_an_ellipsis(width: int) -> None:
    lines = render_table(COLUMNS, ROWS, width=width)
    assert all(cell_len(line) <= width for line in lines)
    natural = max(cell_len(line) for line in render_table(COLUMNS, ROWS))
    assert ("…" in lines[1]) == (natural > width)
    assert lines[0].split() == ["NAMESPACE", "NAME", "MESSAGE"]  # headers are never cut
    if width >= 80:  # the widest column gives first: the names stay whole while the message is cut
        assert lines[2].split()[:2] == ["default", "a-service-with-a-long-name"]


def test_cells_of_several_lines_continue_under_their_column() -> None:
    lines = render_table(["NAME", "CONFLICT", "AGE"], [["web", "True PortConflict\nLabelsConflict", "5m"]])
    assert lines[1] == "web   True PortConflict  5m"
    assert lines[2] == "      LabelsConflict"


def test_cut_counts_terminal_cells() -> None:
    assert cut("✔ ready", 10) == "✔ ready"
    assert cut("abcdef", 4) == "abc…"
    assert cut("日本語のテキスト", 7) == "日本語…"  # wide characters take two cells
    assert cell_len(cut("日本語のテキスト", 7)) <= 7


def test_a_row_of_the_wrong_length_is_a_bug() -> None:
    with pytest.raises(ValueError):
        render_table(["A", "B"], [["only one"]])


def test_a_pipe_is_not_a_terminal() -> None:
    out = io.StringIO()
    assert terminal_width(out) is None
    print_table(COLUMNS, ROWS, "wide", file=out)
    assert ROWS[0][2] in out.getvalue() and out.getvalue().endswith("x2\n")


def test_listings_are_kubectl_lists_in_json_and_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    items = [{"name": "web", "ports": [80]}, {"name": "db", "ports": []}]
    print_list(items, "json", ["NAME"], lambda i: [[i["name"]]])
    doc = json.loads(capsys.readouterr().out)
    assert doc == list_document(items) == {"kind": "List", "items": items}
    print_list(items, "yaml", ["NAME"], lambda i: [[i["name"]]])
    assert yaml.safe_load(capsys.readouterr().out) == doc
    print_list([], "json", ["NAME"], lambda i: [[i]])
    assert json.loads(capsys.readouterr().out) == {"kind": "List", "items": []}


def test_an_empty_table_says_so_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    print_list([], "table", ["NAME"], lambda i: [[i]], empty="no exports in namespace shop")
    got = capsys.readouterr()
    assert got.out == "" and got.err == "no exports in namespace shop\n"
    print_list([{"n": "a"}, {"n": "b"}], "table", ["NAME"], lambda i: [[i["n"]], [f"  sub of {i['n']}"]])
    assert capsys.readouterr().out.splitlines() == ["NAME", "a", "  sub of a", "b", "  sub of b"]
