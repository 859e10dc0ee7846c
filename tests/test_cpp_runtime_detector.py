"""The cpp-runtime detector: C/C++/CUDA host code that dispatches on the running device's capability.

``tests/fixtures/cpp_runtime/minilib`` is laid out like an extension that borrows from vLLM
(``get_sm_version_num()`` in ``cutlass_extensions/common.hpp``, the ``cutlass_scaled_mm`` dispatch
inside ``#if defined ENABLE_SCALED_MM_SM100 && ENABLE_SCALED_MM_SM100`` with a CMake build that
passes the flags), FlashInfer (``GetCudaComputeCapability()``, ``TVM_FFI_ICHECK_EQ``) and
TensorRT-LLM (``tensorrt_llm::common::getSMVersion()``, a runner whose constructor stores ``sm_``).
``tests/fixtures/cpp_runtime/consumer`` is a plugin whose ``getSMVersion()`` lives in headers
that are not scanned. Every line where a cpp-runtime gate must start carries
``// gate: admits <capabilities>; else <kind>[; inferred]``, every near miss ``// not a gate: why``;
`test_markers` holds both trees to those marks, both ways. The other tests check what a gate says
(evidence, messages, build-flag links, dependencies, ids) and that odd sources never raise.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import liftgate
from liftgate.arch.core import ArchSet
from liftgate.arch.parse import parse_arch
from liftgate.detect.cpp_runtime import HelperIndex, detect_cpp_runtime
from liftgate.detect.runtime_arch import archs_for_capabilities, capabilities
from liftgate.model import Confidence, ElseKind, Gate, GateKind, Report, Skip, Status

FIXTURES = Path(__file__).parent / "fixtures" / "cpp_runtime"
MINILIB = FIXTURES / "minilib"
CONSUMER = FIXTURES / "consumer"
TREES = {"minilib": MINILIB, "consumer": CONSUMER}
C_FAMILY = (".c", ".cc", ".cpp", ".cxx", ".cu", ".h", ".hh", ".hpp", ".cuh", ".inl")

SCALED_MM = "csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu"
COMMON = "csrc/cutlass_extensions/common.hpp"
RUNNER = "csrc/trtllm/moeGemmRunner.cu"
CUDA_UTILS = "csrc/trtllm/cudaUtils.h"


def caps(*wanted: tuple[int, int]) -> ArchSet:
    return archs_for_capabilities(wanted)


def caps_from(floor: tuple[int, int]) -> ArchSet:
    return archs_for_capabilities(cc for cc in capabilities() if cc >= floor)


def evidence_text(gate: Gate) -> str:
    return "\n".join(step.render() for step in gate.evidence)


def line_of(tree: Path, path: str, needle: str, after: str | None = None) -> int:
    """The line of ``path`` holding ``needle`` (exactly one, or the first below the line holding
    ``after``), so tests survive fixture edits."""
    lines = (tree / path).read_text().splitlines()
    start = line_of(tree, path, after) if after is not None else 0
    found = [n for n, line in enumerate(lines, 1) if needle in line and n > start][: 1 if after else None]
    assert len(found) == 1, (needle, found)
    return found[0]


def scan_trees(*trees: Path) -> Report:
    return liftgate.scan([str(t) for t in trees], targets=["sm_120"], use_cache=False, offline=True)


def cpp_gates(report: Report) -> list[Gate]:
    return [g for g in report.gates if g.kind is GateKind.CPP_RUNTIME]


@cache
def fixture_report() -> Report:
    return scan_trees(MINILIB, CONSUMER)


def fixture_gates(package: str, path: str) -> list[Gate]:
    return [
        g for g in cpp_gates(fixture_report()) if (g.location.package, g.location.path) == (package, path)
    ]


def fixture_gate(path: str, condition: str, package: str = "minilib") -> Gate:
    found = [g for g in fixture_gates(package, path) if g.condition == condition]
    assert len(found) == 1, [
        (g.location.line, g.directive, g.condition) for g in fixture_gates(package, path)
    ]
    return found[0]


# ---------------------------------------------------------------------------
# Every fixture file against its markers.

GATE_MARKER = re.compile(r"//\s*gate:\s*(?P<spec>.+?)\s*$")
NOT_A_GATE_MARKER = re.compile(r"//\s*not a gate\b")
CMAKE_GATE_MARKER = re.compile(r"#\s*gate\b")


@dataclass(frozen=True)
class Expected:
    admitted: ArchSet
    else_kind: ElseKind
    confidence: Confidence


def parse_spec(spec: str) -> Expected:
    """``admits 10.0 10.3; else error`` or ``admits >=9.0; else fallback; inferred``."""
    parts = [p.strip() for p in spec.split(";")]
    assert parts[0].startswith("admits "), spec
    wanted: set[tuple[int, int]] = set()
    for item in parts[0].removeprefix("admits ").split():
        floor = item.removeprefix(">=")
        major, minor = (int(x) for x in floor.split("."))
        if item.startswith(">="):
            wanted |= {cc for cc in capabilities() if cc >= (major, minor)}
        else:
            assert (major, minor) in capabilities(), item
            wanted.add((major, minor))
    assert parts[1].startswith("else "), spec
    else_kind = ElseKind(parts[1].removeprefix("else "))
    assert parts[2:] in ([], ["inferred"]), spec
    confidence = Confidence.INFERRED if parts[2:] == ["inferred"] else Confidence.EXACT
    return Expected(archs_for_capabilities(wanted), else_kind, confidence)


def fixture_files() -> list[tuple[str, str]]:
    return sorted(
        (package, p.relative_to(tree).as_posix())
        for package, tree in TREES.items()
        for p in tree.rglob("*")
        if p.suffix in C_FAMILY
    )


def markers(package: str, path: str) -> tuple[dict[int, Expected], set[int]]:
    lines = (TREES[package] / path).read_text().splitlines()
    wanted = {
        n: parse_spec(m.group("spec")) for n, line in enumerate(lines, 1) if (m := GATE_MARKER.search(line))
    }
    unwanted = {n for n, line in enumerate(lines, 1) if NOT_A_GATE_MARKER.search(line)}
    return wanted, unwanted


def test_fixture_trees_are_marked() -> None:
    marked = {(pkg, path) for pkg, path in fixture_files() if markers(pkg, path)[0]}
    assert marked == {
        ("consumer", "src/sm_utils.cuh"),
        ("consumer", "src/trtllm_plugin.cpp"),
        ("minilib", "csrc/attention/mla_dispatch.cu"),
        ("minilib", "csrc/cuda_driver.cpp"),
        ("minilib", "csrc/cuda_utils.cpp"),
        ("minilib", "csrc/flashinfer/fused_moe_binding.cu"),
        ("minilib", "csrc/flashinfer/utils.cuh"),
        ("minilib", "csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu"),
        ("minilib", "csrc/quantization/w8a8/fp8_quant.cpp"),
        ("minilib", "csrc/trtllm/cudaUtils.h"),
        ("minilib", "csrc/trtllm/fp8BlockScaleGemm.cpp"),
        ("minilib", "csrc/trtllm/moeGemmRunner.cu"),
    }
    assert sum(len(markers(pkg, path)[0]) for pkg, path in fixture_files()) >= 40
    assert sum(len(markers(pkg, path)[1]) for pkg, path in fixture_files()) >= 15


@pytest.mark.parametrize(("package", "path"), fixture_files())
def test_markers(package: str, path: str) -> None:
    """Gates start exactly on the ``// gate:`` lines, say what the marker says, and cover no near miss."""
    wanted, unwanted = markers(package, path)
    gates = fixture_gates(package, path)
    by_line = {g.location.span.start: g for g in gates}
    assert sorted(by_line) == sorted(wanted), [(g.location.line, g.condition) for g in gates]
    assert len(gates) == len(wanted)  # one gate per marked line
    covering = {
        n for g in gates for n in range(g.location.span.start, g.location.span.end + 1) if n in unwanted
    }
    assert covering == set()
    for line, expected in wanted.items():
        gate = by_line[line]
        shown = f"{path}:{line} {gate.directive} {gate.condition!r}"
        assert gate.admitted == expected.admitted, (shown, sorted(gate.admitted.names()))
        assert gate.unknown == ArchSet.none(), shown
        assert gate.else_kind is expected.else_kind, shown
        assert gate.confidence is expected.confidence, shown
        assert gate.id.startswith("cr-") and gate.location.package == package, shown
        assert gate.host is None and gate.evidence, shown


