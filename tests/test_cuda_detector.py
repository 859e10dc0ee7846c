"""The CUDA preprocessor detector on a small real-looking package, and the lexer under it.

``tests/fixtures/cuda/minikern`` is laid out like a CUDA extension. Every conditional in it
carries a marker comment: ``// gate`` where liftgate must report a gate, ``// not a gate: why``
where it must not. `test_markers` checks every file against its markers; the other tests check
what a gate says (admitted sets, else kinds, evidence, spans, ids) in detail.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from liftgate.arch.core import ArchSet, universe
from liftgate.detect.cpp_lex import lex_directives, quick_index
from liftgate.detect.cuda import FileAnalysis, PackageAnalyzer
from liftgate.model import ElseKind, Gate, Truth

PACKAGE = Path(__file__).parent / "fixtures" / "cuda" / "minikern"
CUDA_VERSION = (13, 0)


def package_paths() -> list[str]:
    return sorted(
        p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*") if p.is_file() and p.suffix != ".md"
    )


def read_fixture(path: str) -> str | None:
    file = PACKAGE / path
    return file.read_text() if file.is_file() else None


def new_analyzer() -> PackageAnalyzer:
    return PackageAnalyzer("minikern", "1.0", read_fixture, package_paths(), CUDA_VERSION)


@cache
def analysis(path: str) -> FileAnalysis:
    text = read_fixture(path)
    assert text is not None, path
    return new_analyzer().analyze(path, text)


def analyze_text(
    text: str, path: str = "csrc/inline.cu", extra: dict[str, str] | None = None
) -> FileAnalysis:
    files = {path: text, **(extra or {})}
    return PackageAnalyzer("inline", None, files.get, list(files), CUDA_VERSION).analyze(path, text)


def gate_at(result: FileAnalysis, line: int) -> Gate:
    found = [g for g in result.gates if g.location.span.start == line]
    assert len(found) == 1, f"expected one gate at line {line}, got {[g.location for g in result.gates]}"
    return found[0]


def archs(predicate: object) -> list[str]:
    """Names of the known targets for which ``predicate(arch)`` holds, in universe order."""
    assert callable(predicate)
    return [a.name for a in universe() if predicate(a)]


NONE: list[str] = []


# ---------------------------------------------------------------------------
# Every fixture against its markers.

GATE_MARKER = re.compile(r"(?://|/\*)\s*gate\b")
NOT_A_GATE_MARKER = re.compile(r"\bnot a gate\b")

MARKED_FILES = [
    "include/minikern/arch.cuh",
    "include/minikern/config.h",
    "include/minikern/sm90_features.cuh",
    "csrc/build_flag.cu",
    "csrc/chain.cu",
    "csrc/conditional_include.cu",
    "csrc/cutlass_idiom.cu",
    "csrc/dead.cu",
    "csrc/derived_angle.cu",
    "csrc/derived_quote.cu",
    "csrc/else_error.cu",
    "csrc/else_kinds.cu",
    "csrc/ifdef.cu",
    "csrc/lines.cu",
    "csrc/toolkit.cu",
    "csrc/comment_in_condition.cu",
    "csrc/nvrtc_source.cu",
]


def test_every_fixture_file_is_checked() -> None:
    listed = {p if isinstance(p, str) else p.values[0] for p in MARKED_FILES}
    extra = {"csrc/unbalanced.cu", "csrc/stray_endif.cu"}  # checked by the tests for skips
    assert set(package_paths()) == listed | extra


@pytest.mark.parametrize("path", MARKED_FILES)
def test_markers(path: str) -> None:
    """Each gate covers exactly one ``gate`` marker, and each marker lies on a gate."""
    text = read_fixture(path)
    assert text is not None
    lines = text.splitlines()
    wanted = {
        n
        for n, line in enumerate(lines, 1)
        if GATE_MARKER.search(line) and not NOT_A_GATE_MARKER.search(line)
    }
    unwanted = {n for n, line in enumerate(lines, 1) if NOT_A_GATE_MARKER.search(line)}
    result = analysis(path)
    assert result.skips == []
    problems: list[str] = []
    for gate in result.gates:
        span = range(gate.location.span.start, gate.location.span.end + 1)
        covered = [n for n in span if n in wanted]
        if len(covered) != 1:
            problems.append(
                f"gate at lines {span.start}-{span.stop - 1} ({gate.condition}) covers markers {covered}"
            )
        if any(n in unwanted for n in span):
            problems.append(f"gate at lines {span.start}-{span.stop - 1} is marked 'not a gate'")
    for n in wanted:
        if not any(g.location.span.start <= n <= g.location.span.end for g in result.gates):
            problems.append(f"line {n} is marked 'gate' but no gate covers it: {lines[n - 1].strip()}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------
# What the gates say.


def test_elif_chain_admits_one_generation_per_branch() -> None:
    result = analysis("csrc/chain.cu")
    blackwell, hopper, older = gate_at(result, 7), gate_at(result, 9), gate_at(result, 11)
    assert blackwell.admitted.names() == archs(lambda a: a.cuda_arch >= 1000)
    assert hopper.admitted.names() == ["sm_90", "sm_90a"]  # the #elif excludes what the #if took
    assert older.admitted.names() == archs(lambda a: a.cuda_arch < 900)
    for gate in (blackwell, hopper, older):
        assert gate.unknown == ArchSet.none()
        assert gate.host is Truth.FALSE
        assert gate.else_kind is ElseKind.FALLBACK
    assert (blackwell.directive, hopper.directive, older.directive) == ("#if", "#elif", "#elif")
    assert (blackwell.then_span.start, blackwell.then_span.end) == (8, 8)  # type: ignore[union-attr]
    assert (blackwell.else_span.start, blackwell.else_span.end) == (9, 15)  # type: ignore[union-attr]
    assert (older.else_span.start, older.else_span.end) == (13, 15)  # type: ignore[union-attr]
    assert blackwell.condition == "defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000"


def test_if_without_else_has_else_kind_none() -> None:
    gate = gate_at(analysis("csrc/chain.cu"), 19)
    assert gate.admitted.names() == ["sm_90", "sm_90a"]
    assert gate.else_kind is ElseKind.NONE
    assert gate.else_span is None


def test_error_and_static_assert_make_else_kind_error() -> None:
    result = analysis("csrc/else_error.cu")
    error_elif = gate_at(result, 5)
    assert error_elif.admitted.names() == archs(lambda a: a.cuda_arch >= 800)
    assert error_elif.else_kind is ElseKind.ERROR  # the #elif branch holds the #error
    assert gate_at(result, 7).else_kind is ElseKind.NONE  # the #elif itself has nothing after it
    assert gate_at(result, 7).admitted.names() == archs(lambda a: a.cuda_arch < 800)
    static = gate_at(result, 14)
    assert static.else_kind is ElseKind.ERROR
    assert (static.else_span.start, static.else_span.end) == (16, 18)  # type: ignore[union-attr]


def test_comment_only_else_is_else_kind_none() -> None:
    assert gate_at(analysis("csrc/else_kinds.cu"), 22).else_kind is ElseKind.NONE


def test_static_assert_with_semicolon_in_message_is_error() -> None:
    assert gate_at(analysis("csrc/else_kinds.cu"), 4).else_kind is ElseKind.ERROR


def test_nested_error_in_else_is_error() -> None:
    assert gate_at(analysis("csrc/else_kinds.cu"), 12).else_kind is ElseKind.ERROR


def test_cuda_arch_ifdef_is_not_a_gate() -> None:
    """``#ifdef __CUDA_ARCH__`` tells the host from the device, not one target from another."""
    assert analysis("csrc/ifdef.cu").gates == []


