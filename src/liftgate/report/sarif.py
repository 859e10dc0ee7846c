"""SARIF 2.1.0 output, for code-scanning dashboards (GitHub, GitLab, IDE viewers).

One run; the driver lists exactly one rule per `GateKind`, each once, with a help text saying
what the gate kind is and what to do about it. Each selected gate yields one result per target
it excludes (level ``warning``) or cannot decide (level ``note``); admitted targets yield none.
Paths are relative to the package root (``uriBaseId`` ``PKGROOT``), with the package named in
the result's properties, because one scan can cover several packages from different places.
Skipped files become tool-execution notifications, so a viewer shows what was not analysed.

A judged report puts each result's verdict in its message and properties (``verdicts``), and
reports every hazard of a verdict as a result of its own, at the gate, under the extra rule
``liftgate/hazard``; that rule is listed only in judged reports, after the gate-kind rules.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import liftgate
from liftgate.arch.core import Arch
from liftgate.evaluate import Outcomes
from liftgate.model import (
    Confidence,
    ElseKind,
    FeatureUse,
    Gate,
    GateKind,
    Hazard,
    HazardKind,
    Reading,
    Report,
    Skip,
    Status,
    Target,
    TraceSummary,
    Verdict,
    VerdictKind,
)
from liftgate.report.interface import RenderOptions, Show, printable_json
from liftgate.report.json_format import gate_trace_to_dict, trace_to_dict
from liftgate.report.losses import listed
from liftgate.report.select import (
    admits_text,
    condition_text,
    distinct_targets,
    missing_features,
    plural,
    select_gates,
    skip_sort_key,
    target_label,
    verdict_text,
)

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
INFORMATION_URI = "https://pypi.org/project/liftgate/"
PACKAGE_ROOT = "PKGROOT"
FINGERPRINT_KEY = "liftgateGateId/v1"
TARGET_FINGERPRINT_KEY = "liftgateTarget/v1"
HAZARD_FINGERPRINT_KEY = "liftgateHazard/v1"

_NEXT_STEPS = (
    " Run `liftgate explain GATE_ID SOURCE --target ARCH` (each result's message gives the command, with "
    "the source the scan read) to see how the condition "
    "was resolved and what the guarded code needs from the hardware. If your GPU has every feature the "
    "region uses, `liftgate lift GATE_ID` widens the condition reversibly (`liftgate revert` undoes it); "
    "otherwise the gate is right to exclude your GPU."
)


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    name: str
    short: str
    full: str
    help: str
    tag: str  # after "gpu-architecture": the gate kind, or "hazard"


def gate_rule_id(kind: GateKind) -> str:
    return f"liftgate/{kind.value}"


def _gate_rule(kind: GateKind, name: str, short: str, full: str, help_text: str) -> Rule:
    return Rule(gate_rule_id(kind), name, short, full, help_text, kind.value)


RULES: tuple[Rule, ...] = (
    _gate_rule(
        GateKind.CUDA_PP,
        "CudaPreprocessorArchGate",
        "CUDA code compiled only for some GPU architectures (preprocessor gate).",
        "An #if, #ifdef or #elif on __CUDA_ARCH__, __CUDA_ARCH_FEAT_SM*_ALL, __CUDA_ARCH_SPECIFIC__ or a "
        "macro derived from them (such as CUTLASS_ARCH_MMA_SM90A_ENABLED) keeps the guarded code out of "
        "the device compilation for every architecture it does not admit. On such a GPU the kernel body "
        "is empty, a fallback is compiled instead, or the build stops at #error or static_assert.",
        "This preprocessor condition decides, per compilation target, whether the guarded CUDA code "
        "exists at all." + _NEXT_STEPS,
    ),
    _gate_rule(
        GateKind.CPP_RUNTIME,
        "CppRuntimeCapabilityDispatch",
        "C++/CUDA host code path chosen by the GPU's compute capability at run time.",
        "Host code in a compiled extension reads the device's compute capability (cudaGetDeviceProperties, "
        "cudaDeviceGetAttribute, or a helper such as get_sm_version_num() or getSMVersion()) and dispatches "
        "on it: if/else chains, switch cases and checks such as TORCH_CHECK. Other GPUs take another "
        "kernel, fail with an error message such as 'No compiled cutlass_scaled_mm for CUDA device "
        "capability', or skip the feature.",
        "This check is compiled into the extension and runs on the device the program sees; it compares "
        "only the compute capability. Changing it matters only if you rebuild the extension from source "
        "(or the JIT system compiles it)." + _NEXT_STEPS,
    ),
    _gate_rule(
        GateKind.PY_RUNTIME,
        "PythonRuntimeCapabilityGate",
        "Python code path chosen by the GPU's compute capability at run time.",
        "A runtime check such as torch.cuda.get_device_capability()[0] in (9, 10), or a helper such as "
        "is_sm100_supported(), enables a kernel or feature only on some GPUs. Other GPUs take a fallback "
        "path, raise an error, or silently lose the feature.",
        "This check runs on the device the program sees and only compares its compute capability; "
        "the variant suffixes (a, f) of compile targets play no part." + _NEXT_STEPS,
    ),
    _gate_rule(
        GateKind.PY_BUILD,
        "PythonBuildArchFilter",
        "Kernels built or JIT-compiled by Python code only for some GPU architectures.",
        "An architecture list or filter in Python build code (setup.py, JIT compilation specs, "
        "supported-arch tables, TORCH_CUDA_ARCH_LIST handling) leaves architectures out of the kernels "
        "it compiles. On those GPUs the kernel is never built, so it is missing at run time.",
        "This filter decides which -gencode targets a build or JIT compilation uses." + _NEXT_STEPS,
    ),
    _gate_rule(
        GateKind.CMAKE,
        "CMakeArchList",
        "CMake builds some targets only for some GPU architectures.",
        "CMAKE_CUDA_ARCHITECTURES, a gencode list or an if() on the CUDA architecture in CMake decides "
        "which kernels are compiled and for which targets. Architectures left out get neither SASS nor "
        "PTX to JIT-compile from, or lose whole libraries.",
        "This CMake logic decides the compilation targets of a native build; it matters when you build "
        "the package from source." + _NEXT_STEPS,
    ),
    _gate_rule(
        GateKind.BINARY,
        "BinaryArchCoverage",
        "A compiled object contains GPU code only for some architectures.",
        "The SASS and PTX embedded in a shared library or cubin cover a fixed set of architectures. A GPU "
        "outside that set cannot run the kernels unless PTX for an older, compatible architecture is "
        "embedded for the driver to JIT-compile. The driver picks an image per compiled unit (each source's "
        "fat binary container), so a library can run some kernels and not others on a GPU (partial): the "
        "message says how many units run and which kernels have no image.",
        "Compiled code cannot be widened in place: rebuild the package from source with your GPU's "
        "architecture added, after lifting the source gates that exclude it. `liftgate explain GATE_ID SOURCE` "
        "lists the architectures the object contains.",
    ),
)
RULE_INDEX = {kind: [rule.id for rule in RULES].index(gate_rule_id(kind)) for kind in GateKind}
HAZARD_RULE = Rule(
    "liftgate/hazard",
    "LiftHazard",
    "A gate's exclusion of a target, or lifting it, is risky whatever the verdict.",
    "liftgate judged what the code behind a gate needs from a target the gate excludes and found "
    "something that makes the exclusion, or lifting it, dangerous regardless of the verdict: code that "
    "orders or synchronises (such as a programmatic dependent launch wait) compiled out with nothing in "
    "its place, so a dependent kernel can run before its producer finishes and race on its data "
    "without any error; a kernel asking for more shared memory per block than the target allows; or an "
    "#if on a build flag that only a CMake arch gate passes, which that gate decides.",
    "Read the hazard before lifting the gate: a silently compiled-out wait is a data race on that GPU "
    "today, and a shared-memory request above the target's limit fails at launch once lifted. "
    "`liftgate explain GATE_ID SOURCE --target ARCH` (the command is in each result) shows the region, "
    "its features and the full verdict.",
    "hazard",
)
HAZARD_RULE_INDEX = len(RULES)  # listed after the gate-kind rules, so their indexes never move
UNSAFE_RULE = Rule(
    "liftgate/unsafe-admission",
    "UnsafeAdmission",
    "A gate lets a GPU into code that uses a hardware feature the GPU lacks.",
    "liftgate judged the code a gate admits a target into, as that target compiles it (nested gates "
    "that keep it out left out), and found a hardware feature the target does not have: the gate is too "
    "loose. The result is a failed build (ptxas rejects the instruction), an illegal-instruction fault "
    "at run time, or wrong results, not a fallback. FlashInfer 0.6.6's CUTLASS FMHA filter [10, 11, 12] "
    "sends sm_120a into tcgen05 kernels; SGLang 0.5.19's DeepGEMM deny-list lets sm_121 through.",
    "Exclude the target from the gate (narrow the arch list or the condition), or make sure the code it "
    "reaches has a path for it. `liftgate explain GATE_ID SOURCE --target ARCH` (the command is in each "
    "result) names each missing feature and where it is used.",
    "unsafe",
)
UNSAFE_RULE_INDEX = len(RULES) + 1

_ELSE_CONSEQUENCE = {
    ElseKind.NONE: "the guarded code is left out for it",
    ElseKind.FALLBACK: "it gets a fallback implementation instead",
    ElseKind.ERROR: "it hits an error instead (raise, #error or static_assert)",
}


def _rule_to_dict(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.short},
        "fullDescription": {"text": rule.full},
        "help": {"text": rule.help},
        "helpUri": INFORMATION_URI,
        "defaultConfiguration": {"level": "error" if rule is UNSAFE_RULE else "warning"},
        "properties": {"tags": ["gpu-architecture", rule.tag]},
    }


def _artifact(path: str) -> dict[str, str]:
    # A name that is not UTF-8 (surrogateescape) is percent-encoded as the bytes it really has.
    return {"uri": quote(path, safe="/", errors="surrogateescape"), "uriBaseId": PACKAGE_ROOT}


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _verdict_message(verdict: Verdict) -> str:
    """`` Verdict for sm_120: blocked: tcgen05-ld-st, wgmma.`` (a reason for the others), hazards counted."""
    if verdict.kind is VerdictKind.BLOCKED or not verdict.reasons:
        text = verdict_text(verdict)
    else:
        text = f"{verdict.kind.value}: {verdict.reasons[0]}"
    if verdict.hazards:
        text = f"{_sentence(text)} {plural(len(verdict.hazards), 'hazard')}: see {HAZARD_RULE.id}"
    return f" Verdict for {verdict.target.name}: {_sentence(text)}"


Origins = dict[tuple[str, str | None], str]


def _origins(report: Report) -> Origins:
    """The source spec each package was scanned from (`PackageSummary.origin`), by (name, version)."""
    origins: Origins = {}
    for package in sorted(report.packages, key=lambda p: (p.name, p.version or "", p.origin)):
        origins.setdefault((package.name, package.version), package.origin)
    return origins


def explain_command(gate: Gate, target: Target, origins: Origins) -> str:
    """``liftgate explain cu-94c62478db flashinfer-python==0.6.2 --target sm_120``: runnable as written,
    with the source the gate's package was scanned from (when the report knows it)."""
    loc = gate.location
    origin = origins.get((loc.package, loc.version))
    if origin is None and loc.version is None:
        origin = next((o for (name, _), o in origins.items() if name == loc.package), None)
    source = f" {shlex.quote(origin)}" if origin else ""
    return f"liftgate explain {gate.id}{source} --target {target.arch.name}"


