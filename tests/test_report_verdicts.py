"""Tests for verdicts in the report stage: the table, Markdown, SARIF and the summary line.

The fixture is test_report's hand-built report with verdicts added, as ``judge_scan(scan(...))``
would: the sm_90a MMA gate is blocked for sm_120 (wgmma twice, setmaxnreg once) and for sm_90
(wgmma), the allreduce gate is liftable for sm_120 with a silent-exclusion hazard, and the
DeepGEMM gate is unknown for sm_90. The report without verdicts must render exactly as the
golden files of test_report say.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import jsonschema
import pytest

import liftgate
from liftgate.arch.core import Arch
from liftgate.model import FeatureUse, GateKind, Hazard, HazardKind, Report, Verdict, VerdictKind
from liftgate.report import OutputFormat, RenderOptions, VerdictFilter, render, summary_line
from liftgate.report.json_format import load_schema
from liftgate.report.summary import VerdictCounts, package_verdict_counts, total_verdict_counts
from test_report import (
    ALLREDUCE,
    ALLREDUCE_GATE,
    CUTLASS_MMA,
    DEEPGEMM_GATE,
    FLASHINFER,
    GOLDEN,
    GOLDEN_DIR,
    SGLANG,
    SM90,
    SM90A_GATE,
    check_sarif,
    sample_report,
)

SM120 = Arch(12, 0)
SM90_ARCH = Arch(9, 0)
HAZARD = (
    "silent exclusion: on sm_120 this code is compiled out with nothing in its place, and it orders "
    "or synchronises (griddepcontrol.wait at trtllm_allreduce.cuh:420)"
)
SMEM_HAZARD = (
    "shared memory: extern __shared__ at mma_sm90.h:99 asks for 262,144 bytes per block; sm_90 allows 232,448"
)


def _use(feature: str, line: int, text: str) -> FeatureUse:
    return FeatureUse(feature, CUTLASS_MMA, line, text, via="gemm_kernel")


BLOCKED_SM120 = Verdict(
    SM90A_GATE.id,
    SM120,
    VerdictKind.BLOCKED,
    ("sm_120 lacks wgmma (warpgroup MMA): used at mma_sm90.h:100; mma_sm90.h:105",),
    uses=(_use("wgmma", 100, "wgmma.mma_async"), _use("wgmma", 105, "wgmma.fence")),
    missing=(
        _use("wgmma", 100, "wgmma.mma_async"),
        _use("wgmma", 105, "wgmma.fence"),
        _use("setmaxnreg", 110, "setmaxnreg.inc"),
    ),
    scope="lines 97-121",
)
BLOCKED_SM90 = Verdict(
    SM90A_GATE.id,
    SM90_ARCH,
    VerdictKind.BLOCKED,
    ("sm_90 lacks wgmma (warpgroup MMA): used at mma_sm90.h:100",),
    missing=(_use("wgmma", 100, "wgmma.mma_async"),),
    hazards=(Hazard(HazardKind.SHARED_MEMORY, SMEM_HAZARD),),
)
LIFTABLE_SM120 = Verdict(
    ALLREDUCE_GATE.id,
    SM120,
    VerdictKind.LIFTABLE,
    ("everything the code uses exists on sm_120 (griddepcontrol)",),
    hazards=(Hazard(HazardKind.SILENT_EXCLUSION, HAZARD),),
)
UNKNOWN_SM90 = Verdict(
    DEEPGEMM_GATE.id,
    SM90_ARCH,
    VerdictKind.UNKNOWN,
    ("every feature seen exists on sm_90, but these were not found in the package: deep_gemm.fp8_gemm_nt",),
)
VERDICTS = (UNKNOWN_SM90, LIFTABLE_SM120, BLOCKED_SM90, BLOCKED_SM120)


@pytest.fixture(autouse=True)
def pinned_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(liftgate, "__version__", "0.0.0+test")


@pytest.fixture
def judged() -> Report:
    return dataclasses.replace(sample_report(), verdicts=VERDICTS)


def _rows(text: str) -> dict[int, str]:
    """Table rows by their line number (the first cell)."""
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^ +(\d+) .*$", text, re.MULTILINE)}


# --- counts and the summary line -----------------------------------------------------------


def test_verdict_counts(judged: Report) -> None:
    assert total_verdict_counts(judged) == VerdictCounts(
        liftable=1, blocked=2, unknown=1, liftable_hazards=1, blocked_hazards=1
    )
    entries = [(e.label, e.target.arch.name, e.counts.text()) for e in package_verdict_counts(judged)]
    assert entries == [
        (f"{FLASHINFER} 0.6.2", "sm_120", "1 liftable (1 with hazards), 1 blocked, 0 unknown"),
        (f"{FLASHINFER} 0.6.2", "sm_90", "0 liftable, 1 blocked (1 with hazards), 0 unknown"),
        (f"{SGLANG} 0.5.6", "sm_90", "0 liftable, 0 blocked, 1 unknown"),
    ]
    assert package_verdict_counts(sample_report()) == []


def test_counts_agree_with_json_summary(judged: Report) -> None:
    document = json.loads(render(judged, OutputFormat.JSON, RenderOptions()))
    for arch_name, tally in document["summary"]["verdicts"].items():
        entries = [e.counts for e in package_verdict_counts(judged) if e.target.arch.name == arch_name]
        assert tally["liftable"] == sum(c.liftable for c in entries)
        assert tally["blocked"] == sum(c.blocked for c in entries)
        assert tally["unknown"] == sum(c.unknown for c in entries)
        assert tally["hazard"] == sum(c.with_hazards for c in entries)


def test_summary_line_adds_verdicts(judged: Report) -> None:
    assert summary_line(judged) == (
        "scanned 3,232 files in 2 packages (1 skipped), 4 gates, 2 exclude sm_120, 1 excludes sm_90,"
        " 1 unknown; sm_120 loses 2 code paths in 2 features (2 shut out), sm_90 loses 1 code path in"
        " 1 feature (1 shut out); verdicts: 1 liftable (1 with hazards), 2 blocked (1 with hazards),"
        " 1 unknown — 1.84 s"
    )
    assert "verdicts" not in summary_line(sample_report())


# --- a report without verdicts is unchanged ---------------------------------------------------


@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_report_without_verdicts_renders_as_golden(fmt: OutputFormat) -> None:
    expected = (GOLDEN_DIR / GOLDEN[fmt]).read_text(encoding="utf-8")
    assert render(sample_report(), fmt, RenderOptions()) == expected
    assert "verdict" not in expected and "hazard" not in expected


@pytest.mark.parametrize("fmt", [OutputFormat.TABLE, OutputFormat.MARKDOWN, OutputFormat.SARIF])
def test_judged_report_differs_from_golden(judged: Report, fmt: OutputFormat) -> None:
    # The comparison above would pass vacuously if formatters ignored verdicts altogether.
    assert render(judged, fmt, RenderOptions()) != (GOLDEN_DIR / GOLDEN[fmt]).read_text(encoding="utf-8")


# --- table -------------------------------------------------------------------------------------


def test_table_verdict_columns(judged: Report) -> None:
    text = render(judged, OutputFormat.TABLE, RenderOptions(width=200))
    headings = [line.split() for line in text.splitlines() if line.lstrip().startswith("line ")]
    assert headings[0] == [
        "line", "kind", "condition", "admits", "else", "(sm_120)", "verdict", "sm_90", "verdict", "id"
    ]  # fmt: skip
    rows = _rows(text)
    assert re.search(
        r" excluded blocked: wgmma, setmaxnreg +excluded blocked: wgmma \(hazard\) +cu-", rows[96]
    )
    assert re.search(r" excluded liftable \(hazard\) +admitted +cu-", rows[417])
    assert re.search(r" admitted +unknown +unknown +py-", rows[142])
    # Without a terminal the hazard marker is a word: the verdicts add nothing outside ASCII.
    assert "⚠" not in text
    assert text[text.index("\nverdicts:") :].isascii()


def test_table_verdict_summary(judged: Report) -> None:
    text = render(judged, OutputFormat.TABLE, RenderOptions())
    block = text[text.index("\nverdicts:\n") :]
    assert block.splitlines()[2:5] == [
        f"  {FLASHINFER} 0.6.2 for sm_120: 1 liftable (1 with hazards), 1 blocked, 0 unknown",
        f"  {FLASHINFER} 0.6.2 for sm_90: 0 liftable, 1 blocked (1 with hazards), 0 unknown",
        f"  {SGLANG} 0.5.6 for sm_90: 0 liftable, 0 blocked, 1 unknown",
    ]
    # After the gates, before the notes.
    assert text.index(DEEPGEMM_GATE.id) < text.index("\nverdicts:\n") < text.index("note: CUDA gates")


def test_table_verdict_summary_even_when_no_gate_is_shown(judged: Report) -> None:
    # The DeepGEMM gate's verdict is unknown: none is listed, yet its kind's verdicts are counted.
    options = RenderOptions(
        kinds=frozenset({GateKind.PY_RUNTIME}), verdicts=frozenset({VerdictFilter.LIFTABLE})
    )
    text = render(judged, OutputFormat.TABLE, options)
    assert text.startswith(
        "no py-runtime gates exclude sm_120 or sm_90 in 2 packages (3,232 files) (--verdict liftable)"
    )
    assert f"  {SGLANG} 0.5.6 for sm_90: 0 liftable, 0 blocked, 1 unknown" in text


def test_table_verdict_summary_counts_only_the_kinds_chosen(judged: Report) -> None:
    text = render(judged, OutputFormat.TABLE, RenderOptions(kinds=frozenset({GateKind.CMAKE})))
    assert text.startswith("no cmake gates exclude sm_120 or sm_90")
    assert "verdicts:" not in text
    cuda = render(judged, OutputFormat.TABLE, RenderOptions(kinds=frozenset({GateKind.CUDA_PP})))
    assert f"{FLASHINFER} 0.6.2 for sm_120: 1 liftable (1 with hazards), 1 blocked, 0 unknown" in cuda
    assert f"{SGLANG} 0.5.6 for" not in cuda


def test_table_verdict_colours_and_hazard_sign(judged: Report) -> None:
    # Wide enough for every verdict on one line: the sign is narrower than the word, so it wraps later.
    plain = render(judged, OutputFormat.TABLE, RenderOptions(width=200))
    coloured = render(judged, OutputFormat.TABLE, RenderOptions(color=True, width=200))
    assert "\x1b[32mliftable" in coloured
    assert "\x1b[31mblocked: wgmma" in coloured
    assert re.search(r"\x1b\[33munknown(?:\x1b\[0m| )*\x1b\[33munknown", coloured)
    assert "⚠" in coloured and "(hazard)" not in coloured
    stripped = re.sub(r"\x1b\[[0-9;]*m", "", coloured)
    assert "liftable ⚠ " in stripped and "blocked: wgmma ⚠ " in stripped
    assert "liftable (hazard) " in plain and "blocked: wgmma (hazard) " in plain
    # Apart from the hazard marker (a sign in a terminal, a word elsewhere), colour changes no text.
    assert stripped[stripped.index("\nverdicts:") :] == plain[plain.index("\nverdicts:") :]


def test_table_verbose_shows_first_reason_and_hazards(judged: Report) -> None:
    plain = " ".join(render(judged, OutputFormat.TABLE, RenderOptions()).split())
    verbose = " ".join(render(judged, OutputFormat.TABLE, RenderOptions(verbose=True, width=200)).split())
    assert "verdict sm_120: everything the code uses exists on sm_120 (griddepcontrol)" in verbose
    assert f"hazard sm_120: {HAZARD}" in verbose
    assert f"hazard sm_90: {SMEM_HAZARD}" in verbose
    assert "verdict sm_90: every feature seen exists on sm_90" in verbose
    # Only the first reason, and only under --verbose.
    assert "verdict sm_120:" not in plain and "griddepcontrol.wait" not in plain
    # Under the gate's own evidence lines.
    assert verbose.index("evidence: CUTLASS") < verbose.index("verdict sm_120: sm_120 lacks wgmma")


@pytest.mark.parametrize("width", [110, 120, 160])
def test_table_with_verdicts_fits_width(judged: Report, width: int) -> None:
    text = render(judged, OutputFormat.TABLE, RenderOptions(width=width))
    assert max(len(line) for line in text.splitlines()) <= width
    for gate in (SM90A_GATE, ALLREDUCE_GATE, DEEPGEMM_GATE):
        assert gate.id in text
    # A list of missing features wraps; it is never cut.
    assert "…" not in "".join(re.findall(r"blocked:[^\n]*", text))
    assert "setmaxnreg" in text


# --- Markdown ----------------------------------------------------------------------------------


def test_markdown_verdict_columns(judged: Report) -> None:
    text = render(judged, OutputFormat.MARKDOWN, RenderOptions())
    header = (
        "| file:line | condition | admits | rtx5090 (sm_120) | sm_120 verdict | sm_90 | sm_90 verdict | id |"
    )
    assert text.count(header) == 2
    row = next(line for line in text.splitlines() if line.startswith(f"| `{CUTLASS_MMA}:96`"))
    cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]]
    assert cells[3:] == [
        "**excluded**",
        "**blocked**: `wgmma`, `setmaxnreg`",
        "**excluded**",
        "**blocked**: `wgmma` ⚠ hazard",
        f"`{SM90A_GATE.id}`",
    ]
    allreduce = next(line for line in text.splitlines() if line.startswith(f"| `{ALLREDUCE}:417`"))
    assert allreduce.endswith(f"| **excluded** | liftable ⚠ hazard | admitted |  | `{ALLREDUCE_GATE.id}` |")
    assert "| *unknown* | *unknown* |" in text


def test_markdown_verdict_counts_and_hazards(judged: Report) -> None:
    text = render(judged, OutputFormat.MARKDOWN, RenderOptions())
    table = [
        "| package | target | liftable | blocked | unknown |",
        "|---|---|---|---|---|",
        f"| {FLASHINFER} 0.6.2 | sm_120 | 1 (1 with hazards) | 1 | 0 |",
        f"| {FLASHINFER} 0.6.2 | sm_90 | 0 | 1 (1 with hazards) | 0 |",
        f"| {SGLANG} 0.5.6 | sm_90 | 0 | 0 | 1 |",
    ]
    assert "\n".join(table) in text
    # Under the summary line, before the first package.
    assert text.index("; verdicts: 1 liftable") < text.index(table[0]) < text.index(f"### {FLASHINFER}")
    assert "<summary>2 hazards of the gates listed</summary>" in text
    assert f"| `{ALLREDUCE}:417` | sm_120 | liftable | silent exclusion: on sm_120" in text
    assert text.index("hazards of the gates listed") < text.index("not analysed</summary>")


# --- SARIF -------------------------------------------------------------------------------------


def _sarif(report: Report) -> dict[str, Any]:
    log: dict[str, Any] = json.loads(render(report, OutputFormat.SARIF, RenderOptions()))
    return log


def test_sarif_with_verdicts_is_valid_and_lists_the_hazard_rule_once(judged: Report) -> None:
    log = _sarif(judged)
    check_sarif(log)
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == [f"liftgate/{kind.value}" for kind in GateKind] + [
        "liftgate/hazard",
        "liftgate/unsafe-admission",
    ]
    assert rules[-2]["defaultConfiguration"] == {"level": "warning"}
    assert "liftgate explain GATE_ID" in rules[-2]["help"]["text"]
    assert rules[-1]["defaultConfiguration"] == {"level": "error"}
    assert len(_sarif(sample_report())["runs"][0]["tool"]["driver"]["rules"]) == len(GateKind)


def test_sarif_results_carry_verdicts(judged: Report) -> None:
    results = _sarif(judged)["runs"][0]["results"]
    gate_results = {
        (r["properties"]["gateId"], r["properties"]["arch"]): r
        for r in results
        if r["ruleId"] != "liftgate/hazard"
    }
    blocked = gate_results[(SM90A_GATE.id, "sm_120")]
    assert blocked["properties"]["verdicts"] == [
        {"target": "sm_120", "verdict": "blocked", "missing": ["wgmma", "setmaxnreg"], "hazards": []}
    ]
    assert "Verdict for sm_120: blocked: wgmma, setmaxnreg." in blocked["message"]["text"]
    liftable = gate_results[(ALLREDUCE_GATE.id, "sm_120")]
    assert liftable["properties"]["verdicts"] == [
        {"target": "sm_120", "verdict": "liftable", "missing": [], "hazards": [HAZARD]}
    ]
    assert "Verdict for sm_120: liftable: everything the code uses" in liftable["message"]["text"]
    assert "1 hazard: see liftgate/hazard" in liftable["message"]["text"]
    unknown = gate_results[(DEEPGEMM_GATE.id, "sm_90")]
    assert unknown["properties"]["verdicts"][0]["verdict"] == "unknown"
    assert "deep_gemm.fp8_gemm_nt" in unknown["message"]["text"]
    assert unknown["level"] == "note"
    # Without verdicts the properties stay as they were.
    for result in _sarif(sample_report())["runs"][0]["results"]:
        assert "verdicts" not in result["properties"]
        assert "Verdict" not in result["message"]["text"]


def test_sarif_hazards_are_results_of_their_own(judged: Report) -> None:
    results = _sarif(judged)["runs"][0]["results"]
    hazards = [r for r in results if r["ruleId"] == "liftgate/hazard"]
    assert [(r["properties"]["gateId"], r["properties"]["arch"], r["level"]) for r in hazards] == [
        (SM90A_GATE.id, "sm_90", "warning"),
        (ALLREDUCE_GATE.id, "sm_120", "warning"),
    ]
    silent = hazards[1]
    assert silent["ruleIndex"] == len(GateKind)
    assert silent["properties"]["hazard"] == HAZARD
    assert silent["properties"]["verdict"] == "liftable"
    assert HAZARD in silent["message"]["text"] and "rtx5090 (sm_120)" in silent["message"]["text"]
    assert silent["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": ALLREDUCE, "uriBaseId": "PKGROOT"},
        "region": {"startLine": 417, "endLine": 417},
    }
    # Identity never depends on a line number, and differs from the gate's own result.
    assert silent["partialFingerprints"] == {
        "liftgateGateId/v1": ALLREDUCE_GATE.id,
        "liftgateTarget/v1": "sm_120",
        "liftgateHazard/v1": "silent exclusion#0",
    }
    # Each hazard result follows the result of its gate and target.
    index = results.index(silent)
    assert results[index - 1]["properties"]["gateId"] == ALLREDUCE_GATE.id
    assert results[index - 1]["ruleId"] == "liftgate/cuda-pp"


def test_sarif_check_catches_a_wrong_hazard_index(judged: Report) -> None:
    log = _sarif(judged)
    hazard = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "liftgate/hazard")
    hazard["ruleIndex"] = 0
    with pytest.raises(AssertionError):
        check_sarif(log)


def test_json_with_verdicts_still_validates(judged: Report) -> None:
    # JSON is not rendered here, but the fixture must be a report the schema accepts.
    document = json.loads(render(judged, OutputFormat.JSON, RenderOptions()))
    jsonschema.Draft202012Validator(load_schema()).validate(document)
    by_id = {gate["id"]: gate for gate in document["gates"]}
    assert [v["verdict"] for v in by_id[SM90A_GATE.id]["verdicts"]] == ["blocked", "blocked"]
    assert SM90.arch.name in document["summary"]["verdicts"]
