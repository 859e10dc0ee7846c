"""``liftgate doctor``: the local picture in one screen, each line with a verdict and a hint.

GPUs and their capabilities (NVML), the driver and the CUDA version it supports, nvcc/ptxas and
the targets they can build, torch's arch list (asked in a subprocess, so liftgate itself never
imports torch or initialises CUDA), the environment variables that steer builds and caches, the
JIT caches with their sizes, and the installed packages that ship kernels with their coverage
for the target (`liftgate.detect.binary`). Pure data (`Check`) first; the CLI renders it.
"""

from __future__ import annotations

import enum
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from liftgate.arch.core import Arch
from liftgate.sources.environment import resolve_env


class CheckVerdict(str, enum.Enum):
    """A check's verdict; its value is what the text marks and the JSON ``verdict`` field carry."""

    OK = "ok"
    WARN = "warn"  # works, with a cost or a caveat (PTX JIT, no nvcc): never changes the exit status
    FAIL = "fail"  # the exit status is 1
    INFO = "info"  # a fact, no judgement

    def __str__(self) -> str:
        return self.value


BUILD_ENV = (
    "TORCH_CUDA_ARCH_LIST",
    "FLASHINFER_CUDA_ARCH_LIST",
    "CMAKE_CUDA_ARCHITECTURES",
    "CUDA_HOME",
    "CUDA_PATH",
)


@dataclass(frozen=True, slots=True)
class Check:
    section: str
    item: str
    verdict: CheckVerdict
    value: str
    hint: str = ""


# The torch probe prints its answer on one stdout line that starts with this: whatever else the
# interpreter writes (a warning on import, a package that prints) is never taken for the answer.
PROBE_MARK = "liftgate-doctor-probe:"
_TORCH_PROBE = """
import json, sys
def say(doc):
    sys.stdout.write("\\n" + MARK + json.dumps(doc) + "\\n")
    sys.stdout.flush()
import importlib.util
if importlib.util.find_spec("torch") is None:
    say({"installed": False})
    raise SystemExit
try:
    import torch
except BaseException as exc:
    say({"installed": True, "error": (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]})
    raise SystemExit
cuda = getattr(getattr(torch, "version", None), "cuda", None)
archs = []
try:
    # The arch list the build was compiled for, without asking the driver (get_arch_list() is
    # empty on a machine without a GPU, even for a CUDA build).
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    archs = (flags() or "").split() if cuda and flags else (torch.cuda.get_arch_list() if cuda else [])
except Exception:
    archs = []
say({"installed": True, "version": str(getattr(torch, "__version__", "?")), "cuda": cuda, "archs": list(archs)})
""".replace("MARK", repr(PROBE_MARK), 1)


@dataclass(frozen=True, slots=True)
class Ran:
    """What a command printed, stdout and stderr apart; ``returncode`` None when it could not run."""

    returncode: int | None
    stdout: str
    stderr: str
    problem: str = ""  # why it could not run, or ""


def _execute(cmd: list[str], timeout: float = 30) -> Ran:
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return Ran(None, "", "", f"no answer within {timeout:g} s")
    except OSError as exc:
        return Ran(None, "", "", str(exc.strerror or exc))
    return Ran(done.returncode, done.stdout, done.stderr)


def _run(cmd: list[str], timeout: float = 30) -> str | None:
    """A command's stdout when it succeeds (its stderr is never part of the answer), else None."""
    ran = _execute(cmd, timeout)
    return ran.stdout if ran.returncode == 0 else None