def _message(
    gate: Gate,
    target: Target,
    status: Status,
    verdict: Verdict | None = None,
    origins: Origins | None = None,
    reading: Reading | None = None,
) -> str:
    label = target_label(target)
    condition = condition_text(gate)
    if reading is not None and reading.loss:
        text = f"{label} loses the path `{condition}` guards ({reading.outcome.value}): {reading.text}."
    elif status is Status.UNKNOWN:
        depends = ", ".join(gate.depends_on) or "something liftgate cannot see"
        text = f"Whether `{condition}` admits {label} depends on {depends}."
    else:
        text = f"{label} is excluded by `{condition}`: {_ELSE_CONSEQUENCE[gate.else_kind]}."
    text += f" The condition admits {admits_text(gate)}."
    if gate.confidence is Confidence.INFERRED:
        text += " This is inferred from a name, not derived from the code."
    if verdict is not None:
        text += _verdict_message(verdict)
    return f"{text} Details: `{explain_command(gate, target, origins or {})}`."


def _gate_location(gate: Gate) -> dict[str, Any]:
    loc = gate.location
    return {
        "physicalLocation": {
            "artifactLocation": _artifact(loc.path),
            "region": {"startLine": loc.span.start, "endLine": loc.span.end},
        }
    }


def _verdict_property(verdict: Verdict) -> dict[str, Any]:
    return {
        "target": verdict.target.name,
        "verdict": verdict.kind.value,
        "missing": missing_features(verdict),
        "hazards": [h.text for h in verdict.hazards],
    }