@pytest.mark.parametrize("path", ["csrc/derived_quote.cu", "csrc/derived_angle.cu"])
def test_derived_macro_from_a_header_is_a_gate_with_evidence(path: str) -> None:
    gate = gate_at(analysis(path), 5 if path.endswith("quote.cu") else 6)
    assert gate.admitted.names() == archs(lambda a: a.cuda_arch >= 900)
    assert gate.host is Truth.FALSE
    (evidence,) = gate.evidence
    assert (evidence.path, evidence.line) == ("include/minikern/arch.cuh", 5)
    assert "MINIKERN_HAS_TMA" in evidence.text
    assert "__CUDA_ARCH__ >= 900" in evidence.text
    assert gate.depends_on == ()


def test_derived_macro_with_a_value_from_both_branches() -> None:
    gate = gate_at(analysis("csrc/derived_quote.cu"), 10)
    assert gate.admitted.names() == archs(lambda a: a.cuda_arch >= 800)
    assert sorted((e.path, e.line) for e in gate.evidence) == [
        ("include/minikern/arch.cuh", 9),
        ("include/minikern/arch.cuh", 11),
    ]


def test_header_reports_the_macros_it_derives() -> None:
    assert analysis("include/minikern/arch.cuh").derived == {"MINIKERN_HAS_TMA", "MINIKERN_CP_ASYNC_BYTES"}
    assert analysis("include/minikern/config.h").derived == {"MINIKERN_ARCH_MMA_SM90A_ENABLED"}
    assert analysis("csrc/chain.cu").derived == frozenset()


