"""The known-architecture universe: `Arch`, `ArchSet` and the facts loaded from ``data/archs.json``.

Every other stage speaks in these terms: a detector evaluates a gate condition once per
known arch (plus the host pass) and stores the result as an `ArchSet`; reports render
that set compactly. The universe is ordered by (major, minor, variant) so that set
renderings read naturally from old to new.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

VARIANT_ORDER = {"": 0, "a": 1, "f": 2}


@dataclass(frozen=True, slots=True, order=True)
class Arch:
    """A compilation/runtime target: capability plus variant ('' baseline, 'a' arch-specific, 'f' family)."""

    major: int
    minor: int
    variant: str = ""

    @property
    def cc(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def number(self) -> int:
        """The number in `sm_XX` spellings: 9.0 -> 90, 12.0 -> 120."""
        return self.major * 10 + self.minor

    @property
    def cuda_arch(self) -> int:
        """The value nvcc gives ``__CUDA_ARCH__`` for this target: 9.0 -> 900, 12.1 -> 1210."""
        return self.major * 100 + self.minor * 10

    @property
    def name(self) -> str:
        return f"sm_{self.number}{self.variant}"

    @property
    def baseline(self) -> Arch:
        return Arch(self.major, self.minor, "")

    def __str__(self) -> str:
        return self.name

    def sort_key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, VARIANT_ORDER[self.variant])


@dataclass(frozen=True, slots=True)
class Capability:
    """One compute capability's facts from the data file."""

    major: int
    minor: int
    codename: str
    variants: tuple[str, ...]
    family: str | None
    products: tuple[str, ...]
    former_names: tuple[str, ...]
    limits: dict[str, int] = field(hash=False, compare=False)
    notes: str
    source: str
    see_also: tuple[str, ...] = ()

    @property
    def cc(self) -> tuple[int, int]:
        return (self.major, self.minor)


@dataclass(frozen=True, slots=True)
class ArchData:
    capabilities: tuple[Capability, ...]
    families: dict[str, tuple[tuple[int, int], ...]] = field(hash=False, compare=False)
    sources: dict[str, str] = field(hash=False, compare=False)
    universe: tuple[Arch, ...] = ()
    # TORCH_CUDA_ARCH_LIST names such as "Hopper" -> "9.0+PTX" (torch/utils/cpp_extension.py).
    torch_named_arches: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    notes: tuple[str, ...] = ()

    def capability(self, cc: tuple[int, int]) -> Capability | None:
        for cap in self.capabilities:
            if cap.cc == cc:
                return cap
        return None


def _parse_cc(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


@cache
def arch_data() -> ArchData:
    """Load and validate ``data/archs.json`` once.

    Raises ValueError naming the entry when the file contradicts itself (an unknown source, variant
    or family member, a capability listed twice), so a bad edit fails at import, not mid-scan.
    """
    raw: dict[str, Any] = json.loads(
        resources.files("liftgate.data").joinpath("archs.json").read_text("utf-8")
    )
    sources = dict(raw["sources"])

    def check_source(where: str, key: str) -> None:
        if key not in sources:
            raise ValueError(f"archs.json: {where} cites unknown source {key!r}")

    caps: list[Capability] = []
    for entry in raw["capabilities"]:
        major, minor = _parse_cc(entry["cc"])
        check_source(entry["cc"], entry["source"])
        for extra in entry.get("see_also", ()):
            check_source(entry["cc"], extra)
        for variant in entry["variants"]:
            if variant not in VARIANT_ORDER:
                raise ValueError(f"archs.json: {entry['cc']} has unknown variant {variant!r}")
        if "" not in entry["variants"]:
            raise ValueError(f"archs.json: {entry['cc']} lacks the baseline variant")
        if any(cap.cc == (major, minor) for cap in caps):
            raise ValueError(f"archs.json: {entry['cc']} is listed twice")
        caps.append(
            Capability(
                major=major,
                minor=minor,
                codename=entry["codename"],
                variants=tuple(sorted(entry["variants"], key=VARIANT_ORDER.__getitem__)),
                family=entry.get("family"),
                products=tuple(entry.get("products", ())),
                former_names=tuple(entry.get("former_names", ())),
                limits=dict(entry.get("limits", {})),
                notes=entry.get("notes", ""),
                source=entry["source"],
                see_also=tuple(entry.get("see_also", ())),
            )
        )
    caps.sort(key=lambda c: c.cc)
    known = {c.cc for c in caps}
    families = {name: tuple(_parse_cc(m) for m in fam["members"]) for name, fam in raw["families"].items()}
    for name, fam in raw["families"].items():
        check_source(f"family {name}", fam["source"])
        for member in families[name]:
            if member not in known:
                raise ValueError(f"archs.json: family {name} lists unknown capability {member}")
    for cap in caps:
        if cap.family is not None and cap.cc not in families.get(cap.family, ()):
            raise ValueError(
                f"archs.json: {cap.major}.{cap.minor} claims family {cap.family!r}, which does not list it"
            )
    torch_raw = raw.get("torch_named_arches", {})
    if torch_raw:
        check_source("torch_named_arches", torch_raw["source"])
    universe = tuple(sorted((Arch(c.major, c.minor, v) for c in caps for v in c.variants), key=Arch.sort_key))
    return ArchData(
        capabilities=tuple(caps),
        families=families,
        sources=sources,
        universe=universe,
        torch_named_arches=dict(torch_raw.get("names", {})),
        notes=tuple(raw.get("notes", ())),
    )


def universe() -> tuple[Arch, ...]:
    """Every known device target, ordered old to new, baseline before 'a' before 'f'."""
    return arch_data().universe


@cache
def _index() -> dict[Arch, int]:
    return {arch: i for i, arch in enumerate(universe())}


class ArchSet:
    """An immutable set over the known-arch universe, stored as a bit mask.

    Bit i stands for ``universe()[i]``. The algebra (``| & - ~``) never leaves the universe.
    """

    __slots__ = ("_mask",)

    def __init__(self, archs: Iterable[Arch] = ()) -> None:
        index = _index()
        mask = 0
        for arch in archs:
            try:
                mask |= 1 << index[arch]
            except KeyError:
                raise ValueError(f"{arch} is not a known architecture") from None
        self._mask = mask

    @classmethod
    def from_mask(cls, mask: int) -> ArchSet:
        new = cls.__new__(cls)
        new._mask = mask & ((1 << len(universe())) - 1)
        return new

    @classmethod
    def all(cls) -> ArchSet:
        return cls.from_mask(-1)

    @classmethod
    def none(cls) -> ArchSet:
        return cls.from_mask(0)

    @property
    def mask(self) -> int:
        return self._mask

    def __iter__(self) -> Iterator[Arch]:
        mask = self._mask
        for i, arch in enumerate(universe()):
            if mask >> i & 1:
                yield arch

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def __contains__(self, arch: object) -> bool:
        if not isinstance(arch, Arch):
            return False
        i = _index().get(arch)
        return i is not None and bool(self._mask >> i & 1)

    def __or__(self, other: ArchSet) -> ArchSet:
        return ArchSet.from_mask(self._mask | other._mask)

    def __and__(self, other: ArchSet) -> ArchSet:
        return ArchSet.from_mask(self._mask & other._mask)

    def __sub__(self, other: ArchSet) -> ArchSet:
        return ArchSet.from_mask(self._mask & ~other._mask)

    def __invert__(self) -> ArchSet:
        return ArchSet.from_mask(~self._mask)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArchSet) and other._mask == self._mask

    def __hash__(self) -> int:
        return hash(self._mask)

    def __repr__(self) -> str:
        return f"ArchSet([{', '.join(a.name for a in self)}])"

    def names(self) -> list[str]:
        return [a.name for a in self]

    def issubset(self, other: ArchSet) -> bool:
        return self._mask & ~other._mask == 0

    def render(self) -> str:
        """Compact human rendering, e.g. ``sm_90–sm_110 (all variants); not sm_120+``."""
        from liftgate.arch.render import render_archset

        return render_archset(self)


