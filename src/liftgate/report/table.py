"""The terminal table (``--format table``, the default): gates grouped by package, then by file.

One row per gate: line, kind (when the report mixes kinds), condition, the admitted set, what the
else branch does, one status column per target (followed, in a judged report, by that target's
verdict) and the gate id to pass to ``liftgate explain``. Column widths are computed once for the
whole report so the per-file rows line up. Conditions are cut to fit unless ``verbose`` (which also
lists evidence, assumptions, each verdict's first reason and hazards, and skipped files); admitted
sets and verdicts wrap but are never cut, since a cut set would be a wrong answer, and the gate id
(what ``explain`` and ``lift`` take) and the statuses are never cut either: on a narrow terminal
other columns give way first, and a dim line under the table says which (see `_Layout`). A binary
that a target runs only through the driver's PTX JIT has the status ``ptx-jit`` there, one that
some of its compiled units have no image for ``partial`` (the losses view says how many and which
kernels), and a note counts such binaries per target, listed or not. A judged report
ends with its verdict counts per package and target. Every cell is a `rich.text.Text`, never
markup: ``get_device_capability()[0]`` must print as written.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType
from rich.padding import Padding
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from liftgate.arch.core import Arch
from liftgate.detect.binary import coverage_text
from liftgate.evaluate import Outcomes
from liftgate.model import (
    Confidence,
    Coverage,
    Gate,
    GateKind,
    GateTrace,
    Outcome,
    Report,
    Status,
    Target,
    TraceSummary,
    Verdict,
    VerdictKind,
)
from liftgate.report.interface import GroupBy, RenderOptions, Show, printable
from liftgate.report.losses import HEADINGS, FeatureLoss, feature_losses, loss_counts
from liftgate.report.select import (
    admits_text,
    condition_text,
    distinct_targets,
    plural,
    scoped,
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
DEFAULT_HEIGHT = 25  # unused by what a table prints; given so that rich never asks the terminal
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
VERDICT_STYLE = {
    VerdictKind.LIFTABLE: "green",
    VerdictKind.BLOCKED: "red",
    VerdictKind.UNKNOWN: "yellow",
    VerdictKind.UNSAFE: "bold red",
}
HAZARD_STYLE = "bold yellow"
# A terminal gets the sign; a pipe or file gets a word, so that plain output stays ASCII.
HAZARD_MARKER = {True: " ⚠", False: " (hazard)"}

VerdictIndex = dict[tuple[str, Arch], Verdict]


@dataclass(frozen=True, slots=True)
class _Layout:
    """Column widths shared by every per-file table of one report.

    When the table does not fit the width, columns give way in this order, so that the gate id
    and the statuses are never cut: the kind column (the id's prefix says it), the else column,
    then (in a judged report) each target's status and verdict columns become one column showing
    the verdict where there is one (``merged``), and at last the condition and admitted set move
    to lines of their own under each row (``stacked``), followed by the statuses when even those
    do not fit beside the line number and id (``targets`` empty).
    """

    line: int
    kind: int | None  # None: a single kind, or left out for width; no column
    condition: int  # 0: stacked
    admits: int
    else_kind: int | None  # None: left out for width (a stacked row says it under the row)
    targets: tuple[int, ...]  # empty in a stacked layout whose statuses are under the row
    verdicts: tuple[int, ...] | None  # None: not judged, or merged; no verdict columns
    gate_id: int
    merged: bool = False  # judged, and a target's one column shows its verdict in place of "excluded"

    @property
    def stacked(self) -> bool:
        return self.condition == 0

    def given_way(self, mixed_kinds: bool) -> list[str]:
        """What this layout leaves out or folds compared with a wide one: for the note under the table."""
        if self.stacked:
            return ["the condition and admitted set under each row"]
        gone = ["kind"] if mixed_kinds and self.kind is None else []
        gone += ["else"] if self.else_kind is None else []
        parts = [f"no {' or '.join(gone)} column"] if gone else []
        if self.merged:
            parts.append("verdicts in the target columns")
        return parts


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
    condition_need = max(len("condition"), *(len(condition_text(g)) for g in gates))
    if traced:
        # The "traced:" line sits under the condition: give it room to read, not one word a line.
        condition_need = max(condition_need, min(TRACED_WIDTH, max(len(t) for t in traced)))
    admits_need = max(len("admits"), *(len(_admits_cell_text(g)) for g in gates))
    needs = None if verdicts is None else _verdict_needs(gates, targets, verdicts, color)
    # Columns give way in order (see _Layout) until the condition and admitted set have some room.
    plans: list[tuple[int | None, int | None, bool]] = [(kind, else_kind, False)]
    if kind is not None:
        plans.append((None, else_kind, False))
    plans.append((None, None, False))
    if needs is not None:
        plans.append((None, None, True))
    for plan_kind, plan_else, merged in plans:
        fixed = [line, gate_id, *(w for w in (plan_kind, plan_else) if w is not None)]
        if not merged:
            fixed += target_widths
        columns = len(fixed) + 2 + (len(targets) if needs is not None else 0)
        available = width - TABLE_INDENT - sum(fixed) - COLUMN_GAP * (columns - 1)
        verdict_widths = None
        if needs is not None:
            # A list of missing features wraps more easily than a cut condition reads: when space is
            # short the verdict columns give some back, in steps, down to one word per line at least.
            least = target_widths if merged else (len("verdict"),) * len(targets)
            widths = [max(low, min(need, MAX_VERDICT)) for low, need in zip(least, needs, strict=True)]
            readable = min(condition_need, READABLE_CONDITION) + min(admits_need, READABLE_ADMITS)
            for floor, want in (
                (WRAP_VERDICT, readable),
                (MIN_VERDICT, readable),
                (MIN_VERDICT_WORD, MIN_CONDITION + MIN_ADMITS),
            ):
                floors = [max(low, min(need, floor)) for low, need in zip(least, needs, strict=True)]
                _shrink(widths, floors, want - (available - sum(widths)))
            verdict_widths = tuple(widths)
            available -= sum(verdict_widths)
        if available < MIN_CONDITION + MIN_ADMITS:
            continue
        if condition_need + admits_need <= available:
            condition, admits = condition_need, admits_need
        else:
            # The admitted set wraps onto more lines; the condition is cut (its file:line is right there).
            admits = max(MIN_ADMITS, min(admits_need, max(available - condition_need, available * 2 // 5)))
            condition = max(MIN_CONDITION, available - admits)
        if merged and verdict_widths is not None:
            return _Layout(line, None, condition, admits, None, verdict_widths, None, gate_id, merged=True)
        return _Layout(line, plan_kind, condition, admits, plan_else, target_widths, verdict_widths, gate_id)
    return _stacked_layout(line, target_widths, gate_id, needs, width)


def _stacked_layout(
    line: int, target_widths: tuple[int, ...], gate_id: int, needs: list[int] | None, width: int
) -> _Layout:
    """The last resort: line, statuses and id in columns, the rest under the row; the statuses
    under the row too when they do not fit beside the line number and the id."""
    available = width - TABLE_INDENT - line - gate_id - COLUMN_GAP * (len(target_widths) + 1)
    widths = list(target_widths)
    if needs is not None:
        widths = [max(low, min(need, MAX_VERDICT)) for low, need in zip(target_widths, needs, strict=True)]
        floors = [
            max(low, min(need, MIN_VERDICT_WORD)) for low, need in zip(target_widths, needs, strict=True)
        ]
        _shrink(widths, floors, sum(widths) - available)
    inline = tuple(widths) if sum(widths) <= available else ()
    return _Layout(line, None, 0, 0, None, inline, None, gate_id, merged=needs is not None)


def _details(gate: Gate) -> list[str]:
    """The verbose lines under a gate's condition: how it was resolved and what it assumes."""
    if gate.kind is GateKind.PY_RUNTIME and len(gate.evidence) > 1:
        # A resolution chain reads best as one: is_sm100 → partial(...) at common.py:309 → ...
        lines = ["resolved: " + " → ".join(item.render() for item in gate.evidence)]
    elif gate.kind is GateKind.CPP_RUNTIME:
        # The value's chain (version_num → get_sm_version_num() → cudaDeviceGetAttribute(...)), then
        # what happens to other devices (the error text users search for).
        outcomes = tuple(e for e in gate.evidence if e.outcome)
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


def _status_cell(
    gate: Gate, target: Target, layout: _Layout, verdicts: VerdictIndex | None, color: bool
) -> Text:
    """A target's status; in a merged layout its verdict where it has one."""
    status = gate.status(target.arch)
    verdict = (verdicts or {}).get((gate.id, target.arch))
    if layout.merged and verdict is not None:
        cell = _verdict_cell(verdict, color)
        if status is Status.UNKNOWN and verdict.kind is not VerdictKind.UNKNOWN:
            return Text.assemble(Text("unknown; ", style=STATUS_STYLE[status]), cell)
        return cell
    if gate.coverage is not None:
        # A binary: only through the PTX JIT, or partly (some compiled units have no image).
        seen = gate.coverage.coverage(target.arch)
        if seen in (Coverage.PTX_JIT, Coverage.PARTIAL):
            return Text(seen.value, style=STATUS_STYLE[status])
    return Text(status.value, style=STATUS_STYLE[status])


def _condition_extras(
    gate: Gate,
    targets: Sequence[Target],
    options: RenderOptions,
    verdicts: VerdictIndex | None,
    traced: dict[str, GateTrace],
    probed: bool,
) -> list[tuple[str, str]]:
    """The lines, with their style, under a gate's condition: what a traced run did, and with
    ``verbose`` how it was resolved and why each target got its verdict."""
    lines: list[tuple[str, str]] = []
    if gate.id in traced:
        lines.append(("traced: " + trace_text(traced[gate.id], probed), "magenta"))
        agreement = traced[gate.id].agreement
        if agreement and (options.verbose or agreement.startswith("differs")):
            lines.append((agreement, "yellow" if agreement.startswith("differs") else "dim"))
    if options.verbose:
        lines += [(detail, "dim") for detail in _details(gate)]
        lines += _verdict_details(gate, targets, verdicts or {})
    return lines


@dataclass(frozen=True, slots=True)
class _Column:
    heading: str
    width: int
    wraps: bool = False  # folds onto more lines; otherwise one line, cut with an ellipsis if need be
    justify: JustifyMethod = "left"


def _new_table(
    targets: Sequence[Target], layout: _Layout, options: RenderOptions, *, header: bool, wrap: bool
) -> Table:
    """An empty table with the report-wide columns (shown with ``header``); ``wrap`` folds the condition."""
    table = Table(
        box=None,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        show_header=header,
        header_style="bold",
        leading=1 if options.verbose and not layout.stacked else 0,
    )
    columns = [_Column("line", layout.line, justify="right")]
    if not layout.stacked:
        if layout.kind is not None:
            columns.append(_Column("kind", layout.kind))
        columns.append(_Column("condition", layout.condition, wraps=wrap))
        # The admitted set wraps instead of being cut: a cut set would be a wrong answer.
        columns.append(_Column("admits", layout.admits, wraps=True))
        if layout.else_kind is not None:
            columns.append(_Column("else", layout.else_kind))
    if layout.targets:
        for index, target in enumerate(targets):
            # A merged column holds the verdict, where there is one: it wraps, never cut.
            columns.append(_Column(_target_header(target), layout.targets[index], wraps=layout.merged))
            if layout.verdicts is not None:
                columns.append(_Column("verdict", layout.verdicts[index], wraps=True))
    # The id is what `explain` and `lift` take: never wrapped, never narrower than itself.
    columns.append(_Column("id", layout.gate_id))
    height = max(column.heading.count("\n") for column in columns)
    for column in columns:
        # Pad every heading to the same height so that one-line headings sit on the bottom line.
        table.add_column(
            Text("\n" * (height - column.heading.count("\n")) + column.heading),
            width=column.width,
            min_width=column.width,
            justify=column.justify,
            no_wrap=not column.wraps,
            overflow="fold" if column.wraps else "ellipsis",
        )
    return table


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
) -> RenderableType:
    """Rows for ``gates`` (or, with ``header``, just the column headings) in the report-wide layout."""
    # A traced report wraps the condition column too: the line saying what the run did is read whole.
    wrap = options.verbose or bool(traced)
    table = _new_table(targets, layout, options, header=header, wrap=wrap)
    if layout.stacked:
        return _stacked_rows(table, gates, targets, layout, options, verdicts, traced or {}, probed_run)
    for gate in gates:
        condition = Text(condition_text(gate))
        for extra, style in _condition_extras(gate, targets, options, verdicts, traced or {}, probed_run):
            condition.append("\n")
            condition.append(extra, style=style)
        cells: list[Text] = [Text(str(gate.location.line))]
        if layout.kind is not None:
            cells.append(Text(gate.kind.value))
        cells += [condition, Text(_admits_cell_text(gate))]
        if layout.else_kind is not None:
            cells.append(Text(gate.else_kind.value))
        for target in targets:
            cells.append(_status_cell(gate, target, layout, verdicts, options.color))
            if layout.verdicts is not None:
                cells.append(_verdict_cell((verdicts or {}).get((gate.id, target.arch)), options.color))
        cells.append(Text(gate.id, style="dim"))
        table.add_row(*cells)
    return table


