"""Acceptance checks on real FlashInfer releases from the package index (cached between runs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from liftgate.arch.core import Arch, ArchSet
from liftgate.judge.verdict import judge_scan
from liftgate.model import Confidence, ElseKind, GateKind, Report, Status, VerdictKind
from liftgate.scan import scan

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


def test_062_host_side_capability_check_in_a_jit_source(report_062: Report) -> None:
    """FlashInfer's MoE launcher (compiled by its JIT) refuses anything but 10.x on the host."""
    path = "flashinfer/data/csrc/trtllm_fused_moe_kernel_launcher.cu"
    gates = [
        g
        for g in report_062.gates
        if g.location.path == path and g.kind is GateKind.CPP_RUNTIME and g.directive == "TVM_FFI_ICHECK_EQ"
    ]
    assert gates, [g.condition for g in report_062.gates if g.location.path == path]
    gate = gates[0]
    assert gate.condition == "major == 10"
    assert {(a.major, a.minor) for a in gate.admitted} == {(10, 0), (10, 3)}
    assert gate.else_kind is ElseKind.ERROR
    assert gate.status(SM["sm_120"]) is Status.EXCLUDED
    texts = [e.text for e in gate.evidence]
    assert "cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor)" in texts
    assert any("MoE kernel requires 10.x architecture. Current device has SM" in t for t in texts)


VLLM_SCALED_MM = "csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu"


@pytest.fixture(scope="module")
def report_vllm_sdist() -> Report:
    return scan(["vllm==0.33.0"], ["sm_120", "sm_100a"], sdist=True)


def _caps(gate_admitted: object) -> set[tuple[int, int]]:
    return {(a.major, a.minor) for a in gate_admitted}  # type: ignore[attr-defined]


def test_vllm_scaled_mm_host_dispatch(report_vllm_sdist: Report) -> None:
    """vLLM 0.33.0 cutlass_scaled_mm: the host dispatch on get_sm_version_num(), lines 245–283."""
    gates = {
        g.location.line: g
        for g in report_vllm_sdist.gates
        if g.location.path == VLLM_SCALED_MM
        and g.kind is GateKind.CPP_RUNTIME
        and 245 <= g.location.line <= 283
    }
    later = {cc for cc in _caps(ArchSet.all()) if cc >= (10, 0)}
    expected = {
        245: ("version_num >= 120", {(12, 0), (12, 1)}, ElseKind.FALLBACK),
        253: ("version_num >= 100 && version_num < 120", {(10, 0), (10, 3), (11, 0)}, ElseKind.FALLBACK),
        262: ("version_num >= 90 && version_num < 100", {(9, 0)}, ElseKind.FALLBACK),
        271: ("version_num == 89", {(8, 9)}, ElseKind.FALLBACK),
        277: (
            "version_num >= 80",
            {(8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0)} | later,
            ElseKind.FALLBACK,
        ),
        283: (
            "version_num >= 75",
            {(7, 5), (8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0)} | later,
            ElseKind.ERROR,
        ),
    }
    assert sorted(gates) == sorted(expected)
    for line, (condition, caps, else_kind) in expected.items():
        gate = gates[line]
        assert (gate.condition, _caps(gate.admitted), gate.else_kind) == (condition, caps, else_kind), line
        assert gate.confidence is Confidence.EXACT
        chain = " → ".join(e.render() for e in gate.evidence)
        assert (
            "version_num = get_sm_version_num() at csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu:242"
            in chain
        )
        assert "get_sm_version_num() returns version_num at csrc/cutlass_extensions/common.hpp:28" in chain
        assert (
            "cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor) at csrc/cutlass_extensions/common.hpp"
            in chain
        )
        # The message users search for, on every arm (the last one fails right after).
        assert any(
            "No compiled cutlass_scaled_mm for a compute capability less than CUDA device capability: "
            "<version_num>"
            in e.text
            and e.line == 290
            for e in gate.evidence
        ), line
    assert gates[253].status(SM["sm_120"]) is Status.EXCLUDED
    assert gates[253].status(SM["sm_100a"]) is Status.ADMITTED
    assert gates[245].status(SM["sm_120"]) is Status.ADMITTED
    # Both conditions: the #if on the build flag, and the CMake gate that passes the flag.
    sm100 = gates[253]
    assert any("ENABLE_SCALED_MM_SM100" in d and "#if" in d for d in sm100.depends_on)
    cmake_ids = {g.id: g for g in report_vllm_sdist.gates if g.kind is GateKind.CMAKE}
    linked = [cmake_ids[i] for i in sm100.enclosing if i in cmake_ids]
    assert linked and all("SCALED_MM_ARCHS" in g.condition for g in linked)
    assert any("-DENABLE_SCALED_MM_SM100" in e.text and e.path == "CMakeLists.txt" for e in sm100.evidence)


NVFP4_ENTRY = "csrc/quantization/fp4/nvfp4_scaled_mm_entry.cu"


