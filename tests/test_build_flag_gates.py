"""Build flags as arch facts, and switches: ``tests/fixtures/cuda/flagpkg``.

A ``-D`` flag the package's CMake passes only inside the block of an arch gate is defined exactly
for the targets that gate admits, so ``#if defined ENABLE_X && ENABLE_X`` is a cuda-pp gate with
that admitted set, its evidence naming the CMake gate (vLLM's ``ENABLE_NVFP4_SM120``). A condition
that tests the arch but is false for every target only because a flag nothing passes is taken as
undefined (CUTLASS's ``CUTLASS_ENABLE_GDC_FOR_SM90``) is a switch gate. Every line where a cuda-pp
gate must start is marked ``// gate`` (``// switch gate``), every near miss ``// not a gate``.
"""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path

import pytest

import liftgate
from liftgate.arch.core import ArchSet, universe
from liftgate.arch.parse import parse_arch
from liftgate.detect.buildflags import arch_flags
from liftgate.model import BuildFlag, Gate, GateKind, Location, Report, Span, Status, SwitchKind

TREE = Path(__file__).parent / "fixtures" / "cuda" / "flagpkg"
GATE = re.compile(r"//\s*(?:switch )?gate\b")
NOT_A_GATE = re.compile(r"\bnot a gate\b")


def archs(*names: str) -> ArchSet:
    return ArchSet(parse_arch(n) for n in names)


@cache
def report() -> Report:
    return liftgate.scan([str(TREE)], ["sm_120"], use_cache=False)


def cuda_gates(path: str) -> list[Gate]:
    return [g for g in report().gates if g.kind is GateKind.CUDA_PP and g.location.path == path]


def gate_at(path: str, line: int, kind: GateKind = GateKind.CUDA_PP) -> Gate:
    found = [
        g for g in report().gates if g.kind is kind and g.location.path == path and g.location.line == line
    ]
    assert len(found) == 1, (path, line, [g.location for g in report().gates])
    return found[0]


def line_of(path: str, needle: str) -> int:
    """The line where ``needle`` starts (it may span lines); exactly one."""
    text = (TREE / path).read_text()
    found = [text.count("\n", 0, k) + 1 for k in range(len(text)) if text.startswith(needle, k)]
    assert len(found) == 1, (path, needle, found)
    return found[0]


SOURCES = ["csrc/fp4_entry.cu", "csrc/switches.cu", "csrc/near_misses.cu", "include/flagpkg/sparse.h"]


def test_every_source_is_checked() -> None:
    on_disk = {p.relative_to(TREE).as_posix() for p in TREE.rglob("*") if p.suffix in (".cu", ".h")}
    assert on_disk == set(SOURCES)


@pytest.mark.parametrize("path", SOURCES)
def test_markers(path: str) -> None:
    """Each cuda-pp gate starts on a ``gate`` mark, and each mark has one; no gate on a near miss."""
    lines = (TREE / path).read_text().splitlines()
    wanted = {n for n, text in enumerate(lines, 1) if GATE.search(text) and not NOT_A_GATE.search(text)}
    unwanted = {n for n, text in enumerate(lines, 1) if NOT_A_GATE.search(text)}
    found = {g.location.line for g in cuda_gates(path)}
    assert found == wanted, f"gates at {sorted(found)}, marks at {sorted(wanted)}"
    assert not found & unwanted
    assert not [s for s in report().skips if s.path.startswith(path)]


