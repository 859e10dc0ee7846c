"""Turn what people type or what build files say into an `Arch`.

The ``arch`` stage's front door: ``--target`` values, TORCH_CUDA_ARCH_LIST entries, CMake
CUDA_ARCHITECTURES items and NVML device names all come through here. Accepted spellings:
``sm_120a``, ``SM120``, ``compute_120a``, ``lto_120a``, ``12.0``, ``12.0a``, ``120``, ``120a``,
``(12, 0)``, ``12,0``, ``__CUDA_ARCH__`` values (``1200``), torch list items (``8.6+PTX``), product
names and aliases from ``data/archs.json`` (``rtx5090``, ``RTX PRO 6000 Blackwell``, ``h100-sxm``,
``NVIDIA GeForce RTX 5090``), and former names (``sm_101`` is ``sm_110`` since CUDA 13.0).
Products and plain capabilities resolve to the baseline variant. Anything else raises
`UnknownArchError`, whose message suggests the nearest known spellings.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from functools import cache

from liftgate.arch.core import Arch, Capability, arch_data

__all__ = [
    "ArchListEntry",
    "ArchResolution",
    "InvalidVariantError",
    "SpellingKind",
    "UnknownArchError",
    "parse_arch",
    "parse_arch_list",
    "parse_arch_list_entries",
    "parse_target",
    "product_names",
    "resolve_arch",
    "suggest",
]

_VARIANT_WORDS = {"a": "architecture-specific ('a')", "f": "family-specific ('f')"}


class UnknownArchError(ValueError):
    """A spelling that names no known architecture; ``suggestions`` holds the nearest known spellings."""

    def __init__(self, text: str, message: str, suggestions: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.text = text
        self.suggestions = tuple(suggestions)


class InvalidVariantError(UnknownArchError):
    """A known capability with a variant it does not have, e.g. ``sm_80a`` or ``sm_90f``."""


class SpellingKind(str, Enum):
    """How a spelling named its arch, so callers can say what they understood."""

    SM = "sm"  # sm_120a, compute_120a, lto_120a, SM120
    NUMBER = "number"  # 120, 120a
    CAPABILITY = "capability"  # 12.0, 12.0a, 8.6+PTX
    TUPLE = "tuple"  # (12, 0), 12,0
    CUDA_ARCH = "cuda-arch"  # 1200, the value of __CUDA_ARCH__
    PRODUCT = "product"  # rtx5090
    ARCH = "arch"  # an Arch or (major, minor) passed to parse_target


@dataclass(frozen=True, slots=True)
class ArchResolution:
    """The outcome of parsing one spelling: the arch, how it was spelled, and a note for the user.

    ``note`` is set when the spelling needed interpretation worth telling the user about, such as
    a former name (``sm_101`` -> ``sm_110``) or a ``+PTX`` suffix that was dropped.
    """

    arch: Arch
    spelling: str
    kind: SpellingKind
    product: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class ArchListEntry:
    """One item of an arch list: the arch, and whether the build also embeds PTX for it.

    PTX for an arch is JIT-compiled by the driver on any later capability, so an entry with
    ``ptx`` admits newer GPUs at run time where a SASS-only entry does not.
    """

    arch: Arch
    ptx: bool
    spelling: str


# sm_120a, SM120, compute_90a, lto_100f, sm-86
_SM_RE = re.compile(r"^(?:sm|compute|lto)[_\-\s]?([0-9]{2,3})([a-z]?)$", re.IGNORECASE | re.ASCII)
# 12.0, 12.0a, 9.0A
_CC_RE = re.compile(r"^([0-9]{1,2})\.([0-9])([a-z]?)$", re.IGNORECASE | re.ASCII)
# (12, 0), 12,0, [9, 0]
_TUPLE_RE = re.compile(r"^[(\[]?\s*([0-9]{1,2})\s*,\s*([0-9])\s*[)\]]?$", re.ASCII)
# 120, 120a, 90, 1200
_NUMBER_RE = re.compile(r"^([0-9]{2,4})([a-z]?)$", re.IGNORECASE | re.ASCII)
# 8.6+PTX, 8.6 + PTX
_PTX_SUFFIX_RE = re.compile(r"\s*\+\s*ptx\s*$", re.IGNORECASE)

# Words that NVML device names and shop listings add around a product name.
_VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla"})
_PACKAGING_WORDS = frozenset(
    {
        "pcie",
        "sxm",
        "sxm2",
        "sxm4",
        "sxm5",
        "nvl",
        "hbm2",
        "hbm2e",
        "hbm3",
        "hbm3e",
        "gddr6",
        "gddr6x",
        "gddr7",
        "edition",
        "workstation",
        "server",
        "max",
        "q",
        "laptop",
        "gpu",
        "generation",
        "mig",
    }
)
_MEMORY_SIZE_RE = re.compile(r"^[0-9]+gb$")


def _key(text: str) -> str:
    """Case/space/dash-insensitive lookup key: 'RTX PRO-6000' -> 'rtxpro6000'."""
    return "".join(re.findall(r"[a-z0-9]+", text.lower()))


def _lookup_keys(text: str) -> list[str]:
    """Keys to try for a product name, most literal first (NVML names carry vendor and memory words)."""
    tokens = re.findall(r"[a-z0-9]+", text.lower())
    without_vendor = [t for t in tokens if t not in _VENDOR_WORDS]
    bare = [t for t in without_vendor if t not in _PACKAGING_WORDS and not _MEMORY_SIZE_RE.match(t)]
    keys: list[str] = []
    for candidate in ("".join(tokens), "".join(without_vendor), "".join(bare)):
        if candidate and candidate not in keys:
            keys.append(candidate)
    return keys


@cache
def _products() -> dict[str, tuple[str, Capability]]:
    """Lookup key -> (spelling as in archs.json, capability)."""
    table: dict[str, tuple[str, Capability]] = {}
    for cap in arch_data().capabilities:
        for product in cap.products:
            key = _key(product)
            if key in table:
                raise ValueError(f"archs.json: product {product!r} clashes with {table[key][0]!r}")
            table[key] = (product, cap)
    return table


def product_names() -> dict[str, Arch]:
    """Every product spelling in archs.json and the (baseline) arch it stands for."""
    return {name: Arch(cap.major, cap.minor) for name, cap in _products().values()}


@cache
def _capabilities() -> dict[tuple[int, int], Capability]:
    return {cap.cc: cap for cap in arch_data().capabilities}


@cache
def _former_capabilities() -> dict[tuple[int, int], Capability]:
    """Former capability numbers -> the capability that carries them now (10.1 -> 11.0)."""
    former: dict[tuple[int, int], Capability] = {}
    for cap in arch_data().capabilities:
        for name in cap.former_names:
            match = _SM_RE.match(name)
            if match is None:
                raise ValueError(
                    f"archs.json: former name {name!r} of {cap.major}.{cap.minor} is not an sm_XX name"
                )
            number = int(match.group(1))
            former[(number // 10, number % 10)] = cap
    return former


@cache
def _suggestion_pool() -> tuple[str, ...]:
    """Spellings offered as suggestions, in data-file order (newest products last, flagships first)."""
    pool: list[str] = []
    for cap in arch_data().capabilities:
        for variant in cap.variants:
            pool.append(Arch(cap.major, cap.minor, variant).name)
            pool.append(f"{cap.major}.{cap.minor}{variant}")
        pool.extend(cap.products)
    return tuple(dict.fromkeys(pool))


def _suggestion_key(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.lower())


def _edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: a transposition ('5900' vs '5090') costs 1."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[i - 2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def _number_in(text: str) -> int | None:
    match = re.search(r"[0-9]+", text)
    return int(match.group()) if match else None


def suggest(text: str, limit: int = 3) -> list[str]:
    """The known spellings nearest to ``text``.

    Ranked by difflib's similarity, then edit distance, then how far the numbers in them lie
    apart (``sm_95`` is nearer ``sm_90`` than ``sm_75``), then data-file order.
    """
    query = _suggestion_key(text)
    if not query:
        return []
    if re.fullmatch(r"[0-9]{1,2}", query):
        # A bare major such as "12" (torch's get_device_capability()[0]): offer that major's capabilities.
        same_major = [f"{c.major}.{c.minor}" for c in arch_data().capabilities if c.major == int(query)]
        if same_major:
            return same_major[:limit]
    pool = _suggestion_pool()
    query_number = _number_in(query)
    ranked: list[tuple[float, int, int, int, str]] = []
    for index, spelling in enumerate(pool):
        key = _suggestion_key(spelling)
        ratio = difflib.SequenceMatcher(None, query, key).ratio()
        if ratio >= 0.6:
            number = _number_in(key)
            apart = abs(number - query_number) if number is not None and query_number is not None else 0
            ranked.append((-ratio, _edit_distance(query, key), apart, index, spelling))
    ranked.sort()
    return [spelling for *_, spelling in ranked[:limit]]


def _unknown(text: str, reason: str | None = None) -> UnknownArchError:
    suggestions = suggest(text)
    message = f"unknown architecture {text!r}"
    if reason:
        message += f" ({reason})"
    if suggestions:
        message += f"; did you mean {', '.join(suggestions)}?"
    else:
        message += "; expected e.g. sm_120a, 12.0, 120, (12, 0) or a product name such as rtx5090"
    return UnknownArchError(text, message, suggestions)


def _from_capability(
    text: str, major: int, minor: int, variant: str, kind: SpellingKind, note: str | None = None
) -> ArchResolution:
    variant = variant.lower()
    cap = _capabilities().get((major, minor))
    if cap is None:
        renamed = _former_capabilities().get((major, minor))
        if renamed is None:
            raise _unknown(text, f"no compute capability {major}.{minor}")
        old, new = Arch(major, minor, variant), Arch(renamed.major, renamed.minor, variant)
        former = f"{old.name} is the name {new.name} had before CUDA 13.0; using {new.name}"
        note = former if note is None else f"{former}; {note}"
        cap = renamed
    if variant not in cap.variants:
        valid = ", ".join(Arch(cap.major, cap.minor, v).name for v in cap.variants)
        what = _VARIANT_WORDS.get(variant, f"{variant!r}")
        message = (
            f"invalid architecture {text!r}: compute capability {cap.major}.{cap.minor} has no {what} variant"
            f" (valid targets: {valid})"
        )
        raise InvalidVariantError(text, message, [Arch(cap.major, cap.minor, v).name for v in cap.variants])
    return ArchResolution(Arch(cap.major, cap.minor, variant), text, kind, note=note)


def resolve_arch(text: str) -> ArchResolution:
    """Parse one spelling and say how it was understood. Raises `UnknownArchError`."""
    original = text
    text = text.strip()
    if not text:
        raise UnknownArchError(original, "empty architecture name; expected e.g. sm_120a, 12.0 or rtx5090")
    if text.lower().startswith("gfx"):
        raise UnknownArchError(
            original, f"{text!r} is an AMD GPU architecture; liftgate knows NVIDIA CUDA architectures only"
        )
    note = None
    stripped = _PTX_SUFFIX_RE.sub("", text)
    if stripped != text:
        note = f"'+PTX' in {text!r} adds PTX to the build; the target is {stripped}"
        text = stripped

    if match := _SM_RE.match(text):
        number = int(match.group(1))
        return _from_capability(original, number // 10, number % 10, match.group(2), SpellingKind.SM, note)
    if match := _CC_RE.match(text):
        major, minor = int(match.group(1)), int(match.group(2))
        return _from_capability(original, major, minor, match.group(3), SpellingKind.CAPABILITY, note)
    if match := _TUPLE_RE.match(text):
        major, minor = int(match.group(1)), int(match.group(2))
        return _from_capability(original, major, minor, "", SpellingKind.TUPLE, note)
    if match := _NUMBER_RE.match(text):
        digits, variant = match.group(1), match.group(2)
        number = int(digits)
        sm_cc = (number // 10, number % 10)
        known = _capabilities().keys() | _former_capabilities().keys()
        if sm_cc in known or len(digits) == 2:
            return _from_capability(original, *sm_cc, variant, SpellingKind.NUMBER, note)
        # 900, 1200: the value of __CUDA_ARCH__ (major*100 + minor*10).
        arch_cc = (number // 100, number // 10 % 10)
        if number % 10 == 0 and arch_cc in known:
            return _from_capability(original, *arch_cc, variant, SpellingKind.CUDA_ARCH, note)
        raise _unknown(original)

    for key in _lookup_keys(text):
        if key in _products():
            product, cap = _products()[key]
            return ArchResolution(Arch(cap.major, cap.minor), original, SpellingKind.PRODUCT, product=product)
    raise _unknown(original)


def parse_arch(text: str) -> Arch:
    """Parse one architecture spelling (see the module docstring). Raises `UnknownArchError`."""
    return resolve_arch(text).arch


def parse_target(value: str | tuple[int, int] | Arch) -> Arch:
    """Parse a ``--target`` value; also takes an `Arch` or a ``(major, minor)`` tuple from torch/NVML."""
    if isinstance(value, Arch):
        return _from_capability(value.name, value.major, value.minor, value.variant, SpellingKind.ARCH).arch
    if isinstance(value, tuple):
        major, minor = value
        return _from_capability(f"({major}, {minor})", major, minor, "", SpellingKind.ARCH).arch
    return parse_arch(value)


def _expand_torch_names(items: list[str]) -> list[str]:
    named = {name.lower(): spec for name, spec in arch_data().torch_named_arches.items()}
    expanded: list[str] = []
    for item in items:
        spec = named.get(item.lower())
        expanded.extend(spec.split(";") if spec else [item])
    return expanded


def parse_arch_list_entries(
    text: str, *, cmake: bool = False, ignore_unknown: bool = False
) -> list[ArchListEntry]:
    """Parse an arch list (TORCH_CUDA_ARCH_LIST, CMAKE_CUDA_ARCHITECTURES, nvcc-style names).

    Items are separated by ``;``, ``,`` or whitespace; ``+PTX`` (torch) and ``-virtual`` (CMake)
    mark PTX, ``-real`` marks SASS only. A plain CMake item embeds both, so pass ``cmake=True``
    for CMake lists. Torch's named arches (``Ampere``, ``Hopper``) expand as torch expands them.
    Duplicates collapse into the first occurrence. Items that name no known arch raise
    `UnknownArchError`, or are dropped with ``ignore_unknown`` (old lists still name ``6.0``).
    """
    text = re.sub(r"\s*\+\s*ptx\b", "+PTX", text, flags=re.IGNORECASE)
    items = [item for item in re.split(r"[;,\s]+", text) if item]
    entries: dict[Arch, ArchListEntry] = {}
    for item in _expand_torch_names(items):
        spelling = item
        ptx = cmake
        if item.lower().endswith("+ptx"):
            item, ptx = item[: -len("+ptx")], True
        elif item.lower().endswith("-virtual"):
            item, ptx = item[: -len("-virtual")], True
        elif item.lower().endswith("-real"):
            item, ptx = item[: -len("-real")], False
        try:
            arch = parse_arch(item)
        except UnknownArchError:
            if ignore_unknown:
                continue
            raise
        previous = entries.get(arch)
        if previous is None:
            entries[arch] = ArchListEntry(arch, ptx, spelling)
        elif ptx and not previous.ptx:
            entries[arch] = ArchListEntry(arch, True, previous.spelling)
    return list(entries.values())


def parse_arch_list(text: str, *, ignore_unknown: bool = False) -> list[Arch]:
    """Parse a TORCH_CUDA_ARCH_LIST-style list (``"8.0;8.6+PTX 9.0a"``) into arches, in order."""
    return [entry.arch for entry in parse_arch_list_entries(text, ignore_unknown=ignore_unknown)]
