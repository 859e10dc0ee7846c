"""``--compile-check``: the gated unit compiled with the gate lifted, with the real nvcc and ptxas.

A small package is written per test: PDL under a gate that stops at sm_120 (compiles once lifted
for sm_120, and the PTX holds griddepcontrol), wgmma behind an sm_90a test (ptxas refuses it
for plain sm_90 and sm_120a, exactly as the judge says), tcgen05 behind an sm_100a test, a unit
that needs a header from outside the package, and a unit that fails whatever the gate does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from liftgate.arch.parse import parse_target
from liftgate.cli.main import main
from liftgate.judge.compile_check import CheckStatus, compile_check, find_nvcc
from liftgate.model import Gate, VerdictKind
from liftgate.scan import scan

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed"),
]

PDL_H = """\
#pragma once
__device__ __forceinline__ void wait_on_producer() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
"""
PDL_CU = """\
#include "cc/pdl.cuh"
__global__ void consumer(float* out) {
  wait_on_producer();
  out[threadIdx.x] += 1.0f;
}
"""
WGMMA_CU = """\
__global__ void gemm(float* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
  out[0] = 1.0f;
}
"""
TMEM_CU = """\
#include <cstdint>
__global__ void epilogue(float* out, uint32_t taddr) {
#if defined(__CUDA_ARCH_FEAT_SM100_ALL)
  uint32_t v;
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%1];" : "=r"(v) : "r"(taddr));
  out[threadIdx.x] = static_cast<float>(v);
#endif
}
"""
OUTSIDE_CU = """\
#include <tvm/ffi/function.h>
__global__ void k(float* out) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 1000)
  out[0] = 2.0f;
#endif
}
"""
BROKEN_CU = """\
__global__ void k(float* out) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 1000)
  out[0] = 2.0f;