def test_a_flag_passed_only_in_an_arch_gate_block_admits_what_that_gate_admits() -> None:
    path = "csrc/fp4_entry.cu"
    cmake = gate_at("CMakeLists.txt", line_of("CMakeLists.txt", 'FP4_SM120_ARCHS "12.0a'), GateKind.CMAKE)
    for needle in (
        "#ifdef ENABLE_FP4_SM120",
        "#if defined(ENABLE_FP4_SM120) && ENABLE_FP4_SM120  // gate: admits sm_120 sm_120a sm_121 sm_121a\n  if (sm >= 120 && sm < 130) {",
    ):
        g = gate_at(path, line_of(path, needle))
        assert (
            g.admitted
            == cmake.admitted
            == archs("sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f")
        )
        assert g.unknown == ArchSet.none()
        assert g.host is not None and g.host.value == "unknown"  # a build for several targets
        (origin,) = g.macros
        assert origin.build_gate == cmake.id
        assert (origin.path, origin.line) == (
            "CMakeLists.txt",
            line_of("CMakeLists.txt", "-DENABLE_FP4_SM120=1"),
        )
        assert origin.condition == cmake.condition
        text = "\n".join(e.render() for e in g.evidence)
        assert f"only where CMake gate {cmake.id} admits the target" in text
        assert g.status(parse_arch("sm_120")) is Status.ADMITTED
        assert g.status(parse_arch("sm_100a")) is Status.EXCLUDED


def test_elif_of_two_flags_gets_what_the_first_leaves() -> None:
    path = "csrc/fp4_entry.cu"
    elif_gate = gate_at(path, line_of(path, "#elif defined(ENABLE_FP4_SM100)"))
    assert elif_gate.admitted == archs("sm_100", "sm_100a", "sm_100f", "sm_103", "sm_103a", "sm_103f")
    rest = gate_at(path, line_of(path, "#if !defined(ENABLE_FP4_SM100)"))
    assert rest.admitted == ArchSet.all() - archs(
        "sm_100", "sm_100a", "sm_100f", "sm_103", "sm_103a", "sm_103f",
        "sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f",
    )  # fmt: skip


def test_host_code_under_a_flag_names_the_cuda_gate_and_the_cmake_gate() -> None:
    path = "csrc/fp4_entry.cu"
    host = gate_at(path, line_of(path, "if (sm >= 120 && sm < 130) {"), GateKind.CPP_RUNTIME)
    flag = gate_at(
        path,
        line_of(
            path,
            "#if defined(ENABLE_FP4_SM120) && ENABLE_FP4_SM120  // gate: admits sm_120 sm_120a sm_121 sm_121a\n  if (sm >= 120 && sm < 130) {",
        ),
    )
    cmake = gate_at("CMakeLists.txt", line_of("CMakeLists.txt", 'FP4_SM120_ARCHS "12.0a'), GateKind.CMAKE)
    assert set(host.enclosing) == {flag.id, cmake.id}
    assert host.build_macros == ("ENABLE_FP4_SM120",)


def test_switch_gate_is_off_for_every_target_and_says_what_setting_it_opens() -> None:
    path = "csrc/switches.cu"
    g = gate_at(path, line_of(path, "FLAGPKG_ENABLE_GDC_FOR_SM90) &&"))
    assert g.admitted == ArchSet.none() and g.unknown == ArchSet.none()
    assert all(g.status(a) is Status.EXCLUDED for a in universe())
    (switch,) = g.switches
    assert switch.name == "FLAGPKG_ENABLE_GDC_FOR_SM90"
    assert switch.kind is SwitchKind.BUILD_FLAG
    assert switch.setting == "-DFLAGPKG_ENABLE_GDC_FOR_SM90"
    assert switch.admitted == ArchSet(a for a in universe() if a.major * 10 + a.minor >= 90)
    text = "\n".join(e.render() for e in g.evidence)
    assert "unless the build passes -DFLAGPKG_ENABLE_GDC_FOR_SM90" in text


