"""The CMake detector: its tokenizer, what arch entries admit, gates on a small real-looking build, vLLM.

``tests/fixtures/cmake/minibuild`` is laid out like vLLM's build. Every command liftgate must
report carries ``# gate`` on its first line, every near miss ``# not a gate: why``;
`test_markers` checks each file against its markers, the other tests check what the gates say.
The network test runs the detector over every CMake file of vLLM 0.11.0's sdist.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import urllib.request
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.arch.core import Arch, ArchSet, universe
from liftgate.arch.parse import parse_arch
from liftgate.detect.cmake import (
    CMAKE_PREFILTER,
    ArchEntry,
    build_blocks,
    detect_cmake,
    is_arch_variable,
    is_cmake_file,
    loose_admitted,
    parse_entry,
    tokenize,
)
from liftgate.detect.interface import Detection
from liftgate.detect.runtime_arch import capabilities
from liftgate.model import Confidence, ElseKind, Gate, GateKind, Span, Status

FIXTURE = Path(__file__).parent / "fixtures" / "cmake" / "minibuild"
FIXTURE_FILES = ["CMakeLists.txt", "cmake/utils.cmake"]


def names(archs: ArchSet) -> set[str]:
    return set(archs.names())


def baseline_from(name: str) -> set[str]:
    """Every baseline target from ``name`` up: what PTX of a baseline arch admits."""
    floor = parse_arch(name).cc
    return {a.name for a in universe() if not a.variant and a.cc >= floor}


def capability_targets(*ccs: str) -> set[str]:
    """Every target (all variants) of the given capabilities ("9.0", "12.1")."""
    wanted = {parse_arch(cc).cc for cc in ccs}
    return {a.name for a in universe() if a.cc in wanted}


@cache
def fixture(path: str) -> Detection:
    # The minibuild fixture marks the gates of every branch of its CUDA-version tests, as read
    # without an assumed toolkit (tests/test_cmake_toolkit.py reads such branches under one).
    return detect_cmake("minibuild", "1.0", path, (FIXTURE / path).read_text(), cuda_version=None)


def detect(
    text: str, path: str = "CMakeLists.txt", cuda_version: tuple[int, int] | None = (13, 0)
) -> Detection:
    return detect_cmake("pkg", "1.0", path, text, cuda_version)


def gate_at(detection: Detection, line: int) -> Gate:
    found = [g for g in detection.gates if g.location.span.start == line]
    assert len(found) == 1, (
        f"expected one gate at line {line}, got {[g.location.line for g in detection.gates]}"
    )
    return found[0]


def only_gate(text: str) -> Gate:
    detection = detect(text)
    assert len(detection.gates) == 1, [g.condition for g in detection.gates]
    return detection.gates[0]


def evidence_text(gate: Gate) -> str:
    return "\n".join(e.render() for e in gate.evidence)


# --------------------------------------------------------------------------------------------
# The fixture, against its markers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURE_FILES)
def test_markers(path: str) -> None:
    lines = (FIXTURE / path).read_text().splitlines()
    marked = {i for i, line in enumerate(lines, start=1) if re.search(r"#\s*gate\s*$", line)}
    near_misses = {i for i, line in enumerate(lines, start=1) if "# not a gate" in line}
    detection = fixture(path)
    found = {g.location.line for g in detection.gates}
    assert found == marked, f"gates at {sorted(found)}, marked {sorted(marked)}"
    assert not found & near_misses
    assert detection.skips == ()
    assert marked and near_misses  # the fixture exercises both


def test_fixture_gates_are_cmake_gates_with_distinct_ids() -> None:
    gates = [g for path in FIXTURE_FILES for g in fixture(path).gates]
    assert len({g.id for g in gates}) == len(gates)
    for gate in gates:
        assert gate.kind is GateKind.CMAKE
        assert gate.id.startswith("cm-")
        assert gate.host is None
        assert gate.location.package == "minibuild" and gate.location.version == "1.0"
        assert gate.directive == gate.condition.split("(", 1)[0].lower()
        assert gate.else_kind in (ElseKind.NONE, ElseKind.ERROR)
        assert gate.evidence or gate.depends_on


# --------------------------------------------------------------------------------------------
# Arch lists
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "admitted"),
    [
        # CMake: a plain entry is SASS + PTX; PTX of a baseline arch runs on every later baseline target.
        ("set(CMAKE_CUDA_ARCHITECTURES 90)", baseline_from("sm_90")),
        ("set(CMAKE_CUDA_ARCHITECTURES 90-real)", {"sm_90"}),
        ("set(CMAKE_CUDA_ARCHITECTURES 90-virtual)", baseline_from("sm_90")),
        ("set(CMAKE_CUDA_ARCHITECTURES 90a)", {"sm_90a"}),
        ("set(CMAKE_CUDA_ARCHITECTURES 100f)", {"sm_100f", "sm_103f"}),
        ("set(CMAKE_CUDA_ARCHITECTURES 103f-real)", {"sm_103f"}),
        ("set(CMAKE_CUDA_ARCHITECTURES 80-real 90a 100a)", {"sm_80", "sm_90a", "sm_100a"}),
        ('set(CMAKE_CUDA_ARCHITECTURES "75-real;120a-real")', {"sm_75", "sm_120a"}),
        ("set(CMAKE_CUDA_ARCHITECTURES 52-virtual)", baseline_from("sm_70")),  # older than every target
        ("set(CMAKE_CUDA_ARCHITECTURES 35-real 120-real)", {"sm_120"}),
        (
            "set(CMAKE_CUDA_ARCHITECTURES all-major)",
            {"sm_70", "sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "sm_121"},
        ),
        ('set(CMAKE_CUDA_ARCHITECTURES "90a" CACHE STRING "archs")', {"sm_90a"}),
        ("list(APPEND CMAKE_CUDA_ARCHITECTURES 120a-real)", {"sm_120a"}),
        # Torch: SASS unless +PTX; named arches expand as torch expands them.
        ('set(TORCH_CUDA_ARCH_LIST "8.0;9.0a;10.0+PTX")', {"sm_80", "sm_90a"} | baseline_from("sm_100")),
        ('set(TORCH_CUDA_ARCH_LIST "8.6 8.9")', {"sm_86", "sm_89"}),
        ('set(TORCH_CUDA_ARCH_LIST "Hopper")', baseline_from("sm_90")),
        # Other *_ARCHS variables: dotted entries read torch-style, plain numbers CMake-style.
        ('set(CUDA_ARCHS "9.0a;10.0a")', {"sm_90a", "sm_100a"}),
        ("set(SM90_ARCHS 90a)", {"sm_90a"}),
        ("set(CUTLASS_NVCC_ARCHS 90a 100a)", {"sm_90a", "sm_100a"}),
        ('set(KERNEL_ARCH "sm_90a")', {"sm_90a"}),
        # The CUDA_ARCHITECTURES property.
        ('set_target_properties(t PROPERTIES CUDA_ARCHITECTURES "90a")', {"sm_90a"}),
        ("set_target_properties(t PROPERTIES CXX_STANDARD 17\n  CUDA_ARCHITECTURES 100a-real)", {"sm_100a"}),
        ("set_property(TARGET t PROPERTY CUDA_ARCHITECTURES 80-real 90-real)", {"sm_80", "sm_90"}),
        ("set_property(TARGET t APPEND PROPERTY CUDA_ARCHITECTURES 120f)", {"sm_120f", "sm_121f"}),
    ],
)
def test_arch_list_semantics(text: str, admitted: set[str]) -> None:
    gate = only_gate(text)
    assert names(gate.admitted) == admitted
    assert not gate.unknown
    assert gate.else_kind is ElseKind.NONE
    assert gate.then_span is None and gate.else_span is None


def test_cmake_special_values_say_what_they_depend_on() -> None:
    native = only_gate("set(CMAKE_CUDA_ARCHITECTURES native)")
    assert not native.admitted and native.unknown == ArchSet.all()
    assert native.status(parse_arch("sm_120")) is Status.UNKNOWN
    assert any("native" in d and "build" in d for d in native.depends_on)
    off = only_gate("set(CMAKE_CUDA_ARCHITECTURES OFF)")
    assert off.unknown == ArchSet.all()
    every = only_gate("set(CMAKE_CUDA_ARCHITECTURES all)")
    assert names(every.admitted) == {a.name for a in universe() if not a.variant}
    assert any("toolkit" in d for d in every.depends_on)


def test_torch_list_names_the_former_sm101() -> None:
    gate = only_gate('set(TORCH_CUDA_ARCH_LIST "10.1a")')
    assert names(gate.admitted) == {"sm_110a"}
    assert "sm_101a is the name sm_110a had before CUDA 13.0" in evidence_text(gate)


def test_list_with_an_unknown_variable_is_unknown_elsewhere() -> None:
    gate = gate_at(fixture("CMakeLists.txt"), 114)  # set(CMAKE_CUDA_ARCHITECTURES ${USER_CUDA_ARCHS} 120f)
    assert names(gate.admitted) == {"sm_120f", "sm_121f"}
    assert gate.unknown == ~gate.admitted
    assert gate.confidence is Confidence.INFERRED
    assert gate.depends_on == ("the contents of USER_CUDA_ARCHS, not set in this file",)


def test_generator_expressions_and_native_flags_are_unknown() -> None:
    gate = only_gate("set(CMAKE_CUDA_ARCHITECTURES $<$<CONFIG:Debug>:80-real> 90a-real)")
    assert names(gate.admitted) == {"sm_90a"} and gate.unknown == ~gate.admitted
    assert gate.depends_on == ("a generator expression",)
    flag = only_gate('set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -arch=native")')
    assert not flag.admitted and flag.unknown == ArchSet.all()
    assert flag.depends_on == ("-arch=native: the GPUs of the machine that runs the build",)


def test_a_list_used_as_torch_list_reads_torch_style() -> None:
    detection = detect("set(MY_LIST 9.0 120)\nset(TORCH_CUDA_ARCH_LIST ${MY_LIST})")
    (gate,) = detection.gates
    assert names(gate.admitted) == {"sm_90", "sm_120"}  # SASS only: torch adds PTX only with +PTX
    assert "MY_LIST is used as TORCH_CUDA_ARCH_LIST" in evidence_text(gate)


def test_unparseable_condition_naming_an_arch_list_is_skipped() -> None:
    detection = detect("if(CUDA_ARCHS AND)\n  set(X 1)\nendif()\nif(FOO AND)\nendif()")
    assert detection.gates == ()
    assert [s.path for s in detection.skips] == ["CMakeLists.txt:1"]
    assert "cannot parse the condition" in detection.skips[0].reason


def test_list_appending_to_itself_or_to_a_known_list_is_exact() -> None:
    detection = detect(
        "set(BASE_ARCHS 80-real)\nset(CMAKE_CUDA_ARCHITECTURES ${CMAKE_CUDA_ARCHITECTURES} ${BASE_ARCHS} 90a)"
    )
    gate = gate_at(detection, 2)
    assert names(gate.admitted) == {"sm_90a"} and not gate.unknown
    assert "BASE_ARCHS" in evidence_text(gate)
    base = gate_at(detection, 1)
    assert names(base.admitted) == {"sm_80"}
    assert "BASE_ARCHS is used as CMAKE_CUDA_ARCHITECTURES" in evidence_text(base)


def test_one_variable_reads_one_way() -> None:
    # The dotted first definition makes every definition of CUDA_ARCHS torch-style (SASS only).
    detection = detect('set(CUDA_ARCHS "9.0a")\nlist(APPEND CUDA_ARCHS 120)')
    assert names(gate_at(detection, 2).admitted) == {"sm_120"}


def test_list_with_a_bad_entry_keeps_the_good_ones_and_says_so() -> None:
    detection = detect('set(CUDA_ARCHS "7.0;9.5;12.0")')
    assert names(detection.gates[0].admitted) == {"sm_70", "sm_120"}
    assert [s.path for s in detection.skips] == ["CMakeLists.txt:1"]
    assert "9.5" in detection.skips[0].reason


def test_foreach_over_literal_items_expands_the_loop_variable() -> None:
    gate = gate_at(fixture("cmake/utils.cmake"), 29)
    assert names(gate.admitted) == baseline_from("sm_80") | {"sm_90a"}
    assert gate.enclosing == ()


# --------------------------------------------------------------------------------------------
# -gencode and -arch flags
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "admitted"),
    [
        ("target_compile_options(k PRIVATE -gencode arch=compute_90a,code=sm_90a)", {"sm_90a"}),
        (
            'string(APPEND CMAKE_CUDA_FLAGS " -gencode=arch=compute_90,code=[sm_90,compute_90]")',
            baseline_from("sm_90"),
        ),
        ("list(APPEND CUDA_NVCC_FLAGS -gencode arch=compute_80,code=compute_80)", baseline_from("sm_80")),
        ("list(APPEND CUDA_NVCC_FLAGS --generate-code=arch=compute_100a,code=sm_100a)", {"sm_100a"}),
        (
            'set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -gencode arch=compute_90a,code=\\"sm_90a,compute_90a\\"")',
            {"sm_90a"},
        ),
        (
            "add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_120a,code=sm_120a>)",
            {"sm_120a"},
        ),
        ('set(CMAKE_CUDA_FLAGS "-arch=sm_90a")', {"sm_90a"}),
        ('set(CMAKE_CUDA_FLAGS "-arch=sm_80")', baseline_from("sm_80")),
        ('set(CMAKE_CUDA_FLAGS "-arch=compute_90")', baseline_from("sm_90")),
        ('set(CMAKE_CUDA_FLAGS "-arch=compute_80 -code=sm_86")', {"sm_86"}),
        ("target_compile_options(k PRIVATE --gpu-architecture=sm_100f)", {"sm_100f", "sm_103f"}),
        (
            "set(EXTRA -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_100a,code=sm_100a)",
            {"sm_90a", "sm_100a"},
        ),
    ],
)
def test_gencode_flags(text: str, admitted: set[str]) -> None:
    gate = only_gate(text)
    assert names(gate.admitted) == admitted
    assert not gate.unknown


def test_gencode_from_unresolved_variables_is_skipped_outside_functions() -> None:
    text = "foreach(A IN LISTS ARCHS)\n  list(APPEND F -gencode arch=compute_${A},code=sm_${A})\nendforeach()"
    detection = detect(text)
    assert detection.gates == ()
    assert [s.path for s in detection.skips] == ["CMakeLists.txt:2"]
    assert "arch=compute_${A}" in detection.skips[0].reason
    inside = detect(
        "function(add_k A)\n  list(APPEND F -gencode arch=compute_${A},code=sm_${A})\nendfunction()"
    )
    assert inside.gates == () and inside.skips == ()


# --------------------------------------------------------------------------------------------
# Near misses
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "set(SM_SCALE 90)",
        "set(NUM_SMS 132)",
        "set(MAX_SMS 80)",
        'set(CUDA_VERSION "12.8")',
        'set(TORCH_SUPPORTED_VERSION_CUDA "2.8.0")',
        "set(ARCH_DIR sm90)",
        "set(ARCH_SUFFIX 90a)",
        'set(HIP_SUPPORTED_ARCHS "gfx90a;gfx942")',
        "set(CMAKE_HIP_ARCHITECTURES gfx942)",
        "set(CMAKE_OSX_ARCHITECTURES arm64 x86_64)",
        "set(CPU_ARCH x86_64)",
        "set(ARCH 64)",
        "set(CMAKE_CUDA_ARCHITECTURES)",
        'set(TORCH_CUDA_ARCH_LIST "")',
        'set(CUDA_ARCHS "${OTHER_ARCHS}")',
        'list(APPEND CUDA_ARCHS "${_arch}")',
        "list(APPEND CXX_FLAGS -march=native)",
        "add_compile_options(-march=armv8.2-a+bf16)",
        "target_compile_options(t PRIVATE -arch x86_64)",
        'set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} --use_fast_math")',
        'message(STATUS "-gencode arch=compute_90a,code=sm_90a")',
        'string(REGEX MATCHALL "-gencode arch=compute_[0-9]+a?" OUT "${CMAKE_CUDA_FLAGS}")',
        "# set(CMAKE_CUDA_ARCHITECTURES 90a)",
        "#[==[\nset(CMAKE_CUDA_ARCHITECTURES 90a)\n]==]",
        'if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)\n  message(STATUS "new")\nendif()',
        "if(NOT CMAKE_CUDA_ARCHITECTURES)\n  set(X 1)\nendif()",
        "if(DEFINED CUDA_ARCHS AND SM100_ARCHS)\n  set(X 1)\nendif()",
        'if(_arch MATCHES "\\\\+PTX$")\nendif()',
        'if("${_base}" IN_LIST TGT_CUDA_ARCHS)\nendif()',
        'if(VLLM_GPU_ARCHES MATCHES "gfx115[0-3]")\n  set(RDNA35 ON)\nendif()',
        # A source list that lets every target through gates nothing.
        'set(ALL_ARCHS "7.0;7.2;7.5;8.0;9.0;10.0;11.0;12.0")\n'
        'cuda_archs_loose_intersection(CUDA_ARCHS "${ALL_ARCHS}" "${CUDA_ARCHS}")',
    ],
)
def test_near_misses(text: str) -> None:
    detection = detect(text)
    assert detection.gates == (), [g.condition for g in detection.gates]
    assert detection.skips == ()


def test_arch_variable_names() -> None:
    for name in (
        "CMAKE_CUDA_ARCHITECTURES",
        "TORCH_CUDA_ARCH_LIST",
        "CUDA_ARCHS",
        "SM100_ARCHS",
        "GPU_ARCH",
        "cuda_archs",
    ):
        assert is_arch_variable(name), name
    for name in (
        "ARCH_DIR",
        "SM_SCALE",
        "NUM_SMS",
        "CMAKE_HIP_ARCHITECTURES",
        "CMAKE_OSX_ARCHITECTURES",
        "CPU_ARCH",
        "MARCH",
    ):
        assert not is_arch_variable(name), name


# --------------------------------------------------------------------------------------------
# vLLM's cuda_archs_loose_intersection
# --------------------------------------------------------------------------------------------


def test_intersection_with_version_condition_and_sources() -> None:
    detection = fixture("CMakeLists.txt")
    gate = gate_at(detection, 50)  # cuda_archs_loose_intersection(SCALED_MM_ARCHS "9.0a;" …)
    assert gate.directive == "cuda_archs_loose_intersection"
    assert gate.condition == 'cuda_archs_loose_intersection(SCALED_MM_ARCHS "9.0a;" "${CUDA_ARCHS}")'
    assert names(gate.admitted) == {"sm_90", "sm_90a"}
    for target in ("sm_100a", "sm_120", "sm_120a", "sm_89"):
        assert gate.status(parse_arch(target)) is Status.EXCLUDED, target
    assert gate.depends_on == ("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.0",)
    assert gate.then_span == Span(52, 59) and gate.else_span == Span(60, 66)
    assert gate.else_kind is ElseKind.NONE
    evidence = evidence_text(gate)
    assert (
        "builds csrc/cutlass_w8a8/scaled_mm_c3x_sm90.cu, csrc/cutlass_w8a8/c3x/scaled_mm_sm90_fp8.cu for 9.0a;"
        in evidence
    )
    assert "adds -DENABLE_SCALED_MM_SM90=1" in evidence
    assert "9.0a: built as sm_90a when 9.0 is built" in evidence
    assert (
        "otherwise message(STATUS): Not building scaled_mm_c3x_sm90 as no compatible archs found at CMakeLists.txt:64"
        in evidence
    )


def test_intersection_loose_and_ptx_entries() -> None:
    gate = gate_at(fixture("CMakeLists.txt"), 37)  # "8.0;8.7;9.0+PTX"
    # 8.0 serves every built 8.x; 9.0+PTX every built arch from 9.0 up, Blackwell included.
    assert names(gate.admitted) == capability_targets("8.0", "8.6", "8.7", "8.8", "8.9") | {
        a.name for a in universe() if a.cc >= (9, 0)
    }
    assert gate.status(parse_arch("sm_75")) is Status.EXCLUDED
    evidence = evidence_text(gate)
    assert "csrc/marlin/kernel_*.cu" in evidence and "csrc/marlin/repack.cu" in evidence
    assert "Not building Marlin kernels as no compatible archs found in CUDA target architectures" in evidence


def test_intersection_of_geforce_blackwell_admits_both_12x() -> None:
    gate = gate_at(fixture("CMakeLists.txt"), 69)
    assert names(gate.admitted) == capability_targets("12.0", "12.1")
    assert gate.depends_on == ("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8",)


def test_intersection_whose_else_stops_the_build() -> None:
    gate = gate_at(fixture("CMakeLists.txt"), 77)  # "10.0a", then if(NOT FP4_ARCHS) message(FATAL_ERROR …)
    assert names(gate.admitted) == capability_targets("10.0")
    assert gate.else_kind is ElseKind.ERROR
    assert gate.then_span == Span(81, 81) and gate.else_span == Span(78, 79)
    evidence = evidence_text(gate)
    assert "builds csrc/fp4/nvfp4_quant.cu for 10.0a at CMakeLists.txt:80" in evidence
    assert "otherwise message(FATAL_ERROR): FP4 kernels need sm_100a" in evidence


def test_source_list_set_elsewhere_in_the_file_carries_the_gate() -> None:
    detection = fixture("CMakeLists.txt")
    gate = gate_at(detection, 26)  # set(CUDA_SUPPORTED_ARCHS …) for CUDA < 12.8
    assert names(gate.admitted) == capability_targets(
        "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.8", "8.9", "9.0"
    )
    assert gate.depends_on == (
        "NOT (DEFINED CMAKE_CUDA_COMPILER_VERSION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)",
    )
    assert (
        "CUDA_SUPPORTED_ARCHS is the source list of cuda_archs_loose_intersection(CUDA_ARCHS"
        in evidence_text(gate)
    )
    assert not [g for g in detection.gates if g.location.line in (24, 29)]


def test_flashmla_style_conditional_appends() -> None:
    text = """set(SUPPORT_ARCHS)
