"""SARIF 2.1.0 output, for code-scanning dashboards (GitHub, GitLab, IDE viewers).

One run; the driver lists exactly one rule per `GateKind`, each once, with a help text saying
what the gate kind is and what to do about it. Each selected gate yields one result per target
it excludes (level ``warning``) or cannot decide (level ``note``); admitted targets yield none.
Paths are relative to the package root (``uriBaseId`` ``PKGROOT``), with the package named in
the result's properties, because one scan can cover several packages from different places.
Skipped files become tool-execution notifications, so a viewer shows what was not analysed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import liftgate
from liftgate.model import Confidence, ElseKind, Gate, GateKind, Report, Skip, Status, Target
from liftgate.report.interface import RenderOptions
from liftgate.report.select import (
    admits_text,
    condition_text,
    distinct_targets,
    select_gates,
    skip_sort_key,
    target_label,
)

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
INFORMATION_URI = "https://pypi.org/project/liftgate/"
PACKAGE_ROOT = "PKGROOT"
FINGERPRINT_KEY = "liftgateGateId/v1"
TARGET_FINGERPRINT_KEY = "liftgateTarget/v1"

_NEXT_STEPS = (
    " Run `liftgate explain GATE_ID` (each result's message names its gate id) to see how the condition "
    "was resolved and what the guarded code needs from the hardware. If your GPU has every feature the "
    "region uses, `liftgate lift GATE_ID` widens the condition reversibly (`liftgate revert` undoes it); "
    "otherwise the gate is right to exclude your GPU."
)


@dataclass(frozen=True, slots=True)
class Rule:
    kind: GateKind
    name: str
    short: str
    full: str
    help: str

    @property
    def id(self) -> str:
        return f"liftgate/{self.kind.value}"


RULES: tuple[Rule, ...] = (
    Rule(
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
    Rule(
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
    Rule(
        GateKind.PY_RUNTIME,
        "PythonRuntimeCapabilityGate",
        "Python code path chosen by the GPU's compute capability at run time.",
        "A runtime check such as torch.cuda.get_device_capability()[0] in (9, 10), or a helper such as "
        "is_sm100_supported(), enables a kernel or feature only on some GPUs. Other GPUs take a fallback "
        "path, raise an error, or silently lose the feature.",
        "This check runs on the device the program sees and only compares its compute capability; "
        "the variant suffixes (a, f) of compile targets play no part." + _NEXT_STEPS,
    ),
    Rule(
        GateKind.PY_BUILD,
        "PythonBuildArchFilter",
        "Kernels built or JIT-compiled by Python code only for some GPU architectures.",
        "An architecture list or filter in Python build code (setup.py, JIT compilation specs, "
        "supported-arch tables, TORCH_CUDA_ARCH_LIST handling) leaves architectures out of the kernels "
        "it compiles. On those GPUs the kernel is never built, so it is missing at run time.",
        "This filter decides which -gencode targets a build or JIT compilation uses." + _NEXT_STEPS,
    ),
    Rule(
        GateKind.CMAKE,
        "CMakeArchList",
        "CMake builds some targets only for some GPU architectures.",
        "CMAKE_CUDA_ARCHITECTURES, a gencode list or an if() on the CUDA architecture in CMake decides "
        "which kernels are compiled and for which targets. Architectures left out get neither SASS nor "
        "PTX to JIT-compile from, or lose whole libraries.",
        "This CMake logic decides the compilation targets of a native build; it matters when you build "
        "the package from source." + _NEXT_STEPS,
    ),
    Rule(
        GateKind.BINARY,
        "BinaryArchCoverage",
        "A compiled object contains GPU code only for some architectures.",
        "The SASS and PTX embedded in a shared library or cubin cover a fixed set of architectures. A GPU "
        "outside that set cannot run the kernels unless PTX for an older, compatible architecture is "
        "embedded for the driver to JIT-compile.",
        "Compiled code cannot be widened in place: rebuild the package from source with your GPU's "
        "architecture added, after lifting the source gates that exclude it. `liftgate explain GATE_ID` "
        "lists the architectures the object contains.",
    ),
)
RULE_INDEX = {rule.kind: index for index, rule in enumerate(RULES)}

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
        "defaultConfiguration": {"level": "warning"},
        "properties": {"tags": ["gpu-architecture", rule.kind.value]},
    }


def _artifact(path: str) -> dict[str, str]:
    return {"uri": quote(path, safe="/"), "uriBaseId": PACKAGE_ROOT}


def _message(gate: Gate, target: Target, status: Status) -> str:
    label = target_label(target)
    condition = condition_text(gate)
    if status is Status.UNKNOWN:
        depends = ", ".join(gate.depends_on) or "something liftgate cannot see"
        text = f"Whether `{condition}` admits {label} depends on {depends}."
    else:
        text = f"{label} is excluded by `{condition}`: {_ELSE_CONSEQUENCE[gate.else_kind]}."
    text += f" The condition admits {admits_text(gate)}."
    if gate.confidence is Confidence.INFERRED:
        text += " This is inferred from a name, not derived from the code."
    return f"{text} Details: `liftgate explain {gate.id}`."


def _result(gate: Gate, target: Target, status: Status) -> dict[str, Any]:
    loc = gate.location
    return {
        "ruleId": RULES[RULE_INDEX[gate.kind]].id,
        "ruleIndex": RULE_INDEX[gate.kind],
        "level": "note" if status is Status.UNKNOWN else "warning",
        "message": {"text": _message(gate, target, status)},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact(loc.path),
                    "region": {"startLine": loc.span.start, "endLine": loc.span.end},
                }
            }
        ],
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
        },
    }


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
    results = [
        _result(gate, target, status)
        for gate in select_gates(report, options)
        for target in targets
        if (status := gate.status(target.arch)) is not Status.ADMITTED
    ]
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
                        "rules": [_rule_to_dict(rule) for rule in RULES],
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
                },
            }
        ],
    }


class SarifFormatter:
    """``--format sarif``."""

    def format(self, report: Report, options: RenderOptions) -> str:
        return json.dumps(report_to_sarif(report, options), indent=2, ensure_ascii=False) + "\n"
