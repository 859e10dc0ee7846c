"""Correctness: what the command wrote in the stock run against the lifted run, within tolerance.

``.npy``/``.npz`` through numpy; ``.pt``/``.pth`` through torch and ``.safetensors`` through
safetensors when they are importable (else the file is compared byte for byte, and the result
says so); JSON recursively (numbers within ``rtol``/``atol``, everything else equal); any other
file as text. NaNs compare equal to NaNs in the same places.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Comparison:
    path: str
    equal: bool
    detail: str  # "max abs diff 1.2e-06 (rtol 1e-05, atol 1e-08)", "missing in the lifted run", …


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= atol + rtol * abs(b)


def _json_diff(a: Any, b: Any, rtol: float, atol: float, where: str = "$") -> str | None:
    if isinstance(a, bool) or isinstance(b, bool):
        return None if a == b else f"{where}: {a!r} != {b!r}"
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return None if _close(float(a), float(b), rtol, atol) else f"{where}: {a!r} vs {b!r}"
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{where}: keys differ ({sorted(set(a) ^ set(b))[:5]})"
        for k in a:
            d = _json_diff(a[k], b[k], rtol, atol, f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: lengths {len(a)} and {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _json_diff(x, y, rtol, atol, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


def _arrays(path: str) -> dict[str, Any] | None:
    """Named arrays in a tensor file, as numpy arrays; None when no reader for it is importable."""
    lower = path.lower()
    try:
        import numpy as np
    except ImportError:
        return None
    if lower.endswith(".npy"):
        return {"": np.load(path, allow_pickle=False)}
    if lower.endswith(".npz"):
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    if lower.endswith((".pt", ".pth")):
        try:
            import torch
        except ImportError:
            return None
        obj = torch.load(path, map_location="cpu", weights_only=True)
        items = obj.items() if isinstance(obj, dict) else [("", obj)]
        return {k: v.float().numpy() for k, v in items if hasattr(v, "numpy")}
    if lower.endswith(".safetensors"):
        try:
            from safetensors.numpy import load_file
        except ImportError:
            return None
        return dict(load_file(path))
    return None


def compare_files(stock: str, lifted: str, rtol: float = 1e-5, atol: float = 1e-8) -> Comparison:
    name = os.path.basename(lifted)
    if not os.path.exists(stock):
        return Comparison(name, False, "missing in the stock run")
    if not os.path.exists(lifted):
        return Comparison(name, False, "missing in the lifted run")
    lower = lifted.lower()
    if lower.endswith((".npy", ".npz", ".pt", ".pth", ".safetensors")):
        try:
            a, b = _arrays(lifted), _arrays(stock)
        except Exception as exc:  # a damaged file is a failed comparison, not a crash
            return Comparison(name, False, f"cannot read: {exc}")
        if a is None or b is None:
            same = Path(stock).read_bytes() == Path(lifted).read_bytes()
            return Comparison(name, same, "compared byte for byte (no reader for this format is installed)")
        import numpy as np

        if set(a) != set(b):
            return Comparison(name, False, f"different tensors: {sorted(set(a) ^ set(b))[:5]}")
        worst = 0.0
        for key in a:
            x, y = np.asarray(a[key], dtype=np.float64), np.asarray(b[key], dtype=np.float64)
            if x.shape != y.shape:
                return Comparison(name, False, f"{key or 'array'}: shape {x.shape} vs {y.shape}")
            if not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
                diff = float(np.nanmax(np.abs(x - y)))
                return Comparison(
                    name,
                    False,
                    f"{key or 'array'}: max abs diff {diff:.3g} beyond rtol {rtol:g}, atol {atol:g}",
                )
            if x.size:
                worst = max(worst, float(np.nanmax(np.abs(x - y))) if np.isfinite(x - y).any() else 0.0)
        return Comparison(name, True, f"max abs diff {worst:.3g} (rtol {rtol:g}, atol {atol:g})")
    if lower.endswith(".json"):
        try:
            with open(stock, encoding="utf-8") as fa, open(lifted, encoding="utf-8") as fb:
                da, db = json.load(fa), json.load(fb)
        except (OSError, ValueError) as exc:
            return Comparison(name, False, f"cannot read JSON: {exc}")
        mismatch = _json_diff(db, da, rtol, atol)
        return Comparison(name, mismatch is None, mismatch or "equal within tolerance")
    same = Path(stock).read_bytes() == Path(lifted).read_bytes()
    return Comparison(name, same, "identical" if same else "the text differs")
