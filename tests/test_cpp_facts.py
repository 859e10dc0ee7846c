"""The typed fact of cpp-runtime gates: the build macros (``-D``) their host code is compiled under.

A host gate inside ``#if defined ENABLE_X`` says so in ``depends_on`` (for people) and carries
``build_macros == ("ENABLE_X",)``; the build-flag link pairs it with the CMake gate whose
``passes`` hold ``-DENABLE_X``.
"""

from __future__ import annotations

import textwrap

from liftgate.detect.buildflags import link_build_flags
from liftgate.detect.cmake import detect_cmake
from liftgate.detect.cpp_runtime import HelperIndex, detect_cpp_runtime
from liftgate.detect.cuda import host_regions
from liftgate.model import BuildFlag, Gate

PATH = "csrc/quantization/scaled_mm_entry.cu"

ENTRY = """\
#include <cstdint>
int32_t get_sm_version_num();

void cutlass_scaled_mm(int n) {
  int32_t version_num = get_sm_version_num();
#if defined ENABLE_X && ENABLE_X
  if (version_num >= 100) {
    cutlass_scaled_mm_sm100(n);
    return;
  }
#endif
#if defined ENABLE_A
  #if defined ENABLE_B && ENABLE_A
  if (version_num >= 90) {
    cutlass_scaled_mm_sm90(n);
    return;
  }
  #endif
#endif
  if (version_num >= 80) {
    cutlass_scaled_mm_sm80(n);
  }
}
"""


def detect(text: str = ENTRY) -> dict[str, Gate]:
    regions = host_regions(PATH, text, (13, 0))
    assert regions is not None
    index = HelperIndex()
    index.add_source(PATH, text, regions)
    index.resolve()
    detection = detect_cpp_runtime("vllm", "0.33.0", PATH, text, regions, index.export())
    assert detection.skips == ()
    return {g.condition: g for g in detection.gates}


def test_gate_inside_a_build_flag_carries_the_macro() -> None:
    gate = detect()["version_num >= 100"]
    assert gate.build_macros == ("ENABLE_X",)
    # The sentence stays beside the fact.
    [entry] = gate.depends_on
    assert entry.startswith(
        "inside #if (defined ENABLE_X && ENABLE_X) (line 6): ENABLE_X set by the build (-D)"
    )


def test_nested_conditions_give_every_macro_once_outermost_first() -> None:
    gate = detect()["version_num >= 90"]
    assert gate.build_macros == ("ENABLE_A", "ENABLE_B")
    assert len(gate.depends_on) == 2  # one sentence per #if


def test_gate_outside_any_flag_has_none() -> None:
    gate = detect()["version_num >= 80"]
    assert gate.build_macros == () and gate.depends_on == ()


def test_the_link_pairs_the_macro_with_the_cmake_gate_that_passes_it() -> None:
    cmake = textwrap.dedent(
        """\
        cuda_archs_loose_intersection(SCALED_MM_ARCHS "10.0f;11.0f" "${CUDA_ARCHS}")
        if(SCALED_MM_ARCHS)
          list(APPEND VLLM_EXT_SRC "csrc/quantization/scaled_mm_sm100.cu")
          list(APPEND VLLM_GPU_FLAGS "-DENABLE_X=1 -DENABLE_OTHER")
        endif()
        """
    )
    [cmake_gate] = detect_cmake("vllm", "0.33.0", "CMakeLists.txt", cmake).gates
    assert BuildFlag("ENABLE_X", "1", "CMakeLists.txt", 4) in cmake_gate.passes
    host = detect()
    linked = {g.condition: g for g in link_build_flags([cmake_gate, *host.values()])}
    assert cmake_gate.id in linked["version_num >= 100"].enclosing
    assert any(
        e.text.startswith("ENABLE_X is passed by the build (-DENABLE_X)")
        and (e.path, e.line) == ("CMakeLists.txt", 4)
        for e in linked["version_num >= 100"].evidence
    )
    assert cmake_gate.id not in linked["version_num >= 90"].enclosing
