"""The Python detector's text indexes (classes and their bases, indented defs, ``X as Y``), its test
for a ``global`` statement and the judge's index of definitions give exactly what ``findall`` (or
``search``) of their patterns gives over the whole text, on any text: they only skip the positions
where the pattern cannot match (`liftgate.detect.py_binding.line_matches`)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.detect import py_binding
from liftgate.detect.python import (
    _ALIAS,
    _CLASS_DEF,
    _METHOD_DEF,
    aliases,
    class_defs,
    method_defs,
)

# Pieces that make the patterns match, nearly match and overlap: keywords glued to names,
# indentation, brackets of bases, line breaks of every kind.
_PIECES = [
    "class", "def", "async", "as", "if", "for", "elif", "while", "x", "Base", "_a1", "3",
    " ", "\t", "\n", "\r\n", "\r", "\x0c", "(", ")", "[", "]", ":", ",", "=", "#", "'",
]  # fmt: skip
texts = st.lists(st.sampled_from(_PIECES), max_size=60).map("".join)


@settings(max_examples=600, deadline=None)
@given(texts)
def test_text_indexes_equal_findall(text: str) -> None:
    data = text.encode()
    assert class_defs(data) == _CLASS_DEF.findall(data)
    assert method_defs(data) == _METHOD_DEF.findall(data)
    assert aliases(data) == _ALIAS.findall(data)


def test_text_indexes_on_real_shapes() -> None:
    data = (
        b"import torch as th, numpy as np\nfrom a import (b as c,\n    d as e)\n"
        b"class A(Base[Config], ABC):\n    def f(self):\n        pass\n    async def g(self): ...\n"
        b"  class B(\n    A,\n):\n\tdef h(): pass\nx = undef(1)\nclass_ = 1\n"
    )
    assert class_defs(data) == [(b"A", b"Base[Config], ABC"), (b"B", b"\n    A,\n")]
    assert method_defs(data) == [b"f", b"g", b"h"]
    assert aliases(data) == [(b"torch", b"th"), (b"numpy", b"np"), (b"b", b"c"), (b"d", b"e")]
    # At the very start of the text: the first line, and the line break at offset 0.
    assert class_defs(b"class A(B):\n    pass\n") == [(b"A", b"B")]
    assert method_defs(b"\n\tdef f(self): pass\n") == [b"f"]
    assert aliases(b"x as y") == [(b"x", b"y")]


_LINE_PIECES = [" if ", "if", "for", "x", " ", "elif", "while", "async", "[", "]", "\n", "\x0c", "\r", "iff", "#"]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_LINE_PIECES), max_size=40).map("".join))
def test_branch_lines_equal_the_regex_on_every_line(text: str) -> None:
    """`Module.may_hold_branches` skips the regexes on lines without ``if`` or ``for``: the same lines."""
    expected = [
        number
        for number, line in enumerate(text.splitlines(), 1)
        if py_binding._INNER_BRANCH.search(py_binding._STATEMENT_KEYWORD.sub("", line, count=1))
    ]
    assert py_binding.branch_lines(text) == expected
    assert all(re.search(r"if|for", text.splitlines()[n - 1]) for n in expected)


_DEF_PIECES = ["def", "async", "global", "x", "_a1", "(", " ", "\t", "\n", "\r\n", "\r", "\x0c", "#", "é"]  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_DEF_PIECES), max_size=50).map("".join))
def test_line_matches_on_text_equal_the_regex(text: str) -> None:
    """On text (``str``) too: the judge's index of definitions is ``findall`` of its pattern, and the
    interpreter's test for a ``global`` statement is the pattern's ``search``."""
    from liftgate.judge.verdict import _PY_DEF

    found = [m.group(1) for m in py_binding.line_matches(_PY_DEF, text, "def", at_break=False)]
    assert found == _PY_DEF.findall(text)
    first = py_binding.line_matches(py_binding._GLOBAL_STATEMENT, text, "global", at_break=False, first=True)
    expected = py_binding._GLOBAL_STATEMENT.search(text)
    assert [m.span() for m in first] == ([expected.span()] if expected else [])


def test_line_matches_on_real_text() -> None:
    from liftgate.judge.verdict import _PY_DEF

    text = "def f(x):\n    global _cfg\n    async def g ( y ):\n        global _n\nundef(1)\n  def h(): ...\n"
    assert [m.group(1) for m in py_binding.line_matches(_PY_DEF, text, "def", at_break=False)] == [
        "f",
        "g",
        "h",
    ]
    (first,) = py_binding.line_matches(
        py_binding._GLOBAL_STATEMENT, text, "global", at_break=False, first=True
    )
    assert first.start() == text.index("    global")
    assert (
        py_binding.line_matches(py_binding._GLOBAL_STATEMENT, "x = 'global y'\n", "global", False, True) == []
    )
