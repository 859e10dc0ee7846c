"""The terminal table (``--format table``, the default): gates grouped by package, then by file.

One row per gate: line, kind (when the report mixes kinds), condition, the admitted set, what the
else branch does, one status column per target (followed, in a judged report, by that target's
verdict) and the gate id to pass to ``liftgate explain``. Column widths are computed once for the
whole report so the per-file rows line up. Conditions are cut to fit unless ``verbose`` (which also
lists evidence, assumptions, each verdict's first reason and hazards, and skipped files); admitted
sets and verdicts wrap but are never cut, since a cut set would be a wrong answer. A judged report
ends with its verdict counts per package and target. Every cell is a `rich.text.Text`, never
markup: ``get_device_capability()[0]`` must print as written.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

from rich.console import Console, OverflowMethod
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from liftgate.arch.core import Arch
from liftgate.model import (
    Confidence,
    Gate,
    GateKind,
    GateTrace,
    Report,
    Status,
    Target,
    TraceSummary,
    Verdict,
    VerdictKind,
)
from liftgate.report.chains import chain_text
from liftgate.report.interface import GroupBy, RenderOptions, printable
from liftgate.report.select import (
    admits_text,
    condition_text,
    distinct_targets,
    plural,
    select_gates,
    skip_sort_key,
    target_label,
    trace_summary_lines,
    trace_text,
    untraced_text,
    verdict_text,
)
from liftgate.report.summary import nothing_selected, package_verdict_counts, scope_text

DEFAULT_WIDTH = 120
FILE_INDENT = 2
TABLE_INDENT = 4
COLUMN_GAP = 1  # one space between columns (rich's collapsed padding)
MIN_CONDITION = 10
MIN_ADMITS = 13  # "sm_100–sm_121" on one line
MAX_VERDICT = 40  # a longer list of missing features always wraps
# Verdict columns narrow only while the condition and admitted set would get less than this.
READABLE_CONDITION = 30
READABLE_ADMITS = 20
WRAP_VERDICT = 24  # one that does not fit beside the condition wraps at this width, then narrower
MIN_VERDICT = len("liftable (hazard)")  # narrower only when the table cannot fit otherwise
MIN_VERDICT_WORD = len("liftable")  # the longest word of a verdict: "blocked:", "(hazard)"
TRACED_WIDTH = 60  # the condition column's width wanted for a "traced:" line

_ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")
_TRAILING_BLANKS = re.compile(r"(?:\x1b\[[0-9;]*m| )+$", re.MULTILINE)

STATUS_STYLE = {Status.EXCLUDED: "red", Status.ADMITTED: "green", Status.UNKNOWN: "yellow"}
VERDICT_STYLE = {VerdictKind.LIFTABLE: "green", VerdictKind.BLOCKED: "red", VerdictKind.UNKNOWN: "yellow"}
HAZARD_STYLE = "bold yellow"
# A terminal gets the sign; a pipe or file gets a word, so that plain output stays ASCII.
HAZARD_MARKER = {True: " ⚠", False: " (hazard)"}

VerdictIndex = dict[tuple[str, Arch], Verdict]


@dataclass(frozen=True, slots=True)
class _Layout:
    """Column widths shared by every per-file table of one report."""

    line: int
    kind: int | None  # None: a single kind, no column
    condition: int
    admits: int
    else_kind: int
    targets: tuple[int, ...]
    verdicts: tuple[int, ...] | None  # None: not judged, no verdict columns
    gate_id: int


def _target_header(target: Target) -> str:
    """``rtx5090`` over ``(sm_120)``: two short lines leave more room for the condition than one long one."""
    label = target_label(target)
    return label.replace(" (", "\n(", 1)


def _admits_cell_text(gate: Gate) -> str:
    # The marker goes first so that cutting a long set to width never hides it.
    prefix = "(inferred) " if gate.confidence is Confidence.INFERRED else ""
    return prefix + admits_text(gate)


def _verdict_cell_text(verdict: Verdict, color: bool) -> str:
    return verdict_text(verdict) + (HAZARD_MARKER[color] if verdict.hazards else "")


def _verdict_needs(
    gates: Sequence[Gate], targets: Sequence[Target], verdicts: VerdictIndex, color: bool
) -> list[int]:
    """The width each target's verdict column needs to show every cell on one line."""
    needs = []
    for target in targets:
        cells = (verdicts.get((gate.id, target.arch)) for gate in gates)
        needs.append(max((len(_verdict_cell_text(v, color)) for v in cells if v is not None), default=0))
    return needs