def test_no_cpp_runtime_gate_outside_the_marked_files() -> None:
    marked = {(pkg, path) for pkg, path in fixture_files() if markers(pkg, path)[0]}
    reported = {(g.location.package, g.location.path) for g in cpp_gates(fixture_report())}
    assert reported <= marked
    assert not [s for s in fixture_report().skips if s.path.endswith(C_FAMILY)]


def test_cmake_gates_of_the_fixture_build() -> None:
    lines = (MINILIB / "CMakeLists.txt").read_text().splitlines()
    wanted = {n for n, line in enumerate(lines, 1) if CMAKE_GATE_MARKER.search(line)}
    cmake = [g for g in fixture_report().gates if g.kind is GateKind.CMAKE]
    assert {g.location.span.start for g in cmake if g.location.path == "CMakeLists.txt"} == wanted
    assert {g.location.path for g in cmake} == {"CMakeLists.txt"}  # cmake/utils.cmake has none


def test_every_kind_of_place() -> None:
    directives = {g.directive for g in cpp_gates(fixture_report())}
    assert directives == {
        "if",
        "else if",
        "case",
        "?:",
        "return",
        "TORCH_CHECK",
        "TORCH_CHECK_NOT_IMPLEMENTED",
        "STD_TORCH_CHECK",
        "FLASHINFER_CHECK",
        "TVM_FFI_ICHECK",
        "TVM_FFI_ICHECK_EQ",
    }