def test_switch_gate_round_trips_through_json_and_the_cache(tmp_path: Path) -> None:
    import jsonschema

    from liftgate.report.interface import RenderOptions, Show
    from liftgate.report.json_format import load_schema, report_to_dict

    document = report_to_dict(report(), RenderOptions(show=Show.ALL))
    jsonschema.validate(document, load_schema())
    facts = {(g["path"], g["line"]): g["facts"] for g in document["gates"]}
    switches = facts[("csrc/switches.cu", line_of("csrc/switches.cu", "FLAGPKG_ENABLE_GDC_FOR_SM90) &&"))]
    assert switches["switches"][0]["setting"] == "-DFLAGPKG_ENABLE_GDC_FOR_SM90"
    flagged = facts[("csrc/fp4_entry.cu", line_of("csrc/fp4_entry.cu", "#ifdef ENABLE_FP4_SM120"))]
    assert flagged["macros"][0]["build_gate"].startswith("cm-")
    cold = liftgate.scan([str(TREE)], ["sm_120"], cache_dir=str(tmp_path))
    warm = liftgate.scan([str(TREE)], ["sm_120"], cache_dir=str(tmp_path))
    assert cold.gates == warm.gates == report().gates


def test_a_flag_another_build_file_passes_is_no_longer_an_arch_fact(tmp_path: Path) -> None:
    tree = tmp_path / "flagpkg"
    shutil.copytree(TREE, tree)
    path = "csrc/fp4_entry.cu"
    line = line_of(path, "#ifdef ENABLE_FP4_SM120")
    (tree / "build.sh").write_text("nvcc -DENABLE_FP4_SM120=1 csrc/fp4_entry.cu\n")
    found = liftgate.scan([str(tree)], ["sm_120"], use_cache=False)
    assert not [g for g in found.gates if g.location.path == path and g.location.line == line]


def _cmake_gate(variable: str, admitted: ArchSet, *flags: tuple[str, int]) -> Gate:
    return Gate(
        id=f"cm-{variable.lower()}", kind=GateKind.CMAKE, location=Location("p", "1", "CMakeLists.txt", Span(1, 1)),
        condition=f'cuda_archs_loose_intersection({variable} "x" "${{CUDA_ARCHS}}")',
        admitted=admitted, unknown=ArchSet.none(), host=None, then_span=None, else_span=None,
        else_kind=liftgate.model.ElseKind.NONE,
        passes=tuple(BuildFlag(m, "1", "CMakeLists.txt", line) for m, line in flags),
    )  # fmt: skip


def test_arch_flags_reads_only_flags_every_pass_of_which_the_gates_account_for() -> None:
    a = _cmake_gate("A_ARCHS", archs("sm_90"), ("X", 2))
    b = _cmake_gate("B_ARCHS", archs("sm_100"), ("X", 5), ("Y", 6))
    text = "\n".join(
        [
            "if(A_ARCHS)", '  "-DX=1"', "endif()",
            "if(${CMAKE_CUDA_COMPILER_VERSION} VERSION_GREATER_EQUAL 12.8 AND B_ARCHS)", '  "-DX=1"', '  "-DY=1"',
            "endif()", '"-DY=1"  # unconditional',
        ]
    )  # fmt: skip
    (x,) = arch_flags({"CMakeLists.txt": (a, b)}, {"CMakeLists.txt": text}, ())
    assert x.macro == "X" and x.admitted == archs("sm_90", "sm_100")
    assert [s.gate for s in x.setters] == ["cm-a_archs", "cm-b_archs"]
    assert arch_flags({"CMakeLists.txt": (a, b)}, {"CMakeLists.txt": text}, ("X",)) == ()
    other = {"CMakeLists.txt": text, "setup.py": 'define_macros=[("X", "1")]'}
    assert arch_flags({"CMakeLists.txt": (a, b)}, other, ()) == ()