def marked_answer(stdout: str, mark: str = PROBE_MARK) -> object:
    """The JSON on the last stdout line that starts with ``mark``; None when there is none or it is malformed."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(mark):
            try:
                return json.loads(line[len(mark) :])
            except ValueError:
                return None
    return None


def buildable(cuda: tuple[int, int], codes: list[str]) -> list[str]:
    """Targets a toolkit builds: its ``--list-gpu-code`` list plus the variants its version has
    (``a`` for sm_90 from 12.0 and for sm_100+ from 12.8, ``f`` from 12.9, per the CUDA release notes)."""
    out = []
    for code in codes:
        m = re.fullmatch(r"sm_(\d+)", code)
        if not m:
            continue
        number = int(m.group(1))
        out.append(code)
        if (number == 90 and cuda >= (12, 0)) or (number >= 100 and cuda >= (12, 8)):
            out.append(f"{code}a")
        if number >= 100 and cuda >= (12, 9):
            out.append(f"{code}f")
    return out


def gpu_checks(target: Arch | None) -> tuple[list[Check], list[Arch]]:
    from liftgate.arch.nvml import NoGpuError, detect_local_gpus

    checks: list[Check] = []
    try:
        gpus = detect_local_gpus()
    except NoGpuError as exc:
        if target is not None:
            checks.append(
                Check("GPU", "devices", CheckVerdict.INFO, f"none found; checking for {target.name} as asked")
            )
        else:
            checks.append(Check("GPU", "devices", CheckVerdict.WARN, "none found", str(exc)))
        return checks, []
    for gpu in gpus:
        checks.append(
            Check(
                "GPU",
                f"GPU {gpu.index}",
                CheckVerdict.OK,
                f"{gpu.name}, compute capability {gpu.capability[0]}.{gpu.capability[1]} ({gpu.arch.name})",
                gpu.note or "",
            )
        )
    try:
        import pynvml

        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        checks.append(
            Check(
                "GPU",
                "driver",
                CheckVerdict.OK,
                f"{driver}, supports CUDA up to {cuda // 1000}.{cuda % 1000 // 10}",
            )
        )
    except Exception as exc:  # an NVML without these calls: say so, never fail
        checks.append(Check("GPU", "driver", CheckVerdict.INFO, f"n/a ({exc.__class__.__name__})"))
    return checks, list(dict.fromkeys(g.arch for g in gpus))


def toolchain_checks(target: Arch | None) -> list[Check]:
    from liftgate.judge.compile_check import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        return [
            Check(
                "toolchain",
                "nvcc",
                CheckVerdict.WARN,
                "not found",
                "JIT builds (FlashInfer, torch extensions) need the CUDA toolkit: set CUDA_HOME or put nvcc on PATH",
            )
        ]
    text = _run([nvcc, "--version"]) or ""
    m = re.search(r"release (\d+)\.(\d+)", text)
    cuda = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    checks = [Check("toolchain", "nvcc", CheckVerdict.OK, f"{nvcc} (CUDA {cuda[0]}.{cuda[1]})")]
    ptxas = os.path.join(os.path.dirname(nvcc), "ptxas")
    ptxas_text = _run([ptxas, "--version"]) if os.access(ptxas, os.X_OK) else None
    pm = re.search(r"release (\d+\.\d+)", ptxas_text or "")
    checks.append(
        Check(
            "toolchain",
            "ptxas",
            CheckVerdict.OK if pm else CheckVerdict.WARN,
            f"{ptxas} ({pm.group(1)})" if pm else "not found beside nvcc",
        )
    )
    codes = (_run([nvcc, "--list-gpu-code"]) or "").split()
    targets = buildable(cuda, codes)
    checks.append(Check("toolchain", "builds", CheckVerdict.INFO, ", ".join(targets) or "n/a",
                        "CUDA 13 dropped sm_70/sm_72 and renamed sm_101 to sm_110; sm_120a needs CUDA 12.8, f targets 12.9"))  # fmt: skip
    if target is not None:
        name = f"sm_{target.number}{target.variant}"
        ok = name in targets
        checks.append(
            Check("toolchain", f"builds {name}", CheckVerdict.OK if ok else CheckVerdict.FAIL, "yes" if ok else "no",
                  "" if ok else f"install a CUDA toolkit that lists {name} (nvcc --list-gpu-code)")
        )  # fmt: skip
    return checks


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def torch_checks(python: str) -> list[Check]:
    """torch's version, CUDA and arch list, asked of ``python`` in a subprocess (the answer read from
    its marked stdout line, so warnings on stderr or prints on import never hide it)."""
    ran = _execute([python, "-c", _TORCH_PROBE], timeout=120)
    info = marked_answer(ran.stdout)
    if not isinstance(info, dict):
        why = ran.problem or (
            f"exit status {ran.returncode}"
            + (f": {_last_line(ran.stderr)}" if _last_line(ran.stderr) else "")
        )
        return [
            Check("torch", "torch", CheckVerdict.WARN, f"could not be asked ({why})",
                  f"run `{python} -c 'import torch'` to see what goes wrong")
        ]  # fmt: skip
    if not info.get("installed"):
        return [Check("torch", "torch", CheckVerdict.INFO, "not installed")]
    if info.get("error"):
        return [
            Check("torch", "torch", CheckVerdict.WARN, f"installed, but importing it fails ({info['error']})",
                  f"run `{python} -c 'import torch'` to see the whole error")
        ]  # fmt: skip
    archs = [str(a) for a in info.get("archs") or []]
    cuda = info.get("cuda")
    return [
        Check("torch", "torch", CheckVerdict.OK, f"{info.get('version')} (CUDA {cuda or 'none'})"),
        Check(
            "torch",
            "arch list",
            CheckVerdict.INFO if archs else CheckVerdict.WARN,
            " ".join(archs) or ("none (a CPU build)" if not cuda else "none reported"),
        ),
    ]


def env_checks(environ: dict[str, str]) -> list[Check]:
    from liftgate.lift.caches import load_caches

    names = list(BUILD_ENV)
    for spec in load_caches():
        names.extend(env for env, _path in spec.locations if env and env not in names)
    return [
        Check("environment", name, CheckVerdict.INFO, environ[name]) for name in names if environ.get(name)
    ] or [Check("environment", "variables", CheckVerdict.INFO, "none of " + ", ".join(BUILD_ENV) + " is set")]


def _size(path: str, budget_s: float = 2.0) -> tuple[int, int, bool]:
    """(bytes, files, complete) under ``path``, within a time budget."""
    total = count = 0
    started = time.monotonic()
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            count += 1
        if time.monotonic() - started > budget_s:
            return total, count, False
    return total, count, True


def cache_checks(environ: dict[str, str]) -> list[Check]:
    from liftgate.lift.caches import cache_root, load_caches

    out = []
    for spec in load_caches():
        root = cache_root(spec, environ)
        if not os.path.isdir(root):
            continue
        size, files, complete = _size(root)
        out.append(
            Check(
                "JIT caches",
                spec.tool,
                CheckVerdict.INFO,
                f"{root}: {size / 1e6:.1f} MB in {files} files" + ("" if complete else " (or more)"),
            )
        )
    return out or [
        Check("JIT caches", "caches", CheckVerdict.INFO, "none of the known JIT caches exists here")
    ]


def kernel_checks(env: str | None, targets: list[Arch]) -> list[Check]:
    """Installed packages with CUDA kernels, and whether each target has a kernel image in them,
    decided per compiled unit as the driver does.

    A package with any library that has no kernel image for a target in some of its compiled
    units fails for it: those kernels fail on that GPU ("no kernel image is available for execution
    on the device"); the hint names the libraries, how many units run, and the kernels that do not."""
    from liftgate.detect.binary import coverage_text, unit_coverage, unit_files
    from liftgate.model import BinaryCoverage, Coverage
    from liftgate.sources.environment import resolve_environment

    packages, _skips = resolve_environment(env)
    where = f" --env {shlex.quote(env)}" if env else ""
    out = []
    for pkg in packages:
        libraries: list[tuple[str, BinaryCoverage]] = []
        for f, units, _problem in unit_files(pkg.files, names=bool(targets)):
            cov = unit_coverage(units)
            if cov.units:
                libraries.append((f.path, cov))
        if not libraries:
            continue
        name = f"{pkg.name} {pkg.version or ''}".strip()
        if not targets:
            out.append(
                Check(
                    "kernels",
                    name,
                    CheckVerdict.INFO,
                    f"{len(libraries)} files with CUDA kernels",
                    "pass --target to see their coverage",
                )
            )
            continue
        for t in targets:
            seen = [(path, cov, cov.coverage(t)) for path, cov in libraries]
            counts: dict[str, int] = {}
            for _path, _cov, c in seen:
                counts[c.value] = counts.get(c.value, 0) + 1
            failing = [(p, cov) for p, cov, c in seen if c in (Coverage.NONE, Coverage.PARTIAL)]
            jit_only = [p for p, _cov, c in seen if c is Coverage.PTX_JIT]
            verdict = CheckVerdict.FAIL if failing else CheckVerdict.WARN if jit_only else CheckVerdict.OK
            value = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            hint = ""
            if failing:
                failing.sort(key=lambda pc: (-pc[1].unit_counts(t)[2], pc[0]))
                shown = "; ".join(f"{p.rsplit('/', 1)[-1]} {coverage_text(cov, t)}" for p, cov in failing[:3])
                more = f"; and {len(failing) - 3} more" if len(failing) > 3 else ""
                hint = (
                    f"{len(failing)} of {len(libraries)} files have compiled units with no kernel image for {t.name}, "
                    f"whose kernels fail there: {shown}{more}. They need a build with {t.name} in its arch list; "
                    f"`liftgate scan --kind binary -t {t.name}{where}` lists every file"
                )
            elif jit_only:
                hint = "the driver JIT-compiles PTX at first start (slow once; arch-specific code paths are not taken)"
            out.append(Check("kernels", f"{name} for {t.name}", verdict, value, hint))
    return out or [Check("kernels", "packages", CheckVerdict.INFO, "no installed package ships CUDA kernels")]


def diagnose(target: Arch | None, env: str | None = None, environ: dict[str, str] | None = None,
             python: str | None = None, sections: Callable[[str], bool] = lambda s: True) -> list[Check]:  # fmt: skip
    environ = dict(os.environ if environ is None else environ)
    checks, local = gpu_checks(target)
    targets = [target] if target is not None else local
    checks += toolchain_checks(targets[0] if targets else None)
    interpreter = python or resolve_env(env).python
    checks += (
        torch_checks(interpreter)
        if interpreter
        else [Check("torch", "torch", CheckVerdict.INFO, "no interpreter found in the environment")]
    )
    checks += env_checks(environ)
    checks += cache_checks(environ)
    checks += kernel_checks(env, targets)
    return [c for c in checks if sections(c.section)]