# ---------------------------------------------------------------------------
# What a gate says: the resolution chain, failure messages, build flags, #if regions.


def test_vllm_evidence_chain_names_the_helper_and_the_runtime_call() -> None:
    gate = fixture_gate(SCALED_MM, "version_num >= 100 && version_num < 120")
    assert gate.directive == "if"
    assert gate.location.span.start == line_of(
        MINILIB, SCALED_MM, "if (version_num >= 100 && version_num < 120)"
    )
    steps = [step.render() for step in gate.evidence]
    use = line_of(MINILIB, SCALED_MM, "version_num = get_sm_version_num();", after="void cutlass_scaled_mm(")
    helper = line_of(MINILIB, COMMON, "inline int32_t get_sm_version_num()")
    chain = [
        f"version_num = get_sm_version_num() at {SCALED_MM}:{use}",
        f"get_sm_version_num() returns version_num at {COMMON}:{helper}",
        f"version_num = major_capability * 10 + minor_capability at {COMMON}:{helper + 6}",
        f"cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor) at {COMMON}:{helper + 2}",
        f"cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMinor) at {COMMON}:{helper + 4}",
    ]
    for step in chain:
        assert step in steps, "\n".join(steps)
    assert [steps.index(step) for step in chain[:2]] == [0, 1]  # from the use outwards
    assert gate.confidence is Confidence.EXACT


def test_helper_in_a_nested_namespace_is_named_with_its_namespace() -> None:
    gate = fixture_gate(RUNNER, "sm_ >= 75 && sm_ < 80")
    text = evidence_text(gate)
    ctor = line_of(MINILIB, RUNNER, "sm_ = tensorrt_llm::common::getSMVersion();")
    assert f"sm_ = tensorrt_llm::common::getSMVersion() at {RUNNER}:{ctor}" in text  # set in the constructor
    helper = line_of(MINILIB, CUDA_UTILS, "inline int getSMVersion()")
    # `namespace tensorrt_llm::common {` declares both namespaces.
    assert (
        f"tensorrt_llm::common::getSMVersion() returns sm_major * 10 + sm_minor at {CUDA_UTILS}:{helper}"
        in text
    ), text


def test_flashinfer_pair_helper_through_structured_binding_and_first() -> None:
    check = fixture_gate("csrc/flashinfer/fused_moe_binding.cu", "major == 10")
    assert check.directive == "TVM_FFI_ICHECK_EQ"
    text = evidence_text(check)
    assert "major, minor = GetCudaComputeCapability()" in text
    assert "flashinfer::GetCudaComputeCapability() returns std::make_pair(major, minor)" in text
    first = fixture_gate("csrc/flashinfer/fused_moe_binding.cu", "GetCudaComputeCapability().first == 12")
    assert first.admitted == caps((12, 0), (12, 1))