def _shrink(widths: list[int], floors: list[int], by: int) -> None:
    """Take up to ``by`` columns from the widest of ``widths``, never below their ``floors``."""
    while by > 0 and widths:
        index = max(range(len(widths)), key=lambda i: widths[i] - floors[i])
        if widths[index] <= floors[index]:
            return
        widths[index] -= 1
        by -= 1


def _layout(
    gates: Sequence[Gate],
    targets: Sequence[Target],
    width: int,
    verdicts: VerdictIndex | None = None,
    color: bool = False,
    traced: Sequence[str] = (),
) -> _Layout:
    kinds = {gate.kind for gate in gates}
    line = max(len("line"), *(len(str(g.location.line)) for g in gates))
    kind = max(len("kind"), *(len(k.value) for k in kinds)) if len(kinds) > 1 else None
    else_kind = max(len("else"), *(len(g.else_kind.value) for g in gates))
    target_widths = tuple(max(*map(len, _target_header(t).split("\n")), len("excluded")) for t in targets)
    gate_id = max(len("id"), *(len(g.id) for g in gates))
    fixed = [line, else_kind, *target_widths, gate_id] + ([kind] if kind is not None else [])
    columns = len(fixed) + 2 + (len(targets) if verdicts is not None else 0)
    available = width - TABLE_INDENT - sum(fixed) - COLUMN_GAP * (columns - 1)
    condition_need = max(len("condition"), *(len(condition_text(g)) for g in gates))
    if traced:
        # The "traced:" line sits under the condition: give it room to read, not one word a line.
        condition_need = max(condition_need, min(TRACED_WIDTH, max(len(t) for t in traced)))
    admits_need = max(len("admits"), *(len(_admits_cell_text(g)) for g in gates))
    verdict_widths = None
    if verdicts is not None:
        # A list of missing features wraps more easily than a cut condition reads: when space is short
        # the verdict columns give some back, in steps, down to one word per line at the very least.
        needs = _verdict_needs(gates, targets, verdicts, color)
        widths = [max(len("verdict"), min(need, MAX_VERDICT)) for need in needs]
        readable = min(condition_need, READABLE_CONDITION) + min(admits_need, READABLE_ADMITS)
        for floor, want in (
            (WRAP_VERDICT, readable),
            (MIN_VERDICT, readable),
            (MIN_VERDICT_WORD, MIN_CONDITION + MIN_ADMITS),
        ):
            floors = [max(len("verdict"), min(need, floor)) for need in needs]
            _shrink(widths, floors, want - (available - sum(widths)))
        verdict_widths = tuple(widths)
        available -= sum(verdict_widths)
    if condition_need + admits_need <= available:
        condition, admits = condition_need, admits_need
    else:
        # The admitted set wraps onto more lines; the condition is cut (its file:line is right there).
        admits = max(MIN_ADMITS, min(admits_need, max(available - condition_need, available * 2 // 5)))
        condition = max(MIN_CONDITION, available - admits)
    return _Layout(line, kind, condition, admits, else_kind, target_widths, verdict_widths, gate_id)


CPP_OUTCOME_PREFIXES = ("fails", "otherwise", "default fails")


def _details(gate: Gate) -> list[str]:
    """The verbose lines under a gate's condition: how it was resolved and what it assumes."""
    if gate.kind is GateKind.PY_RUNTIME and len(gate.evidence) > 1:
        # A resolution chain reads best as one: is_sm100 → partial(...) at common.py:309 → ...
        lines = ["resolved: " + " → ".join(item.render() for item in gate.evidence)]
    elif gate.kind is GateKind.CPP_RUNTIME:
        # The value's chain (version_num → get_sm_version_num() → cudaDeviceGetAttribute(...)), then
        # what happens to other devices (the error text users search for).
        outcomes = tuple(
            e
            for e in gate.evidence
            if e.text.startswith(CPP_OUTCOME_PREFIXES) or "passed by the build" in e.text
        )
        chain = [e for e in gate.evidence if e not in outcomes]
        lines = ["resolved: " + " → ".join(item.render() for item in chain)] if chain else []
        lines += [f"evidence: {item.render()}" for item in outcomes]
    else:
        lines = [f"evidence: {item.render()}" for item in gate.evidence]
    lines += [f"assumes: {assumption}" for assumption in gate.depends_on]
    if gate.host is not None:
        lines.append(f"host pass: {gate.host.value}")
    if gate.enclosing:
        lines.append(f"inside: {' > '.join(gate.enclosing)}")
    if gate.confidence is Confidence.INFERRED:
        lines.append("confidence: inferred from a name, not derived from the code")
    return lines


def _verdict_details(gate: Gate, targets: Sequence[Target], verdicts: VerdictIndex) -> list[tuple[str, str]]:
    """The verbose lines, with their style, that say why each target got its verdict and what is risky."""
    lines: list[tuple[str, str]] = []
    for target in targets:
        verdict = verdicts.get((gate.id, target.arch))
        if verdict is None:
            continue
        if verdict.reasons:
            lines.append((f"verdict {target.arch.name}: {verdict.reasons[0]}", "dim"))
        lines += [(f"hazard {target.arch.name}: {hazard}", "yellow") for hazard in verdict.hazards]
    return lines


def _verdict_cell(verdict: Verdict | None, color: bool) -> Text:
    if verdict is None:
        return Text("")
    cell = Text(verdict_text(verdict), style=VERDICT_STYLE[verdict.kind])
    if verdict.hazards:
        cell.append(HAZARD_MARKER[color], style=HAZARD_STYLE)
    return cell


def _gate_table(
    gates: Sequence[Gate],
    targets: Sequence[Target],
    layout: _Layout,
    options: RenderOptions,
    *,
    header: bool,
    verdicts: VerdictIndex | None = None,
    traced: dict[str, GateTrace] | None = None,
    probed_run: bool = False,
) -> Table:
    """Rows for ``gates`` (or, with ``header``, just the column headings) in the report-wide layout."""
    # A traced report wraps the condition column too: the line saying what the run did is read whole.
    wrap = options.verbose or bool(traced)
    overflow: OverflowMethod = "fold" if wrap else "ellipsis"
    table = Table(
        box=None,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        show_header=header,
        header_style="bold",
        leading=1 if options.verbose else 0,
    )
    headings = ["line", *(["kind"] if layout.kind is not None else []), "condition", "admits", "else"]
    for target in targets:
        headings += [_target_header(target), *(["verdict"] if layout.verdicts is not None else [])]
    headings.append("id")
    height = max(heading.count("\n") for heading in headings)
    # Pad every heading to the same height so that one-line headings sit on the bottom line.
    heading_texts = iter(Text("\n" * (height - heading.count("\n")) + heading) for heading in headings)
    table.add_column(next(heading_texts), width=layout.line, justify="right", no_wrap=True)
    if layout.kind is not None:
        table.add_column(next(heading_texts), width=layout.kind, no_wrap=True)
    table.add_column(next(heading_texts), width=layout.condition, no_wrap=not wrap, overflow=overflow)
    # The admitted set wraps instead of being cut: a cut set would be a wrong answer.
    table.add_column(next(heading_texts), width=layout.admits, overflow="fold")
    table.add_column(next(heading_texts), width=layout.else_kind, no_wrap=True)
    for index, target_width in enumerate(layout.targets):
        table.add_column(next(heading_texts), width=target_width, no_wrap=True)
        if layout.verdicts is not None:
            table.add_column(next(heading_texts), width=layout.verdicts[index], overflow="fold")
    table.add_column(next(heading_texts), width=layout.gate_id, no_wrap=True)
    trace = traced or {}
    probed = probed_run
    for gate in gates:
        condition = Text(condition_text(gate))
        if gate.id in trace:
            condition.append("\n")
            condition.append("traced: " + trace_text(trace[gate.id], probed), style="magenta")
            agreement = trace[gate.id].agreement
            if agreement and (options.verbose or agreement.startswith("differs")):
                condition.append("\n")
                condition.append(agreement, style="yellow" if agreement.startswith("differs") else "dim")
        if options.verbose:
            for detail in _details(gate):
                condition.append("\n")
                condition.append(detail, style="dim")
            for detail, style in _verdict_details(gate, targets, verdicts or {}):
                condition.append("\n")
                condition.append(detail, style=style)
        cells: list[Text] = [Text(str(gate.location.line))]
        if layout.kind is not None:
            cells.append(Text(gate.kind.value))
        cells += [condition, Text(_admits_cell_text(gate)), Text(gate.else_kind.value)]
        for target in targets:
            status = gate.status(target.arch)
            cells.append(Text(status.value, style=STATUS_STYLE[status]))
            if layout.verdicts is not None:
                cells.append(_verdict_cell((verdicts or {}).get((gate.id, target.arch)), options.color))
        cells.append(Text(gate.id, style="dim"))
        table.add_row(*cells)
    return table


def _print_verdict_counts(console: Console, report: Report) -> None:
    """``flashinfer-python 0.6.2 for sm_120: 274 liftable (13 with hazards), 2,526 blocked, 39 unknown``."""
    entries = package_verdict_counts(report)
    if not entries:
        return
    console.print()
    console.print(Text("verdicts:", style="bold"))
    for entry in entries:
        line = Text(f"{entry.label} for {entry.target.arch.name}: ")
        for index, kind in enumerate(VerdictKind):
            if index:
                line.append(", ")
            line.append(
                entry.counts.cell(kind), style=VERDICT_STYLE[kind] if entry.counts.count(kind) else ""
            )
        console.print(Padding.indent(line, FILE_INDENT))


MAX_UNTRACED = 12


def _print_trace(console: Console, trace: TraceSummary, verbose: bool) -> None:
    """What the traced run did beyond the rows: its counts, and the queries no gate made."""
    console.print()
    command = " ".join(trace.command)
    head = f"trace {trace.source or ''}".rstrip() + (f" ({command})" if command else "")
    if trace.as_arch:
        head += f", answered as {trace.as_arch}: a what-if, every such answer marked (--as)"
    console.print(Text(head, style="bold"))
    untraced = sum(u.count for u in trace.untraced)
    lines = trace_summary_lines(trace)
    lines[1] += " (marked 'traced:' above)"
    for line in lines:
        console.print(Padding.indent(Text(line), FILE_INDENT))
    if trace.untraced:
        console.print(
            Padding.indent(
                Text(
                    f"capability queries from places where the scan found no gate ({untraced:,} of "
                    f"{trace.queries:,}; a recall check: each is either not gating anything, or a gate "
                    "liftgate does not see):",
                    style="yellow",
                ),
                FILE_INDENT,
            )
        )
        shown = trace.untraced if verbose else trace.untraced[:MAX_UNTRACED]
        for query in shown:
            console.print(Padding.indent(Text(untraced_text(query), overflow="fold"), TABLE_INDENT))
        if len(shown) < len(trace.untraced):
            console.print(
                Padding.indent(
                    Text(
                        f"… {len(trace.untraced) - len(shown):,} more; --verbose lists them all", style="dim"
                    ),
                    TABLE_INDENT,
                )
            )
    else:
        console.print(
            Padding.indent(
                Text("every capability query was made while a gate of this scan was evaluated"), FILE_INDENT
            )
        )
    for note in trace.notes:
        console.print(Padding.indent(Text(f"note: {note}", style="dim"), FILE_INDENT))


def _print_skips(console: Console, report: Report, verbose: bool) -> None:
    if not report.skips:
        return
    count = len(report.skips)
    noun = "file" if count == 1 else "files"
    if not verbose:
        console.print(Text(f"{count:,} {noun} not analysed; --verbose lists the reasons", style="dim"))
        return
    console.print(Text(f"not analysed ({count:,} {noun}):", style="bold"))
    for skip in sorted(report.skips, key=skip_sort_key):
        where = f"{skip.package}: {skip.path}" if skip.package else skip.path
        console.print(Padding.indent(Text(where, style="cyan", overflow="fold"), FILE_INDENT))
        console.print(Padding.indent(Text(skip.reason), TABLE_INDENT))


def _chains_text(report: Report, options: RenderOptions, console: Console, out: io.StringIO) -> str:
    """``--by chain``: each chain, its verdict per target and the gates to lift together."""
    if not report.chains:
        console.print(
            Text(
                f"no gate chains in {scope_text(report)}: no gate that shuts out "
                f"{' or '.join(t.arch.name for t in distinct_targets(report))} leads to other gates that do"
            )
        )
    for index, chain in enumerate(report.chains):
        if index:
            console.print()
        for line, style in chain_text(report, chain, options.verbose):
            console.print(Text(line, style=style, overflow="fold"))
    in_chains = {g for c in report.chains for g in c.gate_ids}
    rest = [g for g in select_gates(report, options) if g.id not in in_chains]
    console.print()
    console.print(
        Text(
            f"{plural(len(report.chains), 'chain')}; {plural(len(rest), 'other listed gate')} stand alone "
            "(the default view lists them by file)",
            style="dim",
        )
    )
    for note in report.notes:
        console.print(Text(f"note: {note}"))
    return out.getvalue()


class TableFormatter:
    """``--format table``: what a person reads in a terminal."""

    def format(self, report: Report, options: RenderOptions) -> str:
        # Names that are not UTF-8, control characters: escaped, whichever field they come from.
        return printable(self._format(report, options), keep_sgr=options.color)

    def _format(self, report: Report, options: RenderOptions) -> str:
        out = io.StringIO()
        console = Console(
            file=out,
            force_terminal=options.color,
            no_color=not options.color,
            width=options.width or DEFAULT_WIDTH,
            highlight=False,
            markup=False,
            emoji=False,
            force_jupyter=False,
            force_interactive=False,
        )
        if options.by is GroupBy.CHAIN:
            return _TRAILING_BLANKS.sub("", _chains_text(report, options, console, out))
        gates = select_gates(report, options)
        targets = distinct_targets(report)
        # Verdict columns only in a judged report, so that other reports render as they always did.
        verdicts = report.verdict_index() if report.verdicts else None
        traced = {g.gate_id: g for g in report.trace.gates} if report.trace else None
        if not gates:
            console.print(Text(nothing_selected(report, options)))
        else:
            traced_lines = [
                "traced: " + trace_text(traced[g.id], bool(report.trace and report.trace.probed))
                for g in gates
                if traced and g.id in traced
            ]
            layout = _layout(gates, targets, console.width, verdicts, options.color, traced_lines)
            versions = {p.name: p.version for p in report.packages}
            by_package = groupby(gates, key=lambda g: (g.location.package, g.location.version))
            for index, ((name, version), package_gates) in enumerate(by_package):
                if index:
                    console.print()
                version = version or versions.get(name)
                console.print(Text(f"{name} {version}" if version else name, style="bold"))
                # Column headings once per package; the widths are the same in every file's rows.
                console.print(
                    Padding.indent(_gate_table([], targets, layout, options, header=True), TABLE_INDENT)
                )
                for path, file_gates in groupby(package_gates, key=lambda g: g.location.path):
                    console.print(Padding.indent(Text(path, style="cyan"), FILE_INDENT))
                    rows = _gate_table(
                        list(file_gates), targets, layout, options, header=False, verdicts=verdicts,
                        traced=traced, probed_run=bool(report.trace and report.trace.probed),
                    )  # fmt: skip
                    console.print(Padding.indent(rows, TABLE_INDENT))
        _print_verdict_counts(console, report)
        if report.trace is not None:
            _print_trace(console, report.trace, options.verbose)
        if report.notes or report.skips:
            console.print()
        for note in report.notes:
            console.print(Text(f"note: {note}"))
        _print_skips(console, report, options.verbose)
        # rich pads every cell to its column width; trailing blanks only make diffs noisy.
        return _TRAILING_BLANKS.sub(lambda m: "".join(_ANSI_CODE.findall(m.group(0))), out.getvalue())
