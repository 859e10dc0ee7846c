"""``liftgate explain`` and the judge options of ``liftgate scan`` on the synthetic judge package."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from liftgate.cli.main import main
from liftgate.scan import scan

FIXTURE = str(Path(__file__).parent / "fixtures" / "judge" / "minijudge")


@cache
def gate_id(path: str, line: int) -> str:
    report = scan([FIXTURE], ["sm_120"], use_cache=False)
    (gate,) = [g for g in report.gates if g.location.path == path and g.location.line == line]
    return gate.id


def test_explain_text_shows_region_features_verdict_hazard_and_lift(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gid = gate_id("include/minijudge/pdl.cuh", 5)
    assert main(["explain", gid[:8], FIXTURE, "--target", "sm_120", "--cache-dir", "/nonexistent-ok"]) in (0,)
    out = capsys.readouterr().out
    assert out.startswith(f"{gid}  cuda-pp  minijudge")
    assert "include/minijudge/pdl.cuh:5" in out
    assert "sm_120: LIFTABLE" in out
    assert "everything the code uses exists on sm_120 (griddepcontrol)" in out
    assert "! hazard: silent exclusion: on sm_120" in out
    assert '      6 |   asm volatile("griddepcontrol.wait;" ::: "memory");   <- griddepcontrol' in out
    assert "+ #if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)) || " in out
    assert "(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 1200)" in out


def test_explain_json_blocked_gate_names_missing_feature(capsys: pytest.CaptureFixture[str]) -> None:
    gid = gate_id("csrc/kernels.cu", 6)
    assert main(["explain", gid, FIXTURE, "-t", "sm_120a", "-t", "sm_100a", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gate"]["id"] == gid
    by_target = {t["target"]: t for t in doc["targets"]}
    blocked = by_target["sm_120a"]
    assert blocked["verdict"]["verdict"] == "blocked"
    assert [m["feature"] for m in blocked["verdict"]["missing"]] == ["tcgen05-ld-st"]
    assert blocked["features"] == [
        {
            "id": "tcgen05-ld-st",
            "description": blocked["features"][0]["description"],
            "on_target": False,
            "ptx_section": blocked["features"][0]["ptx_section"],
        }
    ]
    assert [line["line"] for line in blocked["region"]] == [7, 8, 9]
    assert blocked["lift_preview"]["after"].endswith("defined(__CUDA_ARCH_FEAT_SM120_ALL))")
    assert by_target["sm_100a"]["status"] == "admitted" and by_target["sm_100a"]["verdict"] is None


def test_explain_marks_lines_a_nested_gate_keeps_out(capsys: pytest.CaptureFixture[str]) -> None:
    gid = gate_id("csrc/kernels.cu", 20)
    assert main(["explain", gid, FIXTURE, "-t", "sm_120", "-f", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["targets"]
    compiled = {line["line"]: line["compiled"] for line in entry["region"]}
    assert compiled[21] and not compiled[23] and not compiled[24] and compiled[26]
    assert {line["line"]: line["features"] for line in entry["region"]}[21] == []  # the call, not the asm


@pytest.mark.parametrize(
    ("gate", "message"),
    [("cu-0000000000", "no gate 'cu-0000000000'"), ("cu", "too short"), ("shared-prefix", "ambiguous")],
)
def test_explain_errors_name_the_problem(gate: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    if gate == "shared-prefix":  # the shortest allowed prefix that two gate ids share
        ids = [g.id for g in scan([FIXTURE], ["sm_120"], use_cache=False).gates]
        gate = next(i[:4] for i in ids if sum(j.startswith(i[:4]) for j in ids) > 1)
    assert main(["explain", gate, FIXTURE, "-t", "sm_120"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "fail_on", "kinds", "code"),
    [
        ("sm_120", "hazard", [], 1),  # the PDL gate and the shared-memory dispatch
        ("sm_120", "hazard", ["--kind", "cmake"], 0),  # none listed
        ("sm_120", "blocked", [], 1),
        ("sm_120", "blocked", ["--kind", "cpp-runtime"], 0),
        ("sm_120", "liftable", ["--kind", "cpp-runtime"], 1),
        ("sm_100a", "blocked", [], 1),  # the wgmma region
        ("sm_90a", "liftable", ["--kind", "cpp-runtime"], 0),  # admitted: no verdict
    ],
)
def test_scan_fail_on_verdicts(target: str, fail_on: str, kinds: list[str], code: int) -> None:
    assert (
        main(["scan", FIXTURE, "-t", target, "--fail-on", fail_on, "-q", "-f", "json", "--no-cache", *kinds])
        == code
    )


def test_scan_no_judge_has_no_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", FIXTURE, "-t", "sm_120", "-q", "-f", "json", "--no-judge", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all("verdicts" not in g for g in doc["gates"])
    assert main(["scan", FIXTURE, "-t", "sm_120", "-q", "-f", "json", "--no-cache"]) == 0
    judged = json.loads(capsys.readouterr().out)
    assert any(g.get("verdicts") for g in judged["gates"])
