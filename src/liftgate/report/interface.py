"""The report stage's contract: output formats, rendering options and the `Formatter` protocol.

Every ``--format`` value is an `OutputFormat` member with exactly one formatter behind it
(see `liftgate.report.formatter_for`); every formatter takes the same `RenderOptions`, so a
filter chosen on the command line means the same thing in a terminal table and in SARIF.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Protocol

from liftgate.model import GateKind, Report


class OutputFormat(str, enum.Enum):
    """What ``--format`` accepts; one formatter per member."""

    TABLE = "table"
    JSON = "json"
    SARIF = "sarif"
    MARKDOWN = "markdown"


class Show(str, enum.Enum):
    """Which gates a report shows, judged against every target of the report."""

    LOSSES = "losses"  # a loss (or an unknown outcome) for at least one target: what the user came for
    # excluded or unknown for at least one target, alternatives included (and unsafe admissions)
    EXCLUDED = "excluded"
    ADMITTED = "admitted"  # admitted for every target
    ALL = "all"
    TRACED = "traced"  # the gates a traced run evaluated (scan --trace)


class VerdictFilter(str, enum.Enum):
    """What ``--verdict`` accepts: a verdict kind, or ``hazard`` (a verdict that carries a hazard)."""

    LIFTABLE = "liftable"
    BLOCKED = "blocked"
    UNKNOWN = "unknown"
    UNSAFE = "unsafe"
    HAZARD = "hazard"


class GroupBy(str, enum.Enum):
    """How the gates are grouped (``scan --by``)."""

    FILE = "file"  # by package and file
    CHAIN = "chain"  # by gate chain: the gates to lift together for one feature


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """How to render a report. ``kinds=None`` means every gate kind; ``width=None`` means 120 columns.

    ``kinds``, ``paths`` and ``exclude_paths`` set the scope: the gates outside it are neither
    listed nor counted (the JSON ``summary`` excepted, which counts the whole scan). ``show`` and
    ``verdicts`` only choose which gates of the scope are listed. ``paths`` and ``exclude_paths``
    are `fnmatch` patterns matched against a gate's package-relative path (``*`` crosses ``/``).
    """

    show: Show = Show.EXCLUDED  # the CLI's default is Show.LOSSES (`liftgate scan`)
    kinds: frozenset[GateKind] | None = None
    color: bool = False
    width: int | None = None
    verbose: bool = False
    by: GroupBy = GroupBy.FILE
    verdicts: frozenset[VerdictFilter] | None = None  # None: whatever the verdict, judged or not
    paths: tuple[str, ...] = ()  # empty: every path
    exclude_paths: tuple[str, ...] = ()

    @property
    def narrows_scope(self) -> bool:
        """Whether ``kinds`` or a path pattern leaves gates out of the counts."""
        return self.kinds is not None or bool(self.paths) or bool(self.exclude_paths)


class Formatter(Protocol):
    """Turns a report into text. Pure: no I/O, the same input always gives the same output."""

    def format(self, report: Report, options: RenderOptions) -> str: ...


# What a report must not print as it is: lone surrogates (a file name that is not UTF-8, decoded
# with surrogateescape: no file or terminal can encode them), and control characters, which
# would reach a terminal (``\x1b]0;`` retitles it, ``\x1b[2J`` clears it) or break a line.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSAFE_KEEPING_SGR = re.compile("\x1b\\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escaped(char: str, backslash: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte the name really has
        return f"{backslash}x{code - 0xDC00:02x}"
    if 0xD800 <= code <= 0xDFFF:
        return f"{backslash}u{code:04x}"
    return f"{backslash}x{code:02x}"


def printable(text: str, *, keep_sgr: bool = False) -> str:
    """``text`` safe to write anywhere: lone surrogates and control characters but newline and tab
    as backslash escapes (``caf\\xe9.cu``, as `liftgate.sources` lists such names). ``keep_sgr``
    keeps the colour sequences (``ESC [ … m``) a coloured table is made of."""
    pattern = _UNSAFE_KEEPING_SGR if keep_sgr else _UNSAFE
    if pattern.search(text) is None:
        return text

    def escape(match: re.Match[str]) -> str:
        found = match.group()
        return found if len(found) > 1 else _escaped(found, "\\")

    return pattern.sub(escape, text)


def printable_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) safe to write: a lone surrogate becomes
    the characters ``\\xe9`` (what `printable` gives), other unsafe characters JSON escapes."""
    if _UNSAFE.search(text) is None:
        return text

    def escape(match: re.Match[str]) -> str:
        code = ord(match.group())
        return _escaped(match.group(), "\\\\") if 0xD800 <= code <= 0xDFFF else f"\\u{code:04x}"

    return _UNSAFE.sub(escape, text)