def test_vllm_nvfp4_chain_from_python_through_the_torch_op_to_the_build_flags(
    report_vllm_sdist: Report,
) -> None:
    """vLLM 0.33.0 (issue 18): nvfp4_utils.py:58 passes the capability to
    torch.ops._C.cutlass_scaled_mm_supports_fp4, whose C++ branches (lines 79, 83) sit under
    -DENABLE_NVFP4_SM100/SM120, flags CMakeLists.txt passes only inside arch gates."""
    at = {(g.location.path, g.location.line, g.kind): g for g in report_vllm_sdist.gates}
    sm100, sm120 = {(10, 0), (10, 3), (11, 0)}, {(12, 0), (12, 1)}
    # The build-flag #ifs are cuda-pp gates with the CMake gate's admitted set, naming it.
    for line, caps in ((23, sm100), (32, sm120), (52, sm100), (59, sm120), (78, sm100), (82, sm120)):
        gate = at[(NVFP4_ENTRY, line, GateKind.CUDA_PP)]
        assert _caps(gate.admitted) == caps, line
        (origin,) = gate.macros
        assert origin.path == "CMakeLists.txt" and origin.build_gate is not None
        assert at[
            ("CMakeLists.txt", report_vllm_sdist_line(report_vllm_sdist, origin.build_gate), GateKind.CMAKE)
        ]
    # The parameter's branches are parametric gates, decided by the Python that passes it.
    caller = at[("vllm/_custom_ops.py", 750, GateKind.PY_RUNTIME)]
    for line, caps in ((79, sm100), (83, sm120)):
        branch = at[(NVFP4_ENTRY, line, GateKind.CPP_RUNTIME)]
        assert _caps(branch.admitted) == caps, line
        assert caller.id in branch.decided_at
        said = [e.render() for e in branch.evidence]
        assert any("cutlass_scaled_mm_supports_fp4 is parametric" in t for t in said)
        assert any(t.endswith("at csrc/torch_bindings.cpp:982") for t in said)
    # The Python caller reads the C++ result: true exactly where a build for the GPU has the kernel.
    python = at[("vllm/model_executor/layers/quantization/utils/nvfp4_utils.py", 58, GateKind.PY_RUNTIME)]
    assert _caps(python.admitted) == sm100 | sm120 and not python.unknown
    assert python.status(SM["sm_120"]) is Status.ADMITTED and python.status(SM["sm_90"]) is Status.EXCLUDED
    # A single-arch sm_120 build: the SM120 dispatch (line 60) runs, the SM100 one (53) is not there.
    assert at[(NVFP4_ENTRY, 60, GateKind.CPP_RUNTIME)].status(SM["sm_120"]) is Status.ADMITTED
    assert at[(NVFP4_ENTRY, 53, GateKind.CPP_RUNTIME)].status(SM["sm_120"]) is Status.EXCLUDED


def report_vllm_sdist_line(report: Report, gate_id: str) -> int:
    return next(g.location.line for g in report.gates if g.id == gate_id)


def test_vllm_mxfp4_experts_quant_reaches_python_through_its_op(report_vllm_sdist: Report) -> None:
    """cutlass_moe.py:1037 asks ops.mxfp4_experts_quant_supported(capability.to_int()): the C++
    (mxfp4_experts_quant.cu:383) admits 10.x–11.0 only, so sm_120 is turned away there."""
    (gate,) = [
        g
        for g in report_vllm_sdist.gates
        if g.location.path == "vllm/model_executor/layers/fused_moe/experts/cutlass_moe.py"
        and g.location.line == 1037
    ]
    assert _caps(gate.admitted) == {(10, 0), (10, 3), (11, 0)}
    assert gate.status(SM["sm_120"]) is Status.EXCLUDED
    assert any("torch op mxfp4_experts_quant_supported runs the C++" in e.text for e in gate.evidence)


def test_vllm_required_capability_message_is_evidence(report_vllm_sdist: Report) -> None:
    gate = next(
        g
        for g in report_vllm_sdist.gates
        if g.location.path == VLLM_SCALED_MM and g.kind is GateKind.CPP_RUNTIME and g.location.line == 318
    )
    assert gate.condition == "version_num >= 90 && version_num < 100"
    assert gate.else_kind is ElseKind.ERROR
    message = "No compiled cutlass_scaled_mm for CUDA device capability: <version_num>. Required capability: 90 or 100"
    assert any(message in e.text for e in gate.evidence)


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


# --- judge (issue: Judge) ------------------------------------------------------------------

COPY_SM100 = "flashinfer/data/cutlass/include/cute/arch/copy_sm100.hpp"
GMMA = "flashinfer/data/cutlass/include/cute/arch/mma_sm90_gmma.hpp"
JUDGED = (TRTLLM, COPY_SM100, GMMA, "flashinfer/jit/comm.py")


@pytest.fixture(scope="module")
def judged_062() -> Report:
    return judge_scan(
        scan(["flashinfer-python==0.6.2"], ["sm_120", "sm_120a", "sm_90", "sm_90a"]),
        only=lambda g: g.location.path in JUDGED,
    )


