"""The default view: for each target, the code paths it loses, grouped by the feature they serve.

A gate's outcome for a target (`liftgate.evaluate.Outcomes`) says what the target gets; a *loss* is a
fallback, a shut-out or a switch while another target gets the path. `feature_losses` groups the
losses (and the gates whose outcome is unknown) by package and feature (`liftgate.evaluate.feature_of`:
the JIT module or CMake target a build gate builds, else the file), shut-outs first, each group with
its verdicts and the one command that lifts what is liftable in it. The table, JSON, SARIF and
Markdown outputs and the summary line all read this one list, so they count the same losses.
"""

from __future__ import annotations

import glob
import shlex
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from liftgate.arch.core import Arch
from liftgate.evaluate import Outcomes, feature_of
from liftgate.model import Gate, GateKind, Outcome, Reading, Report, Target, Verdict, VerdictKind
from liftgate.report.interface import RenderOptions
from liftgate.report.select import distinct_targets, gate_sort_key, in_scope, missing_features, plural

# The order groups are listed in, worst first; a feature takes the first of its gates' outcomes.
ORDER = (Outcome.UNSAFE, Outcome.SHUT_OUT, Outcome.FALLBACK, Outcome.OFF, Outcome.UNKNOWN)
HEADINGS = {
    Outcome.UNSAFE: "unsafe (admitted into code that uses what it lacks: a build failure or an illegal instruction)",
    Outcome.SHUT_OUT: "shut out (nothing in their place: compiled out, an error, a trap, no kernel image)",
    Outcome.FALLBACK: "fallback (a portable or older path the targets that get them are spared)",
    Outcome.OFF: "off until a switch is set",
    Outcome.UNKNOWN: "unknown (whether it gets them depends on something liftgate cannot see)",
}
# Gates in code the package ships compiled: `lift` cannot edit them (a rebuild from source can).
COMPILED_IN = frozenset({GateKind.CPP_RUNTIME, GateKind.BINARY})
# A group lifted by naming its gates up to this many; beyond it, by path (`lift --all-liftable --path`).
MAX_NAMED_IDS = 3


@dataclass(frozen=True, slots=True)
class FeatureLoss:
    """The gates of one feature of one package whose outcome for ``target`` is a loss (or unknown)."""

    package: str
    version: str | None
    feature: str
    target: Target
    outcome: Outcome
    gates: tuple[Gate, ...]
    readings: tuple[Reading, ...]
    verdicts: tuple[Verdict, ...]  # the gates' verdicts for the target, where the scan judged

    @property
    def label(self) -> str:
        first = self.gates[0].location
        if self.feature == first.path:
            return self.feature
        return f"{self.feature} ({first.path}:{first.line})"

    @property
    def losses(self) -> int:
        return sum(1 for r in self.readings if r.loss)

    def outcome_counts(self) -> str:
        """``13 shut out`` or ``2 shut out, 5 fallback``."""
        counts = Counter(r.outcome for r in self.readings)
        return ", ".join(f"{counts[o]:,} {_WORD[o]}" for o in ORDER if counts[o])

    def verdict_text(self) -> str:
        """``13 liftable``, ``700 blocked: wgmma``, ``3 liftable, 2 blocked: tcgen05``; empty unjudged
        (and for shipped kernels, which the judge does not read: their coverage says it all)."""
        if all(g.kind is GateKind.BINARY for g in self.gates):
            return ""
        kinds = Counter(v.kind for v in self.verdicts)
        parts = []
        for kind in VerdictKind:
            if not kinds[kind]:
                continue
            text = f"{kinds[kind]:,} {kind.value}"
            if kind in (VerdictKind.BLOCKED, VerdictKind.UNSAFE):
                missing = Counter(f for v in self.verdicts if v.kind is kind for f in missing_features(v))
                if missing:
                    text += ": " + ", ".join(name for name, _ in missing.most_common(3))
            parts.append(text)
        return ", ".join(parts)

    def actionability(self) -> int:
        """0: something here is liftable; 1: a verdict is unknown (or the scan did not judge); 2: all blocked."""
        kinds = {v.kind for v in self.verdicts}
        if VerdictKind.LIFTABLE in kinds:
            return 0
        return 2 if kinds == {VerdictKind.BLOCKED} else 1

    def liftable_ids(self) -> tuple[str, ...]:
        return tuple(v.gate_id for v in self.verdicts if v.kind is VerdictKind.LIFTABLE)

    def command(self) -> str | None:
        """The one command that lifts what is liftable here, or sets the switch; None if nothing is."""
        if self.outcome is Outcome.OFF:
            settings = dict.fromkeys(
                s.setting
                for g in self.gates
                for s in g.switches
                if self.target.arch in s.admitted or self.target.arch in s.unknown
            )
            return "set " + " and ".join(settings) if settings else None
        if all(g.kind is GateKind.BINARY for g in self.gates):
            return f"needs a build with {self.target.arch.name} in its arch list"
        liftable = set(self.liftable_ids())
        ids = tuple(g.id for g in self.gates if g.id in liftable and g.kind not in COMPILED_IN)
        if not ids:
            return (
                "rebuild from source with the gate lifted (it is compiled into the package)"
                if liftable
                else None
            )
        target = f"-t {shlex.quote(self.target.spelling)}"
        paths = {g.location.path for g in self.gates if g.id in ids}
        # By path only where the feature is the whole file: --path lifts every liftable loss in it.
        if len(ids) <= MAX_NAMED_IDS or len(paths) != 1 or self.feature not in paths:
            return f"liftgate lift {' '.join(ids)} {target}"
        return f"liftgate lift --all-liftable --path {shlex.quote(glob.escape(next(iter(paths))))} {target}"


