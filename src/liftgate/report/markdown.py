"""Markdown output, for pasting into a GitHub issue or pull request.

A heading, the one-line summary, one table per package (``| file:line | condition | admits |
sm_120 | id |``) and the skipped files folded into a ``<details>`` block. A judged report adds a
verdict column after each target's status, a table of verdict counts per package and target
under the summary, and the hazards of the listed gates in a second ``<details>`` block. Cells are escaped for
GitHub-flavoured Markdown: ``|`` never splits a cell, and conditions sit in code spans so
``__CUDA_ARCH__`` is not read as bold.

GitHub takes at most 65,536 characters in an issue or pull-request comment, and a release lists
thousands of gates, so the default output is a summary that fits: the summary line, the counts
per package and kind (and verdict counts), then the gates that matter most (`rank_key`) for as
many as keep the document under `SUMMARY_BUDGET` characters, ending with how many more there are.
``--show all`` renders every gate; a document over the limit then says so at its top
(`too_long_note`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import groupby

from liftgate.arch.core import Arch
from liftgate.model import Confidence, Coverage, Gate, Report, Status, Target, Verdict, VerdictKind
from liftgate.report.chains import chain_views, verdict_line
from liftgate.report.interface import GroupBy, RenderOptions, Show, printable
from liftgate.report.losses import feature_losses
from liftgate.report.select import (
    admits_text,
    condition_text,
    distinct_targets,
    gate_sort_key,
    kinds_text,
    missing_features,
    plural,
    scoped,
    select_gates,
    skip_sort_key,
    target_label,
    trace_summary_lines,
    trace_text,
)
from liftgate.report.summary import (
    kind_counts,
    nothing_selected,
    package_verdict_counts,
    summary_line,
)

GITHUB_COMMENT_LIMIT = 65_536  # characters GitHub accepts in an issue or pull-request comment
SUMMARY_BUDGET = 65_000  # the summary form stays under this, whatever the scan found
SUMMARY_CONDITION = 240  # a condition longer than this is cut in the summary form (its id is there)
SUMMARY_ROWS = 40  # rows of each counts table, skipped files and untraced queries in the summary form

# Characters that start Markdown or HTML constructs anywhere in a cell. ``_`` is handled apart:
# between two word characters it never starts emphasis, so sm_120 stays readable in the source.
_SPECIAL = re.compile(r"([\\`*\[\]<>|~])")
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")

_STATUS_CELL = {Status.EXCLUDED: "**excluded**", Status.ADMITTED: "admitted", Status.UNKNOWN: "*unknown*"}
_VERDICT_CELL = {
    VerdictKind.LIFTABLE: "liftable",
    VerdictKind.BLOCKED: "**blocked**",
    VerdictKind.UNKNOWN: "*unknown*",
    VerdictKind.UNSAFE: "**unsafe**",
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
    if options.show is Show.LOSSES:
        return f"## liftgate: code paths {' and '.join(labels)} {'lose' if len(labels) > 1 else 'loses'}" + (
            f" ({kinds}gates)" if kinds else ""
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
    if verdict.kind in (VerdictKind.BLOCKED, VerdictKind.UNSAFE) and missing:
        cell += ": " + ", ".join(code_span(feature) for feature in missing)
    return cell + (HAZARD_MARKER if verdict.hazards else "")


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def _status_cell(gate: Gate, target: Target) -> str:
    if gate.coverage is not None:  # a binary some of whose compiled units have no image: say so
        seen = gate.coverage.coverage(target.arch)
        if seen is Coverage.PARTIAL:
            return f"{_STATUS_CELL[gate.status(target.arch)]} (partial)"
    return _STATUS_CELL[gate.status(target.arch)]


def _package_table(
    report: Report,
    gates: list[Gate],
    verdicts: dict[tuple[str, Arch], Verdict] | None,
    condition_limit: int | None = None,
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
    header.append("id")
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for gate in gates:
        loc = gate.location
        cells = [
            code_span(f"{loc.path}:{loc.line}"),
            code_span(_cut(condition_text(gate), condition_limit)),
            _admits_cell(gate),
        ]
        for target in targets:
            cells.append(_status_cell(gate, target))
            if verdicts is not None:
                cells.append(_verdict_cell(verdicts.get((gate.id, target.arch))))
        if traced is not None:
            cells.append(escape_text(trace_text(traced[gate.id], probed)) if gate.id in traced else "")
        cells.append(code_span(gate.id))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _more_row(count: int, what: str, columns: int) -> str:
    """A last table row saying how many rows were left out of a summary."""
    return f"| … {count:,} more {what} | " + " | ".join("" for _ in range(columns - 1)) + " |"


def _trace_block(report: Report, limit: int | None = None) -> list[str]:
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
        for u in trace.untraced[:limit]:
            where = u.site.render() + (f" ({u.site.package})" if u.site.package else "")
            lines.append(
                f"| {code_span(u.api)} | {escape_text(u.answer)} | {u.count:,} | {escape_text(where)} "
                f"| {escape_text(u.reason)} |"
            )
        if limit is not None and len(trace.untraced) > limit:
            lines.append(_more_row(len(trace.untraced) - limit, "places", 5))
        lines.append("")
    lines += [f"- note: {escape_text(n)}" for n in trace.notes]
    return [*lines, ""] if trace.notes else lines


def _verdict_counts_table(report: Report, limit: int | None = None) -> list[str]:
    """Verdict counts of the scan (its kinds and paths chosen) per package and target, under the summary line."""
    entries = package_verdict_counts(report)
    if not entries:
        return []
    unsafe = any(entry.counts.unsafe for entry in entries)
    kinds = [VerdictKind.LIFTABLE, VerdictKind.BLOCKED, VerdictKind.UNKNOWN]
    kinds = [VerdictKind.UNSAFE, *kinds] if unsafe else kinds
    lines = [
        "Verdicts for the gates that exclude a target"
        + (" (and, unsafe, those that admit one into code using what it lacks)" if unsafe else "")
        + ":",
        "",
        "| package | target | " + " | ".join(kind.value for kind in kinds) + " |",
        "|" + "|".join("---" for _ in range(2 + len(kinds))) + "|",
    ]
    for entry in entries[:limit]:
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
    if limit is not None and len(entries) > limit:
        lines.append(_more_row(len(entries) - limit, "packages and targets", 2 + len(kinds)))
    return [*lines, ""]


def _kind_counts_table(report: Report, limit: int | None = None) -> list[str]:
    """How many gates of each kind each package has, and how many exclude each target or leave it unknown."""
    entries = kind_counts(report)
    if not entries:
        return []
    targets = distinct_targets(report)
    lines = [
        "Gates per package and kind:",
        "",
        "| package | kind | gates | " + " | ".join(escape_text(target_label(t)) for t in targets) + " |",
        "|" + "|".join("---" for _ in range(3 + len(targets))) + "|",
    ]
    for entry in entries[:limit]:
        cells = [escape_text(entry.label), entry.kind.value, f"{entry.gates:,}"]
        cells += [f"{c.excluded:,} excluded, {c.unknown:,} unknown" for _, c in entry.targets]
        lines.append("| " + " | ".join(cells) + " |")
    if limit is not None and len(entries) > limit:
        lines.append(_more_row(len(entries) - limit, "packages and kinds", 3 + len(targets)))
    return [*lines, ""]


def _hazards_block(
    report: Report, gates: list[Gate], verdicts: dict[tuple[str, Arch], Verdict] | None
) -> list[str]:
    """The hazards of the listed gates, folded: they are long, and only matter to whoever lifts."""
    rows = [
        f"| {code_span(f'{gate.location.path}:{gate.location.line}')} | {escape_text(target.arch.name)} "
        f"| {escape_text(verdict.kind.value)} | {escape_text(hazard.text)} |"
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
                escape_text(member.link.relation.value),
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


def _skips_block(report: Report, limit: int | None = None) -> list[str]:
    if not report.skips:
        return []
    skips = sorted(report.skips, key=skip_sort_key)
    count = len(skips)
    shown = skips[:limit]
    lines = [
        "<details>",
        f"<summary>{count:,} {'file' if count == 1 else 'files'} not analysed</summary>",
        "",
        "| package | file | reason |",
        "|---|---|---|",
    ]
    lines += [
        f"| {escape_text(s.package or '')} | {code_span(s.path)} | {escape_text(s.reason)} |" for s in shown
    ]
    if len(shown) < count:
        lines.append(_more_row(count - len(shown), "files (`--format json` lists them all)", 3))
    lines += ["", "</details>"]
    return lines


_VERDICT_RANK = {
    VerdictKind.UNSAFE: -1,
    VerdictKind.LIFTABLE: 0,
    VerdictKind.UNKNOWN: 1,
    VerdictKind.BLOCKED: 2,
}
RANKING = "a hazard first, then liftable, unknown and blocked verdicts, then the gates that exclude the most targets"


def rank_key(
    gate: Gate, targets: Sequence[Target], verdicts: dict[tuple[str, Arch], Verdict]
) -> tuple[bool, int, int, tuple[str, str, str, int, int, str]]:
    """What the summary form lists first (`RANKING`): the gates a reader can act on, then the rest."""
    found = [v for t in targets if (v := verdicts.get((gate.id, t.arch))) is not None]
    excluded = sum(1 for t in targets if gate.status(t.arch) is Status.EXCLUDED)
    best = min((_VERDICT_RANK[v.kind] for v in found), default=len(_VERDICT_RANK))
    return (not any(v.hazards for v in found), best, -excluded, gate_sort_key(gate))


def too_long_note(length: int) -> str:
    """What a Markdown report over GitHub's comment limit says at its top (and the scan on stderr)."""
    return (
        f"this Markdown report is {length:,} characters long, over the {GITHUB_COMMENT_LIMIT:,} GitHub "
        "accepts in an issue or pull-request comment: attach it as a file, or leave out --show all for "
        "a summary that fits"
    )


