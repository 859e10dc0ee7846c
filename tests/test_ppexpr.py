"""``#if`` expressions on their own: tokens, macro expansion and three-valued evaluation.

The expected values of the macro-expansion corner cases were taken from ``gcc -E -x c++``
(nvcc's preprocessor); tests/test_ppexpr_nvcc.py compares the evaluator with nvcc itself.
The property tests here need no toolkit: one checks `evaluate` against a small reference
interpreter of C's ``intmax_t``/``uintmax_t`` rules over random expression trees, printed both
fully parenthesised and with the fewest parentheses the precedence rules allow; another checks
that an *unknown* operand never produces a known result that some value of it would contradict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.detect.ppexpr import (
    UNKNOWN_MACRO,
    UNKNOWN_TOKEN,
    ExprError,
    Lookup,
    MacroEntry,
    MacroExpander,
    evaluate,
    parse_define,
    tokenize,
)

# ---------------------------------------------------------------------------
# Tokens and definitions.


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("__CUDA_ARCH__>=900&&x", ["__CUDA_ARCH__", ">=", "900", "&&", "x"]),
        ("0x1fULL|0b101u", ["0x1fULL", "|", "0b101u"]),  # a suffix belongs to its number
        ("1'000'000+0X384LL", ["1'000'000", "+", "0X384LL"]),
        ("0x1e+1", ["0x1e+1"]),  # one pp-number, as in C: an invalid constant, not 0x1e + 1
        ("a##b #c %:%: d", ["a", "##", "b", "#", "c", "%:%:", "d"]),
        ("'a'+'\\n'+L'x'", ["'a'", "+", "'\\n'", "+", "L'x'"]),
        ("x<<=y>>z", ["x", "<<=", "y", ">>", "z"]),
        ("  \t", []),
    ],
)
def test_tokenize(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


def test_parse_define_forms() -> None:
    obj = parse_define("MINIKERN_ARCH 900")
    assert (obj.name, obj.params, obj.variadic, obj.body) == ("MINIKERN_ARCH", None, False, ("900",))
    empty = parse_define("EMPTY()")
    assert (empty.params, empty.body) == ((), ())
    func = parse_define("CAT(a, b) a ## b", "include/x.h", 12, "under (X)")
    assert (func.params, func.body, func.path, func.line, func.context) == (
        ("a", "b"),
        ("a", "##", "b"),
        "include/x.h",
        12,
        "under (X)",
    )
    variadic = parse_define("LOG(fmt, ...) printf(fmt, __VA_ARGS__)")
    assert (variadic.params, variadic.variadic) == (("fmt", "__VA_ARGS__"), True)
    gnu = parse_define("GNU(args...) args")
    assert (gnu.params, gnu.variadic) == (("args",), True)
    # A space before the parenthesis makes an object-like macro whose body starts with "(".
    spaced = parse_define("NOT_FUNC (x) x")
    assert (spaced.params, spaced.body) == (None, ("(", "x", ")", "x"))
    assert parse_define("A 1").same_as(parse_define("A  1"))
    assert not parse_define("A 1").same_as(parse_define("A 2"))


def test_parse_define_errors() -> None:
    with pytest.raises(ExprError):
        parse_define("123 oops")
    with pytest.raises(ExprError):
        parse_define("F(a, b")


# ---------------------------------------------------------------------------
# Macro expansion, checked against gcc -E.


def expand(defines: list[str], text: str, unknown: frozenset[str] = frozenset()) -> list[str]:
    table: dict[str, MacroEntry] = {}
    for d in defines:
        macro = parse_define(d)
        table[macro.name] = macro
    for name in unknown:
        table[name] = UNKNOWN_MACRO
    return MacroExpander(lambda name: table.get(name)).expand(tokenize(text))


def value(defines: list[str], text: str, unknown: frozenset[str] = frozenset()) -> bool | None:
    return evaluate(expand(defines, text, unknown))


@pytest.mark.parametrize(
    ("defines", "condition", "expected"),
    [
        # ## builds a name, and the result is rescanned.
        (["CAT(a, b) a##b", "__CUDA_ARCH__ 900"], "CAT(__CUDA_, ARCH__) == 900", True),
        (["FEAT(x) __CUDA_ARCH_FEAT_##x", "__CUDA_ARCH_FEAT_SM90_ALL 1"], "FEAT(SM90_ALL)", True),
        (["CAT(a, b) a##b"], "CAT(12, 34) == 1234", True),
        (["CAT3(a, b, c) a##b##c"], "CAT3(1, 2, 3) == 123", True),
        (["CAT(a, b) a##b", "ARCH 900"], "CAT(, ARCH) == 900", True),  # an empty argument
        # Arguments next to ## are not expanded first; through one more level they are.
        (["CAT(a, b) a##b", "N 9"], "CAT(N, 0) == 0", True),  # N0 is undefined: 0
        (["CAT(a, b) a##b", "XCAT(a, b) CAT(a, b)", "N 9"], "XCAT(N, 0) == 90", True),
        (["ZERO 0", "ONE(x) x##1"], "ONE(ZERO) == 1", False),  # ZERO1, undefined: 0
        # A macro never expands inside its own expansion.
        (["A A + 1"], "A == 1", True),
        (["X Y", "Y X"], "X == 0", True),
        # defined, written directly or produced by a macro (gcc allows the latter).
        (["HAS_FOO defined(FOO)", "FOO"], "HAS_FOO", True),
        (["HAS_FOO defined FOO"], "!HAS_FOO", True),
        (["IS_DEF(x) defined(x)"], "IS_DEF(BAR)", False),
        (["FOO 1"], "defined FOO && defined(FOO) && !defined BAR", True),
        # Function-like macros: names passed around, and names that take their arguments later.
        (["TWICE(x) (2 * (x))", "APPLY(f, x) f(x)"], "APPLY(TWICE, 3) == 6", True),
        (["TWICE(x) (2 * (x))", "ID(x) x"], "ID(TWICE)(5) == 10", True),
        (["TWICE(x) (2 * (x))", "G TWICE"], "G(4) == 8", True),
        (["F(x) x", "F2 F"], "F2(3) == 3", True),
        (["F(x) x"], "F + 1 == 1", True),  # a function-like name without ( is not expanded
        (["F(x) (x + 1)"], "F((1, 2)) == 3", True),  # parentheses protect the comma
        (["F(x, y) x y"], "F(, 3) == 3", True),
        (["EMPTY()"], "EMPTY() 1", True),
        (["F(x) x"], "F() 1 == 1", True),
        # Variadic macros.
        (["SECOND(a, ...) __VA_ARGS__"], "SECOND(0, 900) == 900", True),
        (["FIRST(a, ...) a"], "FIRST(7, 8, 9) == 7", True),
        (["ONLY(a, ...) a __VA_ARGS__"], "ONLY(5) == 5", True),
        (["GNU(args...) args"], "GNU(12) == 12", True),
        (["LAST(...) __VA_ARGS__"], "LAST(1, 0)", False),  # the comma operator: the last value
        # Macros that are operators or half of a parenthesis.
        (["NOT !"], "NOT 0", True),
        (["OPEN ("], "OPEN 1)", True),
    ],
)
def test_expansion_matches_gcc(defines: list[str], condition: str, expected: bool) -> None:
    assert value(defines, condition) is expected


@pytest.mark.parametrize(
    ("defines", "condition"),
    [
        (["F(x) F(x) + x"], "F(2) == 2"),  # F stays, then "F (" is not a valid expression
        (["FOO 1", "IS_DEF(x) defined(x)"], "IS_DEF(FOO)"),  # the argument expands to 1 first
        (["F(a, b) a"], "F(1, 2, 3)"),  # too many arguments
        (["F(a) a"], "F(1"),  # unterminated
        ([], "UNDEFINED_FUNC(1)"),
    ],
)
def test_expansion_errors_match_gcc(defines: list[str], condition: str) -> None:
    with pytest.raises(ExprError):
        value(defines, condition)


def test_stringizing() -> None:
    assert expand(["STR(x) #x"], 'STR(a "b")') == ['"a \\"b\\""']


def test_expansion_records_the_names_it_looked_up() -> None:
    table: dict[str, MacroEntry] = {"ARCH": parse_define("ARCH __CUDA_ARCH__")}
    seen = Lookup()
    MacroExpander(lambda name: table.get(name), seen).expand(tokenize("ARCH >= 900 && defined(FLAG)"))
    assert seen.names == {"ARCH", "__CUDA_ARCH__", "FLAG"}


def test_unknown_macros() -> None:
    unknown = frozenset({"FLAG", "FUNC"})
    assert expand([], "FLAG", unknown) == [UNKNOWN_TOKEN]
    assert expand([], "FUNC(1, (2, 3)) + 1", unknown) == [UNKNOWN_TOKEN, "+", "1"]  # arguments swallowed
    assert value([], "defined(FLAG)", unknown) is None
    assert value([], "defined(FLAG) || 1", unknown) is True
    assert value([], "FLAG && 0", unknown) is False
    assert value([], "FLAG >= 900", unknown) is None


def test_expansion_depth_is_bounded() -> None:
    defines = [f"M{k} M{k + 1}" for k in range(300)]
    with pytest.raises(ExprError, match="too deep"):
        expand(defines, "M0")


def test_a_long_condition_of_object_like_macros_is_not_too_deep() -> None:
    defines = [f"A{k} {k}" for k in range(400)]
    condition = " + ".join(f"A{k}" for k in range(400))
    assert evaluate(expand(defines, f"{condition} == {sum(range(400))}")) is True


# ---------------------------------------------------------------------------
# Evaluation: the arithmetic of gcc's preprocessor.


@pytest.mark.parametrize(
    "condition",
    [
        "-1 < 0",
        "!(-1 < 0u)",  # -1 converts to the largest unsigned value
        "0u - 1 == 18446744073709551615u",
        "18446744073709551615 == -1",  # too large for intmax_t: unsigned
        "0xFFFFFFFFFFFFFFFF > 0",
        "9223372036854775807 + 1 < 0",  # signed wrap, as gcc computes it
        "~0 == -1 && ~0u > 0",
        "-7 / 2 == -3 && -7 % 2 == -1",  # truncation toward zero
        "-7 / 2u == 9223372036854775804",
        "01604 == 900 && 0x384 == 900 && 0b1110000100 == 900 && 900ull == 900",
        "1'000 == 1000",
        "'A' == 65 && '\\0' == 0 && '\\x41' == 65 && '\\101' == 65",
        "(1 ? -1 : 0u) > 0",  # the result of ?: has the common type of both branches
        "(0 ? 1u : -1) > 0",
        "(1u, -1) < 0",  # the comma operator: the right operand's value and type
        "(-1, 1u) > 0",
        "1 + 2 * 3 == 7 && (1 << 2 + 1) == 8 && (1 | 2 ^ 3 & 4) == 3",
        "2 > 1 == 1",
        "(0 ? 1 : 0 ? 2 : 3) == 3",  # right associative
        "true && !false",
        "defined_later_means_nothing == 0",
        "(2 and 3) and not (0 or 0) and (6 bitand 3) == 2 and (compl 0) == -1 and 1 not_eq 2",
    ],
)
def test_evaluates_true(condition: str) -> None:
    assert evaluate(tokenize(condition)) is True


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        # A shift keeps its left operand's type: the count's type does not matter.
        ("(-16 >> 2u) == -4", True),
        ("(-16 >> 2u) < 0", True),
        ("(1 << 63u) < 0", True),
        ("(1u << 63) > 0", True),
        ("(-1 >> 63) == -1", True),
        # Counts gcc defines although C does not: negative shifts the other way, 64+ empties.
        ("(1 << -1) == 0 && (4 >> -1) == 8", True),
        ("(1 << 64) == 0 && (-1 >> 64) == -1 && (1 >> 99) == 0", True),
    ],
)
def test_shifts_follow_gcc(condition: str, expected: bool) -> None:
    assert evaluate(tokenize(condition)) is expected


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("0 && 1 / 0", False),
        ("1 || 1 % 0", True),
        ("0 ? 1 / 0 : 7", True),
        ("1 ? 7 : 1 / 0", True),
        ("(0 && (1 / 0)) + 1 == 1", True),
        ("1 || (0 && 1 / 0) || 1 / 0", True),
        ("0 && (1 || 1 / 0)", False),
    ],
)
def test_division_by_zero_where_it_is_not_evaluated(condition: str, expected: bool) -> None:
    assert evaluate(tokenize(condition)) is expected


@pytest.mark.parametrize("condition", ["1 / 0", "1 % 0", "1 && 1 / 0", "0 || 2 % 0", "1 ? 1 / 0 : 0"])
def test_division_by_zero_where_it_is_evaluated_is_an_error(condition: str) -> None:
    with pytest.raises(ExprError, match="division by zero"):
        evaluate(tokenize(condition))


def test_division_by_zero_behind_an_unknown_guard_is_unknown() -> None:
    """``FLAG && 1 / 0`` is an error when FLAG is set and 0 when it is not: unknown."""
    assert evaluate([UNKNOWN_TOKEN, "&&", "1", "/", "0"]) is None
    assert evaluate([UNKNOWN_TOKEN, "?", "1", "/", "0", ":", "1"]) is None
    assert evaluate(["0", "&&", UNKNOWN_TOKEN, "&&", "1", "/", "0"]) is False


@pytest.mark.parametrize(
    "condition",
    ["", "(1", "1)", "1 +", "1 2", "? 1 : 2", "1 ? 2", "08", "1e3", "1.5", "0x", "12abc", '"s"'],
)
def test_malformed_expressions_are_errors(condition: str) -> None:
    with pytest.raises(ExprError):
        evaluate(tokenize(condition))


def test_three_valued_operators() -> None:
    u = UNKNOWN_TOKEN
    cases: list[tuple[list[str], bool | None]] = [
        ([u], None),
        (["!", u], None),
        (["0", "&&", u], False),
        ([u, "&&", "0"], False),
        (["1", "&&", u], None),
        (["1", "||", u], True),
        ([u, "||", "1"], True),
        (["0", "||", u], None),
        ([u, "?", "1", ":", "1"], True),  # either way the same
        ([u, "?", "1", ":", "0"], None),
        (["1", "?", u, ":", "0"], None),
        (["0", "?", u, ":", "0"], False),
        ([u, "*", "0"], None),  # arithmetic does not look inside: unknown stays unknown
        (["(", u, ",", "1", ")"], True),  # the comma operator drops its left operand
    ]
    for tokens, expected in cases:
        assert evaluate(tokens) is expected, tokens


def test_unknown_identifiers_left_after_expansion() -> None:
    assert evaluate(tokenize("SOME_FLAG")) is False  # the C rule: an identifier is 0
    assert evaluate(tokenize("SOME_FLAG"), unknown_ident=lambda name: name == "SOME_FLAG") is None
    assert evaluate(tokenize("SOME_FLAG || 1"), unknown_ident=lambda _: True) is True


# ---------------------------------------------------------------------------
# Property tests against a reference interpreter.

MASK = (1 << 64) - 1


def wrap(v: int, unsigned: bool) -> int:
    v &= MASK
    return v if unsigned or v < 1 << 63 else v - (1 << 64)


class DivideByZero(Exception):
    pass


@dataclass(frozen=True)
class Node:
    """An expression tree; ``op`` is a literal's text for leaves."""

    op: str
    kids: tuple[Node, ...] = ()
    value: int = 0
    unsigned: bool = False