def nvcc_macros(arch: Arch | None, cuda_version: tuple[int, int] = (13, 0)) -> dict[str, int]:
    """The object-like macros nvcc predefines in one compilation pass (``None`` = the host pass).

    Values follow gcc's ``-DNAME`` convention (no value means 1). ``__CUDA_ARCH_LIST__`` is the
    list of targets of the whole compilation; for a single-target build it equals the target's
    ``__CUDA_ARCH__``, and in the host pass it depends on the build, so it is left out there.
    Checked against ``nvcc --dryrun`` in tests/test_arch_nvcc.py.
    """
    major, minor = cuda_version
    macros = {
        "__CUDACC__": 1,
        "__NVCC__": 1,
        "__CUDACC_VER_MAJOR__": major,
        "__CUDACC_VER_MINOR__": minor,
        "__CUDA_API_VER_MAJOR__": major,
        "__CUDA_API_VER_MINOR__": minor,
        # Defined by cuda_runtime_api.h / cuda.h, which nvcc includes for every .cu translation unit.
        "CUDART_VERSION": major * 1000 + minor * 10,
        "CUDA_VERSION": major * 1000 + minor * 10,
    }
    if arch is None:
        return macros
    value = arch.cuda_arch
    macros["__CUDA_ARCH__"] = value
    macros["__CUDA_ARCH_LIST__"] = value
    if arch.variant in ("a", "f"):
        macros["__CUDA_ARCH_FAMILY_SPECIFIC__"] = value
    if arch.variant == "a":
        macros["__CUDA_ARCH_SPECIFIC__"] = value
        macros[f"__CUDA_ARCH_FEAT_SM{arch.number}_ALL"] = 1
    return macros


TOOLKIT_MACROS = frozenset(
    {
        "__CUDACC_VER_MAJOR__",
        "__CUDACC_VER_MINOR__",
        "__CUDACC_VER_BUILD__",
        "__CUDA_API_VER_MAJOR__",
        "__CUDA_API_VER_MINOR__",
        "CUDART_VERSION",
        "CUDA_VERSION",
        "__CUDART_API_VERSION",
    }
)


def cuda_exact_test(arch: Arch) -> str:
    """A preprocessor condition true in exactly the device passes that compile for ``arch``.

    A plain target (``sm_120``) is admitted with its arch-specific variants (code that needs only
    what sm_120 has runs on sm_120a and sm_120f too); ``sm_120a`` only in its own pass
    (``__CUDA_ARCH_FEAT_SM120_ALL``); ``sm_120f`` in the family-specific passes of that capability
    (``sm_120f`` and ``sm_120a``: ``a`` has every ``f`` feature). Never true in the host pass.
    tests/test_arch_exact_test.py evaluates it for every known target.
    """
    value = arch.cuda_arch
    if arch.variant == "a":
        return f"(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == {value} && defined(__CUDA_ARCH_FEAT_SM{arch.number}_ALL))"
    if arch.variant == "f":
        return (
            f"(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == {value} && defined(__CUDA_ARCH_FAMILY_SPECIFIC__) "
            f"&& __CUDA_ARCH_FAMILY_SPECIFIC__ == {value})"
        )
    return f"(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == {value})"
