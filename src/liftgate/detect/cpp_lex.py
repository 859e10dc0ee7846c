"""Lexing C/C++/CUDA sources down to what the preprocessor sees: directives, with exact line numbers.

Two speeds, because most files never deserve a full parse:

* `quick_index` works on raw bytes with one regular expression and answers the prefilter's
  questions (does the file mention ``__CUDA_ARCH``, which identifiers do its conditionals use,
  which macros does it define, what does it include). It over-approximates on purpose.
* `lex_directives` is exact: line continuations are spliced, comments removed (string and
  character literals respected), and every directive comes back with its physical line span.

Both take time linear in the file, however long its lines: a line is scanned once, whatever
the number of ``#`` or ``/*`` on it (one pathological case is bounded instead, see `LexLimit`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_SPLICE = re.compile(r"\\[ \t]*\r?\n")

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
    # Host code may query the device's capability (see `liftgate.detect.cpp_runtime`).
    has_capability: bool = False


# A file that can query the device's capability at run time, or call a helper named like one.
# Plain substring tests: a regex alternation is ten times slower on a large tree.
CAPABILITY_TOKENS = (
    b"ComputeCapability", b"COMPUTE_CAPABILITY", b"DeviceProp", b"DeviceProperties", b"cuDeviceComputeCapability",
    b"SMVersion", b"SmVersion", b"smVersion", b"sm_version", b"SM_VERSION", b"is_sm", b"isSM", b"IsSM", b"isSm",
    b"is_hopper", b"isHopper", b"is_blackwell", b"isBlackwell", b"compute_capability", b"computeCapability",
    b"getSMArch", b"get_sm_arch", b"sm_arch", b"smArch",
)  # fmt: skip


def mentions_capability(data: bytes) -> bool:
    """Might this C/C++ file query the device's capability (or call a helper that does)?"""
    return any(map(data.__contains__, CAPABILITY_TOKENS))  # no Python frame per token


def quick_index(data: bytes) -> QuickIndex:
    """Cheap, over-approximating facts about a C-family file (comments are not removed)."""
    has_arch = b"__CUDA_ARCH" in data
    has_capability = mentions_capability(data)
    if b"#" not in data:
        return QuickIndex(has_arch, frozenset(), frozenset(), (), (), has_capability)
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
        has_capability=has_capability,
    )


# Macros a build passes to the compiler: -DNAME in Python/CMake/shell text, CMake's
# (target_)compile_definitions(...), setuptools' define_macros=[("NAME", ...)].
_BUILD_DEFINE = re.compile(
    rb"-D[ \t]*([A-Za-z_]\w*)|compile_definitions\s*\(([^)]*)\)|define_macros\s*=\s*\[([^\]]*)\]"
)
BUILD_FILE_EXTENSIONS = frozenset(
    {
        ".py",
        ".cmake",
        ".txt",
        ".json",
        ".toml",
        ".cfg",
        ".sh",
        ".jinja",
        ".yaml",
        ".yml",
        ".mk",
        ".bzl",
        ".in",
    }
)


# A build file that computes the name of a -D (f"-D{name}", "-D" + name, ["-D", name], "-D%s"):
# it may pass any macro. `build_defines` marks it with COMPUTED_DEFINE (no identifier).
COMPUTED_DEFINE = "-D?"
_COMPUTED_DEFINE = re.compile(rb"""["']-D(?:\{|%|["'])""")


def build_defines(data: bytes) -> frozenset[str]:
    """Macro names a build file may define for the compiler (over-approximated on purpose), with
    `COMPUTED_DEFINE` among them when it computes a name."""
    names: set[str] = set()
    if b"-D" not in data and b"definitions" not in data and b"define_macros" not in data:
        return frozenset()
    if _COMPUTED_DEFINE.search(data) is not None:
        names.add(COMPUTED_DEFINE)
    for m in _BUILD_DEFINE.finditer(data):
        if m.group(1):
            names.add(m.group(1).decode("ascii"))
        else:
            body = m.group(2) or m.group(3) or b""
            names.update(i.decode("ascii") for i in _RAW_IDENT.findall(body))
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class Directive:
    """One preprocessor directive: keyword (``""`` for a null directive), the rest, and its lines."""

    keyword: str
    text: str
    line: int
    end_line: int
    offset: int = 0  # where the '#' is in the lexed text
    end_offset: int = 0  # where the directive's logical line ends