UNARY = ("-", "~", "!", "+")
BINARY_PREC = {
    ",": 0,
    "||": 2,
    "&&": 3,
    "|": 4,
    "^": 5,
    "&": 6,
    "==": 7,
    "!=": 7,
    "<": 8,
    ">": 8,
    "<=": 8,
    ">=": 8,
    "<<": 9,
    ">>": 9,
    "+": 10,
    "-": 10,
    "*": 11,
    "/": 11,
    "%": 11,
}
TERNARY_PREC = 1
UNARY_PREC = 12
ATOM_PREC = 13


def static_unsigned(node: Node) -> bool:
    """The type of an expression, whether or not it is evaluated."""
    if not node.kids:
        return node.unsigned
    if node.op in UNARY:
        return node.op != "!" and static_unsigned(node.kids[0])
    if node.op == "?:":
        return static_unsigned(node.kids[1]) or static_unsigned(node.kids[2])
    if node.op in ("<<", ">>"):
        return static_unsigned(node.kids[0])
    if node.op == ",":
        return static_unsigned(node.kids[1])
    if node.op in ("||", "&&", "==", "!=", "<", ">", "<=", ">="):
        return False
    return static_unsigned(node.kids[0]) or static_unsigned(node.kids[1])


def reference(node: Node) -> int:
    """C's value of the tree (normalised to the node's type), evaluating only what C evaluates."""
    if not node.kids:
        return node.value
    op = node.op
    unsigned = static_unsigned(node)
    if op in UNARY:
        x = reference(node.kids[0])
        return {"-": wrap(-x, unsigned), "~": wrap(~x, unsigned), "!": int(x == 0), "+": x}[op]
    if op == "?:":
        chosen = node.kids[1] if reference(node.kids[0]) else node.kids[2]
        return wrap(reference(chosen), unsigned)
    if op == "&&":
        return int(bool(reference(node.kids[0])) and bool(reference(node.kids[1])))
    if op == "||":
        return int(bool(reference(node.kids[0])) or bool(reference(node.kids[1])))
    if op == ",":
        reference(node.kids[0])
        return reference(node.kids[1])
    left, right = reference(node.kids[0]), reference(node.kids[1])
    if op in ("<<", ">>"):
        count = right
        if count < 0:
            op, count = ("<<" if op == ">>" else ">>"), -count
        if op == "<<":
            return wrap(left << count, unsigned) if count < 64 else 0
        return wrap(left >> count, unsigned) if count < 64 else (-1 if left < 0 else 0)
    common = static_unsigned(node.kids[0]) or static_unsigned(node.kids[1])
    if common:
        left, right = left & MASK, right & MASK
    if op in ("/", "%"):
        if right == 0:
            raise DivideByZero
        quotient = abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)
        return wrap(quotient if op == "/" else left - quotient * right, unsigned)
    compare: dict[str, Callable[[int, int], bool]] = {
        "==": int.__eq__,
        "!=": int.__ne__,
        "<": int.__lt__,
        ">": int.__gt__,
        "<=": int.__le__,
        ">=": int.__ge__,
    }
    if op in compare:
        return int(compare[op](left, right))
    arithmetic: dict[str, Callable[[int, int], int]] = {
        "+": int.__add__,
        "-": int.__sub__,
        "*": int.__mul__,
        "&": int.__and__,
        "|": int.__or__,
        "^": int.__xor__,
    }
    return wrap(arithmetic[op](left, right), unsigned)


