"""The arch stage: spellings, ArchSet algebra, rendering, the data file and NVML detection."""

from __future__ import annotations

import re
import sys
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.arch import (
    Arch,
    ArchSet,
    InvalidVariantError,
    LocalGpu,
    NoGpuError,
    SpellingKind,
    UnknownArchError,
    arch_data,
    detect_local_archs,
    detect_local_gpus,
    nvcc_macros,
    parse_arch,
    parse_arch_list,
    parse_arch_list_entries,
    parse_target,
    product_names,
    render_archset,
    render_archset_long,
    resolve_arch,
    universe,
)

SM120 = Arch(12, 0)
SM120A = Arch(12, 0, "a")


def archset(predicate: Any) -> ArchSet:
    return ArchSet(a for a in universe() if predicate(a))


# --- parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # nvcc names, any case, with or without the underscore
        ("sm_120a", SM120A),
        ("SM120", SM120),
        ("sm120", SM120),
        ("SM_120A", SM120A),
        ("sm-120", SM120),
        ("compute_120a", SM120A),
        ("compute_90", Arch(9, 0)),
        ("lto_100f", Arch(10, 0, "f")),
        ("sm_75", Arch(7, 5)),
        ("sm_121f", Arch(12, 1, "f")),
        ("  sm_90a  ", Arch(9, 0, "a")),
        # capabilities
        ("12.0", SM120),
        ("12.0a", SM120A),
        ("12.0f", Arch(12, 0, "f")),
        ("9.0", Arch(9, 0)),
        ("10.3", Arch(10, 3)),
        ("8.8", Arch(8, 8)),
        # bare numbers
        ("120", SM120),
        ("120a", SM120A),
        ("90", Arch(9, 0)),
        ("90a", Arch(9, 0, "a")),
        ("100", Arch(10, 0)),
        ("103f", Arch(10, 3, "f")),
        ("75", Arch(7, 5)),
        # tuples, as torch.cuda.get_device_capability() prints them
        ("(12, 0)", SM120),
        ("(12,0)", SM120),
        ("12,0", SM120),
        ("12, 1", Arch(12, 1)),
        ("[9, 0]", Arch(9, 0)),
        # __CUDA_ARCH__ values
        ("1200", SM120),
        ("900", Arch(9, 0)),
        ("1000a", Arch(10, 0, "a")),
        # TORCH_CUDA_ARCH_LIST items
        ("9.0a", Arch(9, 0, "a")),
        ("8.6+PTX", Arch(8, 6)),
        ("8.6 + PTX", Arch(8, 6)),
        ("12.0+ptx", SM120),
    ],
)
def test_parse_spellings(text: str, expected: Arch) -> None:
    assert parse_arch(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rtx5090", SM120),
        ("RTX 5090", SM120),
        ("rtx-5090", SM120),
        ("RTX_5090", SM120),
        ("NVIDIA GeForce RTX 5090", SM120),
        ("rtx-pro-6000", SM120),
        ("RTX PRO 6000 Blackwell", SM120),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", SM120),
        ("h100", Arch(9, 0)),
        ("H100-SXM", Arch(9, 0)),
        ("h100-pcie", Arch(9, 0)),
        ("NVIDIA H100 80GB HBM3", Arch(9, 0)),
        ("h200", Arch(9, 0)),
        ("NVIDIA H200", Arch(9, 0)),
        ("gh200", Arch(9, 0)),
        ("gb10", Arch(12, 1)),
        ("dgx-spark", Arch(12, 1)),
        ("DGX Spark", Arch(12, 1)),
        ("thor", Arch(11, 0)),
        ("jetson-thor", Arch(11, 0)),
        ("b200", Arch(10, 0)),
        ("gb200", Arch(10, 0)),
        ("b300", Arch(10, 3)),
        ("gb300", Arch(10, 3)),
        ("v100", Arch(7, 0)),
        ("Tesla V100-SXM2-16GB", Arch(7, 0)),
        ("t4", Arch(7, 5)),
        ("Tesla T4", Arch(7, 5)),
        ("a100", Arch(8, 0)),
        ("NVIDIA A100-SXM4-80GB", Arch(8, 0)),
        ("a10", Arch(8, 6)),
        ("A10G", Arch(8, 6)),
        ("rtx3090", Arch(8, 6)),
        ("NVIDIA RTX A6000", Arch(8, 6)),
        ("l4", Arch(8, 9)),
        ("L40S", Arch(8, 9)),
        ("rtx4090", Arch(8, 9)),
        ("NVIDIA RTX 6000 Ada Generation", Arch(8, 9)),
        ("orin", Arch(8, 7)),
    ],
)
def test_parse_products_resolve_to_baseline(text: str, expected: Arch) -> None:
    resolution = resolve_arch(text)
    assert resolution.arch == expected
    assert resolution.arch.variant == ""
    assert resolution.kind is SpellingKind.PRODUCT
    assert resolution.product is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sm_101", Arch(11, 0)),
        ("sm_101a", Arch(11, 0, "a")),
        ("sm_101f", Arch(11, 0, "f")),
        ("10.1", Arch(11, 0)),
    ],
)
def test_former_names_resolve_to_the_new_arch_with_a_note(text: str, expected: Arch) -> None:
    resolution = resolve_arch(text)
    assert resolution.arch == expected
    assert resolution.note is not None
    assert "before CUDA 13.0" in resolution.note
    assert expected.name in resolution.note


