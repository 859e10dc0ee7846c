"""Region analysis and verdicts (liftgate.judge) on a small synthetic package.

tests/fixtures/judge/minijudge holds one case per rule: a PDL gate compiled out with nothing in
its place (liftable, silent-exclusion hazard), tcgen05 reached through a helper in another header
(blocked, naming the feature, the place and the call), a derived macro that enables wgmma code
elsewhere (the defining gate is blocked through the macro), a nested gate that stays excluded
(its tcgen05 code does not block the outer region), a call into nothing the package defines
(unknown, naming it), a host dispatch that asks for more shared memory than sm_120 has, a
FlashInfer-style JIT filter whose sources hold a PDL gate that would stay shut, and a Python
dispatch that builds that JIT module.
The real-release checks (flashinfer-python 0.6.2) are in tests/test_acceptance_network.py.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from liftgate.arch.core import cuda_exact_test, universe
from liftgate.arch.parse import parse_target
from liftgate.detect.cuda import IncludeIndex
from liftgate.judge.catalog import load_catalog, match_evidence
from liftgate.judge.region import _constant, _FileInfo, is_portable
from liftgate.judge.verdict import judge_scan
from liftgate.model import Report, Verdict, VerdictKind
from liftgate.scan import scan

FIXTURE = Path(__file__).parent / "fixtures" / "judge" / "minijudge"
TARGETS = ("sm_120", "sm_120a", "sm_90", "sm_90a")


@cache
def report() -> Report:
    return judge_scan(scan([str(FIXTURE)], list(TARGETS), use_cache=False))


def verdict(path: str, line: int, target: str) -> Verdict | None:
    r = report()
    gates = [g for g in r.gates if g.location.path == path and g.location.line == line]
    assert len(gates) == 1, [(g.location.path, g.location.line) for g in r.gates]
    return r.verdict_index().get((gates[0].id, parse_target(target)))


def test_pdl_exclusion_is_liftable_with_silent_exclusion_hazard() -> None:
    v = verdict("include/minijudge/pdl.cuh", 5, "sm_120")
    assert v is not None and v.kind is VerdictKind.LIFTABLE
    assert [u.feature for u in v.uses] == ["griddepcontrol"]
    assert len(v.hazards) == 1 and v.hazards[0].text.startswith("silent exclusion: on sm_120")
    assert "pdl.cuh:6" in v.hazards[0].text
    # The same PDL code with a fallback in its else branch is liftable, but no silent exclusion.
    w = verdict("include/minijudge/pdl.cuh", 11, "sm_120")
    assert w is not None and w.kind is VerdictKind.LIFTABLE and w.hazards == ()
    # Admitted targets get no verdict at all.
    assert verdict("include/minijudge/pdl.cuh", 5, "sm_90") is None


def test_tcgen05_through_a_helper_is_blocked_naming_feature_place_and_call() -> None:
    for target in ("sm_120", "sm_120a", "sm_90a"):
        v = verdict("csrc/kernels.cu", 6, target)
        assert v is not None and v.kind is VerdictKind.BLOCKED, target
        (missing,) = v.missing
        assert (missing.feature, missing.path, missing.line, missing.via) == (
            "tcgen05-ld-st",
            "include/minijudge/tmem.cuh",
            5,
            "tmem_load_row",
        )
        assert f"{target} lacks tcgen05-ld-st" in v.reasons[0]


def test_wgmma_region_blocked_for_plain_sm90_and_sm120a_with_variant_hint() -> None:
    v = verdict("csrc/kernels.cu", 14, "sm_90")
    assert v is not None and v.kind is VerdictKind.BLOCKED
    assert {u.feature for u in v.missing} == {"wgmma"}
    assert any("--target sm_90a" in reason for reason in v.reasons)
    a = verdict("csrc/kernels.cu", 14, "sm_120a")
    assert a is not None and a.kind is VerdictKind.BLOCKED
    assert not any("--target" in reason for reason in a.reasons)  # no sm_120 variant has wgmma


def test_derived_macro_gate_is_judged_by_the_regions_the_macro_guards() -> None:
    v = verdict("include/minijudge/config.h", 3, "sm_120a")
    assert v is not None and v.kind is VerdictKind.BLOCKED
    (missing,) = v.missing
    assert (missing.feature, missing.path, missing.via) == (
        "wgmma",
        "csrc/kernels.cu",
        "macro MINIJUDGE_WGMMA_ENABLED",
    )
    assert "it defines MINIJUDGE_WGMMA_ENABLED" in v.scope
    assert verdict("include/minijudge/config.h", 3, "sm_90a") is None  # admitted


def test_nested_gate_that_stays_excluded_does_not_block_the_outer_region() -> None:
    v = verdict("csrc/kernels.cu", 20, "sm_120")
    assert v is not None and v.kind is VerdictKind.LIFTABLE
    assert {u.feature for u in v.uses} == {"mma-bf16"}  # tcgen05 in the nested SM100 gate is not compiled
    # wait_on_producer() is followed; its griddepcontrol is compiled out for sm_120 by its own gate.
    assert "wait_on_producer" in v.scope


def test_call_into_nothing_the_package_defines_is_unknown_and_named() -> None:
    v = verdict("csrc/kernels.cu", 31, "sm_120")
    assert v is not None and v.kind is VerdictKind.UNKNOWN
    assert v.unresolved == ("vendor_blackbox (csrc/kernels.cu:32)",)


def test_host_dispatch_with_more_shared_memory_than_the_target_has() -> None:
    v = verdict("csrc/kernels.cu", 46, "sm_120")
    assert v is not None and v.kind is VerdictKind.LIFTABLE
    assert tuple(h.text for h in v.hazards) == (
        "shared memory: cudaFuncSetAttribute(big_tile, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024); "
        "at csrc/kernels.cu:47 asks for 204,800 bytes per block; sm_120 allows 101,376",
    )


def test_every_excluded_gate_has_a_verdict_and_nothing_else_does() -> None:
    r = report()
    judged = {(v.gate_id, v.target) for v in r.verdicts}
    expected = {(g.id, t.arch) for g in r.gates for t in r.targets if g.status(t.arch).value != "admitted"}
    assert judged == expected


# --- pieces --------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", [a for a in universe() if a.cuda_arch >= 750], ids=lambda a: a.name)
def test_cuda_exact_test_admits_exactly_the_intended_targets(arch: object) -> None:
    from liftgate.detect.cuda import PackageAnalyzer

    text = f"#if {cuda_exact_test(arch)}  // lifted\nint x;\n#endif\n"  # type: ignore[arg-type]
    files = {"a.cu": text}
    (gate,) = PackageAnalyzer("t", None, files.get, list(files), (13, 0)).analyze("a.cu", text).gates
    admitted = {a.name for a in gate.admitted}
    name = arch.name  # type: ignore[attr-defined]
    base = name.rstrip("af")
    if name.endswith("a"):
        assert admitted == {name}
    elif name.endswith("f"):
        assert admitted == {base + "a", base + "f"}
    else:
        assert admitted == {a.name for a in universe() if a.name.rstrip("af") == base}
    assert gate.host is not None and gate.host.value == "false"


def test_whole_file_matcher_agrees_with_match_evidence() -> None:
    """The compiled whole-file matcher finds what the reference `match_evidence` finds, line by line."""
    lines = []
    for feature in load_catalog():
        lines.extend(f'asm volatile("{p} %0;");' for p in feature.ptx[:2])
        lines.extend(f"auto x = {name}(y);" for name in feature.identifiers[:3])
    lines += [
        'asm("xtcgen05.mma");',
        "int tcgen05_mmax = 0;",
        "// tcgen05.mma in a comment",
        'auto s = "UMMA";',
    ]
    text = "\n".join(lines) + "\n"
    info = _FileInfo(text, "t.cu", IncludeIndex(["t.cu"]))
    for number, line in enumerate(lines, 1):
        code_only = line.split("//")[0]
        literals = code_only.split('"')[1::2]
        code = "".join(code_only.split('"')[0::2])
        expected = {f.id for f in load_catalog() if match_evidence(f, " ".join(literals), code) is not None}
        found = {fid for fid, _ in info.hits.get(number, ())}
        assert found == expected, line


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("48 * 1024", 49152),
        ("(227 << 10)", 232448),
        ("200*1024u", 204800),
        ("kSmem", None),
        ("1 << 99", None),
    ],
)
def test_constant_sizes(text: str, value: int | None) -> None:
    assert _constant(text) == value


@pytest.mark.parametrize(
    ("name", "portable"),
    [
        ("__syncthreads", True),
        ("__nv_cvt_float2_to_fp4x2", True),
        ("cudaFuncSetAttribute", True),
        ("std::min", True),
        ("make_float4", True),
        ("uint32_t", True),
        ("vendor_blackbox", False),
        ("tmem_load_row", False),
    ],
)
def test_portable_calls(name: str, portable: bool) -> None:
    assert is_portable(name) is portable


# --- build filters and Python dispatch -------------------------------------------------------


def test_jit_filter_judged_by_its_sources_and_the_gates_inside_them() -> None:
    pdl = verdict("minijudge/jit.py", 7, "sm_120")
    assert pdl is not None and pdl.kind is VerdictKind.LIFTABLE
    assert pdl.scope.endswith("csrc/pdl_kernels.cu")
    # Lifting the filter alone builds pdl_kernels.cu with the PDL wait compiled out: the real case.
    (hazard,) = (h.text for h in pdl.hazards)
    assert hazard.startswith(
        "silent exclusion inside the sources: built for sm_120 with only this gate lifted"
    )
    assert "include/minijudge/pdl.cuh:5" in hazard and "griddepcontrol.wait" in hazard
    assert any("2 CUDA gate(s) in these sources still exclude sm_120" in r for r in pdl.reasons)
    tmem = verdict("minijudge/jit.py", 16, "sm_120a")
    assert tmem is not None and tmem.kind is VerdictKind.BLOCKED
    assert {u.feature for u in tmem.missing} == {"tcgen05-ld-st"}
    assert any(h.text.startswith("shared memory: cudaFuncSetAttribute(big_tile") for h in tmem.hazards)


def test_python_dispatch_reaches_the_jit_module_and_its_build_gate() -> None:
    v = verdict("minijudge/ops.py", 12, "sm_120")
    assert v is not None and v.kind is VerdictKind.LIFTABLE
    assert v.scope.startswith("best effort: the branch minijudge/ops.py:13-13, following get_pdl_module")
    build = verdict("minijudge/jit.py", 7, "sm_120")
    assert build is not None
    assert any(f"whose build gate {build.gate_id} also excludes sm_120: lift both" in r for r in v.reasons)
