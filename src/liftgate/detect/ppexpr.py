"""The C preprocessor's constant expressions, in three-valued logic.

`tokenize` splits a directive's text, `MacroExpander` performs macro replacement for one
compilation pass (object- and function-like macros, ``#``/``##``, ``defined``), and
`evaluate` computes the value of ``#if`` expressions over (intmax_t, uintmax_t) the way
gcc/nvcc do — except that any operand may be *unknown* (a macro the build sets and liftgate
cannot see), in which case the result is unknown unless the operator makes it irrelevant
(``0 && x``, ``1 || x``).

Hostile input is bounded, never a crash: macro expansion spends steps from a `StepBudget`
(`CONDITION_STEPS` for one condition), the parser stops at `EXPRESSION_DEPTH` levels of nesting,
and an integer literal too long for 64 bits is rejected before it is converted. Each of these is
an `ExprError`, so the condition is unknown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import ClassVar

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>\.?\d(?:[eEpP][+-]|[\w.]|'\w)*)  # a pp-number: 0x1fULL is one token, suffix included
  | (?P<chr>(?:u8|[uUL])?'(?:\\.|[^'\\])*')  # before identifiers: L'x' is one token
  | (?P<str>(?:u8|[uUL])?"(?:\\.|[^"\\])*")
  | (?P<id>[A-Za-z_]\w*)
  | (?P<op>\#\#|%:%:|\.\.\.|<<=|>>=|->|&&|\|\||<<|>>|<=|>=|==|!=|\#|[-+*/%<>!~&|^?:(),.;=\[\]{}@$`\\])
    """,
    re.X,
)

UNKNOWN_TOKEN = "\x00?"  # placeholder for a value liftgate cannot know
MASK64 = (1 << 64) - 1
# Macro expansion steps (tokens visited and substituted) for one condition, every lane together.
# Real conditions take 25,000 at most (CCCL's cuda_capabilities.h, over all lanes); a macro that
# doubles at each level reaches the limit at about 16 levels.
CONDITION_STEPS = 1_000_000
# Parser levels (each parenthesis, unary operator, ?: and operator precedence level is a few).
# Real conditions nest under 40; the bound keeps the parser well inside Python's recursion limit.
EXPRESSION_DEPTH = 400
_SHOWN_TOKEN = 40  # characters of a token quoted in an error message


class ExprError(Exception):
    """A malformed expression (what a compiler would reject), or one beyond liftgate's bounds."""


class BudgetExceeded(ExprError):
    """Macro expansion ran past its `StepBudget`: the condition's value is unknown."""


class StepBudget:
    """Steps one computation may take; spending past ``limit`` raises `BudgetExceeded`.

    Steps, not time, so that what is evaluated (and what is unknown) is the same on every machine.
    """

    __slots__ = ("limit", "used", "what")

    def __init__(self, limit: int, what: str = "macro expansion") -> None:
        self.limit = limit
        self.used = 0
        self.what = what

    def spend(self, steps: int) -> None:
        self.used += steps
        if self.used > self.limit:
            raise BudgetExceeded(f"{self.what} exceeds {self.limit:,} steps")