def _stacked_rows(
    table: Table,
    gates: Sequence[Gate],
    targets: Sequence[Target],
    layout: _Layout,
    options: RenderOptions,
    verdicts: VerdictIndex | None,
    traced: dict[str, GateTrace],
    probed: bool,
) -> RenderableType:
    """A narrow terminal's rows: line, statuses and id, then the rest on lines of their own."""
    wrap = options.verbose or bool(traced)
    parts: list[RenderableType] = []
    for gate in gates:
        row = table if not parts else _new_table(targets, layout, options, header=False, wrap=wrap)
        cells = [Text(str(gate.location.line))]
        if layout.targets:
            cells += [_status_cell(gate, target, layout, verdicts, options.color) for target in targets]
        cells.append(Text(gate.id, style="dim"))
        row.add_row(*cells)
        lines: list[Text] = [
            Text(condition_text(gate), no_wrap=not wrap, overflow="fold" if wrap else "ellipsis"),
            Text(f"admits {_admits_cell_text(gate)}; else {gate.else_kind.value}", overflow="fold"),
        ]
        if not layout.targets:
            statuses = Text(overflow="fold")
            for index, target in enumerate(targets):
                statuses.append("; " if index else "")
                statuses.append(f"{target_label(target)}: ")
                statuses.append_text(_status_cell(gate, target, layout, verdicts, options.color))
            lines.append(statuses)
        lines += [
            Text(extra, style=style, overflow="fold")
            for extra, style in _condition_extras(gate, targets, options, verdicts, traced, probed)
        ]
        parts += [row, Padding.indent(Group(*lines), layout.line + COLUMN_GAP)]
    return Group(*parts) if parts else table