def test_spelling_kinds_and_notes() -> None:
    assert resolve_arch("sm_90a").kind is SpellingKind.SM
    assert resolve_arch("9.0").kind is SpellingKind.CAPABILITY
    assert resolve_arch("90").kind is SpellingKind.NUMBER
    assert resolve_arch("(9, 0)").kind is SpellingKind.TUPLE
    assert resolve_arch("900").kind is SpellingKind.CUDA_ARCH
    assert resolve_arch("sm_90a").note is None
    ptx = resolve_arch("8.6+PTX")
    assert ptx.note is not None and "PTX" in ptx.note


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("sm_80a", "sm_80"),
        ("sm_90f", "sm_90, sm_90a"),
        ("8.9a", "sm_89"),
        ("compute_75f", "sm_75"),
        ("sm_120x", "sm_120, sm_120a, sm_120f"),
    ],
)
def test_variant_not_valid_for_capability(text: str, valid: str) -> None:
    with pytest.raises(InvalidVariantError) as info:
        parse_arch(text)
    assert isinstance(info.value, UnknownArchError)
    assert isinstance(info.value, ValueError)
    assert f"(valid targets: {valid})" in str(info.value)


def test_unknown_spelling_suggests_nearest() -> None:
    with pytest.raises(UnknownArchError) as info:
        parse_arch("rtx5900")
    assert str(info.value) == "unknown architecture 'rtx5900'; did you mean rtx5090, rtx5080, rtx5070?"
    assert info.value.suggestions[:2] == ("rtx5090", "rtx5080")
    assert info.value.text == "rtx5900"


@pytest.mark.parametrize(
    ("text", "first_suggestion"),
    [
        ("sm_95", "sm_90"),
        ("sm_122", "sm_121"),
        ("12", "12.0"),
        ("9", "9.0"),
        ("h10", "h100"),
        ("RTX 4900", "rtx4090"),
    ],
)
def test_unknown_spellings_suggest(text: str, first_suggestion: str) -> None:
    with pytest.raises(UnknownArchError) as info:
        parse_arch(text)
    assert info.value.suggestions[0] == first_suggestion
    assert "did you mean" in str(info.value)


@pytest.mark.parametrize(
    "text", ["", "   ", "foo", "1234", "sm_", "12.", "gfx942", "gfx90a", "sm_70.0", "13.0"]
)
def test_unknown_spellings_raise(text: str) -> None:
    with pytest.raises(UnknownArchError):
        parse_arch(text)


def test_amd_names_say_so() -> None:
    with pytest.raises(UnknownArchError, match="AMD"):
        parse_arch("gfx942")


def test_parse_target_accepts_tuples_and_arches() -> None:
    assert parse_target("rtx5090") == SM120
    assert parse_target((12, 0)) == SM120
    assert parse_target((10, 1)) == Arch(11, 0)
    assert parse_target(SM120A) == SM120A
    with pytest.raises(UnknownArchError):
        parse_target((6, 1))
    with pytest.raises(InvalidVariantError):
        parse_target(Arch(8, 0, "a"))


def test_parse_arch_list() -> None:
    assert parse_arch_list("8.0;8.6+PTX 9.0a") == [Arch(8, 0), Arch(8, 6), Arch(9, 0, "a")]
    assert parse_arch_list("8.0, 8.6 + PTX,9.0a;;") == [Arch(8, 0), Arch(8, 6), Arch(9, 0, "a")]
    assert parse_arch_list("sm_90a sm_100a sm_90a") == [Arch(9, 0, "a"), Arch(10, 0, "a")]
    assert parse_arch_list("") == []
    with pytest.raises(UnknownArchError):
        parse_arch_list("6.0;7.0")
    assert parse_arch_list("6.0;6.1;7.0;7.5", ignore_unknown=True) == [Arch(7, 0), Arch(7, 5)]