def test_include_guard_is_not_a_gate() -> None:
    gates = analysis("include/minikern/config.h").gates
    assert [g.location.line for g in gates] == [6]


def test_cutlass_feature_macro_admits_only_sm90a() -> None:
    gate = gate_at(analysis("csrc/cutlass_idiom.cu"), 5)
    assert gate.admitted.names() == ["sm_90a"]
    assert gate.unknown == ArchSet.none()
    assert gate.else_kind is ElseKind.FALLBACK
    (evidence,) = gate.evidence
    assert (evidence.path, evidence.line) == ("include/minikern/config.h", 7)
    assert "__CUDA_ARCH_FEAT_SM90_ALL" in evidence.text
    # The header's own #if admits the same single target.
    assert gate_at(analysis("include/minikern/config.h"), 6).admitted.names() == ["sm_90a"]


def test_macro_set_by_the_build_makes_the_gate_unknown() -> None:
    gate = gate_at(analysis("csrc/build_flag.cu"), 5)
    assert gate.admitted == ArchSet.none()
    assert gate.unknown.names() == archs(lambda a: a.cuda_arch >= 900)
    assert gate.host is Truth.FALSE  # __CUDA_ARCH__ >= 900 is false on the host, whatever the flag
    assert any("MY_BUILD_FLAG" in d for d in gate.depends_on)


def test_toolkit_version_alone_is_not_a_gate_but_mixed_with_arch_it_is() -> None:
    result = analysis("csrc/toolkit.cu")
    assert [g.location.line for g in result.gates] == [9]
    gate = result.gates[0]
    assert gate.admitted.names() == archs(lambda a: a.cuda_arch >= 1000)
    (depends,) = gate.depends_on
    assert depends.startswith("CUDART_VERSION = 13000")


def test_toolkit_version_below_the_threshold_excludes_everything_but_is_no_gate() -> None:
    text = read_fixture("csrc/toolkit.cu")
    assert text is not None
    old = PackageAnalyzer("minikern", None, read_fixture, package_paths(), (12, 6)).analyze(
        "csrc/toolkit.cu", text
    )
    assert old.gates == []  # CUDART_VERSION 12060 < 12080: false for every target alike


def test_continued_condition_spans_its_physical_lines() -> None:
    result = analysis("csrc/lines.cu")
    first = gate_at(result, 5)
    assert (first.location.span.start, first.location.span.end) == (5, 7)
    assert first.condition == "defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)"
    assert first.admitted.names() == archs(lambda a: 900 <= a.cuda_arch < 1200)
    assert (first.then_span.start, first.then_span.end) == (8, 8)  # type: ignore[union-attr]
    second = gate_at(result, 10)
    assert (second.location.span.start, second.location.span.end) == (10, 11)
    assert "comment" not in second.condition
    assert second.admitted.names() == archs(lambda a: a.cuda_arch >= 1000)
    assert [g.location.line for g in result.gates] == [5, 10, 19]  # nothing from the comment or the string


def test_comment_spanning_lines_inside_a_condition() -> None:
    gate = gate_at(analysis("csrc/comment_in_condition.cu"), 4)
    assert (gate.location.span.start, gate.location.span.end) == (4, 5)
    assert gate.admitted.names() == archs(lambda a: a.cuda_arch >= 1000)


