"""Which gates a report shows, in which order, and the small texts every formatter shares.

`select_gates` is the one place where `Show`, ``kinds``, ``verdicts`` and the path patterns are
interpreted, so the table, JSON, SARIF and Markdown outputs of one scan always list the same gates
in the same order (package, path, line); `scoped` is the report the counts describe (the gates of
the kinds and paths chosen). The helpers below keep labels such as ``rtx5090 (sm_120)``, the
compact admitted set and verdicts such as ``blocked: tcgen05-ld-st, wgmma`` identical across formats.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable
from fnmatch import fnmatchcase

from liftgate.arch.core import Arch
from liftgate.evaluate import Outcomes
from liftgate.model import (
    Gate,
    GateKind,
    GateTrace,
    Outcome,
    Report,
    Skip,
    Status,
    TakenSide,
    Target,
    TraceSummary,
    UntracedQuery,
    Verdict,
    VerdictKind,
)
from liftgate.report.interface import RenderOptions, Show, VerdictFilter


def gate_sort_key(gate: Gate) -> tuple[str, str, str, int, int, str]:
    """Deterministic report order: package, version, path, line, then id for gates on one line."""
    loc = gate.location
    return (loc.package, loc.version or "", loc.path, loc.span.start, loc.span.end, gate.id)


def skip_sort_key(skip: Skip) -> tuple[str, str, str]:
    return (skip.package or "", skip.path, skip.reason)


def distinct_targets(report: Report) -> tuple[Target, ...]:
    """The report's targets with repeated archs dropped (``rtx5090`` and ``sm_120`` are one column)."""
    seen: set[str] = set()
    targets: list[Target] = []
    for target in report.targets:
        if target.arch.name not in seen:
            seen.add(target.arch.name)
            targets.append(target)
    return tuple(targets)


def target_label(target: Target) -> str:
    """``rtx5090 (sm_120)`` when the user spelled the target differently from its arch, else ``sm_120``."""
    if target.spelling == target.arch.name:
        return target.arch.name
    return f"{target.spelling} ({target.arch.name})"


def statuses(gate: Gate, targets: Iterable[Target]) -> list[Status]:
    return [gate.status(target.arch) for target in targets]


def _shown(
    gate: Gate, targets: tuple[Target, ...], show: Show, traced: frozenset[str], outcomes: Outcomes | None
) -> bool:
    if show is Show.TRACED:
        return gate.id in traced
    if show is Show.ALL or not targets:
        # Without a target there is nothing to be excluded from: every gate is worth listing.
        return True
    if show is Show.LOSSES:
        assert outcomes is not None
        return any(
            r.loss or r.outcome in (Outcome.UNKNOWN, Outcome.UNSAFE)
            for r in (outcomes.of(gate, t.arch) for t in targets)
        )
    per_target = statuses(gate, targets)
    if show is Show.EXCLUDED:
        return any(status is not Status.ADMITTED for status in per_target)
    return all(status is Status.ADMITTED for status in per_target)


def path_selected(path: str, options: RenderOptions) -> bool:
    """Whether a package-relative path matches a ``--path`` pattern (if any) and no ``--exclude-path``."""
    if options.paths and not any(fnmatchcase(path, pattern) for pattern in options.paths):
        return False
    return not any(fnmatchcase(path, pattern) for pattern in options.exclude_paths)


def in_scope(gate: Gate, options: RenderOptions) -> bool:
    """Whether a gate is of a kind and at a path the options choose: the gates that are counted."""
    return (options.kinds is None or gate.kind in options.kinds) and path_selected(
        gate.location.path, options
    )


def scoped(report: Report, options: RenderOptions) -> Report:
    """``report`` with only the gates in scope (`in_scope`) and their verdicts: what the counts describe."""
    if not options.narrows_scope:
        return report
    gates = tuple(gate for gate in report.gates if in_scope(gate, options))
    ids = {gate.id for gate in gates}
    return dataclasses.replace(
        report, gates=gates, verdicts=tuple(v for v in report.verdicts if v.gate_id in ids)
    )


