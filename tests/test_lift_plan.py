"""The PatchPlan: before/after strings for every edit kind, each re-detected by the real detectors.

Each case writes a small package, scans it, plans a lift for one gate and checks the exact
patched text, that the plan verified (the patched file, scanned again, admits the target and
nothing beyond what the edit claims), and the skips with their reasons where no safe edit exists.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from liftgate.arch.core import Arch
from liftgate.arch.parse import parse_target
from liftgate.edits.cuda import EditError, lift_directive
from liftgate.lift.plan import PatchPlan, PlanError, exact_archs, plan_lift
from liftgate.model import Report
from liftgate.scan import scan
from liftgate.sources.workspace import Workspace

T120 = "(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 1200)"
T120A = "(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 1200 && defined(__CUDA_ARCH_FEAT_SM120_ALL))"


def _scan(root: Path, target: str) -> tuple[Report, Workspace]:
    report = scan([str(root)], [target], use_cache=False)
    assert report.workspace is not None
    return report, report.workspace


def lift_one(
    tmp_path: Path, files: dict[str, str], path: str, line: int, target: str = "sm_120", at: str = "call-site"
) -> tuple[PatchPlan, Report]:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    report, on_disk = _scan(root, target)
    (gate,) = [g for g in report.gates if g.location.path == path and g.location.line == line]
    arch = parse_target(target)

    def rescan(overlay, packages):  # type: ignore[no-untyped-def]
        return scan([str(root)], [target], use_cache=False, overlay=overlay, only_packages=packages)

    return plan_lift(report, [gate.id], arch, on_disk, at=at, rescan=rescan), report


def after_text(plan: PatchPlan, path: str) -> str:
    (change,) = [c for c in plan.files if c.path == path]
    return change.after.decode()


# -- CUDA directives (pure) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "target", "after"),
    [
        (
            "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n",
            "sm_120",
            f"#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900) || {T120}  /* m */\n",
        ),
        ("#if (A && B)\n", "sm_120", f"#if (A && B) || {T120}  /* m */\n"),
        ("#elif __CUDA_ARCH__ < 1200\n", "sm_120a", f"#elif (__CUDA_ARCH__ < 1200) || {T120A}  /* m */\n"),
        (
            "#ifdef CUTE_ARCH_TMA_SM90_ENABLED // tma\n",
            "sm_120",
            f"#if defined(CUTE_ARCH_TMA_SM90_ENABLED) || {T120}  /* m */ // tma\n",
        ),
        ("  #  ifndef NO_PDL\r\n", "sm_120", f"  #  if !defined(NO_PDL) || {T120}  /* m */\r\n"),
    ],
)
def test_cuda_directive_before_after(before: str, target: str, after: str) -> None:
    edit = lift_directive([before], "m", parse_target(target))
    assert "".join(edit.after) == after


def test_cuda_continued_directive_keeps_its_lines_and_trailing_comment() -> None:
    lines = [
        "#if defined(__CUDA_ARCH__) && \\\n",
        "    (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)  // Hopper and Blackwell\n",
    ]
    edit = lift_directive(lines, "m", parse_target("sm_120"))
    assert edit.after == [
        "#if (defined(__CUDA_ARCH__) && \\\n",
        f"    (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)) || {T120}  /* m */  // Hopper and Blackwell\n",
    ]


@pytest.mark.parametrize("line", ["int x = 1;\n", "#define X 1\n", "#if\n", "#ifdef A B\n"])
def test_cuda_edit_refuses_what_is_not_a_liftable_directive(line: str) -> None:
    with pytest.raises(EditError):
        lift_directive([line], "m", parse_target("sm_120"))


HEADER = """\
#pragma once
#if defined(__CUDA_ARCH__) && \\
    (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)