def test_dead_code_is_not_reported_but_elif_of_if_0_is() -> None:
    result = analysis("csrc/dead.cu")
    assert [g.location.line for g in result.gates] == [13]
    assert result.gates[0].directive == "#elif"
    assert result.gates[0].admitted.names() == archs(lambda a: a.cuda_arch >= 900)


def test_gate_inside_a_gate_names_its_enclosing_gate() -> None:
    result = analyze_text(
        "#if __CUDA_ARCH__ >= 900\n"  # 1: gate
        "#if defined(__CUDA_ARCH_FEAT_SM90_ALL)\n"  # 2: gate, inside 1
        "wgmma();\n"
        "#endif\n"
        "#endif\n"
    )
    outer, inner = gate_at(result, 1), gate_at(result, 2)
    assert inner.enclosing == (outer.id,)
    assert outer.enclosing == ()
    assert inner.admitted.names() == ["sm_90a"]
    assert (outer.then_span.start, outer.then_span.end) == (2, 4)  # type: ignore[union-attr]


def test_macro_from_a_conditionally_included_header() -> None:
    gate = gate_at(analysis("csrc/conditional_include.cu"), 7)
    assert gate.admitted.names() == archs(lambda a: a.cuda_arch >= 900)
    assert gate.unknown == ArchSet.none()
    assert gate.host is Truth.FALSE


def test_the_same_define_inline_is_undefined_where_its_condition_fails() -> None:
    """The control for the test above: the #define in the file itself."""
    result = analyze_text(
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"
        "#define MINIKERN_SM90_FEATURES 1\n"
        "#endif\n"
        "#if defined(MINIKERN_SM90_FEATURES)\n"
        "x\n"
        "#endif\n"
    )
    gate = gate_at(result, 4)
    assert gate.admitted.names() == archs(lambda a: a.cuda_arch >= 900)
    assert gate.unknown == ArchSet.none()
    assert gate.host is Truth.FALSE


@pytest.mark.parametrize(
    ("text", "admitted"),
    [
        ("#ifdef __CUDA_ARCH_FEAT_SM90_ALL\n#endif\n", ["sm_90a"]),
        ("#if __CUDA_ARCH_SPECIFIC__ == 1200\n#endif\n", ["sm_120a"]),
        ("#if (__CUDA_ARCH_FAMILY_SPECIFIC__ == 1000)\n#endif\n", ["sm_100a", "sm_100f"]),
        ("#if __CUDA_ARCH_HAS_FEATURE__(SM100_ALL)\n#endif\n", ["sm_100a"]),
        (
            "#if defined(__CUDA_ARCH__) and __CUDA_ARCH__ >= 1200\n#endif\n",
            ["sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f"],
        ),
        (
            "#define ARCH_AT_LEAST(x) (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= (x))\n"
            "#if ARCH_AT_LEAST(1030)\n#endif\n",
            archs(lambda a: a.cuda_arch >= 1030),
        ),
    ],
)
def test_arch_spellings(text: str, admitted: list[str]) -> None:
    (gate,) = analyze_text(text).gates
    assert gate.admitted.names() == admitted


# ---------------------------------------------------------------------------
# Skips and ids.


@pytest.mark.parametrize(
    ("path", "line"),
    [("csrc/unbalanced.cu", "#if at line 3"), ("csrc/stray_endif.cu", "#endif at line 6")],
)
def test_unbalanced_conditionals_are_a_skip_not_an_exception(path: str, line: str) -> None:
    result = analysis(path)
    assert result.gates == []
    (skip,) = result.skips
    assert skip.path == path
    assert "unbalanced" in skip.reason
    assert line in skip.reason


def test_gate_ids_survive_code_moving() -> None:
    text = read_fixture("csrc/chain.cu")
    assert text is not None
    before = [(g.location.line, g.id) for g in analyze_text(text, "csrc/chain.cu").gates]
    moved_text = "\n\n\n" + text.replace("__global__ void hopper_only", "\n\n__global__ void hopper_only")
    after = [(g.location.line, g.id) for g in analyze_text(moved_text, "csrc/chain.cu").gates]
    assert [line + 3 for line, _ in before[:3]] == [line for line, _ in after[:3]]
    assert after[3][0] == before[3][0] + 5
    assert [i for _, i in before] == [i for _, i in after]