def verdict_matches(verdict: Verdict, wanted: frozenset[VerdictFilter]) -> bool:
    """Whether a verdict is of a kind in ``wanted``, or carries a hazard and ``wanted`` has ``hazard``."""
    if VerdictFilter.HAZARD in wanted and verdict.hazards:
        return True
    return VerdictFilter(verdict.kind.value) in wanted


def _verdict_selected(
    gate: Gate,
    targets: tuple[Target, ...],
    verdicts: dict[tuple[str, Arch], Verdict],
    wanted: frozenset[VerdictFilter],
) -> bool:
    for target in targets:
        verdict = verdicts.get((gate.id, target.arch))
        if verdict is not None and verdict_matches(verdict, wanted):
            return True
    return False


def select_gates(report: Report, options: RenderOptions) -> list[Gate]:
    """The gates to show, in report order.

    ``Show.LOSSES`` keeps gates that are a loss or an unsafe admission for at least one target, or whose outcome is unknown
    (`liftgate.evaluate.Outcomes`), ``Show.EXCLUDED`` gates that are excluded or unknown for at least one target,
    ``Show.ADMITTED`` those admitted for every target, ``Show.ALL`` everything, ``Show.TRACED``
    those a traced run evaluated (``scan --trace``); ``options.kinds`` then narrows by gate kind,
    ``options.paths`` and ``options.exclude_paths`` by path, and ``options.verdicts`` to the gates
    with such a verdict (or a hazard) for at least one target. A report without targets shows
    every gate of the chosen kinds and paths.
    """
    targets = distinct_targets(report)
    traced = frozenset(g.gate_id for g in report.trace.gates) if report.trace else frozenset()
    wanted = options.verdicts
    verdicts = report.verdict_index() if wanted is not None else {}
    outcomes = Outcomes.of_report(report) if options.show is Show.LOSSES else None
    # An unsafe admission is listed with the exclusions, although it admits the target.
    unsafe = (
        {v.gate_id for v in report.verdicts if v.kind is VerdictKind.UNSAFE}
        if options.show is Show.EXCLUDED
        else set()
    )
    return sorted(
        (
            gate
            for gate in report.gates
            if in_scope(gate, options)
            and (_shown(gate, targets, options.show, traced, outcomes) or gate.id in unsafe)
            and (wanted is None or _verdict_selected(gate, targets, verdicts, wanted))
        ),
        key=gate_sort_key,
    )


def filters_text(options: RenderOptions) -> str:
    """`` (--verdict liftable or hazard, --exclude-path '*/examples/*')``: the view's filters beyond
    ``--show`` and ``--kind``, as the options that set them; empty without any."""
    parts = []
    if options.verdicts is not None:
        ordered = [v.value for v in VerdictFilter if v in options.verdicts]
        parts.append("--verdict " + " or ".join(ordered))
    parts += [f"--path {shlex.quote(pattern)}" for pattern in options.paths]
    parts += [f"--exclude-path {shlex.quote(pattern)}" for pattern in options.exclude_paths]
    return f" ({', '.join(parts)})" if parts else ""


# The SASS part of a binary gate's condition (`liftgate.detect.binary.summarize`): ``SASS sm_80, sm_90a``.


# The "; not sm_120+" that `ArchSet.render` appends when a set stops before the newest arch.
_OPEN_END = re.compile(r"; not \S+\+$")


def admits_text(gate: Gate) -> str:
    """The compact admitted set, with the part liftgate cannot decide marked: ``sm_90a + unknown: sm_100a``.

    Each part loses its own ``; not sm_XX+`` (the admitted part's would deny the unknown part and
    vice versa); the combined text ends with the one of the union, if any.
    """
    if not gate.unknown:
        return gate.admitted.render()
    unknown = f"unknown: {_OPEN_END.sub('', gate.unknown.render())}"
    text = f"{_OPEN_END.sub('', gate.admitted.render())} + {unknown}" if gate.admitted else unknown
    open_end = _OPEN_END.search((gate.admitted | gate.unknown).render())
    return text + (open_end.group(0) if open_end else "")


