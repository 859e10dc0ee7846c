"""What an arch spelling in Python build code admits: nvcc code names, arch-list items, arch-list strings.

``admitted`` holds compilation targets, as for the CUDA detector: SASS for ``sm_90a`` admits
``sm_90a`` and neither ``sm_90`` nor ``sm_120``. What each nvcc code name admits is documented at
`code_targets`; `arch_list_targets` reads literal arch lists (``[90, 100]``, ``["sm_90a"]``) and
`env_list_targets` a ``TORCH_CUDA_ARCH_LIST`` value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from liftgate.arch.core import Arch, ArchSet, arch_data, universe
from liftgate.arch.parse import SpellingKind, UnknownArchError, parse_arch_list_entries, resolve_arch
from liftgate.detect.runtime_arch import archs_for_capabilities

_CODE_RE = re.compile(r"^(sm|compute|lto)_([0-9]{2,3})([af]?)$", re.ASCII)

# Spellings an arch-list item may use; product names ("h100") are not arch lists.
_ARCH_ITEM_KINDS = frozenset(
    {SpellingKind.SM, SpellingKind.NUMBER, SpellingKind.CAPABILITY, SpellingKind.CUDA_ARCH}
)
_ARCH_SHAPED_RE = re.compile(r"^(?:(?:sm|compute)_)?[0-9]{2,3}[af]?$|^[0-9]{1,2}\.[0-9][af]?$", re.I)


@cache
def _baseline_from(cc: tuple[int, int]) -> ArchSet:
    return ArchSet(a for a in universe() if not a.variant and a.cc >= cc)


@cache
def _family_from(arch: Arch) -> ArchSet:
    """The 'f' targets that family-specific code for ``arch`` runs on: its family members of equal or later capability."""
    data = arch_data()
    capability = data.capability(arch.cc)
    members = set(data.families.get(capability.family, ())) if capability and capability.family else set()
    members.add(arch.cc)
    return ArchSet(a for a in universe() if a.variant == "f" and a.cc in members and a.cc >= arch.cc)


def code_targets(code: str) -> tuple[ArchSet, str] | None:
    """The compilation targets one nvcc code name (``sm_90a``, ``compute_90``) serves, and how, in words.

    - ``sm_XX``, ``sm_XXa``, ``lto_XX…``: SASS for exactly that target;
    - ``sm_XXf`` / ``compute_XXf``: family code, which runs on every member of the family at or above
      XX (``sm_100f`` serves ``sm_100f`` and ``sm_103f``), so the 'f' targets of those members;
    - ``compute_XX``: PTX, which the driver JIT-compiles for every later capability, so every
      baseline target from XX on;
    - ``compute_XXa``: arch-specific PTX, which runs on that capability only, so ``sm_XXa``.

    None when the name is not a code name or names an arch liftgate does not know.
    """
    match = _CODE_RE.match(code)
    if match is None:
        return None
    kind, number, variant = match.groups()
    try:
        arch = resolve_arch(f"sm_{number}{variant}").arch
    except UnknownArchError:
        return None
    if arch.variant == "f":
        targets = _family_from(arch)
        return targets, f"family code for {', '.join(targets.names())}"
    if kind == "compute" and not arch.variant:
        return _baseline_from(arch.cc), f"PTX, JIT-compiled for {arch.name} and every later baseline target"
    what = "SASS" if kind == "sm" else ("PTX" if kind == "compute" else "LTO IR")
    return ArchSet([arch]), f"{what} for {arch.name} only"


def _list_item_targets(item: object) -> ArchSet | str | None:
    """One arch-list item as targets; the spelling (a str) when it looks like an arch liftgate does not know.

    Integers and ``(major, minor)`` tuples are capabilities (every variant); strings are exact
    targets (``sm_90a``, ``9.0``, ``100f``). None when the item is not an arch at all.
    """
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        try:
            resolution = resolve_arch(str(item))
        except UnknownArchError:
            return None
        if resolution.kind not in (SpellingKind.NUMBER, SpellingKind.CUDA_ARCH):
            return None
        return archs_for_capabilities([resolution.arch.cc])
    if isinstance(item, tuple) and len(item) == 2 and all(type(x) is int for x in item):
        targets = archs_for_capabilities([(item[0], item[1])])
        return targets or None
    if isinstance(item, str):
        spelling = item.strip()
        ptx = spelling.lower().endswith("+ptx")
        if ptx:
            spelling = spelling[: -len("+ptx")]
        try:
            resolution = resolve_arch(spelling)
        except UnknownArchError:
            return spelling if _ARCH_SHAPED_RE.match(spelling) else None
        if resolution.kind not in _ARCH_ITEM_KINDS:
            return None
        arch = resolution.arch
        targets = ArchSet([arch])
        if ptx:
            ptx_targets = code_targets(f"compute_{arch.number}{arch.variant}")
            targets |= ptx_targets[0] if ptx_targets else ArchSet.none()
        return targets
    return None


def arch_list_targets(value: object) -> tuple[ArchSet, list[str]] | None:
    """A literal arch list (a list, tuple, set, dict keys or a ``"9.0;10.0a"`` string) as targets.

    Every item must be an arch; items that only look like one (``sm_107a``) are returned apart
    so the gate can say it left them out. None when the value is not an arch list.
    """
    if isinstance(value, str):
        items: Iterable[object] = [i for i in re.split(r"[;,\s]+", value) if i]
    elif isinstance(value, (list, tuple, set, frozenset, dict)):
        items = list(value)
    else:
        return None
    admitted = ArchSet.none()
    unknown_spellings: list[str] = []
    count = 0
    for item in items:
        count += 1
        targets = _list_item_targets(item)
        if targets is None:
            return None
        if isinstance(targets, str):
            unknown_spellings.append(targets)
        else:
            admitted |= targets
    if not count or not admitted:
        return None
    return admitted, sorted(set(unknown_spellings))


def env_list_targets(text: str) -> tuple[ArchSet, list[str], list[str]] | None:
    """A TORCH_CUDA_ARCH_LIST value as targets, how each item was read, and the items left out.

    Torch builds SASS for each item (``8.0`` -> ``sm_80``, ``9.0a`` -> ``sm_90a``) and, for
    ``+PTX``, PTX as well, which later targets JIT-compile. Old items liftgate does not know
    (``6.0``) still carry their PTX forward.
    """
    normalized = re.sub(r"\s*\+\s*ptx\b", "+PTX", text, flags=re.IGNORECASE)
    admitted = ArchSet.none()
    readings: list[str] = []
    left_out: list[str] = []
    for item in (i for i in re.split(r"[;,\s]+", normalized) if i):
        try:
            entries = parse_arch_list_entries(item)
        except UnknownArchError:
            old = re.fullmatch(r"([0-9]{1,2})\.([0-9])\+PTX", item, re.IGNORECASE)
            if old:
                targets = _baseline_from((int(old.group(1)), int(old.group(2))))
                admitted |= targets
                readings.append(f"{item}: PTX for every baseline target")
            else:
                left_out.append(item)
            continue
        for entry in entries:
            code = f"sm_{entry.arch.number}{entry.arch.variant}"
            sass = code_targets(code)
            if sass is not None:
                admitted |= sass[0]
            reading = f"{entry.spelling}: {code}"
            if entry.ptx:
                ptx = code_targets(f"compute_{entry.arch.number}{entry.arch.variant}")
                if ptx is not None:
                    admitted |= ptx[0]
                    reading += f" + {ptx[1]}"
            readings.append(reading)
    if not admitted:
        return None
    return admitted, readings, left_out