def test_parse_arch_list_entries_track_ptx() -> None:
    entries = parse_arch_list_entries("8.0;8.6 + PTX 9.0a")
    assert [(e.arch.name, e.ptx) for e in entries] == [("sm_80", False), ("sm_86", True), ("sm_90a", False)]
    cmake = parse_arch_list_entries("80-real;90a-virtual;120", cmake=True)
    assert [(e.arch.name, e.ptx) for e in cmake] == [("sm_80", False), ("sm_90a", True), ("sm_120", True)]
    # A later +PTX for the same arch upgrades the first entry.
    assert [(e.arch.name, e.ptx) for e in parse_arch_list_entries("9.0 9.0+PTX")] == [("sm_90", True)]


def test_parse_arch_list_expands_torch_named_arches() -> None:
    assert parse_arch_list("Ampere;Hopper") == [Arch(8, 0), Arch(8, 6), Arch(9, 0)]
    entries = parse_arch_list_entries("Blackwell")
    assert [(e.arch.name, e.ptx) for e in entries] == [
        ("sm_100", False),
        ("sm_103", False),
        ("sm_120", False),
        ("sm_121", True),
    ]


@given(st.sampled_from(universe()))
def test_property_name_round_trips(arch: Arch) -> None:
    assert parse_arch(arch.name) == arch
    assert parse_arch(f"{arch.major}.{arch.minor}{arch.variant}") == arch


@given(
    st.sampled_from(universe()),
    st.sampled_from(["sm_", "SM", "sm", "compute_", "COMPUTE_", "lto_", "sm-", ""]),
    st.booleans(),
)
def test_property_prefixes_and_case(arch: Arch, prefix: str, upper: bool) -> None:
    variant = arch.variant.upper() if upper else arch.variant
    assert parse_arch(f"{prefix}{arch.number}{variant}") == arch


@given(st.text(max_size=24) | st.text(alphabet="smcompute_lto0123456789.af,()[] +PTXrtxRTX-²٣", max_size=12))
def test_property_parse_never_crashes(text: str) -> None:
    try:
        arch = parse_arch(text)
    except UnknownArchError:
        return
    assert arch in ArchSet.all()


def test_every_product_parses_to_its_capability() -> None:
    for cap in arch_data().capabilities:
        for product in cap.products:
            assert parse_arch(product) == Arch(cap.major, cap.minor), product
    assert product_names()["rtx5090"] == SM120


# --- ArchSet algebra --------------------------------------------------------------------------


def test_archset_algebra() -> None:
    hopper = ArchSet([Arch(9, 0), Arch(9, 0, "a")])
    specific = archset(lambda a: a.variant == "a")
    everything, nothing = ArchSet.all(), ArchSet.none()
    assert hopper | specific == archset(lambda a: a.variant == "a" or a.cc == (9, 0))
    assert hopper & specific == ArchSet([Arch(9, 0, "a")])
    assert hopper - specific == ArchSet([Arch(9, 0)])
    assert ~hopper == everything - hopper
    assert ~everything == nothing and ~nothing == everything
    assert ~(hopper | specific) == ~hopper & ~specific
    assert len(everything) == len(universe())
    assert list(everything) == list(universe())
    assert everything.names()[0] == "sm_70"
    assert hopper.issubset(everything) and not everything.issubset(hopper) and nothing.issubset(hopper)
    assert Arch(9, 0, "a") in hopper and Arch(10, 0) not in hopper and "sm_90" not in hopper
    assert bool(hopper) and not nothing
    assert hash(hopper) == hash(ArchSet([Arch(9, 0, "a"), Arch(9, 0)]))
    assert ArchSet.from_mask(hopper.mask) == hopper
    assert ArchSet.from_mask(-1) == everything  # bits beyond the universe are dropped
    assert repr(hopper) == "ArchSet([sm_90, sm_90a])"


def test_archset_rejects_unknown_arch() -> None:
    with pytest.raises(ValueError, match="sm_80a"):
        ArchSet([Arch(8, 0, "a")])


def test_universe_is_ordered_old_to_new() -> None:
    keys = [a.sort_key() for a in universe()]
    assert keys == sorted(keys)
    assert len(set(universe())) == len(universe())


