"""Binary coverage per compiled unit (issue 23): the driver picks a kernel image in each fat binary
container (one per compiled ``.cu``), so a library can run some of its kernels on a GPU and not
others. A ``.so`` is built here with nvcc from two sources — one with ``sm_90a`` SASS only, one with
``compute_80`` PTX only (which CUDA 13 compresses with zstd) — and read back: two units, the kernel
names of each (from the cubin's symbol table, from the decompressed PTX), ``partial`` on sm_120
with exactly one runnable unit, and every output format and ``--fail-on`` saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liftgate.arch.parse import parse_target
from liftgate.cli.main import main
from liftgate.detect.binary import (
    FatbinError,
    coverage_text,
    kernel_display,
    kernel_group,
    read_units,
    unit_coverage,
)
from liftgate.model import Coverage
from liftgate.report.json_format import load_schema

NVCC = shutil.which("nvcc")
pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")]

HOPPER = """\
namespace marlin { template <int N> __global__ void Marlin(float* x) { x[threadIdx.x] *= N; } }
template __global__ void marlin::Marlin<4>(float*);
__global__ void moe_align_block_size_kernel(int* a) { a[0] = 1; }
__device__ __noinline__ int helper(int x) { return x * 3 + 1; }
__global__ void uses_helper(int* a) { a[0] = helper(a[1]); }
"""
PORTABLE = "__global__ void portable_kernel(float* x) { x[0] = 2.0f; }\n"
SM120 = parse_target("sm_120")


@pytest.fixture(scope="module")
def two_units(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pkg/libtwo.so``: ``hopper.cu`` for sm_90a (SASS only) and ``portable.cu`` for compute_80
    (PTX only), compiled apart and linked by the host linker (nvcc -shared would add a device-link
    stub unit)."""
    root = tmp_path_factory.mktemp("units")
    (root / "hopper.cu").write_text(HOPPER)
    (root / "portable.cu").write_text(PORTABLE)
    assert NVCC is not None
    for name, code in (
        ("hopper", "arch=compute_90a,code=sm_90a"),
        ("portable", "arch=compute_80,code=compute_80"),
    ):
        subprocess.run(
            [NVCC, "-c", "-Xcompiler", "-fPIC", "-gencode", code, str(root / f"{name}.cu"), "-o", str(root / f"{name}.o")],
            check=True, capture_output=True,
        )  # fmt: skip
    (root / "pkg").mkdir()
    subprocess.run(
        ["g++", "-shared", str(root / "hopper.o"), str(root / "portable.o"), "-o", str(root / "pkg" / "libtwo.so")],
        check=True, capture_output=True,
    )  # fmt: skip
    return root / "pkg"


def test_each_compiled_unit_with_its_images_and_kernels(two_units: Path) -> None:
    units = read_units(str(two_units / "libtwo.so"))
    assert [[i.name for i in u.images] for u in units] == [["sm_90a"], ["compute_80"]]
    assert units[1].images[0].compressed  # CUDA 13 compresses PTX (zstd): read through zstandard
    assert [sorted(kernel_display(k) for k in u.kernels) for u in units] == [
        ["marlin::Marlin<4>", "moe_align_block_size_kernel", "uses_helper"],  # not the __device__ helper
        ["portable_kernel"],
    ]
    assert all(u.unread is None for u in units)
    cov = unit_coverage(units)
    assert (cov.images, cov.compressed) == (2, 1)
    # 9.0: the sm_90a cubin natively, the PTX through the JIT; 12.0 and 8.0: only the PTX unit.
    assert cov.coverage(parse_target("sm_90a")) is Coverage.PTX_JIT
    assert cov.coverage(SM120) is Coverage.PARTIAL
    assert cov.coverage(parse_target("sm_80")) is Coverage.PARTIAL
    assert cov.coverage(parse_target("sm_75")) is Coverage.NONE
    assert cov.unit_counts(SM120) == (0, 1, 1)
    assert cov.kernel_counts(SM120) == (0, 1, 3)
    assert coverage_text(cov, SM120) == (
        "partial: 1 of 2 compiled units runnable (all through the PTX JIT), 1 with no kernel image "
        "(marlin: 1 kernel, moe_align_block_size_kernel: 1, uses_helper: 1)"
    )


