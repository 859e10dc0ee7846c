"""The CUDA toolkit version toolkit-version conditions are decided under: the local nvcc's, or the user's."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache


@cache
def local_cuda_version() -> tuple[int, int] | None:
    """The CUDA version of the nvcc on PATH, if any."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_cuda_version(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?\s*", text)
    if m is None:
        raise ValueError(f"invalid CUDA version {text!r}; expected e.g. 12.8 or 13.0")
    return int(m.group(1)), int(m.group(2) or 0)
