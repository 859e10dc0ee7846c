"""Just enough C++ syntax for host-side dispatch code: tokens, function definitions, statements, expressions.

This is not a C++ parser. It reads what capability dispatch looks like in extension sources —
function bodies made of declarations, assignments, ``if``/``else``, ``switch``, ``return``,
``throw``, loops and check macros over integer expressions — and recovers locally from anything
else (a statement it cannot read becomes an opaque expression statement). Templates, lambdas
and classes inside function bodies are skipped, not understood.

Preprocessor directives are not tokens: the caller says which lines the host pass compiles
(see `liftgate.detect.cuda.Region`) and the tokenizer drops the rest.

Hostile input is bounded: brackets are matched once per token list (a table, not a scan per
bracket), statements and scopes nested deeper than `MAX_NESTING` raise `TooDeep` (the function is
not followed), an expression nested deeper than `MAX_EXPRESSION_DEPTH` parser levels is an
``unknown`` node, template arguments are looked for within `MAX_TEMPLATE_SCAN` tokens, and integer
literals longer than any 64-bit one are unknown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from liftgate.detect.ppexpr import BINARY_PRECEDENCE

# Far above real host code (vLLM's and FlashInfer's dispatch nests statements ~8 deep and
# expressions ~10; CUTLASS's longest template argument list is a few hundred tokens).
MAX_NESTING = 100
MAX_EXPRESSION_DEPTH = 200
MAX_TEMPLATE_SCAN = 4_096
_MAX_LITERAL_CHARS = 72  # 0b and 64 binary digits, with digit separators and a suffix


class TooDeep(Exception):
    """Statements or scopes nested deeper than MAX_NESTING: the construct is not read."""


# Every token, and every newline (to count lines), as plain strings: `re.findall` does the
# scanning in C and skips whitespace by itself, several times faster than a Python loop over
# match objects on CUTLASS-sized headers. A raw string literal needs a back-reference (a group,
# which findall would return instead of the token), so files that have one use `_TOKEN_RAW`.
_TOKEN_BODY = r"""
  | //[^\n]*|/\*.*?(?:\*/|\Z)
  | (?:u8|u|U|L)?"(?:\\.|[^"\\\n])*"?
  | (?:u8|u|U|L)?'(?:\\.|[^'\\\n])*'?
  | [A-Za-z_$][\w$]*
  | \.?\d(?:[eEpP][+-]|[\w.']|)*
  | ::|->\*?|\.\.\.|<<=|>>=|<=>|&&|\|\||==|!=|<=|>=|<<|>>|\+\+|--|[-+*/%&|^]=|\S
"""
_TOKEN = re.compile(r"\n|\\\r?\n" + _TOKEN_BODY, re.X | re.S)
_TOKEN_RAW = re.compile(
    r"""\n|\\\r?\n | (?:u8|u|U|L)?R"(?P<d>[^()\\\s"]{0,16})\(.*?\)(?P=d)" """ + _TOKEN_BODY, re.X | re.S
)


class Tok(NamedTuple):
    kind: str  # id, num, str, chr, op
    text: str
    line: int
    region: int = 0  # index into the caller's regions (which preprocessor conditions are in force)


def tokenize(text: str, region_of_line: Callable[[int], int | None] | None = None) -> list[Tok]:
    """Tokens of ``text`` outside comments and directives, with their lines.

    ``region_of_line`` maps a line to a region index, or to None when the host pass does not
    compile that line (device-only code, an ``#if 0``); those tokens are dropped.
    """
    out: list[Tok] = []
    append = out.append
    line = 1
    at_line_start = True
    in_directive = False
    region: int | None = 0
    region_line = 0
    tokens = [m.group(0) for m in _TOKEN_RAW.finditer(text)] if 'R"' in text else _TOKEN.findall(text)
    for tok in tokens:
        c = tok[0]
        if c == "\n":
            line += 1
            at_line_start = True
            in_directive = False
            continue
        if c == "\\" and len(tok) > 1:  # a backslash-newline: the logical line goes on
            line += 1
            continue
        if c == "/" and len(tok) > 1 and tok[1] in "/*":
            line += tok.count("\n")
            continue
        start_line = line
        if c == "#" and at_line_start:
            in_directive = True
        at_line_start = False
        if c.isalpha() or c == "_" or c == "$":
            last = tok[-1]
            if (last == '"' or last == "'") and len(tok) > 1:
                kind = "str" if '"' in tok else "chr"
                line += tok.count("\n")
            else:
                kind = "id"
        elif c == '"':
            kind = "str"
            if "\n" in tok:
                line += tok.count("\n")
        elif c == "'":
            kind = "chr"
        elif c.isdigit() or (c == "." and len(tok) > 1 and tok[1].isdigit()):
            kind = "num"
        else:
            kind = "op"
        if in_directive:
            continue
        if region_of_line is not None and region_line != start_line:
            region = region_of_line(start_line)
            region_line = start_line
        if region is not None:
            append(Tok(kind, tok, start_line, region))
    return out