def test_062_allreduce_gates_liftable_with_silent_exclusion_hazard(judged_062: Report) -> None:
    index = judged_062.verdict_index()
    gates = [g for g in judged_062.gates if g.location.path == TRTLLM and g.condition == TRTLLM_062]
    assert len(gates) == 13
    for gate in gates:
        v = index[(gate.id, SM["sm_120"])]
        assert v.kind is VerdictKind.LIFTABLE, (gate.location.line, v.reasons)
        assert "griddepcontrol" in {u.feature for u in v.uses}
        assert not v.missing
        assert len(v.hazards) == 1 and v.hazards[0].text.startswith("silent exclusion: on sm_120"), v.hazards
        assert (gate.id, SM["sm_90"]) not in index  # admitted: nothing to judge


def test_062_tcgen05_tmem_gates_blocked_for_sm120a(judged_062: Report) -> None:
    index = judged_062.verdict_index()
    gates = [
        g
        for g in judged_062.gates
        if g.location.path == COPY_SM100 and "CUTE_ARCH_TCGEN05_TMEM_ENABLED" in g.condition
    ]
    assert len(gates) > 100
    for gate in gates:
        v = index[(gate.id, SM["sm_120a"])]
        assert v.kind is VerdictKind.BLOCKED, (gate.location.line, v.reasons)
        assert v.missing and all(u.feature.startswith("tcgen05-") for u in v.missing)
        assert v.reasons[0].startswith("sm_120a lacks tcgen05-")


def test_062_wgmma_regions_blocked_for_sm120a_and_plain_sm90_admitted_for_sm90a(judged_062: Report) -> None:
    index = judged_062.verdict_index()
    gates = [g for g in judged_062.gates if g.location.path == GMMA]
    wgmma = [g for g in gates if "CUTE_ARCH_MMA_SM90A_ENABLED" in g.condition]
    assert len(wgmma) > 300
    for gate in wgmma:
        for target in ("sm_120a", "sm_90"):
            v = index[(gate.id, SM[target])]
            assert v.kind is VerdictKind.BLOCKED and {u.feature for u in v.missing} == {"wgmma"}, (
                gate.location.line,
                target,
            )
        assert gate.status(SM["sm_90a"]) is Status.ADMITTED and (gate.id, SM["sm_90a"]) not in index
    # The gate that defines CUTE_ARCH_MMA_SM90A_ENABLED guards no wgmma itself, but lifting it turns
    # every region above on: it is judged through the macro.
    (define,) = [g for g in gates if g.location.line == 38]
    v = index[(define.id, SM["sm_90"])]
    assert v.kind is VerdictKind.BLOCKED
    assert "it defines CUTE_ARCH_MMA_SM90A_ENABLED" in v.scope
    assert any("--target sm_90a" in reason for reason in v.reasons)


def test_062_comm_jit_filter_liftable_for_sm120a_but_header_gates_remain(judged_062: Report) -> None:
    """The real case: the JIT filter alone is not enough; the trtllm_allreduce.cuh gates exclude sm_120a too."""
    index = judged_062.verdict_index()
    (gate,) = [
        g for g in judged_062.gates if g.location.path == "flashinfer/jit/comm.py" and g.location.line == 61
    ]
    plain = index[(gate.id, SM["sm_120"])]
    assert plain.kind is VerdictKind.BLOCKED and {u.feature for u in plain.missing} == {"cvt-fp4"}
    assert any("judge with --target sm_120a" in r for r in plain.reasons)
    arch_specific = index[(gate.id, SM["sm_120a"])]
    assert arch_specific.kind is VerdictKind.LIFTABLE, arch_specific.reasons
    note = next(r for r in arch_specific.reasons if "still exclude sm_120a" in r)
    trtllm_ids = [g.id for g in judged_062.gates if g.location.path == TRTLLM and g.condition == TRTLLM_062]
    assert trtllm_ids[0] in note
    # ...and building with only the filter lifted compiles the PDL waits out: the hazard says so.
    assert any(
        h.text.startswith("silent exclusion inside the sources")
        and TRTLLM in h.text
        and any(i in h.text for i in trtllm_ids)
        for h in arch_specific.hazards
    ), arch_specific.hazards


def test_diff_062_to_072_opens_the_13_trtllm_allreduce_gates_for_sm120() -> None:
    from liftgate.diff import diff

    sm120 = SM["sm_120"]
    before = scan(["flashinfer-python==0.6.2"], [sm120])
    after = scan(["flashinfer-python==0.7.2.post1"], [sm120])
    opened = [
        c for c in diff(before, after, [sm120]) if c.change == "opened" and c.gate.location.path == TRTLLM
    ]
    assert sorted(c.before.location.line for c in opened if c.before) == TRTLLM_LINES
    assert all(
        c.after is not None and c.after.condition == "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))"
        for c in opened
    )
