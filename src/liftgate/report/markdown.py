"""Markdown output, for pasting into a GitHub issue or pull request.

A heading, the one-line summary, one table per package (``| file:line | condition | admits |
sm_120 |``) and the skipped files folded into a ``<details>`` block. A judged report adds a
verdict column after each target's status, a table of verdict counts per package and target
under the summary, and the hazards of the listed gates in a second ``<details>`` block. Cells are escaped for
GitHub-flavoured Markdown: ``|`` never splits a cell, and conditions sit in code spans so
``__CUDA_ARCH__`` is not read as bold.
"""

from __future__ import annotations

import re
from itertools import groupby

from liftgate.arch.core import Arch
from liftgate.model import Confidence, Gate, Report, Status, Verdict, VerdictKind
from liftgate.report.chains import chain_views, verdict_line
from liftgate.report.interface import GroupBy, RenderOptions, Show, printable
from liftgate.report.select import (
    admits_text,
    condition_text,
    distinct_targets,
    kinds_text,
    missing_features,
    select_gates,
    skip_sort_key,
    target_label,
    trace_summary_lines,
    trace_text,
)
from liftgate.report.summary import nothing_selected, package_verdict_counts, summary_line

# Characters that start Markdown or HTML constructs anywhere in a cell. ``_`` is handled apart:
# between two word characters it never starts emphasis, so sm_120 stays readable in the source.
_SPECIAL = re.compile(r"([\\`*\[\]<>|~])")
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")

_STATUS_CELL = {Status.EXCLUDED: "**excluded**", Status.ADMITTED: "admitted", Status.UNKNOWN: "*unknown*"}
_VERDICT_CELL = {
    VerdictKind.LIFTABLE: "liftable",
    VerdictKind.BLOCKED: "**blocked**",
    VerdictKind.UNKNOWN: "*unknown*",
}
HAZARD_MARKER = " ⚠ hazard"


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
    if options.show is Show.ALL or (not labels and options.show is not Show.TRACED):
        subject = f"{kinds}architecture gates" if kinds else "architecture gates"
        return f"## liftgate: {subject}" + (f" for {', '.join(labels)}" if labels else "")
    if options.show is Show.TRACED:
        return f"## liftgate: {kinds}gates the traced run evaluated" + (
            f" ({', '.join(labels)})" if labels else ""
        )
    if options.show is Show.EXCLUDED:
        return f"## liftgate: {kinds}gates that exclude {' or '.join(labels)}"
    return f"## liftgate: {kinds}gates that admit {' and '.join(labels)}"


def _admits_cell(gate: Gate) -> str:
    text = escape_text(admits_text(gate))
    return f"(inferred) {text}" if gate.confidence is Confidence.INFERRED else text


def _verdict_cell(verdict: Verdict | None) -> str:
    """``**blocked**: `tcgen05-ld-st`, `wgmma` ⚠ hazard``; empty where the target was not judged."""
    if verdict is None:
        return ""
    cell = _VERDICT_CELL[verdict.kind]
    missing = missing_features(verdict)
    if verdict.kind is VerdictKind.BLOCKED and missing:
        cell += ": " + ", ".join(code_span(feature) for feature in missing)
    return cell + (HAZARD_MARKER if verdict.hazards else "")


