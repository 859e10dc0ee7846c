"""The judge's per-file text passes, made faster, give exactly what the patterns they replace gave:
the C++ tokenizer's findall, the call index and its declaration test, the literal blanking, and
the walk of a Python file's syntax tree. Each is held to the plain form on generated text and on
the fixtures' sources."""

from __future__ import annotations

import ast
import gc
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.detect import cpp_tokens
from liftgate.detect.cpp_lex import LITERALS
from liftgate.detect.py_binding import walk
from liftgate.judge import verdict
from liftgate.judge.pyregion import PyFunctions
from liftgate.judge.region import _CALL, FileStore, _declaration

FIXTURES = Path(__file__).parent / "fixtures"

# The patterns as they were: what the faster forms must equal.
PLAIN_TOKEN = re.compile(r"\n|\\\r?\n" + cpp_tokens._TOKEN_BODY, re.X | re.S)
PLAIN_CALL = re.compile(
    r"(?<![\w.>])((?:[A-Za-z_]\w*::)*[A-Za-z_]\w*)\s*(?:<[^<>();{}]*(?:<[^<>();{}]*>[^<>();{}]*)*>)?\s*\("
)
PLAIN_WORD_BEFORE = re.compile(r"([A-Za-z_]\w*)[ \t]*$")

# Pieces that make the patterns match, nearly match and overlap: names glued to digits and to
# non-ASCII letters, scopes, template brackets, blanks of every kind, literals, comments.
_PIECES = [
    "f", "ns", "_x", "9", "é", "Ω", "::", ":", "<", ">", "(", ")", "{", "}", ";", ",", ".", "->",
    " ", "\t", "\n", "\r\n", "\x0c", "\x0b", "\u00a0", "\\\n", '"', "'", "//", "/*", "*/", "#",
    "return", "new", "template", "dim3", "R\"(", ")\"", "=", "*", "&",
]  # fmt: skip
texts = st.lists(st.sampled_from(_PIECES), max_size=50).map("".join)


def _real_sources() -> list[str]:
    out = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.suffix in {".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc"} and path.is_file():
            out.append(path.read_text(errors="replace"))
    assert len(out) >= 10  # the fixtures hold real-shaped CUDA and C++ host code
    return out


def _plain_declaration(code: str, start: int) -> bool:
    m = PLAIN_WORD_BEFORE.search(code, max(0, start - 64), start)
    return m is not None and m.group(1) not in {
        "return", "else", "case", "throw", "new", "do", "co_return", "co_await", "typename", "template",
    }  # fmt: skip


def _check_text(text: str) -> None:
    assert cpp_tokens._TOKEN.findall(text) == PLAIN_TOKEN.findall(text)
    calls = [(m.start(), m.group(1)) for m in _CALL.finditer(text)]
    assert calls == [(m.start(), m.group(1)) for m in PLAIN_CALL.finditer(text)]
    for start in range(len(text) + 1):
        assert _declaration(text, start) == _plain_declaration(text, start), (text, start)


@settings(max_examples=800, deadline=None)
@given(texts)
def test_text_passes_equal_the_plain_patterns(text: str) -> None:
    _check_text(text)


def test_text_passes_on_real_sources() -> None:
    for text in _real_sources():
        assert cpp_tokens._TOKEN.findall(text) == PLAIN_TOKEN.findall(text)
        calls = [(m.start(), m.group(1)) for m in _CALL.finditer(text)]
        assert calls == [(m.start(), m.group(1)) for m in PLAIN_CALL.finditer(text)]
        for start, _ in calls:
            assert _declaration(text, start) == _plain_declaration(text, start)


def test_call_index_on_shapes() -> None:
    text = "dim3 grid(n);\n  cute::gemm<T, Shape<_1>>(a);\nx.f(1); p->g(2); 9h(3);\nreturn k(4);"
    found = [(m.group(1), _declaration(text, m.start())) for m in _CALL.finditer(text)]
    # `9h(` is not a call: a digit before the name, as in the plain pattern's look-behind.
    assert found == [("grid", True), ("cute::gemm", False), ("k", False)]
    # A word before a line break declares (the search's `$` matches before a final newline).
    assert _declaration("Type\nname(", 5) and not _declaration("Type\n\nname(", 6)


@pytest.mark.parametrize(
    "text", ['a "x\\"y(" b(1);', "c 'q' f(\"\") d(2);\ng('(');", 'unclosed "abc;\nh(3);', "'\\'' k();"]
)
def test_literal_blanking_equals_the_substitution(text: str) -> None:
    """The index blanks literals in one pass with collecting the string literals; the calls it
    finds are those of the code blanked by the plain substitution."""
    blanked = LITERALS.sub(
        lambda m: '"' + " " * (len(m.group(0)) - 2) + '"' if len(m.group(0)) >= 2 else " ", text
    )
    expected: dict[int, list[str]] = {}
    for m in PLAIN_CALL.finditer(blanked):
        if not _plain_declaration(blanked, m.start()):
            expected.setdefault(blanked.count("\n", 0, m.start()) + 1, []).append(m.group(1))
    info = FileStore(["a.cu"], lambda path: text).file("a.cu")
    assert info is not None
    assert info.calls == expected
    assert expected  # each text has a call outside its literals


_LEAVES = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
_MATCH = """
match command.split():
    case [action, *rest] if action in ("go", "run"):
        f(rest, key=lambda x: x.y[1:2])
    case {"k": Point(x=0, y=yy) as p, **more}:
        g(p, yy, more)
    case str() | bytes():
        pass
async def h():
    async with a as b, c:
        async for i in b:
            await i
    return [j async for j in b if not -j or j @ k is not None]
"""


def test_walk_is_ast_walk_in_its_order_without_the_context_and_operator_nodes() -> None:
    """`walk` yields what ``ast.walk`` yields, in its order, but the ``Load``/``Store``/``Add``/``Eq``
    leaves: over every module of liftgate and a text with match statements and async code."""
    sources = [p.read_text() for p in sorted((Path(__file__).parents[1] / "src" / "liftgate").rglob("*.py"))]
    walked = every = 0
    alias = ["type Pair[T] = tuple[T, T]\n"] if sys.version_info >= (3, 12) else []
    for text in [*sources, _MATCH, *alias]:
        tree = ast.parse(text)
        expected = [id(n) for n in ast.walk(tree) if not isinstance(n, _LEAVES)]
        assert [id(n) for n in walk(tree)] == expected
        walked += len(expected)
        every += sum(1 for _ in ast.walk(tree))
    assert walked < every * 0.8  # the leaves it leaves out are many
    funcs = PyFunctions.parse(
        "def f():\n    g()\n    def f(): h.i()\nclass C:\n    async def f(self): pass\n"
    )
    assert funcs.spans == {"f": [(1, 3), (3, 3), (5, 5)]}  # breadth first, as ast.walk
    assert funcs.calls == [(2, "g"), (3, "i")]


def test_collector_is_off_while_judging_and_collects_every_few_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    collected: list[int] = []
    monkeypatch.setattr(verdict.gc, "collect", lambda *a: collected.append(1) or 0)
    was = gc.isenabled()
    gc.enable()
    try:
        with verdict._collected_every_few_runs() as run_done:
            assert not gc.isenabled()
            for _ in range(verdict.GC_RUNS * 2 + 1):
                run_done()
        assert gc.isenabled()
        assert len(collected) == 2
        gc.disable()
        with verdict._collected_every_few_runs():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()
