"""Runtime capabilities: what Python code (and the CUDA runtime) sees of the device.

A runtime check sees only the compute capability ``(major, minor)`` of the device, never the
compilation variant, so a runtime gate that admits capability 9.0 admits ``sm_90`` and
``sm_90a`` alike. Detectors of Python and build gates share these helpers to turn
capabilities and major versions into `ArchSet`s.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from liftgate.arch.core import ArchSet, universe


@cache
def capabilities() -> tuple[tuple[int, int], ...]:
    """The distinct compute capabilities of the known universe, oldest first."""
    seen: dict[tuple[int, int], None] = {}
    for arch in universe():
        seen.setdefault(arch.cc, None)
    return tuple(seen)


def archs_for_capabilities(ccs: Iterable[tuple[int, int]]) -> ArchSet:
    """Every known target (all variants) whose capability is one of ``ccs``."""
    wanted = set(ccs)
    return ArchSet(a for a in universe() if a.cc in wanted)


def archs_for_majors(majors: Iterable[int]) -> ArchSet:
    """Every known target whose major version is one of ``majors`` (FlashInfer's ``supported_major_versions``)."""
    wanted = set(majors)
    return ArchSet(a for a in universe() if a.major in wanted)
