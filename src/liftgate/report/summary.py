"""Counts over a whole report and the one-line summary written to stderr after a scan.

The counts describe the scan, not the filtered view: ``57 exclude sm_120`` counts every gate
that excludes sm_120, whatever ``--show`` and ``--kind`` selected for display. The JSON
``summary`` object is built from the same counts, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from liftgate.model import Report, Status
from liftgate.report.interface import RenderOptions, Show
from liftgate.report.select import distinct_targets, kinds_text, plural


@dataclass(frozen=True, slots=True)
class TargetCounts:
    """How many of a report's gates exclude, admit or leave undecided one target."""

    excluded: int
    admitted: int
    unknown: int


def target_counts(report: Report) -> dict[str, TargetCounts]:
    """Counts per distinct target, keyed by arch name (``sm_120``), in the order the targets were given."""
    counts: dict[str, TargetCounts] = {}
    for target in distinct_targets(report):
        per_status = dict.fromkeys(Status, 0)
        for gate in report.gates:
            per_status[gate.status(target.arch)] += 1
        counts[target.arch.name] = TargetCounts(
            excluded=per_status[Status.EXCLUDED],
            admitted=per_status[Status.ADMITTED],
            unknown=per_status[Status.UNKNOWN],
        )
    return counts


def unknown_gates(report: Report) -> int:
    """Gates whose status is unknown for at least one target."""
    targets = distinct_targets(report)
    return sum(1 for gate in report.gates if any(gate.status(t.arch) is Status.UNKNOWN for t in targets))


def scope_text(report: Report) -> str:
    """``1 package (1,992 files)``."""
    return f"{plural(len(report.packages), 'package')} ({plural(report.files_scanned, 'file')})"


def summary_line(report: Report) -> str:
    """``scanned 1,992 files in 1 package (12 skipped), 310 gates, 57 exclude sm_120, 3 unknown — 1.84 s``.

    With several targets each gets its own ``N exclude sm_XX``; ``unknown`` counts gates whose
    status is unknown for at least one target. Without targets only the scan itself is summarised.
    """
    parts = [
        f"scanned {plural(report.files_scanned, 'file')} in {plural(len(report.packages), 'package')}"
        f" ({len(report.skips):,} skipped)",
        plural(len(report.gates), "gate"),
    ]
    counts = target_counts(report)
    for arch_name, count in counts.items():
        verb = "excludes" if count.excluded == 1 else "exclude"
        parts.append(f"{count.excluded:,} {verb} {arch_name}")
    if counts:
        parts.append(f"{unknown_gates(report):,} unknown")
    return f"{', '.join(parts)} — {report.elapsed_s:.2f} s"


def nothing_selected(report: Report, options: RenderOptions) -> str:
    """What a formatter says when no gate matches: ``no gates exclude sm_120 in 1 package (1,992 files)``."""
    arch_names = [target.arch.name for target in distinct_targets(report)]
    subject = f"no {kinds_text(options.kinds)}gates"
    if options.show is Show.ALL or not arch_names:
        return f"{subject} in {scope_text(report)}"
    if options.show is Show.EXCLUDED:
        return f"{subject} exclude {' or '.join(arch_names)} in {scope_text(report)}"
    return f"{subject} admit {' and '.join(arch_names)} in {scope_text(report)}"