def _with_too_long_note(text: str) -> str:
    """``text`` with `too_long_note` under its heading when it is over GitHub's comment limit."""
    if len(text) <= GITHUB_COMMENT_LIMIT:
        return text
    heading, _, rest = text.partition("\n")
    length = len(text)
    for _ in range(3):  # the note's own length is part of the document's: settle the number
        note = f"> **Note:** {escape_text(too_long_note(length))}."
        length = len(text) + len(note) + 2
    return f"{heading}\n\n{note}\n{rest}"


def _losses_table(report: Report, options: RenderOptions, limit: int | None) -> list[str]:
    """Per target, the features whose code paths it loses, shut-outs first (`liftgate.report.losses`)."""
    features = feature_losses(report, options)
    if not features:
        return []
    lines = [
        "| target | outcome | paths | feature | verdicts | to get them back |",
        "|---|---|--:|---|---|---|",
    ]
    for feature in features[:limit]:
        command = feature.command()
        lines.append(
            f"| {feature.target.arch.name} | {feature.outcome.value} | {len(feature.gates):,} "
            f"| {code_span(feature.label)} | {escape_text(feature.verdict_text())} "
            f"| {code_span(command) if command else ''} |"
        )
    if limit is not None and len(features) > limit:
        lines.append(f"\n{len(features) - limit:,} more features: `--format json` lists them all (`losses`).")
    return [*lines, ""]


