"""Crafted sources that used to crash or hang a scan: each is now a result or a `Skip`, bounded.

One test per finding of the safety review. Every hostile file sits next to a well-formed one
(``good.cuh``, ``good.py``), whose gate must still be reported. Memory is measured with
`tracemalloc` (Python allocations: what the unbounded cases grew); no assertion depends on
wall-clock time.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from liftgate.arch.core import Arch
from liftgate.arch.parse import parse_target
from liftgate.detect import cmake, cpp_syntax, cuda, ppexpr, pyvalues
from liftgate.detect.cmake import detect_cmake
from liftgate.detect.cpp_runtime import HelperIndex, detect_cpp_runtime
from liftgate.detect.pybuild import detect_py_build
from liftgate.detect.python import PythonAnalyzer
from liftgate.model import Gate, GateKind, Report, Skip
from liftgate.scan import scan

T = TypeVar("T")

GOOD_CUH = "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\nint hopper;\n#endif\n"
GOOD_PY = "import torch\n\ndef f():\n    if torch.cuda.get_device_capability()[0] >= 9:\n        return 1\n"
MIB = 1 << 20


def measured(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the peak of Python memory it allocated, in MiB."""
    tracemalloc.start()
    try:
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak / MIB


def scan_tree(root: Path, files: dict[str, str], *, good: bool = True) -> Report:
    """Write ``files`` (and the good ones) under ``root`` and scan them for sm_120, no cache."""
    if good:
        files = {"good.cuh": GOOD_CUH, "good.py": GOOD_PY, **files}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return scan([str(root)], ["sm_120"], cuda_version=(13, 0), jobs=1, use_cache=False, offline=True)


def good_gates_reported(report: Report) -> None:
    paths = {g.location.path for g in report.gates}
    assert "good.cuh" in paths, report.gates
    assert "good.py" in paths, report.gates


def names(archs: object) -> set[str]:
    return {a.name for a in archs}  # type: ignore[attr-defined]


def skips_of(report: Report, path: str) -> list[str]:
    return [s.reason for s in report.skips if s.path.split(":")[0] == path]


def gates_in(report: Report, path: str) -> list[Gate]:
    return [g for g in report.gates if g.location.path == path]


# -- the #if evaluator (detect/ppexpr.py) -----------------------------------------------------------


def test_if_integer_literal_of_5000_digits_is_unknown_not_a_traceback(tmp_path: Path) -> None:
    text = "#if __CUDA_ARCH__ > " + "9" * 5000 + "\nint a;\n#endif\n" + GOOD_CUH
    report = scan_tree(tmp_path, {"big.cuh": text})
    good_gates_reported(report)
    (reason,) = skips_of(report, "big.cuh")
    assert "too large" in reason and len(reason) < 600
    # The file's other conditional still counts.
    assert [g.location.line for g in gates_in(report, "big.cuh")] == [4]


def test_parse_number_never_converts_a_huge_literal() -> None:
    for literal in ("9" * 5000, "0x" + "f" * 5000, "0" * 5000 + "7", "0b" + "1" * 100):
        if literal.strip("0") == "7":
            assert ppexpr._parse_number(literal) == (7, False)
            continue
        with pytest.raises(ppexpr.ExprError, match="too large"):
            ppexpr._parse_number(literal)


@pytest.mark.parametrize(
    "condition",
    [
        "(" * 300 + "__CUDA_ARCH__ >= 900" + ")" * 300,
        "!" * 3000 + "__CUDA_ARCH__",
        "__CUDA_ARCH__ > " + "- " * 3000 + "1",
        "__CUDA_ARCH__ ? " * 1000 + "1" + " : 0" * 1000,
        "__CUDA_ARCH__ == 1 ? 1 : " * 1000 + "0",
    ],
    ids=["parentheses", "nots", "minuses", "ternary-then", "ternary-else"],
)
def test_deep_if_expressions_are_unknown_not_a_recursion_error(tmp_path: Path, condition: str) -> None:
    report = scan_tree(tmp_path, {"deep.cuh": f"#if {condition}\nint a;\n#endif\n"})
    good_gates_reported(report)
    (reason,) = skips_of(report, "deep.cuh")
    assert "nested deeper than" in reason


