"""Tests for the report stage: gate selection, the summary line and every output format.

The fixture is a small hand-built `Report` over two packages and two targets (``rtx5090`` =
sm_120, and sm_90). Each format is compared with a golden file under tests/golden/; run
``pytest tests/test_report.py --update-golden`` (or set ``LIFTGATE_UPDATE_GOLDEN=1``) to
regenerate them after an intended change, then review the diff.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import liftgate
from liftgate.arch.core import Arch, ArchSet, universe
from liftgate.model import (
    Confidence,
    ElseKind,
    Evidence,
    Gate,
    GateKind,
    Location,
    PackageSummary,
    Report,
    Skip,
    Span,
    Target,
    Truth,
    gate_id,
)
from liftgate.report import (
    OutputFormat,
    RenderOptions,
    Show,
    formatter_for,
    render,
    select_gates,
    summary_line,
)
from liftgate.report.json_format import load_schema
from liftgate.report.markdown import code_span, escape_text
from liftgate.report.select import admits_text

GOLDEN_DIR = Path(__file__).parent / "golden"
GOLDEN = {
    OutputFormat.TABLE: "report.txt",
    OutputFormat.JSON: "report.json",
    OutputFormat.SARIF: "report.sarif",
    OutputFormat.MARKDOWN: "report.md",
}

RTX5090 = Target("rtx5090", Arch(12, 0))
SM90 = Target("sm_90", Arch(9, 0))
FLASHINFER = "flashinfer-python"
SGLANG = "sglang"
ALLREDUCE = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"
CUTLASS_MMA = "flashinfer/data/cutlass/include/cutlass/arch/mma_sm90.h"
FP8_UTILS = "sglang/srt/layers/quantization/fp8_utils.py"
UTILS_CUH = "flashinfer/data/include/flashinfer/utils.cuh"


def capabilities(*ccs: tuple[int, int]) -> ArchSet:
    """Every variant of the given compute capabilities."""
    return ArchSet(arch for arch in universe() if arch.cc in ccs)


def at_least(major: int, minor: int = 0) -> ArchSet:
    return ArchSet(arch for arch in universe() if arch.cc >= (major, minor))


def make_gate(
    kind: GateKind,
    package: str,
    version: str,
    path: str,
    span: Span,
    condition: str,
    admitted: ArchSet,
    **fields: Any,
) -> Gate:
    return Gate(
        id=gate_id(kind, package, path, " ".join(condition.split()), (), 0),
        kind=kind,
        location=Location(package, version, path, span),
        condition=condition,
        admitted=admitted,
        unknown=fields.pop("unknown", ArchSet.none()),
        host=fields.pop("host", Truth.FALSE if kind is GateKind.CUDA_PP else None),
        then_span=fields.pop("then_span", Span(span.end + 1, span.end + 1)),
        else_span=fields.pop("else_span", None),
        else_kind=fields.pop("else_kind", ElseKind.NONE),
        **fields,
    )


ALLREDUCE_GATE = make_gate(
    GateKind.CUDA_PP,
    FLASHINFER,
    "0.6.2",
    ALLREDUCE,
    Span(417, 417),
    "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))",
    capabilities((9, 0), (10, 0), (10, 3), (11, 0)),
    directive="#if",
)
SM90A_GATE = make_gate(
    GateKind.CUDA_PP,
    FLASHINFER,
    "0.6.2",
    CUTLASS_MMA,
    Span(96, 96),
    "CUTLASS_ARCH_MMA_SM90A_ENABLED",
    ArchSet([Arch(9, 0, "a")]),
    directive="#ifdef",
    then_span=Span(97, 121),
    else_span=Span(123, 125),
    else_kind=ElseKind.ERROR,
    evidence=(
        Evidence(
            "CUTLASS_ARCH_MMA_SM90A_ENABLED is defined when __CUDA_ARCH__ == 900 && "
            "defined(__CUDA_ARCH_FEAT_SM90_ALL)",
            "flashinfer/data/cutlass/include/cutlass/arch/config.h",
            47,
        ),
    ),
)
DEEPGEMM_GATE = make_gate(
    GateKind.PY_RUNTIME,
    SGLANG,
    "0.5.6",
    FP8_UTILS,
    Span(142, 144),
    "get_device_capability()[0] >= 10\n        or (is_sm90_supported() and ENABLE_JIT_DEEPGEMM)",
    at_least(10),
    unknown=capabilities((9, 0)),
    then_span=Span(145, 152),
    else_span=Span(153, 160),
    else_kind=ElseKind.FALLBACK,
    evidence=(
        Evidence(
            "is_sm90_supported → device capability major 9 and CUDA >= 12.3",
            "sglang/srt/utils/common.py",
            309,
        ),
    ),
    depends_on=("ENABLE_JIT_DEEPGEMM (environment variable SGLANG_ENABLE_JIT_DEEPGEMM)",),
)
# Admitted for both targets: only `Show.ADMITTED` and `Show.ALL` list it.
SM80_GATE = make_gate(
    GateKind.CUDA_PP,
    FLASHINFER,
    "0.6.2",
    UTILS_CUH,
    Span(301, 301),
    "__CUDA_ARCH__ >= 800",
    at_least(8, 0),
    directive="#if",
    else_span=Span(304, 306),
    else_kind=ElseKind.FALLBACK,
)
SKIP = Skip(
    "flashinfer/data/include/flashinfer/attention/hopper/kernel_traits.cuh",
    "line 88: #if calls the function-like macro CUTE_ARCH_COND(__CUDA_ARCH_FEAT_SM90_ALL), not expanded",
    FLASHINFER,
)


@pytest.fixture(autouse=True)
def pinned_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # Golden files must not change with every release.
    monkeypatch.setattr(liftgate, "__version__", "0.0.0+test")


def sample_report() -> Report:
    return Report(
        targets=(RTX5090, SM90),
        packages=(
            PackageSummary(SGLANG, "0.5.6", "sglang==0.5.6 (package index)", 1240),
            PackageSummary(FLASHINFER, "0.6.2", "flashinfer_python-0.6.2-py3-none-any.whl", 1992),
        ),
        # Deliberately out of report order: formatters must sort.
        gates=(DEEPGEMM_GATE, SM80_GATE, ALLREDUCE_GATE, SM90A_GATE),
        skips=(SKIP,),
        files_scanned=3232,
        elapsed_s=1.8372,
        cuda_version=(13, 0),
        notes=("CUDA gates evaluated with the predefined macros of nvcc 13.0",),
    )


@pytest.fixture
def report() -> Report:
    return sample_report()


def one_target(report: Report) -> Report:
    return dataclasses.replace(report, targets=(RTX5090,))


# --- selection and summary ---------------------------------------------------------------


def test_select_excluded_keeps_gates_excluded_or_unknown_for_some_target(report: Report) -> None:
    # sm_120: allreduce and sm90a excluded, deepgemm admitted; sm_90: sm90a excluded, deepgemm unknown.
    assert select_gates(report, RenderOptions()) == [SM90A_GATE, ALLREDUCE_GATE, DEEPGEMM_GATE]


def test_select_orders_by_package_path_line(report: Report) -> None:
    gates = select_gates(report, RenderOptions(show=Show.ALL))
    assert gates == [SM90A_GATE, ALLREDUCE_GATE, SM80_GATE, DEEPGEMM_GATE]
    keys = [(g.location.package, g.location.path, g.location.line) for g in gates]
    assert keys == sorted(keys)


def test_select_admitted_needs_every_target(report: Report) -> None:
    assert select_gates(report, RenderOptions(show=Show.ADMITTED)) == [SM80_GATE]
    # With only sm_120, the DeepGEMM gate (admitted for 10.0+) is admitted everywhere too.
    assert select_gates(one_target(report), RenderOptions(show=Show.ADMITTED)) == [SM80_GATE, DEEPGEMM_GATE]


def test_select_unknown_counts_as_not_admitted(report: Report) -> None:
    only_sm90 = dataclasses.replace(report, targets=(SM90,))
    assert select_gates(only_sm90, RenderOptions()) == [SM90A_GATE, DEEPGEMM_GATE]


def test_select_by_kind(report: Report) -> None:
    options = RenderOptions(show=Show.ALL, kinds=frozenset({GateKind.PY_RUNTIME}))
    assert select_gates(report, options) == [DEEPGEMM_GATE]
    assert select_gates(report, RenderOptions(kinds=frozenset())) == []


def test_select_without_targets_lists_every_gate(report: Report) -> None:
    no_targets = dataclasses.replace(report, targets=())
    assert len(select_gates(no_targets, RenderOptions())) == 4


def test_summary_line(report: Report) -> None:
    assert summary_line(report) == (
        "scanned 3,232 files in 2 packages (1 skipped), 4 gates, 2 exclude sm_120, 1 excludes sm_90,"
        " 1 unknown; sm_120 loses 2 code paths in 2 features (2 shut out), sm_90 loses 1 code path in"
        " 1 feature (1 shut out) — 1.84 s"
    )


def test_summary_line_single_target_and_none(report: Report) -> None:
    single = dataclasses.replace(one_target(report), packages=report.packages[:1], skips=())
    assert summary_line(single) == (
        "scanned 3,232 files in 1 package (0 skipped), 4 gates, 2 exclude sm_120, 0 unknown; sm_120 loses"
        " 2 code paths in 2 features (2 shut out) — 1.84 s"
    )
    no_targets = dataclasses.replace(report, targets=())
    assert summary_line(no_targets) == "scanned 3,232 files in 2 packages (1 skipped), 4 gates — 1.84 s"


def test_repeated_arch_is_one_column(report: Report) -> None:
    twice = dataclasses.replace(report, targets=(RTX5090, Target("sm_120", Arch(12, 0)), SM90))
    document = json.loads(render(twice, OutputFormat.JSON, RenderOptions()))
    assert [t["spelling"] for t in document["targets"]] == ["rtx5090", "sm_120", "sm_90"]
    assert list(document["summary"]["targets"]) == ["sm_120", "sm_90"]
    assert summary_line(twice) == summary_line(report)


def test_admits_text_marks_unknown_parts() -> None:
    assert admits_text(ALLREDUCE_GATE) == ALLREDUCE_GATE.admitted.render()
    # Each part's "; not sm_XX+" would contradict the other part; only the union's end is kept.
    assert admits_text(DEEPGEMM_GATE) == "sm_100–sm_121 (all variants) + unknown: sm_90 (all variants)"
    partial = dataclasses.replace(
        SM90A_GATE, admitted=ArchSet([Arch(9, 0, "a")]), unknown=ArchSet([Arch(10, 0, "a")])
    )
    assert admits_text(partial) == "sm_90a + unknown: sm_100a; not sm_103+"
    only_unknown = dataclasses.replace(
        SM90A_GATE, admitted=ArchSet.none(), unknown=ArchSet([Arch(9, 0, "a")])
    )
    assert admits_text(only_unknown) == "unknown: sm_90a; not sm_100+"


def test_inferred_gates_are_never_shown_as_exact(report: Report) -> None:
    inferred = dataclasses.replace(SM90A_GATE, confidence=Confidence.INFERRED)
    report = dataclasses.replace(report, gates=(inferred,))
    assert "(inferred) sm_90a" in render(report, OutputFormat.TABLE, RenderOptions())
    assert "(inferred) sm_90a" in render(report, OutputFormat.MARKDOWN, RenderOptions())
    assert (
        json.loads(render(report, OutputFormat.JSON, RenderOptions()))["gates"][0]["confidence"] == "inferred"
    )
    for result in json.loads(render(report, OutputFormat.SARIF, RenderOptions()))["runs"][0]["results"]:
        assert "inferred from a name" in result["message"]["text"]
    verbose = render(report, OutputFormat.TABLE, RenderOptions(verbose=True, width=200))
    assert "confidence: inferred from a name, not derived from the code" in " ".join(verbose.split())


# --- every format --------------------------------------------------------------------------


def test_every_format_has_a_formatter_and_a_golden_file() -> None:
    assert set(GOLDEN) == set(OutputFormat)
    for fmt in OutputFormat:
        assert callable(formatter_for(fmt).format)
        assert type(formatter_for(fmt.value)) is type(formatter_for(fmt))
    with pytest.raises(ValueError):
        formatter_for("yaml")


def _compare_with_golden(actual: str, name: str, update: bool) -> None:
    golden = GOLDEN_DIR / name
    if update:
        GOLDEN_DIR.mkdir(exist_ok=True)
        golden.write_text(actual, encoding="utf-8")
        return
    if not golden.exists():
        pytest.fail(f"{golden} is missing; run pytest with --update-golden to create it")
    expected = golden.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True), actual.splitlines(keepends=True), str(golden), "actual"
            )
        )
        pytest.fail(f"output differs from {golden} (rerun with --update-golden if intended):\n{diff}")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return (
        bool(request.config.getoption("--update-golden")) or os.environ.get("LIFTGATE_UPDATE_GOLDEN") == "1"
    )


@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_format_matches_golden(report: Report, fmt: OutputFormat, update_golden: bool) -> None:
    text = render(report, fmt, RenderOptions())
    assert text.endswith("\n")
    assert render(report, fmt, RenderOptions()) == text, "output must be deterministic"
    # The input order of gates must not leak into the output.
    shuffled = dataclasses.replace(
        report, gates=tuple(reversed(report.gates)), packages=report.packages[::-1]
    )
    assert render(shuffled, fmt, RenderOptions()) == text
    _compare_with_golden(text, GOLDEN[fmt], update_golden)


@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_format_says_when_nothing_matches(report: Report, fmt: OutputFormat) -> None:
    options = RenderOptions(kinds=frozenset({GateKind.CMAKE}))
    text = render(report, fmt, options)
    if fmt is OutputFormat.JSON:
        assert json.loads(text)["gates"] == []
    elif fmt is OutputFormat.SARIF:
        assert json.loads(text)["runs"][0]["results"] == []
    else:
        assert "no cmake gates exclude sm_120 or sm_90 in 2 packages (3,232 files)" in text
        assert ALLREDUCE not in text


# --- JSON ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


@pytest.mark.parametrize("show", list(Show))
def test_json_validates_against_schema(report: Report, schema: dict[str, Any], show: Show) -> None:
    for options in (RenderOptions(show=show), RenderOptions(show=show, kinds=frozenset({GateKind.CUDA_PP}))):
        document = json.loads(render(report, OutputFormat.JSON, options))
        jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(document)


def test_json_content(report: Report) -> None:
    document = json.loads(render(report, OutputFormat.JSON, RenderOptions(show=Show.ALL)))
    assert document["schema_version"] == "9"
    assert document["tool"] == {"name": "liftgate", "version": "0.0.0+test"}
    assert document["cuda_version"] == "13.0"
    assert document["summary"] == {
        "files_scanned": 3232,
        "files_skipped": 1,
        "gates": 4,
        "targets": {
            "sm_120": {
                "excluded": 2,
                "admitted": 2,
                "unknown": 0,
                "losses": 2,
                "loss_features": 2,
                "alternatives": 0,
                "unsafe": 0,
            },
            "sm_90": {
                "excluded": 1,
                "admitted": 2,
                "unknown": 1,
                "losses": 1,
                "loss_features": 1,
                "alternatives": 0,
                "unsafe": 0,
            },
        },
        "elapsed_s": 1.837,
    }
    # The default view's groups: each target's losses by feature, shut-outs first (sm_90's unknown
    # DeepGEMM gate is listed as unknown, not as a loss).
    assert [(f["target"], f["outcome"], f["feature"], f["gates"]) for f in document["losses"]] == [
        ("sm_120", "shut-out", SM90A_GATE.location.path, [SM90A_GATE.id]),
        (
            "sm_120",
            "shut-out",
            "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh",
            [ALLREDUCE_GATE.id],
        ),
        ("sm_90", "shut-out", SM90A_GATE.location.path, [SM90A_GATE.id]),
        ("sm_90", "unknown", DEEPGEMM_GATE.location.path, [DEEPGEMM_GATE.id]),
    ]
    assert by_id_outcome(document, ALLREDUCE_GATE.id) == {
        "sm_120": ("shut-out", True),
        "sm_90": ("gets", False),
    }
    assert [p["name"] for p in document["packages"]] == [FLASHINFER, SGLANG]
    by_id = {gate["id"]: gate for gate in document["gates"]}
    allreduce = by_id[ALLREDUCE_GATE.id]
    assert allreduce["status"] == {"sm_120": "excluded", "sm_90": "admitted"}
    assert allreduce["admitted"] == [
        a.name for a in universe() if a.cc in {(9, 0), (10, 0), (10, 3), (11, 0)}
    ]
    assert allreduce["admitted_compact"] == ALLREDUCE_GATE.admitted.render()
    assert allreduce["host"] == "false"
    assert (allreduce["line"], allreduce["end_line"], allreduce["directive"]) == (417, 417, "#if")
    deepgemm = by_id[DEEPGEMM_GATE.id]
    assert deepgemm["status"] == {"sm_120": "admitted", "sm_90": "unknown"}
    assert deepgemm["unknown"] == ["sm_90", "sm_90a"]
    assert deepgemm["host"] is None
    assert deepgemm["else_span"] == {"start": 153, "end": 160}
    sm90a = by_id[SM90A_GATE.id]
    assert sm90a["evidence"] == [
        {
            "text": SM90A_GATE.evidence[0].text,
            "path": "flashinfer/data/cutlass/include/cutlass/arch/config.h",
            "line": 47,
        }
    ]
    assert sm90a["admitted"] == ["sm_90a"]
    assert document["skips"] == [{"path": SKIP.path, "package": FLASHINFER, "reason": SKIP.reason}]
    assert document["selection"] == {"show": "all", "kinds": None}


def by_id_outcome(document: dict[str, Any], gate_id: str) -> dict[str, tuple[str, bool]]:
    (gate,) = [g for g in document["gates"] if g["id"] == gate_id]
    return {arch: (o["outcome"], o["loss"]) for arch, o in gate["outcomes"].items()}


def test_schema_rejects_what_it_should(report: Report, schema: dict[str, Any]) -> None:
    """The schema is strict enough to catch a formatter drifting from it."""
    document = json.loads(render(report, OutputFormat.JSON, RenderOptions()))
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(document)
    broken = [
        lambda d: d["gates"][0].update(colour="red"),
        lambda d: d["gates"][0].update(kind="cuda"),
        lambda d: d["gates"][0]["status"].update(sm_120="maybe"),
        lambda d: d["gates"][0]["status"].update(rtx5090="excluded"),
        lambda d: d["gates"][0].pop("confidence"),
        lambda d: d["gates"][0].update(else_kind="fallthrough"),
        lambda d: d["summary"].pop("elapsed_s"),
        lambda d: d.update(schema_version="1"),
        lambda d: d["gates"][0].update(then_span={"start": 0, "end": 3}),
    ]
    for break_it in broken:
        copy = json.loads(json.dumps(document))
        break_it(copy)
        assert not validator.is_valid(copy), break_it


# --- SARIF ---------------------------------------------------------------------------------

# The part of SARIF 2.1.0 that viewers (GitHub code scanning among them) rely on; the full schema
# is not vendored and tests never use the network.
SARIF_SUBSET: dict[str, Any] = {
    "type": "object",
    "required": ["$schema", "version", "runs"],
    "properties": {
        "$schema": {"const": "https://json.schemastore.org/sarif-2.1.0.json"},
        "version": {"const": "2.1.0"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name", "version", "informationUri", "rules"],
                                "properties": {
                                    "name": {"const": "liftgate"},
                                    "informationUri": {"type": "string", "pattern": "^https://"},
                                    "rules": {"type": "array", "items": {"$ref": "#/$defs/rule"}},
                                },
                            }
                        },
                    },
                    "results": {"type": "array", "items": {"$ref": "#/$defs/result"}},
                    "originalUriBaseIds": {"type": "object"},
                },
            },
        },
    },
    "$defs": {
        "text": {
            "type": "object",
            "required": ["text"],
            "properties": {"text": {"type": "string", "minLength": 1}},
        },
        "rule": {
            "type": "object",
            "required": ["id", "shortDescription", "fullDescription", "help"],
            "properties": {
                "id": {"type": "string", "pattern": "^liftgate/"},
                "shortDescription": {"$ref": "#/$defs/text"},
                "fullDescription": {"$ref": "#/$defs/text"},
                "help": {"$ref": "#/$defs/text"},
                "defaultConfiguration": {
                    "type": "object",
                    "properties": {"level": {"enum": ["none", "note", "warning", "error"]}},
                },
            },
        },
        "result": {
            "type": "object",
            "required": ["ruleId", "ruleIndex", "level", "message", "locations", "partialFingerprints"],
            "properties": {
                "ruleId": {"type": "string"},
                "ruleIndex": {"type": "integer", "minimum": 0},
                "level": {"enum": ["none", "note", "warning", "error"]},
                "message": {"$ref": "#/$defs/text"},
                "partialFingerprints": {"type": "object", "additionalProperties": {"type": "string"}},
                "locations": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["physicalLocation"],
                        "properties": {
                            "physicalLocation": {
                                "type": "object",
                                "required": ["artifactLocation", "region"],
                                "properties": {
                                    "artifactLocation": {
                                        "type": "object",
                                        "required": ["uri", "uriBaseId"],
                                        # A relative URI reference: no scheme, no leading slash, no spaces.
                                        "properties": {
                                            "uri": {"type": "string", "pattern": "^[^/:\\s][^:\\s]*$"}
                                        },
                                    },
                                    "region": {
                                        "type": "object",
                                        "required": ["startLine"],
                                        "properties": {
                                            "startLine": {"type": "integer", "minimum": 1},
                                            "endLine": {"type": "integer", "minimum": 1},
                                        },
                                    },
                                },
                            }
                        },
                    },
                },
            },
        },
    },
}


def check_sarif(log: dict[str, Any]) -> None:
    """Validate the SARIF subset, then the cross-references a schema cannot express."""
    jsonschema.Draft202012Validator(SARIF_SUBSET).validate(log)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    rule_ids = [rule["id"] for rule in rules]
    assert len(rule_ids) == len(set(rule_ids)), "each rule is listed once"
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        for location in result["locations"]:
            physical = location["physicalLocation"]
            assert physical["artifactLocation"]["uriBaseId"] in run["originalUriBaseIds"]
            region = physical["region"]
            assert region.get("endLine", region["startLine"]) >= region["startLine"]


def test_sarif_structure(report: Report) -> None:
    log = json.loads(render(report, OutputFormat.SARIF, RenderOptions()))
    check_sarif(log)
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["version"] == "0.0.0+test"
    assert [rule["id"] for rule in driver["rules"]] == [f"liftgate/{kind.value}" for kind in GateKind]
    for rule in driver["rules"]:
        assert "liftgate explain GATE_ID" in rule["help"]["text"]
        if rule["id"] != "liftgate/binary":
            assert "liftgate lift" in rule["help"]["text"]


def test_sarif_results(report: Report) -> None:
    results = json.loads(render(report, OutputFormat.SARIF, RenderOptions()))["runs"][0]["results"]
    summary = [
        (r["partialFingerprints"]["liftgateGateId/v1"], r["properties"]["arch"], r["level"]) for r in results
    ]
    assert summary == [
        (SM90A_GATE.id, "sm_120", "warning"),
        (SM90A_GATE.id, "sm_90", "warning"),
        (ALLREDUCE_GATE.id, "sm_120", "warning"),
        (DEEPGEMM_GATE.id, "sm_90", "note"),
    ]
    first = results[0]
    assert first["ruleId"] == "liftgate/cuda-pp"
    assert first["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": CUTLASS_MMA, "uriBaseId": "PKGROOT"},
        "region": {"startLine": 96, "endLine": 96},
    }
    assert first["properties"]["package"] == FLASHINFER
    assert "rtx5090 (sm_120)" in first["message"]["text"]
    assert "#ifdef CUTLASS_ARCH_MMA_SM90A_ENABLED" in first["message"]["text"]
    assert "ENABLE_JIT_DEEPGEMM" in results[3]["message"]["text"]
    assert results[3]["ruleId"] == "liftgate/py-runtime"


def test_sarif_lists_every_rule_even_when_unused_and_escapes_uris(report: Report) -> None:
    spaced = make_gate(
        GateKind.CMAKE, "pkg", "1", "csrc/my kernels/CMakeLists.txt", Span(5, 7), "CUDA_ARCHS", at_least(10)
    )
    log = json.loads(
        render(dataclasses.replace(report, gates=(spaced,)), OutputFormat.SARIF, RenderOptions())
    )
    check_sarif(log)
    assert len(log["runs"][0]["tool"]["driver"]["rules"]) == len(GateKind)
    (result,) = log["runs"][0]["results"]  # sm_120 admitted, sm_90 excluded
    assert (
        result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        == "csrc/my%20kernels/CMakeLists.txt"
    )
    assert result["ruleIndex"] == list(GateKind).index(GateKind.CMAKE)


def test_sarif_check_can_fail(report: Report) -> None:
    log = json.loads(render(report, OutputFormat.SARIF, RenderOptions()))
    log["runs"][0]["results"][0]["ruleIndex"] = 4
    with pytest.raises(AssertionError):
        check_sarif(log)
    del log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    with pytest.raises(jsonschema.ValidationError):
        check_sarif(log)


# --- Markdown ------------------------------------------------------------------------------


def test_markdown_escaping() -> None:
    assert code_span("a || b") == r"`a \|\| b`"
    assert code_span("x `y` z") == "``x `y` z``"
    assert code_span("`y`") == "`` `y` ``"
    # Leading and trailing underscores would make bold text; the inner one cannot.
    assert escape_text("uses __CUDA_ARCH__ | *x* <b>") == r"uses \_\_CUDA_ARCH\_\_ \| \*x\* \<b\>"
    # Underscores between word characters never start emphasis; leave them readable.
    assert escape_text("sm_90–sm_110") == "sm_90–sm_110"


def test_markdown_table_cells_never_split(report: Report) -> None:
    piped = dataclasses.replace(
        ALLREDUCE_GATE, condition="defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900 || defined(FORCE_SM90))"
    )
    text = render(dataclasses.replace(report, gates=(piped,)), OutputFormat.MARKDOWN, RenderOptions())
    rows = [line for line in text.splitlines() if line.startswith("| `flashinfer/")]
    assert len(rows) == 1
    # Unescaped pipes delimit cells: file:line, condition, admits, two targets, id.
    assert len(re.findall(r"(?<!\\)\|", rows[0])) == 7
    assert r"\|\|" in rows[0]


def test_markdown_structure(report: Report) -> None:
    text = render(report, OutputFormat.MARKDOWN, RenderOptions())
    assert text.startswith("## liftgate: gates that exclude rtx5090 (sm_120) or sm_90\n\n")
    assert "### flashinfer-python 0.6.2" in text
    assert "### sglang 0.5.6" in text
    assert "| file:line | condition | admits | rtx5090 (sm_120) | sm_90 |" in text
    assert "<details>" in text and "</details>" in text
    assert text.index("<details>") < text.index(SKIP.path) < text.index("</details>")


# --- table -----------------------------------------------------------------------------------


def test_table_kind_column_only_when_kinds_mix(report: Report) -> None:
    mixed = render(report, OutputFormat.TABLE, RenderOptions())
    assert re.search(r"^\s+line\s+kind\s+condition", mixed, re.MULTILINE)
    only_cuda = render(report, OutputFormat.TABLE, RenderOptions(kinds=frozenset({GateKind.CUDA_PP})))
    # The target heading takes two lines: rtx5090 over (sm_120).
    assert re.search(r"rtx5090\n\s+line\s+condition\s+admits\s+else\s+\(sm_120\)\s+sm_90\s+id\n", only_cuda)
    assert "py-runtime" not in only_cuda


def test_table_fits_width_and_shortens_conditions(report: Report) -> None:
    text = render(report, OutputFormat.TABLE, RenderOptions(width=90))
    assert max(len(line) for line in text.splitlines()) <= 90
    assert "…" in text
    # Ids and statuses are never cut.
    for gate in (SM90A_GATE, ALLREDUCE_GATE, DEEPGEMM_GATE):
        assert gate.id in text
    assert text.count("excluded") == 3


def test_table_prints_text_not_markup(report: Report) -> None:
    text = render(report, OutputFormat.TABLE, RenderOptions(show=Show.ALL, width=200))
    assert "get_device_capability()[0] >= 10 or (is_sm90_supported() and ENABLE_JIT_DEEPGEMM)" in text


def test_table_verbose_shows_evidence_assumptions_and_skips(report: Report) -> None:
    plain = render(report, OutputFormat.TABLE, RenderOptions())
    verbose = render(report, OutputFormat.TABLE, RenderOptions(verbose=True))
    assert "config.h:47" not in plain and SKIP.reason not in plain
    assert "1 file not analysed; --verbose lists the reasons" in plain
    flat = " ".join(verbose.split())
    assert "evidence: CUTLASS_ARCH_MMA_SM90A_ENABLED" in flat
    assert "config.h:47" in flat
    assert "assumes: ENABLE_JIT_DEEPGEMM" in flat
    assert "not analysed (1 file):" in verbose
    assert "kernel_traits.cuh" in verbose and "not expanded" in flat


def test_table_colour(report: Report) -> None:
    plain = render(report, OutputFormat.TABLE, RenderOptions())
    coloured = render(report, OutputFormat.TABLE, RenderOptions(color=True))
    assert "\x1b[" not in plain
    assert "\x1b[31mexcluded" in coloured and "\x1b[32madmitted" in coloured and "\x1b[33munknown" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


def test_table_headers(report: Report) -> None:
    text = render(report, OutputFormat.TABLE, RenderOptions())
    lines = text.splitlines()
    assert lines[0] == "flashinfer-python 0.6.2"
    assert lines[1].strip() == "rtx5090"
    assert lines[2].split() == ["line", "kind", "condition", "admits", "else", "(sm_120)", "sm_90", "id"]
    assert lines[3] == f"  {CUTLASS_MMA}"
    assert lines[4].split()[:2] == ["96", "cuda-pp"]
    assert "sglang 0.5.6" in lines
    assert all(line == line.rstrip() for line in lines)
