"""JSON output: the whole report as one versioned document for scripts and CI.

The document follows ``liftgate/data/report.schema.json`` (JSON Schema draft 2020-12), which the
test suite validates every output against. The schema forbids unknown fields, so
``schema_version`` changes whenever a field is added, removed or changes meaning. The ``gates``
array holds the gates the render options select (recorded in ``selection``); ``summary`` always
counts the whole scan."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import liftgate
from liftgate.arch.core import Arch
from liftgate.detect.binary import missing_groups
from liftgate.evaluate import Outcomes, feature_of
from liftgate.model import (
    BinaryCoverage,
    Evidence,
    FeatureUse,
    Gate,
    GateKind,
    GateTrace,
    Reading,
    Report,
    Skip,
    Span,
    TracedFrame,
    TraceSummary,
    Verdict,
)
from liftgate.report.chains import chain_to_dict
from liftgate.report.interface import GroupBy, RenderOptions, printable_json
from liftgate.report.losses import FeatureLoss, feature_losses, loss_counts
from liftgate.report.select import distinct_targets, select_gates, skip_sort_key
from liftgate.report.summary import target_counts

SCHEMA_VERSION = "9"
SCHEMA_RESOURCE = "report.schema.json"


def load_schema() -> dict[str, Any]:
    """The committed JSON Schema of this output."""
    schema: dict[str, Any] = json.loads(
        resources.files("liftgate.data").joinpath(SCHEMA_RESOURCE).read_text("utf-8")
    )
    return schema


def _span(span: Span | None) -> dict[str, int] | None:
    return None if span is None else {"start": span.start, "end": span.end}


def _evidence(evidence: Evidence) -> dict[str, Any]:
    return {"text": evidence.text, "path": evidence.path, "line": evidence.line}


def _use(use: FeatureUse) -> dict[str, Any]:
    return {"feature": use.feature, "path": use.path, "line": use.line, "text": use.text, "via": use.via}


def verdict_to_dict(verdict: Verdict) -> dict[str, Any]:
    return {
        "target": verdict.target.name,
        "verdict": verdict.kind.value,
        "reasons": list(verdict.reasons),
        "missing": [_use(u) for u in verdict.missing],
        "uses": [_use(u) for u in verdict.uses],
        "unresolved": list(verdict.unresolved),
        "hazards": [h.text for h in verdict.hazards],
        "hazard_details": [
            {"kind": h.kind.value, "text": h.text, "gates": list(h.gates)} for h in verdict.hazards
        ],
        "scope": verdict.scope,
    }


def gate_to_dict(
    gate: Gate,
    report: Report,
    verdicts: dict[tuple[str, Arch], Verdict] | None = None,
    outcomes: Outcomes | None = None,
) -> dict[str, Any]:
    """One gate as the schema's ``gate`` object, with its status, outcome (and verdict) for each
    distinct target. Pass ``outcomes`` when rendering many gates of one report (it reads siblings)."""
    outcomes = outcomes or Outcomes.of_report(report)
    loc = gate.location
    found = (
        [verdicts[(gate.id, t.arch)] for t in distinct_targets(report) if (gate.id, t.arch) in verdicts]
        if verdicts
        else []
    )
    extra: dict[str, Any] = {"verdicts": [verdict_to_dict(v) for v in found]} if report.verdicts else {}
    if report.trace is not None:
        traced = report.trace.for_gate(gate.id)
        extra["trace"] = None if traced is None else gate_trace_to_dict(traced)
    return {
        "id": gate.id,
        "kind": gate.kind.value,
        "package": loc.package,
        "version": loc.version,
        "path": loc.path,
        "line": loc.span.start,
        "end_line": loc.span.end,
        "directive": gate.directive,
        "condition": gate.condition,
        "admitted": gate.admitted.names(),
        "unknown": gate.unknown.names(),
        "admitted_compact": gate.admitted.render(),
        "host": None if gate.host is None else gate.host.value,
        "then_span": _span(gate.then_span),
        "else_span": _span(gate.else_span),
        "else_kind": gate.else_kind.value,
        "confidence": gate.confidence.value,
        "evidence": [_evidence(item) for item in gate.evidence],
        "depends_on": list(gate.depends_on),
        "enclosing": list(gate.enclosing),
        "status": {target.arch.name: gate.status(target.arch).value for target in distinct_targets(report)},
        "feature": feature_of(gate),
        "outcomes": {
            target.arch.name: _reading(outcomes.of(gate, target.arch)) for target in distinct_targets(report)
        },
        "facts": facts_to_dict(gate, report),
        **extra,
    }


def _reading(reading: Reading) -> dict[str, Any]:
    return {"outcome": reading.outcome.value, "loss": reading.loss, "via": reading.via, "text": reading.text}


def feature_loss_to_dict(feature: FeatureLoss, judged: bool) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for reading in feature.readings:
        counts[reading.outcome.value] = counts.get(reading.outcome.value, 0) + 1
    verdicts: dict[str, int] = {}
    for verdict in feature.verdicts:
        verdicts[verdict.kind.value] = verdicts.get(verdict.kind.value, 0) + 1
    return {
        "target": feature.target.arch.name,
        "package": feature.package,
        "version": feature.version,
        "feature": feature.feature,
        "outcome": feature.outcome.value,
        "gates": [g.id for g in feature.gates],
        "outcomes": counts,
        **({"verdicts": verdicts} if judged else {}),
        "command": feature.command(),
    }


def facts_to_dict(gate: Gate, report: Report) -> dict[str, Any]:
    """The schema's ``facts`` object: the typed facts a detector published for the gate."""
    coverage = gate.coverage
    return {
        "builds": [
            {"what": b.what, "name": b.name, "sources": list(b.sources), "computed": b.computed,
             "path": b.path, "line": b.line}
            for b in gate.builds
        ],
        "macros": [
            {"macro": m.macro, "path": m.path, "line": m.line, "condition": m.condition, "build_gate": m.build_gate}
            for m in gate.macros
        ],
        "passes": [{"macro": p.macro, "value": p.value, "path": p.path, "line": p.line} for p in gate.passes],
        "build_macros": list(gate.build_macros),
        "switches": [
            {"name": w.name, "kind": w.kind.value, "setting": w.setting, "admitted": w.admitted.names(),
             "unknown": w.unknown.names()}
            for w in gate.switches
        ],
        "decided_at": list(gate.decided_at),
        "reach": None if gate.reach is None else gate.reach.names(),
        "dispatch": gate.dispatch,
        "choices": [
            {"implementation": c.implementation, "path": c.path, "line": c.line,
             "admitted": c.admitted.names(), "unknown": c.unknown.names()}
            for c in gate.choices
        ],
        "coverage": None
        if coverage is None
        else {
            "native": coverage.native.names(),
            "ptx_jit": coverage.ptx_jit.names(),
            "images": coverage.images,
            "compressed": coverage.compressed,
            "partial": coverage.partial.names(),
            "units": len(coverage.units),
            "kernels": sum(len(u.kernels) for u in coverage.units),
            "targets": {t.arch.name: coverage.coverage(t.arch).value for t in distinct_targets(report)},
            "per_target": {t.arch.name: _per_target(coverage, t.arch) for t in distinct_targets(report)},
        },
    }  # fmt: skip


