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

Tokens, bracket matching and function definitions are in `liftgate.detect.cpp_tokens` (their
names are importable from here too); this module reads expressions and statements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from liftgate.detect.cpp_tokens import (
    CONTROL,
    MAX_NESTING,
    MAX_TEMPLATE_SCAN,
    FuncDef,
    Tok,
    TooDeep,
    find_functions,
    forget_tables,
    match_angle,
    match_bracket,
    skip_balanced,
    tokenize,
)
from liftgate.detect.ppexpr import BINARY_PRECEDENCE

__all__ = [
    "CONTROL",
    "MAX_EXPRESSION_DEPTH",
    "MAX_NESTING",
    "MAX_TEMPLATE_SCAN",
    "ExprParser",
    "FuncDef",
    "Node",
    "Stmt",
    "StmtParser",
    "Tok",
    "TooDeep",
    "find_functions",
    "forget_tables",
    "join_tokens",
    "node_text",
    "string_value",
    "tokenize",
]

# Far above real host code (expressions nest ~10 deep in vLLM's and FlashInfer's dispatch).
MAX_EXPRESSION_DEPTH = 200
_MAX_LITERAL_CHARS = 72  # 0b and 64 binary digits, with digit separators and a suffix

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
                self.i = match_bracket(self.toks, self.i, "(", ")", self.end) + 1
                operand = self.unary()
                return Node("unary", start, self.i, op="cast", args=[operand])
            if op in ("sizeof", "alignof", "decltype", "typeid", "new", "delete"):
                self.i += 1
                if self.peek() == "(":
                    self.i = match_bracket(self.toks, self.i, "(", ")", self.end) + 1
                return Node("unknown", start, self.i)
            return self.postfix(self.primary())
        finally:
            self.depth -= 1

    def _is_cast(self) -> bool:
        close = match_bracket(self.toks, self.i, "(", ")", self.end)
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
                parts.append(string_value(self.toks[self.i].text))
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
            close = match_bracket(self.toks, self.i, "{", "}", self.end)
            items = self._args(self.i + 1, close)
            self.i = close + 1
            return Node("init", start, self.i, args=items)
        if t.text == "[":  # a lambda; ``value`` is the index of its body's '{' (or None)
            close = match_bracket(self.toks, self.i, "[", "]", self.end)
            self.i = close + 1
            if self.peek() == "(":
                self.i = match_bracket(self.toks, self.i, "(", ")", self.end) + 1
            while self.i < self.end and self.peek() not in ("{", ";", ")", ","):
                self.i += 1
            body = None
            if self.peek() == "{":
                body = self.i
                self.i = match_bracket(self.toks, self.i, "{", "}", self.end) + 1
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
                self.i = match_angle(self.toks, self.i, self.end) + 1
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
                close = match_bracket(self.toks, self.i, "(", ")", self.end)
                args = self._args(self.i + 1, close)
                self.i = close + 1
                node = Node("call", start, self.i, args=[node, *args])
            elif s in (".", "->") and self.i + 1 < self.end and self.toks[self.i + 1].kind == "id":
                self.i += 1
                name = self._qualified_name()
                node = Node("member", start, self.i, value=name, op=s, args=[node])
            elif s == "[":
                close = match_bracket(self.toks, self.i, "[", "]", self.end)
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


def string_value(text: str) -> str:
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
        close = match_bracket(self.toks, i, "{", "}")
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
                close = match_bracket(toks, i + 1, "(", ")")
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
                close = match_bracket(toks, i + 1, "(", ")")
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
                    nxt = match_bracket(toks, nxt + 1, "(", ")") + 1
                if nxt < end and toks[nxt].text == ";":
                    nxt += 1
                return Stmt("loop", t.line, self._end_line(nxt), i, nxt, body=[body]), nxt
            if s == "try" and i + 1 < end and toks[i + 1].text == "{":
                body, nxt = self.block(i + 1)
                handlers = [body]
                while nxt < end and toks[nxt].text == "catch":
                    j = nxt + 1
                    if j < end and toks[j].text == "(":
                        j = match_bracket(toks, j, "(", ")") + 1
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
        close = match_bracket(toks, j, "(", ")")
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
                k = skip_balanced(toks, j)
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
    close = match_angle(toks, k, end)
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