def shown_token(tok: str, quote: bool = True) -> str:
    """A token for an error message: long ones (a 5,000-digit literal) are shortened."""
    if len(tok) <= _SHOWN_TOKEN:
        return repr(tok) if quote else tok
    short = tok[: _SHOWN_TOKEN // 2] + "…" + tok[-8:]
    return (repr(short) if quote else short) + f" ({len(tok):,} characters)"


def tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ExprError(f"unexpected character {text[pos]!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            tokens.append(m.group(0))
    return tokens


def is_ident(token: str) -> bool:
    c = token[:1]
    return c.isalpha() or c == "_"


@dataclass(frozen=True, slots=True, eq=False)
class MacroDef:
    """A macro definition and where it came from (for evidence)."""

    name: str
    params: tuple[str, ...] | None  # None: object-like
    variadic: bool
    body: tuple[str, ...]
    path: str | None = None
    line: int | None = None
    context: str = ""  # the conditions under which the definition was seen

    def same_as(self, other: object) -> bool:
        return (
            isinstance(other, MacroDef)
            and self.params == other.params
            and self.variadic == other.variadic
            and self.body == other.body
        )


class _Unknown:
    """Marker: a macro that may or may not be defined (and with what), e.g. set by -D in a build."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN_MACRO"


UNKNOWN_MACRO = _Unknown()
UnknownEntry = _Unknown  # the type of every unknown entry, for isinstance checks


class MaybeDef(_Unknown):
    """Unknown, narrowed: defined as ``definition``, or left as it was before.

    What a header walked from a clean state exports for a macro it defines (or includes a
    definition of) under a condition unknown for a target. Evaluated, it is unknown like any
    `_Unknown`; merged where the macro is already defined the same way (the usual case: the
    header that defines it was included before, and its guard stops it here), it changes nothing.
    """

    __slots__ = ("definition",)

    def __init__(self, definition: MacroDef) -> None:
        self.definition = definition

    def __repr__(self) -> str:
        return f"MaybeDef({self.definition.name})"


# Per pass, a name maps to a MacroDef, None (known to be undefined) or an _Unknown: UNKNOWN_MACRO,
# or a MaybeDef.
MacroEntry = MacroDef | None | _Unknown


def parse_define(text: str, path: str | None = None, line: int | None = None, context: str = "") -> MacroDef:
    """Parse the text after ``#define``."""
    m = re.match(r"([A-Za-z_]\w*)(\()?", text)
    if m is None:
        raise ExprError("#define without a macro name")
    name = m.group(1)
    rest = text[m.end() :]
    params: tuple[str, ...] | None = None
    variadic = False
    if m.group(2):
        close = rest.find(")")
        if close < 0:
            raise ExprError(f"unterminated parameter list in #define {name}")
        raw = [p.strip() for p in rest[:close].split(",")] if rest[:close].strip() else []
        if raw and raw[-1].endswith("..."):
            variadic = True
            last = raw[-1][:-3].strip()
            raw[-1] = last or "__VA_ARGS__"
        params = tuple(raw)
        rest = rest[close + 1 :]
    return MacroDef(name, params, variadic, tuple(tokenize(rest)), path, line, context)


@dataclass(slots=True)
class Lookup:
    """What an expansion touched: the names looked up, for evidence and for lane grouping."""

    names: set[str] = field(default_factory=set)


class MacroExpander:
    """Macro replacement for one compilation pass.

    ``lookup(name)`` returns the pass's entry for a name: a MacroDef, None (undefined) or
    UNKNOWN_MACRO. ``defined X`` on an unknown macro yields an unknown value.
    """

    def __init__(
        self,
        lookup: Callable[[str], MacroEntry],
        seen: Lookup | None = None,
        budget: StepBudget | None = None,
    ) -> None:
        self._lookup = lookup
        self.seen = seen if seen is not None else Lookup()
        self._depth = 0
        self.budget = budget if budget is not None else StepBudget(CONDITION_STEPS)

    def entry(self, name: str) -> MacroEntry:
        self.seen.names.add(name)
        return self._lookup(name)

    def expand(self, tokens: Sequence[str], hide: frozenset[str] = frozenset()) -> list[str]:
        self._depth += 1
        if self._depth > 200:
            raise ExprError("macro expansion too deep")
        try:
            return self._expand(tokens, hide)
        finally:
            self._depth -= 1

    def _expand(self, tokens: Sequence[str], hide: frozenset[str]) -> list[str]:
        n = len(tokens)
        self.budget.spend(n + 1)
        out: list[str] = []
        i = 0
        while i < n:
            tok = tokens[i]
            if not is_ident(tok):
                out.append(tok)
                i += 1
                continue
            if tok == "defined":
                value, i = self._defined(tokens, i)
                out.append(value)
                continue
            if tok in hide:
                out.append(tok)
                i += 1
                continue
            entry = self.entry(tok)
            if entry is None:
                out.append(tok)
                i += 1
            elif isinstance(entry, _Unknown):
                out.append(UNKNOWN_TOKEN)
                i += 1
                if i < n and tokens[i] == "(":  # an unknown function-like macro swallows its arguments
                    _, i = _collect_args(tokens, i)
            elif entry.params is None:
                expanded = self.expand(list(entry.body), hide | {tok})
                i += 1
                if (
                    expanded
                    and i < n
                    and tokens[i] == "("
                    and self._calls_function_like(expanded[-1], hide | {tok})
                ):
                    # ``#define G TWICE`` then ``G(4)``: the name the expansion ends with takes
                    # its arguments from what follows, as it does for a compiler.
                    return out + expanded[:-1] + self.expand([expanded[-1], *tokens[i:]], hide)
                out.extend(expanded)
            else:
                if i + 1 >= n or tokens[i + 1] != "(":
                    out.append(tok)
                    i += 1
                    continue
                args, i = _collect_args(tokens, i + 1)
                body = self._substitute(entry, args, hide)
                # Rescan the replacement together with the rest, so a result naming a
                # function-like macro can take its arguments from what follows.
                rest = list(tokens[i:])
                return out + self._rescan(body, rest, hide | {tok}, hide)
        return out

    def _rescan(
        self, body: list[str], rest: list[str], body_hide: frozenset[str], hide: frozenset[str]
    ) -> list[str]:
        expanded = self.expand(body, body_hide)
        # A trailing function-like macro name in the expansion may take arguments from the rest.
        if expanded and rest and rest[0] == "(" and is_ident(expanded[-1]) and expanded[-1] not in body_hide:
            return expanded[:-1] + self.expand([expanded[-1], *rest], hide)
        return expanded + self.expand(rest, hide)

    def _calls_function_like(self, name: str, hide: frozenset[str]) -> bool:
        if not is_ident(name) or name in hide or name == "defined":
            return False
        entry = self.entry(name)
        return isinstance(entry, MacroDef) and entry.params is not None

    def _defined(self, tokens: Sequence[str], i: int) -> tuple[str, int]:
        j = i + 1
        paren = j < len(tokens) and tokens[j] == "("
        if paren:
            j += 1
        if j >= len(tokens) or not is_ident(tokens[j]):
            raise ExprError("'defined' without a macro name")
        name = tokens[j]
        j += 1
        if paren:
            if j >= len(tokens) or tokens[j] != ")":
                raise ExprError("missing ')' after 'defined'")
            j += 1
        entry = self.entry(name)
        if isinstance(entry, _Unknown):
            return UNKNOWN_TOKEN, j
        return ("1" if entry is not None else "0"), j

    def _substitute(self, macro: MacroDef, args: list[list[str]], hide: frozenset[str]) -> list[str]:
        params = macro.params or ()
        if macro.variadic:
            fixed = len(params) - 1
            if len(args) > fixed:
                va: list[str] = []
                for k, a in enumerate(args[fixed:]):
                    if k:
                        va.append(",")
                    va.extend(a)
                args = [*args[:fixed], va]
            while len(args) < len(params):
                args.append([])
        elif len(params) == 0 and args == [[]]:
            args = []
        if len(args) != len(params):
            raise ExprError(f"macro {macro.name} expects {len(params)} arguments, got {len(args)}")
        index = {p: k for k, p in enumerate(params)}
        body = macro.body
        self.budget.spend(len(body) + sum(len(a) for a in args))
        out: list[str] = []
        k = 0
        while k < len(body):
            tok = body[k]
            if tok == "#" and k + 1 < len(body) and body[k + 1] in index:
                out.append('"' + " ".join(args[index[body[k + 1]]]).replace('"', '\\"') + '"')
                k += 2
                continue
            if tok in index:
                adjacent_paste = (k > 0 and body[k - 1] == "##") or (
                    k + 1 < len(body) and body[k + 1] == "##"
                )
                arg = args[index[tok]]
                out.extend(arg if adjacent_paste else self.expand(arg, hide))
                k += 1
                continue
            out.append(tok)
            k += 1
        return _paste(out)


def _collect_args(tokens: Sequence[str], i: int) -> tuple[list[list[str]], int]:
    """Collect a parenthesised argument list starting at tokens[i] == '('."""
    depth = 0
    args: list[list[str]] = [[]]
    j = i
    while j < len(tokens):
        tok = tokens[j]
        if tok == "(":
            depth += 1
            if depth > 1:
                args[-1].append(tok)
        elif tok == ")":
            depth -= 1
            if depth == 0:
                return args, j + 1
            args[-1].append(tok)
        elif tok == "," and depth == 1:
            args.append([])
        else:
            args[-1].append(tok)
        j += 1
    raise ExprError("unterminated macro argument list")


def _paste(tokens: list[str]) -> list[str]:
    if "##" not in tokens:
        return tokens
    out: list[str] = []
    k = 0
    while k < len(tokens):
        tok = tokens[k]
        if tok == "##" and out and k + 1 < len(tokens):
            out[-1] = out[-1] + tokens[k + 1]
            k += 2
            continue
        if tok == "##":
            k += 1
            continue
        out.append(tok)
        k += 1
    return out


# ---------------------------------------------------------------------------
# Evaluation over (value, unsigned) pairs; None is unknown.

Value = tuple[int, bool] | None


# The most significant digits a 64-bit value can have, per base: longer literals are rejected
# before conversion (a 5,000-digit decimal literal is past Python's int-from-string limit).
_MAX_DIGITS = {16: 16, 2: 64, 8: 22, 10: 20}


def _parse_number(tok: str) -> tuple[int, bool]:
    text = tok.replace("'", "")
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9]\d*)([uU]?(?:ll|LL|l|L)?[uU]?)", text)
    if m is None:
        raise ExprError(f"invalid integer constant {shown_token(tok)} in a preprocessor expression")
    digits, suffix = m.group(1), m.group(2)
    if digits[:2] in ("0x", "0X", "0b", "0B"):
        base, body = (16 if digits[1] in "xX" else 2), digits[2:]
    elif digits.startswith("0") and len(digits) > 1:
        base, body = 8, digits
    else:
        base, body = 10, digits
    if len(body.lstrip("0")) > _MAX_DIGITS[base]:
        raise ExprError(f"integer constant {shown_token(tok)} is too large")
    value = int(body, base) if body else 0
    unsigned = "u" in suffix.lower() or value > (1 << 63) - 1
    if value > MASK64:
        raise ExprError(f"integer constant {shown_token(tok)} is too large")
    return value, unsigned