def _package_table(
    report: Report, gates: list[Gate], verdicts: dict[tuple[str, Arch], Verdict] | None
) -> list[str]:
    targets = distinct_targets(report)
    header = ["file:line", "condition", "admits"]
    for target in targets:
        header.append(escape_text(target_label(target)))
        if verdicts is not None:
            header.append(f"{escape_text(target.arch.name)} verdict")
    traced = {g.gate_id: g for g in report.trace.gates} if report.trace is not None else None
    probed = report.trace.probed if report.trace is not None else False
    if traced is not None:
        header.append("traced run")
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
        ]
        for target in targets:
            cells.append(_STATUS_CELL[gate.status(target.arch)])
            if verdicts is not None:
                cells.append(_verdict_cell(verdicts.get((gate.id, target.arch))))
        if traced is not None:
            cells.append(escape_text(trace_text(traced[gate.id], probed)) if gate.id in traced else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _trace_block(report: Report) -> list[str]:
    """What the traced run did beyond the table rows: its counts and the queries no gate made."""
    trace = report.trace
    if trace is None:
        return []
    lines = [f"### Trace {code_span(trace.source)}" if trace.source else "### Trace", ""]
    if trace.command:
        lines += [f"Command: {code_span(' '.join(trace.command))}", ""]
    if trace.as_arch:
        lines += [
            f"Capability queries were answered as **{escape_text(trace.as_arch)}** (`--as`): a what-if, "
            "not the device.",
            "",
        ]
    lines += [f"- {escape_text(line)}" for line in trace_summary_lines(trace)]
    lines.append("")
    if trace.untraced:
        count = sum(u.count for u in trace.untraced)
        lines += [
            f"Capability queries from places where the scan found no gate ({count:,} of {trace.queries:,}; a "
            "recall check):",
            "",
            "| query | answer | calls | where | why |",
            "|---|---|---|---|---|",
        ]
        for u in trace.untraced:
            where = u.site.render() + (f" ({u.site.package})" if u.site.package else "")
            lines.append(
                f"| {code_span(u.api)} | {escape_text(u.answer)} | {u.count:,} | {escape_text(where)} "
                f"| {escape_text(u.reason)} |"
            )
        lines.append("")
    lines += [f"- note: {escape_text(n)}" for n in trace.notes]
    return [*lines, ""] if trace.notes else lines


def _verdict_counts_table(report: Report) -> list[str]:
    """Verdict counts of the whole scan per package and target, under the summary line."""
    entries = package_verdict_counts(report)
    if not entries:
        return []
    kinds = list(VerdictKind)
    lines = [
        "Verdicts for the gates that exclude a target:",
        "",
        "| package | target | " + " | ".join(kind.value for kind in kinds) + " |",
        "|" + "|".join("---" for _ in range(2 + len(kinds))) + "|",
    ]
    for entry in entries:
        counts = []
        for kind in kinds:
            hazards = entry.counts.hazards(kind)
            counts.append(
                f"{entry.counts.count(kind):,}" + (f" ({hazards:,} with hazards)" if hazards else "")
            )
        lines.append(
            f"| {escape_text(entry.label)} | {escape_text(entry.target.arch.name)} | "
            + " | ".join(counts)
            + " |"
        )
    return [*lines, ""]


def _hazards_block(
    report: Report, gates: list[Gate], verdicts: dict[tuple[str, Arch], Verdict] | None
) -> list[str]:
    """The hazards of the listed gates, folded: they are long, and only matter to whoever lifts."""
    rows = [
        f"| {code_span(f'{gate.location.path}:{gate.location.line}')} | {escape_text(target.arch.name)} "
        f"| {escape_text(verdict.kind.value)} | {escape_text(hazard)} |"
        for gate in gates
        for target in distinct_targets(report)
        if verdicts is not None and (verdict := verdicts.get((gate.id, target.arch))) is not None
        for hazard in verdict.hazards
    ]
    if not rows:
        return []
    count = len(rows)
    return [
        "<details>",
        f"<summary>{count:,} {'hazard' if count == 1 else 'hazards'} of the gates listed</summary>",
        "",
        "| file:line | target | verdict | hazard |",
        "|---|---|---|---|",
        *rows,
        "",
        "</details>",
        "",
    ]


def _chains_block(report: Report, options: RenderOptions) -> list[str]:
    """``--by chain``: a section per chain with its verdict per target and the gates to lift together."""
    if not report.chains:
        return ["No gate chains: no gate that shuts a target out leads to other gates that do.", ""]
    lines: list[str] = []
    verdicts = report.verdict_index()
    for chain in report.chains:
        views = chain_views(report, chain)
        lines += [f"### Chain {code_span(chain.root_id)}: {escape_text(views[0].title)}", ""]
        lines += [f"- {escape_text(verdict_line(v))}" for v in views]
        lines += [
            "",
            "| link | gate | where | condition | "
            + " | ".join(escape_text(v.target.name) for v in views)
            + " |",
        ]
        lines.append("|" + "|".join("---" for _ in range(4 + len(views))) + "|")
        for i, member in enumerate(views[0].members):
            if not any(v.members[i].required for v in views):
                continue
            loc = member.gate.location
            cells = [
                escape_text(member.link.relation),
                code_span(member.gate.id),
                code_span(f"{loc.path}:{loc.line}"),
                code_span(condition_text(member.gate)),
            ]
            for v in views:
                m = v.members[i]
                verdict = verdicts.get((m.gate.id, v.target))
                cells.append(
                    _verdict_cell(verdict)
                    if m.required and verdict
                    else ("—" if not m.required else m.status.value)
                )
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for note in chain.notes:
            lines.append(f"- note: {escape_text(note)}")
        lines += [f"Lift as one: {code_span(f'liftgate lift --chain {chain.root_id}')}", ""]
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
        # Names that are not UTF-8, control characters: escaped, whichever field they come from.
        return printable(self._format(report, options))

    def _format(self, report: Report, options: RenderOptions) -> str:
        lines = [_heading(report, options), "", escape_text(summary_line(report)), ""]
        lines += _verdict_counts_table(report)
        # Verdict columns only in a judged report, so that other reports render as they always did.
        verdicts = report.verdict_index() if report.verdicts else None
        gates = select_gates(report, options)
        if options.by is GroupBy.CHAIN:
            lines += _chains_block(report, options)
            return "\n".join(lines).rstrip("\n") + "\n"
        if not gates:
            lines += [escape_text(nothing_selected(report, options)) + ".", ""]
        versions = {p.name: p.version for p in report.packages}
        for package, package_gates in groupby(gates, key=lambda g: (g.location.package, g.location.version)):
            name, version = package
            version = version or versions.get(name)
            lines += [f"### {escape_text(name)}" + (f" {escape_text(version)}" if version else ""), ""]
            lines += [*_package_table(report, list(package_gates), verdicts), ""]
        if report.notes:
            lines += [f"- {escape_text(note)}" for note in report.notes] + [""]
        lines += _trace_block(report)
        lines += _hazards_block(report, gates, verdicts)
        lines += _skips_block(report)
        return "\n".join(lines).rstrip("\n") + "\n"