@pytest.mark.parametrize(
    ("path", "condition", "outcome"),
    [
        (
            "csrc/quantization/w8a8/fp8_quant.cpp",
            "sm >= 89",
            'fails with: "per_token_group_quant_fp8 requires compute capability 8.9 or newer"',
        ),
        ("csrc/cuda_utils.cpp", "major == 10 || (major == 12 && minor == 0)", 'fails with: "NVFP4 needs sm_100 or sm_120"'),
        (
            "csrc/cuda_utils.cpp",
            "at::cuda::getCurrentDeviceProperties()->major < 9",
            'fails with: "FP8 kernels require Hopper or newer"',
        ),
        ("csrc/cuda_driver.cpp", "major < 8", 'fails with: "minilib JIT kernels need compute capability 8.0 or newer"'),
        (
            "csrc/flashinfer/fused_moe_binding.cu",
            "sm >= 89",
            'fails with: "bmm_fp8 requires compute capability 8.9 or newer"',
        ),
        ("csrc/flashinfer/fused_moe_binding.cu", "sm != 110", 'fails with: "bmm_fp8 has no kernels for Thor"'),
        (RUNNER, "sm_ >= 90", 'otherwise fails: "Arch unsupported for MoE GEMM"'),
        (
            "csrc/trtllm/fp8BlockScaleGemm.cpp",
            "!tensorrt_llm::common::isSM100Family() && tensorrt_llm::common::getSMVersion() != 90",
            'fails with: "[TensorRT-LLM][ERROR] FP8 block scale GEMM needs SM90 or SM100."',
        ),
    ],
)  # fmt: skip
def test_failure_message_is_kept_as_evidence(path: str, condition: str, outcome: str) -> None:
    gate = fixture_gate(path, condition)
    assert gate.else_kind is ElseKind.ERROR
    assert outcome in [step.text for step in gate.evidence], evidence_text(gate)


def test_streamed_and_split_messages_keep_their_literal_text() -> None:
    moe = fixture_gate("csrc/flashinfer/fused_moe_binding.cu", "major == 10")
    assert "MoE kernel requires 10.x architecture. Current device has SM " in evidence_text(moe)
    turing = fixture_gate(SCALED_MM, "version_num >= 75")
    [outcome] = [s for s in turing.evidence if s.text.startswith("otherwise fails:")]
    # Adjacent literals are one string: "...less than " "CUDA device capability: ".
    assert (
        "No compiled cutlass_scaled_mm for a compute capability less than CUDA device capability: "
        in outcome.text
    )
    message = line_of(
        MINILIB, SCALED_MM, '"No compiled cutlass_scaled_mm for a compute capability less than "'
    )
    assert (outcome.path, outcome.line) == (SCALED_MM, message - 2)  # the check's first line
    ampere = fixture_gate(SCALED_MM, "version_num >= 80")
    assert ampere.else_kind is ElseKind.FALLBACK  # version_num >= 75 may still take the device
    assert any(s.text.startswith("otherwise if no later branch matches, fails:") for s in ampere.evidence)


def test_build_flag_links_the_host_gate_to_the_cmake_gate() -> None:
    gate = fixture_gate(SCALED_MM, "version_num >= 100 && version_num < 120")
    cmake = {g.condition: g for g in fixture_report().gates if g.kind is GateKind.CMAKE}
    sm100 = cmake['cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0a" "${CUDA_ARCHS}")']
    sm90 = cmake['cuda_archs_loose_intersection(SCALED_MM_ARCHS "9.0a;" "${CUDA_ARCHS}")']
    assert sm100.id in gate.enclosing and sm90.id not in gate.enclosing
    flag_line = line_of(MINILIB, "CMakeLists.txt", '"-DENABLE_SCALED_MM_SM100=1"')
    link = (
        f"ENABLE_SCALED_MM_SM100 is passed by the build (-DENABLE_SCALED_MM_SM100) only where CMake gate "
        f"{sm100.id} admits the target: {sm100.condition}"
    )
    assert [(s.path, s.line) for s in gate.evidence if s.text == link] == [("CMakeLists.txt", flag_line)]
    hopper = fixture_gate(SCALED_MM, "version_num >= 90 && version_num < 100")
    assert sm90.id in hopper.enclosing and sm100.id not in hopper.enclosing
    for condition in ("version_num == 89", "version_num >= 80", "version_num >= 75"):
        c2x = fixture_gate(SCALED_MM, condition)
        assert [e for e in c2x.enclosing if e.startswith("cm-")] == [
            cmake[
                'cuda_archs_loose_intersection(SCALED_MM_2X_ARCHS "7.5;8.0;8.7;8.9+PTX" "${CUDA_ARCHS}")'
            ].id
        ]
    # Gates outside any #if have no CMake link.
    assert fixture_gate(SCALED_MM, "version_num / 10 == 12").enclosing == ()
    # What the target sees: sm_120 takes neither the code (not built) nor the branch.
    target = parse_arch("sm_120")
    assert sm100.status(target) is Status.EXCLUDED and gate.status(target) is Status.EXCLUDED
    assert gate.status(parse_arch("sm_100a")) is Status.ADMITTED


