"""The typed facts of CMake gates: what the admitted block builds (`BuildTarget`) and the ``-D``
flags it passes (`BuildFlag`).

Evidence says ``builds a.cu, b.cu … and 3 more``; ``builds`` lists every source as written.
``passes`` holds every ``-DNAME[=VALUE]`` of the block, with its line: at least what a regex over
the block's lines finds (``-D\\s*NAME``), comments aside.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from liftgate.detect.cmake import build_flags, detect_cmake, tokenize
from liftgate.detect.interface import Detection
from liftgate.model import BuildFlag, BuildTarget, Gate, GateKind

PATH = "CMakeLists.txt"
SOURCES = [f"csrc/quantization/fp4/nvfp4_part{k}.cu" for k in range(1, 10)]


def detect(text: str, cuda_version: tuple[int, int] | None = (13, 0)) -> Detection:
    return detect_cmake("vllm", "0.33.0", PATH, textwrap.dedent(text), cuda_version)


def line_of(text: str, needle: str) -> int:
    found = [n for n, line in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in line]
    assert len(found) == 1, (needle, found)
    return found[0]


def gate_of(detection: Detection, needle: str) -> Gate:
    found = [g for g in detection.gates if needle in g.condition]
    assert len(found) == 1, [g.condition for g in detection.gates]
    return found[0]


# vLLM's shape: an intersection, then the if(OUT) block that builds its sources and adds flags.
VLLM_FP4 = (
    """\
    set(CUDA_ARCHS "9.0a;10.0a;12.0a")
    cuda_archs_loose_intersection(FP4_ARCHS "10.0f;11.0f" "${CUDA_ARCHS}")
    if(FP4_ARCHS)
      set(SRCS
"""
    + "".join(f'        "{s}"\n' for s in SOURCES)
    + """\
      )
      set_gencode_flags_for_srcs(SRCS "${SRCS}" CUDA_ARCHS "${FP4_ARCHS}")
      list(APPEND VLLM_EXT_SRC "${SRCS}")
      list(APPEND VLLM_GPU_FLAGS "-DENABLE_A=1 -DENABLE_B")
      message(STATUS "Building NVFP4 for archs: ${FP4_ARCHS}")
    else()
      message(STATUS "Not building NVFP4")
    endif()
    """
)


def test_intersection_gate_builds_every_source_of_its_block() -> None:
    detection = detect(VLLM_FP4)
    gate = gate_of(detection, "cuda_archs_loose_intersection(FP4_ARCHS")
    assert gate.kind is GateKind.CMAKE
    [target] = gate.builds
    assert target == BuildTarget(
        "CMake target", "10.0f;11.0f", tuple(SOURCES), False, PATH, line_of(VLLM_FP4, "if(FP4_ARCHS)")
    )
    # The evidence, for people, still shortens the list.
    [builds] = [e for e in gate.evidence if e.text.startswith("builds ")]
    assert builds.text.endswith("and 3 more for 10.0f;11.0f")


def test_flags_in_one_quoted_string_are_each_passed_with_their_line() -> None:
    gate = gate_of(detect(VLLM_FP4), "cuda_archs_loose_intersection(FP4_ARCHS")
    line = line_of(VLLM_FP4, "-DENABLE_A=1 -DENABLE_B")
    assert gate.passes == (BuildFlag("ENABLE_A", "1", PATH, line), BuildFlag("ENABLE_B", None, PATH, line))
    assert any(e.text == "adds -DENABLE_A=1, -DENABLE_B" for e in gate.evidence)


def test_sm100_block_of_vllm_passes_its_flag() -> None:
    text = """\
    cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0f;10.7f;11.0f" "${CUDA_ARCHS}")
    if(CUDA_VERSION VERSION_GREATER_EQUAL 12.8 AND SCALED_MM_ARCHS)
      set(SRCS "csrc/quantization/w8a8/cutlass/scaled_mm_c3x_sm100.cu")
      list(APPEND VLLM_EXT_SRC "${SRCS}")
      list(APPEND VLLM_GPU_FLAGS "-DENABLE_SCALED_MM_SM100=1")
      message(STATUS "Building scaled_mm_c3x_sm100 for archs: ${SCALED_MM_ARCHS}")
    endif()
    """
    gate = gate_of(detect(text), "SCALED_MM_ARCHS")
    line = line_of(text, "-DENABLE_SCALED_MM_SM100=1")
    assert gate.passes == (BuildFlag("ENABLE_SCALED_MM_SM100", "1", PATH, line),)
    assert [t.sources for t in gate.builds] == [("csrc/quantization/w8a8/cutlass/scaled_mm_c3x_sm100.cu",)]


def test_if_gate_builds_without_a_name_and_passes_flags_of_nested_blocks() -> None:
    text = """\
    if("9.0a" IN_LIST CUDA_ARCHS)
      list(APPEND SRCS csrc/hopper.cu csrc/hopper_gemm.cu)
      foreach(SRC ${SRCS})
        if(SRC MATCHES "gemm")
          set_source_files_properties(${SRC} PROPERTIES COMPILE_OPTIONS -DGEMM_TILE=128)
        endif()
      endforeach()
      target_compile_options(ext PRIVATE -D HOPPER "-DNAME=\\"x\\"")
    endif()
    """
    gate = gate_of(detect(text), "IN_LIST CUDA_ARCHS")
    assert gate.builds == (
        BuildTarget("CMake target", None, ("csrc/hopper.cu", "csrc/hopper_gemm.cu"), False, PATH, 1),
    )
    assert [(f.macro, f.value, f.line) for f in gate.passes] == [
        ("GEMM_TILE", "128", line_of(text, "GEMM_TILE")),
        ("HOPPER", None, line_of(text, "HOPPER")),
        ("NAME", '"x"', line_of(text, "HOPPER")),
    ]


def test_defines_alone_make_a_build_target_with_no_sources() -> None:
    text = """\
    cuda_archs_loose_intersection(TOPK_ARCHS "9.0a;10.0f" "${CUDA_ARCHS}")
    if(TOPK_ARCHS)
      list(APPEND VLLM_GPU_FLAGS "-DVLLM_ENABLE_TOPK=1")
    endif()
    """
    gate = gate_of(detect(text), "TOPK_ARCHS")
    assert gate.builds == (BuildTarget("CMake target", "9.0a;10.0f", (), False, PATH, 2),)
    assert gate.passes == (BuildFlag("VLLM_ENABLE_TOPK", "1", PATH, 3),)


def test_source_list_set_earlier_carries_what_its_block_builds() -> None:
    text = """\
    set(MARLIN_ARCHS "8.0;8.6;8.9")
    cuda_archs_loose_intersection(MARLIN_OUT "${MARLIN_ARCHS}" "${CUDA_ARCHS}")
    if(MARLIN_OUT)
      list(APPEND VLLM_EXT_SRC csrc/marlin.cu)
      list(APPEND VLLM_GPU_FLAGS "-DENABLE_MARLIN")
    endif()
    """
    gate = gate_of(detect(text), "set(MARLIN_ARCHS")
    assert gate.builds == (
        BuildTarget("CMake target", "${MARLIN_ARCHS}", ("csrc/marlin.cu",), False, PATH, 3),
    )
    assert gate.passes == ()  # the flag stays with the block; this gate admits none of its own


def test_flags_of_a_branch_the_assumed_toolkit_never_takes_still_count() -> None:
    text = """\
    cuda_archs_loose_intersection(FA3_ARCHS "9.0a" "${CUDA_ARCHS}")
    if(FA3_ARCHS)
      list(APPEND VLLM_EXT_SRC csrc/fa3.cu)
      if(CUDA_VERSION VERSION_LESS 12.0)
        list(APPEND VLLM_GPU_FLAGS "-DFA3_OLD_TOOLKIT")
      endif()
    endif()
    """
    for toolkit in ((13, 0), (11, 8), None):
        gate = gate_of(detect(text, toolkit), "FA3_ARCHS")
        assert gate.passes == (BuildFlag("FA3_OLD_TOOLKIT", None, PATH, 5),), toolkit


def test_negated_test_passes_the_flags_of_the_branches_after_it() -> None:
    text = """\
    cuda_archs_loose_intersection(MLA_ARCHS "10.0f" "${CUDA_ARCHS}")
    if(NOT MLA_ARCHS)
      message(STATUS "no MLA")
    else()
      list(APPEND VLLM_EXT_SRC csrc/mla.cu)
      list(APPEND VLLM_GPU_FLAGS -DENABLE_MLA=1)
    endif()
    """
    gate = gate_of(detect(text), "MLA_ARCHS")
    assert gate.passes == (BuildFlag("ENABLE_MLA", "1", PATH, 6),)
    assert [t.sources for t in gate.builds] == [("csrc/mla.cu",)]


def test_gates_without_a_block_have_no_facts() -> None:
    text = """\
    set(CMAKE_CUDA_ARCHITECTURES 90a 100a)
    list(APPEND CUDA_FLAGS "-gencode arch=compute_90a,code=sm_90a" "-DFLAG_BESIDE_GENCODE")
    """
    detection = detect(text)
    assert len(detection.gates) == 2
    assert all(g.builds == () and g.passes == () for g in detection.gates)


_OLD_LINK = re.compile(r"-D\s*([A-Za-z_]\w*)")


@pytest.mark.parametrize(
    "text", [VLLM_FP4, 'if("9.0a" IN_LIST CUDA_ARCHS)\n  set(F "-DX=1;-DY" -D Z)\nendif()\n']
)
def test_passes_hold_at_least_what_a_regex_over_the_block_finds(text: str) -> None:
    """What the build-flag link once read from the block's raw lines is found from its commands."""
    lines = textwrap.dedent(text).splitlines()
    for gate in detect(text).gates:
        if gate.then_span is None:
            continue
        span = gate.then_span
        regex = {(m, n) for n in range(span.start, span.end + 1) for m in _OLD_LINK.findall(lines[n - 1])}
        assert regex <= {(f.macro, f.line) for f in gate.passes}, gate.condition


def test_build_flags_of_one_command() -> None:
    text = (
        'target_compile_definitions(t PRIVATE "-DA=1 -DB" -DC=\\;x [[-DD=bracket]]\n'
        '  "-DE\n-DF=2" -D G=3 "-D" "H" [==[\n-DK=v]==])\n'
    )
    [command], problems = tokenize(text)
    assert problems == []
    assert [(f.macro, f.value, f.line) for f in build_flags(command, "m.cmake")] == [
        ("A", "1", 1),
        ("B", None, 1),
        ("C", "\\;x", 1),
        ("D", "bracket", 1),
        ("E", None, 2),
        ("F", "2", 3),
        ("G", "3", 3),
        ("H", None, 3),
        ("K", "v", 4),
    ]
