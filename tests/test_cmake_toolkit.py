"""CMake conditions on the CUDA toolkit version, evaluated under the assumed toolkit.

A branch the assumed toolkit never takes gates nothing (and its arch lists are not read); a
branch it always takes is read as before, its gates saying what was assumed.
"""

from __future__ import annotations

import re

import pytest

from liftgate.detect.cmake import detect_cmake
from liftgate.detect.interface import Detection
from liftgate.model import Gate

# vLLM's shape (CMakeLists.txt of 0.11.0, lines 88-93, and its intersections).
VLLM_SHAPE = """\
if(DEFINED CMAKE_CUDA_COMPILER_VERSION AND
   CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8)
  set(CUDA_SUPPORTED_ARCHS "8.0;9.0;10.0")  # gate: new
else()
  set(CUDA_SUPPORTED_ARCHS "7.0;7.5;8.0;9.0")  # gate: old
endif()
cuda_archs_loose_intersection(CUDA_ARCHS "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")

if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0)
  cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0f;12.0f" "${CUDA_ARCHS}")  # gate: new
else()
  cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0a;12.0a" "${CUDA_ARCHS}")  # gate: old
endif()
if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8 AND SCALED_MM_ARCHS)
  list(APPEND VLLM_EXT_SRC "csrc/scaled_mm_sm100.cu")
else()
  if(NOT ${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8 AND SCALED_MM_ARCHS)
    message(STATUS "Not building scaled_mm_sm100 as CUDA Compiler version is not >= 12.8")
  endif()
endif()

if(CUDAToolkit_VERSION_MAJOR LESS 13)
  list(APPEND TORCH_CUDA_ARCH_LIST "7.0")  # gate: old
elseif(CUDA_VERSION VERSION_LESS 13.1)
  list(APPEND TORCH_CUDA_ARCH_LIST "9.0a")  # gate: new
else()
  list(APPEND TORCH_CUDA_ARCH_LIST "12.1a")  # gate: neither
endif()
"""


def detect(text: str, cuda_version: tuple[int, int] | None) -> Detection:
    return detect_cmake("pkg", "1.0", "CMakeLists.txt", text, cuda_version)


def marked(text: str, which: str) -> set[int]:
    return {i for i, line in enumerate(text.splitlines(), 1) if re.search(rf"#\s*gate: {which}\s*$", line)}


def at(detection: Detection, line: int) -> Gate:
    (gate,) = [g for g in detection.gates if g.location.line == line]
    return gate


@pytest.mark.parametrize(("cuda_version", "taken"), [((13, 0), "new"), ((12, 4), "old")])
def test_only_the_taken_branch_gates(cuda_version: tuple[int, int], taken: str) -> None:
    detection = detect(VLLM_SHAPE, cuda_version)
    assert detection.skips == ()
    assert {g.location.line for g in detection.gates} == marked(VLLM_SHAPE, taken)


def test_without_an_assumed_toolkit_every_branch_gates() -> None:
    detection = detect(VLLM_SHAPE, None)
    every = marked(VLLM_SHAPE, "new") | marked(VLLM_SHAPE, "old") | marked(VLLM_SHAPE, "neither")
    assert {g.location.line for g in detection.gates} == every


def test_gates_say_what_was_assumed() -> None:
    new = detect(VLLM_SHAPE, (13, 0))
    assert at(new, 3).depends_on == (
        "assumes CUDA 13.0: DEFINED CMAKE_CUDA_COMPILER_VERSION AND "
        "CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8 is true",
    )
    scaled = at(new, 10)
    assert scaled.depends_on == (
        "assumes CUDA 13.0: ${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 13.0 is true",
        "assumes CUDA 13.0: ${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8 is true",
    )
    assert "scaled_mm_sm100.cu" in " ".join(e.text for e in scaled.evidence)
    assert at(new, 25).depends_on == (
        "assumes CUDA 13.0: CUDAToolkit_VERSION_MAJOR LESS 13 is false",
        "assumes CUDA 13.0: CUDA_VERSION VERSION_LESS 13.1 is true",
    )
    old = detect(VLLM_SHAPE, (12, 4))
    assert at(old, 5).depends_on == (
        "assumes CUDA 12.4: DEFINED CMAKE_CUDA_COMPILER_VERSION AND "
        "CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.8 is false",
    )
    assert at(old, 23).depends_on == ("assumes CUDA 12.4: CUDAToolkit_VERSION_MAJOR LESS 13 is true",)


