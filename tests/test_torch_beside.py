"""An environment that holds torch's own source beside the code that asks it for the capability.

A user's venv with sglang and flashinfer found SGLang's all-reduce-fusion guard; with the torch
CPU wheel installed beside them the guard was gone, with nothing said. The cause: when torch's
``__init__`` imports ``torch.cuda`` as a module, ``torch.cuda.get_device_capability`` resolved to
torch's own definition (which reaches into ``torch._C`` and is unknown) instead of liftgate's model
of the API, so every predicate built on it lost its arch value. The stand-in below has torch's
layout for exactly that path; the gates must be the same with and without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from liftgate.scan import scan

APP = """
import torch


def device_sm():
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def is_sm90_supported():
    return device_sm() // 10 == 9  # gate


def fused_kernel():
    if device_sm() < 90:  # gate
        raise RuntimeError("needs sm_90 or newer")


def fusion_backend():
    if not is_sm90_supported():  # gate
        raise ValueError("allreduce fusion requires SM90")
"""
TORCH_INIT = "import torch.cuda\nimport torch._C\n"
TORCH_CUDA = """
import torch._C


def get_device_properties(device=None):
    return torch._C._cuda_getDeviceProperties(device)


def get_device_capability(device=None):
    prop = get_device_properties(device)
    return prop.major, prop.minor
"""


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _app_gates(report: object) -> set[tuple[str, int, tuple[str, ...]]]:
    return {
        (g.location.path, g.location.line, tuple(sorted(a.name for a in g.admitted)))
        for g in report.gates  # type: ignore[attr-defined]
        if g.location.package == "app"
    }


def test_torch_installed_beside_the_code_changes_no_gate(
    tmp_path: Path, fake_env: Callable[..., Path]
) -> None:
    marked = [n + 1 for n, line in enumerate(APP.splitlines()) if line.rstrip().endswith("# gate")]
    alone = fake_env(_tree(tmp_path / "a", {"app/__init__.py": APP}), "app", "1.0", prefix=tmp_path / "venv1")
    fake_env(_tree(tmp_path / "t", {"torch/__init__.py": TORCH_INIT, "torch/cuda/__init__.py": TORCH_CUDA,
                                    "torch/_C/__init__.py": ""}), "torch", "2.9.1+cpu", prefix=tmp_path / "venv2")  # fmt: skip
    beside = fake_env(
        _tree(tmp_path / "b", {"app/__init__.py": APP}), "app", "1.0", prefix=tmp_path / "venv2"
    )
    without = scan([f"env:{alone}"], ["sm_120"], use_cache=False)
    with_torch = scan([f"env:{beside}"], ["sm_120"], use_cache=False)
    assert sorted(line for _, line, _ in _app_gates(without)) == marked
    assert _app_gates(with_torch) == _app_gates(without)
    # Both gates admit sm_90 (exact, from the modelled API), not an unknown guess.
    for _, _, admitted in _app_gates(with_torch):
        assert "sm_90" in admitted