def _per_target(coverage: BinaryCoverage, arch: Arch) -> dict[str, Any]:
    units = coverage.unit_counts(arch)
    kernels = coverage.kernel_counts(arch)
    missing = coverage.missing(arch)
    return {
        "units": {"native": units[0], "ptx_jit": units[1], "none": units[2]},
        "kernels": {"native": kernels[0], "ptx_jit": kernels[1], "none": kernels[2]},
        "missing_groups": [{"group": g, "kernels": n} for g, n in missing_groups(coverage, arch)],
        "missing_kernels": [k for u in missing for k in u.kernels],
        "unread": sum(1 for u in missing if u.unread),
    }


def gate_trace_to_dict(traced: GateTrace) -> dict[str, Any]:
    return {
        "evaluations": traced.evaluations,
        "queried": traced.queried,
        "limited": traced.limited,
        "outcomes": dict(traced.outcomes),
        "took": traced.took.value,
        "queries": list(traced.queries),
        "as": traced.synthetic,
        "agreement": traced.agreement,
    }


def _frame(frame: TracedFrame | None) -> dict[str, Any] | None:
    if frame is None:
        return None
    return {
        "path": frame.path,
        "line": frame.line,
        "function": frame.function,
        "package": frame.package,
        "package_path": frame.package_path,
    }