CONTINUATION = "\x01"  # marks a spliced backslash-newline, so physical lines can still be counted
_DIRECTIVE_START = re.compile(r"#[ \t]*([A-Za-z_]\w*)?")
# Openers of the constructs that can hide a '#' or carry a directive past its line end.
_RAW_OPEN = re.compile(r"R\"([^()\\ \t\n\x01\"]{0,16})\(")
LITERALS = re.compile(r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'")
# Precise comment removal for small slices (a directive's text, a region's lines).
_COMMENT_OR_LITERAL = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_BLANKABLE = re.compile(r"[^\n\x01]")


def _uncomment(match: re.Match[str]) -> str:
    text = match.group(0)
    if text[0] == "/":
        return " " + "\n" * text.count("\n") + CONTINUATION * text.count(CONTINUATION)
    return text


def strip_comments(text: str) -> str:
    """Comments become one space (newlines and splice marks kept); literals are respected."""
    return _COMMENT_OR_LITERAL.sub(_uncomment, text) if "/" in text else text


class LexLimit(ValueError):
    """A line the lexer cannot read in linear time (a character literal cut by thousands of
    comment openers): the file is not analysed."""


_PREFIX_FALLBACK = 1 << 14  # characters re-read for one opener inside a long character literal
_GAP = re.compile(r"[^\"'\n]*")


class _Prefix:
    """`_opens_in_code` of ``text[base:pos]`` for increasing ``pos``, each character read once.

    What `_opens_in_code` removes with ``LITERALS.sub`` is a literal of the line as a whole, up to
    the first literal that ``pos`` cuts; the text between literals is summarised as it is passed.
    """

    __slots__ = ("base", "last", "pos", "quote", "slashes", "text")

    def __init__(self, text: str, base: int) -> None:
        self.text = text
        self.base = base
        self.pos = base  # text[base:pos] is summarised below, literals removed
        self.quote = False  # an unmatched '"' in it
        self.slashes = False  # "//" in it
        self.last = ""  # its last character

    def opens_in_code(self, at: int) -> bool:
        text = self.text
        while self.pos < at and not self.quote:
            gap = _GAP.match(text, self.pos, at)
            assert gap is not None
            if gap.end() > self.pos:
                chunk = gap.group(0)
                self.slashes = self.slashes or "//" in chunk or (self.last == "/" and chunk[0] == "/")
                self.last = chunk[-1]
                self.pos = gap.end()
                continue
            literal = LITERALS.match(text, self.pos)
            if literal is None:  # no closing quote on the line: the quote stays
                if text[self.pos] == '"':
                    self.quote = True
                self.slashes = self.slashes or (self.last == "/" and text[self.pos] == "/")
                self.last = text[self.pos]
                self.pos += 1
            elif literal.end() <= at:
                self.pos = literal.end()  # removed whole
            elif text[self.pos] == '"':
                return False  # cut by ``at``: its opening quote stays
            else:
                return self._cut_character_literal(at)
        return not self.quote and not self.slashes

    def _cut_character_literal(self, at: int) -> bool:
        """``at`` is inside a character literal: its quote stays and the rest reads as code."""
        if at - self.pos > _PREFIX_FALLBACK:
            raise LexLimit(f"a line with a character literal of more than {_PREFIX_FALLBACK:,} characters")
        tail = LITERALS.sub("", self.text[self.pos : at])
        if self.quote or '"' in tail:
            return False
        return not (self.slashes or "//" in tail or (self.last == "/" and tail[:1] == "/"))


def _opens_in_code(prefix: str) -> bool:
    """Whether an opener after ``prefix`` (the line up to it) is code, not inside a literal or // comment."""
    if '"' in prefix or "'" in prefix:
        prefix = LITERALS.sub("", prefix)
        if '"' in prefix:
            return False
    return "//" not in prefix


def _raw_string_at(text: str, pos: int) -> str | None:
    """The delimiter if a raw string literal (``R"d(``, ``u8R"(`` …) opens at ``pos`` (its 'R')."""
    m = _RAW_OPEN.match(text, pos)
    if m is None:
        return None
    before = pos - 1
    while before >= 0 and pos - before <= 2 and text[before] in "u8UL":
        before -= 1
    if before >= 0 and (text[before].isalnum() or text[before] == "_"):
        return None  # part of an identifier such as FOOR"..."
    return m.group(1)


def hidden_spans(text: str) -> list[tuple[int, int]]:
    """Spans of block comments and raw string literals, in order: what a '#' inside is not.

    Only openers are searched for (with str.find: rare and cheap), each checked against its
    line's prefix, so the cost follows the number of block comments, not the size of the file.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    comment = text.find("/*")
    raw = text.find('R"')
    line_start = newline_from = 0  # the start of the line of the last opener, and where it was found
    prefix = _Prefix(text, 0)
    while comment >= 0 or raw >= 0:
        if comment >= 0 and (raw < 0 or comment < raw):
            start, delimiter = comment, None
        else:
            start, delimiter = raw, _raw_string_at(text, raw)
            if delimiter is None:
                raw = text.find('R"', raw + 2)
                continue
        newline = text.rfind("\n", newline_from, start)
        line_start = newline + 1 if newline >= 0 else line_start
        newline_from = start
        base = max(line_start, spans[-1][1] if spans else 0)
        if prefix.base != base:
            prefix = _Prefix(text, base)
        if not prefix.opens_in_code(start):
            pos = start + 2
        else:
            if delimiter is None:
                end = text.find("*/", start + 2)
                end = len(text) if end < 0 else end + 2
            else:
                close = text.find(")" + delimiter + '"', start + 3 + len(delimiter))
                end = len(text) if close < 0 else close + len(delimiter) + 2
            spans.append((start, end))
            pos = end
        if comment >= 0 and comment < pos:
            comment = text.find("/*", pos)
        if raw >= 0 and raw < pos:
            raw = text.find('R"', pos)
    return spans


class LexedFile:
    """A file's directives, and on demand its comment-free physical lines (for region inspection)."""

    __slots__ = ("_lines", "_text", "directives", "hidden")

    def __init__(self, directives: tuple[Directive, ...], text: str, hidden: list[tuple[int, int]]) -> None:
        self.directives = directives
        self._text = text
        self.hidden = hidden
        self._lines: tuple[str, ...] | None = None

    @property
    def lines(self) -> tuple[str, ...]:
        """Comment-free physical lines (index 0 = line 1); a directive's continuation lines are blank."""
        if self._lines is None:
            self._lines = _physical_lines(self._code(0, len(self._text)))
        return self._lines

    def code_between(self, start: int, end: int) -> tuple[str, ...]:
        """Comment-free physical lines of the text between two offsets (e.g. two directives)."""
        if start >= end:
            return ()
        return _physical_lines(self._code(start, end))

    def _code(self, start: int, end: int) -> str:
        pieces: list[str] = []
        pos = start
        for h_start, h_end in self.hidden:
            if h_end <= start or h_start >= end:
                continue
            pieces.append(self._text[pos : max(pos, h_start)])
            hidden = self._text[max(h_start, start) : min(h_end, end)]
            if hidden.startswith(("R", "u", "L")) or '"' in hidden[:4]:
                pieces.append(hidden)  # a raw string is code
            else:
                pieces.append(" " + _BLANKABLE.sub("", hidden))
            pos = min(h_end, end)
        pieces.append(self._text[pos:end])
        return strip_comments("".join(pieces))


def lex_directives(text: str) -> LexedFile:
    """Exact directive extraction from decoded source text.

    Lines are spliced first (a backslash-newline becomes a CONTINUATION mark, so physical line
    numbers stay countable), then block comments and raw strings are located; a '#' is a
    directive when only whitespace or comments precede it on its line and it is not hidden.
    """
    if CONTINUATION in text:
        text = text.replace(CONTINUATION, " ")
    if "\\" in text:
        text = _SPLICE.sub(CONTINUATION, text)
    hidden = hidden_spans(text) if ("/*" in text or 'R"' in text) else []
    hidden_starts = [h[0] for h in hidden]
    directives: list[Directive] = []
    line = 1
    counted = 0
    spliced = CONTINUATION in text
    # Per line, found once: where it starts, its first character that is not a blank (" \t\f\v\r"),
    # and its first that is neither whitespace nor hidden (a comment, a raw string).
    line_start = newline_from = 0
    first_blank_end = first_code = -1
    for m in _DIRECTIVE_START.finditer(text):
        start = m.start()
        if hidden:
            k = bisect.bisect_right(hidden_starts, start) - 1
            if k >= 0 and hidden[k][1] > start:
                continue
        newline = text.rfind("\n", newline_from, start)
        if newline >= 0:
            line_start = newline + 1
            first_blank_end = first_code = -1
        newline_from = start
        if start != line_start:
            if first_blank_end < 0:
                blanks = _BLANKS.match(text, line_start)
                first_blank_end = blanks.end() if blanks else line_start
            if first_blank_end < start:  # text before the '#' that is not blank: maybe only comments
                if not hidden:
                    continue
                if first_code < 0:
                    first_code = _first_code(text, line_start, hidden, hidden_starts)
                if first_code < start or text.find("*/", line_start, start) < 0:
                    continue
        # The directive runs to the end of its logical line, or past it through a block comment.
        end = text.find("\n", m.end())
        end = len(text) if end < 0 else end
        if hidden:
            k = bisect.bisect_left(hidden_starts, m.end())
            while k < len(hidden) and hidden[k][0] < end:
                if hidden[k][1] > end:
                    end = text.find("\n", hidden[k][1])
                    end = len(text) if end < 0 else end
                k += 1
        line += text.count("\n", counted, start) + (
            text.count(CONTINUATION, counted, start) if spliced else 0
        )
        counted = start
        rest = text[m.end() : end]
        extra_lines = rest.count("\n") + (rest.count(CONTINUATION) if spliced else 0)
        if "/" in rest:
            rest = strip_comments(rest)
        if extra_lines:
            rest = rest.replace(CONTINUATION, " ").replace("\n", " ")
        directives.append(
            Directive(
                keyword=m.group(1) or "",
                text=rest.strip(),
                line=line,
                end_line=line + extra_lines,
                offset=start,
                end_offset=end,
            )
        )
    return LexedFile(tuple(directives), text, hidden)


_BLANKS = re.compile(r"[ \t\f\v\r]*")


def _first_code(text: str, pos: int, hidden: list[tuple[int, int]], hidden_starts: list[int]) -> int:
    """The first position from ``pos`` that is neither whitespace nor inside a hidden span."""
    n = len(text)
    while pos < n:
        k = bisect.bisect_right(hidden_starts, pos) - 1
        if k >= 0 and hidden[k][1] > pos:
            pos = hidden[k][1]
        elif text[pos].isspace():
            pos += 1
        else:
            break
    return pos


def strip_comments_in(prefix: str, text: str, offset: int, hidden: list[tuple[int, int]]) -> str:
    """``prefix`` (at ``offset`` in ``text``) without the block comments that cover it."""
    out = []
    pos = offset
    end = offset + len(prefix)
    for h_start, h_end in hidden:
        if h_end <= offset or h_start >= end:
            continue
        out.append(text[pos:h_start])
        pos = min(h_end, end)
    out.append(text[pos:end])
    return "".join(out)


def _physical_lines(text: str) -> tuple[str, ...]:
    """Physical lines; a directive's continuation lines are blank (they belong to the line above)."""
    if CONTINUATION not in text:
        return tuple(text.split("\n"))
    out: list[str] = []
    for logical in text.split("\n"):
        if CONTINUATION not in logical:
            out.append(logical)
            continue
        parts = logical.split(CONTINUATION)
        if logical.lstrip().startswith("#"):
            out.append(" ".join(parts))
            out.extend("" for _ in parts[1:])
        else:
            out.extend(parts)
    return tuple(out)