def test_identical_conditions_get_distinct_ids() -> None:
    block = "#if __CUDA_ARCH__ >= 900\nx\n#endif\n"
    first, second = analyze_text(block + block).gates
    assert first.condition == second.condition
    assert first.id != second.id
    # ... and each keeps its id when the other one is moved away from it.
    moved = analyze_text(block + "\n\n\n" + block).gates
    assert [g.id for g in moved] == [first.id, second.id]


def test_gate_ids_depend_on_the_file() -> None:
    block = "#if __CUDA_ARCH__ >= 900\nx\n#endif\n"
    (a,) = analyze_text(block, "csrc/a.cu").gates
    (b,) = analyze_text(block, "csrc/b.cu").gates
    assert a.id != b.id
    assert re.fullmatch(r"cu-[0-9a-f]{10}", a.id)


# ---------------------------------------------------------------------------
# cpp_lex: exact directive lines.


def directives(text: str) -> list[tuple[str, str, int, int]]:
    """(keyword, text with whitespace runs as one space, first line, last line) of each directive."""
    return [
        (d.keyword, " ".join(d.text.split()), d.line, d.end_line) for d in lex_directives(text).directives
    ]


def test_lex_continuations_keep_physical_line_numbers() -> None:
    text = (
        "#define M(x) \\\n"  # 1
        "  ((x) + \\\n"  # 2
        "   1)\n"  # 3
        "int a;\n"  # 4
        "#if A && \\\n"  # 5
        "    B\n"  # 6
        "#endif\n"  # 7
    )
    assert directives(text) == [
        ("define", "M(x) ((x) + 1)", 1, 3),
        ("if", "A && B", 5, 6),
        ("endif", "", 7, 7),
    ]
    assert len(lex_directives(text).lines) == text.count("\n") + 1


def test_lex_comments_are_removed_but_lines_are_kept() -> None:
    text = (
        "/* a block comment\n"  # 1
        "#if NOT_A_DIRECTIVE\n"  # 2: inside the comment
        "*/\n"  # 3
        "#if A // trailing\n"  # 4
        "#elif B /* inline */\n"  # 5
        "#endif\n"  # 6
        'const char* s = "/* not a comment";\n'  # 7
        "#if C\n"  # 8
        "#endif\n"  # 9
    )
    assert directives(text) == [
        ("if", "A", 4, 4),
        ("elif", "B", 5, 5),
        ("endif", "", 6, 6),
        ("if", "C", 8, 8),
        ("endif", "", 9, 9),
    ]
    lines = lex_directives(text).lines
    assert lines[1].strip() == ""  # the commented-out directive is gone
    assert lines[6] == 'const char* s = "/* not a comment";'


def test_lex_line_comment_ending_in_backslash_swallows_the_next_line() -> None:
    # Lines are spliced before comments are removed, as in translation phases 2 and 3.
    text = "// see below \\\n#if SWALLOWED\n#if A\n#endif\n"
    assert directives(text) == [("if", "A", 3, 3), ("endif", "", 4, 4)]


def test_lex_crlf_and_spacing() -> None:
    text = "  #  if A\r\n\t#\telif B && \\\r\n C\r\n# endif\r\n#\r\n"
    assert directives(text) == [
        ("if", "A", 1, 1),
        ("elif", "B && C", 2, 3),
        ("endif", "", 4, 4),
        ("", "", 5, 5),
    ]


def test_lex_directive_after_a_comment_on_the_same_line() -> None:
    # A comment is one space: "/* x */ #if A" is a directive, and so is one after a comment's end.
    assert directives("/* x */ #if A\n#endif\n") == [("if", "A", 1, 1), ("endif", "", 2, 2)]
    assert directives("/* x\n */ #if A\n#endif\n") == [("if", "A", 2, 2), ("endif", "", 3, 3)]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("char c = '\"'; /* spans\n lines */\n#if A\n#endif\n", 3),  # a quote in a character literal
        ('const char* s = "// no comment"; int x;\n#if A\n#endif\n', 2),
        ('const char* s = "/*"; /* a real\n#if NO\n*/\n#if A\n#endif\n', 4),
        ('/* say "hi\n there */\n#if A\n#endif\n', 3),  # a quote in a comment
        ('const char* s = "a\\"/*"; /* x\n y */\n#if A\n#endif\n', 3),  # an escaped quote
        ("int x; /* a\n b\n c */ int y;\n#if A\n#endif\n", 4),
        ("int x; // a \\\n still the comment /*\n#if A\n#endif\n", 3),
    ],
)
def test_lex_literals_and_comments_in_code(text: str, line: int) -> None:
    assert directives(text) == [("if", "A", line, line), ("endif", "", line + 1, line + 1)]
    assert len(lex_directives(text).lines) == text.count("\n") + 1