@pytest.mark.parametrize(
    "text",
    [
        "#ifndef\n#endif\n",
        "#ifdef // no name\n#else\n#endif\n",
        "#define (x) 1\n",
        "#if '\\9' || '\\x'\n#endif\n",
    ],
    ids=["ifndef-without-name", "ifdef-without-name", "define-without-name", "bad-character-constants"],
)
def test_malformed_directives_are_not_a_crash(tmp_path: Path, text: str) -> None:
    report = scan_tree(tmp_path, {"odd.cuh": text + GOOD_CUH.replace("900", "1000")})
    good_gates_reported(report)
    assert [g.location.line for g in gates_in(report, "odd.cuh")] == [text.count("\n") + 1]


def test_moderately_nested_if_expressions_are_still_evaluated() -> None:
    for depth in (1, 20, 60):
        tokens = ppexpr.tokenize("(" * depth + "1 + 2 == 3" + ")" * depth)
        assert ppexpr.evaluate(tokens) is True
    assert ppexpr.evaluate(ppexpr.tokenize("!" * 100 + "0")) is False
    assert ppexpr.evaluate(ppexpr.tokenize("-" * 100 + "1 == 1")) is True


# -- macros and includes (detect/cuda.py) ------------------------------------------------------------


def doubling(levels: int, condition: str) -> str:
    lines = ["#define A0 1", *(f"#define A{i} (A{i - 1}+A{i - 1})" for i in range(1, levels + 1))]
    return "\n".join(lines) + f"\n#if {condition}\nint a;\n#endif\n{GOOD_CUH}"


@pytest.mark.parametrize("levels", [18, 20, 100])
def test_exponential_macros_stop_at_the_expansion_budget(tmp_path: Path, levels: int) -> None:
    text = doubling(levels, f"A{levels} > 0 && __CUDA_ARCH__ >= 900")
    report, peak = measured(lambda: scan_tree(tmp_path, {"expo.cuh": text}))
    good_gates_reported(report)
    (reason,) = skips_of(report, "expo.cuh")
    assert "macro expansion" in reason and "steps" in reason
    # The conditional after the exploding one is still read.
    assert [g.location.line for g in gates_in(report, "expo.cuh")] == [levels + 5]
    assert peak < 200, peak


def test_small_doubling_macros_are_still_expanded_exactly(tmp_path: Path) -> None:
    report = scan_tree(tmp_path, {"expo.cuh": doubling(8, "A8 == 256 && __CUDA_ARCH__ >= 1000")})
    (gate, _) = sorted(gates_in(report, "expo.cuh"), key=lambda g: g.location.line)
    assert gate.condition == "A8 == 256 && __CUDA_ARCH__ >= 1000"
    assert "sm_120" in names(gate.admitted) and "sm_90" not in names(gate.admitted)
    assert not gate.unknown
    assert not skips_of(report, "expo.cuh")


def include_chain(root: Path, depth: int) -> None:
    for i in range(depth):
        text = f'#include "h{i + 1}.cuh"\n' if i + 1 < depth else "#define DEEP_SM 1000\n"
        (root / f"h{i}.cuh").write_text(text)


def test_include_chain_deeper_than_the_compiler_allows_is_a_skip(tmp_path: Path) -> None:
    include_chain(tmp_path, 450)
    main = '#include "h0.cuh"\n#if __CUDA_ARCH__ >= DEEP_SM\nint a;\n#endif\n'
    report = scan_tree(tmp_path, {"main.cu": main})
    good_gates_reported(report)
    (reason,) = skips_of(report, "main.cu")
    assert "#include nesting deeper than 200" in reason
    assert not gates_in(report, "main.cu")


def test_include_chain_within_the_limit_is_followed(tmp_path: Path) -> None:
    include_chain(tmp_path, 150)
    main = '#include "h0.cuh"\n#if __CUDA_ARCH__ >= DEEP_SM\nint a;\n#endif\n'
    report = scan_tree(tmp_path, {"main.cu": main})
    (gate,) = gates_in(report, "main.cu")
    assert names(gate.admitted) >= {"sm_100", "sm_120"} and "sm_90" not in names(gate.admitted)
    assert not gate.unknown and not skips_of(report, "main.cu")