def test_arch_properties() -> None:
    assert SM120A.name == "sm_120a" and str(SM120A) == "sm_120a"
    assert SM120A.number == 120 and SM120A.cuda_arch == 1200 and SM120A.cc == (12, 0)
    assert SM120A.baseline == SM120
    assert Arch(12, 1).cuda_arch == 1210


# --- rendering --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("archs", "expected"),
    [
        (lambda a: 900 <= a.cuda_arch < 1200, "sm_90–sm_110 (all variants); not sm_120+"),
        (lambda a: a == Arch(9, 0, "a"), "sm_90a; not sm_100+"),
        (lambda a: a.cuda_arch >= 800, "sm_80–sm_121 (all variants)"),
        (lambda a: a.cuda_arch >= 900, "sm_90–sm_121 (all variants)"),
        (lambda a: a.cuda_arch < 900, "sm_70–sm_89; not sm_90+"),
        (lambda a: a.cuda_arch == 750, "sm_75; not sm_80+"),
        (lambda a: a.cc == (9, 0), "sm_90 (all variants); not sm_100+"),
        (lambda a: a == Arch(9, 0), "sm_90; not sm_100+"),
        (
            lambda a: a.major == 10 and a.variant in ("a", "f"),
            "sm_100a, sm_100f, sm_103a, sm_103f; not sm_110+",
        ),
        (lambda a: a.variant == "a", "sm_90a, sm_100a, sm_103a, sm_110a, sm_120a, sm_121a"),
        (
            lambda a: a.variant == "f" or a.cc == (12, 1),
            "sm_100f, sm_103f, sm_110f, sm_120f, sm_121 (all variants)",
        ),
        (
            lambda a: a.cc in ((8, 0), (8, 6), (9, 0)) or a == Arch(12, 0),
            "sm_80–sm_86, sm_90 (all variants), sm_120; not sm_121+",
        ),
        (lambda a: a.cc == (12, 1), "sm_121 (all variants)"),
        (lambda a: a != Arch(9, 0, "a"), "all except sm_90a"),
        (lambda a: True, "all"),
        (lambda a: False, "none"),
    ],
)
def test_render_archset(archs: Any, expected: str) -> None:
    s = archset(archs)
    assert render_archset(s) == expected
    assert s.render() == expected


def test_render_archset_long() -> None:
    s = archset(lambda a: a.major == 10)
    assert render_archset_long(s) == "sm_100, sm_100a, sm_100f, sm_103, sm_103a, sm_103f"
    assert render_archset_long(ArchSet.none()) == "none"


def read_rendering(text: str) -> ArchSet:
    """The inverse of render_archset, written from the rules in its docstring."""
    if text == "none":
        return ArchSet.none()
    if text == "all":
        return ArchSet.all()
    if text.startswith("all except "):
        return ~ArchSet(parse_arch(name) for name in text.removeprefix("all except ").split(", "))
    body, _, tail = text.partition("; not ")
    result = ArchSet.none()
    for piece in body.split(", "):
        names, _, qualifier = piece.partition(" ")
        assert qualifier in ("", "(all variants)"), piece
        first, _, last = names.partition("–")
        low, high = parse_arch(first), parse_arch(last or first)
        if last or qualifier:
            # A run of whole capabilities; runs start and end on baseline names.
            assert low.variant == high.variant == "", piece
            result |= archset(lambda a, lo=low.cc, hi=high.cc: lo <= a.cc <= hi)
        else:
            result |= ArchSet([low])
    if tail:
        first_excluded = parse_arch(tail.removesuffix("+"))
        assert tail.endswith("+") and first_excluded.variant == ""
        assert not result & archset(lambda a: a.cc >= first_excluded.cc)
        # The first excluded capability is the one right after the last member's.
        caps = [cap.cc for cap in arch_data().capabilities]
        last_member = max(a.cc for a in result)
        assert caps[caps.index(last_member) + 1] == first_excluded.cc
    else:
        assert max(a.cc for a in result) == arch_data().capabilities[-1].cc
    return result


@given(st.integers(min_value=0, max_value=(1 << len(universe())) - 1))
def test_property_render_reads_back_exactly(mask: int) -> None:
    s = ArchSet.from_mask(mask)
    text = render_archset(s)
    assert read_rendering(text) == s


# --- nvcc macros (pure; tests/test_arch_nvcc.py checks them against nvcc) ------------------------