def _char_value(tok: str) -> tuple[int, bool]:
    try:
        return _char_value_of(tok)
    except (ValueError, IndexError):  # '\9', '\x' or '\xZZ': what a compiler rejects too
        raise ExprError(f"invalid character constant {shown_token(tok)}") from None


def _char_value_of(tok: str) -> tuple[int, bool]:
    body = tok[tok.index("'") + 1 : -1]
    if body.startswith("\\"):
        simple = {
            "n": 10,
            "t": 9,
            "r": 13,
            "0": 0,
            "\\": 92,
            "'": 39,
            '"': 34,
            "a": 7,
            "b": 8,
            "f": 12,
            "v": 11,
        }
        if body[1:] in simple:
            return simple[body[1:]], False
        if body[1] == "x":
            value = int(body[2:], 16)
        elif body[1:].isdigit():
            value = int(body[1:], 8)
        else:
            raise ExprError(f"unsupported character constant {shown_token(tok, quote=False)}")
        if value > MASK64:
            raise ExprError(f"character constant {shown_token(tok, quote=False)} is too large")
        return value, False
    if len(body) != 1:
        raise ExprError(f"multi-character constant {shown_token(tok, quote=False)}")
    return ord(body), False


def _signed(v: int) -> int:
    v &= MASK64
    return v - (1 << 64) if v >> 63 else v