def condition_text(gate: Gate) -> str:
    """The condition as written, with its directive: ``#ifdef CUTLASS_ARCH_MMA_SM90A_ENABLED``, on one line."""
    condition = one_line(gate.condition)
    if gate.directive and not condition.startswith(gate.directive):
        return f"{gate.directive} {condition}"
    return condition


def one_line(text: str) -> str:
    """A condition on one line: continuation backslashes and runs of whitespace become one space."""
    return " ".join(text.replace("\\\n", " ").split())


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 file``, ``1,992 files``."""
    word = singular if count == 1 else (plural_form or f"{singular}s")
    return f"{count:,} {word}"


def kinds_text(kinds: frozenset[GateKind] | None) -> str:
    """``cuda-pp or py-runtime `` for a kind filter (trailing space included), empty for no filter."""
    if kinds is None:
        return ""
    ordered = [kind.value for kind in GateKind if kind in kinds]
    return " or ".join(ordered) + " " if ordered else ""


def missing_features(verdict: Verdict) -> list[str]:
    """The ids of the features the target lacks, each once, in the order the region uses them."""
    return list(dict.fromkeys(use.feature for use in verdict.missing))


def trace_text(traced: GateTrace, probed: bool = True) -> str:
    """``ran 3×, took the admitted side (then 3); torch.cuda.get_device_capability → (12, 0) (--as)``."""
    if traced.outcomes:
        shown = ", ".join(f"{outcome} {count:,}" for outcome, count in traced.outcomes)
        head = f"ran {'≥' if traced.limited else ''}{traced.evaluations:,}×"
        head += (
            f", took the {traced.took.value} side ({shown})"
            if traced.took is not TakenSide.UNKNOWN
            else f" ({shown})"
        )
    elif probed:
        head = (
            f"fed by {plural(traced.queried, 'capability query', 'capability queries')}, but its condition did "
            "not run (an earlier branch was taken, or the query raised)"
        )
    else:
        head = f"evaluated through {plural(traced.queried, 'capability query', 'capability queries')}"
    if traced.queries:
        more = len(traced.queries) - 2
        head += "; " + "; ".join(traced.queries[:2]) + (f" (+{more} more)" if more > 0 else "")
    elif traced.synthetic:
        head += " (--as)"
    return head


def trace_summary_lines(trace: TraceSummary) -> list[str]:
    """The counts every format gives under its rows: queries, gates evaluated, disagreements."""
    lines = [
        f"{plural(trace.queries, 'capability query', 'capability queries')} ({trace.distinct_queries:,} "
        f"distinct); {trace.matched_queries:,} distinct made while a gate of this scan was evaluated",
        f"{plural(len(trace.gates), 'gate')} evaluated by the run",
    ]
    differs = [g for g in trace.gates if g.agreement and g.agreement.startswith("differs")]
    if differs:
        lines.append(f"{plural(len(differs), 'gate')} where the run took another side than the scan says")
    return lines


def untraced_text(query: UntracedQuery) -> str:
    """``torch.cuda.get_device_name → 'NVIDIA …' ×2 at main() in prog.py:13 (not in the scanned files)``."""
    where = query.site.render()
    if query.site.package:
        where += f" ({query.site.package})"
    caller = f", called from {query.caller.render()}" if query.caller else ""
    count = f" ×{query.count:,}" if query.count > 1 else ""
    return f"{query.api} → {query.answer}{count} at {where}{caller}: {query.reason}"


def verdict_text(verdict: Verdict) -> str:
    """``liftable``, ``unknown``, ``blocked: tcgen05-ld-st, wgmma`` or ``unsafe: tcgen05-mma`` (the missing feature ids)."""
    missing = missing_features(verdict)
    if verdict.kind in (VerdictKind.BLOCKED, VerdictKind.UNSAFE) and missing:
        return f"{verdict.kind.value}: {', '.join(missing)}"
    return verdict.kind.value
