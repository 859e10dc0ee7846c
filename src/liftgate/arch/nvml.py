"""Find the local GPUs' architectures through NVML, for runs without ``--target``.

This is the ``arch`` stage's only effect on the world. It needs the optional ``nvidia-ml-py``
package (``pip install liftgate[nvml]``, imported as ``pynvml``) and an NVIDIA driver; without
either, or with no GPU, it raises `NoGpuError` with a one-line message that says to pass
``--target``. Identical GPUs collapse into one arch. A capability that ``data/archs.json`` does
not know is an error too: guessing its gates would be worse than asking.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from liftgate.arch.core import Arch
from liftgate.arch.parse import UnknownArchError, resolve_arch

__all__ = ["LocalGpu", "NoGpuError", "detect_local_archs", "detect_local_gpus"]

_HINT = "pass --target ARCH, e.g. --target sm_120"


class NoGpuError(RuntimeError):
    """No usable local GPU: NVML missing or failing, no device, or a capability liftgate does not know."""


@dataclass(frozen=True, slots=True)
class LocalGpu:
    """One device as NVML reports it, with the arch its compute capability resolves to."""

    index: int
    name: str
    capability: tuple[int, int]
    arch: Arch
    note: str | None = None  # e.g. a driver that still reports Thor as 10.1


def _import_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise NoGpuError(
            "no --target given and nvidia-ml-py is not installed; "
            "pass --target ARCH (e.g. --target sm_120) or install liftgate[nvml]"
        ) from None


def _text(value: Any) -> str:
    # nvidia-ml-py returned bytes before version 11.515.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def detect_local_gpus() -> list[LocalGpu]:
    """Every NVIDIA GPU NVML sees, in index order. Raises `NoGpuError`."""
    pynvml = _import_pynvml()
    nvml_error: type[BaseException] = getattr(pynvml, "NVMLError", Exception)
    try:
        pynvml.nvmlInit()
    except nvml_error as error:
        raise NoGpuError(
            f"no --target given and no NVIDIA GPU found (NVML: {_text(error)}); {_HINT}"
        ) from None
    try:
        gpus: list[LocalGpu] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            try:
                resolution = resolve_arch(f"{major}.{minor}")
            except UnknownArchError:
                raise NoGpuError(
                    f"GPU {index} ({name}) has compute capability {major}.{minor}, which liftgate does not know; "
                    "pass --target ARCH with the nearest known arch, e.g. --target sm_120"
                ) from None
            gpus.append(LocalGpu(index, name, (int(major), int(minor)), resolution.arch, resolution.note))
    except NoGpuError:
        raise
    except nvml_error as error:
        raise NoGpuError(
            f"no --target given and NVML failed to query the GPUs ({_text(error)}); {_HINT}"
        ) from None
    finally:
        with contextlib.suppress(nvml_error):
            pynvml.nvmlShutdown()
    if not gpus:
        raise NoGpuError(f"no --target given and no NVIDIA GPU found; {_HINT}")
    return gpus


def detect_local_archs() -> list[Arch]:
    """The distinct (baseline) arches of the local GPUs, in index order. Raises `NoGpuError`."""
    return list(dict.fromkeys(gpu.arch for gpu in detect_local_gpus()))