def _norm(v: int, unsigned: bool) -> tuple[int, bool]:
    return (v & MASK64, True) if unsigned else (_signed(v), False)


# C's binary operators and their precedence (higher binds tighter), shared with the C++ reader.
BINARY_PRECEDENCE: dict[str, int] = {
    "||": 1,
    "&&": 2,
    "|": 3,
    "^": 4,
    "&": 5,
    "==": 6,
    "!=": 6,
    "<": 7,
    ">": 7,
    "<=": 7,
    ">=": 7,
    "<<": 8,
    ">>": 8,
    "+": 9,
    "-": 9,
    "*": 10,
    "/": 10,
    "%": 10,
}


class _Parser:
    def __init__(self, tokens: list[str], unknown_ident: Callable[[str], bool]) -> None:
        self.toks = tokens
        self.pos = 0
        self.unknown_ident = unknown_ident
        # Whether the operand being parsed is evaluated: True, False (the other side of a
        # decided ``&&``/``||``/``?:``) or None (decided by an unknown value). A compiler only
        # rejects a division by zero that is evaluated: ``defined(X) && 100 / X`` is fine.
        self.evaluated: bool | None = True
        self.depth = 0  # parser calls in progress (see EXPRESSION_DEPTH)

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > EXPRESSION_DEPTH:
            raise ExprError(f"expression nested deeper than {EXPRESSION_DEPTH} levels")

    def operand(
        self, parse: Callable[[], Value], guard: Value, evaluated_when: Callable[[int], bool]
    ) -> Value:
        """Parse one operand whose evaluation depends on ``guard``'s value."""
        self._enter()
        outer = self.evaluated
        if outer is not False:
            self.evaluated = None if guard is None else (outer if evaluated_when(guard[0]) else False)
        try:
            return parse()
        finally:
            self.evaluated = outer
            self.depth -= 1

    def peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self) -> str:
        if self.pos >= len(self.toks):
            raise ExprError("unexpected end of expression")
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def expect(self, tok: str) -> None:
        got = self.take()
        if got != tok:
            raise ExprError(f"expected {shown_token(tok)}, found {shown_token(got)}")

    def parse(self) -> Value:
        value = self.comma()
        if self.pos != len(self.toks):
            raise ExprError(f"unexpected {shown_token(self.toks[self.pos])} in expression")
        return value

    def comma(self) -> Value:
        """``a, b``: gcc accepts the comma operator in ``#if``; the value and type are ``b``'s."""
        self._enter()
        try:
            value = self.conditional()
            while self.peek() == ",":
                self.take()
                value = self.conditional()
            return value
        finally:
            self.depth -= 1

    def conditional(self) -> Value:
        self._enter()
        try:
            cond = self.binary(0)
            if self.peek() != "?":
                return cond
            self.take()
            then = self.operand(self.comma, cond, lambda c: c != 0)  # C: ``e ? expression : e``
            self.expect(":")
            other = self.operand(self.conditional, cond, lambda c: c == 0)
        finally:
            self.depth -= 1
        unsigned = bool(then and then[1]) or bool(other and other[1])
        if cond is None:
            if then is not None and other is not None and then[0] == other[0]:
                return _norm(then[0], unsigned)
            return None
        chosen = then if cond[0] != 0 else other
        return None if chosen is None else _norm(chosen[0], unsigned)

    _PREC: ClassVar[dict[str, int]] = BINARY_PRECEDENCE

    def binary(self, min_prec: int) -> Value:
        self._enter()
        try:
            left = self.unary()
            while True:
                op = self.peek()
                prec = self._PREC.get(op or "")
                if op is None or prec is None or prec < min_prec:
                    return left
                self.take()
                if op == "&&":
                    right = self.operand(partial(self.binary, prec + 1), left, lambda v: v != 0)
                elif op == "||":
                    right = self.operand(partial(self.binary, prec + 1), left, lambda v: v == 0)
                else:
                    right = self.binary(prec + 1)
                left = _apply(op, left, right, self.evaluated)
        finally:
            self.depth -= 1

    def unary(self) -> Value:
        tok = self.take()
        if tok in ("+", "-", "!", "~"):
            self._enter()
            try:
                v = self.unary()
            finally:
                self.depth -= 1
            if tok == "!":
                return None if v is None else (int(v[0] == 0), False)
            if v is None:
                return None
            if tok == "-":
                return _norm(-v[0], v[1])
            if tok == "~":
                return _norm(~v[0], v[1])
            return v
        if tok == "(":
            self._enter()
            try:
                v = self.comma()
            finally:
                self.depth -= 1
            self.expect(")")
            return v
        if tok == UNKNOWN_TOKEN:
            return None
        if tok[0].isdigit() or (tok[0] == "." and len(tok) > 1):
            return _parse_number(tok)
        if "'" in tok and tok[-1] == "'":
            return _char_value(tok)
        if is_ident(tok):
            if tok == "true":
                return (1, False)
            if tok == "false":
                return (0, False)
            if self.peek() == "(":
                raise ExprError(f"function-like macro {shown_token(tok)} is not defined")
            return None if self.unknown_ident(tok) else (0, False)
        raise ExprError(f"unexpected {shown_token(tok)} in expression")