class MarkdownFormatter:
    """``--format markdown``: a summary that fits a GitHub comment, or every gate with ``--show all``."""

    def format(self, report: Report, options: RenderOptions) -> str:
        # Names that are not UTF-8, control characters: escaped, whichever field they come from.
        text = printable(self._format(report, options))
        return _with_too_long_note(text)

    def _format(self, report: Report, options: RenderOptions) -> str:
        counted = scoped(report, options)
        summary = options.show is not Show.ALL and options.by is not GroupBy.CHAIN
        limit = SUMMARY_ROWS if summary else None
        head = [_heading(report, options), "", escape_text(summary_line(report, options)), ""]
        head += _verdict_counts_table(counted, limit)
        if options.show is Show.LOSSES and report.targets:
            head += _losses_table(report, options, limit)
        if options.by is GroupBy.CHAIN:
            return _join([*head, *_chains_block(report, options)])
        gates = select_gates(report, options)
        if not summary:
            return _join(self._document(report, options, head, gates, gates))
        head += _kind_counts_table(counted, limit)
        verdicts = report.verdict_index()
        targets = distinct_targets(report)
        ranked = sorted(gates, key=lambda gate: rank_key(gate, targets, verdicts))

        def document(count: int) -> str:
            chosen = {gate.id for gate in ranked[:count]}
            shown = [gate for gate in gates if gate.id in chosen]
            return _join(self._document(report, options, head, gates, shown, summary=True))

        return _fit(document, len(gates), SUMMARY_BUDGET)

    def _document(
        self,
        report: Report,
        options: RenderOptions,
        head: list[str],
        gates: list[Gate],
        shown: list[Gate],
        summary: bool = False,
    ) -> list[str]:
        """The lines of a report listing ``shown`` of the selected ``gates``; a ``summary`` cuts long parts."""
        limit = SUMMARY_ROWS if summary else None
        lines = list(head)
        # Verdict columns only in a judged report, so that other reports render as they always did.
        verdicts = report.verdict_index() if report.verdicts else None
        if not gates:
            lines += [escape_text(nothing_selected(report, options)) + ".", ""]
        elif len(shown) < len(gates):
            lines += [
                f"The {len(shown):,} of {plural(len(gates), 'gate')} listed that matter most ({RANKING}):",
                "",
            ]
        versions = {p.name: p.version for p in report.packages}
        for package, package_gates in groupby(shown, key=lambda g: (g.location.package, g.location.version)):
            name, version = package
            version = version or versions.get(name)
            lines += [f"### {escape_text(name)}" + (f" {escape_text(version)}" if version else ""), ""]
            condition_limit = SUMMARY_CONDITION if summary else None
            lines += [*_package_table(report, list(package_gates), verdicts, condition_limit), ""]
        notes = list(report.notes)
        if notes:
            lines += [f"- {escape_text(note)}" for note in notes] + [""]
        lines += _trace_block(report, limit)
        lines += _hazards_block(report, shown, verdicts)
        lines += _skips_block(report, limit)
        if len(shown) < len(gates):
            more = len(gates) - len(shown)
            lines += [
                "",
                f"{more:,} more {'gate' if more == 1 else 'gates'} not shown: use `--show all` (too long for a "
                "GitHub comment) or `--format json`",
            ]
        return lines


def _join(lines: list[str]) -> str:
    return "\n".join(lines).rstrip("\n") + "\n"


def _fit(document: Callable[[int], str], count: int, budget: int) -> str:
    """``document(n)`` for the largest ``n`` up to ``count`` whose printable text is within ``budget``
    characters (``document(0)`` when none is)."""
    full = document(count)
    if len(printable(full)) <= budget:
        return full
    low, high = 0, count - 1  # document(low) is taken to fit; document(high + 1) does not
    while low < high:
        middle = (low + high + 1) // 2
        if len(printable(document(middle))) <= budget:
            low = middle
        else:
            high = middle - 1
    return document(low)