def nested_ifs(depth: int) -> str:
    return (
        "#if __CUDA_ARCH__ >= 800\nint before;\n#endif\n"
        + "#if __CUDA_ARCH__ >= 700\n" * depth
        + "#define INSIDE 1\nint a;\n"
        + "#endif\n" * depth
        + "#if __CUDA_ARCH__ >= 1000 && !defined(INSIDE)\nint after;\n#endif\n"
    )


@pytest.mark.parametrize("depth", [5000, 100_000])
def test_deeply_nested_ifs_are_bounded(tmp_path: Path, depth: int) -> None:
    report, peak = measured(lambda: scan_tree(tmp_path, {"nest.cuh": nested_ifs(depth)}))
    good_gates_reported(report)
    (reason,) = skips_of(report, "nest.cuh")
    assert f"#if nesting deeper than {cuda.MAX_NESTING:,} at line {cuda.MAX_NESTING + 4}" in reason
    assert "gates in it are not reported" in reason
    # Before the deep region: exact. After it: INSIDE may or may not be defined, so 10.0+ is unknown.
    before, after = sorted(gates_in(report, "nest.cuh"), key=lambda g: g.location.line)
    assert before.location.line == 1 and not before.unknown
    assert after.location.line == 2 * depth + 6
    assert not after.admitted and {"sm_100", "sm_120"} <= (names(after.unknown))
    assert peak < 200, peak


def test_a_14_mb_single_line_if_is_bounded(tmp_path: Path) -> None:
    condition = "__CUDA_ARCH__ >= 900" + " || __CUDA_ARCH__ == 700" * (14_000_000 // 25)
    text = f"#if {condition}\nint a;\n#endif\n" + GOOD_CUH.replace("900", "1000")
    report, peak = measured(lambda: scan_tree(tmp_path, {"line.cuh": text}))
    good_gates_reported(report)
    (reason,) = skips_of(report, "line.cuh")
    assert "longer than" in reason and len(reason) < 600
    assert [g.location.line for g in gates_in(report, "line.cuh")] == [4]
    assert peak < 300, peak


def test_the_file_step_budget_skips_a_file_and_keeps_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A smaller budget than the real one (the mechanism is the same; the test stays quick): forty
    # conditions that each expand a macro doubling 12 times (~30,000 steps, under the condition
    # budget) exceed it together. The file's own gate, before them, is not reported either.
    monkeypatch.setattr(cuda, "FILE_STEPS", 200_000)
    lines = [GOOD_CUH, "#define A0 1", *(f"#define A{i} (A{i - 1}+A{i - 1})" for i in range(1, 13))]
    lines += [f"#if A12 > {k}\nint a{k};\n#endif" for k in range(40)]
    report = scan_tree(tmp_path, {"busy.cuh": "\n".join(lines) + "\n"})
    good_gates_reported(report)
    (reason,) = skips_of(report, "busy.cuh")
    assert "more than 200,000 preprocessor steps" in reason
    assert not gates_in(report, "busy.cuh")


def test_a_header_beyond_the_step_budget_makes_its_includers_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuda, "FILE_STEPS", 200_000)
    lines = ["#define A0 1", *(f"#define A{i} (A{i - 1}+A{i - 1})" for i in range(1, 13))]
    lines += [f"#if A12 > {k}\n#define M{k} 1\n#endif" for k in range(40)]
    (tmp_path / "costly.h").write_text("\n".join(lines) + "\n")
    main = '#include "costly.h"\n#if defined(M3) && __CUDA_ARCH__ >= 900\nint a;\n#endif\n'
    report = scan_tree(tmp_path, {"main.cu": main})
    good_gates_reported(report)
    (reason,) = skips_of(report, "main.cu")
    assert reason.startswith("its include costly.h has more than 200,000 preprocessor steps")


# -- Python (detect/python.py, detect/pyvalues.py) ---------------------------------------------------


