"""Acceptance checks on real FlashInfer releases from the package index (cached between runs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from liftgate.arch.core import Arch
from liftgate.model import Confidence, ElseKind, GateKind, Report, Status
from liftgate.scanner import scan

pytestmark = pytest.mark.network

TRTLLM = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"
TRTLLM_LINES = [417, 455, 485, 533, 711, 895, 950, 991, 1053, 1207, 1265, 1335, 1444]
TRTLLM_062 = "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
SM = {
    name: Arch(*spec)
    for name, spec in {
        "sm_90": (9, 0, ""),
        "sm_90a": (9, 0, "a"),
        "sm_100a": (10, 0, "a"),
        "sm_110": (11, 0, ""),
        "sm_120": (12, 0, ""),
        "sm_120a": (12, 0, "a"),
        "sm_80": (8, 0, ""),
    }.items()
}


@pytest.fixture(scope="module")
def report_062() -> Report:
    return scan(["flashinfer-python==0.6.2"], ["sm_120", "sm_90"])


def test_062_trtllm_allreduce_gates_exclude_sm120(report_062: Report) -> None:
    gates = [g for g in report_062.gates if g.location.path == TRTLLM and g.condition == TRTLLM_062]
    assert [g.location.line for g in gates] == TRTLLM_LINES
    for gate in gates:
        assert gate.directive == "#if"
        assert gate.else_kind is ElseKind.NONE
        for name in ("sm_120", "sm_120a"):
            assert gate.status(SM[name]) is Status.EXCLUDED, (gate.location.line, name)
        for name in ("sm_90", "sm_90a", "sm_100a", "sm_110"):
            assert gate.status(SM[name]) is Status.ADMITTED, (gate.location.line, name)
        assert gate.status(SM["sm_80"]) is Status.EXCLUDED
        assert gate.admitted.render() == "sm_90–sm_110 (all variants); not sm_120+"
    excluded_120 = {g.id for g in report_062.excluding(SM["sm_120"])}
    excluded_90 = {g.id for g in report_062.excluding(SM["sm_90"])}
    assert {g.id for g in gates} <= excluded_120
    assert not {g.id for g in gates} & excluded_90
    assert len({g.id for g in gates}) == 13  # ids are distinct although the condition repeats


def test_062_cutlass_derived_macro_through_angle_include(report_062: Report) -> None:
    path = "flashinfer/data/cutlass/include/cute/arch/config.hpp"
    gates = [
        g
        for g in report_062.gates
        if g.location.path == path and g.condition == "defined(CUTLASS_ARCH_MMA_SM90A_ENABLED)"
    ]
    assert gates, "the CUTLASS_ARCH_MMA_SM90A_ENABLED gate in cute/arch/config.hpp was not found"
    gate = gates[0]
    assert gate.admitted.names() == ["sm_90a"]
    assert not gate.unknown
    evidence = " ".join(e.render() for e in gate.evidence)
    assert "CUTLASS_ARCH_MMA_SM90A_ENABLED" in evidence
    assert "cutlass/include/cutlass/arch/config.h" in evidence
    assert "__CUDA_ARCH_FEAT_SM90_ALL" in evidence


def test_062_jit_comm_module_build_filter_excludes_sm120(report_062: Report) -> None:
    gates = [
        g
        for g in report_062.gates
        if g.location.path == "flashinfer/jit/comm.py"
        and g.kind is GateKind.PY_BUILD
        and g.location.line == 61
    ]
    assert len(gates) == 1, [
        (g.location.line, g.condition) for g in report_062.gates if "jit/comm.py" in g.location.path
    ]
    gate = gates[0]
    assert "supported_major_versions=[9, 10]" in gate.condition
    assert gate.else_kind is ElseKind.ERROR
    assert gate.status(SM["sm_120"]) is Status.EXCLUDED
    assert gate.status(SM["sm_90"]) is Status.ADMITTED and gate.status(SM["sm_100a"]) is Status.ADMITTED
    evidence = " ".join(e.render() for e in gate.evidence)
    for source in ("trtllm_allreduce.cu", "trtllm_allreduce_fusion.cu", "trtllm_moe_allreduce_fusion.cu"):
        assert source in evidence
    assert "trtllm_comm" in evidence


SGLANG_FUSION = "sglang/srt/layers/flashinfer_comm_fusion.py"


@pytest.fixture(scope="module")
def report_sglang() -> Report:
    return scan(["sglang==0.5.23"], ["sm_120", "sm_90"])


def test_sglang_allreduce_fusion_backend_guard(report_sglang: Report) -> None:
    gates = [g for g in report_sglang.gates if g.location.path == SGLANG_FUSION and g.location.line == 48]
    assert len(gates) == 1
    gate = gates[0]
    assert gate.kind is GateKind.PY_RUNTIME
    assert gate.condition == "not (get_platform().is_sm90 or get_platform().is_sm100)"
    assert gate.confidence is Confidence.EXACT
    assert gate.else_kind is ElseKind.ERROR  # `if not ARCH: raise` admits ARCH
    assert {(a.major, a.minor) for a in gate.admitted} == {(9, 0), (10, 0), (10, 3)}
    assert gate.status(SM["sm_120"]) is Status.EXCLUDED
    assert gate.status(SM["sm_90"]) is Status.ADMITTED
    chain = " → ".join(e.render() for e in gate.evidence)
    for step in (
        "PlatformContext.__getattr__",
        "_PLATFORM_PROBES['is_sm100'] → 'is_sm100_supported'",
        "partial( _check_cuda_device_version, device_capability_majors=[10]",
        "sglang/srt/utils/common.py:309",
        "get_device_sm() // 10 in device_capability_majors",
        "torch.cuda.get_device_capability()",
    ):
        assert step in chain, step
    assert any("torch.version.cuda" in d for d in gate.depends_on)


def test_sglang_python_gates_need_no_import(report_sglang: Report) -> None:
    kinds = {g.kind for g in report_sglang.gates}
    assert {GateKind.PY_RUNTIME, GateKind.CUDA_PP} <= kinds
    inferred = [g for g in report_sglang.gates if g.confidence is Confidence.INFERRED]
    assert all(g.kind is not GateKind.CUDA_PP for g in inferred)
    assert "torch" not in sys.modules  # static analysis only


def test_072_upstream_dropped_the_sm120_bound() -> None:
    report = scan(["flashinfer-python==0.7.2.post1"], ["sm_120"])
    gates = [g for g in report.gates if g.location.path == TRTLLM and "__CUDA_ARCH__ >= 900" in g.condition]
    assert len(gates) == 13
    for gate in gates:
        assert "1200" not in gate.condition
        assert gate.status(SM["sm_120"]) is Status.ADMITTED
        assert gate.status(SM["sm_120a"]) is Status.ADMITTED
        assert gate.status(SM["sm_80"]) is Status.EXCLUDED


def test_cli_main_command_json_and_exit_codes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "liftgate",
        "scan",
        "flashinfer-python==0.6.2",
        "--target",
        "sm_120",
        "--format",
        "json",
        "-o",
        str(out),
        "--fail-on",
        "excluded",
        "--quiet",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(out.read_text())
    from jsonschema import validate

    from liftgate.report.json_format import load_schema

    validate(data, load_schema())
    lines = sorted(g["line"] for g in data["gates"] if g["path"] == TRTLLM and g["condition"] == TRTLLM_062)
    assert lines == TRTLLM_LINES
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "liftgate",
            "scan",
            "flashinfer-python==0.6.2",
            "--target",
            "sm_90",
            "--kind",
            "cuda-pp",
            "--quiet",
            "--fail-on",
            "excluded",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    data = json.loads(proc.stdout)
    assert not [g for g in data["gates"] if g["path"] == TRTLLM and g["condition"] == TRTLLM_062]