def test_if_region_is_named_in_depends_on() -> None:
    gate = fixture_gate(SCALED_MM, "version_num >= 100 && version_num < 120")
    directive = line_of(MINILIB, SCALED_MM, "if (version_num >= 100 && version_num < 120)") - 1
    [entry] = [d for d in gate.depends_on if d.startswith("inside #if")]
    assert "defined ENABLE_SCALED_MM_SM100 && ENABLE_SCALED_MM_SM100" in entry
    assert f"(line {directive})" in entry
    assert "ENABLE_SCALED_MM_SM100 set by the build (-D)" in entry
    assert gate.depends_on == (entry,)
    outside = fixture_gate(SCALED_MM, "version_num / 10 == 12")
    assert outside.depends_on == ()


def test_flag_passed_by_no_build_file_compiles_nothing_and_one_passed_later_links(tmp_path: Path) -> None:
    """``ENABLE_SCALED_MM_SM120`` is set by nothing in minilib: its branch is no code of any build.
    Once CMake passes it, the branch is a gate enclosed by the new CMake gate."""
    dead = line_of(MINILIB, SCALED_MM, "if (version_num >= 120)")
    assert dead not in {g.location.span.start for g in fixture_gates("minilib", SCALED_MM)}
    tree = tmp_path / "minilib"
    shutil.copytree(MINILIB, tree)
    with (tree / "CMakeLists.txt").open("a") as fh:
        fh.write(
            textwrap.dedent(
                """
                cuda_archs_loose_intersection(SCALED_MM_ARCHS "12.0a;12.1a" "${CUDA_ARCHS}")
                if(SCALED_MM_ARCHS)
                  list(APPEND VLLM_EXT_SRC "csrc/quantization/w8a8/cutlass/scaled_mm_c3x_sm120.cu")
                  list(APPEND VLLM_GPU_FLAGS "-DENABLE_SCALED_MM_SM120=1")
                endif()
                """
            )
        )
    report = scan_trees(tree)
    [gate] = [g for g in cpp_gates(report) if g.location.path == SCALED_MM and g.location.span.start == dead]
    assert gate.admitted == caps((12, 0), (12, 1))
    assert gate.else_kind is ElseKind.FALLBACK
    [sm120] = [g for g in report.gates if g.kind is GateKind.CMAKE and "12.0a;12.1a" in g.condition]
    assert sm120.id in gate.enclosing
    assert gate.status(parse_arch("sm_120")) is Status.ADMITTED


def test_nested_host_ifs_list_the_outer_gates_and_assumptions() -> None:
    outer = fixture_gate(RUNNER, "sm_ >= 90")
    inner = fixture_gate(RUNNER, "use_pdl && sm_ >= 100")
    assert outer.id in inner.enclosing
    assert inner.depends_on == ("assumed: use_pdl",)
    assert inner.admitted == caps_from((10, 0))  # judged on its own, not narrowed by the outer branch


# ---------------------------------------------------------------------------
# Helpers known only by name.


def test_name_only_helpers_are_inferred() -> None:
    for condition in ("deep_gemm::is_sm90()", "is_sm120()"):
        gate = fixture_gate("csrc/attention/mla_dispatch.cu", condition)
        assert gate.confidence is Confidence.INFERRED
        assert "its definition is not in the scanned files" in evidence_text(gate)
    tile = fixture_gate("src/sm_utils.cuh", "getSMVersion() >= 100", package="consumer")
    assert tile.confidence is Confidence.INFERRED
    assert "getSMVersion() read as the device's capability number (major*10+minor)" in evidence_text(tile)


def test_the_same_helper_with_its_definition_in_the_tree_is_exact() -> None:
    gate = fixture_gate("csrc/trtllm/fp8BlockScaleGemm.cpp", "tensorrt_llm::common::getSMVersion() == 90")
    assert gate.confidence is Confidence.EXACT
    assert "read as the device's capability" not in evidence_text(gate)


