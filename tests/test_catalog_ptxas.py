"""The hardware-feature catalog, proven against the real ``ptxas``, and its loader.

For every feature and every known compile target, the feature's probe is placed into the
catalog's kernel template and assembled with ``ptxas -arch=<target> probe.ptx -o /dev/null``; the
catalog's arch set must be exactly the targets that assemble. Targets this ``ptxas`` cannot
compile for at all (an empty kernel fails: CUDA 13 dropped sm_70 and sm_72) are left out of the
comparison; the catalog keeps what the documentation says for them. The runs (about 1,300) go
through tools/probe_matrix.py's thread pool and take about 10 s on two cores; without ``ptxas``
those tests skip. The loader tests need nothing but the package.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from liftgate.arch.core import Arch, ArchSet, universe
from liftgate.judge.catalog import (
    Feature,
    catalog_info,
    feature,
    identifier_matches,
    load_catalog,
    match_evidence,
    parse_catalog,
    probe_module,
    probe_ptx,
)

TOOL = Path(__file__).resolve().parent.parent / "tools" / "probe_matrix.py"


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("probe_matrix", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("probe_matrix", module)  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


probe_matrix = _load_tool()
PTXAS = probe_matrix.find_ptxas()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA toolkit) is not on PATH")
FEATURE_IDS = [f.id for f in load_catalog()]


def raw_catalog() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files("liftgate.data").joinpath("features.json").read_text("utf-8")
    )
    return data


def archs(*names: str) -> ArchSet:
    by_name = {a.name: a for a in universe()}
    return ArchSet(by_name[n] for n in names)


def where(predicate: Any) -> ArchSet:
    return ArchSet(a for a in universe() if predicate(a))


# --- against ptxas ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def matrix() -> Any:
    return probe_matrix.run_matrix(load_catalog(), ptxas=PTXAS)


@needs_ptxas
@pytest.mark.parametrize("feature_id", FEATURE_IDS)
def test_catalog_archs_are_what_ptxas_assembles(matrix: Any, feature_id: str) -> None:
    item = feature(feature_id)
    claimed = {a.name for a in item.archs} & set(matrix.targets)
    assembled = matrix.assembling(feature_id)
    order = [a.name for a in universe()]
    assert claimed == assembled, (
        f"{feature_id}: ptxas {matrix.ptxas_version} (PTX ISA {matrix.ptx_version}) assembles "
        f"{sorted(assembled - claimed, key=order.index)} that the catalog lacks and rejects "
        f"{sorted(claimed - assembled, key=order.index)} that it claims; the catalog was made with ptxas "
        f"{catalog_info().ptxas}. Check the probe, then run: python tools/probe_matrix.py --write"
    )


@needs_ptxas
@pytest.mark.parametrize("feature_id", FEATURE_IDS)
def test_probe_fails_only_for_the_target(matrix: Any, feature_id: str) -> None:
    """A probe rejected for a syntax error would make an arch set say nothing about the hardware."""
    results = [matrix.results[(feature_id, t)] for t in matrix.targets]
    assert any(r.assembles for r in results), (
        f"{feature_id}: the probe assembles nowhere: {results[-1].first_line}"
    )
    broken = [f"{r.target}: {r.first_line}" for r in results if not r.arch_related]
    assert not broken, (
        f"{feature_id}: ptxas rejects the probe for a reason other than the target: {broken[0]}"
    )


@needs_ptxas
def test_untestable_targets_are_the_dropped_ones(matrix: Any) -> None:
    """Only targets older than every feature may fall out of the comparison unnoticed."""
    known = {a.name for a in universe()}
    assert set(matrix.targets) | set(matrix.untestable) == known
    first_feature_target = min((a for f in load_catalog() for a in f.archs), key=Arch.sort_key)
    for name in matrix.untestable:
        arch = next(a for a in universe() if a.name == name)
        assert arch.sort_key() < first_feature_target.sort_key(), (
            f"ptxas {matrix.ptxas_version} cannot compile for {name}, which catalog features claim; "
            "the catalog can no longer be checked there"
        )


@needs_ptxas
def test_probes_use_the_newest_ptx_version(matrix: Any) -> None:
    assert re.fullmatch(r"\d+\.\d+", matrix.ptx_version)
    if matrix.ptxas_version == catalog_info().ptxas:
        assert matrix.ptx_version == catalog_info().ptx_version


# --- documented facts the matrix must keep (checked without ptxas) ------------------------------

A_OR_F_FROM_100 = where(lambda a: a.major >= 10 and a.variant in ("a", "f"))
FROM_90 = where(lambda a: a.major >= 9)
SM12X_AF = where(lambda a: a.major == 12 and a.variant in ("a", "f"))


@pytest.mark.parametrize(
    ("feature_id", "expected"),
    [
        ("griddepcontrol", FROM_90),
        ("wgmma", archs("sm_90a")),
        ("tcgen05-mma", archs("sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f")),
        ("setmaxnreg", archs("sm_90a") | A_OR_F_FROM_100),
        ("tensormap-replace", archs("sm_90a") | A_OR_F_FROM_100),
        ("mma-block-scale", SM12X_AF),
        ("mma-fp6-fp4", SM12X_AF),
        ("tcgen05-mma-i8", archs("sm_100a", "sm_110a")),
        ("cp-async", where(lambda a: a.cc >= (8, 0))),
        ("mma-fp8", where(lambda a: a.cc >= (8, 9))),
        ("f32x2", where(lambda a: a.major >= 10)),
    ],
)
def test_documented_arch_sets(feature_id: str, expected: ArchSet) -> None:
    assert feature(feature_id).archs == expected, feature(feature_id).archs.names()


def test_no_tcgen05_on_consumer_blackwell() -> None:
    sm12x = where(lambda a: a.major == 12)
    for item in load_catalog():
        if item.id.startswith("tcgen05"):
            assert not (item.archs & sm12x), item.id


def test_required_features_are_catalogued() -> None:
    required = {
        "griddepcontrol", "wgmma", "tcgen05-mma", "tcgen05-ld-st", "tcgen05-alloc", "tcgen05-cp", "tcgen05-commit",
        "tcgen05-mma-block-scale", "setmaxnreg", "cp-async", "cp-async-bulk", "tma-tile", "tma-multicast",
        "tma-cta-group", "tensormap-replace", "mbarrier", "mbarrier-tx", "cluster", "dsmem", "multimem",
        "multimem-fp8", "elect-sync", "ldmatrix-b16", "ldmatrix-b8", "stmatrix-b16", "stmatrix-b8", "mma-f16",
        "mma-bf16", "mma-tf32", "mma-fp8", "mma-kind-f8f6f4", "mma-fp6-fp4", "mma-block-scale", "cvt-fp8", "cvt-fp4",
        "cvt-fp6", "cvt-ue8m0", "atom-bf16", "atom-vector", "redux-sync", "redux-sync-f32", "fence-proxy-async",
        "st-bulk", "ld-256", "f32x2", "clusterlaunchcontrol",
    }  # fmt: skip
    assert required <= set(FEATURE_IDS), sorted(required - set(FEATURE_IDS))


# --- the loader -------------------------------------------------------------------------------


def test_ids_unique_and_well_formed() -> None:
    assert len(FEATURE_IDS) == len(set(FEATURE_IDS))
    for fid in FEATURE_IDS:
        assert re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", fid), fid


def test_arch_names_known_and_in_universe_order() -> None:
    order = [a.name for a in universe()]
    for entry in raw_catalog()["features"]:
        assert all(name in order for name in entry["archs"]), entry["id"]
        assert entry["archs"] == sorted(entry["archs"], key=order.index), entry["id"]
        assert feature(entry["id"]).archs.names() == entry["archs"]


def test_evidence_present_and_patterns_compile() -> None:
    for item in load_catalog():
        assert item.ptx or item.ptx_patterns or item.identifiers or item.patterns, item.id
        for pattern in (*item.ptx_patterns, *item.patterns):
            re.compile(pattern)
        for name in item.identifiers:
            assert re.fullmatch(r"[A-Za-z_]\w*", name), (item.id, name)
        assert item.description and item.ptx_section and item.probe.strip(), item.id
        assert "PTX ISA" in item.ptx_section, item.id


def test_catalog_header() -> None:
    info = catalog_info()
    assert re.fullmatch(r"\d+\.\d+(?:\.\d+)?", info.ptxas)
    assert re.fullmatch(r"\d+\.\d+", info.ptx_version)
    assert info.notes and "ptx-isa" in info.sources


def test_load_catalog_is_cached() -> None:
    assert load_catalog() is load_catalog()


def test_feature_lookup() -> None:
    assert feature("wgmma").id == "wgmma"
    assert feature("wgmma").supports("sm_90a") and not feature("wgmma").supports("sm_100a")
    with pytest.raises(KeyError, match="no feature 'tcgen06'"):
        feature("tcgen06")


def _mutated(change: Any) -> dict[str, Any]:
    raw = copy.deepcopy(raw_catalog())
    change(raw)
    return raw


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["features"].append(copy.deepcopy(r["features"][0])), "'griddepcontrol': listed twice"),
        (lambda r: r["features"][0]["archs"].append("sm_99"), "unknown target"),
        (lambda r: r["features"][0].update(evidence={"ptx": [], "identifiers": []}), "evidence is empty"),
        (lambda r: r["features"][0]["evidence"]["patterns"].append("(unclosed"), "does not compile"),
        (
            lambda r: r["features"][0]["evidence"]["identifiers"].append("cute::UMMA"),
            "not a single identifier",
        ),
        (lambda r: r["features"][0]["evidence"].update(mnemonics=["x"]), "evidence must be an object"),
        (lambda r: r["features"][0].pop("probe"), "missing probe"),
        (lambda r: r["features"][0].update(ordering="yes"), "ordering must be true or false"),
        (lambda r: r.update(schema=2), "expected schema 1"),
    ],
)
def test_parse_catalog_rejects_bad_entries(change: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_catalog(_mutated(change))


# --- probes and evidence matching ---------------------------------------------------------------


def test_probe_module_shape() -> None:
    text = probe_ptx(feature("setmaxnreg"), "sm_90a", "9.0")
    assert text.splitlines()[1:4] == [".version 9.0", ".target sm_90a", ".address_size 64"]
    # The entry directive sits between the parameter list and the body, the statements inside it.
    assert re.search(r"\)\n\.maxnreg 128\n\{", text)
    assert "    setmaxnreg.inc.sync.aligned.u32 232;" in text
    assert text.rstrip().endswith("ret;\n}")
    assert ".maxnreg" not in probe_module("", "sm_75", "9.0")
    with pytest.raises(ValueError, match="not a compile target"):
        probe_module("", "compute_90", "9.0")
    with pytest.raises(ValueError, match="not a PTX ISA version"):
        probe_module("", "sm_90", "9")


def _hits(asm: str = "", code: str = "") -> set[str]:
    return {f.id for f in load_catalog() if match_evidence(f, asm, code) is not None}


def test_ptx_evidence_matches_at_a_mnemonic_boundary() -> None:
    assert "griddepcontrol" in _hits(asm='"griddepcontrol.wait;"')
    assert "tcgen05-mma" in _hits(asm='"tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;"')
    # cp.async.mbarrier.arrive is cp-async, not an mbarrier.arrive.
    assert _hits(asm='"cp.async.mbarrier.arrive.noinc.shared.b64 [%0];"') == {"cp-async"}
    assert not _hits(asm='"xgriddepcontrol.waitx;"')


def test_ptx_patterns_see_qualifiers_anywhere() -> None:
    multicast = '"cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint"'
    assert {"tma-tile", "tma-multicast"} <= _hits(asm=multicast)
    cutlass_order = '"mma.sync.aligned.kind::f8f6f4.m16n8k32.row.col.f32.e2m1.e2m1.f32 "'
    assert {"mma-kind-f8f6f4", "mma-fp6-fp4"} <= _hits(asm=cutlass_order)
    fp8_only = '"mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e4m3.e5m2.f32 "'
    assert "mma-kind-f8f6f4" in _hits(asm=fp8_only) and "mma-fp6-fp4" not in _hits(asm=fp8_only)
    assert "cluster" in _hits(asm='"mov.u32 %0, %%cluster_ctarank;"')
    assert "tcgen05-mma-scale-vec" in _hits(
        asm='"tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X [%0], %1, %2, %3, [%4], [%5], p;"'
    )


def test_identifier_evidence() -> None:
    assert identifier_matches("SM90_64x", "SM90_64x128x16_F32BF16BF16_SS")
    assert identifier_matches("SM100_MMA_", "SM100_MMA_F16BF16_SS")
    assert not identifier_matches("UMMA", "UMMA_2x1SM")
    assert "wgmma" in _hits(code="using MmaOp = SM90_64x128x16_F32BF16BF16_SS<GMMA::Major::K>;")
    assert "tcgen05-mma" in _hits(code="cute::UMMA::Major major = cute::UMMA::Major::K;")
    assert "griddepcontrol" in _hits(code="cudaGridDependencySynchronize();")
    # A string naming an intrinsic is not a call of it.
    assert "griddepcontrol" not in _hits(code='printf("");')


def test_code_patterns() -> None:
    assert "tcgen05-mma" in _hits(code="op = cute.nvgpu.tcgen05.MmaF16BF16Op(ab_dtype, acc_dtype)")
    assert "tcgen05-mma" in _hits(code="from cutlass.cute.nvgpu import cpasync, tcgen05")
    assert "wgmma" in _hits(code="using Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;")
    # The SM100 schedule of the same family is tcgen05, not wgmma.
    sm100 = _hits(code="using Schedule = cutlass::gemm::KernelTmaWarpSpecialized1SmSm100;")
    assert "tcgen05-mma" in sm100 and "wgmma" not in sm100


def test_software_fallback_intrinsics_are_not_evidence() -> None:
    for code in (
        "auto q = __nv_cvt_float2_to_fp4x2(f, __NV_E2M1, cudaRoundNearest);",
        "__pipeline_memcpy_async(dst, src, 16);",
        "if (cute::elect_one_sync()) {",
    ):
        assert not _hits(code=code), code


def test_feature_is_hashable_and_frozen() -> None:
    item = feature("wgmma")
    assert isinstance(item, Feature) and hash(item) == hash(feature("wgmma"))
    with pytest.raises(AttributeError):
        item.id = "x"  # type: ignore[misc]
