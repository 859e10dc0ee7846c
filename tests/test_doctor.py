"""``liftgate doctor`` on this machine (no GPU, the CUDA 13 toolkit) and on a fake environment
whose package ships kernels built here with nvcc."""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from liftgate import doctor
from liftgate.cli.main import build_parser, main
from liftgate.detect.binary import FATBIN_MAGIC, FLAG_ARCH_SPECIFIC, KIND_ELF, KIND_PTX
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
    assert main(["doctor", "-t", "sm_120", "--env", env]) == 1  # a library with no kernel image fails
    out = capsys.readouterr().out
    assert "nvcc: " in out and "(CUDA 13." in out and "sm_120a" in out
    assert "builds sm_120: yes" in out
    assert "TORCH_CUDA_ARCH_LIST: 9.0a" in out
    assert "✗ kernpkg 1.0 for sm_120: 1 no-kernel-image, 1 ptx-jit" in out
    assert "1 of 2 files have compiled units with no kernel image for sm_120" in out
    # nvcc -shared adds a device-link stub unit built for sm_75 that holds no kernel: it decides nothing
    assert (
        "_hopper.so no-kernel-image: 0 of 2 compiled units runnable, 2 with no kernel image (1 of them hold no kernel; k: 1 kernel)"
        in out
    )
    assert main(["doctor", "-t", "sm_90", "--env", env, "--format", "json"]) == 0
    checks = json.loads(capsys.readouterr().out)["checks"]
    (kern,) = [c for c in checks if c["section"] == "kernels"]
    assert (
        kern["verdict"] == "warn" and kern["value"] == "1 native, 1 ptx-jit"
    )  # sm_80 SASS does not run on 9.0
    assert main(["doctor", "-t", "sm_70", "--env", env]) == 1  # CUDA 13 cannot build sm_70
    assert "builds sm_70: no" in capsys.readouterr().out


def synthetic_fatbin(*images: tuple[int, int, int]) -> bytes:
    """A ``.fatbin`` of one container holding an entry per (kind, arch, flags), headers as nvcc writes
    them (`liftgate.detect.binary` reads only those) and a few payload bytes each."""
    entries = b""
    for kind, arch, flags in images:
        payload = b"\0" * 16
        rest = struct.pack(
            "<IIHHIIIQ", 0, 0, 0 if kind != KIND_PTX else 8, 0 if kind != KIND_PTX else 9, arch, 0, 0, flags
        )
        entries += struct.pack("<HHIQ", kind, 0x101, 16 + len(rest), len(payload)) + rest + payload
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entries)) + entries


def kernel_env(tmp_path: Path, fake_env) -> str:  # type: ignore[no-untyped-def]
    """An environment whose package ``kernpkg 1.0`` ships one library for Hopper only (sm_90a SASS)
    and one for Ampere with PTX (sm_80 SASS + compute_80): the first has no kernel image for sm_120."""
    tree = tmp_path / "tree" / "kern"
    tree.mkdir(parents=True)
    (tree / "_hopper.fatbin").write_bytes(synthetic_fatbin((KIND_ELF, 90, FLAG_ARCH_SPECIFIC)))
    (tree / "_ampere.fatbin").write_bytes(synthetic_fatbin((KIND_ELF, 80, 0), (KIND_PTX, 80, 0)))
    fake_env(tree.parent, "kernpkg", "1.0")
    return str(tmp_path / "env")


@pytest.fixture
def quiet_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only the kernel checks decide: the toolchain, torch and caches of this machine are left out."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(doctor, "toolchain_checks", lambda target: [])
    monkeypatch.setattr(doctor, "torch_checks", lambda python: [])


def test_a_library_without_a_kernel_image_fails_the_check_and_says_what_to_do(
    tmp_path: Path,
    fake_env,
    quiet_machine: None,
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    env = kernel_env(tmp_path, fake_env)
    assert main(["doctor", "-t", "sm_120", "--env", env, "--format", "json"]) == 1, "exit 1: a check failed"
    checks = json.loads(capsys.readouterr().out)["checks"]
    (kern,) = [c for c in checks if c["section"] == "kernels"]
    assert (kern["item"], kern["verdict"], kern["value"]) == (
        "kernpkg 1.0 for sm_120", "fail", "1 no-kernel-image, 1 ptx-jit",
    )  # fmt: skip
    assert kern["hint"] == (
        "1 of 2 files have compiled units with no kernel image for sm_120, whose kernels fail there: "
        "_hopper.fatbin no-kernel-image: 0 of 1 compiled units runnable, 1 with no kernel image; the kernel names "
        "of 1 of them were not read. They need a build with sm_120 in its arch list; "
        f"`liftgate scan --kind binary -t sm_120 --env {env}` lists every file"
    )
    # sm_90: Hopper's sm_90a SASS runs natively, Ampere's PTX is JIT-compiled: a warning, exit 0
    assert main(["doctor", "-t", "sm_90", "--env", env, "--format", "json"]) == 0
    (kern,) = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["section"] == "kernels"]
    assert (kern["verdict"], kern["value"]) == ("warn", "1 native, 1 ptx-jit")


def test_every_doctor_option_has_help() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    doctor_parser = subparsers.choices["doctor"]
    for action in doctor_parser._actions:
        assert action.help and action.help != argparse.SUPPRESS, f"{action.option_strings} has no help"
    text = doctor_parser.format_help()
    assert "--format" in text and "json" in text and "exit" in text.lower()
