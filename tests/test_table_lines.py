"""`liftgate.report.table.print_lines` writes the default view's lines as ``console.print(Group(*lines),
overflow="fold")`` does, byte for byte, in colour or not, whatever the width: the lines that fit
are written without rich's layout, the others through it."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from liftgate.report.table import _table_rows, print_lines, print_table, table_console

STYLES = [None, "bold", "dim", "red", "bold red", "cyan", "magenta", "green", "yellow", "bold yellow"]
# ASCII words and spaces, paths, a dash, an ellipsis, wide (CJK) and combining characters, a tab,
# and what rich or str.splitlines treats apart: a no-break space, a line separator, a zero-width space
ODD = ["—", "…", "漢", "字", "é", "\u0301", "\t", "⚠", "\u00a0", "\u2028", "\x1c", "\u200b"]
PIECES = st.text(alphabet=st.sampled_from(list("abc xyz_/.:,()-0123456789") + ODD), max_size=70)


@st.composite
def texts(draw: st.DrawFn) -> Text:
    text = Text(draw(PIECES), style=draw(st.sampled_from(STYLES)) or "")
    for _ in range(draw(st.integers(0, 3))):
        text.append(draw(PIECES), style=draw(st.sampled_from(STYLES)))
    if draw(st.booleans()):
        text.overflow = "fold"
    return text


@st.composite
def lines(draw: st.DrawFn) -> RenderableType:
    text = draw(texts())
    kind = draw(st.sampled_from(["text", "indent", "empty"]))
    if kind == "empty":
        return Text()
    return Padding.indent(text, draw(st.integers(1, 12))) if kind == "indent" else text


def _printed(items: list[RenderableType], color: bool, width: int, fast: bool) -> str:
    out = io.StringIO()
    console = table_console(out, color, width)
    if fast:
        print_lines(console, items)
    else:
        console.print(Group(*items), overflow="fold")
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(st.lists(lines(), max_size=12), st.booleans(), st.integers(20, 140))
def test_print_lines_writes_what_rich_writes(items: list[RenderableType], color: bool, width: int) -> None:
    assert _printed(items, color, width, fast=True) == _printed(items, color, width, fast=False)


def test_long_and_short_lines_keep_their_order() -> None:
    """A line rich must fold sits between short ones written directly, in its place."""
    items: list[RenderableType] = [
        Text("first", style="bold"),
        Padding.indent(Text("x" * 150, style="red"), 4),
        Padding.indent(Text("third"), 2),
    ]
    for color in (False, True):
        got = _printed(items, color, 80, fast=True)
        assert got == _printed(items, color, 80, fast=False)
        plain = _printed(items, False, 80, fast=True).splitlines()
        assert plain[0] == "first" and plain[1].strip() == "x" * 76 and plain[-1] == "  third"


# --- print_table: the rows of a gate table, as rich's table would print them ---------------------

CELL_PIECES = st.text(
    alphabet=st.sampled_from(list("abc xyz_/.:,()-0123456789     ") + ODD + ["\n"]), max_size=40
)


@st.composite
def cells(draw: st.DrawFn) -> Text:
    text = Text(draw(CELL_PIECES), style=draw(st.sampled_from(STYLES)) or "")
    for _ in range(draw(st.integers(0, 2))):
        text.append(draw(CELL_PIECES), style=draw(st.sampled_from(STYLES)))
    return text


@st.composite
def tables(draw: st.DrawFn) -> Table:
    """Tables shaped like `liftgate.report.table._new_table`'s: no box, collapsed padding, fixed
    column widths, each column wrapping (fold) or cut (ellipsis), left or right justified."""
    table = Table(
        box=None,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        show_header=draw(st.booleans()) and draw(st.booleans()),  # mostly not: rows, as printed
        header_style="bold",
        leading=draw(st.sampled_from([0, 0, 1])),
    )
    for _ in range(draw(st.integers(1, 7))):
        width = draw(st.integers(1, 30))
        wraps = draw(st.booleans())
        table.add_column(
            Text("h"),
            width=width,
            min_width=width,
            justify=draw(st.sampled_from(["left", "right"])),
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
        )
    for _ in range(draw(st.integers(0, 5))):
        table.add_row(*[draw(cells()) for _ in table.columns])
    return table


def _table_printed(table: Table, color: bool, width: int, indent: int, fast: bool) -> str:
    out = io.StringIO()
    console = table_console(out, color, width)
    if fast:
        print_table(console, table, indent)
    else:
        console.print(Padding.indent(table, indent))
    return out.getvalue()


@settings(max_examples=400, deadline=None)
@given(tables(), st.booleans(), st.integers(10, 200), st.integers(0, 8))
def test_print_table_writes_what_rich_writes(table: Table, color: bool, width: int, indent: int) -> None:
    assert _table_printed(table, color, width, indent, fast=True) == _table_printed(
        table, color, width, indent, fast=False
    )


def test_print_table_lays_out_rows_itself_only_where_rich_would_not_narrow_them() -> None:
    """The branches one by one: a short cell, a right-justified one with trailing blanks, one cut
    with an ellipsis, one folded over three lines beside a one-line cell, an empty cell, a cell with
    a line break; then the same table in a console too narrow for it, which rich lays out."""
    table = Table(box=None, show_edge=False, pad_edge=False, collapse_padding=True, show_header=False)
    for width, justify, wraps in [
        (5, "right", False),
        (8, "left", True),
        (6, "left", False),
        (4, "left", True),
    ]:
        table.add_column("h", width=width, min_width=width, justify=justify, no_wrap=not wraps,
                         overflow="fold" if wraps else "ellipsis")  # fmt: skip
    table.add_row(Text("12  "), Text("one two three four"), Text("cut me please", style="dim"), Text(""))
    table.add_row(Text("7"), Text("a\nb", style="bold"), Text("ok"), Text("xy", style="red"))
    assert _table_rows(table_console(io.StringIO(), False, 80), table, 4) is not None
    assert _table_rows(table_console(io.StringIO(), False, 28), table, 4) is None  # 26 + 4 > 28
    for color in (False, True):
        for width in (80, 28, 20):
            assert _table_printed(table, color, width, 4, fast=True) == _table_printed(
                table, color, width, 4, fast=False
            )
    plain = _table_printed(table, False, 80, 4, fast=True).splitlines()
    assert plain[0].startswith("       12 one two  cut m… ")
    assert len(plain) == 5  # the folded cell's three lines, then the line break's two


def test_a_scans_gate_tables_are_laid_out_here_and_print_as_rich_prints_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tables `_new_table` makes for a real report (the fixture trees, two targets, judged) are
    ones `print_table` lays out itself, at the widths a terminal has, and the report prints the
    same as with rich's table."""
    from pathlib import Path

    import liftgate
    import liftgate.report.table as table_module
    from liftgate.judge.verdict import judge_scan
    from liftgate.report import RenderOptions, render
    from liftgate.report.interface import Show

    fixtures = Path(__file__).parent / "fixtures"
    report = judge_scan(
        liftgate.scan(
            [str(fixtures / "cuda"), str(fixtures / "python")], ["sm_120", "sm_90"], use_cache=False, jobs=1
        )
    )
    laid_out: list[bool] = []
    own = table_module._table_rows

    def recording(console: object, table: object, indent: int) -> object:
        rows = own(console, table, indent)  # type: ignore[arg-type]
        laid_out.append(rows is not None)
        return rows

    for width, verbose in ((100, False), (160, False), (120, True)):
        options = RenderOptions(show=Show.ALL, width=width, verbose=verbose, color=True)
        monkeypatch.setattr(table_module, "_table_rows", recording)
        fast = render(report, "table", options)
        monkeypatch.setattr(table_module, "_table_rows", lambda console, table, indent: None)
        assert fast == render(report, "table", options)
    assert laid_out and all(laid_out)
