"""Markdown output, for pasting into a GitHub issue or pull request.

A heading, the one-line summary, one table per package (``| file:line | condition | admits |
sm_120 |``) and the skipped files folded into a ``<details>`` block. Cells are escaped for
GitHub-flavoured Markdown: ``|`` never splits a cell, and conditions sit in code spans so
``__CUDA_ARCH__`` is not read as bold.
"""

from __future__ import annotations

import re
from itertools import groupby

from liftgate.model import Confidence, Gate, Report, Status
from liftgate.report.interface import RenderOptions, Show
from liftgate.report.select import (
    admits_text,
    condition_text,
    distinct_targets,
    kinds_text,
    select_gates,
    skip_sort_key,
    target_label,
)
from liftgate.report.summary import nothing_selected, summary_line

# Characters that start Markdown or HTML constructs anywhere in a cell. ``_`` is handled apart:
# between two word characters it never starts emphasis, so sm_120 stays readable in the source.
_SPECIAL = re.compile(r"([\\`*\[\]<>|~])")
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")

_STATUS_CELL = {Status.EXCLUDED: "**excluded**", Status.ADMITTED: "admitted", Status.UNKNOWN: "*unknown*"}


def escape_text(text: str) -> str:
    """Plain text safe in a table cell: no emphasis, links, HTML or cell breaks."""
    text = _SPECIAL.sub(r"\\\1", " ".join(text.split()))
    return _EDGE_UNDERSCORE.sub(r"\\_", text)


def code_span(text: str) -> str:
    """``text`` as an inline code span that survives a table cell (pipes escaped, backticks fenced)."""
    text = " ".join(text.split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {text} " if text.startswith("`") or text.endswith("`") else text
    # GFM splits table cells on unescaped pipes even inside code spans; \| shows as |.
    return f"{fence}{padded.replace('|', chr(92) + '|')}{fence}"


def _heading(report: Report, options: RenderOptions) -> str:
    labels = [target_label(t) for t in distinct_targets(report)]
    kinds = kinds_text(options.kinds)
    if options.show is Show.ALL or not labels:
        subject = f"{kinds}architecture gates" if kinds else "architecture gates"
        return f"## liftgate: {subject}" + (f" for {', '.join(labels)}" if labels else "")
    if options.show is Show.EXCLUDED:
        return f"## liftgate: {kinds}gates that exclude {' or '.join(labels)}"
    return f"## liftgate: {kinds}gates that admit {' and '.join(labels)}"


def _admits_cell(gate: Gate) -> str:
    text = escape_text(admits_text(gate))
    return f"(inferred) {text}" if gate.confidence is Confidence.INFERRED else text


def _package_table(report: Report, gates: list[Gate]) -> list[str]:
    targets = distinct_targets(report)
    header = ["file:line", "condition", "admits", *(escape_text(target_label(t)) for t in targets)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for gate in gates:
        loc = gate.location
        cells = [
            code_span(f"{loc.path}:{loc.line}"),
            code_span(condition_text(gate)),
            _admits_cell(gate),
            *(_STATUS_CELL[gate.status(t.arch)] for t in targets),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _skips_block(report: Report) -> list[str]:
    if not report.skips:
        return []
    skips = sorted(report.skips, key=skip_sort_key)
    count = len(skips)
    lines = [
        "<details>",
        f"<summary>{count:,} {'file' if count == 1 else 'files'} not analysed</summary>",
        "",
        "| package | file | reason |",
        "|---|---|---|",
    ]
    lines += [
        f"| {escape_text(s.package or '')} | {code_span(s.path)} | {escape_text(s.reason)} |" for s in skips
    ]
    lines += ["", "</details>"]
    return lines


class MarkdownFormatter:
    """``--format markdown``."""

    def format(self, report: Report, options: RenderOptions) -> str:
        lines = [_heading(report, options), "", escape_text(summary_line(report)), ""]
        gates = select_gates(report, options)
        if not gates:
            lines += [escape_text(nothing_selected(report, options)) + ".", ""]
        versions = {p.name: p.version for p in report.packages}
        for package, package_gates in groupby(gates, key=lambda g: (g.location.package, g.location.version)):
            name, version = package
            version = version or versions.get(name)
            lines += [f"### {escape_text(name)}" + (f" {escape_text(version)}" if version else ""), ""]
            lines += [*_package_table(report, list(package_gates)), ""]
        if report.notes:
            lines += [f"- {escape_text(note)}" for note in report.notes] + [""]
        lines += _skips_block(report)
        return "\n".join(lines).rstrip("\n") + "\n"
