"""``liftgate doctor`` on this machine (no GPU, the CUDA 13 toolkit) and on a fake environment
whose package ships kernels built here with nvcc."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from liftgate.cli.main import main
from liftgate.doctor import buildable

NVCC = shutil.which("nvcc")


def test_buildable_targets_follow_the_toolkit_version() -> None:
    codes = ["sm_75", "sm_90", "sm_100", "sm_120"]
    assert buildable((13, 0), codes) == [
        "sm_75", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_120", "sm_120a", "sm_120f",
    ]  # fmt: skip
    assert buildable((12, 4), ["sm_90", "sm_100"]) == ["sm_90", "sm_90a", "sm_100"]
    assert buildable((12, 8), ["sm_120"]) == ["sm_120", "sm_120a"]


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_doctor_screen_and_kernel_coverage(tmp_path: Path, fake_env, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    tree = tmp_path / "tree" / "kern"
    tree.mkdir(parents=True)
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    for name, flags in {
        "_ampere.so": ["-gencode", "arch=compute_80,code=[sm_80,compute_80]"],
        "_hopper.so": ["-gencode", "arch=compute_90a,code=sm_90a"],
    }.items():
        subprocess.run(
            [NVCC, "-shared", "-Xcompiler", "-fPIC", *flags, str(tmp_path / "k.cu"), "-o", str(tree / name)],
            check=True, capture_output=True,
        )  # fmt: skip
    fake_env(tree.parent, "kernpkg", "1.0")
    env = str(tmp_path / "env")
    assert main(["doctor", "-t", "sm_120", "--env", env]) == 0
    out = capsys.readouterr().out
    assert "nvcc: " in out and "(CUDA 13." in out and "sm_120a" in out
    assert "builds sm_120: yes" in out
    assert "TORCH_CUDA_ARCH_LIST: 9.0a" in out
    assert "kernpkg 1.0 for sm_120: 1 no-kernel-image, 1 ptx-jit" in out
    assert "1 of 2 files have no kernel for sm_120" in out
    assert main(["doctor", "-t", "sm_90", "--env", env, "--format", "json"]) == 0
    checks = json.loads(capsys.readouterr().out)["checks"]
    (kern,) = [c for c in checks if c["section"] == "kernels"]
    assert (
        kern["verdict"] == "warn" and kern["value"] == "1 native, 1 ptx-jit"
    )  # sm_80 SASS does not run on 9.0
    assert main(["doctor", "-t", "sm_70", "--env", env]) == 1  # CUDA 13 cannot build sm_70
    assert "builds sm_70: no" in capsys.readouterr().out