def test_a_flag_under_two_arch_lists_is_no_arch_fact() -> None:
    """Nested ``if(SM90_ARCHS)`` / ``if(SM100_ARCHS)``, or ``if(SM100_ARCHS AND SM90_ARCHS)``: a build
    for one target defines neither flag, whichever gate the CMake reader credits with the -D."""
    from liftgate.detect.cmake import detect_cmake

    text = "\n".join(
        [
            'cuda_archs_loose_intersection(SM90_ARCHS "9.0a" "${CUDA_ARCHS}")',
            'cuda_archs_loose_intersection(SM100_ARCHS "10.0a" "${CUDA_ARCHS}")',
            "if(SM90_ARCHS)", "  if(SM100_ARCHS)", '    list(APPEND FLAGS "-DENABLE_BOTH=1")', "  endif()", "endif()",
            "if(SM100_ARCHS AND SM90_ARCHS)", '  list(APPEND FLAGS "-DENABLE_AND=1")', "endif()",
            "if(SM100_ARCHS OR SM90_ARCHS)", '  list(APPEND FLAGS "-DENABLE_OR=1")', "endif()",
        ]
    )  # fmt: skip
    gates = detect_cmake("p", "1", "CMakeLists.txt", text).gates
    assert any(g.passes for g in gates)  # the reader credits some gate with the flags
    assert arch_flags({"CMakeLists.txt": gates}, {"CMakeLists.txt": text}, ()) == ()


def test_host_code_under_flags_is_there_exactly_for_the_targets_whose_build_compiles_it() -> None:
    """``fp4_supported()`` returns true only where the branch for the GPU is compiled in: sm_110
    passes ``sm >= 100 && sm < 120`` but no build for it passes -DENABLE_FP4_SM100."""
    path = "csrc/fp4_entry.cu"
    check = gate_at(path, line_of(path, "TORCH_CHECK(fp4_supported()"), GateKind.CPP_RUNTIME)
    blackwell = archs("sm_100", "sm_100a", "sm_100f", "sm_103", "sm_103a", "sm_103f")
    geforce = archs("sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f")
    assert check.admitted == blackwell | geforce
    assert parse_arch("sm_110") not in check.admitted | check.unknown
    branch = gate_at(path, line_of(path, "if (sm >= 100 && sm < 120) return true;"), GateKind.CPP_RUNTIME)
    sm110 = archs("sm_110", "sm_110a", "sm_110f")
    assert branch.admitted == blackwell | sm110  # the condition as written
    assert branch.reach == blackwell  # but only the builds for 10.0 and 10.3 compile it
    said = "\n".join(e.render() for e in branch.evidence if e.outcome)
    assert "admits sm_110, sm_110a, sm_110f, but no build for those targets compiles" in said
    host = gate_at(path, line_of(path, "if (sm >= 120 && sm < 130) {"), GateKind.CPP_RUNTIME)
    assert host.reach == geforce and not [e for e in host.evidence if e.outcome and "no build" in e.text]
    assert check.reach == blackwell | geforce


def test_lifting_a_build_flag_if_names_the_cmake_gate_that_decides_it() -> None:
    from liftgate.judge.verdict import judge_scan
    from liftgate.model import HazardKind

    judged = judge_scan(liftgate.scan([str(TREE)], ["sm_90a"], use_cache=False))
    path = "csrc/fp4_entry.cu"
    line = line_of(path, "#if defined ENABLE_FP4_SM100 && ENABLE_FP4_SM100")
    (gate,) = [g for g in judged.gates if g.location.path == path and g.location.line == line]
    (verdict,) = [v for v in judged.verdicts if v.gate_id == gate.id]
    (hazard,) = [h for h in verdict.hazards if h.kind is HazardKind.BUILD_FLAG]
    assert hazard.gates == (gate.macros[0].build_gate,)
    assert "-DENABLE_FP4_SM100" in hazard.text and "lift it too" in hazard.text


def test_many_passes_of_a_flag_are_counted_in_one_pass() -> None:
    """A crafted CMake file passing one flag a hundred thousand times: read in one pass, and the
    flag is no arch fact (the gate accounts for one pass only)."""
    a = _cmake_gate("A_ARCHS", archs("sm_90"), ("X", 2))
    text = "if(A_ARCHS)\n" + '  "-DX=1"\n' * 100_000 + "endif()\n"
    assert arch_flags({"CMakeLists.txt": (a,)}, {"CMakeLists.txt": text}, ()) == ()