def trace_to_dict(trace: TraceSummary) -> dict[str, Any]:
    return {
        "source": trace.source,
        "command": list(trace.command),
        "as": trace.as_arch,
        "capabilities": [f"{a}.{b}" for a, b in trace.capabilities],
        "queries": trace.queries,
        "distinct_queries": trace.distinct_queries,
        "matched_queries": trace.matched_queries,
        "gates_evaluated": len(trace.gates),
        "probed": trace.probed,
        "untraced": [
            {
                "api": u.api,
                "answer": u.answer,
                "count": u.count,
                "site": _frame(u.site),
                "caller": _frame(u.caller),
                "reason": u.reason,
            }
            for u in trace.untraced
        ],
        "notes": list(trace.notes),
    }


def _skip(skip: Skip) -> dict[str, Any]:
    return {"path": skip.path, "package": skip.package, "reason": skip.reason}


def report_to_dict(report: Report, options: RenderOptions) -> dict[str, Any]:
    """The report as plain JSON-ready data, ordered deterministically (package, path, line)."""
    counts = target_counts(report)
    verdicts = report.verdict_index()
    outcomes = Outcomes.of_report(report)
    losses = {c.target.arch.name: c for c in loss_counts(report, outcomes=outcomes)}
    summary_verdicts: dict[str, Any] = {}
    if report.verdicts:
        for target in distinct_targets(report):
            tally = {"liftable": 0, "blocked": 0, "unknown": 0, "unsafe": 0, "hazard": 0}
            for v in report.verdicts:
                if v.target == target.arch:
                    tally[v.kind.value] += 1
                    tally["hazard"] += bool(v.hazards)
            summary_verdicts[target.arch.name] = tally
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "liftgate", "version": liftgate.__version__},
        "cuda_version": "{}.{}".format(*report.cuda_version),
        "targets": [{"spelling": t.spelling, "arch": t.arch.name} for t in report.targets],
        "packages": [
            {"name": p.name, "version": p.version, "origin": p.origin, "files": p.files}
            for p in sorted(report.packages, key=lambda p: (p.name, p.version or "", p.origin))
        ],
        "selection": {
            "show": options.show.value,
            "kinds": None if options.kinds is None else [k.value for k in GateKind if k in options.kinds],
        },
        "summary": {
            "files_scanned": report.files_scanned,
            "files_skipped": len(report.skips),
            "gates": len(report.gates),
            "targets": {
                arch_name: {
                    "excluded": c.excluded,
                    "admitted": c.admitted,
                    "unknown": c.unknown,
                    "losses": losses[arch_name].losses,
                    "loss_features": losses[arch_name].features,
                    "alternatives": losses[arch_name].alternatives,
                    "unsafe": losses[arch_name].unsafe,
                }
                for arch_name, c in counts.items()
            },
            "elapsed_s": round(report.elapsed_s, 3),
            **({"verdicts": summary_verdicts} if report.verdicts else {}),
        },
        "losses": [
            feature_loss_to_dict(f, bool(report.verdicts)) for f in feature_losses(report, options, outcomes)
        ],
        "gates": [gate_to_dict(gate, report, verdicts, outcomes) for gate in select_gates(report, options)],
        "skips": [_skip(skip) for skip in sorted(report.skips, key=skip_sort_key)],
        "notes": list(report.notes),
        **({"trace": trace_to_dict(report.trace)} if report.trace is not None else {}),
        **(
            {"chains": [chain_to_dict(report, c) for c in report.chains]}
            if options.by is GroupBy.CHAIN
            else {}
        ),
    }


class JsonFormatter:
    """``--format json``."""

    def format(self, report: Report, options: RenderOptions) -> str:
        return (
            printable_json(json.dumps(report_to_dict(report, options), indent=2, ensure_ascii=False)) + "\n"
        )