CONTROL = frozenset(
    {
        "if",
        "else",
        "for",
        "while",
        "do",
        "switch",
        "case",
        "default",
        "return",
        "throw",
        "break",
        "continue",
        "goto",
        "try",
        "catch",
        "sizeof",
        "alignof",
        "decltype",
        "static_assert",
        "alignas",
        "noexcept",
        "typeid",
        "new",
        "delete",
        "co_return",
        "co_await",
        "requires",
    }
)
_QUALIFIERS = frozenset({"const", "noexcept", "override", "final", "volatile", "mutable", "&", "&&", "throw"})
_SCOPES = frozenset({"namespace", "struct", "class", "union"})


@dataclass(frozen=True, slots=True)
class FuncDef:
    """A function definition: its name (last component), parameters and body tokens."""

    name: str
    qualname: str
    params: tuple[str, ...]
    body: tuple[Tok, ...]  # from '{' to '}' inclusive
    inits: tuple[tuple[str, tuple[Tok, ...]], ...]  # constructor member initialisers: name(expr)
    path: str
    line: int


_PAIRS = {"(": ")", "[": "]", "{": "}"}
# Bracket tables of the token lists read last: (the list, opener index -> closer index). Lists are
# matched whole once, so nested blocks cost linear time, not a scan per level.
_TABLES: dict[int, tuple[Sequence[Tok], dict[int, int]]] = {}


def _bracket_table(toks: Sequence[Tok]) -> dict[int, int]:
    cached = _TABLES.get(id(toks))
    if cached is not None and cached[0] is toks:
        return cached[1]
    table: dict[int, int] = {}
    open_at: dict[str, list[int]] = {"(": [], "[": [], "{": []}
    closer_of = {v: k for k, v in _PAIRS.items()}
    for k, t in enumerate(toks):
        text = t.text
        if text in open_at:
            open_at[text].append(k)
        elif text in closer_of:
            stack = open_at[closer_of[text]]
            if stack:
                table[stack.pop()] = k
    if len(_TABLES) >= 4:
        del _TABLES[next(iter(_TABLES))]
    _TABLES[id(toks)] = (toks, table)
    return table


def forget_tables() -> None:
    """Drop the bracket tables (and so the token lists they keep alive): a file is done."""
    _TABLES.clear()


def _match(toks: list[Tok] | tuple[Tok, ...], i: int, open_: str, close: str, end: int | None = None) -> int:
    """Index of the token closing the bracket at ``i`` (or the last index before ``end`` if unbalanced)."""
    n = len(toks) if end is None else end
    if i < n and toks[i].text == open_ and _PAIRS.get(open_) == close:
        j = _bracket_table(toks).get(i)
        return j if j is not None and j < n else n - 1
    depth = 0
    while i < n:
        t = toks[i].text
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return n - 1