def _print_verdict_counts(console: Console, report: Report) -> None:
    """``flashinfer-python 0.6.2 for sm_120: 274 liftable (13 with hazards), 2,526 blocked, 39 unknown``."""
    entries = package_verdict_counts(report)
    if not entries:
        return
    console.print()
    console.print(Text("verdicts:", style="bold"))
    for entry in entries:
        line = Text(f"{entry.label} for {entry.target.arch.name}: ")
        for index, kind in enumerate(entry.counts.shown()):
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
    from liftgate.report.chains import chain_text  # the chain stage's code: only --by chain needs it

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
            "(the default view lists them by feature)",
            style="dim",
        )
    )
    for note in report.notes:
        console.print(Text(f"note: {note}"))
    return out.getvalue()


OUTCOME_STYLE = {
    Outcome.UNSAFE: "bold red",
    Outcome.SHUT_OUT: "red",
    Outcome.FALLBACK: "magenta",
    Outcome.OFF: "yellow",
    Outcome.UNKNOWN: "yellow",
}


def _verdict_style(feature: FeatureLoss) -> str:
    kinds = {v.kind for v in feature.verdicts}
    if VerdictKind.LIFTABLE in kinds:
        return "green"
    return "red" if kinds == {VerdictKind.BLOCKED} else "yellow"