@pytest.mark.parametrize(
    "condition",
    [
        "CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER 13.0",  # 13.0.x: the patch level is unknown
        "CUDA_VERSION VERSION_EQUAL 13.0",
        "CUDA_VERSION VERSION_LESS_EQUAL 13.0.2",
        "CUDA_VERSION GREATER 12",  # a plain comparison of the whole version: not read
        "MY_CUDA_VERSION VERSION_GREATER_EQUAL 12.8",
        "CUDA_VERSION VERSION_GREATER_EQUAL ${MIN_CUDA}",
    ],
)
def test_what_the_toolkit_does_not_decide_stays_as_before(condition: str) -> None:
    text = f'if({condition})\n  set(A_ARCHS "9.0a")\nelse()\n  set(A_ARCHS "8.0")\nendif()\n'
    assert detect(text, (13, 0)) == detect(text, None)
    assert len(detect(text, (13, 0)).gates) == 2


def test_a_condition_the_toolkit_decides_in_part_names_that_part() -> None:
    text = 'if(CUDA_VERSION VERSION_GREATER_EQUAL 12.8 AND USE_FOO)\n  set(A_ARCHS "9.0a")\nendif()\n'
    (gate,) = detect(text, (13, 0)).gates
    assert gate.depends_on == (
        "assumes CUDA 13.0: CUDA_VERSION VERSION_GREATER_EQUAL 12.8 is true",
        "USE_FOO",
    )
    (before,) = detect(text, None).gates
    assert before.depends_on == ("CUDA_VERSION VERSION_GREATER_EQUAL 12.8", "USE_FOO")
    assert before.id == gate.id


@pytest.mark.parametrize(
    ("condition", "value"),
    [
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 13.0", True),
        ("CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 13.0", False),
        ('"${CUDA_VERSION}" VERSION_GREATER 12.9.1', True),
        ("12.8 VERSION_LESS_EQUAL CUDAToolkit_VERSION", True),
        ("CUDA_VERSION_MINOR EQUAL 0", True),
        ("CUDA_VERSION_MAJOR GREATER_EQUAL 14", False),
        ("CUDAToolkit_VERSION_MAJOR VERSION_LESS 13.1", True),
        ("NOT CUDA_VERSION VERSION_LESS 12.0", True),
        ("CUDA_VERSION VERSION_LESS 12.0 OR USE_FOO", None),
        ("CUDA_VERSION VERSION_GREATER_EQUAL 12.0 OR USE_FOO", True),
        ("CUDA_VERSION VERSION_LESS 12.0 AND USE_FOO", False),
    ],
)
def test_toolkit_comparisons(condition: str, value: bool | None) -> None:
    text = f'if({condition})\n  set(A_ARCHS "9.0a")\nelse()\n  set(A_ARCHS "8.0")\nendif()\n'
    lines = {g.location.line for g in detect(text, (13, 0)).gates}
    assert lines == {True: {2}, False: {4}, None: {2, 4}}[value]


def test_a_version_variable_the_file_sets_is_not_the_toolkit_s() -> None:
    text = (
        "set(CUDA_VERSION 11.8)\n"
        'if(CUDA_VERSION VERSION_GREATER_EQUAL 12.0)\n  set(A_ARCHS "9.0a")\n'
        'else()\n  set(A_ARCHS "8.0")\nendif()\n'
    )
    assert {g.location.line for g in detect(text, (13, 0)).gates} == {3, 5}


def test_an_intersection_tested_after_a_version_if_else_takes_the_taken_branch() -> None:
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
    new, nested = detect(text, (13, 0)).gates
    assert new.location.line == 2
    assert "adds -DENABLE_TOPK=1" in " ".join(e.text for e in new.evidence)
    assert nested.enclosing == (new.id,)
    (old, nested) = detect(text, (12, 8)).gates
    assert old.location.line == 4
    assert nested.enclosing == (old.id,)