#endif
  out[1] = not_declared_anywhere(out);
}
"""


@pytest.fixture(scope="module")
def package(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, str], dict[tuple[str, int], Gate]]:
    root = tmp_path_factory.mktemp("cc")
    files = {
        "include/cc/pdl.cuh": PDL_H,
        "csrc/pdl.cu": PDL_CU,
        "csrc/wgmma.cu": WGMMA_CU,
        "csrc/tmem.cu": TMEM_CU,
        "csrc/outside.cu": OUTSIDE_CU,
        "csrc/broken.cu": BROKEN_CU,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    report = scan([str(root)], ["sm_120"], use_cache=False)
    assert report.workspace is not None
    (package_files,) = report.workspace.as_mapping().values()
    gates = {(g.location.path, g.location.line): g for g in report.gates}
    return root, dict(package_files), gates


def check(
    package: tuple[Path, dict[str, str], dict[tuple[str, int], Gate]], where: tuple[str, int], arch: str
):  # type: ignore[no-untyped-def]
    _root, files, gates = package
    return compile_check(gates[where], parse_target(arch), files)


def test_pdl_header_gate_compiles_for_sm120_once_lifted_and_the_ptx_holds_griddepcontrol(package) -> None:  # type: ignore[no-untyped-def]
    result = check(package, ("include/cc/pdl.cuh", 3), "sm_120")
    assert result.status is CheckStatus.COMPILES, result
    assert result.translation_unit == "csrc/pdl.cu"
    assert "csrc/pdl.cu is the smallest translation unit of the package that includes include/cc/pdl.cuh" in (
        result.notes
    )
    assert "the PTX holds griddepcontrol" in result.notes
    assert "ptxas -arch=sm_120" in result.command


def test_wgmma_gate_fails_for_plain_sm90_and_sm120a_and_builds_for_sm90a(package) -> None:  # type: ignore[no-untyped-def]
    for arch in ("sm_90", "sm_120a"):
        result = check(package, ("csrc/wgmma.cu", 2), arch)
        assert result.status is CheckStatus.FAILS, (arch, result)
        assert any("wgmma.fence" in d and "not supported on .target" in d for d in result.diagnostics), result
        assert "the same unit builds for the target without the lift" in result.notes
    admitted = check(package, ("csrc/wgmma.cu", 2), "sm_90a")
    assert admitted.status is CheckStatus.COMPILES
    assert "the gate already admits sm_90a: compiled as shipped" in admitted.notes
    assert "the PTX holds wgmma" in admitted.notes


def test_tcgen05_gate_fails_for_sm120a_naming_tcgen05(package) -> None:  # type: ignore[no-untyped-def]
    result = check(package, ("csrc/tmem.cu", 3), "sm_120a")
    assert result.status is CheckStatus.FAILS
    assert any("tcgen05.ld" in d for d in result.diagnostics), result.diagnostics
    assert check(package, ("csrc/tmem.cu", 3), "sm_100a").status is CheckStatus.COMPILES


def test_header_from_outside_the_package_is_not_checked_and_named(package, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = check(package, ("csrc/outside.cu", 3), "sm_120")
    assert result.status is CheckStatus.NOT_CHECKED
    assert "tvm/ffi/function.h" in result.reason and "--include-dir" in result.reason
    # Given the directory, it builds.
    (tmp_path / "tvm" / "ffi").mkdir(parents=True)
    (tmp_path / "tvm" / "ffi" / "function.h").write_text("#pragma once\n")
    _root, files, gates = package
    supplied = compile_check(
        gates[("csrc/outside.cu", 3)], parse_target("sm_120"), files, include_dirs=[str(tmp_path)]
    )
    assert supplied.status is CheckStatus.COMPILES, supplied


def test_a_unit_broken_without_the_lift_says_the_failure_is_not_the_gates(package) -> None:  # type: ignore[no-untyped-def]
    result = check(package, ("csrc/broken.cu", 2), "sm_120")
    assert result.status is CheckStatus.NOT_CHECKED
    assert "does not build for sm_120 without the lift either" in result.reason
    assert any("not_declared_anywhere" in d for d in result.diagnostics)


def test_runtime_gate_and_missing_nvcc_are_not_checked(package) -> None:  # type: ignore[no-untyped-def]
    _root, files, gates = package
    gate = gates[("include/cc/pdl.cuh", 3)]
    missing = compile_check(gate, parse_target("sm_120"), files, nvcc="/nonexistent/bin/nvcc")
    assert missing.status is CheckStatus.NOT_CHECKED
    assert "cannot run" in missing.reason


def test_explain_compile_check_json_agrees_with_the_verdict(
    package, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    root, _files, gates = package
    gid = gates[("csrc/wgmma.cu", 2)].id
    code = main(
        ["explain", gid, str(root), "-t", "sm_90", "-t", "sm_90a", "--compile-check", "--format", "json"]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    plain, arch_specific = doc["targets"]
    assert plain["verdict"]["verdict"] == VerdictKind.BLOCKED.value
    assert plain["compile_check"]["status"] == "fails"
    assert arch_specific["status"] == "admitted"
    assert arch_specific["compile_check"]["status"] == "compiles"


def test_a_driver_unit_instantiates_header_only_code(tmp_path: Path) -> None:
    """Header-only code no unit of the package calls: a driver given with ``unit=`` is compiled."""
    root = tmp_path / "hdr"
    (root / "include" / "hdr").mkdir(parents=True)
    (root / "include" / "hdr" / "ops.cuh").write_text(
        "#pragma once\n"
        "inline __device__ void mul2(float2& c, float2 const& a, float2 const& b) {\n"
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000\n"
        '  asm volatile("mul.f32x2 %0, %1, %2;" : "=l"(reinterpret_cast<unsigned long long&>(c))\n'
        '               : "l"(reinterpret_cast<unsigned long long const&>(a)), "l"(reinterpret_cast<unsigned long long const&>(b)));\n'
        "#else\n  c.x = a.x * b.x; c.y = a.y * b.y;\n#endif\n}\n"
    )
    driver = tmp_path / "driver.cu"
    driver.write_text("#include <hdr/ops.cuh>\n__global__ void k(float2* o) { mul2(o[0], o[1], o[2]); }\n")
    report = scan([str(root)], ["sm_90"], use_cache=False)
    assert report.workspace is not None
    (files,) = report.workspace.as_mapping().values()
    (gate,) = report.gates
    alone = compile_check(gate, parse_target("sm_90"), files, expect=["f32x2"])
    assert alone.status is CheckStatus.NOT_EMITTED  # the header on its own instantiates nothing
    result = compile_check(gate, parse_target("sm_90"), files, expect=["f32x2"], unit=str(driver))
    assert result.status is CheckStatus.FAILS
    assert any("mul.f32x2" in d and "requires .target sm_100" in d for d in result.diagnostics), result
    assert (
        compile_check(gate, parse_target("sm_100a"), files, unit=str(driver)).status is CheckStatus.COMPILES
    )