def test_member_set_from_a_name_only_helper_is_seen_by_other_methods() -> None:
    """TensorRT-LLM plugins store ``mSM = getSMVersion()`` in one method and test it in others."""
    gate = fixture_gate("src/trtllm_plugin.cpp", "mSM == 89 || mSM >= 90", package="consumer")
    assert gate.admitted == caps_from((8, 9))
    assert gate.confidence is Confidence.INFERRED


# ---------------------------------------------------------------------------
# Else kinds, on small sources given to the detector directly.

HELPER = """\
inline int sm_version() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major * 10 + minor;
}
"""


def detect(body: str) -> list[Gate]:
    text = (
        HELPER
        + "void run(int n) {\n  int sm = sm_version();\n"
        + textwrap.indent(textwrap.dedent(body), "  ")
        + "}\n"
    )
    index = HelperIndex()
    index.add_source("csrc/run.cu", text)
    index.resolve()
    detection = detect_cpp_runtime("pkg", "1.0", "csrc/run.cu", text, [], index.export())
    assert detection.skips == ()
    return list(detection.gates)


@pytest.mark.parametrize(
    ("body", "admitted", "else_kind"),
    [
        ('if (sm < 90) { throw std::runtime_error("old"); }\nlaunch();\n', caps_from((9, 0)), ElseKind.ERROR),
        ('if (sm < 90) TORCH_CHECK(false, "old");\nlaunch();\n', caps_from((9, 0)), ElseKind.ERROR),
        (
            'if (sm >= 90) { fast(); } else { TORCH_CHECK(false, "old"); }\n',
            caps_from((9, 0)),
            ElseKind.ERROR,
        ),
        ("if (sm >= 90) { fast(); } else { slow(); }\n", caps_from((9, 0)), ElseKind.FALLBACK),
        (
            'if (sm >= 90) { fast(); return; }\nTORCH_CHECK(false, "old");\n',
            caps_from((9, 0)),
            ElseKind.ERROR,
        ),
        ("if (sm >= 90) { fast(); return; }\nslow();\n", caps_from((9, 0)), ElseKind.FALLBACK),
        ("if (sm >= 90) { fast(); return; }\n", caps_from((9, 0)), ElseKind.NONE),
        ("if (sm >= 90) { fast(); }\nslow();\n", caps_from((9, 0)), ElseKind.NONE),
        ("int stages = sm >= 90 ? 4 : 2;\n", caps_from((9, 0)), ElseKind.FALLBACK),
        ('TORCH_CHECK(sm == 90, "Hopper only");\n', caps((9, 0)), ElseKind.ERROR),
    ],
)
def test_else_kinds(body: str, admitted: ArchSet, else_kind: ElseKind) -> None:
    [gate] = detect(body)
    assert gate.admitted == admitted
    assert gate.else_kind is else_kind
    assert gate.location.span.start == HELPER.count("\n") + 3


def test_switch_default_decides_the_else_kind() -> None:
    cases = "switch (sm) {\n  case 90:\n    fast();\n    break;\n"
    assert {g.else_kind for g in detect(cases + "}\n")} == {ElseKind.NONE}
    assert {g.else_kind for g in detect(cases + "  default:\n    slow();\n}\n")} == {ElseKind.FALLBACK}
    failing = detect(cases + '  default:\n    TORCH_CHECK(false, "unsupported");\n}\n')
    assert {g.else_kind for g in failing} == {ElseKind.ERROR}
    assert 'default fails: "unsupported"' in [s.text for s in failing[0].evidence]


@pytest.mark.parametrize(
    "body",
    [
        "if (n > 4096) { big(); }\n",
        "cudaDeviceProp prop;\ncudaGetDeviceProperties(&prop, 0);\nif (prop.multiProcessorCount > 100) { big(); }\n",
        "if (sm >= 70) { any(); }\n",  # true on every known capability
        "if (config.sm_version >= 90) { tma(); }\n",
        "// if (sm >= 90) { tma(); }\n",
        'log("sm >= 90");\n',
        'printf("%d\\n", sm);\n',
    ],
)
def test_near_misses_are_not_gates(body: str) -> None:
    assert detect(body) == []


def detect_source(text: str) -> list[Gate]:
    index = HelperIndex()
    index.add_source("csrc/api.cpp", text)
    index.resolve()
    detection = detect_cpp_runtime("pkg", "1.0", "csrc/api.cpp", text, [], index.export())
    return list(detection.gates)