def _result(
    gate: Gate,
    target: Target,
    status: Status,
    verdicts: dict[tuple[str, Arch], Verdict] | None = None,
    trace: TraceSummary | None = None,
    origins: Origins | None = None,
    reading: Reading | None = None,
) -> dict[str, Any]:
    """One gate's result for one target; ``verdicts`` (a judged report's index) adds the verdict,
    ``trace`` (scan --trace) what the traced run did at the gate; ``origins`` name the sources;
    ``reading`` the gate's outcome for the target."""
    loc = gate.location
    verdict = None if verdicts is None else verdicts.get((gate.id, target.arch))
    judged: dict[str, Any] = {}
    if verdicts is not None:
        judged["verdicts"] = [] if verdict is None else [_verdict_property(verdict)]
    if trace is not None:
        traced = trace.for_gate(gate.id)
        judged["trace"] = None if traced is None else gate_trace_to_dict(traced)
    return {
        "ruleId": RULES[RULE_INDEX[gate.kind]].id,
        "ruleIndex": RULE_INDEX[gate.kind],
        "level": "note" if status is Status.UNKNOWN else "warning",
        "message": {"text": _message(gate, target, status, verdict, origins, reading)},
        "locations": [_gate_location(gate)],
        # Two targets excluded by one gate are two results, so the target is part of the identity.
        "partialFingerprints": {FINGERPRINT_KEY: gate.id, TARGET_FINGERPRINT_KEY: target.arch.name},
        "properties": {
            "package": loc.package,
            "version": loc.version,
            "gateId": gate.id,
            "target": target.spelling,
            "arch": target.arch.name,
            "status": status.value,
            "condition": gate.condition,
            "admitted": gate.admitted.names(),
            "unknown": gate.unknown.names(),
            "elseKind": gate.else_kind.value,
            "confidence": gate.confidence.value,
            **(
                {"outcome": reading.outcome.value, "loss": reading.loss, "outcomeText": reading.text}
                if reading is not None
                else {}
            ),
            **judged,
        },
    }


