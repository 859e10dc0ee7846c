"""Build flags a Python JIT builder passes beside its arch filter: ``tests/fixtures/cuda/jitflagpkg``.

FlashInfer builds ``mamba_selective_state_update_sm90`` with ``get_nvcc_flags_list(
supported_major_versions=[9])`` and ``-DFLASHINFER_MAMBA_ENABLE_SM90`` in the same flag list: the
macro is defined exactly where that filter admits the target, so ``#ifdef
FLASHINFER_MAMBA_ENABLE_SM90`` is a cuda-pp gate with the filter's admitted set, its evidence
naming the py-build gate. The CUDA sources mark where a gate must start (``// gate``) and each near
miss (``// not a gate``); the builders mark which flags a filter must record as travelling with it
(``# passes: NAME …``, ``# passes nothing``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

import liftgate
from liftgate.arch.core import ArchSet, universe
from liftgate.arch.parse import parse_arch
from liftgate.judge.verdict import judge_scan
from liftgate.model import Gate, GateKind, HazardKind, Report, Status

TREE = Path(__file__).parent / "fixtures" / "cuda" / "jitflagpkg"
GATE = re.compile(r"//\s*gate\b")
NOT_A_GATE = re.compile(r"\bnot a gate\b")
PASSES = re.compile(r"#\s*passes(?::\s*(?P<names>[\w ]+)|\s+nothing)")
SOURCES = [
    "jitflagpkg/data/csrc/state_update.cu",
    "jitflagpkg/data/csrc/moe.cu",
    "jitflagpkg/data/csrc/near_misses.cu",
]
BUILDERS = [
    "jitflagpkg/jit/core.py",
    "jitflagpkg/jit/mamba.py",
    "jitflagpkg/jit/fused_moe.py",
    "jitflagpkg/jit/near_misses.py",
]


def archs(*names: str) -> ArchSet:
    return ArchSet(parse_arch(n) for n in names)


def majors(*values: int) -> ArchSet:
    return ArchSet(a for a in universe() if a.major in values)


@cache
def report() -> Report:
    return liftgate.scan([str(TREE)], ["sm_120"], use_cache=False)


def gate_at(path: str, needle: str, kind: GateKind = GateKind.CUDA_PP) -> Gate:
    text = (TREE / path).read_text()
    (line,) = [n for n, t in enumerate(text.splitlines(), 1) if needle in t]
    (found,) = [
        g for g in report().gates if g.kind is kind and g.location.path == path and g.location.line == line
    ]
    return found


def test_every_file_is_checked() -> None:
    on_disk = {p.relative_to(TREE).as_posix() for p in TREE.rglob("*") if p.suffix in (".cu", ".py")}
    assert on_disk == set(SOURCES) | set(BUILDERS)


@pytest.mark.parametrize("path", SOURCES)
def test_cuda_markers(path: str) -> None:
    lines = (TREE / path).read_text().splitlines()
    wanted = {n for n, t in enumerate(lines, 1) if GATE.search(t) and not NOT_A_GATE.search(t)}
    unwanted = {n for n, t in enumerate(lines, 1) if NOT_A_GATE.search(t)}
    found = {
        g.location.line for g in report().gates if g.kind is GateKind.CUDA_PP and g.location.path == path
    }
    assert found == wanted, f"gates at {sorted(found)}, marks at {sorted(wanted)}"
    assert not found & unwanted
    assert not report().skips


@pytest.mark.parametrize("path", BUILDERS)
def test_builder_markers(path: str) -> None:
    """Each filter records exactly the flags its line names as travelling with it."""
    lines = (TREE / path).read_text().splitlines()
    marked = {
        n: set((m.group("names") or "").split())
        for n, t in enumerate(lines, 1)
        if (m := PASSES.search(t)) is not None
    }
    gates = {
        g.location.line: g for g in report().gates if g.kind is GateKind.PY_BUILD and g.location.path == path
    }
    assert set(gates) == set(marked)
    for line, names in marked.items():
        passes = gates[line].passes
        assert {p.macro for p in passes} == names, line
        assert all(p.path == path for p in passes)


def test_a_flag_beside_one_filter_admits_what_the_filter_admits() -> None:
    path = SOURCES[0]
    builder = gate_at("jitflagpkg/jit/mamba.py", "supported_major_versions=[9]", GateKind.PY_BUILD)
    for needle in ("#ifdef JFP_MAMBA_SM90", "#elif defined(JFP_MAMBA_SM90)"):
        g = gate_at(path, needle)
        assert g.admitted == builder.admitted == majors(9)
        assert g.unknown == ArchSet.none()
        (origin,) = g.macros
        assert origin.build_gate == builder.id
        assert (origin.path, origin.line) == ("jitflagpkg/jit/mamba.py", builder.passes[0].line)
        assert origin.condition == builder.condition
        text = "\n".join(e.render() for e in g.evidence)
        assert f"only where py-build gate {builder.id} admits the target" in text
    sm100 = gate_at(path, "#if defined(JFP_MAMBA_SM100)")
    assert sm100.admitted == majors(10, 11, 12)
    assert sm100.status(parse_arch("sm_120")) is Status.ADMITTED


def test_a_flag_several_filters_pass_admits_their_union() -> None:
    path = SOURCES[1]
    assert gate_at(path, "JFP_BLACKWELL_GEMMS").admitted == majors(10, 11, 12)
    assert gate_at(path, "#ifndef JFP_SM120_GROUPED").admitted == ArchSet.all() - majors(12)
    assert gate_at(path, "#ifdef JFP_SM100_GROUPED").admitted == majors(10, 11)
    assert gate_at(path, "#ifdef JFP_APPENDED").admitted == majors(10, 11)  # flags.append(...)
    assert gate_at(path, "#ifdef JFP_BESIDE_CALL").admitted == majors(10)  # an argument of the same build
    assert gate_at(path, "#ifdef JFP_EXTENDED_SHAPES").admitted == archs("sm_90a")  # in the arch flag list
    assert gate_at(path, "#ifdef JFP_HOPPER").admitted == archs("sm_90a")  # beside an imported arch list
    blackwell = gate_at(path, "JFP_BLACKWELL_GEMMS")
    assert len({m.build_gate for m in blackwell.macros}) == 2


def test_a_flag_beside_an_imported_arch_list_names_the_list_and_its_own_line() -> None:
    constant = gate_at("jitflagpkg/jit/core.py", "sm90a_nvcc_flags =", GateKind.PY_BUILD)
    (origin,) = gate_at(SOURCES[1], "#ifdef JFP_HOPPER").macros
    assert origin.build_gate == constant.id
    builder = (TREE / "jitflagpkg/jit/fused_moe.py").read_text().splitlines()
    assert '"-DJFP_HOPPER"' in builder[origin.line - 1] and origin.path == "jitflagpkg/jit/fused_moe.py"
    # The constant's own gate keeps the flags of its own list: the use sites are facts of the CUDA gate.
    assert [p.macro for p in constant.passes] == ["JFP_EXTENDED_SHAPES"]


def test_the_judge_names_the_build_gate_a_lift_must_change_too() -> None:
    judged = judge_scan(report())
    builder = gate_at("jitflagpkg/jit/fused_moe.py", "supported_major_versions=[12]", GateKind.PY_BUILD)
    g = gate_at(SOURCES[1], "#ifdef JFP_SM100_GROUPED")
    (verdict,) = [v for v in judged.verdicts if v.gate_id == g.id]
    (hazard,) = [h for h in verdict.hazards if h.kind is HazardKind.BUILD_FLAG]
    assert "build gate" in hazard.text and "-DJFP_SM100_GROUPED" in hazard.text
    sm100_builder = gate_at(
        "jitflagpkg/jit/fused_moe.py", "supported_major_versions=[10, 11]", GateKind.PY_BUILD
    )
    assert sm100_builder.id in hazard.gates
    assert builder.id not in hazard.gates


def test_the_fact_survives_the_cache_and_json(tmp_path: Path) -> None:
    import jsonschema

    from liftgate.report.interface import RenderOptions, Show
    from liftgate.report.json_format import load_schema, report_to_dict

    document = report_to_dict(report(), RenderOptions(show=Show.ALL))
    jsonschema.validate(document, load_schema())
    (mamba,) = [
        g for g in document["gates"] if g["path"] == "jitflagpkg/jit/mamba.py" and "[9]" in g["condition"]
    ]
    assert [p["macro"] for p in mamba["facts"]["passes"]] == ["JFP_MAMBA_SM90"]
    cold = liftgate.scan([str(TREE)], ["sm_120"], cache_dir=str(tmp_path))
    warm = liftgate.scan([str(TREE)], ["sm_120"], cache_dir=str(tmp_path))
    assert cold.gates == warm.gates == report().gates


def test_one_more_pass_anywhere_makes_the_flag_unknown_again(tmp_path: Path) -> None:
    import shutil

    tree = tmp_path / "jitflagpkg"
    shutil.copytree(TREE, tree)
    extra = tree / "jitflagpkg" / "jit" / "extra.py"
    extra.write_text('FLAGS = ["-DJFP_MAMBA_SM90"]\n')
    found = liftgate.scan([str(tree)], ["sm_120"], use_cache=False)
    assert not [g for g in found.gates if g.condition == "JFP_MAMBA_SM90"]  # the #ifdef on it alone
    assert not [m for g in found.gates for m in g.macros if m.macro == "JFP_MAMBA_SM90"]
    assert [g for g in found.gates if g.condition == "defined(JFP_MAMBA_SM100)"]


@pytest.mark.network
def test_flashinfer_062_mamba_and_moe_flags_are_arch_facts() -> None:
    """flashinfer-python 0.6.2: the mamba SM90/SM100 modules and the CUTLASS MoE modules pass
    their ``-D`` flags beside their JIT filters only."""
    found = liftgate.scan(["flashinfer-python==0.6.2"], ["sm_120"])
    header = "flashinfer/data/include/flashinfer/mamba/selective_state_update.cuh"
    by_line = {
        g.location.line: g for g in found.gates if g.location.path == header and g.kind is GateKind.CUDA_PP
    }
    assert by_line[377].condition == "FLASHINFER_MAMBA_ENABLE_SM90"
    assert by_line[377].admitted == majors(9)
    assert by_line[544].admitted == majors(10, 11, 12)
    (origin,) = by_line[377].macros
    assert origin.path == "flashinfer/jit/mamba/selective_state_update.py" and origin.line == 43
    moe = (
        "flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/"
        "moe_gemm_template_dispatch_tma_ws.h"
    )
    (sm120,) = [g for g in found.gates if g.location.path == moe and g.location.line == 155]
    assert sm120.condition == "COMPILE_BLACKWELL_SM120_TMA_GROUPED_GEMMS"  # #ifndef: the error path
    assert sm120.admitted == ArchSet.all() - majors(12)


def test_code_only_flag_passing_builds_compile_is_their_loss_not_the_ifs() -> None:
    """sm_120's build of the mamba module never passes -DJFP_MAMBA_SM90: the #ifdef on it is excluded
    but not a loss of its own (the sm90 module's filter is); a flag its build does pass reads as usual."""
    from liftgate.evaluate import Outcomes

    outcomes = Outcomes(report().gates)
    sm120 = parse_arch("sm_120")
    mamba90 = gate_at(SOURCES[0], "#ifdef JFP_MAMBA_SM90")
    builder = gate_at("jitflagpkg/jit/mamba.py", "supported_major_versions=[9]", GateKind.PY_BUILD)
    reading = outcomes.of(mamba90, sm120)
    assert mamba90.status(sm120) is Status.EXCLUDED and not reading.loss
    assert f"only builds that {builder.id} keep sm_120 out of pass the flags it tests" in reading.text
    assert outcomes.of(builder, sm120).loss  # counted once, at the filter
    sm100_only = gate_at(SOURCES[1], "#ifdef JFP_SM100_GROUPED")
    assert not outcomes.of(sm100_only, sm120).loss
    # For sm_100 the sm100 module's build passes it: that gate admits; #ifndef JFP_SM120_GROUPED
    # admits everything but 12.x, and is not hidden behind the sm120 filter for sm_120.
    error_path = gate_at(SOURCES[1], "#ifndef JFP_SM120_GROUPED")
    assert "only builds that" not in outcomes.of(error_path, sm120).text