def test_the_same_check_in_several_functions_is_a_gate_in_each() -> None:
    # FlashAttention's mha_fwd, mha_varlen_fwd and mha_bwd each start with the same lines.
    one = """\
void {name}(int n) {{
  auto dprops = at::cuda::getCurrentDeviceProperties();
  bool is_sm8x = dprops->major == 8 && dprops->minor >= 0;
  TORCH_CHECK(is_sm8x || dprops->major == 9, "FlashAttention only supports Ampere GPUs or newer.");
}}
"""
    gates = detect_source("".join(one.format(name=n) for n in ("mha_fwd", "mha_varlen_fwd", "mha_bwd")))
    assert [g.location.line for g in gates] == [4, 9, 14]
    assert len({g.id for g in gates}) == 3
    assert all(g.admitted == caps((8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0)) for g in gates)


def test_conditions_inside_a_lambda_body_are_gates() -> None:
    text = """\
void run_mha_fwd(Params& params) {
  auto dprops = at::cuda::getCurrentDeviceProperties();
  bool is_sm8x = dprops->major == 8 && dprops->minor > 0;
  DROPOUT_SWITCH(params.p_dropout < 1.f, Is_dropout, [&] {
    if (is_sm8x) {
      run_kernel<128>(params);
    } else {
      run_kernel<64>(params);
    }
  });
}
"""
    [gate] = detect_source(text)
    assert (gate.location.line, gate.condition) == (5, "is_sm8x")
    assert gate.admitted == caps((8, 6), (8, 7), (8, 8), (8, 9))
    assert gate.else_kind is ElseKind.FALLBACK


def test_a_struct_field_set_in_one_function_is_seen_in_another() -> None:
    # FlashAttention 3: params.arch filled in set_params, read by the launcher.
    text = """\
struct Flash_fwd_params { int arch; int num_sm; };
void set_params(Flash_fwd_params& params) {
  auto dprops = at::cuda::getCurrentDeviceProperties();
  params.arch = dprops->major * 10 + dprops->minor;
  params.num_sm = dprops->multiProcessorCount;
}
void run_mha_fwd(Flash_fwd_params& params) {
  if (params.arch >= 90) {
    run_sm90(params);
  } else {
    run_sm80(params);
  }
  if (params.num_sm > 100) { big(); }
}
"""
    [gate] = detect_source(text)
    assert (gate.location.line, gate.condition) == (8, "params.arch >= 90")
    assert gate.admitted == caps_from((9, 0))
    assert "params.arch = dprops->major * 10 + dprops->minor" in evidence_text(gate)


def test_generic_field_names_do_not_travel_between_structs() -> None:
    text = """\
void probe(Info& info) {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  info.major = prop.major;
  if (info.major >= 9) { tma(); }
}
void load(Version& v) {
  if (v.major >= 9) { newer_format(); }
}
"""
    gates = detect_source(text)
    assert [(g.location.line, g.condition) for g in gates] == [(5, "info.major >= 9")]


# ---------------------------------------------------------------------------
# Identity.


def test_gate_ids_survive_lines_inserted_above(tmp_path: Path) -> None:
    before = {g.id: g for g in cpp_gates(fixture_report())}
    assert len(before) == len(cpp_gates(fixture_report()))  # ids are distinct
    for package, tree in TREES.items():
        copy = tmp_path / package
        shutil.copytree(tree, copy)
        for path in copy.rglob("*"):
            if path.suffix in C_FAMILY:
                path.write_text("// Copyright the authors.\n\n/* moved down */\n" + path.read_text())
            elif path.name == "CMakeLists.txt":
                path.write_text("# moved down\n\n" + path.read_text())
    after = {g.id: g for g in cpp_gates(scan_trees(tmp_path / "minilib", tmp_path / "consumer"))}
    assert set(after) == set(before)
    for gid, gate in after.items():
        assert gate.location.span.start == before[gid].location.span.start + 3
        assert gate.condition == before[gid].condition
        assert gate.enclosing == before[gid].enclosing  # CMake gates included


# ---------------------------------------------------------------------------
# Never raises: bad sources give at worst a Skip or fewer gates, and the scan goes on.

GOOD = HELPER + "int tile() {\n  return sm_version() >= 90 ? 128 : 64;\n}\n"