def _apply(op: str, a: Value, b: Value, evaluated: bool | None = True) -> Value:
    """``a op b``; ``evaluated`` says whether the compiler evaluates it (see `_Parser.operand`)."""
    if op == "&&":
        if (a is not None and a[0] == 0) or (b is not None and b[0] == 0):
            return (0, False)
        return None if a is None or b is None else (1, False)
    if op == "||":
        if (a is not None and a[0] != 0) or (b is not None and b[0] != 0):
            return (1, False)
        return None if a is None or b is None else (0, False)
    if a is None or b is None:
        return None
    unsigned = a[1] or b[1]
    x, y = (a[0] & MASK64, b[0] & MASK64) if unsigned else (a[0], b[0])
    if op in ("==", "!=", "<", ">", "<=", ">="):
        result = {
            "==": x == y,
            "!=": x != y,
            "<": x < y,
            ">": x > y,
            "<=": x <= y,
            ">=": x >= y,
        }[op]
        return (int(result), False)
    if op == "+":
        return _norm(x + y, unsigned)
    if op == "-":
        return _norm(x - y, unsigned)
    if op == "*":
        return _norm(x * y, unsigned)
    if op in ("/", "%"):
        if y == 0:
            if evaluated is True:
                raise ExprError("division by zero in preprocessor expression")
            # Never evaluated: any value will do. Maybe evaluated: an error or nothing, so unknown.
            return (0, unsigned) if evaluated is False else None
        q = abs(x) // abs(y)
        if (x < 0) != (y < 0):
            q = -q
        return _norm(q if op == "/" else x - q * y, unsigned)
    if op in ("<<", ">>"):
        return _shift(op, a, b)
    if op == "&":
        return _norm(x & y, unsigned)
    if op == "|":
        return _norm(x | y, unsigned)
    if op == "^":
        return _norm(x ^ y, unsigned)
    raise ExprError(f"unsupported operator {op!r}")


