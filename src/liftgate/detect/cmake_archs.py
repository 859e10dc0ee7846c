"""CMake arch-list entries (``90a``, ``9.0+PTX``, ``sm_90a``, ``120-real``) and the targets they admit.

The semantics are described in `liftgate.detect.cmake`'s docstring: compile-target semantics
for CMake and torch lists and ``-gencode`` flags (`compile_admitted`), vLLM's
``cuda_archs_loose_intersection`` (`loose_admitted`), a plain intersection (`exact_admitted`),
and CMake's and nvcc's special values (`special_admitted`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Literal

from liftgate.arch.core import Arch, ArchSet, arch_data, universe
from liftgate.arch.parse import UnknownArchError, resolve_arch

# How a list's entries are read: CMake lists, torch lists, and the SRC of vLLM's loose or plain intersection.
Style = Literal["cmake", "torch", "loose", "exact"]

_ENTRY = re.compile(r"^(?:(sm|compute|lto)_?)?(?:([0-9]{1,2})\.([0-9])|([0-9]{2,3}))([afAF]?)$")
# Compute capabilities older than the known universe: their SASS admits nothing liftgate knows,
# their PTX every baseline target.
_OLD_CAPABILITIES = frozenset(
    {(3, 0), (3, 2), (3, 5), (3, 7), (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2)}
)
SPECIAL_VALUES = frozenset({"all", "all-major", "native", "off"})  # lower-cased


@dataclass(frozen=True, slots=True)
class ArchEntry:
    """One entry of an arch list or gencode flag: the target and whether SASS and/or PTX is built."""

    spelling: str
    arch: Arch | None  # None: a capability older than liftgate's universe
    cc: tuple[int, int]
    sass: bool
    ptx: bool
    note: str | None = None


def parse_entry(spelling: str, style: Style) -> ArchEntry | None:
    """One arch-list entry in the given style, or None when it names no CUDA architecture."""
    text = spelling.strip()
    sass, ptx = True, style == "cmake"
    lower = text.lower()
    if lower.endswith("+ptx"):
        text, sass, ptx = text[:-4].rstrip(), True, True
    elif lower.endswith("-real"):
        text, sass, ptx = text[:-5], True, False
    elif lower.endswith("-virtual"):
        text, sass, ptx = text[:-8], False, True
    match = _ENTRY.match(text)
    if match is None:
        return None
    prefix, major, minor, number, variant = match.groups()
    if prefix and prefix.lower() == "compute":
        sass, ptx = False, True
    cc = (int(number) // 10, int(number) % 10) if number is not None else (int(major), int(minor))
    variant = variant.lower()
    resolved = _resolve(cc, variant)
    if resolved is None:
        if cc in _OLD_CAPABILITIES and not variant:
            return ArchEntry(spelling, None, cc, sass, ptx)
        return None
    arch, note = resolved
    return ArchEntry(spelling, arch, arch.cc, sass, ptx, note)


@cache
def _resolve(cc: tuple[int, int], variant: str) -> tuple[Arch, str | None] | None:
    """The known target for a capability and variant (former names renamed), None when unknown.

    Memoised: an unknown spelling costs resolve_arch a search for suggestions every time.
    """
    try:
        resolution = resolve_arch(f"{cc[0]}.{cc[1]}{variant}")
    except UnknownArchError:
        return None
    return resolution.arch, resolution.note


def _where(predicate: Callable[[Arch], bool]) -> ArchSet:
    return ArchSet(a for a in universe() if predicate(a))


def capability_archs(cc: tuple[int, int]) -> ArchSet:
    """Every target (all variants) of one compute capability."""
    return _where(lambda a: a.cc == cc)


@cache
def _family_members(cc: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    cap = arch_data().capability(cc)
    if cap is None or cap.family is None:
        return (cc,)
    return arch_data().families.get(cap.family, (cc,))


def compile_admitted(entry: ArchEntry) -> ArchSet:
    """The targets that code built for ``entry`` runs on (see the module docstring)."""
    arch = entry.arch
    if arch is None:
        return _where(lambda a: a.variant == "") if entry.ptx else ArchSet.none()
    if arch.variant == "a":
        return ArchSet([arch])
    if arch.variant == "f":
        members = {m for m in _family_members(arch.cc) if m >= arch.cc}
        return _where(lambda a: a.variant == "f" and a.cc in members)
    admitted = ArchSet([arch]) if entry.sass else ArchSet.none()
    if entry.ptx:
        admitted |= _where(lambda a: a.variant == "" and a.cc >= arch.cc)
    return admitted


def loose_admitted(entry: ArchEntry) -> ArchSet:
    """What a SRC entry of vLLM's ``cuda_archs_loose_intersection`` admits (module docstring)."""
    arch = entry.arch
    if arch is None:
        return ArchSet.all() if entry.ptx else ArchSet.none()
    if arch.variant == "a":
        return capability_archs(arch.cc)
    if arch.variant == "f":
        members = {m for m in _family_members(arch.cc) if m >= arch.cc}
        return _where(lambda a: a.cc in members)
    if entry.ptx:
        return _where(lambda a: a.cc >= arch.cc)
    return _where(lambda a: a.major == arch.major and a.cc >= arch.cc)


