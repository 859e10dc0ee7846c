"""The Python detector's hot value operations (`lift`, `combine`, `normalize`, `truth_lanes`,
`elements_of`, the reading of a name) and its class-member lookup give exactly what their plain forms give: each is held here to a copy of the
form it replaced, on generated values (markers, opaque objects, class references, operations that
raise, uniform and per-lane values)."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.detect import pyvalues
from liftgate.detect.py_binding import Module, walk
from liftgate.detect.py_domain import elements_of
from liftgate.detect.py_eval import _class_members
from liftgate.detect.pyvalues import (
    ANY_FALSE,
    ANY_TRUE,
    AV,
    MAX_PRODUCT,
    MAX_SET,
    TOP_SET,
    ClassRef,
    Instance,
    Opaque,
    Truth3,
    Unsupported,
    _merge_trail,
    bounded,
    combine,
    infer_from_name,
    lane_count,
    lift,
    normalize,
    truth_lanes,
    truthiness,
)
from liftgate.model import Evidence

# -- the plain forms, as they were ---------------------------------------------------------------


def plain_normalize(sets: list[frozenset[object]]) -> tuple[frozenset[object], ...]:
    if all(s == sets[0] for s in sets):
        return (sets[0],)
    return tuple(sets)


def plain_combine(parts: list[AV], sets: list[frozenset[object]]) -> AV:
    normalized = plain_normalize(sets)
    return AV(
        normalized,
        inferred=len(normalized) > 1 and any(p.inferred for p in parts),
        trail=_merge_trail(*(p.trail for p in parts)),
        deps=tuple(dict.fromkeys(d for p in parts for d in p.deps)),
    )


def plain_lift(fn: Callable[..., object], *args: AV, keep_classes: bool = False) -> AV:
    n = 1 if all(a.uniform for a in args) else lane_count()
    sets: list[frozenset[object]] = []
    for i in range(n):
        lanes = [a.lane(i) for a in args]
        size = 1
        for s in lanes:
            size *= len(s)
        if size > MAX_PRODUCT:
            sets.append(TOP_SET)
            continue
        out: set[object] = set()
        top = False
        for combo in itertools.product(*lanes):
            if any(
                isinstance(c, pyvalues._Marker)
                or (isinstance(c, Opaque) and not (keep_classes and isinstance(c, ClassRef)))
                for c in combo
            ):
                top = True
                break
            try:
                out.add(bounded(fn(*combo)))
            except Unsupported:
                top = True
                break
            except Exception:
                continue
        if top or len(out) > MAX_SET:
            sets.append(TOP_SET)
        else:
            try:
                sets.append(frozenset(out))
            except TypeError:
                sets.append(TOP_SET)
    return plain_combine(list(args), sets)


def plain_truth_lanes(value: AV) -> list[str]:
    out = []
    for i in range(lane_count()):
        seen: set[bool] = set()
        for v in value.lane(i):
            t = truthiness(v)
            seen.update((True, False) if t is None else (t,))
        if seen == {True}:
            out.append(Truth3.TRUE)
        elif seen == {False} or not seen:
            out.append(Truth3.FALSE)
        else:
            out.append(Truth3.MAYBE)
    return out


# -- generated values ----------------------------------------------------------------------------

_CLASS = ClassRef(1, "K")
_ELEMENTS = st.sampled_from(
    [0, 1, 2, 7, 9, 10, 12, -1, "", "sm", "a", (9, 0), (12, 0), None, True, False,
     ANY_TRUE, ANY_FALSE, _CLASS, Instance(_CLASS)]
)  # fmt: skip
# TOP_SET itself too: `lift` answers "anything" at once for an operand that is that very set
# (unless another operand is empty, a path that gives no value), and must agree with the loop.
_LANE = st.one_of(st.just(TOP_SET), st.frozensets(_ELEMENTS, max_size=4))
_STEPS = st.lists(st.sampled_from([Evidence("a"), Evidence("b"), Evidence("c")]), max_size=3).map(tuple)
_DEPS = st.lists(st.sampled_from(["x == 1", "y", "z"]), max_size=3).map(tuple)


@st.composite
def values(draw: st.DrawFn) -> AV:
    n = lane_count()
    if draw(st.booleans()):
        sets: tuple[frozenset[object], ...] = (draw(_LANE),)
    else:
        sets = tuple(draw(st.lists(_LANE, min_size=n, max_size=n)))
    return AV(sets, draw(st.booleans()), draw(_STEPS), draw(_DEPS))


def _add(a: object, b: object) -> object:
    return a + b  # type: ignore[operator]


def _strict(a: object, b: object) -> object:
    if isinstance(a, str) or isinstance(b, str):
        raise Unsupported("no strings")
    return (a, b)


def _classes(*xs: object) -> object:
    return tuple(xs)


@settings(max_examples=400, deadline=None)
@given(values(), values(), st.sampled_from([_add, _strict, _classes]), st.booleans())
def test_lift_equals_its_plain_form(a: AV, b: AV, fn: Callable[..., object], keep: bool) -> None:
    assert lift(fn, a, b, keep_classes=keep) == plain_lift(fn, a, b, keep_classes=keep)
    assert lift(bool, a, keep_classes=keep) == plain_lift(bool, a, keep_classes=keep)


@settings(max_examples=300, deadline=None)
@given(st.lists(values(), min_size=1, max_size=4), st.lists(_LANE, min_size=1, max_size=4))
def test_combine_and_normalize_equal_their_plain_forms(
    parts: list[AV], sets: list[frozenset[object]]
) -> None:
    assert normalize(sets) == plain_normalize(sets)
    assert combine(parts, sets) == plain_combine(parts, sets)


def test_combine_deduplicates_what_one_part_repeats() -> None:
    part = AV((frozenset({1}),), deps=("x", "x"), trail=(Evidence("a"), Evidence("a")))
    assert combine([part], [frozenset({1})]) == plain_combine([part], [frozenset({1})])


@settings(max_examples=300, deadline=None)
@given(values())
def test_truth_lanes_equal_their_plain_form(value: AV) -> None:
    assert truth_lanes(value) == plain_truth_lanes(value)


def test_values_hash_and_compare_by_their_fields() -> None:
    one = AV((frozenset({1}),), False, (Evidence("a"),), ("x",))
    two = AV((frozenset({1}),), False, (Evidence("a"),), ("x",))
    assert one == two and hash(one) == hash(two) and len({one, two}) == 1
    assert one != AV((frozenset({1}),), False, (Evidence("a"),), ("y",))


_CLASS_BODY = """
class K(Base):
    x: int
    y: int = 1
    a, b = 1, 2
    z = w = 3
    obj.attr = 4
    [c] = [5]
    def f(self): ...
    f = 6
    async def g(self): ...
    y = 7
    class Inner: ...
    if cond:
        h = 8
