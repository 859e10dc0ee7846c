"""Binary coverage on a real release, with cuobjdump as the oracle.

bitsandbytes 0.45.5 ships one CUDA library per toolkit (cuda117 … cuda128), each with SASS for a
different arch list. ``cuobjdump --list-elf --list-ptx`` (from the ``nvidia-cuda-cuobjdump``
package of the index, CUDA 13) must list the same SASS and PTX archs liftgate reads, library by
library; libraries cuobjdump refuses (CUDA 13's cuobjdump rejects sm_3x) are compared only where
it answers. Both wheels come through liftgate's download cache.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import fetch_release
from liftgate.arch.core import Arch
from liftgate.arch.parse import parse_target
from liftgate.detect.binary import (
    Unit,
    coverage,
    coverage_text,
    read_kernel_images,
    read_units,
    unit_coverage,
)
from liftgate.model import Coverage, GateKind
from liftgate.scan import scan

pytestmark = pytest.mark.network

_LISTED = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\d+[af]?)\.(cubin|ptx)$")


@pytest.fixture(scope="module")
def cuobjdump(tmp_path_factory: pytest.TempPathFactory) -> str:
    wheel = fetch_release("nvidia-cuda-cuobjdump==13.5.37")
    root = tmp_path_factory.mktemp("cuobjdump")
    with zipfile.ZipFile(wheel) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith("/bin/cuobjdump")]
        path = Path(zf.extract(member, root))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture(scope="module")
def bitsandbytes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheel = fetch_release("bitsandbytes==0.45.5")
    root = tmp_path_factory.mktemp("bnb")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root, [n for n in zf.namelist() if n.endswith(".so")])
    return root / "bitsandbytes"


def _oracle(cuobjdump: str, path: Path) -> tuple[set[str], set[str]] | None:
    done = subprocess.run([cuobjdump, "--list-elf", "--list-ptx", str(path)], capture_output=True, text=True)
    if "fatal" in done.stderr:
        return None
    sass, ptx = set(), set()
    for line in done.stdout.splitlines():
        m = _LISTED.match(line.strip())
        if m:
            (sass if m.group(1) == "ELF" else ptx).add(m.group(2))
    return sass, ptx


def test_liftgate_reads_what_cuobjdump_lists(cuobjdump: str, bitsandbytes: Path) -> None:
    compared = []
    for lib in sorted(bitsandbytes.glob("libbitsandbytes_cuda*.so")):
        expected = _oracle(cuobjdump, lib)
        if expected is None:
            continue
        images = read_kernel_images(str(lib))
        sass = {i.name for i in images if i.kind == "sass"}
        ptx = {i.name.replace("compute_", "sm_") for i in images if i.kind == "ptx"}
        assert (sass, ptx) == expected, lib.name
        compared.append(lib.name)
    # CUDA 13's cuobjdump answers for the libraries without sm_5x/sm_6x kernels.
    assert len(compared) >= 5 and "libbitsandbytes_cuda128.so" in compared, compared


def test_coverage_of_the_cuda128_library_and_the_scan_gate(bitsandbytes: Path) -> None:
    lib = bitsandbytes / "libbitsandbytes_cuda128.so"
    images = read_kernel_images(str(lib))
    assert coverage(images, (12, 0))[0] == "native"
    assert coverage(images, (12, 1))[0] == "native"  # sm_120 SASS runs on later 12.x minors
    assert coverage(images, (11, 0))[0] == "no-kernel-image"  # Jetson Thor: no sm_110, no PTX
    report = scan([str(bitsandbytes)], ["sm_110", "sm_120"], use_cache=False)
    gates = {g.location.path: g for g in report.gates if g.kind is GateKind.BINARY}
    # The CUDA 12.4 build stops at sm_90; its only PTX is in the relocatable fat binary, which the
    # driver does not load: no kernel image for an RTX 5090.
    cuda124 = gates["libbitsandbytes_cuda124.so"]
    assert cuda124.condition == "SASS sm_50, sm_52, sm_60, sm_61, sm_70, sm_75, sm_80, sm_86, sm_89, sm_90"
    assert cuda124.status(Arch(12, 0)).value == "excluded"
    cuda128 = gates["libbitsandbytes_cuda128.so"]
    assert cuda128.status(Arch(12, 0)).value == "admitted"
    assert cuda128.status(Arch(11, 0)).value == "excluded"
    assert os.path.getsize(lib) > 10_000_000  # a real library, read by its headers only


# -- per compiled unit (issue 23): vLLM 0.19.0, whose cu130 build lacks sm_110 (vLLM PR #39233) --

_ELF_BLOCK = re.compile(r"Fatbin elf code:\n=+\narch = (sm_\d+[af]?)\n(.*?)(?=\nFatbin |\Z)", re.S)
_ENTRY_SYMBOL = re.compile(r"^FUNC\s+\S+\s+\S+\s+ENTRY\s+(\S+)$", re.M)


def _elf_symbols(cuobjdump: str, path: Path) -> list[tuple[str, set[str]]]:
    """``cuobjdump --dump-elf-symbols``: each cubin in file order, its arch and its kernels."""
    done = subprocess.run(
        [cuobjdump, "--dump-elf-symbols", str(path)], capture_output=True, text=True, check=True
    )
    return [(m.group(1), set(_ENTRY_SYMBOL.findall(m.group(2)))) for m in _ELF_BLOCK.finditer(done.stdout)]


@pytest.fixture(scope="module")
def vllm_libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheel = fetch_release("vllm==0.19.0")
    root = tmp_path_factory.mktemp("vllm019")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root, ["vllm/_C.abi3.so", "vllm/_moe_C.abi3.so"])
    return root / "vllm"


def _check_against_cuobjdump(cuobjdump: str, lib: Path) -> list[Unit]:
    """liftgate's reading of ``lib``, checked against cuobjdump: the same cubins in the same order
    (so the units partition cuobjdump's list), and each unit's kernels those of its cubins (all of
    them where they are uncompressed; where only compressed ones exist, those of the one read)."""
    units = read_units(str(lib))
    listed = _elf_symbols(cuobjdump, lib)
    ours = [i for u in units for i in u.images if i.kind == "sass"]
    assert [i.name for i in ours] == [arch for arch, _ in listed], lib.name
    at = 0
    for unit in units:
        cubins = [i for i in unit.images if i.kind == "sass"]
        theirs = [kernels for _arch, kernels in listed[at : at + len(cubins)]]
        at += len(cubins)
        if not theirs:
            continue
        union = set().union(*theirs)
        if any(not i.compressed for i in cubins):
            assert set(unit.kernels) == union, lib.name
        else:
            assert set(unit.kernels) in theirs, lib.name
    return units


def test_units_and_kernels_agree_with_cuobjdump_on_vllm(cuobjdump: str, vllm_libs: Path) -> None:
    expected = {  # compiled units with no image / native / PTX JIT, as the issue measured them
        "_C.abi3.so": (105, {"sm_110": (0, 21, 84), "sm_121": (32, 21, 52)}),
        "_moe_C.abi3.so": (38, {"sm_110": (0, 15, 23), "sm_121": (13, 15, 10)}),
    }
    for name, (total, counts) in expected.items():
        units = _check_against_cuobjdump(cuobjdump, vllm_libs / name)
        cov = unit_coverage(units)
        compiled = cov.units
        assert len(compiled) == total
        for target, count in counts.items():
            arch = parse_target(target)
            assert cov.unit_counts(arch) == count, (name, target)
            assert cov.coverage(arch) is Coverage.PARTIAL
        assert all(u.unread is None for u in compiled)  # LZ4-compressed cubins included
    report = scan([str(vllm_libs)], ["sm_110", "sm_121"], use_cache=False)
    gates = {g.location.path: g for g in report.gates if g.kind is GateKind.BINARY}
    text = coverage_text(gates["_C.abi3.so"].coverage, parse_target("sm_110"))  # type: ignore[arg-type]
    assert text.startswith(
        "partial: 21 of 105 compiled units runnable (all through the PTX JIT), 84 with no kernel image "
        "(10 of them hold no kernel; marlin: 555 kernels"
    ), text


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_units_agree_with_cuobjdump_on_an_nvcc_build(cuobjdump: str, tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    objects = []
    for n, (code, gencode) in enumerate(
        (
            ("__global__ void a(int* x) { x[0] = 1; }\n__global__ void b(int* x) { x[1] = 2; }\n",
             ["-gencode", "arch=compute_90a,code=sm_90a", "-gencode", "arch=compute_100a,code=sm_100a"]),
            ("__global__ void c(float* x) { x[0] = 3.0f; }\n", ["-gencode", "arch=compute_80,code=[sm_80,sm_120]"]),
        )
    ):  # fmt: skip
        src, obj = tmp_path / f"u{n}.cu", tmp_path / f"u{n}.o"
        src.write_text(code)
        subprocess.run([nvcc, "-c", "-Xcompiler", "-fPIC", *gencode, str(src), "-o", str(obj)], check=True)
        objects.append(str(obj))
    lib = tmp_path / "libunits.so"
    subprocess.run(["g++", "-shared", *objects, "-o", str(lib)], check=True)
    units = _check_against_cuobjdump(cuobjdump, lib)
    assert [[i.name for i in u.images] for u in units] == [["sm_90a", "sm_100a"], ["sm_80", "sm_120"]]
    assert [sorted(u.kernels) for u in units] == [["_Z1aPi", "_Z1bPi"], ["_Z1cPf"]]
