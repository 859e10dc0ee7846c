"""C++ tokens, bracket matching and function definitions, for `liftgate.detect.cpp_syntax`.

The tokenizer keeps what host-side dispatch code is made of (identifiers, numbers, string and
character literals, operators) with their lines, outside comments and preprocessor directives;
the caller says which lines the host pass compiles (see `liftgate.detect.cuda.Region`).
`find_functions` finds function definitions at namespace and class scope (nested classes too).

Hostile input is bounded: brackets are matched once per token list (a table, not a scan per
bracket), scopes nested deeper than `MAX_NESTING` are passed over, and template arguments are
looked for within `MAX_TEMPLATE_SCAN` tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

# Far above real host code (vLLM's and FlashInfer's dispatch nests statements ~8 deep and
# expressions ~10; CUTLASS's longest template argument list is a few hundred tokens).
MAX_NESTING = 100
MAX_TEMPLATE_SCAN = 4_096


class TooDeep(Exception):
    """Statements or scopes nested deeper than MAX_NESTING: the construct is not read."""


# Every token, and every newline (to count lines), as plain strings: `re.findall` does the
# scanning in C, several times faster than a Python loop over match objects on CUTLASS-sized
# headers. The blanks before a token are taken by a possessive run outside the token's group:
# left to findall, each blank was a failed try of every alternative (half of the time on
# 120 MB of FlashInfer's headers). A raw string literal needs a back-reference (a second group,
# which findall would return as well), so files that have one use `_TOKEN_RAW`.
_TOKEN_BODY = r"""
  | //[^\n]*|/\*.*?(?:\*/|\Z)
  | (?:u8|u|U|L)?"(?:\\.|[^"\\\n])*"?
  | (?:u8|u|U|L)?'(?:\\.|[^'\\\n])*'?
  | [A-Za-z_$][\w$]*
  | \.?\d(?:[eEpP][+-]|[\w.']|)*
  | ::|->\*?|\.\.\.|<<=|>>=|<=>|&&|\|\||==|!=|<=|>=|<<|>>|\+\+|--|[-+*/%&|^]=|\S
"""
_TOKEN = re.compile(r"[^\S\n]*+(\n|\\\r?\n" + _TOKEN_BODY + ")", re.X | re.S)
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
    new_tok = tuple.__new__  # Tok(...) without the Python frame of a NamedTuple's __new__
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
            append(new_tok(Tok, (kind, tok, start_line, region)))
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


def match_bracket(
    toks: list[Tok] | tuple[Tok, ...], i: int, open_: str, close: str, end: int | None = None
) -> int:
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


def skip_balanced(toks: list[Tok], i: int) -> int:
    """Index after the bracket group starting at ``i``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    return match_bracket(toks, i, toks[i].text, pairs[toks[i].text]) + 1


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
                    j = match_angle(toks, j, end)
                j += 1
            name = "::".join(parts)
            if j < end and toks[j].text == "{":
                close = match_bracket(toks, j, "{", "}")
                if depth < MAX_NESTING:
                    scope = f"{prefix}{name}::" if name else prefix
                    _scan_scope(toks, j + 1, close, path, out, scope, depth + 1)
                i = close + 1
                continue
            i = j + 1 if j < end and toks[j].text == ";" else i + 1
            continue
        if t.text == "extern" and i + 2 < end and toks[i + 1].kind == "str" and toks[i + 2].text == "{":
            close = match_bracket(toks, i + 2, "{", "}")
            if depth < MAX_NESTING:
                _scan_scope(toks, i + 3, close, path, out, prefix, depth + 1)
            i = close + 1
            continue
        if t.text == "{":
            i = match_bracket(toks, i, "{", "}") + 1
            continue
        if t.text == "template" and i + 1 < end and toks[i + 1].text == "<":
            i = match_angle(toks, i + 1, end) + 1  # template <typename T, typename = void>
            continue
        if t.text == "=" or t.text == "enum":
            # an initializer or an enum: skip to the end of the declaration
            j = i + 1
            while j < end and toks[j].text != ";":
                if toks[j].text in ("{", "(", "["):
                    j = skip_balanced(toks, j)
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
            close = match_angle(toks, i + 1, end)
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
            i = skip_balanced(toks, i + 1)
            continue
        i += 1


def match_angle(toks: list[Tok] | tuple[Tok, ...], i: int, end: int) -> int:
    """Index of the ``>`` closing template arguments opened at ``i`` (bounded by MAX_TEMPLATE_SCAN)."""
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
    close = match_bracket(toks, paren, "(", ")")
    j = close + 1
    inits: list[tuple[str, tuple[Tok, ...]]] = []
    while j < end:
        s = toks[j].text
        if s in _QUALIFIERS:
            j += 1
            if s in ("noexcept", "throw") and j < end and toks[j].text == "(":
                j = skip_balanced(toks, j)
            continue
        if s == "->":  # trailing return type
            j += 1
            while j < end and toks[j].text not in ("{", ";", "="):
                if toks[j].text == "<":
                    j = match_angle(toks, j, end)
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
                k = match_bracket(toks, j, toks[j].text, closing)
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
    body_end = match_bracket(toks, j, "{", "}")
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