if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER 12.3)
    list(APPEND SUPPORT_ARCHS 9.0a)
endif()
if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER 12.8)
    list(APPEND SUPPORT_ARCHS 10.0a)
endif()
cuda_archs_loose_intersection(FLASH_MLA_ARCHS "${SUPPORT_ARCHS}" "${CUDA_ARCHS}")
if(FLASH_MLA_ARCHS)
    set(FlashMLA_SOURCES ${flashmla_SOURCE_DIR}/csrc/sm90/splitkv_mla.cu)
else()
    add_custom_target(_flashmla_C)
endif()
"""
    detection = detect(text)
    assert detection.skips == ()
    hopper, blackwell = detection.gates
    assert (hopper.location.line, blackwell.location.line) == (3, 6)
    assert names(hopper.admitted) == capability_targets("9.0")
    assert names(blackwell.admitted) == capability_targets("10.0")
    assert hopper.depends_on == (
        "assumes CUDA 13.0: ${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER 12.3 is true",
    )
    assert blackwell.depends_on == (
        "assumes CUDA 13.0: ${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER 12.8 is true",
    )
    assert "builds ${flashmla_SOURCE_DIR}/csrc/sm90/splitkv_mla.cu for ${SUPPORT_ARCHS}" in evidence_text(
        hopper
    )


def test_if_after_a_version_if_else_tests_both_intersections() -> None:
    text = """if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
  cuda_archs_loose_intersection(TOPK_ARCHS "9.0a;10.0f;12.0f" "${CUDA_ARCHS}")
