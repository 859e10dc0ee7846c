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
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import fetch_release
from liftgate.arch.core import Arch
from liftgate.detect.binary import coverage, read_kernel_images
from liftgate.model import GateKind
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