def _losses_text(report: Report, options: RenderOptions, console: Console) -> None:
    """The default view: per target, the code paths it loses, by outcome and feature, each feature
    with its verdicts and the command that lifts what is liftable (`liftgate.report.losses`)."""
    outcomes = Outcomes.of_report(report)
    # Thousands of lines: printed as one group (every line folds, as each print of its own did).
    lines: list[RenderableType] = []
    features = feature_losses(report, options, outcomes)
    counts = {c.target.arch: c for c in loss_counts(report, options, outcomes)}
    for t_index, target in enumerate(distinct_targets(report)):
        if t_index:
            lines.append(Text())
        count = counts[target.arch]
        lines.append(Text(count.text() + f" — {scope_text(report)}", style="bold"))
        mine = [f for f in features if f.target.arch == target.arch]
        for outcome, group in groupby(mine, key=lambda f: f.outcome):
            group_list = list(group)
            paths = sum(len(f.gates) for f in group_list)
            lines.append(
                Padding.indent(
                    Text(
                        f"{HEADINGS[outcome]}: {plural(paths, 'path')} in {plural(len(group_list), 'feature')}",
                        style=OUTCOME_STYLE[outcome],
                    ),
                    FILE_INDENT,
                )
            )
            width = max(len(f"{len(f.gates):,}") for f in group_list)
            previous = None
            for feature in group_list:
                package = (feature.package, feature.version)
                if package != previous and len({(f.package, f.version) for f in mine}) > 1:
                    label = f"{feature.package} {feature.version}" if feature.version else feature.package
                    lines.append(Padding.indent(Text(label, style="bold"), TABLE_INDENT))
                previous = package
                head = Text(f"{len(feature.gates):,}".rjust(width) + "  ")
                head.append(feature.label, style="cyan")
                lines.append(Padding.indent(head, TABLE_INDENT))
                verdict = feature.verdict_text() or ("not judged" if not report.verdicts else "")
                command = feature.command()
                detail = Text(verdict, style=_verdict_style(feature))
                if command:
                    detail.append((": " if verdict else "") + command)
                if detail.plain:
                    lines.append(Padding.indent(detail, TABLE_INDENT + width + 2))
                for gate in feature.gates:
                    if gate.coverage is not None and gate.coverage.units:
                        text = Text(coverage_text(gate.coverage, target.arch), style="dim")
                        lines.append(Padding.indent(text, TABLE_INDENT + width + 2))
                        if options.verbose:  # every unit with no image, and all its kernels
                            for unit in gate.coverage.missing(target.arch):
                                names = ", ".join(unit.kernels) or unit.unread or "no kernel"
                                row = Text(
                                    f"no image in the unit of {', '.join(unit.images)}: {names}", style="dim"
                                )
                                lines.append(Padding.indent(row, TABLE_INDENT + width + 4))
                if options.verbose:
                    for gate, reading in zip(feature.gates, feature.readings, strict=True):
                        row = Text(f"{gate.location.line}: {condition_text(gate)} — ", style="dim")
                        row.append(reading.outcome.value, style=OUTCOME_STYLE.get(reading.outcome, ""))
                        row.append(f" ({reading.text}) {gate.id}", style="dim")
                        lines.append(Padding.indent(row, TABLE_INDENT + width + 4))
        if count.alternatives:
            lines.append(
                Text(
                    f"  not losses: {plural(count.alternatives, 'gate')} where {target.arch.name} takes its own "
                    "or a newer path (--show excluded lists every gate that leaves it out)",
                    style="dim",
                )
            )
    print_lines(console, lines)