def test_odd_sources_never_stop_the_scan(tmp_path: Path) -> None:
    tree = tmp_path / "oddlib"
    (tree / "csrc").mkdir(parents=True)
    (tree / "csrc" / "good.cu").write_text(GOOD)
    (tree / "csrc" / "unbalanced.cu").write_text(
        '#include "good.cu"\nvoid f() {\n  if (sm_version() >= 100) {\n    g();\n  }}}\n}\nvoid h() {\n'
        "  if (sm_version() == 90) { {\n    k();\n"
    )
    truncated = (MINILIB / SCALED_MM).read_text()
    (tree / "csrc" / "truncated.cu").write_text(truncated[: truncated.index("version_num >= 90 &&") + 12])
    body = "".join(f"  total += a.size({k % 3}) * {k};\n" for k in range(5_000))
    (tree / "csrc" / "huge.cu").write_text(
        f"void huge(torch::Tensor a) {{\n  int64_t total = 0;\n{body}  if (sm_version() >= 90) {{\n    g(total);\n  }}\n}}\n"
    )
    (tree / "csrc" / "latin1.cu").write_bytes(
        b"// \xe9t\xe9\n" + GOOD.replace("int tile", "int tile2").encode()
    )
    (tree / "csrc" / "macros.cu").write_text(
        textwrap.dedent(
            """\
            void dispatch(torch::Tensor a) {
              int major = 0;
              C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0))
              DISPATCH_FLOATING_TYPES(a.scalar_type(), "dispatch", [&] { run<scalar_t>(a); })
              if (major >= 9) {
                launch_sm90(a);
              }
            }
            """
        )
    )
    report = scan_trees(tree)
    gates = cpp_gates(report)
    for gate in gates:
        assert gate.admitted and gate.location.span.start <= gate.location.span.end
    assert all(isinstance(s, Skip) for s in report.skips)
    paths = {g.location.path for g in gates}
    assert "csrc/good.cu" in paths
    assert any("csrc/latin1.cu" in s.path and "not valid UTF-8" in s.reason for s in report.skips)
    [macro_gate] = [g for g in gates if g.location.path == "csrc/macros.cu"]
    assert macro_gate.location.span.start == 5 and macro_gate.admitted == caps_from((9, 0))
    huge = [g for g in gates if g.location.path == "csrc/huge.cu"]
    huge_skips = [s for s in report.skips if "csrc/huge.cu" in s.path]
    assert huge or huge_skips  # found, or said why not


SNIPPETS = [
    HELPER,
    "void f(int n) {\n",
    "}\n",
    "{",
    "int sm = sm_version();\n",
    "if (sm >= 90) {\n",
    "} else if (sm == 89) {\n",
    "} else {\n",
    "switch (sm / 10) {\ncase 9:\n",
    "default: break;\n",
    'TORCH_CHECK(sm >= 80, "old");\n',
    'TVM_FFI_ICHECK_EQ(sm, 100) << "x" << sm;\n',
    "return sm >= 90 ? 1 : 0;\n",
    "auto [major, minor] = std::make_pair(sm / 10, sm % 10);\n",
    "static int const s = sm_version();\n",
    "#if defined ENABLE_X && ENABLE_X\n",
    "#ifdef __CUDA_ARCH__\n",
    "#else\n",
    "#endif\n",
    'throw std::runtime_error("no");\n',
    "class R { R() { sm_ = sm_version(); } bool ok() { return sm_ == 90; } int sm_; };\n",
    "template <typename T> T g(T t) { return t < 9 ? t : 9; }\n",
    "for (int i = 0; i < sm; ++i) { x += i; }\n",
    "do { sm -= 10; } while (sm > 90);\n",
    "/* unterminated comment",
    '"unterminated string\n',
    'R"raw(if (sm >= 90))raw";\n',
    "((((((((((((",
    "))))))))",
    "? : ; :: -> . , < > <<",
]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(SNIPPETS), max_size=14).map("".join)
    | st.text(alphabet="(){}[];:?<>=!&|+-*/%.,#\n \"'ifelsmajorvn0123456789_", max_size=300)
)
def test_detector_never_raises_on_arbitrary_text(text: str) -> None:
    index = HelperIndex()
    index.add_source("csrc/helper.h", HELPER)
    index.add_source("csrc/fuzz.cu", text)
    index.resolve()
    detection = detect_cpp_runtime("pkg", None, "csrc/fuzz.cu", text, [], index.export())
    for gate in detection.gates:
        assert gate.kind is GateKind.CPP_RUNTIME
        assert gate.admitted and gate.location.span.start <= gate.location.span.end
    assert all(isinstance(s, Skip) for s in detection.skips)