@pytest.mark.parametrize(
    "chain",
    ["a = 2\n" + "a = a*a\n" * 40, "a = 2\n" + "a = a**64\n" * 8, "a = 2\n" + "a = a << 64\n" * 2_000],
    ids=["squares", "powers", "shifts"],
)
def test_python_integer_chains_are_bounded(tmp_path: Path, chain: str) -> None:
    mod = (
        f"import torch\n{chain}\ndef g():\n    if torch.cuda.get_device_capability()[0] >= a:\n        pass\n"
    )
    report, peak = measured(lambda: scan_tree(tmp_path, {"mod.py": mod}))
    good_gates_reported(report)
    assert peak < 200, peak


def test_python_integers_beyond_the_limit_are_unknown() -> None:
    big = 1 << pyvalues.MAX_INT_BITS
    for op, a, b in [("Mult", big, big), ("Pow", 3, 64), ("LShift", big, 1), ("Add", big, big)]:
        if op == "Pow":
            assert pyvalues.safe_binop(op, a, b) == 3**64  # small results are computed
            a = big
        with pytest.raises(pyvalues.Unsupported):
            pyvalues.safe_binop(op, a, b)
    assert pyvalues.lift(lambda x: x * x, pyvalues.const(big)).is_top()
    assert pyvalues.safe_binop("Mult", 1 << 100, 1 << 100) == 1 << 200


# -- CMake (detect/cmake.py) ------------------------------------------------------------------------


CMAKE_GATE = 'set(CUDA_ARCHS "9.0a;10.0a")\n'


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("if(A)\n" * 3000 + CMAKE_GATE + "endif()\n" * 3000, "blocks nested deeper than"),
        ("function(f)\n" * 2000 + CMAKE_GATE + "endfunction()\n" * 2000, "blocks nested deeper than"),
        (
            "if(" + "NOT " * 5000 + '"9.0a" IN_LIST CUDA_ARCHS)\nset(X 1)\nendif()\n',
            "cannot parse the condition",
        ),
        (
            "if(" + "(" * 3000 + '"9.0a" IN_LIST CUDA_ARCHS' + ")" * 3000 + ")\nset(X 1)\nendif()\n",
            "cannot parse",
        ),
        (
            "if(" + "A AND " * 100_000 + '"9.0a" IN_LIST CUDA_ARCHS)\nset(X 1)\nendif()\n',
            "more than 100,000 arguments",
        ),
        ("set(CUDA_ARCHS " + "9.0a " * 200_000 + ")\n", "more than 100,000 arguments"),
    ],
    ids=["if-nesting", "function-nesting", "nots", "parentheses", "and-chain", "huge-list"],
)
def test_hostile_cmake_is_a_result_or_a_skip(text: str, expect: str) -> None:
    detection, peak = measured(lambda: detect_cmake("p", "1", "CMakeLists.txt", text + CMAKE_GATE))
    assert any(expect in s.reason for s in detection.skips), detection.skips
    assert not any("failed on this file" in s.reason for s in detection.skips), detection.skips
    if "nested deeper" in expect:
        assert not detection.gates  # the analysis links commands across blocks: the whole file is a Skip
    else:  # the construct alone is left out: the well-formed gate at the end is reported
        assert any(g.condition == CMAKE_GATE.strip() for g in detection.gates), detection
    assert peak < 300, peak


def test_a_long_cmake_and_chain_within_the_limit_is_parsed() -> None:
    text = "if(" + "A AND " * 20_000 + '"9.0a" IN_LIST CUDA_ARCHS)\nset(X 1)\nendif()\n'
    detection = detect_cmake("p", "1", "CMakeLists.txt", text)
    (gate,) = detection.gates
    assert names(gate.admitted) == {"sm_90a"}


def test_cmake_nesting_limit_names_the_line() -> None:
    depth = cmake.MAX_NESTING + 5
    text = "if(A)\n" * depth + CMAKE_GATE + "endif()\n" * depth
    detection = detect_cmake("p", "1", "CMakeLists.txt", text)
    reasons = [s.reason for s in detection.skips]
    assert any(
        f"blocks nested deeper than {cmake.MAX_NESTING} at line {cmake.MAX_NESTING + 1}" in r for r in reasons
    )