__device__ void wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 1200)
__device__ void wait() {}
#endif
"""


@pytest.mark.parametrize("target", ["sm_120", "sm_120a", "sm_121f"])
def test_cuda_lift_admits_exactly_the_target_passes_and_the_elif_yields(tmp_path: Path, target: str) -> None:
    plan, report = lift_one(tmp_path, {"k.cuh": HEADER}, "k.cuh", 2, target)
    assert plan.verified, plan
    arch = parse_target(target)
    text = after_text(plan, "k.cuh")
    assert text.count("\n") == HEADER.count("\n")  # no line added or removed
    # Re-scan the patched file independently: the #if admits old ∪ the target's passes, host unchanged.
    (tmp_path / "pkg" / "k.cuh").write_text(text)
    again, _ = _scan(tmp_path / "pkg", target)
    old = {g.location.line: g for g in report.gates}
    new = {g.location.line: g for g in again.gates}
    assert new[2].admitted == old[2].admitted | exact_archs(arch)
    assert new[2].host == old[2].host
    assert arch not in new[5].admitted  # the lifted branch is taken first now
    assert any("no longer admits" in n and ":5)" in n for n in plan.notes)
    assert plan.lift_id in text and f"liftgate: +{arch.name}" in text


# -- Python runtime -------------------------------------------------------------------------


HELPERS = """\
import torch


def is_sm90():
    return torch.cuda.get_device_capability()[0] == 9


def is_sm100():
    return torch.cuda.get_device_capability()[0] == 10
