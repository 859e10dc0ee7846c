"""The report stage: turn a `Report` into text for people, scripts and code-scanning tools.

``render(report, OutputFormat.JSON, RenderOptions())`` is the whole API. Each `OutputFormat`
has one formatter module (``table``, ``json_format``, ``sarif``, ``markdown``), imported only
when used so ``--format json`` never loads rich. All formatters share `select_gates` (which
gates to show, in which order); `summary_line` is the one line a scan prints to stderr.
"""

from __future__ import annotations

from liftgate.model import Report
from liftgate.report.interface import Formatter, GroupBy, OutputFormat, RenderOptions, Show, VerdictFilter
from liftgate.report.select import select_gates
from liftgate.report.summary import summary_line

__all__ = [
    "Formatter",
    "GroupBy",
    "OutputFormat",
    "RenderOptions",
    "Show",
    "VerdictFilter",
    "formatter_for",
    "render",
    "select_gates",
    "summary_line",
]


def formatter_for(fmt: OutputFormat | str) -> Formatter:
    """The formatter behind one ``--format`` value (a member or its string value)."""
    fmt = OutputFormat(fmt)
    if fmt is OutputFormat.TABLE:
        from liftgate.report.table import TableFormatter

        return TableFormatter()
    if fmt is OutputFormat.JSON:
        from liftgate.report.json_format import JsonFormatter

        return JsonFormatter()
    if fmt is OutputFormat.SARIF:
        from liftgate.report.sarif import SarifFormatter

        return SarifFormatter()
    if fmt is OutputFormat.MARKDOWN:
        from liftgate.report.markdown import MarkdownFormatter

        return MarkdownFormatter()
    raise ValueError(f"no formatter for output format {fmt!r}")


def render(report: Report, fmt: OutputFormat | str, options: RenderOptions | None = None) -> str:
    """``report`` as text in format ``fmt``; the text ends with a newline."""
    return formatter_for(fmt).format(report, options or RenderOptions())