def test_cmake_exponential_variables_stay_small() -> None:
    text = (
        'set(A "9.0a")\n'
        + 'set(A "${A}${A}")\n' * 60
        + 'cuda_archs_loose_intersection(OUT "${A}" "${CUDA_ARCHS}")\n'
    )
    detection, peak = measured(lambda: detect_cmake("p", "1", "CMakeLists.txt", text))
    assert detection.gates  # the literal list is a gate; the doubled references are not expanded
    assert peak < 50


# -- the C++ host reader (detect/cpp_runtime.py, cpp_syntax.py) --------------------------------------

CAP = "int f() { int major = 0; cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);\n"
CPP_GOOD = CAP.replace("int f()", "int good()") + "if (major >= 9) return 1; return 0; }\n"


def cpp(text: str) -> tuple[tuple[Gate, ...], tuple[Skip, ...]]:
    full = text + CPP_GOOD
    index = HelperIndex()
    index.add_source("a.cu", full)
    index.resolve()
    detection = detect_cpp_runtime("p", "1", "a.cu", full, [], index.export())
    return detection.gates, detection.skips


@pytest.mark.parametrize(
    "body",
    [
        "{" * 5000 + "if (major >= 9) return 1;" + "}" * 5000 + "return 0; }\n",
        "".join(f"if (major == {i}) return {i}; else " for i in range(3000)) + "return 0; }\n",
        "if (" + "(" * 3000 + "major >= 9" + ")" * 3000 + ") return 1; return 0; }\n",
        "if (" + "f(" * 3000 + "major" + ")" * 3000 + " >= 9) return 1; return 0; }\n",
        "int v = " + "major ? " * 3000 + "1" + " : 0" * 3000 + ";\nif (v) return 1; return 0; }\n",
        "if (major >= " + "9" * 5000 + ") return 1; return 0; }\n",
        "long x = 1 << 4000000000; if (major >= x) return 1; return 0; }\n",
        "long a = 3;\n" + "a = a * a;\n" * 40 + "if (major >= a) return 1; return 0; }\n",
    ],
    ids=["braces", "else-if", "parentheses", "calls", "ternary", "big-literal", "shift", "squares"],
)
def test_hostile_host_code_is_a_result_or_a_skip(body: str) -> None:
    (gates, skips), peak = measured(lambda: cpp(CAP + body))
    assert any(g.location.line == 3 + body.count("\n") for g in gates), (gates, skips)  # good() still gates
    assert peak < 200, peak


def test_hostile_host_code_nested_namespaces() -> None:
    (gates, _skips), peak = measured(lambda: cpp("namespace a {\n" * 3000 + "}\n" * 3000))
    assert gates
    assert peak < 200, peak


def test_host_expression_depth_is_bounded() -> None:
    toks = cpp_syntax.tokenize("(" * 3000 + "x" + ")" * 3000)
    node = cpp_syntax.ExprParser(toks, 0, len(toks)).parse()
    assert node.kind == "unknown"
    toks = cpp_syntax.tokenize("((((a + b) * 2)))")
    assert cpp_syntax.ExprParser(toks, 0, len(toks)).parse().kind == "bin"


# -- py-build (detect/pybuild.py) -------------------------------------------------------------------


def test_a_huge_flag_string_is_bounded() -> None:
    text = "flags = ['" + "-gencode=arch=compute_90a,code=sm_90a " * 200_000 + "']\n"
    detection, peak = measured(lambda: detect_py_build("p", "1", "setup.py", text))
    assert detection.gates or detection.skips
    assert peak < 300, peak


# -- --compile-check (judge/compile_check.py) -----------------------------------------------------


def device_include_package(root: Path, include: str) -> dict[str, str]:
    unit = root / "csrc" / "a.cu"
    unit.parent.mkdir(parents=True)
    unit.write_text(
        f"#include {include}\n__global__ void k(float* o) {{\n"
        "#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 1000)\n  o[0] = 1.0f;\n#endif\n}\n"
    )
    return {"csrc/a.cu": str(unit)}