"""


@pytest.mark.parametrize(
    ("source", "line", "expected"),
    [
        (
            "import torch\n\n\ndef f():\n    major, _ = torch.cuda.get_device_capability()\n    if major in (9, 10):\n        return 1\n    return 0\n",
            6,
            "    if major in (9, 10, 12):  # liftgate: +sm_120 {id}\n",
        ),
        (
            "import torch\n\n\ndef f():\n    major, minor = torch.cuda.get_device_capability()\n    sm = major * 10 + minor\n    if sm == 90:\n        return 1\n    return 0\n",
            7,
            "    if sm in (90, 120):  # liftgate: +sm_120 {id}\n",
        ),
        (
            "import torch\n\n\ndef f():\n    major, minor = torch.cuda.get_device_capability()\n    sm = major * 10 + minor\n    if sm >= 90 and sm < 120:\n        return 1\n    return 0\n",
            7,
            "    if sm >= 90 and sm <= 120:  # liftgate: +sm_120 {id}\n",
        ),
        (
            "import torch\nfrom pkg.helpers import is_sm90, is_sm100\n\n\ndef f():\n    if not (is_sm90() or is_sm100()):\n        raise ValueError('needs SM90 or SM100')\n    return 1\n",
            6,
            "    if not (is_sm90() or is_sm100() or torch.cuda.get_device_capability() == (12, 0)):  # liftgate: +sm_120 {id}\n",
        ),
        (
            "import torch\nfrom pkg.helpers import is_sm100\n\n\ndef f():\n    if is_sm100():\n        return 'fast'\n    return 'slow'\n",
            6,
            "    if is_sm100() or torch.cuda.get_device_capability() == (12, 0):  # liftgate: +sm_120 {id}\n",
        ),
    ],
)
def test_python_runtime_before_after(tmp_path: Path, source: str, line: int, expected: str) -> None:
    plan, _report = lift_one(
        tmp_path, {"pkg/__init__.py": "", "pkg/helpers.py": HELPERS, "pkg/mod.py": source}, "pkg/mod.py", line
    )
    assert plan.verified, plan
    assert not plan.skipped, plan.skipped
    text = after_text(plan, "pkg/mod.py")
    assert text.splitlines(keepends=True)[line - 1] == expected.format(id=plan.lift_id)
    ast.parse(text)  # still Python
    assert text.count("\n") == source.count("\n")


def test_python_guard_without_a_capability_query_in_scope_is_skipped_with_the_reason(tmp_path: Path) -> None:
    source = "from pkg.helpers import is_sm90\n\n\ndef f():\n    if not is_sm90():\n        raise ValueError('x')\n"
    plan, _ = lift_one(
        tmp_path, {"pkg/__init__.py": "", "pkg/helpers.py": HELPERS, "pkg/mod.py": source}, "pkg/mod.py", 5
    )
    assert not plan.files
    (skip,) = plan.skipped
    assert "imports no capability query" in skip.reason and "never adds an import" in skip.reason


def test_python_definition_edit_lists_the_callers(tmp_path: Path) -> None:
    source = (
        "import torch\n"
        "from functools import partial\n\n\n"
        "def _check(majors):\n    return torch.cuda.get_device_capability()[0] in majors\n\n\n"
        "is_hopper = partial(_check, majors=[9])\n\n\n"
        "def f():\n    if is_hopper():\n        return 1\n    return 0\n\n\n"
        "def g():\n    return 2 if is_hopper() else 3\n"
    )
    plan, _report = lift_one(
        tmp_path, {"pkg/__init__.py": "", "pkg/mod.py": source}, "pkg/mod.py", 13, at="definition"
    )
    assert plan.verified, plan
    text = after_text(plan, "pkg/mod.py")
    assert "is_hopper = partial(_check, majors=[9, 12])  # liftgate: +sm_120" in text
    (planned,) = plan.planned
    assert "in the definition at pkg/mod.py:9" in planned.how and "this changes every caller" in planned.how
    assert any("now admits sm_120 too" in n and ":19)" in n for n in plan.notes)


# -- build filters ----------------------------------------------------------------------------


def test_py_build_major_list_and_arch_strings(tmp_path: Path) -> None:
    source = (
        "from .core import current_compilation_context, gen_jit_spec\n\n\n"
        "def gen_comm_module():\n"
        "    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10])\n"
        "    return gen_jit_spec('comm', ['comm.cu'], extra_cuda_cflags=nvcc_flags)\n\n\n"
        'SUPPORTED_ARCHS = ["sm_90a", "sm_100a"]\n'
    )
    files = {"pkg/__init__.py": "", "pkg/core.py": "", "pkg/jit.py": source}
    plan, _ = lift_one(tmp_path, files, "pkg/jit.py", 5)
    assert plan.verified
    line = after_text(plan, "pkg/jit.py").splitlines()[4]
    assert line.endswith(f"supported_major_versions=[9, 10, 12])  # liftgate: +sm_120 {plan.lift_id}")
    assert plan.planned[0].jit_modules == ("comm",)
    plan, _ = lift_one(tmp_path / "b", files, "pkg/jit.py", 9, target="sm_120a")
    assert plan.verified
    assert (
        after_text(plan, "pkg/jit.py")
        .splitlines()[8]
        .startswith('SUPPORTED_ARCHS = ["sm_90a", "sm_100a", "sm_120a"]')
    )


# -- CMake ------------------------------------------------------------------------------------


def test_cmake_lists_gain_the_target_in_their_spelling(tmp_path: Path) -> None:
    cmake = (
        "cmake_minimum_required(VERSION 3.26)\n"
        "set(CMAKE_CUDA_ARCHITECTURES 80-real 90a)\n"
        'cuda_archs_loose_intersection(MLA_ARCHS "9.0a;10.0a" "${CUDA_ARCHS}")\n'
        'if("90a" IN_LIST CMAKE_CUDA_ARCHITECTURES)\n  message(STATUS "hopper")\nendif()\n'
    )
    files = {"CMakeLists.txt": cmake}
    plan, _ = lift_one(tmp_path / "a", files, "CMakeLists.txt", 2, target="sm_120a")
    assert plan.verified, plan
    lines = after_text(plan, "CMakeLists.txt").splitlines()
    assert lines[1] == f"set(CMAKE_CUDA_ARCHITECTURES 80-real 90a 120a)  # liftgate: +sm_120a {plan.lift_id}"
    plan, _ = lift_one(tmp_path / "b", files, "CMakeLists.txt", 3, target="sm_120a")
    assert plan.verified
    assert (
        after_text(plan, "CMakeLists.txt")
        .splitlines()[2]
        .startswith('cuda_archs_loose_intersection(MLA_ARCHS "9.0a;10.0a;12.0a" "${CUDA_ARCHS}")')
    )
    plan, _ = lift_one(tmp_path / "c", files, "CMakeLists.txt", 4, target="sm_120a")
    assert not plan.files and "a test or a flag string" in plan.skipped[0].reason


# -- the plan as a whole ----------------------------------------------------------------------


def test_unknown_and_ambiguous_ids_are_plan_errors(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "k.cuh").write_text(HEADER)
    report, workspace = _scan(root, "sm_120")
    with pytest.raises(PlanError, match="no gate 'cu-zzzz'"):
        plan_lift(report, ["cu-zzzz"], Arch(12, 0), workspace)
    with pytest.raises(PlanError, match="ambiguous"):
        plan_lift(report, ["cu-"], Arch(12, 0), workspace)
    with pytest.raises(PlanError, match="--at"):
        plan_lift(report, [report.gates[0].id], Arch(12, 0), workspace, at="everywhere")


def test_a_gate_admitting_the_target_is_skipped_and_the_plan_is_deterministic(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "k.cuh").write_text(HEADER)
    report, workspace = _scan(root, "sm_120")
    ids = [g.id for g in report.gates]
    one = plan_lift(report, ids, Arch(12, 0), workspace)
    two = plan_lift(report, ids, Arch(12, 0), workspace)
    assert one.lift_id == two.lift_id and one.diff() == two.diff()
    assert any(s.reason == "already admits sm_120" for s in one.skipped)
    assert one.diff().startswith("--- a/k.cuh\n+++ b/k.cuh\n")


def test_a_lower_bound_moves_down_to_the_target_only_across_no_other_capability(tmp_path: Path) -> None:
    source = (
        "import torch\n\n\ndef pick():\n    major, _ = torch.cuda.get_device_capability()\n"
        "    if major >= 10:\n        return 'sm100'\n    elif major == 9:\n        return 'sm90'\n    return 'base'\n"
    )
    files = {"pkg/__init__.py": "", "pkg/mod.py": source}
    plan, _ = lift_one(tmp_path / "a", files, "pkg/mod.py", 6, target="sm_90")
    assert plan.verified, plan
    assert (
        after_text(plan, "pkg/mod.py").splitlines()[5]
        == f"    if major >= 9:  # liftgate: +sm_90 {plan.lift_id}"
    )
    # For 8.0 the bound would also let 8.6, 8.7 and 8.9 in: no literal edit, the exact test instead.
    plan, _ = lift_one(tmp_path / "b", files, "pkg/mod.py", 6, target="sm_80")
    assert plan.verified, plan
    assert "    if major >= 10 or torch.cuda.get_device_capability() == (8, 0):" in after_text(
        plan, "pkg/mod.py"
    )


def test_a_sorted_major_list_stays_sorted(tmp_path: Path) -> None:
    source = (
        "from .core import current_compilation_context, gen_jit_spec\n\n\n"
        "def gen_module():\n"
        "    flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[10, 11, 12])\n"
        "    return gen_jit_spec('m', ['m.cu'], extra_cuda_cflags=flags)\n"
    )
    plan, _ = lift_one(
        tmp_path,
        {"pkg/__init__.py": "", "pkg/core.py": "", "pkg/jit.py": source},
        "pkg/jit.py",
        5,
        target="sm_90",
    )
    assert plan.verified
    assert "supported_major_versions=[9, 10, 11, 12])  # liftgate: +sm_90" in after_text(plan, "pkg/jit.py")


def test_a_gate_the_edit_cannot_reach_that_reads_differently_on_the_rescan_is_a_note(tmp_path: Path) -> None:
    """Headers memoised inside include cycles can read differently from one scan to the next
    (issue 21). A CUDA gate in a file the plan does not edit, reading no macro an edited file
    defines, cannot have been changed by the edit: said in a note, not blamed on the lift."""
    from dataclasses import replace

    from liftgate.arch.core import ArchSet

    root = tmp_path / "pkg"
    root.mkdir()
    (root / "a.cu").write_text(f"#if {T120}\n__device__ void a();\n#endif\n".replace("== 1200", ">= 1000"))
    (root / "b.cu").write_text(
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n__device__ void b();\n#endif\n"
    )
    report, on_disk = _scan(root, "sm_90")
    (gate,) = [g for g in report.gates if g.location.path == "a.cu"]

    def rescan(overlay, packages):  # type: ignore[no-untyped-def]
        found = scan([str(root)], ["sm_90"], use_cache=False, overlay=overlay, only_packages=packages)
        noisy = [replace(g, admitted=ArchSet.none()) if g.location.path == "b.cu" else g for g in found.gates]
        return replace(found, gates=tuple(noisy))

    plan = plan_lift(report, [gate.id], parse_target("sm_90"), on_disk, rescan=rescan)
    assert plan.verified and not plan.skipped
    assert any("b.cu:1" in n and "not the edit's doing" in n for n in plan.notes)