def print_lines(console: Console, lines: Sequence[RenderableType]) -> None:
    """``console.print(Group(*lines), overflow="fold")``, the same text, faster. A line that fits
    the width (a `Text`, or one indented by `Padding.indent`) is written as rich writes it: the
    indent, then the text's segments in their styles. Only the others go through rich's layout
    (measure, wrap, pad, crop), which took most of the default view's rendering: thousands of lines,
    nearly all of them short."""
    options = console.options.update(overflow="fold")
    width = options.max_width
    segments: list[Segment] = []
    for line in lines:
        indent, text = _indented(line)
        if text is not None and _fits(text, width - indent, indent > 0):
            if indent:
                segments.append(Segment(" " * indent))
            segments.extend(_JOIN.join((text,)).render(console))  # the line's style a span, as rich has it
            segments.append(Segment.line())
        else:
            segments.extend(console.render(line, options))
    # Every line is within the width already: rich's cropping would find nothing to cut.
    console.print(Segments(segments), crop=False)


_JOIN = Text("\n")  # what rich joins a text's wrapped lines with


def print_table(console: Console, table: RenderableType, indent: int) -> None:
    """``console.print(Padding.indent(table, indent))``, the same text, faster, for the tables
    `_new_table` makes (no box, no edge padding, collapsed padding, every column of a fixed width,
    every cell a `Text`) when they fit the width: each cell is laid out as rich lays it out (a cell
    of one short line justified here as rich's wrap justifies it, any other by rich's own
    `render_lines`), and the rows are put together here instead of by rich's table, padding and
    cropping, which took most of ``--show excluded``'s rendering (about 17,000 lines for
    FlashInfer and SGLang). Any other table goes through rich (`tests/test_table_lines.py` holds
    both to rich's output)."""
    rows = _table_rows(console, table, indent)
    if rows is None:
        console.print(Padding.indent(table, indent))
        return
    # Every line is within the width already: rich's cropping would find nothing to cut.
    console.print(Segments(rows), crop=False)