@pytest.mark.parametrize(
    "include",
    [
        '"/dev/stdin"',
        '"/dev/zero"',
        "</dev/zero>",
        '"../../../../../../../../../../dev/zero"',
        '"/proc/self/environ"',
        "ZERO",
    ],
)
def test_compile_check_never_hands_nvcc_a_device_file(tmp_path: Path, include: str) -> None:
    from liftgate.judge.compile_check import CheckStatus, compile_check

    files = device_include_package(tmp_path, include)
    if include == "ZERO":
        (tmp_path / "csrc" / "a.cu").write_text(
            '#define ZERO "/dev/zero"\n' + (tmp_path / "csrc" / "a.cu").read_text()
        )
    report = scan([str(tmp_path)], ["sm_120"], cuda_version=(13, 0), jobs=1, use_cache=False)
    (gate,) = [g for g in report.gates if g.kind is GateKind.CUDA_PP]
    # A fake nvcc that would hang on its stdin or eat memory if it ever ran.
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\ncat > /dev/null\nexit 1\n")
    nvcc.chmod(0o755)
    result = compile_check(gate, parse_target("sm_120"), files, nvcc=str(nvcc), timeout_s=30)
    assert result.status is CheckStatus.NOT_CHECKED, result
    assert "not a regular file" in result.reason or "outside" in result.reason, result.reason


def test_compile_check_lays_out_regular_files_only(tmp_path: Path) -> None:
    from liftgate.judge.compile_check import _layout

    fifo = tmp_path / "pipe.cuh"
    os.mkfifo(fifo)
    (tmp_path / "zero.cuh").symlink_to("/dev/zero")
    (tmp_path / "ok.cuh").write_text("int ok;\n")
    layout = tmp_path / "layout"
    layout.mkdir()
    _layout(
        str(layout),
        {"pipe.cuh": str(fifo), "zero.cuh": str(tmp_path / "zero.cuh"), "ok.cuh": str(tmp_path / "ok.cuh"),
         "proc.cuh": "/proc/self/environ"},
    )  # fmt: skip
    assert sorted(os.listdir(layout)) == ["ok.cuh"]
    assert stat.S_ISREG(os.stat(layout / "ok.cuh").st_mode)


def test_compile_check_nvcc_reads_no_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from liftgate.judge import compile_check as cc

    seen: list[object] = []
    real_run = subprocess.run

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(kwargs.get("stdin"))
        return real_run(["false"], capture_output=True, text=True)

    files = device_include_package(tmp_path, "<cstdint>")
    report = scan([str(tmp_path)], ["sm_120"], cuda_version=(13, 0), jobs=1, use_cache=False)
    (gate,) = [g for g in report.gates if g.kind is GateKind.CUDA_PP]
    monkeypatch.setattr("liftgate.judge.compile_check.subprocess.run", run)
    cc.compile_check(gate, parse_target("sm_120"), files, nvcc="/bin/true")
    assert seen and all(s is subprocess.DEVNULL for s in seen)


# -- the scan cache (liftgate.scan, liftgate.detect.cfamily) -------------------------------------------


