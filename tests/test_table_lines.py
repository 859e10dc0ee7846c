"""`liftgate.report.table.print_lines` writes the default view's lines as ``console.print(Group(*lines),
overflow="fold")`` does, byte for byte, in colour or not, whatever the width: the lines that fit
are written without rich's layout, the others through it."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from liftgate.report.table import print_lines, table_console

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