def test_scan_reports_partial_coverage_in_every_format(
    two_units: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = str(two_units)
    assert main(["scan", tree, "-t", "sm_120", "-t", "sm_90a", "--kind", "binary", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "sm_120 loses 1 code path" in out
    assert "partial: 1 of 2 compiled units runnable (all through the PTX JIT), 1 with no kernel image" in out
    assert main(["scan", tree, "-t", "sm_120", "--kind", "binary", "--no-cache", "--show", "all"]) == 0
    assert " partial " in capsys.readouterr().out  # the status column
    assert (
        main(["scan", tree, "-t", "sm_120", "-t", "sm_90a", "--kind", "binary", "--no-cache", "-f", "json"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, load_schema())
    (gate,) = doc["gates"]
    cov = gate["facts"]["coverage"]
    assert (cov["units"], cov["kernels"], cov["targets"]) == (
        2,
        4,
        {"sm_120": "partial", "sm_90a": "ptx-jit"},
    )
    mine = cov["per_target"]["sm_120"]
    assert mine["units"] == {"native": 0, "ptx_jit": 1, "none": 1}
    assert mine["kernels"] == {"native": 0, "ptx_jit": 1, "none": 3}
    assert sorted(mine["missing_kernels"]) == [
        "marlin::Marlin<4>",
        "moe_align_block_size_kernel",
        "uses_helper",
    ]
    assert gate["status"]["sm_120"] == "excluded"  # partial: some of its kernels fail there
    assert cov["per_target"]["sm_90a"]["units"] == {"native": 1, "ptx_jit": 1, "none": 0}


def test_fail_on_excluded_and_jit(two_units: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = str(two_units)
    assert (
        main(["scan", tree, "-t", "sm_120", "--kind", "binary", "--no-cache", "--fail-on", "excluded", "-q"])
        == 1
    )
    assert (
        main(["scan", tree, "-t", "sm_90a", "--kind", "binary", "--no-cache", "--fail-on", "excluded", "-q"])
        == 0
    )
    assert (
        main(["scan", tree, "-t", "sm_90a", "--kind", "binary", "--no-cache", "--fail-on", "jit", "-q"]) == 1
    )
    assert "--fail-on jit: 1 gate matches" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("display", "group"),
    [
        ("marlin::Marlin<…>", "marlin"),
        ("cutlass::device_kernel<flash::FlashAttnFwdCombine<…>>", "flash"),
        ("cub::CUB_200802_SM_900::EmptyKernel<void>", "cub"),
        ("vllm::moe::topk_softmax<…>", "vllm::moe"),
        ("vllm::rms_norm_kernel<…>", "vllm::rms_norm_kernel"),
        ("moe_align_block_size_kernel", "moe_align_block_size_kernel"),
    ],
)
def test_kernel_groups(display: str, group: str) -> None:
    assert kernel_group(display) == group


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_kernel_tables_are_unread_units_never_crashes(
    two_units: Path, tmp_path: Path, data: st.DataObject
) -> None:
    """Bytes of the library overwritten anywhere in its fat binary (headers, symbol tables, the
    compressed PTX): the file is a Skip (`FatbinError`) or its units say which names were not read."""
    raw = bytearray((two_units / "libtwo.so").read_bytes())
    start = raw.find(b"\x50\xed\x55\xba")  # the first container
    assert start > 0
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(start, min(len(raw) - 1, start + 12_000)))
        raw[at] = data.draw(st.integers(0, 255))
    damaged = tmp_path / "damaged.so"
    damaged.write_bytes(bytes(raw))
    try:
        units = read_units(str(damaged))
    except FatbinError:
        return
    for unit in units:
        assert unit.unread is None or unit.unread.startswith("kernel names not read")


def test_markdown_marks_partial_coverage(two_units: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "scan",
                str(two_units),
                "-t",
                "sm_120",
                "--kind",
                "binary",
                "--no-cache",
                "-f",
                "markdown",
                "--show",
                "all",
            ]
        )
        == 0
    )
    assert "**excluded** (partial)" in capsys.readouterr().out