def precedence(node: Node) -> int:
    if not node.kids:
        return ATOM_PREC
    if node.op in UNARY:
        return UNARY_PREC
    if node.op == "?:":
        return TERNARY_PREC
    return BINARY_PREC[node.op]


def render(node: Node, minimal: bool) -> str:
    """Source text for the tree: every operation parenthesised, or only where precedence needs it."""
    if not node.kids:
        return node.op

    def sub(kid: Node, least: int) -> str:
        text = render(kid, minimal)
        return text if minimal and precedence(kid) >= least else f"({text})"

    if node.op in UNARY:
        return f"{node.op} {sub(node.kids[0], UNARY_PREC)}"
    if node.op == "?:":
        c, a, b = node.kids
        return f"{sub(c, TERNARY_PREC + 1)} ? {sub(a, 0)} : {sub(b, TERNARY_PREC)}"
    prec = BINARY_PREC[node.op]
    return f"{sub(node.kids[0], prec)} {node.op} {sub(node.kids[1], prec + 1)}"


@st.composite
def leaf(draw: st.DrawFn) -> Node:
    v = draw(st.one_of(st.integers(0, 20), st.sampled_from([900, 1000, 2**63 - 1, 2**63, 2**64 - 1])))
    unsigned = draw(st.booleans()) or v >= 2**63
    spelled = draw(st.sampled_from(["{}", "0x{:x}", "0{:o}"])).format(v)
    if spelled.startswith("00"):
        spelled = spelled[1:]
    suffix = (
        draw(st.sampled_from(["u", "U", "ull"])) if unsigned and (v < 2**63 or draw(st.booleans())) else ""
    )
    if not unsigned:
        suffix = draw(st.sampled_from(["", "", "l", "LL"]))
    return Node(spelled + suffix, value=v, unsigned=unsigned)