def test_scan_cache_sees_an_in_place_edit_with_the_same_size_and_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from liftgate.sources import workspace

    # "Recently" is a few seconds in real use; ten minutes keeps this test independent of how
    # long the first scan takes on a loaded machine.
    monkeypatch.setattr(workspace, "RACY_MARGIN_NS", 600 * 10**9)
    root = tmp_path / "pkg"
    root.mkdir()
    header = root / "k.cuh"
    before = "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\nint a;\n#endif\n"
    after = "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\nint a;\n#endif\n"
    assert len(before) == len(after)
    header.write_text(before)
    st = header.stat()
    cache = str(tmp_path / "cache")

    def run() -> Report:
        return scan([str(root)], ["sm_80"], cuda_version=(13, 0), jobs=1, cache_dir=cache, offline=True)

    first = run()
    assert [g.condition for g in first.gates] == ["defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800"]
    header.write_text(after)
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (header.stat().st_size, header.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    second = run()
    assert [g.condition for g in second.gates] == ["defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900"]


def test_scan_cache_trusts_files_older_than_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from liftgate.detect import cfamily

    root = tmp_path / "pkg"
    root.mkdir()
    header = root / "k.cuh"
    header.write_text(GOOD_CUH)
    old = 1_600_000_000 * 10**9
    os.utime(header, ns=(old, old))
    cache = str(tmp_path / "cache")
    scan([str(root)], ["sm_80"], cuda_version=(13, 0), jobs=1, cache_dir=cache, offline=True)
    reads: list[str] = []
    real = cfamily._index_one

    def spy(path: str, fspath: str, max_size: int, package: str) -> cfamily.IndexResult:
        reads.append(path)
        return real(path, fspath, max_size, package)

    monkeypatch.setattr(cfamily, "_index_one", spy)
    scan([str(root)], ["sm_80"], cuda_version=(13, 0), jobs=1, cache_dir=cache, offline=True)
    assert reads == []  # an old, unchanged file is not read again


# -- the scan's last-resort net (liftgate.scan.run) ----------------------------------------------------


def test_an_unexpected_exception_in_a_detector_is_a_skip_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from liftgate.detect import registry

    real_analyze = cuda.PackageAnalyzer.analyze

    def analyze(self: cuda.PackageAnalyzer, path: str, text: str) -> cuda.FileAnalysis:
        if path == "bad.cuh":
            raise ZeroDivisionError("boom")
        return real_analyze(self, path, text)

    def bad_cmake(*args: object, **kwargs: object) -> object:
        raise LookupError("cmake boom")

    monkeypatch.setattr(cuda.PackageAnalyzer, "analyze", analyze)
    monkeypatch.setattr(registry, "detect_cmake", bad_cmake)
    monkeypatch.setattr(PythonAnalyzer, "analyze", lambda self: (_ for _ in ()).throw(MemoryError()))
    # The runner calls a detector only with files it wants: a Python file, so the Python one runs.
    tree = {"bad.cuh": GOOD_CUH, "CMakeLists.txt": CMAKE_GATE, "mod.py": GOOD_PY}
    report = scan_tree(tmp_path, tree, good=False)
    reasons = {s.path: s.reason for s in report.skips}
    assert "ZeroDivisionError" in reasons["bad.cuh"]
    assert "LookupError" in reasons["CMakeLists.txt"]
    assert any("MemoryError" in r for r in reasons.values()), reasons


@pytest.mark.parametrize(
    ("expression", "expect"),
    [("-" * 200_000 + "1", "nested"), ("1" + " + 1" * 5_000, "expressions nested deeper than 1,000")],
    ids=["unparsable", "deep-sum"],
)
def test_a_deep_python_expression_is_a_skip_not_a_crash(tmp_path: Path, expression: str, expect: str) -> None:
    deep = f"import torch\n\ndef f():\n    x = {expression}\n    if torch.cuda.get_device_capability()[0] >= x:\n        pass\n"
    report = scan_tree(tmp_path, {"deep.py": deep})
    good_gates_reported(report)
    (reason,) = skips_of(report, "deep.py")
    assert expect in reason


def _unused(arch: Arch) -> None:  # keeps the import of Arch meaningful for type checkers
    return None


# -- the whole hostile tree through the command line (the safety review's acceptance) -------------


def test_the_hostile_tree_skips_each_offender_with_its_reason_and_reports_the_rest(tmp_path: Path) -> None:
    # The tree bench/hostile_bench.py times: 100 levels of macro doubling, 5,000 nested #ifs, a
    # 300-deep parenthesised condition and a non-UTF-8 file name, beside well-formed files.
    import importlib.util
    import json

    from liftgate.cli.main import main

    spec = importlib.util.spec_from_file_location(
        "hostile_bench", Path(__file__).parent.parent / "bench" / "hostile_bench.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    root = tmp_path / "hostile"
    bench.write_hostile_tree(root)
    out = tmp_path / "report.json"
    argv = ["scan", str(root), "-t", "sm_120", "--no-cache", "--show", "all", "-f", "json", "-o", str(out)]
    assert main(argv) in (0, 1)
    assert bench.check_report(json.loads(out.read_text())) == []