def _shift(op: str, a: tuple[int, bool], b: tuple[int, bool]) -> tuple[int, bool]:
    """A shift as gcc's preprocessor does it (libcpp ``num_binary_op``).

    The result has the left operand's type: ``-16 >> 2u`` is -4, not a huge unsigned number.
    A negative count shifts the other way, and a count of 64 or more shifts everything out
    (0, or -1 for a negative signed value shifted right).
    """
    value, unsigned = a
    count = b[0]
    if count < 0:  # only a signed count can be negative
        op = "<<" if op == ">>" else ">>"
        count = -count
    if op == "<<":
        return _norm(value << count if count < 64 else 0, unsigned)
    if count >= 64:
        return _norm(-1 if value < 0 else 0, unsigned)
    return _norm(value >> count, unsigned)  # ``value`` is normalised, so signed values shift arithmetically


# C++ alternative tokens (``#if a and not b``).
_ALTERNATIVE_OPERATORS = {
    "and": "&&",
    "or": "||",
    "not": "!",
    "bitand": "&",
    "bitor": "|",
    "xor": "^",
    "compl": "~",
    "not_eq": "!=",
}


def evaluate(tokens: Iterable[str], unknown_ident: Callable[[str], bool] = lambda _: False) -> bool | None:
    """Evaluate already macro-expanded tokens; True/False, or None when the value is unknown.

    ``unknown_ident(name)`` says whether an identifier left after expansion stands for an
    unknown value (a macro the build may define) rather than 0.
    """
    toks = [_ALTERNATIVE_OPERATORS.get(t, t) for t in tokens]
    if not toks:
        raise ExprError("empty expression")
    value = _Parser(toks, unknown_ident).parse()
    return None if value is None else value[0] != 0
