"""The arch facts checked against the real nvcc: targets it knows, and the macros each pass sees.

``nvcc --dryrun`` prints every command of a compilation without running it. The preprocessor
commands (``gcc -E``) carry the ``-D`` flags nvcc predefines: the device passes carry
``__CUDA_ARCH__`` and friends, the host pass does not. These must match `nvcc_macros`, which the
CUDA detector uses to evaluate ``#if`` conditions. All dry runs go through a thread pool, so the
whole file takes about a second.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from liftgate.arch import Arch, nvcc_macros, parse_arch, universe

NVCC = shutil.which("nvcc")

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not on PATH"),
]

# Defined by cuda_runtime_api.h / cuda.h, not on the command line.
HEADER_MACROS = frozenset({"CUDART_VERSION", "CUDA_VERSION"})


def run_nvcc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert NVCC is not None
    return subprocess.run([NVCC, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


@cache
def cuda_version() -> tuple[int, int]:
    match = re.search(r"release (\d+)\.(\d+)", run_nvcc("--version").stdout)
    assert match, "cannot read the release from nvcc --version"
    return int(match.group(1)), int(match.group(2))


@cache
def nvcc_codes() -> frozenset[str]:
    """Every real target nvcc accepts, variants included (``--help`` lists the allowed values)."""
    codes = set(run_nvcc("--list-gpu-code").stdout.split())
    codes |= set(re.findall(r"'(sm_\d+[af]?)'", run_nvcc("--help").stdout))
    return frozenset(code for code in codes if code.startswith("sm_"))


def supported_archs() -> list[Arch]:
    if NVCC is None:
        return []
    return [arch for arch in universe() if arch.name in nvcc_codes()]


@dataclass(frozen=True)
class Pass:
    """One preprocessor run from ``nvcc --dryrun``: ``virtual`` is the compute_XX it feeds, None for the host."""

    virtual: str | None
    defines: dict[str, int]


@dataclass(frozen=True)
class DryRun:
    passes: list[Pass]
    cicc_archs: list[str]

    @property
    def host(self) -> Pass:
        (host,) = [p for p in self.passes if p.virtual is None]
        return host

    @property
    def device(self) -> list[Pass]:
        return [p for p in self.passes if p.virtual is not None]


def parse_defines(tokens: Iterable[str]) -> dict[str, int]:
    defines: dict[str, int] = {}
    for token in tokens:
        if token.startswith("-D"):
            name, _, value = token[2:].partition("=")
            defines[name] = int(value) if value else 1  # gcc: -DNAME means NAME=1
    return defines


def dry_run(tmp_path: Path, *flags: str) -> DryRun:
    source = tmp_path / "t.cu"
    if not source.exists():
        source.write_text("__global__ void kernel() {}\n")
    result = run_nvcc("--dryrun", "-c", *flags, "t.cu", "-o", "t.o", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    host: list[Pass] = []
    device_defines: list[dict[str, int]] = []
    cicc_archs: list[str] = []
    for line in (result.stdout + result.stderr).splitlines():
        if not line.startswith("#$ "):
            continue
        tokens = shlex.split(line[3:])
        if not tokens:
            continue
        if Path(tokens[0]).name == "cicc":
            cicc_archs.append(tokens[tokens.index("-arch") + 1])
        elif "-E" in tokens and "-D__CUDACC__" in tokens:
            # The final `gcc -c` of the generated host code repeats the -D flags but preprocesses
            # nothing new, so only `-E` runs count.
            defines = parse_defines(tokens)
            if "__CUDA_ARCH__" in defines:
                device_defines.append(defines)
            else:
                host.append(Pass(None, defines))
    # Each device preprocessing run is followed by the cicc run that compiles its output.
    assert len(device_defines) == len(cicc_archs), (device_defines, cicc_archs)
    passes = host + [Pass(virtual, d) for virtual, d in zip(cicc_archs, device_defines, strict=True)]
    return DryRun(passes, cicc_archs)


def restricted(defines: dict[str, int], expected: dict[str, int]) -> dict[str, int]:
    """The macros the comparison is about: every __CUDA_ARCH* seen, and every modelled one."""
    names = {n for n in defines if n.startswith("__CUDA_ARCH")} | (expected.keys() - HEADER_MACROS)
    return {n: defines[n] for n in names if n in defines}


def expected_macros(arch: Arch | None) -> dict[str, int]:
    return {n: v for n, v in nvcc_macros(arch, cuda_version()).items() if n not in HEADER_MACROS}


def test_every_nvcc_target_is_known() -> None:
    known = {arch.name for arch in universe()}
    assert nvcc_codes() - known == set(), "nvcc knows targets that data/archs.json lacks"
    baselines = {code for code in run_nvcc("--list-gpu-code").stdout.split() if code.startswith("sm_")}
    assert baselines, "nvcc --list-gpu-code listed nothing"
    for code in baselines:
        assert parse_arch(code).name == code


def test_former_names_are_rejected_by_current_nvcc() -> None:
    if cuda_version() < (13, 0):
        pytest.skip("sm_101 was renamed sm_110 in CUDA 13.0")
    assert "sm_101" not in nvcc_codes()
    assert "sm_110" in nvcc_codes()


def test_gencode_passes_match_nvcc_macros(tmp_path: Path) -> None:
    archs = supported_archs()
    assert archs, "nvcc supports none of the known archs"
    # One directory per run, made before the threads start (pytest's tmp factories are not thread-safe).
    workdirs = {arch: tmp_path / arch.name for arch in archs}
    for workdir in workdirs.values():
        workdir.mkdir()

    def one(arch: Arch) -> tuple[Arch, DryRun]:
        number = f"{arch.number}{arch.variant}"
        flags = ("-gencode", f"arch=compute_{number},code=sm_{number}")
        return arch, dry_run(workdirs[arch], *flags)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, archs))

    failures: list[str] = []
    for arch, run in results:
        (device,) = run.device
        want = expected_macros(arch)
        got = restricted(device.defines, want)
        if got != want:
            failures.append(
                f"{arch.name} device pass: nvcc {sorted(got.items())} != model {sorted(want.items())}"
            )
        host = run.host
        if "__CUDA_ARCH__" in host.defines:
            failures.append(f"{arch.name} host pass defines __CUDA_ARCH__")
        # The host pass sees the build's arch list but no single arch; nvcc_macros(None) leaves it out.
        if host.defines.get("__CUDA_ARCH_LIST__") != arch.cuda_arch:
            failures.append(
                f"{arch.name} host pass __CUDA_ARCH_LIST__={host.defines.get('__CUDA_ARCH_LIST__')}"
            )
        want_host = expected_macros(None)
        got_host = {n: v for n, v in restricted(host.defines, want_host).items() if n != "__CUDA_ARCH_LIST__"}
        if got_host != want_host:
            failures.append(
                f"{arch.name} host pass: nvcc {sorted(got_host.items())} != model {sorted(want_host.items())}"
            )
        if run.cicc_archs != [f"compute_{arch.number}{arch.variant}"]:
            failures.append(f"{arch.name}: cicc passes {run.cicc_archs}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", ["sm_90a", "sm_100a", "sm_100f", "sm_120a", "sm_120f", "sm_121a"])
def test_arch_flag_with_variant_adds_generic_ptx_pass(name: str, tmp_path: Path) -> None:
    """``-arch=sm_120a`` compiles a generic ``compute_120`` PTX pass besides ``sm_120a``.

    So code built that way is preprocessed twice: once where ``__CUDA_ARCH_SPECIFIC__`` (or
    ``__CUDA_ARCH_FAMILY_SPECIFIC__``) is defined and once where it is not.
    """
    arch = parse_arch(name)
    if arch.name not in nvcc_codes():
        pytest.skip(f"this nvcc does not support {arch.name}")
    run = dry_run(tmp_path, f"-arch={arch.name}")
    generic, specific = f"compute_{arch.number}", f"compute_{arch.number}{arch.variant}"
    assert sorted(run.cicc_archs) == sorted([generic, specific])
    passes = {p.virtual: p for p in run.device}
    assert passes.keys() == {generic, specific}
    assert restricted(passes[generic].defines, expected_macros(arch.baseline)) == expected_macros(
        arch.baseline
    )
    assert restricted(passes[specific].defines, expected_macros(arch)) == expected_macros(arch)
    assert "__CUDA_ARCH__" not in run.host.defines


def test_host_pass_has_no_cuda_arch(tmp_path: Path) -> None:
    run = dry_run(tmp_path, "-arch=sm_90")
    assert "__CUDA_ARCH__" not in run.host.defines
    assert run.host.defines["__CUDACC__"] == 1
    assert [p.virtual for p in run.device] == ["compute_90"]
