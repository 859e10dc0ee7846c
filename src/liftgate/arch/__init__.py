"""The ``arch`` stage: what an architecture is, how people spell it, and which one is local.

- `core`: `Arch`, `ArchSet` (a bit mask over the known universe), the facts from ``data/archs.json``
  and the macros nvcc predefines per compilation pass;
- `parse`: spellings (``sm_120a``, ``12.0``, ``120``, ``rtx5090``, ``8.6+PTX``) to `Arch`;
- `render`: `ArchSet` to short text for reports;
- `nvml`: the local GPUs, through the optional ``nvidia-ml-py``.
"""

from __future__ import annotations

from liftgate.arch.core import (
    TOOLKIT_MACROS,
    Arch,
    ArchData,
    ArchSet,
    Capability,
    arch_data,
    nvcc_macros,
    universe,
)
from liftgate.arch.nvml import LocalGpu, NoGpuError, detect_local_archs, detect_local_gpus
from liftgate.arch.parse import (
    ArchListEntry,
    ArchResolution,
    InvalidVariantError,
    SpellingKind,
    UnknownArchError,
    parse_arch,
    parse_arch_list,
    parse_arch_list_entries,
    parse_target,
    product_names,
    resolve_arch,
    suggest,
)
from liftgate.arch.render import render_archset, render_archset_long

__all__ = [
    "TOOLKIT_MACROS",
    "Arch",
    "ArchData",
    "ArchListEntry",
    "ArchResolution",
    "ArchSet",
    "Capability",
    "InvalidVariantError",
    "LocalGpu",
    "NoGpuError",
    "SpellingKind",
    "UnknownArchError",
    "arch_data",
    "detect_local_archs",
    "detect_local_gpus",
    "nvcc_macros",
    "parse_arch",
    "parse_arch_list",
    "parse_arch_list_entries",
    "parse_target",
    "product_names",
    "render_archset",
    "render_archset_long",
    "resolve_arch",
    "suggest",
    "universe",
]