# A hazard's fingerprint category: stable across releases (these were the texts' opening words).
_HAZARD_CATEGORY = {
    HazardKind.SILENT_EXCLUSION: "silent exclusion",
    HazardKind.SILENT_SOURCE: "silent exclusion inside the sources",
    HazardKind.SHARED_MEMORY: "shared memory",
    HazardKind.BUILD_FLAG: "build flag",
}


def _hazard_key(hazards: tuple[Hazard, ...], index: int) -> str:
    """``silent exclusion#0``: what the hazard is and its rank among those alike, never a line number."""
    kind = hazards[index].kind
    rank = sum(1 for hazard in hazards[:index] if hazard.kind is kind)
    return f"{_HAZARD_CATEGORY[kind]}#{rank}"


def _unsafe_result(gate: Gate, target: Target, verdict: Verdict, origins: Origins) -> dict[str, Any]:
    """A ``liftgate/unsafe-admission`` result (level error): the gate admits the target into code
    that uses features it lacks, located at the gate, with the first use of each missing feature."""
    loc = gate.location
    missing = missing_features(verdict)
    first: dict[str, FeatureUse] = {}
    for use in verdict.missing:
        first.setdefault(use.feature, use)
    where = "; ".join(f"{u.feature} at {u.path}:{u.line}" for u in first.values())
    text = (
        f"`{condition_text(gate)}` admits {target_label(target)} into code that uses what it lacks: {where}. "
        f"Details: `{explain_command(gate, target, origins)}`."
    )
    return {
        "ruleId": UNSAFE_RULE.id,
        "ruleIndex": UNSAFE_RULE_INDEX,
        "level": "error",
        "message": {"text": text},
        "locations": [_gate_location(gate)],
        "partialFingerprints": {FINGERPRINT_KEY: gate.id, TARGET_FINGERPRINT_KEY: target.arch.name},
        "properties": {
            "package": loc.package,
            "version": loc.version,
            "gateId": gate.id,
            "target": target.spelling,
            "arch": target.arch.name,
            "status": Status.ADMITTED.value,
            "verdict": verdict.kind.value,
            "missing": missing,
            "condition": gate.condition,
        },
    }