def _table_rows(console: Console, table: RenderableType, indent: int) -> list[Segment] | None:
    """The segments `print_table` writes, or None where the table is not one it lays out."""
    if not (
        isinstance(table, Table)
        and table.box is None
        and not (table.show_edge or table.pad_edge or table.show_header or table.show_footer)
        and table.collapse_padding
        and table.padding == (0, 1, 0, 1)
        and not (table.expand or table.width or table.title or table.caption or table.row_styles)
        and table.style in ("", "none")
        and all(row.style is None and not row.end_section for row in table.rows)
        and table.columns
    ):
        return None
    columns = table.columns
    last = len(columns) - 1
    widths: list[int] = []
    texts: list[list[Text]] = []
    for column in columns:
        cells = [cell for cell in column.cells if isinstance(cell, Text)]
        if not (
            column.width is not None
            and column.width >= 1
            and column.min_width == column.width
            and column.max_width is None
            and column.ratio is None
            and column.style in ("", "none")
            and column.vertical == "top"
            and column.justify in ("left", "right")
            and not column.highlight
            and len(cells) == table.row_count
        ):
            return None
        widths.append(column.width)
        texts.append(cells)
    # Collapsed padding without edge padding: one blank after every column but the last.
    if sum(widths) + last > console.options.max_width - indent:
        return None  # rich would narrow the columns to fit
    options = console.options.update(height=None, highlight=False)
    column_options = [
        options.update(width=width, justify=column.justify, no_wrap=column.no_wrap, overflow=column.overflow)
        for width, column in zip(widths, columns, strict=True)
    ]
    blanks = [Segment(" " * (width + (index < last))) for index, width in enumerate(widths)]
    gap = Segment(" ")
    left = Segment(" " * indent) if indent else None
    line_end = Segment.line()
    out: list[Segment] = []
    for index in range(table.row_count):
        rendered = [_cell_lines(console, texts[k][index], column_options[k]) for k in range(len(columns))]
        for line in range(max(len(lines) for lines in rendered)):
            if left is not None:
                out.append(left)
            for k, lines in enumerate(rendered):
                if line < len(lines):
                    out.extend(lines[line])
                    if k < last:
                        out.append(gap)
                else:
                    out.append(blanks[k])
            out.append(line_end)
    return out


