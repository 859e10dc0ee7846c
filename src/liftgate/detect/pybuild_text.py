"""The source text of the Python file the py-build detector reads: the text of a node, as gates quote it."""

from __future__ import annotations

import ast
import re

from liftgate.detect.pybuild_syntax import node_span

# Line breaks as the parser counts them (not str.splitlines(), which also breaks at \f and \x1c).
_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class FileText:
    """One Python file of a package, and the source text of its nodes (whitespace and comments collapsed)."""

    def __init__(self, package: str, version: str | None, path: str, text: str) -> None:
        self.package = package
        self.version = version
        self.path = path
        self.text = text
        self._source_lines: list[str] | None = None
        self._encoded_lines: dict[int, bytes] = {}

    def _source(self, node: ast.AST) -> str:
        start, end = node_span(node).start, node_span(node).end
        col = getattr(node, "col_offset", None)
        end_col = getattr(node, "end_col_offset", None)
        if col is None or end_col is None:
            return ast.unparse(node)
        return self._segment(start, col, end, end_col) or ast.unparse(node)

    def _segment(self, start: int, col: int, end: int, end_col: int) -> str | None:
        """Source text between two AST positions (columns are UTF-8 byte offsets), whitespace collapsed."""
        lines = self._lines()
        if not (1 <= start <= end <= len(lines)):
            return None
        if start == end:
            text = self._line_bytes(start)[col:end_col].decode("utf-8", "replace")
        else:
            first = self._line_bytes(start)[col:].decode("utf-8", "replace")
            middle = "".join(lines[start : end - 1])
            last = self._line_bytes(end)[:end_col].decode("utf-8", "replace")
            text = first + middle + last
            if "#" in text:
                text = _COMMENT_RE.sub(lambda m: m.group("string") or "", text)
        return _tidy(text)

    def _lines(self) -> list[str]:
        if self._source_lines is None:
            self._source_lines = _LINE_RE.findall(self.text)
        return self._source_lines

    def _line_bytes(self, line: int) -> bytes:
        cached = self._encoded_lines.get(line)
        if cached is None:
            cached = self._lines()[line - 1].encode("utf-8", "surrogatepass")
            self._encoded_lines[line] = cached
        return cached


def _tidy(text: str) -> str:
    """Collapse whitespace and drop what that leaves inside brackets: ``f( x=[ 9, 10, ] )`` -> ``f(x=[9, 10])``."""
    collapsed = " ".join(text.split())
    return _BRACKET_SPACE_RE.sub(_tidy_match, collapsed)


# Comments inside a multi-line construct; strings first, so a '#' inside one stays.
_COMMENT_RE = re.compile(r"""(?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|#[^\n]*""")
# Strings first, so brackets and spaces inside them stay as written.
_BRACKET_SPACE_RE = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')|(?P<open>[(\[{]) |(?P<comma>,?) (?P<close>[)\]}])"""
)


def _tidy_match(match: re.Match[str]) -> str:
    if match.group("string") is not None:
        return match.group("string")
    if match.group("open") is not None:
        return match.group("open")
    # A trailing comma goes before ] and }, and stays before ) where it makes a one-element tuple.
    close = match.group("close")
    return f"{match.group('comma')}{close}" if close == ")" else close