def extend(kids: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    return st.one_of(
        st.builds(lambda op, k: Node(op, (k,)), st.sampled_from(UNARY), kids),
        st.builds(lambda op, a, b: Node(op, (a, b)), st.sampled_from(list(BINARY_PREC)), kids, kids),
        st.builds(lambda c, a, b: Node("?:", (c, a, b)), kids, kids, kids),
    )


trees = st.recursive(leaf(), extend, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(trees)
def test_evaluate_matches_the_reference(tree: Node) -> None:
    try:
        expected: bool | None = reference(tree) != 0
    except DivideByZero:
        expected = None
    for minimal in (False, True):
        tokens = tokenize(render(tree, minimal))
        if expected is None:
            with pytest.raises(ExprError, match="division by zero"):
                evaluate(tokens)
        else:
            assert evaluate(tokens) is expected, render(tree, minimal)


@st.composite
def with_unknowns(draw: st.DrawFn) -> tuple[str, int]:
    """An expression text where some leaves are the placeholder ``U``, and how many."""
    tree = draw(trees)
    text = render(tree, minimal=draw(st.booleans()))
    tokens = tokenize(text)
    positions = [k for k, t in enumerate(tokens) if t[0].isdigit()]
    chosen = draw(st.sets(st.sampled_from(positions), min_size=1, max_size=3)) if positions else set()
    for k in chosen:
        tokens[k] = "U"
    return " ".join(tokens), len(chosen)


@settings(max_examples=300, deadline=None)
@given(
    with_unknowns(), st.lists(st.sampled_from(["0", "1", "-1", "900", "18446744073709551615"]), min_size=3)
)
def test_unknown_results_are_sound(case: tuple[str, int], substitutes: list[str]) -> None:
    """A known result with unknown operands must be the result for any value of them."""
    text, _ = case
    tokens = tokenize(text)
    try:
        with_unknown = evaluate([UNKNOWN_TOKEN if t == "U" else t for t in tokens])
    except ExprError:
        return  # malformed whatever the unknown values: nothing to compare
    if with_unknown is None:
        return
    substituted = iter(substitutes * len(tokens))
    concrete = [c for t in tokens for c in (tokenize(f"({next(substituted)})") if t == "U" else [t])]
    try:
        result = evaluate(concrete)
    except ExprError:
        return  # a division by zero that this choice of values reaches
    assert result is with_unknown, (text, concrete)