def _cell_lines(console: Console, text: Text, options: ConsoleOptions) -> list[list[Segment]]:
    """``console.render_lines(text, options, pad=True)``: a cell's lines, each as wide as its column.
    Most cells are one short line: such a line is justified as rich's wrap justifies it (padded on
    the right, or stripped and padded on the left) and rendered with its style a span, as rich's
    join has it, without the wrapping around it."""
    plain = text.plain
    width = options.max_width
    # What `print_lines` writes itself, with no setting of the text's own over the column's, and
    # one column a character (the justification below counts characters).
    if (
        _fits(text, width, indented=False)
        and text.overflow is None
        and text.no_wrap is None
        and cell_len(plain) == len(plain)
    ):
        line = text.copy()
        overflow = options.overflow or "fold"
        if options.justify == "right":
            line.rstrip()
            line.truncate(width, overflow=overflow)
            line.pad_left(width - len(line.plain))
        else:
            line.truncate(width, overflow=overflow, pad=True)
        return [list(_JOIN.join((line,)).render(console))]
    return console.render_lines(text, options, pad=True)


def _indented(line: RenderableType) -> tuple[int, Text | None]:
    """``line``'s indent and text where it is a `Text` or an indented one (`Padding.indent`)."""
    if isinstance(line, Text):
        return 0, line
    if (
        isinstance(line, Padding)
        and isinstance(line.renderable, Text)
        and not (line.top or line.right or line.bottom or line.expand)
        and line.style == "none"
    ):
        return line.left, line.renderable
    return 0, None


def _fits(text: Text, width: int, indented: bool) -> bool:
    """Whether rich prints ``text`` in ``width`` columns as it is written: one line of printable
    characters (no tab to expand, no separator rich splits at), no justification to pad it, that
    fits. rich lays an indented text out at its own width, not the line's, and trims whitespace
    from a line with more characters than columns (combining marks): that too is left to rich, as
    is an indented text that takes no column (rich prints nothing at all for it)."""
    plain = text.plain
    if text.justify is not None or text.end != "\n" or not plain.isprintable():
        return False
    cells = cell_len(plain)
    if indented:
        return 0 < cells <= width and len(plain) <= cells
    return cells <= width and len(plain) <= width


def table_console(out: io.StringIO, color: bool, width: int) -> Console:
    """The console a table is printed to: ``out``, in colour or not, ``width`` columns."""
    return Console(
        file=out,
        force_terminal=color,
        no_color=not color,
        width=width,
        # Not a terminal's: without a height, rich asks the terminal for its size on every print.
        height=DEFAULT_HEIGHT,
        highlight=False,
        markup=False,
        emoji=False,
        force_jupyter=False,
        force_interactive=False,
    )


class TableFormatter:
    """``--format table``: what a person reads in a terminal."""

    def format(self, report: Report, options: RenderOptions) -> str:
        # Names that are not UTF-8, control characters: escaped, whichever field they come from.
        return printable(self._format(report, options), keep_sgr=options.color)

    def _format(self, report: Report, options: RenderOptions) -> str:
        out = io.StringIO()
        console = table_console(out, options.color, options.width or DEFAULT_WIDTH)
        if options.by is GroupBy.CHAIN:
            return _TRAILING_BLANKS.sub("", _chains_text(report, options, console, out))
        if options.show is Show.LOSSES and report.targets and options.verdicts is None:
            _losses_text(report, options, console)
            return self._tail(report, options, console, out)
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
                    print_table(console, rows, TABLE_INDENT)
            given_way = layout.given_way(len({g.kind for g in gates}) > 1)
            if given_way:
                console.print(Text(f"({'; '.join(given_way)}: to fit {console.width} columns)", style="dim"))
        return self._tail(report, options, console, out)

    def _tail(self, report: Report, options: RenderOptions, console: Console, out: io.StringIO) -> str:
        """Verdict counts, the trace, notes and skipped files: what follows either view."""
        _print_verdict_counts(console, scoped(report, options))
        if report.trace is not None:
            _print_trace(console, report.trace, options.verbose)
        notes = list(report.notes)
        if notes or report.skips:
            console.print()
        for note in notes:
            console.print(Text(f"note: {note}"))
        _print_skips(console, report, options.verbose)
        # rich pads every cell to its column width; trailing blanks only make diffs noisy.
        return _TRAILING_BLANKS.sub(lambda m: "".join(_ANSI_CODE.findall(m.group(0))), out.getvalue())