def _skip_balanced(toks: list[Tok], i: int) -> int:
    """Index after the bracket group starting at ``i``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    return _match(toks, i, toks[i].text, pairs[toks[i].text]) + 1


def _param_names(toks: list[Tok]) -> tuple[str, ...]:
    """Parameter names of a parameter list (the last identifier of each, before any default)."""
    names: list[str] = []
    depth = 0
    current: list[Tok] = []
    for t in [*toks, Tok("op", ",", 0)]:
        if t.text in "([{<" and t.kind == "op":
            depth += 1
        elif t.text in ")]}>" and t.kind == "op":
            depth -= 1
        if t.text == "," and depth == 0:
            ids = []
            for c in current:
                if c.text == "=":
                    break
                if c.kind == "id":
                    ids.append(c.text)
            names.append(ids[-1] if len(ids) >= 2 else "")
            current = []
        else:
            current.append(t)
    return tuple(names) if any(names) else ()


def find_functions(toks: list[Tok], path: str) -> list[FuncDef]:
    """Function definitions at namespace or class scope (nested classes included).

    Scopes nested deeper than MAX_NESTING are passed over: their functions are not found.
    """
    out: list[FuncDef] = []
    _scan_scope(toks, 0, len(toks), path, out, "")
    return out


def _scan_scope(
    toks: list[Tok], i: int, end: int, path: str, out: list[FuncDef], prefix: str, depth: int = 0
) -> None:
    while i < end:
        t = toks[i]
        if t.text in _SCOPES and t.kind == "id":
            # namespace a::b {, struct X : Base {, class API X final {  — descend; a declaration ends at ';'
            j = i + 1
            parts: list[str] = []
            in_bases = False
            while j < end and toks[j].text not in ("{", ";", "("):
                s = toks[j].text
                if s == ":":
                    in_bases = True
                elif not in_bases and toks[j].kind == "id" and s not in ("final", "inline"):
                    if t.text == "namespace" or not parts or toks[j - 1].text == "::":
                        parts.append(s)
                    else:
                        parts = [s]  # class ALIGN_MACRO Name: the last name is the class's
                if s == "<":
                    j = _match_angle(toks, j, end)
                j += 1
            name = "::".join(parts)
            if j < end and toks[j].text == "{":
                close = _match(toks, j, "{", "}")
                if depth < MAX_NESTING:
                    scope = f"{prefix}{name}::" if name else prefix
                    _scan_scope(toks, j + 1, close, path, out, scope, depth + 1)
                i = close + 1
                continue
            i = j + 1 if j < end and toks[j].text == ";" else i + 1
            continue
        if t.text == "extern" and i + 2 < end and toks[i + 1].kind == "str" and toks[i + 2].text == "{":
            close = _match(toks, i + 2, "{", "}")
            if depth < MAX_NESTING:
                _scan_scope(toks, i + 3, close, path, out, prefix, depth + 1)
            i = close + 1
            continue
        if t.text == "{":
            i = _match(toks, i, "{", "}") + 1
            continue
        if t.text == "template" and i + 1 < end and toks[i + 1].text == "<":
            i = _match_angle(toks, i + 1, end) + 1  # template <typename T, typename = void>
            continue
        if t.text == "=" or t.text == "enum":
            # an initializer or an enum: skip to the end of the declaration
            j = i + 1
            while j < end and toks[j].text != ";":
                if toks[j].text in ("{", "(", "["):
                    j = _skip_balanced(toks, j)
                    continue
                j += 1
            i = j + 1
            continue
        if (
            t.kind == "id"
            and i + 1 < end
            and toks[i + 1].text == "<"
            and t.text not in CONTROL
            and t.text != "template"
            and i > 0
            and toks[i - 1].text == "::"
        ):
            # Class::method<Tag>( … ) { … }: an explicit member template definition
            close = _match_angle(toks, i + 1, end)
            if close + 1 < end and toks[close + 1].text == "(":
                found = _function_at(toks, i, end, path, prefix, paren=close + 1)
                if found is not None:
                    out.append(found[0])
                    i = found[1]
                    continue
        if t.kind == "id" and i + 1 < end and toks[i + 1].text == "(" and t.text not in CONTROL:
            found = _function_at(toks, i, end, path, prefix)
            if found is not None:
                fdef, after = found
                out.append(fdef)
                i = after
                continue
            i = _skip_balanced(toks, i + 1)
            continue
        i += 1


def _match_angle(toks: list[Tok] | tuple[Tok, ...], i: int, end: int) -> int:
    depth = 0
    j = i
    end = min(end, i + MAX_TEMPLATE_SCAN)
    while j < end:
        s = toks[j].text
        if s == "<":
            depth += 1
        elif s == ">":
            depth -= 1
        elif s == ">>":
            depth -= 2
        elif s in (";", "{", "}"):
            return j - 1
        if depth <= 0:
            return j
        j += 1
    return end - 1


def _function_at(
    toks: list[Tok], i: int, end: int, path: str, prefix: str, paren: int | None = None
) -> tuple[FuncDef, int] | None:
    """A definition whose name is at ``i`` (``name(`` … ``) … {``), and the index after its body."""
    if i > 0 and toks[i - 1].text in (".", "->"):
        return None
    paren = i + 1 if paren is None else paren
    close = _match(toks, paren, "(", ")")
    j = close + 1
    inits: list[tuple[str, tuple[Tok, ...]]] = []
    while j < end:
        s = toks[j].text
        if s in _QUALIFIERS:
            j += 1
            if s in ("noexcept", "throw") and j < end and toks[j].text == "(":
                j = _skip_balanced(toks, j)
            continue
        if s == "->":  # trailing return type
            j += 1
            while j < end and toks[j].text not in ("{", ";", "="):
                if toks[j].text == "<":
                    j = _match_angle(toks, j, end)
                j += 1
            continue
        if s == ":" and toks[j - 1].text != "?":  # constructor initialisers: a_(x), b_{y}
            j += 1
            while j < end:
                name_start = j
                while j < end and (toks[j].kind == "id" or toks[j].text in ("::", "<", ">")):
                    j += 1
                if j >= end or toks[j].text not in ("(", "{") or j == name_start:
                    return None
                closing = ")" if toks[j].text == "(" else "}"
                k = _match(toks, j, toks[j].text, closing)
                inits.append((toks[j - 1].text, tuple(toks[j + 1 : k])))
                j = k + 1
                if j < end and toks[j].text == ",":
                    j += 1
                    continue
                break
            continue
        if s in ("override", "final") or (toks[j].kind == "id" and s.isupper()):  # attribute macros
            j += 1
            continue
        break
    if j >= end or toks[j].text != "{":
        return None
    body_end = _match(toks, j, "{", "}")
    name_parts = [toks[i].text]
    k = i - 1
    while k >= 1 and toks[k].text == "::" and toks[k - 1].kind == "id":
        name_parts.insert(0, toks[k - 1].text)
        k -= 2
    fdef = FuncDef(
        name=toks[i].text,
        qualname=prefix + "::".join(name_parts),
        params=_param_names(toks[paren + 1 : close]),
        body=tuple(toks[j : body_end + 1]),
        inits=tuple(inits),
        path=path,
        line=toks[i].line,
    )
    return fdef, body_end + 1


# -- expressions ------------------------------------------------------------------------------


@dataclass(slots=True)
class Node:
    """An expression node. ``kind`` is one of num, str, name, call, member, index, unary, bin,
    tern, assign, init, lambda, unknown; ``start``/``end`` index the tokens it spans (end exclusive)."""

    kind: str
    start: int
    end: int
    value: object = None  # num: the number; str: the literal's text; name: the qualified name
    op: str = ""
    args: list[Node] = field(default_factory=list)


_BINARY = {**BINARY_PRECEDENCE, "<=>": 7}
_TYPE_WORDS = frozenset(
    {
        "int",
        "unsigned",
        "signed",
        "long",
        "short",
        "char",
        "bool",
        "float",
        "double",
        "size_t",
        "auto",
        "const",
        "void",
    }
)
_TEMPLATE_CALLEES = frozenset(
    {"static_cast", "reinterpret_cast", "const_cast", "dynamic_cast", "get", "min", "max", "make_pair"}
)


def _int_literal(text: str) -> int | float | None:
    if len(text) > _MAX_LITERAL_CHARS:
        return None  # longer than any 64-bit literal: what a compiler rejects
    t = text.replace("'", "").rstrip("uUlLzZ")
    try:
        if t.lower().startswith("0x"):
            return int(t, 16)
        if t.lower().startswith("0b"):
            return int(t[2:], 2)
        if len(t) > 1 and t.startswith("0") and t.isdigit():
            return int(t, 8)
        return int(t)
    except ValueError:
        try:
            return float(t.rstrip("fF"))
        except ValueError:
            return None


class _ExpressionTooDeep(Exception):
    pass


class ExprParser:
    """Precedence climbing over a token list; never raises on odd input (yields ``unknown`` nodes)."""

    def __init__(self, toks: list[Tok] | tuple[Tok, ...], start: int, end: int, depth: int = 0) -> None:
        self.toks = toks
        self.i = start
        self.end = end
        self.depth = depth  # parser calls in progress, those of enclosing parsers included

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.toks[j].text if j < self.end else ""

    def parse(self) -> Node:
        start = self.i
        try:
            node = self.ternary()
        except (IndexError, RecursionError, _ExpressionTooDeep):
            return Node("unknown", start, self.end)
        return node

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_EXPRESSION_DEPTH:
            raise _ExpressionTooDeep

    def _inner(self, start: int, end: int) -> Node:
        """A sub-expression (an argument, an index) parsed with this parser's depth."""
        return ExprParser(self.toks, start, end, self.depth).parse()

    def ternary(self) -> Node:
        self._enter()
        try:
            start = self.i
            cond = self.binary(1)
            if self.peek() == "?":
                self.i += 1
                a = self.ternary()
                if self.peek() == ":":
                    self.i += 1
                b = self.ternary()
                return Node("tern", start, self.i, args=[cond, a, b])
            if self.peek() in ("=", "+=", "-=", "*=", "/=", "|=", "&=", "<<=", ">>="):
                op = self.peek()
                self.i += 1
                rhs = self.ternary()
                return Node("assign", start, self.i, op=op, args=[cond, rhs])
            return cond
        finally:
            self.depth -= 1

    def binary(self, min_prec: int) -> Node:
        self._enter()
        try:
            start = self.i
            left = self.unary()
            while True:
                op = self.peek()
                prec = _BINARY.get(op)
                if prec is None or prec < min_prec or self.toks[self.i].kind != "op":
                    return left
                self.i += 1
                right = self.binary(prec + 1)
                left = Node("bin", start, self.i, op=op, args=[left, right])
        finally:
            self.depth -= 1

    def unary(self) -> Node:
        self._enter()
        try:
            start = self.i
            op = self.peek()
            if op in ("!", "-", "+", "~", "&", "*", "++", "--") and self.toks[self.i].kind == "op":
                self.i += 1
                operand = self.unary()
                return Node("unary", start, self.i, op=op, args=[operand])
            if op == "not":
                self.i += 1
                operand = self.unary()
                return Node("unary", start, self.i, op="!", args=[operand])
            if op == "(" and self._is_cast():
                self.i = _match(self.toks, self.i, "(", ")", self.end) + 1
                operand = self.unary()
                return Node("unary", start, self.i, op="cast", args=[operand])
            if op in ("sizeof", "alignof", "decltype", "typeid", "new", "delete"):
                self.i += 1
                if self.peek() == "(":
                    self.i = _match(self.toks, self.i, "(", ")", self.end) + 1
                return Node("unknown", start, self.i)
            return self.postfix(self.primary())
        finally:
            self.depth -= 1

    def _is_cast(self) -> bool:
        close = _match(self.toks, self.i, "(", ")", self.end)
        inner = self.toks[self.i + 1 : close]
        if not inner or close + 1 >= self.end:
            return False
        if not all(t.kind == "id" or t.text in ("::", "*", "&") for t in inner):
            return False
        words = [t.text for t in inner if t.kind == "id"]
        typeish = any(w in _TYPE_WORDS or w.endswith("_t") for w in words) or inner[-1].text in ("*", "&")
        nxt = self.toks[close + 1]
        return typeish and (nxt.kind in ("id", "num", "str") or nxt.text in ("(", "!", "-", "~"))

    def primary(self) -> Node:
        start = self.i
        if self.i >= self.end:
            return Node("unknown", start, start)
        t = self.toks[self.i]
        if t.kind == "num":
            self.i += 1
            return Node("num", start, self.i, value=_int_literal(t.text))
        if t.kind == "str":
            parts = []
            while self.i < self.end and self.toks[self.i].kind == "str":
                parts.append(_string_value(self.toks[self.i].text))
                self.i += 1
            return Node("str", start, self.i, value="".join(parts))
        if t.kind == "chr":
            self.i += 1
            return Node("unknown", start, self.i)
        if t.text == "(":
            self.i += 1
            inner = self.ternary()
            while self.peek() == ",":  # the comma operator: the last operand counts
                self.i += 1
                inner = self.ternary()
            if self.peek() == ")":
                self.i += 1
            inner.start, inner.end = start, self.i
            return inner
        if t.text == "{":
            close = _match(self.toks, self.i, "{", "}", self.end)
            items = self._args(self.i + 1, close)
            self.i = close + 1
            return Node("init", start, self.i, args=items)
        if t.text == "[":  # a lambda; ``value`` is the index of its body's '{' (or None)
            close = _match(self.toks, self.i, "[", "]", self.end)
            self.i = close + 1
            if self.peek() == "(":
                self.i = _match(self.toks, self.i, "(", ")", self.end) + 1
            while self.i < self.end and self.peek() not in ("{", ";", ")", ","):
                self.i += 1
            body = None
            if self.peek() == "{":
                body = self.i
                self.i = _match(self.toks, self.i, "{", "}", self.end) + 1
            return Node("lambda", start, self.i, value=body)
        if t.kind == "id" or t.text == "::":
            name = self._qualified_name()
            return Node("name", start, self.i, value=name)
        self.i += 1
        return Node("unknown", start, self.i)

    def _qualified_name(self) -> str:
        parts: list[str] = []
        while self.i < self.end:
            t = self.toks[self.i]
            if t.text == "::":
                parts.append("::")
                self.i += 1
                continue
            if t.kind != "id":
                break
            parts.append(t.text)
            self.i += 1
            if self.peek() == "<" and self._template_args_follow(t.text):
                self.i = _match_angle(self.toks, self.i, self.end) + 1
            if self.peek() != "::":
                break
        return "".join(parts)

    def _template_args_follow(self, name: str) -> bool:
        """Whether ``<`` after ``name`` opens template arguments rather than a comparison."""
        j = self.i
        depth = 0
        while j < min(self.end, self.i + MAX_TEMPLATE_SCAN):
            s = self.toks[j].text
            if s == "<":
                depth += 1
            elif s == ">":
                depth -= 1
            elif s == ">>":
                depth -= 2
            elif self.toks[j].kind == "op" and s not in ("::", ",", "*", "&", "(", ")", "-"):
                return False
            if depth <= 0:
                nxt = self.toks[j + 1].text if j + 1 < self.end else ""
                return name in _TEMPLATE_CALLEES or nxt in ("(", "::", "{")
            j += 1
        return False

    def postfix(self, node: Node) -> Node:
        start = node.start
        while self.i < self.end:
            s = self.peek()
            if s == "(":
                close = _match(self.toks, self.i, "(", ")", self.end)
                args = self._args(self.i + 1, close)
                self.i = close + 1
                node = Node("call", start, self.i, args=[node, *args])
            elif s in (".", "->") and self.i + 1 < self.end and self.toks[self.i + 1].kind == "id":
                self.i += 1
                name = self._qualified_name()
                node = Node("member", start, self.i, value=name, op=s, args=[node])
            elif s == "[":
                close = _match(self.toks, self.i, "[", "]", self.end)
                inner = self._inner(self.i + 1, close)
                self.i = close + 1
                node = Node("index", start, self.i, args=[node, inner])
            elif s in ("++", "--"):
                self.i += 1
            else:
                return node
        return node

    def _args(self, start: int, end: int) -> list[Node]:
        out: list[Node] = []
        j = start
        depth = 0
        arg_start = start
        while j <= end:
            s = self.toks[j].text if j < end else ","
            if j < end and s in ("(", "[", "{"):
                depth += 1
            elif j < end and s in (")", "]", "}"):
                depth -= 1
            elif s == "," and depth == 0:
                if j > arg_start:
                    out.append(self._inner(arg_start, j))
                arg_start = j + 1
            j += 1
        return out


def _string_value(text: str) -> str:
    """The contents of a string literal, escapes left as written (it is shown, not executed)."""
    m = re.match(r'(?:u8|u|U|L)?R"([^(]*)\((.*)\)\1"$', text, re.S)
    if m:
        return m.group(2)
    body = text.split('"', 1)[1] if '"' in text else text
    return body[:-1] if body.endswith('"') else body


def node_text(toks: list[Tok] | tuple[Tok, ...], node: Node) -> str:
    return join_tokens(toks[node.start : node.end])


def join_tokens(toks: list[Tok] | tuple[Tok, ...]) -> str:
    out: list[str] = []
    prev = ""
    for t in toks:
        s = t.text
        tight = (
            not out
            or s in (")", "]", ",", ";", ".", "->", "::", "(", "[")
            or prev in ("(", "[", ".", "->", "::", "!", "~")
        )
        if s == "(" and prev and (prev[-1].isalnum() or prev[-1] in "_>])"):
            tight = True
        elif s == "(" and prev:
            tight = False
        out.append(s if tight else " " + s)
        prev = s
    return "".join(out).strip()


# -- statements -------------------------------------------------------------------------------


@dataclass(slots=True)
class Stmt:
    """A statement. ``kind``: block, if, switch, case, return, throw, break, continue, loop, decl,
    expr, try, empty. ``line``/``end_line`` are the physical lines it spans."""

    kind: str
    line: int
    end_line: int
    start: int  # token index range
    end: int
    expr: Node | None = None  # if/switch/loop condition, return value, expression statement
    body: list[Stmt] = field(default_factory=list)  # block statements; if: [then, else?]
    names: tuple[str, ...] = ()  # decl: declared names; structured bindings give several
    type_text: str = ""  # decl: the declared type
    cond_end: int = 0  # if/switch: token index after ')' of the condition


class StmtParser:
    def __init__(self, toks: list[Tok] | tuple[Tok, ...]) -> None:
        self.toks = list(toks)
        self.depth = 0  # statements being read, nested in each other

    def block(self, i: int) -> tuple[Stmt, int]:
        """The block whose '{' is at ``i``; returns it and the index after its '}'."""
        close = _match(self.toks, i, "{", "}")
        stmts: list[Stmt] = []
        j = i + 1
        while j < close:
            stmt, nxt = self.statement(j, close)
            if nxt <= j:
                nxt = j + 1
            if stmt.kind != "empty":
                stmts.append(stmt)
            j = nxt
        t0 = self.toks[i]
        t1 = self.toks[min(close, len(self.toks) - 1)]
        return Stmt("block", t0.line, t1.line, i, close + 1, body=stmts), close + 1

    def _end_line(self, j: int) -> int:
        return self.toks[min(max(j - 1, 0), len(self.toks) - 1)].line

    def statement(self, i: int, end: int) -> tuple[Stmt, int]:
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise TooDeep(f"statements nested deeper than {MAX_NESTING} at line {self.toks[i].line}")
            return self._statement(i, end)
        finally:
            self.depth -= 1

    def _statement(self, i: int, end: int) -> tuple[Stmt, int]:
        toks = self.toks
        t = toks[i]
        s = t.text
        if s == "{":
            return self.block(i)
        if s == ";":
            return Stmt("empty", t.line, t.line, i, i + 1), i + 1
        if t.kind == "id":
            if s == "if":
                return self._if(i, end)
            if s == "switch" and i + 1 < end and toks[i + 1].text == "(":
                close = _match(toks, i + 1, "(", ")")
                cond = ExprParser(toks, i + 2, close).parse()
                body, nxt = self.statement(close + 1, end) if close + 1 < end else (None, close + 1)
                stmt = Stmt("switch", t.line, self._end_line(nxt), i, nxt, expr=cond, cond_end=close + 1)
                if body is not None:
                    stmt.body = [body]
                return stmt, nxt
            if s in ("case", "default"):
                j = i + 1
                while j < end and toks[j].text != ":":
                    j += 1
                if j + 1 < end and toks[j + 1].text == ":":  # default:: is not a label
                    j += 1
                expr = ExprParser(toks, i + 1, j).parse() if s == "case" else None
                return Stmt("case", t.line, toks[min(j, end - 1)].line, i, j + 1, expr=expr), j + 1
            if s in ("for", "while") and i + 1 < end and toks[i + 1].text == "(":
                close = _match(toks, i + 1, "(", ")")
                loop_cond = ExprParser(toks, i + 2, close).parse() if s == "while" else None
                body, nxt = self.statement(close + 1, end) if close + 1 < end else (None, close + 1)
                stmt = Stmt("loop", t.line, self._end_line(nxt), i, nxt, expr=loop_cond)
                if body is not None:
                    stmt.body = [body]
                return stmt, nxt
            if s == "do":
                body, nxt = self.statement(i + 1, end)
                # while (...) ;
                if nxt < end and toks[nxt].text == "while" and nxt + 1 < end and toks[nxt + 1].text == "(":
                    nxt = _match(toks, nxt + 1, "(", ")") + 1
                if nxt < end and toks[nxt].text == ";":
                    nxt += 1
                return Stmt("loop", t.line, self._end_line(nxt), i, nxt, body=[body]), nxt
            if s == "try" and i + 1 < end and toks[i + 1].text == "{":
                body, nxt = self.block(i + 1)
                handlers = [body]
                while nxt < end and toks[nxt].text == "catch":
                    j = nxt + 1
                    if j < end and toks[j].text == "(":
                        j = _match(toks, j, "(", ")") + 1
                    if j < end and toks[j].text == "{":
                        handler, nxt = self.block(j)
                        handlers.append(handler)
                    else:
                        break
                return Stmt("try", t.line, self._end_line(nxt), i, nxt, body=handlers), nxt
            if s in ("break", "continue", "return", "throw", "co_return", "goto"):
                j, nxt = self._simple_end(i, end)
                expr = (
                    ExprParser(toks, i + 1, j).parse() if s in ("return", "co_return") and j > i + 1 else None
                )
                kind = "return" if s == "co_return" else ("empty" if s == "goto" else s)
                return Stmt(kind, t.line, self._end_line(j), i, j, expr=expr), max(nxt, i + 1)
            if s in ("else",):  # a stray else (after a dropped #if branch): read what follows
                return (
                    self.statement(i + 1, end)
                    if i + 1 < end
                    else (Stmt("empty", t.line, t.line, i, i + 1), i + 1)
                )
        j, nxt = self._simple_end(i, end)
        return self._simple(i, j), max(nxt, i + 1)

    def _if(self, i: int, end: int) -> tuple[Stmt, int]:
        toks = self.toks
        j = i + 1
        if j < end and toks[j].text in ("constexpr", "consteval"):
            j += 1
        if j < end and toks[j].text == "!":
            j += 1
        if j >= end or toks[j].text != "(":
            k, nxt = self._simple_end(i, end)
            return Stmt("empty", toks[i].line, self._end_line(k), i, k), max(nxt, i + 1)
        close = _match(toks, j, "(", ")")
        cstart = j + 1
        # if (init; cond)
        depth = 0
        for k in range(j + 1, close):
            s = toks[k].text
            if s in ("(", "[", "{"):
                depth += 1
            elif s in (")", "]", "}"):
                depth -= 1
            elif s == ";" and depth == 0:
                cstart = k + 1
        cond = ExprParser(toks, cstart, close).parse()
        if close + 1 >= end:
            stmt = Stmt("if", toks[i].line, toks[close].line, i, close + 1, expr=cond, cond_end=close + 1)
            return stmt, close + 1
        then, nxt = self.statement(close + 1, end)
        body = [then]
        if nxt < end and toks[nxt].text == "else":
            other, nxt = self.statement(nxt + 1, end) if nxt + 1 < end else (None, nxt + 1)
            if other is not None:
                body.append(other)
        stmt = Stmt("if", toks[i].line, self._end_line(nxt), i, nxt, expr=cond, body=body, cond_end=close + 1)
        return stmt, nxt

    def _simple_end(self, i: int, end: int) -> tuple[int, int]:
        """Where a simple statement's tokens end (exclusive) and where the next one starts.

        It ends at ';', before the '}' closing its block, or after a complete macro call that is
        followed by a new line starting with a name (macros invoked without a semicolon).
        """
        toks = self.toks
        j = i
        while j < end:
            s = toks[j].text
            if s == ";":
                return j, j + 1
            if s in ("(", "[", "{"):
                k = _skip_balanced(toks, j)
                if (
                    s == "("
                    and k < end
                    and toks[k].line > toks[k - 1].line
                    and toks[k].kind == "id"
                    and j > i
                    and toks[j - 1].kind == "id"
                    and toks[k].text not in ("const", "override", "noexcept")
                ):
                    return k, k
                j = k
                continue
            if s == "}":
                return j, j
            j += 1
        return end, end

    def _simple(self, i: int, j: int) -> Stmt:
        """A declaration, an assignment or an expression statement over tokens ``i..j`` (exclusive)."""
        toks = self.toks
        end = min(j, len(toks))
        line = toks[i].line
        if end <= i:
            return Stmt("empty", line, line, i, end)
        end_line = toks[end - 1].line
        # Leading storage words do not matter here.
        k = i
        while k < end and toks[k].text in (
            "static",
            "constexpr",
            "inline",
            "thread_local",
            "register",
            "extern",
        ):
            k += 1
        parts = _top_level_split(toks, k, end, ",")
        first_start, first_end = parts[0]
        eq = _top_level_find(toks, first_start, first_end, "=")
        lhs_end = eq if eq is not None else first_end
        decl = _declarator(toks, first_start, lhs_end)
        if decl is not None:
            names, type_text = decl
            init = ExprParser(toks, eq + 1, first_end).parse() if eq is not None else None
            stmt = Stmt("decl", line, end_line, i, end, expr=init, names=names, type_text=type_text)
            # int a = 1, b = 2;
            for s2, e2 in parts[1:]:
                eq2 = _top_level_find(toks, s2, e2, "=")
                ids = [t.text for t in toks[s2 : eq2 if eq2 is not None else e2] if t.kind == "id"]
                if ids:
                    sub_init = ExprParser(toks, eq2 + 1, e2).parse() if eq2 is not None else None
                    stmt.body.append(
                        Stmt(
                            "decl",
                            line,
                            end_line,
                            s2,
                            e2,
                            expr=sub_init,
                            names=(ids[-1],),
                            type_text=type_text,
                        )
                    )
            return stmt
        # T name(args); / T name{args};
        ctor = _constructor_decl(toks, first_start, first_end)
        if ctor is not None:
            name, type_text, args_start, args_end = ctor
            init = ExprParser(toks, args_start, args_end).parse()
            return Stmt("decl", line, end_line, i, end, expr=init, names=(name,), type_text=type_text)
        expr = ExprParser(toks, k, end).parse()
        return Stmt("expr", line, end_line, i, end, expr=expr)


def _top_level_split(toks: list[Tok], start: int, end: int, sep: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    depth = 0
    angle = 0
    seg = start
    for k in range(start, end):
        s = toks[k].text
        if s in ("(", "[", "{"):
            depth += 1
        elif s in (")", "]", "}"):
            depth -= 1
        elif s == "<" and k > start and toks[k - 1].kind == "id" and _looks_template(toks, k, end):
            angle += 1
        elif s == ">" and angle:
            angle -= 1
        elif s == sep and depth == 0 and angle == 0:
            out.append((seg, k))
            seg = k + 1
    out.append((seg, end))
    return out


def _looks_template(toks: list[Tok], k: int, end: int) -> bool:
    close = _match_angle(toks, k, end)
    return (
        close < end
        and toks[close].text == ">"
        and all(
            t.kind in ("id", "num") or t.text in ("::", ",", "*", "&", "<", ">") for t in toks[k + 1 : close]
        )
    )


def _top_level_find(toks: list[Tok], start: int, end: int, what: str) -> int | None:
    depth = 0
    for k in range(start, end):
        s = toks[k].text
        if s in ("(", "[", "{"):
            depth += 1
        elif s in (")", "]", "}"):
            depth -= 1
        elif s == what and depth == 0:
            return k
    return None


def _declarator(toks: list[Tok], start: int, end: int) -> tuple[tuple[str, ...], str] | None:
    """``type name`` (or ``auto [a, b]``): the declared names and the type's text, else None."""
    if end - start < 2:
        return None
    last = toks[end - 1]
    if last.text == "]":  # structured binding: auto [a, b]  / const auto& [a, b]
        open_ = end - 1
        while open_ > start and toks[open_].text != "[":
            open_ -= 1
        names = tuple(t.text for t in toks[open_ + 1 : end - 1] if t.kind == "id")
        words = [t.text for t in toks[start:open_]]
        if names and "auto" in words:
            return names, " ".join(words)
        return None
    if last.kind != "id" or last.text in CONTROL:
        return None
    type_toks = toks[start : end - 1]
    if not type_toks:
        return None
    # Everything before the name must look like a type: names, ::, template args, *, &, const.
    depth = 0
    for t in type_toks:
        if t.text == "<":
            depth += 1
        elif t.text == ">":
            depth -= 1
        elif t.text == ">>":
            depth -= 2
        elif (depth == 0 and not (t.kind == "id" or t.text in ("::", "*", "&", "&&"))) or (
            depth > 0 and t.text in (";", "{", "}", "=", "&&", "||")
        ):
            return None
    if depth != 0 or type_toks[-1].text == "::" or toks[end - 2].text in (".", "->"):
        return None
    if type_toks[0].kind != "id" or type_toks[0].text in CONTROL:
        return None
    return (last.text,), join_tokens(type_toks)


def _constructor_decl(toks: list[Tok], start: int, end: int) -> tuple[str, str, int, int] | None:
    """``T name(args)`` or ``T name{args}``: (name, type text, args start, args end)."""
    if end - start < 4 or toks[end - 1].text not in (")", "}"):
        return None
    opener = "(" if toks[end - 1].text == ")" else "{"
    k = end - 1
    depth = 0
    while k > start:
        s = toks[k].text
        if s in (")", "}"):
            depth += 1
        elif s in ("(", "{"):
            depth -= 1
            if depth == 0:
                break
        k -= 1
    if toks[k].text != opener or k - start < 2:
        return None
    decl = _declarator(toks, start, k)
    if decl is None:
        return None
    return decl[0][0], decl[1], k + 1, end - 1