def test_lex_comment_spanning_lines_inside_a_directive() -> None:
    assert directives("#if A /* x\n y */ && B\nbody\n#endif\n")[0] == ("if", "A && B", 1, 2)


def test_lex_raw_string_literal_hides_directives() -> None:
    text = 'auto s = R"(\n#if A\n)";\n#if B\n#endif\n'
    assert directives(text) == [("if", "B", 4, 4), ("endif", "", 5, 5)]


def test_quick_index() -> None:
    data = (
        b'#include "minikern/config.h"\n'
        b"#include <cuda_fp8.h>\n"
        b"#if defined(MINIKERN_X) && \\\n  __CUDA_ARCH__ >= 900\n"
        b"#define MINIKERN_Y 1\n"
        b"#endif\n"
    )
    index = quick_index(data)
    assert index.has_arch
    assert index.includes == ("minikern/config.h", "cuda_fp8.h")
    assert index.defines == {"MINIKERN_Y"}
    assert {"MINIKERN_X", "__CUDA_ARCH__", "defined"} <= index.condition_idents
    assert not quick_index(b"int main() { return 0; }\n").has_arch


# An include cycle: a.h includes b.h, which includes a.h back. Textually, what b.h defines
# depends on which of the two a file includes first (b.h tests a macro a.h defines only after
# its #include of b.h). A header's export must not be memoised from inside the cycle, or the
# second file analysed gets the first one's view.
CYCLE = {
    "include/a.h": (
        '#ifndef A_H\n#define A_H\n#include "b.h"\n'
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n#define HAS_A 1\n#endif\n#endif\n"
    ),
    "include/b.h": '#ifndef B_H\n#define B_H\n#include "a.h"\n#ifdef HAS_A\n#define HAS_B 1\n#endif\n#endif\n',
    "csrc/via_a.cu": '#include "../include/a.h"\n#ifdef HAS_B\nint b;\n#endif\n#ifdef HAS_A\nint a;\n#endif\n',
    "csrc/via_b.cu": '#include "../include/b.h"\n#ifdef HAS_B\nint b;\n#endif\n#ifdef HAS_A\nint a;\n#endif\n',
}


def _cycle_gates(order: list[str]) -> dict[str, list[tuple[int, list[str]]]]:
    analyzer = PackageAnalyzer("cycle", None, CYCLE.get, list(CYCLE), CUDA_VERSION)
    out = {}
    for path in order:
        result = analyzer.analyze(path, CYCLE[path])
        assert not result.skips, result.skips
        out[path] = [(g.location.line, g.admitted.names()) for g in result.gates]
    return out


def test_include_cycle_exports_do_not_depend_on_the_order_files_are_analysed() -> None:
    hopper_up = archs(lambda a: a.cuda_arch >= 900)
    expected = {
        "csrc/via_a.cu": [(5, hopper_up)],  # HAS_B is never defined when a.h is entered first
        "csrc/via_b.cu": [(2, hopper_up), (5, hopper_up)],
    }
    assert _cycle_gates(["csrc/via_a.cu", "csrc/via_b.cu"]) == expected
    assert _cycle_gates(["csrc/via_b.cu", "csrc/via_a.cu"]) == expected