def exact_admitted(entry: ArchEntry) -> ArchSet:
    """What an entry of a plain (not loose) intersection admits: its capability, any variant."""
    arch = entry.arch
    if arch is None:
        return ArchSet.all() if entry.ptx else ArchSet.none()
    if entry.ptx and not arch.variant:
        return _where(lambda a: a.cc >= arch.cc)
    return _where(lambda a: a.cc == arch.cc)


def special_admitted(value: str) -> tuple[ArchSet, ArchSet, str]:
    """(admitted, unknown, assumption) of CMake's/nvcc's ``all``, ``all-major``, ``native`` and ``OFF``."""
    if value in ("native", "off"):
        why = (
            "the GPUs of the machine that runs the build"
            if value == "native"
            else "nvcc's default architecture (CMake passes none)"
        )
        return ArchSet.none(), ArchSet.all(), f"{value}: {why}"
    baseline = [a for a in universe() if not a.variant]
    newest_major = max(a.major for a in baseline)
    # all: SASS for every arch and PTX for the newest; all-major: SASS for X.0 and PTX for the newest major.
    admitted = ArchSet(a for a in baseline if value == "all" or a.minor == 0 or a.major == newest_major)
    return (
        admitted,
        ArchSet.none(),
        f"{value}: the architectures the CUDA toolkit supports (taken as those liftgate knows)",
    )


def admitted_by(entry: ArchEntry, style: Style) -> ArchSet:
    """What ``entry`` admits, read in ``style``."""
    if style == "loose":
        return loose_admitted(entry)
    if style == "exact":
        return exact_admitted(entry)
    return compile_admitted(entry)


def describe_entry(entry: ArchEntry, style: Style) -> str:
    """One entry and what it builds, for evidence: ``90: SASS sm_90 + PTX compute_90 (JIT on later GPUs)``."""
    cc = f"{entry.cc[0]}.{entry.cc[1]}"
    arch = entry.arch
    if style in ("loose", "exact"):
        if arch is not None and arch.variant == "f" and style == "loose":
            text = f"{entry.spelling}: built when {cc} or (vLLM 0.34+) a later arch of its family is built"
        elif arch is not None and arch.variant:
            text = f"{entry.spelling}: built as {arch.name} when {cc} is built"
        elif entry.ptx:
            text = f"{entry.spelling}: SASS and PTX, taken for every built arch from {cc} up"
        elif style == "loose":
            text = f"{entry.spelling}: SASS, taken for every built {entry.cc[0]}.x from {cc} up"
        else:
            text = f"{entry.spelling}: SASS, taken when {cc} is built"
    elif arch is None:
        text = f"{entry.spelling}: compute capability {cc}, older than every known target" + (
            ", as PTX (JIT on every later GPU)" if entry.ptx else ""
        )
    else:
        built = [f"SASS {arch.name}"] if entry.sass else []
        if entry.ptx:
            later = " (JIT on later GPUs)" if not arch.variant else ""
            built.append(f"PTX compute_{arch.number}{arch.variant}{later}")
        text = f"{entry.spelling}: {' + '.join(built)}"
    return f"{text} ({entry.note})" if entry.note else text