def test_nvcc_macros_for_known_passes() -> None:
    sm90a = nvcc_macros(Arch(9, 0, "a"), (13, 0))
    assert {k: v for k, v in sm90a.items() if k.startswith("__CUDA_ARCH")} == {
        "__CUDA_ARCH__": 900,
        "__CUDA_ARCH_FEAT_SM90_ALL": 1,
        "__CUDA_ARCH_SPECIFIC__": 900,
        "__CUDA_ARCH_FAMILY_SPECIFIC__": 900,
        "__CUDA_ARCH_LIST__": 900,
    }
    sm100f = nvcc_macros(Arch(10, 0, "f"), (13, 0))
    assert {k: v for k, v in sm100f.items() if k.startswith("__CUDA_ARCH")} == {
        "__CUDA_ARCH__": 1000,
        "__CUDA_ARCH_FAMILY_SPECIFIC__": 1000,
        "__CUDA_ARCH_LIST__": 1000,
    }
    host = nvcc_macros(None, (12, 9))
    assert not any(k.startswith("__CUDA_ARCH") for k in host)
    assert host["__CUDACC_VER_MAJOR__"] == 12 and host["CUDART_VERSION"] == 12090


# --- the data file ----------------------------------------------------------------------------


def _normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def test_data_product_aliases_are_unique() -> None:
    seen: dict[str, str] = {}
    for cap in arch_data().capabilities:
        for product in cap.products:
            key = _normalise(product)
            assert key not in seen, f"{product!r} ({cap.major}.{cap.minor}) clashes with {seen[key]!r}"
            seen[key] = f"{product} ({cap.major}.{cap.minor})"
            assert not re.fullmatch(r"(sm|compute|lto)?\d+[a-z]?", key), (
                f"{product!r} reads as an arch number"
            )


def test_data_families_are_consistent() -> None:
    data = arch_data()
    known = {cap.cc for cap in data.capabilities}
    for name, members in data.families.items():
        assert members, name
        for member in members:
            assert member in known, f"family {name} lists unknown {member}"
            cap = data.capability(member)
            assert cap is not None and cap.family == name and "f" in cap.variants
    for cap in data.capabilities:
        assert ("f" in cap.variants) == (cap.family is not None), cap.cc
        assert cap.variants[0] == "", cap.cc


def test_data_sources_are_all_cited_and_known() -> None:
    data = arch_data()
    cited = set()
    for cap in data.capabilities:
        for key in (cap.source, *cap.see_also):
            assert key in data.sources, f"{cap.cc} cites unknown source {key!r}"
            cited.add(key)
    import json
    from importlib import resources

    raw = json.loads(resources.files("liftgate.data").joinpath("archs.json").read_text("utf-8"))
    cited |= {fam["source"] for fam in raw["families"].values()}
    cited.add(raw["torch_named_arches"]["source"])
    assert cited == set(data.sources), f"declared but never cited: {set(data.sources) - cited}"
    for key, text in data.sources.items():
        assert text.strip(), key


LIMIT_KEYS = {
    "smem_per_sm",
    "smem_per_block_optin",
    "max_threads_per_sm",
    "max_cluster_size",
    "tensor_memory_per_sm",
}


def test_data_limits_are_plausible() -> None:
    for cap in arch_data().capabilities:
        limits = cap.limits
        assert limits.keys() >= LIMIT_KEYS, cap.cc
        assert 0 < limits["smem_per_block_optin"] <= limits["smem_per_sm"], cap.cc
        # From 8.0 on the driver reserves 1 KiB of shared memory per block.
        reserved = 1024 if cap.cc >= (8, 0) else 0
        assert limits["smem_per_sm"] - limits["smem_per_block_optin"] == reserved, cap.cc
        assert limits["max_threads_per_sm"] in (1024, 1536, 2048), cap.cc
        assert limits["max_cluster_size"] == (8 if cap.cc >= (9, 0) else 1), cap.cc
        if "max_cluster_size_nonportable" in limits:
            assert limits["max_cluster_size_nonportable"] == 16, cap.cc
        # Tensor memory (tcgen05) exists on the 10.x and 11.0 families only.
        has_tmem = cap.family in ("100f", "110f")
        assert (limits["tensor_memory_per_sm"] == 256 * 1024) == has_tmem, cap.cc
        assert (limits["tensor_memory_per_sm"] == 0) == (not has_tmem), cap.cc