_WORD = {
    Outcome.UNSAFE: "unsafe",
    Outcome.SHUT_OUT: "shut out",
    Outcome.FALLBACK: "fallback",
    Outcome.OFF: "off",
    Outcome.UNKNOWN: "unknown",
}


def listed(reading: Reading) -> bool:
    """Whether a reading belongs in the losses view: an unsafe admission, a loss, or an outcome
    liftgate cannot read."""
    return reading.loss or reading.outcome in (Outcome.UNKNOWN, Outcome.UNSAFE)


def feature_losses(
    report: Report, options: RenderOptions | None = None, outcomes: Outcomes | None = None
) -> list[FeatureLoss]:
    """Every target's losses (and unknown outcomes) in scope, grouped by package and feature:
    targets in the order given, then shut-outs first, then package, version and feature."""
    outcomes = outcomes or Outcomes.of_report(report)
    verdicts = report.verdict_index() if report.verdicts else {}
    gates = sorted((g for g in report.gates if options is None or in_scope(g, options)), key=gate_sort_key)
    found: list[FeatureLoss] = []
    for target in distinct_targets(report):
        groups: dict[tuple[str, str | None, str, Outcome], list[tuple[Gate, Reading]]] = {}
        for gate in gates:
            reading = outcomes.of(gate, target.arch)
            if listed(reading):
                loc = gate.location
                # A shut-out and a fallback of one feature are one group (the worst names it); a
                # switch or an unknown outcome is a group of its own: what to do about it differs.
                group = Outcome.SHUT_OUT if reading.outcome is Outcome.FALLBACK else reading.outcome
                key = (loc.package, loc.version, feature_of(gate), group)
                groups.setdefault(key, []).append((gate, reading))
        for (package, version, feature, _group), members in groups.items():
            readings = tuple(r for _, r in members)
            outcome = next(o for o in ORDER if any(r.outcome is o for r in readings))
            found.append(
                FeatureLoss(
                    package,
                    version,
                    feature,
                    target,
                    outcome,
                    tuple(g for g, _ in members),
                    readings,
                    tuple(
                        verdicts[(g.id, target.arch)]
                        for g, r in members
                        if (r.loss or r.outcome is Outcome.UNSAFE) and (g.id, target.arch) in verdicts
                    ),
                )
            )
    order = {o: i for i, o in enumerate(ORDER)}
    targets = {t.arch: i for i, t in enumerate(distinct_targets(report))}
    found.sort(
        key=lambda f: (
            targets[f.target.arch],
            order[f.outcome],
            f.actionability(),
            f.package,
            f.version or "",
            f.feature,
        )
    )
    return found


@dataclass(frozen=True, slots=True)
class LossCounts:
    """One target's losses: code paths (gates) and features, by outcome; alternatives not counted."""

    target: Target
    losses: int
    features: int
    by_outcome: tuple[tuple[Outcome, int], ...]
    alternatives: int
    unknown: int
    unsafe: int = 0  # gates that admit it into code using what it lacks (judged scans)

    def text(self) -> str:
        """``sm_121a: 2 unsafe admissions; loses 412 code paths in 38 features (250 shut out, …)``;
        unsafe admissions first, and only when the judge found one."""
        name = self.target.arch.name
        head = f"{name}: {plural(self.unsafe, 'unsafe admission')}; " if self.unsafe else f"{name} "
        if not self.losses:
            return head + "loses no code path"
        parts = ", ".join(
            f"{n:,} {_WORD[o]}"
            for o, n in self.by_outcome
            if n and o not in (Outcome.UNKNOWN, Outcome.UNSAFE)
        )
        return (
            head + f"loses {plural(self.losses, 'code path')} in {plural(self.features, 'feature')} ({parts})"
        )


def loss_counts(
    report: Report, options: RenderOptions | None = None, outcomes: Outcomes | None = None
) -> list[LossCounts]:
    """Per distinct target: its losses and the features they are in, and how many of the gates in
    scope it skips for an alternative of its own (not losses)."""
    outcomes = outcomes or Outcomes.of_report(report)
    gates = [g for g in report.gates if options is None or in_scope(g, options)]
    counts = []
    for target in distinct_targets(report):
        readings = [outcomes.of(g, target.arch) for g in gates]
        losses = [(g, r) for g, r in zip(gates, readings, strict=True) if r.loss]
        tally = Counter(r.outcome for _, r in losses)
        counts.append(
            LossCounts(
                target,
                len(losses),
                len({(g.location.package, g.location.version, feature_of(g)) for g, _ in losses}),
                tuple((o, tally[o]) for o in ORDER),
                sum(1 for r in readings if r.outcome is Outcome.ALTERNATIVE),
                sum(1 for r in readings if r.outcome is Outcome.UNKNOWN),
                sum(1 for r in readings if r.outcome is Outcome.UNSAFE),
            )
        )
    return counts


def loss_gates(report: Report, targets: Iterable[Arch], outcomes: Outcomes | None = None) -> list[Gate]:
    """The gates that are a loss for at least one of ``targets`` (`--fail-on loss`, `lift --all-liftable`)."""
    outcomes = outcomes or Outcomes.of_report(report)
    archs = list(targets)
    return [g for g in report.gates if any(outcomes.of(g, a).loss for a in archs)]