else()
  cuda_archs_loose_intersection(TOPK_ARCHS "9.0a;10.0a;12.0a" "${CUDA_ARCHS}")
endif()
if(TOPK_ARCHS)
  list(APPEND GPU_FLAGS "-DENABLE_TOPK=1")
  set(CMAKE_CUDA_ARCHITECTURES 90a)
endif()
"""
    # Both branches of the version test, read without an assumed toolkit (test_cmake_toolkit.py
    # reads them under one).
    new, old, nested = detect(text, cuda_version=None).gates
    assert new.depends_on == ("${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0",)
    assert old.depends_on == ("NOT (${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)",)
    assert names(new.admitted) == capability_targets("9.0", "10.0", "10.3", "12.0", "12.1")
    assert names(old.admitted) == capability_targets("9.0", "10.0", "12.0")
    for gate in (new, old):
        assert "adds -DENABLE_TOPK=1" in evidence_text(gate)
        assert gate.then_span == Span(7, 8)
    assert nested.enclosing == (new.id, old.id)


def test_consumer_search_stops_at_a_redefinition_and_at_functions() -> None:
    text = """cuda_archs_loose_intersection(M_ARCHS "8.0+PTX" "${CUDA_ARCHS}")
set_gencode_flags_for_srcs(SRCS "${M_SRCS}" CUDA_ARCHS "${M_ARCHS}")
set(M_ARCHS)
if(M_ARCHS)
  list(APPEND S m.cu)