# A header that includes another only under a condition liftgate cannot decide (CUTLASS's
# functional.h includes floating_point_nvrtc.h under __CUDACC_RTC__) exports "maybe defined" for
# what that one defines. Included after the definition is in force, it changes nothing: textually
# the defining header's guard stops it there. Before, it made cute/arch/mma_sm120.hpp's 77 gates
# on CUTE_ARCH_F8F6F4_MMA_ENABLED unknown whenever that file was analysed first.
MAYBE = {
    "include/config.h": (
        "#pragma once\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200\n#define F8_ENABLED\n#endif\n"
    ),
    "include/other.h": '#pragma once\n#if defined(SOME_BUILD_SETTING)\n#include "config.h"\n#endif\n',
    "csrc/after.cu": (
        '#include "../include/config.h"\n#include "../include/other.h"\n'
        "#if defined(F8_ENABLED)  // gate: sm_120 and up\nint f8;\n#endif\n"
    ),
    "csrc/only.cu": '#include "../include/other.h"\n#if defined(F8_ENABLED)  // unknown\nint f8;\n#endif\n',
}


def test_a_maybe_definition_merged_over_the_same_definition_is_no_unknown() -> None:
    analyzer = PackageAnalyzer("maybe", None, MAYBE.get, list(MAYBE), CUDA_VERSION)
    after = analyzer.analyze("csrc/after.cu", MAYBE["csrc/after.cu"])
    (gate,) = after.gates
    assert gate.admitted.names() == archs(lambda a: a.cuda_arch >= 1200) and not gate.unknown
    only = analyzer.analyze("csrc/only.cu", MAYBE["csrc/only.cu"])
    (gate,) = only.gates
    assert not gate.admitted and gate.unknown  # defined, or not: SOME_BUILD_SETTING decides


def _order_independent(files: dict[str, str], sources: list[str]) -> dict[str, tuple[object, ...]]:
    """Each source analysed in every order by one analyser gives the same gates and skips."""
    import itertools

    results = []
    for order in itertools.permutations(sources):
        analyzer = PackageAnalyzer("deep", None, files.get, list(files), CUDA_VERSION)
        got = {}
        for path in order:
            r = analyzer.analyze(path, files[path])
            got[path] = (
                tuple((g.location.line, g.admitted.names()) for g in r.gates),
                tuple(s.reason for s in r.skips),
            )
        results.append(got)
    assert all(r == results[0] for r in results)
    return results[0]


def test_a_cycle_whose_member_is_too_deep_is_a_skip_in_any_order() -> None:
    # a.h <-> b.h, and a.h also includes a chain 205 headers deep: past a compiler's limit.
    files = {f"include/d{i}.h": f'#include "d{i + 1}.h"\n' for i in range(205)}
    files["include/d205.h"] = "#define DEEP 1\n"
    files["include/a.h"] = '#pragma once\n#include "b.h"\n#include "d0.h"\n'
    files["include/b.h"] = '#pragma once\n#include "a.h"\n'
    files["csrc/x.cu"] = '#include "../include/a.h"\n#if __CUDA_ARCH__ >= 900\nint x;\n#endif\n'
    files["csrc/y.cu"] = '#include "../include/b.h"\n#if __CUDA_ARCH__ >= 900\nint y;\n#endif\n'
    got = _order_independent(files, ["csrc/x.cu", "csrc/y.cu"])
    for path in ("csrc/x.cu", "csrc/y.cu"):
        gates, skips = got[path]
        assert not gates and len(skips) == 1 and "deeper than 200" in str(skips[0]), (path, skips)


def test_hundreds_of_chained_cycles_are_warmed_without_recursion() -> None:
    # c{i}a.h <-> c{i}b.h, and c{i}a.h includes c{i+1}a.h: 250 cycles, one below the other.
    files = {}
    for i in range(250):
        below = f'#include "c{i + 1}a.h"\n' if i < 249 else "#define LEAF 1\n"
        files[f"include/c{i}a.h"] = f'#pragma once\n#include "c{i}b.h"\n{below}'
        files[f"include/c{i}b.h"] = f'#pragma once\n#include "c{i}a.h"\n'
    files["csrc/top.cu"] = '#include "../include/c0a.h"\n#if __CUDA_ARCH__ >= 900\nint t;\n#endif\n'
    files["csrc/mid.cu"] = '#include "../include/c100b.h"\n#if __CUDA_ARCH__ >= 900\nint m;\n#endif\n'
    got = _order_independent(files, ["csrc/top.cu", "csrc/mid.cu"])
    assert "deeper than 200" in str(got["csrc/top.cu"][1])  # 250 nested includes: a compiler stops too
    assert got["csrc/mid.cu"][0] and not got["csrc/mid.cu"][1]  # 150 deep: read