"""


def _plain_member(node: ast.ClassDef, name: str) -> ast.stmt | None:
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in stmt.targets
        ):
            return stmt
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id == name
            and stmt.value
        ):
            return stmt
    return None


def test_class_members_are_the_first_definition_the_plain_lookup_finds() -> None:
    node = ast.parse(_CLASS_BODY).body[0]
    assert isinstance(node, ast.ClassDef)
    members = _class_members(node)
    for name in ("x", "y", "a", "b", "z", "w", "obj", "attr", "c", "f", "g", "Inner", "h", "missing"):
        assert members.get(name) is _plain_member(node, name), name
    assert members["y"].lineno == 4 and members["f"].lineno == 9


def plain_elements_of(value: AV) -> list[object]:
    seen: dict[object, None] = {}
    for s in value.sets:
        for x in s:
            seen.setdefault(x, None)
    return list(seen)


@settings(max_examples=300, deadline=None)
@given(values())
def test_elements_of_equals_its_plain_form(value: AV) -> None:
    assert elements_of(value) == plain_elements_of(value)


def test_a_name_read_twice_reads_the_same_and_callers_cannot_change_it() -> None:
    for name in ("is_sm90", "is_sm100_or_later", "is_hopper", "supports_blackwell", "has_fp8", "sm_75"):
        first = pyvalues._infer_from_name(name)
        found = infer_from_name(name)
        assert found == first
        if found is not None:
            found[0].clear()  # a caller's own copy
        assert infer_from_name(name) == first


def _plain_segment(lines: list[str], node: ast.AST) -> str:
    start, end = node.lineno, node.end_lineno  # type: ignore[attr-defined]
    col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    if start == end:
        return lines[start - 1].encode()[col:end_col].decode(errors="replace")
    first = lines[start - 1].encode()[col:].decode(errors="replace")
    last = lines[end - 1].encode()[:end_col].decode(errors="replace")
    return "".join([first, *lines[start : end - 1], last])


_SOURCES = [
    "x = 1\nif is_sm90() and name == 'héllo':\n    y = f(x,\n          'ünïcode', z)\n",
    "def f(a):\n    s = '日本語'; t = a.b\n    return s\n\x0cclass K:\n    v = 'ß' if c else 'x'\n",
    "async def g():\n    await h('\u2028')\n    return [i for i in range(3) if i]\n",
]


def test_a_segment_is_the_text_the_columns_name() -> None:
    fixtures = sorted((Path(__file__).parent / "fixtures").rglob("*.py"))
    texts = _SOURCES + [p.read_text(encoding="utf-8") for p in fixtures[:40]]
    checked = 0
    for text in texts:
        tree = ast.parse(text)
        module = Module("m", "p", None, "m.py", text, tree, False)
        lines = text.splitlines(keepends=True)
        for node in walk(tree):
            if getattr(node, "end_lineno", None) is None or node.end_lineno > len(lines):  # type: ignore[attr-defined]
                continue
            assert module.segment(node) == _plain_segment(lines, node)
            checked += 1
    assert checked > 1000