endif()
function(f)
  cuda_archs_loose_intersection(N_ARCHS "9.0a" "${CUDA_ARCHS}")
endfunction()
if(N_ARCHS)
  list(APPEND S n.cu)
endif()
"""
    marlin, inside = detect(text).gates
    evidence = evidence_text(marlin)
    assert (
        'used by set_gencode_flags_for_srcs(SRCS "${M_SRCS}" CUDA_ARCHS "${M_ARCHS}") at CMakeLists.txt:2'
        in evidence
    )
    assert "m.cu" not in evidence and marlin.then_span is None
    assert "no if(N_ARCHS) or use of it follows" in evidence_text(inside)
    assert inside.then_span is None


def test_entries_added_to_the_result_later_make_the_rest_unknown() -> None:
    # vLLM 0.34's MiniMax kernel: the family targets from the intersection, every other built arch from a loop.
    text = """cuda_archs_loose_intersection(MM_ARCHS "10.0f;11.0f" "${CUDA_ARCHS}")
foreach(_ARCH ${CUDA_ARCHS})
  if(_ARCH VERSION_LESS 10.0 OR _ARCH VERSION_GREATER_EQUAL 12.0)
    list(APPEND MM_ARCHS "${_ARCH}")
  endif()
endforeach()
set_gencode_flags_for_srcs(SRCS "mm.cu" CUDA_ARCHS "${MM_ARCHS}")
"""
    gate = only_gate(text)
    assert names(gate.admitted) == capability_targets("10.0", "10.3", "11.0")
    assert gate.status(parse_arch("sm_120")) is Status.UNKNOWN
    assert gate.confidence is Confidence.INFERRED
    assert gate.depends_on == ('what list(APPEND MM_ARCHS "${_ARCH}") (line 4) adds to MM_ARCHS',)
    extended = detect(
        'set(S_ARCHS "9.0a")\ncuda_archs_loose_intersection(O_ARCHS "${S_ARCHS}" "${CUDA_ARCHS}")\n'
        "set(O_ARCHS ${O_ARCHS} ${EXTRA})\nif(O_ARCHS)\n  list(APPEND S o.cu)\nendif()"
    )
    (source,) = extended.gates
    assert source.status(parse_arch("sm_120")) is Status.UNKNOWN
    assert "builds o.cu" in evidence_text(source)


def test_repeated_intersection_gets_its_own_id() -> None:
    line = 'cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0a" "${CUDA_ARCHS}")\n'
    text = line + "if(SCALED_MM_ARCHS)\n  list(APPEND S a.cu)\nendif()\n"
    first, second = detect(text + text).gates
    assert first.condition == second.condition
    assert first.id != second.id
    # Ids follow what the gate is, not where: moving the code down keeps them.
    moved = detect("\n\n# a comment\nproject(x)\n" + text + text).gates
    assert [g.id for g in moved] == [first.id, second.id]
    assert moved[0].location.line == first.location.line + 4
    # ... while the same text under another condition is another gate.
    nested = detect("if(BUILD_X)\n" + text + "endif()\n").gates[0]
    assert nested.id != first.id and nested.depends_on == ("BUILD_X",)


def test_intersection_with_unknown_source_list_is_skipped() -> None:
    detection = detect('cuda_archs_loose_intersection(X_ARCHS "${FROM_ELSEWHERE}" "${CUDA_ARCHS}")')
    assert detection.gates == ()
    assert "${FROM_ELSEWHERE}" in detection.skips[0].reason


def test_plain_intersection_is_exact() -> None:
    gate = only_gate('cuda_archs_intersection(X_ARCHS "8.0;9.0" "${CUDA_ARCHS}")')
    assert names(gate.admitted) == capability_targets("8.0", "9.0")  # 8.6 is not 8.0 here


def vllm_loose_intersection(src: list[str], tgt: list[str]) -> list[str]:
    """cuda_archs_loose_intersection from vllm 0.34.0's cmake/utils.cmake, transcribed step by step.

    CMake's foreach iterates the value a list had when the loop began, hence the copies.
    """

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"[0-9]+", text))

    def without(items: list[str], *drop: str) -> list[str]:
        return [i for i in items if i not in drop]

    src, tgt_rest, ptx = list(dict.fromkeys(src)), list(tgt), []
    for arch in list(src):
        if arch.endswith("+PTX"):
            base = arch.removesuffix("+PTX")
            ptx.append(base)
            src = [*without(src, arch), base]
    ptx, src = list(dict.fromkeys(ptx)), list(dict.fromkeys(src))
    result: list[str] = []
    for arch in list(src):  # 1. exact base match
        base = arch[:-1]
        if arch[-1] in "af" and base in tgt_rest:
            src = without(src, arch)
            tgt_rest = without(tgt_rest, base, base + "a", base + "f")
            result.append(arch)
    family_bases: list[str] = []
    for arch in list(src):  # 2. cross-suffix match
        if arch[-1] not in "af":
            continue
        src = without(src, arch)
        base = arch[:-1]
        if base + "a" in tgt_rest:
            tgt_rest = without(tgt_rest, base + "a")
            result.append(base + "a")
        elif base + "f" in tgt_rest:
            tgt_rest = without(tgt_rest, base + "f")
            result.append(base + "f")
        elif arch.endswith("f"):
            family_bases.append(base)
    for base in sorted(family_bases, key=version, reverse=True):  # 3. family fallback
        for target in list(tgt_rest):
            target_base = re.sub("[af]$", "", target)
            if target_base.split(".")[0] == base.split(".")[0] and version(target_base) >= version(base):
                tgt_rest = without(tgt_rest, target)
                result.append(target)
                break
    for arch in list(tgt_rest):  # symmetric: TGT's suffix is kept
        if arch[-1] in "af" and arch[:-1] in src:
            tgt_rest = without(tgt_rest, arch)
            result.append(arch)
            if arch[:-1] not in tgt_rest:
                src = without(src, arch[:-1])
    src.sort(key=version)
    for target in tgt_rest:
        chosen = None
        for candidate in src:
            if version(candidate) <= version(target):
                if candidate in ptx or candidate.split(".")[0] == target.split(".")[0]:
                    chosen = candidate
            else:
                break
        if chosen:
            result.append(chosen)
    result = list(dict.fromkeys(result))
    return [a + "+PTX" if a in ptx else a for a in result]


def runs_on(entry: str, cc: tuple[int, int]) -> bool:
    """Whether code vLLM builds for ``entry`` (SASS, plus PTX with +PTX) runs on a GPU of capability ``cc``."""
    arch = parse_arch(entry.removesuffix("+PTX"))
    if arch.variant == "a":
        return arch.cc == cc
    if entry.endswith("+PTX"):
        return cc >= arch.cc
    # Baseline SASS runs on later minors of its major, family SASS on later members of its family.
    return cc[0] == arch.major and cc >= arch.cc


SRC_ENTRIES = sorted(
    {f"{a.major}.{a.minor}{a.variant}" for a in universe()} | {f"{a.major}.{a.minor}+PTX" for a in universe()}
)


def test_vllm_loose_intersection_transcription_matches_its_documented_examples() -> None:
    assert vllm_loose_intersection(["7.5", "8.0", "8.6", "9.0", "9.0a"], ["8.0", "8.9", "9.0"]) == [
        "9.0a",
        "8.0",
        "8.6",
    ]
    assert vllm_loose_intersection(["8.0+PTX"], ["9.0"]) == ["8.0+PTX"]
    assert vllm_loose_intersection(["12.0f"], ["12.1a"]) == ["12.1a"]  # the family fallback's own example


def test_family_entries_of_an_intersection_admit_later_members() -> None:
    gate = only_gate('cuda_archs_loose_intersection(X_ARCHS "10.0f;12.0f" "${CUDA_ARCHS}")')
    assert names(gate.admitted) == capability_targets("10.0", "10.3", "12.0", "12.1")
    assert "a later arch of its family" in evidence_text(gate)


@settings(max_examples=300, deadline=None)
@given(src=st.lists(st.sampled_from(SRC_ENTRIES), min_size=1, max_size=5))
def test_loose_admitted_matches_vllm(src: list[str]) -> None:
    admitted = ArchSet.none()
    for spelling in src:
        entry = parse_entry(spelling, "loose")
        assert entry is not None
        admitted |= loose_admitted(entry)
    for cc in capabilities():
        built = vllm_loose_intersection(src, [f"{cc[0]}.{cc[1]}"])
        expected = any(runs_on(entry, cc) for entry in built)
        targets = {a for a in universe() if a.cc == cc}
        assert all((a in admitted) is expected for a in targets), (src, cc, built)


# --------------------------------------------------------------------------------------------
# if() tests on arch lists
# --------------------------------------------------------------------------------------------


def test_in_list_test_guards_nested_gates() -> None:
    detection = fixture("CMakeLists.txt")
    gate = gate_at(detection, 85)  # if("90a" IN_LIST CMAKE_CUDA_ARCHITECTURES)
    assert gate.directive == "if"
    assert names(gate.admitted) == {"sm_90a"}
    assert gate.then_span == Span(86, 88) and gate.else_span is None
    assert "builds csrc/hopper/wgmma.cu" in evidence_text(gate)
    nested = gate_at(detection, 87)
    assert nested.enclosing == (gate.id,)
    assert nested.location.span == Span(87, 88)


def test_negated_test_with_fatal_error_admits_what_it_requires() -> None:
    gate = gate_at(fixture("CMakeLists.txt"), 91)  # if(NOT "100f" IN_LIST …) message(FATAL_ERROR …)
    assert names(gate.admitted) == {"sm_100f"}
    assert gate.else_kind is ElseKind.ERROR
    assert "message(FATAL_ERROR): minibuild needs the sm_100f family target" in evidence_text(gate)


def test_matches_and_elseif() -> None:
    detection = fixture("CMakeLists.txt")
    blackwell = gate_at(detection, 95)
    assert names(blackwell.admitted) == {"sm_120", "sm_120a", "sm_120f"}
    assert blackwell.confidence is Confidence.INFERRED
    turing = gate_at(detection, 97)
    assert names(turing.admitted) == {"sm_75"}
    assert turing.depends_on == ("ENABLE_LEGACY",)
    assert turing.directive == "elseif"


@pytest.mark.parametrize(
    ("text", "admitted", "depends_on"),
    [
        ('if(CMAKE_CUDA_ARCHITECTURES STREQUAL "90a")\nendif()', {"sm_90a"}, ()),
        ('if("${CUDA_ARCHS}" MATCHES "10\\\\.0a")\nendif()', {"sm_100a"}, ()),
        ('if(CMAKE_CUDA_FLAGS MATCHES "compute_90a")\nendif()', {"sm_90a"}, ()),
        ('if(ENABLE_FP8 OR "8.9" IN_LIST CUDA_ARCHS)\nendif()', {"sm_89"}, ("NOT (ENABLE_FP8)",)),
        (
            'if((A AND "90a" IN_LIST X_ARCHS) OR "100a" IN_LIST X_ARCHS)\nendif()',
            {"sm_90a", "sm_100a"},
            ("A",),
        ),
        (
            'if(NOT "120a" IN_LIST CUDA_ARCHS)\n  set(X 1)\nendif()',
            {a.name for a in universe()} - {"sm_120a"},
            (),
        ),
    ],
)
def test_if_arch_tests(text: str, admitted: set[str], depends_on: tuple[str, ...]) -> None:
    gate = only_gate(text)
    assert names(gate.admitted) == admitted
    assert gate.depends_on == depends_on


def test_elseif_admits_only_what_earlier_branches_did_not() -> None:
    detection = detect(
        'if("90a" IN_LIST X_ARCHS)\n  set(A 1)\nelseif(X_ARCHS MATCHES "9.0")\n  set(B 1)\nendif()'
    )
    first, second = detection.gates
    assert names(first.admitted) == {"sm_90a"}
    assert names(second.admitted) == {"sm_90"}


def test_unreadable_regex_on_an_arch_list_is_skipped() -> None:
    detection = detect('if(CUDA_ARCHS MATCHES "[0-9]+a")\nendif()')
    assert detection.gates == ()
    assert "[0-9]+a" in detection.skips[0].reason


def test_version_conditions_are_dependencies_not_gates() -> None:
    detection = fixture("CMakeLists.txt")
    gate = gate_at(detection, 102)  # list(APPEND TORCH_CUDA_ARCH_LIST "11.0") under CUDA_VERSION >= 13.0
    assert names(gate.admitted) == {"sm_110"}
    assert gate.depends_on == ("CUDA_VERSION VERSION_GREATER_EQUAL 13.0",)
    default = gate_at(detection, 18)
    assert default.depends_on == ("NOT DEFINED CMAKE_CUDA_ARCHITECTURES",)
    assert names(default.admitted) == {"sm_80", "sm_90a", "sm_100f", "sm_103f"}


def test_condition_is_collapsed_and_truncated() -> None:
    gate = gate_at(fixture("CMakeLists.txt"), 108)
    assert gate.condition == (
        'set_target_properties(_C PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_ARCHITECTURES "90a;100a-real")'
    )
    assert gate.location.span == Span(108, 110)
    many = " ".join(["80-real"] * 200)
    long = only_gate(f"set(CMAKE_CUDA_ARCHITECTURES {many} 90a)")
    assert len(long.condition) <= 240 and long.condition.endswith("…")
    assert names(long.admitted) == {"sm_80", "sm_90a"}


# --------------------------------------------------------------------------------------------
# Tokenizer and blocks
# --------------------------------------------------------------------------------------------


def test_tokenizer_arguments() -> None:
    text = (
        'set(A [=[x]]y]=] "q\\"u\\\\o\\;te" -DX="a b" ${V}/f.cu)\n'
        'message(STATUS "line \\\n  joined")\n'
        'if((A AND B) OR C) # comment ( "\n'
        "endif()\n"
        "target_link_libraries(t #[[ a (bracket) comment\n spanning ]] lib)\n"
        "SET ( B 1 )\n"
    )
    commands, problems = tokenize(text)
    assert problems == []
    assert [c.name for c in commands] == ["set", "message", "if", "endif", "target_link_libraries", "set"]
    set_a = commands[0]
    assert [a.value for a in set_a.args] == ["A", "x]]y", 'q"u\\o\\;te', '-DX="a b"', "${V}/f.cu"]
    assert [a.quoting for a in set_a.args] == ["unquoted", "bracket", "quoted", "unquoted", "unquoted"]
    assert [a.has_reference for a in set_a.args] == [False, False, False, False, True]
    assert commands[1].args[1].value == "line   joined"
    assert commands[1].line == 2 and commands[1].end_line == 3
    assert [a.value for a in commands[2].args] == ["(", "A", "AND", "B", ")", "OR", "C"]
    assert [a.value for a in commands[4].args] == ["t", "lib"]
    assert (commands[4].line, commands[4].end_line) == (6, 7)
    assert commands[5].spelled == "SET" and commands[5].render() == "SET(B 1)"


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('set(A "open\n', 1, "unterminated quoted argument"),
        ("set(A [[open\n", 1, "unterminated bracket argument"),
        ("set(A b\n", 1, "no closing ')'"),
        ("#[[ open\n", 1, "unterminated bracket comment"),
        ("x\nset(A)", 1, "'x' is not followed by '('"),
        (")\n", 1, "unexpected ')' outside a command"),
    ],
)
def test_tokenizer_problems(text: str, line: int, reason: str) -> None:
    _, problems = tokenize(text)
    assert problems and problems[0][0] == line and reason in problems[0][1]


def test_blocks_repair_unbalanced_commands() -> None:
    text = "if(A)\n  foreach(x a)\nendif()\nelse()\nendwhile()\nfunction(f)\n"
    commands, _ = tokenize(text)
    nodes, problems = build_blocks(commands, 6)
    assert [p[1] for p in problems] == [
        "foreach() is closed by endif()",
        "else() without a matching if()",
        "endwhile() without a matching while()",
        "function() is never closed",
    ]
    assert len(nodes) == 2


def test_malformed_file_keeps_what_came_before() -> None:
    detection = detect('set(CUDA_ARCHS 90a)\nif(X)\n  set(TORCH_CUDA_ARCH_LIST "9.0a")\nset(B "open\n')
    assert [g.location.line for g in detection.gates] == [1, 3]
    reasons = [s.reason for s in detection.skips]
    assert "CMake syntax: unterminated quoted argument" in reasons
    assert "CMake syntax: if() is never closed" in reasons
    assert all(s.package == "pkg" for s in detection.skips)


FRAGMENTS = [
    "set(",
    "list(APPEND ",
    "if(",
    "elseif(",
    "else()",
    "endif()",
    "foreach(A ",
    "endforeach()",
    "function(f)",
    "endfunction()",
    "cuda_archs_loose_intersection(",
    "set_target_properties(t PROPERTIES ",
    ")",
    "(",
    '"',
    "[[",
    "]]",
    "[=[",
    "]=]",
    "#",
    "#[[",
    "\n",
    " ",
    "\\",
    ";",
    "${",
    "}",
    "$ENV{X}",
    "CMAKE_CUDA_ARCHITECTURES",
    "TORCH_CUDA_ARCH_LIST",
    "CUDA_ARCHITECTURES",
    "X_ARCHS",
    "90a",
    "9.0a",
    "12.0+PTX",
    "100f-real",
    "native",
    "-gencode arch=compute_90a,code=sm_90a",
    "-arch=sm_",
    "NOT",
    "AND",
    "OR",
    "IN_LIST",
    "MATCHES",
    "STREQUAL",
    "message(FATAL_ERROR x)",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3), max_size=40).map("".join))
def test_never_fails_on_any_input(text: str) -> None:
    detection = detect(text)
    assert not [s for s in detection.skips if "detector failed" in s.reason], detection.skips
    for gate in detection.gates:
        assert 1 <= gate.location.span.start <= gate.location.span.end


# --------------------------------------------------------------------------------------------
# File selection
# --------------------------------------------------------------------------------------------


def test_is_cmake_file() -> None:
    for path in ("CMakeLists.txt", "csrc/CMakeLists.txt", "cmake/utils.cmake", "x/FindCUDA.CMAKE"):
        assert is_cmake_file(path), path
    for path in ("CMakeLists.txt.in", "requirements.txt", "utils.cmake.in", "cmake/README.md", "setup.py"):
        assert not is_cmake_file(path), path


@pytest.mark.parametrize("path", FIXTURE_FILES)
def test_prefilter_misses_no_gate(path: str) -> None:
    text = (FIXTURE / path).read_text()
    assert CMAKE_PREFILTER.search(text.encode())
    # Every construct the detector reports names an architecture through the word "arch".
    without = re.sub("(?i)arch", "xxxx", text)
    assert not CMAKE_PREFILTER.search(without.encode())
    assert detect_cmake("minibuild", "1.0", path, without).gates == ()


def test_parse_entry() -> None:
    assert parse_entry("90a", "cmake") == ArchEntry("90a", Arch(9, 0, "a"), (9, 0), True, True)
    assert parse_entry("9.0+PTX", "torch") == ArchEntry("9.0+PTX", Arch(9, 0), (9, 0), True, True)
    assert parse_entry("90-virtual", "cmake") == ArchEntry("90-virtual", Arch(9, 0), (9, 0), False, True)
    assert parse_entry("compute_80", "torch") == ArchEntry("compute_80", Arch(8, 0), (8, 0), False, True)
    assert parse_entry("6.1", "torch") == ArchEntry("6.1", None, (6, 1), True, False)
    for bad in ("gfx90a", "x86_64", "9.5", "80a", "1200", "sm90x", "", "+PTX"):
        assert parse_entry(bad, "cmake") is None, bad


# --------------------------------------------------------------------------------------------
# A real release: vLLM 0.11.0's sdist
# --------------------------------------------------------------------------------------------

VLLM_SDIST = "vllm-0.11.0.tar.gz"
VLLM_SDIST_SHA256 = "f435a64c24e9c4178d657a76f8edd8548ddc444012f7d06a9f79ac3a6392bfae"


def fetch_sdist(project: str, filename: str, sha256: str) -> Path:
    """An sdist from the package index, cached by content next to liftgate's downloads.

    ``pip download --no-binary`` would run the sdist's build backend to read its metadata, and
    vLLM's needs torch, so the file is fetched from the index's JSON simple API instead.
    """
    from liftgate.sources.cache import cache_root

    dest = Path(cache_root()) / "test-downloads" / filename
    if dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == sha256:
        return dest
    index = os.environ.get("LIFTGATE_TEST_INDEX", "https://pypi.org/simple").rstrip("/")
    request = urllib.request.Request(
        f"{index}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    url = next(f["url"] for f in files if f["filename"] == filename)
    with urllib.request.urlopen(url, timeout=300) as response:
        data = response.read()
    assert hashlib.sha256(data).hexdigest() == sha256, f"{url} does not have the expected sha256"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        tmp.write(data)
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, dest)
    return dest


@pytest.fixture(scope="module")
def vllm_gates() -> dict[str, Detection]:
    from liftgate.sources import resolve_sources

    packages, _ = resolve_sources([str(fetch_sdist("vllm", VLLM_SDIST, VLLM_SDIST_SHA256))])
    (package,) = packages
    assert (package.name, package.version) == ("vllm", "0.11.0")
    results: dict[str, Detection] = {}
    for source in package.files:
        if not is_cmake_file(source.path):
            continue
        data = Path(source.fspath).read_bytes()
        if CMAKE_PREFILTER.search(data):
            results[source.path] = detect_cmake(package.name, package.version, source.path, data.decode())
        else:
            results[source.path] = Detection()
    return results


@pytest.mark.network
def test_vllm_0_11_0_cmake_gates(vllm_gates: dict[str, Detection]) -> None:
    results = vllm_gates
    assert sorted(results) == [
        "CMakeLists.txt",
        "cmake/cpu_extension.cmake",
        "cmake/external_projects/flashmla.cmake",
        "cmake/external_projects/vllm_flash_attn.cmake",
        "cmake/utils.cmake",
    ]
    assert all(d.skips == () for d in results.values())
    gates = [g for d in results.values() for g in d.gates]
    assert {path: len(d.gates) for path, d in results.items() if d.gates} == {
        # 19 before toolkit-version conditions were evaluated: the CUDA < 12.8 else() branch's
        # set(CUDA_SUPPORTED_ARCHS "7.0;…;9.0") (line 92) is never taken under CUDA 13.0.
        "CMakeLists.txt": 18,
        "cmake/external_projects/flashmla.cmake": 2,
    }
    assert len({g.id for g in gates}) == len(gates)
    sm90, sm90a, sm100a, sm120, sm120a = (
        parse_arch(n) for n in ("sm_90", "sm_90a", "sm_100a", "sm_120", "sm_120a")
    )

    def by_condition(condition: str) -> list[Gate]:
        return [g for g in gates if g.condition == condition]

    (machete,) = by_condition('cuda_archs_loose_intersection(MACHETE_ARCHS "9.0a" "${CUDA_ARCHS}")')
    assert machete.status(sm90a) is Status.ADMITTED and machete.status(sm90) is Status.ADMITTED
    assert machete.status(sm120) is Status.EXCLUDED and machete.status(sm100a) is Status.EXCLUDED
    assert machete.depends_on == (
        'VLLM_GPU_LANG STREQUAL "CUDA"',
        "assumes CUDA 13.0: ${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.0 is true",
    )
    evidence = evidence_text(machete)
    assert (
        "csrc/quantization/machete/generated/*.cu, csrc/quantization/machete/machete_pytorch.cu for 9.0a"
        in evidence
    )
    assert (
        "Not building Machete kernels as no compatible archs found in CUDA target architectures" in evidence
    )

    c3x_sm90 = by_condition('cuda_archs_loose_intersection(SCALED_MM_ARCHS "9.0a;" "${CUDA_ARCHS}")')
    assert [g.location.line for g in c3x_sm90] == [412, 531]
    assert len({g.id for g in c3x_sm90}) == 2
    assert "scaled_mm_c3x_sm90.cu" in evidence_text(c3x_sm90[0])
    assert "sparse_scaled_mm_c3x.cu" in evidence_text(c3x_sm90[1])
    for gate in c3x_sm90:
        assert gate.status(sm90a) is Status.ADMITTED and gate.status(sm120) is Status.EXCLUDED

    for gate in by_condition('cuda_archs_loose_intersection(SCALED_MM_ARCHS "12.0;12.0a" "${CUDA_ARCHS}")'):
        assert gate.status(sm120) is Status.ADMITTED and gate.status(sm120a) is Status.ADMITTED
        assert "scaled_mm_c3x_sm120.cu" in evidence_text(gate)

    # The else() of if(DEFINED CMAKE_CUDA_COMPILER_VERSION AND … VERSION_GREATER_EQUAL 12.8): not taken.
    assert by_condition('set(CUDA_SUPPORTED_ARCHS "7.0;7.2;7.5;8.0;8.6;8.7;8.9;9.0")') == []

    flashmla = results["cmake/external_projects/flashmla.cmake"].gates
    assert [g.condition for g in flashmla] == [
        "list(APPEND SUPPORT_ARCHS 9.0a)",
        "list(APPEND SUPPORT_ARCHS 10.0a)",
    ]
    assert flashmla[1].depends_on == (
        "assumes CUDA 13.0: ${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER 12.8 is true",
    )
    assert "splitkv_mla.cu" in evidence_text(flashmla[0])

    # What an RTX 5090 build of vLLM 0.11.0 leaves out, and what it keeps.
    admitted_120 = sorted(
        g.condition.split("(", 1)[1].split(" ", 1)[0] for g in gates if g.status(sm120) is Status.ADMITTED
    )
    assert admitted_120 == [
        "FP4_ARCHS",
        "MARLIN_ARCHS",
        "MARLIN_MOE_ARCHS",
        "SCALED_MM_2X_ARCHS",
        "SCALED_MM_ARCHS",
    ]
    assert all(g.status(sm120) is not Status.UNKNOWN for g in gates)
