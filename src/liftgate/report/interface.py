"""The report stage's contract: output formats, rendering options and the `Formatter` protocol.

Every ``--format`` value is an `OutputFormat` member with exactly one formatter behind it
(see `liftgate.report.formatter_for`); every formatter takes the same `RenderOptions`, so a
filter chosen on the command line means the same thing in a terminal table and in SARIF.
"""

from __future__ import annotations

import enum
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

    EXCLUDED = "excluded"  # excluded or unknown for at least one target: what the user came for
    ADMITTED = "admitted"  # admitted for every target
    ALL = "all"
    TRACED = "traced"  # the gates a traced run evaluated (scan --trace)


class GroupBy(str, enum.Enum):
    """How the gates are grouped (``scan --by``)."""

    FILE = "file"  # by package and file
    CHAIN = "chain"  # by gate chain: the gates to lift together for one feature


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """How to render a report. ``kinds=None`` means every gate kind; ``width=None`` means 120 columns."""

    show: Show = Show.EXCLUDED
    kinds: frozenset[GateKind] | None = None
    color: bool = False
    width: int | None = None
    verbose: bool = False
    by: GroupBy = GroupBy.FILE


class Formatter(Protocol):
    """Turns a report into text. Pure: no I/O, the same input always gives the same output."""

    def format(self, report: Report, options: RenderOptions) -> str: ...
