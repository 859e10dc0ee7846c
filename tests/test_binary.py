"""Binary kernel coverage: objects built here with nvcc for chosen targets, read back, and the
coverage verdict for sm_86, sm_90, sm_90a, sm_100a, sm_120 and sm_121 checked exactly; the fatbin
reader fuzzed on truncated and corrupted inputs."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.arch.parse import parse_target
from liftgate.detect.binary import FatbinError, coverage, parse_fatbin, read_kernel_images, summarize
from liftgate.model import GateKind, Status
from liftgate.scan import scan

NVCC = shutil.which("nvcc")
needs_nvcc = [pytest.mark.nvcc, pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")]
TARGETS = ("sm_86", "sm_90", "sm_90a", "sm_100a", "sm_120", "sm_121")
KERNEL = "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"

BUILDS = {
    "ampere_ptx": (
        ["-gencode", "arch=compute_80,code=[sm_80,compute_80]"],
        "SASS sm_80; PTX compute_80 (ISA 9.0)",
        ["native", "ptx-jit", "ptx-jit", "ptx-jit", "ptx-jit", "ptx-jit"],
    ),
    "hopper_a": (
        ["-gencode", "arch=compute_90a,code=sm_90a"],
        "SASS sm_90a",
        ["no-kernel-image", "native", "native", "no-kernel-image", "no-kernel-image", "no-kernel-image"],
    ),
    "blackwell_a": (
        ["-gencode", "arch=compute_120a,code=sm_120a"],
        "SASS sm_120a",
        [
            "no-kernel-image",
            "no-kernel-image",
            "no-kernel-image",
            "no-kernel-image",
            "native",
            "no-kernel-image",
        ],
    ),
    "blackwell_f": (
        ["-arch=sm_120f"],
        "SASS sm_120f; PTX compute_120 (ISA 9.0), compute_120f (ISA 9.0)",
        ["no-kernel-image", "no-kernel-image", "no-kernel-image", "no-kernel-image", "native", "native"],
    ),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    root = tmp_path_factory.mktemp("bin")
    (root / "k.cu").write_text(KERNEL)
    out = {}
    for name, (flags, _summary, _cov) in BUILDS.items():
        obj = root / f"{name}.o"
        subprocess.run(
            [NVCC, "-c", *flags, str(root / "k.cu"), "-o", str(obj)], check=True, capture_output=True
        )
        out[name] = obj
    lib = root / "pkg" / "_C.so"
    lib.parent.mkdir()
    subprocess.run(
        [NVCC, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
         "-gencode", "arch=compute_90a,code=sm_90a", str(root / "k.cu"), "-o", str(lib)],
        check=True, capture_output=True,
    )  # fmt: skip
    out["library"] = lib
    return out


@pytest.mark.parametrize("name", list(BUILDS))
@pytest.mark.nvcc
def test_contents_and_coverage_of_objects_built_with_nvcc(built: dict[str, Path], name: str) -> None:
    _flags, summary, expected = BUILDS[name]
    images = read_kernel_images(str(built[name]))
    assert summarize(images) == summary
    got = [coverage(images, parse_target(t).cc)[0] for t in TARGETS]
    assert got == expected


@pytest.mark.nvcc
def test_a_fatbin_file_is_read_as_it_is(built: dict[str, Path], tmp_path: Path) -> None:
    fatbin = tmp_path / "k.fatbin"
    (tmp_path / "k.cu").write_text(KERNEL)
    subprocess.run(
        [NVCC, "--fatbin", "-gencode", "arch=compute_90a,code=[sm_90a,compute_90a]", str(tmp_path / "k.cu"), "-o", str(fatbin)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert summarize(read_kernel_images(str(fatbin))) == "SASS sm_90a; PTX compute_90a (ISA 9.0)"


@pytest.mark.nvcc
def test_a_shared_library_is_a_binary_gate_in_the_scan(built: dict[str, Path]) -> None:
    report = scan([str(built["library"].parent)], list(TARGETS), use_cache=False)
    (gate,) = [g for g in report.gates if g.kind is GateKind.BINARY]
    assert gate.location.path == "_C.so" and gate.condition == "SASS sm_80, sm_90a; PTX compute_80 (ISA 9.0)"
    statuses = {t: gate.status(parse_target(t)) for t in TARGETS}
    assert all(s is Status.ADMITTED for s in statuses.values())  # natively or through the PTX JIT
    assert any("PTX JIT" in e.text for e in gate.evidence)
    narrow = scan([str(built["hopper_a"].parent)], ["sm_120"], use_cache=False)
    hopper = next(g for g in narrow.gates if g.location.path == "hopper_a.o")
    assert hopper.status(parse_target("sm_120")) is Status.EXCLUDED  # no kernel image for an RTX 5090


@pytest.mark.nvcc
def test_a_truncated_library_is_a_skip_with_the_reason(built: dict[str, Path], tmp_path: Path) -> None:
    data = built["library"].read_bytes()
    bad = tmp_path / "pkg" / "broken.so"
    bad.parent.mkdir()
    bad.write_bytes(data[: len(data) // 3])
    report = scan([str(bad.parent)], ["sm_90"], use_cache=False)
    assert not [g for g in report.gates if g.kind is GateKind.BINARY]
    (skip,) = [s for s in report.skips if s.path == "broken.so"]
    assert skip.reason.startswith("binary not read:")


@pytest.mark.nvcc
@settings(max_examples=300, deadline=None)
@given(
    cut=st.integers(min_value=0, max_value=4000),
    flips=st.lists(st.tuples(st.integers(0, 3999), st.integers(0, 255)), max_size=8),
)
def test_fatbin_parser_never_crashes_on_corrupted_input(
    built: dict[str, Path], cut: int, flips: list[tuple[int, int]]
) -> None:
    from elftools.elf.elffile import ELFFile

    with open(built["ampere_ptx"], "rb") as fh:
        section = bytearray(ELFFile(fh).get_section_by_name(".nv_fatbin").data())
    for at, value in flips:
        if at < len(section):
            section[at] = value
    try:
        images = parse_fatbin(bytes(section[: max(cut, 0) or len(section)]))
    except FatbinError:
        return
    assert all(10 <= i.number <= 999 for i in images)


@given(data=st.binary(max_size=512))
def test_random_bytes_are_no_kernels_or_a_fatbin_error(
    data: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "x.so"
    path.write_bytes(b"\x7fELF" + data)
    with contextlib.suppress(FatbinError):
        assert isinstance(read_kernel_images(str(path)), list)


@pytest.mark.nvcc
def test_a_binary_detection_is_cached_by_its_files_stats(
    built: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    import liftgate.detect.binary as binary

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    lib = pkg / "_C.so"
    shutil.copyfile(built["library"], lib)
    old = 1_600_000_000 * 10**9  # long before the scan: its stat can be trusted
    os.utime(lib, ns=(old, old))
    cache = tmp_path / "cache"
    first = scan([str(pkg)], ["sm_90"], cache_dir=str(cache))
    reads: list[str] = []
    real = binary.read_units
    monkeypatch.setattr(
        binary, "read_units", lambda path, names=True: reads.append(path) or real(path, names)
    )
    again = scan([str(pkg)], ["sm_90"], cache_dir=str(cache))
    assert reads == []  # from the cache: no ELF file opened
    assert [g for g in again.gates if g.kind is GateKind.BINARY] == [
        g for g in first.gates if g.kind is GateKind.BINARY
    ]
    # Another mtime is another key: read again (a file replaced by one of the same size).
    os.utime(lib, ns=(old + 10**9, old + 10**9))
    scan([str(pkg)], ["sm_90"], cache_dir=str(cache))
    assert reads == [str(lib)]
    # A file changed moments ago may change again within the clock's granularity: never cached.
    lib.touch()
    scan([str(pkg)], ["sm_90"], cache_dir=str(cache))
    scan([str(pkg)], ["sm_90"], cache_dir=str(cache))
    assert reads == [str(lib)] * 3
