"""Lexing C/C++/CUDA sources down to what the preprocessor sees: directives, with exact line numbers.

Two speeds, because most files never deserve a full parse:

* `quick_index` works on raw bytes with one regular expression and answers the prefilter's
  questions (does the file mention ``__CUDA_ARCH``, which identifiers do its conditionals use,
  which macros does it define, what does it include). It over-approximates on purpose.
* `lex_directives` is exact: line continuations are spliced, comments removed (string and
  character literals respected), and every directive comes back with its physical line span.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_SPLICE = re.compile(r"\\[ \t]*\r?\n")
# Comments are removed; literals are matched so that a "//" or "/*" inside one is not a comment.
_COMMENT_OR_LITERAL = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'",
    re.S,
)
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*([A-Za-z_]\w*)?([^\n]*)", re.M)
_IDENT = re.compile(r"[A-Za-z_]\w*")

# Unanchored on purpose: a literal '#' lets the regex engine skip ahead, ~15x faster than a
# multiline '^' anchor; whether the '#' starts a line is checked per match.
_RAW_DIRECTIVE = re.compile(rb"#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef|define|include)\b([^\n]*)")
_RAW_IDENT = re.compile(rb"[A-Za-z_]\w*")
_RAW_INCLUDE = re.compile(rb"\s*[<\"]([^>\"]+)[>\"]")

CONDITIONAL_KEYWORDS = frozenset({"if", "ifdef", "ifndef", "elif", "elifdef", "elifndef"})


@dataclass(frozen=True, slots=True)
class QuickIndex:
    """What the byte-level prefilter learned about one file."""

    has_arch: bool
    condition_idents: frozenset[str]
    defines: frozenset[str]
    includes: tuple[str, ...]
    # For each macro defined: the identifiers in its body (what it can expand into).
    define_bodies: tuple[tuple[str, frozenset[str]], ...] = ()


def quick_index(data: bytes) -> QuickIndex:
    """Cheap, over-approximating facts about a C-family file (comments are not removed)."""
    has_arch = b"__CUDA_ARCH" in data
    if b"#" not in data:
        return QuickIndex(has_arch, frozenset(), frozenset(), ())
    if b"\\\n" in data or b"\\\r\n" in data:
        data = re.sub(rb"\\[ \t]*\r?\n", b" ", data)
    idents: set[bytes] = set()
    defines: set[bytes] = set()
    bodies: dict[bytes, set[bytes]] = {}
    includes: list[str] = []
    for match in _RAW_DIRECTIVE.finditer(data):
        start = match.start()
        line_start = data.rfind(b"\n", 0, start) + 1
        if start != line_start and data[line_start:start].strip():
            continue
        keyword, rest = match.group(1), match.group(2)
        if keyword == b"define":
            found = _RAW_IDENT.findall(rest)
            if found:
                defines.add(found[0])
                bodies.setdefault(found[0], set()).update(found[1:])
        elif keyword == b"include":
            inc = _RAW_INCLUDE.match(rest)
            if inc:
                includes.append(inc.group(1).decode("utf-8", "replace"))
        else:
            idents.update(_RAW_IDENT.findall(rest))
    return QuickIndex(
        has_arch=has_arch,
        condition_idents=frozenset(i.decode("ascii") for i in idents),
        defines=frozenset(d.decode("ascii") for d in defines),
        includes=tuple(includes),
        define_bodies=tuple(
            (n.decode("ascii"), frozenset(b.decode("ascii") for b in body)) for n, body in bodies.items()
        ),
    )


@dataclass(frozen=True, slots=True)
class Directive:
    """One preprocessor directive: keyword (``""`` for a null directive), the rest, and its lines."""

    keyword: str
    text: str
    line: int
    end_line: int


@dataclass(frozen=True, slots=True)
class LexedFile:
    directives: tuple[Directive, ...]
    # The comment-free text split into physical lines (index 0 = line 1), for region inspection.
    lines: tuple[str, ...]


def _strip(match: re.Match[str]) -> str:
    # Same length, newlines kept: offsets stay valid for the splice table and line counting.
    text = match.group(0)
    if text[0] == "/":
        return " " * len(text) if text[1] == "/" else _NON_NEWLINE.sub(" ", text)
    return text


_NON_NEWLINE = re.compile(r"[^\n]")


def lex_directives(text: str) -> LexedFile:
    """Exact directive extraction from decoded source text."""
    splices: list[int] = []
    if "\\" in text:
        pieces: list[str] = []
        last = 0
        removed = 0
        for m in _SPLICE.finditer(text):
            pieces.append(text[last : m.start()])
            removed += m.end() - m.start()
            splices.append(m.start() - (removed - (m.end() - m.start())))
            last = m.end()
        if splices:
            pieces.append(text[last:])
            text = "".join(pieces)
    if "/" in text:
        text = _COMMENT_OR_LITERAL.sub(_strip, text)
    directives: list[Directive] = []
    line = 1
    pos = 0
    for m in _DIRECTIVE.finditer(text):
        start = m.start()
        line += text.count("\n", pos, start)
        pos = start
        # Spliced newlines before this point shift the physical line numbers.
        before = bisect.bisect_right(splices, start) if splices else 0
        within = (bisect.bisect_right(splices, m.end()) - before) if splices else 0
        physical = line + before
        directives.append(
            Directive(
                keyword=m.group(1) or "",
                text=m.group(2).strip(),
                line=physical,
                end_line=physical + within,
            )
        )
    physical_lines = _physical_lines(text, splices)
    return LexedFile(tuple(directives), physical_lines)


def _physical_lines(text: str, splices: list[int]) -> tuple[str, ...]:
    """Lines of the comment-free text, re-expanded so that index i is physical line i+1."""
    lines = text.split("\n")
    if not splices:
        return tuple(lines)
    out: list[str] = []
    offset = 0
    splice_iter = iter(splices)
    next_splice = next(splice_iter, None)
    for logical in lines:
        end = offset + len(logical)
        out.append(logical)
        while next_splice is not None and offset <= next_splice <= end:
            out.append("")  # a continuation line belongs to the directive/statement above it
            next_splice = next(splice_iter, None)
        offset = end + 1
    return tuple(out)


def identifiers(text: str) -> list[str]:
    return _IDENT.findall(text)