def _hazard_results(
    gate: Gate, target: Target, verdict: Verdict, origins: Origins | None = None
) -> list[dict[str, Any]]:
    """One ``liftgate/hazard`` result per hazard of ``verdict``, located at the gate."""
    loc = gate.location
    details = explain_command(gate, target, origins or {})
    prefix = (
        f"`{condition_text(gate)}` for {target_label(target)} (verdict: {verdict.kind.value}) has a hazard"
    )
    return [
        {
            "ruleId": HAZARD_RULE.id,
            "ruleIndex": HAZARD_RULE_INDEX,
            "level": "warning",
            "message": {"text": f"{prefix}: {_sentence(hazard.text)} Details: `{details}`."},
            "locations": [_gate_location(gate)],
            "partialFingerprints": {
                FINGERPRINT_KEY: gate.id,
                TARGET_FINGERPRINT_KEY: target.arch.name,
                HAZARD_FINGERPRINT_KEY: _hazard_key(verdict.hazards, index),
            },
            "properties": {
                "package": loc.package,
                "version": loc.version,
                "gateId": gate.id,
                "target": target.spelling,
                "arch": target.arch.name,
                "verdict": verdict.kind.value,
                "hazard": hazard.text,
            },
        }
        for index, hazard in enumerate(verdict.hazards)
    ]


def _skip_notification(skip: Skip) -> dict[str, Any]:
    notification: dict[str, Any] = {
        "level": "note",
        "message": {"text": f"Not analysed: {skip.reason}"},
        "locations": [{"physicalLocation": {"artifactLocation": _artifact(skip.path)}}],
    }
    if skip.package is not None:
        notification["properties"] = {"package": skip.package}
    return notification


def report_to_sarif(report: Report, options: RenderOptions) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log (plain JSON-ready data)."""
    targets = distinct_targets(report)
    # Verdicts (and the hazard rule) only in a judged report, so that others render as they always did.
    verdicts = report.verdict_index() if report.verdicts else None
    rules = [*RULES, HAZARD_RULE, UNSAFE_RULE] if verdicts is not None else list(RULES)
    origins = _origins(report)
    results: list[dict[str, Any]] = []
    outcomes = Outcomes.of_report(report)
    for gate in select_gates(report, options):
        for target in targets:
            status = gate.status(target.arch)
            verdict = None if verdicts is None else verdicts.get((gate.id, target.arch))
            if status is Status.ADMITTED:
                if verdict is not None and verdict.kind is VerdictKind.UNSAFE:
                    results.append(_unsafe_result(gate, target, verdict, origins))
                continue
            reading = outcomes.of(gate, target.arch)
            if options.show is Show.LOSSES and not listed(reading):
                continue  # the default view: an alternative is not a finding
            results.append(_result(gate, target, status, verdicts, report.trace, origins, reading))
            if verdict is not None:
                results += _hazard_results(gate, target, verdict, origins)
    notifications = [_skip_notification(skip) for skip in sorted(report.skips, key=skip_sort_key)]
    notifications += [{"level": "note", "message": {"text": note}} for note in report.notes]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "liftgate",
                        "version": liftgate.__version__,
                        "informationUri": INFORMATION_URI,
                        "rules": [_rule_to_dict(rule) for rule in rules],
                    }
                },
                "originalUriBaseIds": {
                    PACKAGE_ROOT: {
                        "description": {
                            "text": "The root of the package a file belongs to; each result names the "
                            "package in its properties."
                        }
                    }
                },
                "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notifications}],
                "results": results,
                "properties": {
                    "targets": [{"spelling": t.spelling, "arch": t.arch.name} for t in report.targets],
                    "cudaVersion": "{}.{}".format(*report.cuda_version),
                    "packages": [
                        {"name": p.name, "version": p.version, "origin": p.origin}
                        for p in sorted(report.packages, key=lambda p: (p.name, p.version or "", p.origin))
                    ],
                    **({"trace": trace_to_dict(report.trace)} if report.trace is not None else {}),
                },
            }
        ],
    }


class SarifFormatter:
    """``--format sarif``."""

    def format(self, report: Report, options: RenderOptions) -> str:
        return (
            printable_json(json.dumps(report_to_sarif(report, options), indent=2, ensure_ascii=False)) + "\n"
        )