def test_data_known_facts() -> None:
    data = arch_data()
    rtx = data.capability((12, 0))
    hopper = data.capability((9, 0))
    assert rtx is not None and hopper is not None
    assert rtx.limits["smem_per_block_optin"] == 99 * 1024
    assert hopper.limits["smem_per_block_optin"] == 227 * 1024
    assert hopper.variants == ("", "a")
    assert data.families["120f"] == ((12, 0), (12, 1))
    thor = data.capability((11, 0))
    assert thor is not None and "sm_101" in thor.former_names


# --- NVML -------------------------------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


def fake_pynvml(gpus: list[tuple[str, tuple[int, int]]], *, init_error: bool = False) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    calls: list[str] = []

    def nvml_init() -> None:
        calls.append("init")
        if init_error:
            raise FakeNVMLError("Driver Not Loaded")

    def nvml_shutdown() -> None:
        calls.append("shutdown")

    module.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    module.nvmlInit = nvml_init  # type: ignore[attr-defined]
    module.nvmlShutdown = nvml_shutdown  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(gpus)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda h: gpus[h][0]  # type: ignore[attr-defined]
    module.nvmlDeviceGetCudaComputeCapability = lambda h: gpus[h][1]  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    return module


def test_nvml_two_identical_gpus_dedupe(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml([("NVIDIA GeForce RTX 5090", (12, 0)), (b"NVIDIA GeForce RTX 5090", (12, 0))])  # type: ignore[list-item]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert detect_local_archs() == [SM120]
    gpus = detect_local_gpus()
    assert gpus == [
        LocalGpu(0, "NVIDIA GeForce RTX 5090", (12, 0), SM120),
        LocalGpu(1, "NVIDIA GeForce RTX 5090", (12, 0), SM120),
    ]
    assert fake.calls == ["init", "shutdown", "init", "shutdown"]


def test_nvml_mixed_gpus_keep_order(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml([("NVIDIA H100", (9, 0)), ("NVIDIA B200", (10, 0)), ("NVIDIA H100", (9, 0))])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert detect_local_archs() == [Arch(9, 0), Arch(10, 0)]


def test_nvml_zero_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml([])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(NoGpuError) as info:
        detect_local_archs()
    assert (
        str(info.value)
        == "no --target given and no NVIDIA GPU found; pass --target ARCH, e.g. --target sm_120"
    )
    assert fake.calls == ["init", "shutdown"]


def test_nvml_init_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], init_error=True))
    with pytest.raises(NoGpuError) as info:
        detect_local_archs()
    message = str(info.value)
    assert message.startswith("no --target given and no NVIDIA GPU found")
    assert "Driver Not Loaded" in message and "--target sm_120" in message
    assert "\n" not in message


def test_nvml_module_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import pynvml` raise ImportError.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NoGpuError) as info:
        detect_local_archs()
    assert str(info.value) == (
        "no --target given and nvidia-ml-py is not installed; "
        "pass --target ARCH (e.g. --target sm_120) or install liftgate[nvml]"
    )


def test_nvml_unknown_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml([("NVIDIA Future GPU", (13, 0))])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(NoGpuError) as info:
        detect_local_archs()
    assert "GPU 0 (NVIDIA Future GPU) has compute capability 13.0" in str(info.value)
    assert "--target" in str(info.value)
    assert fake.calls == ["init", "shutdown"]


def test_nvml_old_driver_reports_thor_as_10_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([("NVIDIA Thor", (10, 1))]))
    (gpu,) = detect_local_gpus()
    assert gpu.arch == Arch(11, 0) and gpu.capability == (10, 1)
    assert gpu.note is not None and "sm_110" in gpu.note


def test_nvml_query_error_still_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml([("NVIDIA H100", (9, 0))])

    def broken(handle: int) -> tuple[int, int]:
        raise FakeNVMLError("GPU is lost")

    fake.nvmlDeviceGetCudaComputeCapability = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(NoGpuError, match="GPU is lost"):
        detect_local_archs()
    assert fake.calls == ["init", "shutdown"]


@settings(max_examples=300, deadline=None)
@given(mask=st.integers(min_value=0, max_value=(1 << len(universe())) - 1))
def test_a_rendered_set_is_remembered_as_it_was_rendered(mask: int) -> None:
    from liftgate.arch.render import _render

    archs = ArchSet.from_mask(mask)
    assert render_archset(archs) == _render(archs)
    assert render_archset(ArchSet.from_mask(mask)) == _render(archs)  # the remembered text
