"""Counts over a whole report and the one-line summary written to stderr after a scan.

The counts describe the scan's scope, not the filtered view: ``57 exclude sm_120`` counts every
gate of the kinds and paths chosen (``--kind``, ``--path``, ``--exclude-path``; all of them by
default) that excludes sm_120, whatever ``--show`` and ``--verdict`` selected for display. The
JSON ``summary`` object always counts the whole scan, so without a kind or path filter the two
never disagree. A judged scan
adds verdict counts: in total for the summary line, per package and target for the table and
Markdown outputs (``flashinfer-python 0.6.2 for sm_120: 274 liftable (13 with hazards), ...``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from liftgate.model import Gate, GateKind, Report, Status, Target, TraceSummary, Verdict, VerdictKind
from liftgate.report.interface import RenderOptions, Show
from liftgate.report.losses import loss_counts
from liftgate.report.select import (
    distinct_targets,
    filters_text,
    kinds_text,
    plural,
    scoped,
)


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


@dataclass(frozen=True, slots=True)
class VerdictCounts:
    """How many verdicts are liftable, blocked or unknown, and how many of each carry hazards."""

    liftable: int = 0
    blocked: int = 0
    unknown: int = 0
    liftable_hazards: int = 0
    blocked_hazards: int = 0
    unknown_hazards: int = 0
    unsafe: int = 0  # admissions into code that uses what the target lacks
    unsafe_hazards: int = 0

    @classmethod
    def of(cls, verdicts: Iterable[Verdict]) -> VerdictCounts:
        kinds = dict.fromkeys(VerdictKind, 0)
        hazards = dict.fromkeys(VerdictKind, 0)
        for verdict in verdicts:
            kinds[verdict.kind] += 1
            hazards[verdict.kind] += bool(verdict.hazards)
        return cls(
            liftable=kinds[VerdictKind.LIFTABLE],
            blocked=kinds[VerdictKind.BLOCKED],
            unknown=kinds[VerdictKind.UNKNOWN],
            liftable_hazards=hazards[VerdictKind.LIFTABLE],
            blocked_hazards=hazards[VerdictKind.BLOCKED],
            unknown_hazards=hazards[VerdictKind.UNKNOWN],
            unsafe=kinds[VerdictKind.UNSAFE],
            unsafe_hazards=hazards[VerdictKind.UNSAFE],
        )

    @property
    def total(self) -> int:
        return self.liftable + self.blocked + self.unknown + self.unsafe

    def shown(self) -> list[VerdictKind]:
        """The kinds a count line names: unsafe first, and only when there is one (an admission
        is not judged unless it is unsafe), then liftable, blocked and unknown."""
        rest = [VerdictKind.LIFTABLE, VerdictKind.BLOCKED, VerdictKind.UNKNOWN]
        return [VerdictKind.UNSAFE, *rest] if self.unsafe else rest

    @property
    def with_hazards(self) -> int:
        return self.liftable_hazards + self.blocked_hazards + self.unknown_hazards + self.unsafe_hazards

    def count(self, kind: VerdictKind) -> int:
        return int(getattr(self, kind.value))

    def hazards(self, kind: VerdictKind) -> int:
        return int(getattr(self, f"{kind.value}_hazards"))

    def cell(self, kind: VerdictKind) -> str:
        """``274 liftable (13 with hazards)``; the hazard part only when some verdict of the kind has one."""
        hazards = self.hazards(kind)
        return f"{self.count(kind):,} {kind.value}" + (f" ({hazards:,} with hazards)" if hazards else "")

    def text(self) -> str:
        """``3 unsafe, 274 liftable (13 with hazards), 2,526 blocked, 39 unknown``."""
        return ", ".join(self.cell(kind) for kind in self.shown())


@dataclass(frozen=True, slots=True)
class PackageVerdicts:
    """The verdict counts of one package for one target."""

    package: str
    version: str | None
    target: Target
    counts: VerdictCounts

    @property
    def label(self) -> str:
        return f"{self.package} {self.version}" if self.version else self.package


def total_verdict_counts(report: Report) -> VerdictCounts:
    """Every verdict of the scan for one of its (distinct) targets, all targets together."""
    archs = {target.arch for target in distinct_targets(report)}
    return VerdictCounts.of(v for v in report.verdicts if v.target in archs)


def package_verdict_counts(report: Report) -> list[PackageVerdicts]:
    """Verdict counts per package (name, then version) and target (in the order given).

    Like the other counts these describe the whole scan, not the gates a view selected. A package
    and target without verdicts (nothing excluded there, or not judged) get no entry.
    """
    versions = {p.name: p.version for p in report.packages}
    package_of = {gate.id: (gate.location.package, gate.location.version) for gate in report.gates}
    grouped: dict[tuple[str, str | None], list[Verdict]] = {}
    for verdict in report.verdicts:
        key = package_of.get(verdict.gate_id)
        if key is not None:
            name, version = key
            grouped.setdefault((name, version or versions.get(name)), []).append(verdict)
    entries: list[PackageVerdicts] = []
    for name, version in sorted(grouped, key=lambda key: (key[0], key[1] or "")):
        verdicts = grouped[(name, version)]
        for target in distinct_targets(report):
            counts = VerdictCounts.of(v for v in verdicts if v.target == target.arch)
            if counts.total:
                entries.append(PackageVerdicts(name, version, target, counts))
    return entries


def unknown_gates(report: Report) -> int:
    """Gates whose status is unknown for at least one target."""
    targets = distinct_targets(report)
    return sum(1 for gate in report.gates if any(gate.status(t.arch) is Status.UNKNOWN for t in targets))


def scope_text(report: Report) -> str:
    """``1 package (1,992 files)``."""
    return f"{plural(len(report.packages), 'package')} ({plural(report.files_scanned, 'file')})"


def summary_line(report: Report, options: RenderOptions | None = None) -> str:
    """``scanned 1,992 files in 1 package (12 skipped), 310 gates, 57 exclude sm_120, 3 unknown; sm_120
    loses 41 code paths in 12 features (30 shut out, 11 fallback) — 1.84 s``.

    With several targets each gets its own ``N exclude sm_XX``; ``unknown`` counts gates whose
    status is unknown for at least one target. Without targets only the scan itself is summarised.
    A judged scan adds its verdicts, all targets together, after a semicolon (their ``unknown`` is
    not the gates'): ``...; verdicts: 274 liftable (13 with hazards), 2,526 blocked, 39 unknown``.
    With ``options`` that narrow the scope (kinds, paths) only the gates in scope are counted,
    and the line says how many were found in all: ``14 binary gates (of 2,912 found)``.
    """
    found = len(report.gates)
    if options is not None:
        report = scoped(report, options)
    narrowed = options is not None and options.narrows_scope
    gates = plural(len(report.gates), f"{kinds_text(options.kinds) if options else ''}gate")
    if narrowed:
        where = " at the paths chosen" if options and (options.paths or options.exclude_paths) else ""
        gates += f"{where} (of {found:,} found)"
    parts = [
        f"scanned {plural(report.files_scanned, 'file')} in {plural(len(report.packages), 'package')}"
        f" ({len(report.skips):,} skipped)",
        gates,
    ]
    counts = target_counts(report)
    for arch_name, count in counts.items():
        verb = "excludes" if count.excluded == 1 else "exclude"
        parts.append(f"{count.excluded:,} {verb} {arch_name}")
    if counts:
        parts.append(f"{unknown_gates(report):,} unknown")
    text = ", ".join(parts)
    losses = loss_counts(report)
    if losses:
        text += "; " + ", ".join(c.text() for c in losses)
    verdicts = total_verdict_counts(report)
    if verdicts.total:
        text += f"; verdicts: {verdicts.text()}"
    if report.trace is not None:
        text += f"; {trace_counts_text(report.trace)}"
    return f"{text} — {report.elapsed_s:.2f} s"


def trace_counts_text(trace: TraceSummary) -> str:
    """``trace: 4 gates evaluated, 1 of 5 capability queries from a place with no gate``."""
    untraced = sum(u.count for u in trace.untraced)
    text = (
        f"trace: {plural(len(trace.gates), 'gate')} evaluated, {untraced:,} of "
        f"{plural(trace.queries, 'capability query', 'capability queries')} from a place with no gate"
    )
    differs = sum(1 for g in trace.gates if g.agreement and g.agreement.startswith("differs"))
    if differs:
        text += f", {differs:,} where the run differs from the scan"
    return text + (f" (answered as {trace.as_arch})" if trace.as_arch else "")


def nothing_selected(report: Report, options: RenderOptions) -> str:
    """What a formatter says when no gate matches: ``no gates exclude sm_120 in 1 package (1,992 files)``."""
    arch_names = [target.arch.name for target in distinct_targets(report)]
    subject = f"no {kinds_text(options.kinds)}gates"
    filters = filters_text(options)
    if options.show is Show.TRACED:
        return f"{subject} of {scope_text(report)} were evaluated by the traced run{filters}"
    if options.show is Show.ALL or not arch_names:
        return f"{subject} in {scope_text(report)}{filters}"
    if options.show is Show.LOSSES:
        kinds = f" through {kinds_text(options.kinds)}gates" if options.kinds else ""
        verb = "lose" if len(arch_names) > 1 else "loses"
        return f"{' and '.join(arch_names)} {verb} no code path{kinds} in {scope_text(report)}{filters}"
    if options.show is Show.EXCLUDED:
        return f"{subject} exclude {' or '.join(arch_names)} in {scope_text(report)}{filters}"
    return f"{subject} admit {' and '.join(arch_names)} in {scope_text(report)}{filters}"


@dataclass(frozen=True, slots=True)
class KindCounts:
    """The gates of one kind in one package, and per distinct target how many exclude it or leave it unknown."""

    package: str
    version: str | None
    kind: GateKind
    gates: int
    targets: tuple[tuple[Target, TargetCounts], ...]

    @property
    def label(self) -> str:
        return f"{self.package} {self.version}" if self.version else self.package


def kind_counts(report: Report) -> list[KindCounts]:
    """Counts per package (name, then version) and gate kind (in `GateKind` order), every gate of ``report``."""
    versions = {p.name: p.version for p in report.packages}
    targets = distinct_targets(report)
    grouped: dict[tuple[str, str | None, GateKind], list[Gate]] = {}
    for gate in report.gates:
        name = gate.location.package
        grouped.setdefault((name, gate.location.version or versions.get(name), gate.kind), []).append(gate)
    kinds = list(GateKind)
    entries = []
    for key in sorted(grouped, key=lambda k: (k[0], k[1] or "", kinds.index(k[2]))):
        gates = grouped[key]
        counts = []
        for target in targets:
            tally = dict.fromkeys(Status, 0)
            for gate in gates:
                tally[gate.status(target.arch)] += 1
            counts.append(
                (target, TargetCounts(tally[Status.EXCLUDED], tally[Status.ADMITTED], tally[Status.UNKNOWN]))
            )
        entries.append(KindCounts(key[0], key[1], key[2], len(gates), tuple(counts)))
    return entries
