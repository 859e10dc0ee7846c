"""Benchmark: what a user waits for — ``liftgate scan`` as they run it — against a regex pass with
rg (or grep) on the same trees, with the CPU time of all its processes and the peak memory of the
largest.

Usage:
    python bench/scan_bench.py [SPEC ...] [--target sm_120] [--jobs N] [--repeat K] [--warm-repeat K] [--sdist]
    python bench/scan_bench.py [SPEC ...] --scaling 1,2,4,8,16      # cold judged scan per job count

Default specs are flashinfer-python==0.7.2.post1 (~10k files, 427 MB unpacked) and sglang==0.5.23,
scanned together (one command, as a user scans an environment). Each timing runs the command line
in a fresh process:

* ``judged cold``: ``liftgate scan SPECS -t TARGET --no-cache`` (the default scan: detection and
  the judge; every file read, indexed and parsed, every gate judged);
* ``no-judge cold``: the same with ``--no-judge`` (the inventory only);
* ``judged warm``: ``liftgate scan SPECS -t TARGET`` a second time, the scan cache filled by a
  first run (detections and verdicts are cached; nothing changed, so nothing is re-read or judged);
* ``regex``: ``rg -l`` (or ``grep -rlE``) of what a person would grep for, over the unpacked trees:
  it lists candidate files; liftgate evaluates every gate for every target, follows includes,
  derived macros and Python values across modules, and judges the gated code.

Downloads and unpacked trees are cached (liftgate's user cache) and fetched before any timing.
The peak memory is the largest resident set of any process of the run (the main process, a pool
worker, the Python detector's process: ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` of a fresh
parent), not their sum. The CPU time is every process's, user and system (``RUSAGE_CHILDREN``
again): the work a run does, which fewer cores cannot do in less wall time than its share, and,
in system time, what the kernel spends giving the processes memory. Medians of ``--repeat`` runs.
``--scaling`` times the cold judged scan at each job count (``-j N``) and prints each speed-up over
the first.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

import liftgate
from liftgate.sources import resolve_sources

DEFAULT_SPECS = ["flashinfer-python==0.7.2.post1", "sglang==0.5.23"]
GATE_REGEX = r"#\s*(if|ifdef|ifndef|elif).*__CUDA_ARCH"
# What a person would grep for in Python and build files: capability queries, arch-named helpers,
# JIT arch filters and arch lists.
PY_GATE_REGEX = (
    r"get_device_capability|has_device_capability|is_device_capability|compute_capability"
    r"|is_sm[0-9]|supported_major_versions|gencode|CUDA_ARCHITECTURES|TORCH_CUDA_ARCH_LIST"
)
# ... and in C++ host code: the runtime's capability queries and the usual helpers around them.
CPP_GATE_REGEX = r"ComputeCapabilityMajor|COMPUTE_CAPABILITY_MAJOR|cudaGetDeviceProperties|getCurrentDeviceProperties|getSMVersion|get_sm_version"

# Runs a command line and prints its wall time, the largest resident set of its processes (KiB) and
# the CPU seconds of all of them, user and system.
_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "wall = time.perf_counter() - t\n"
    "use = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(rc, wall, use.ru_maxrss, use.ru_utime, use.ru_stime)\n"
)


def _roots(specs: list[str], sdist: bool) -> tuple[list[str], int]:
    """The unpacked trees of ``specs`` (fetched and unpacked now, outside the timings) and their file count."""
    packages, _ = resolve_sources(specs, sdist=sdist)
    roots: list[str] = []
    count = 0
    for p in packages:
        paths = [f.fspath for f in p.files]
        count += len(paths)
        root = os.path.commonpath(paths)
        roots.append(root if os.path.isdir(root) else os.path.dirname(root))
    return roots, count


def _regex_pass(roots: list[str]) -> tuple[str, float, int]:
    if shutil.which("rg"):
        tool = "rg"
        cmd = [
            "rg",
            "-l",
            "--no-ignore",
            "--hidden",
            "-e",
            GATE_REGEX,
            "-e",
            PY_GATE_REGEX,
            "-e",
            CPP_GATE_REGEX,
        ]
    else:
        tool = "grep -rlE"
        cmd = ["grep", "-rlE", "-e", GATE_REGEX, "-e", PY_GATE_REGEX, "-e", CPP_GATE_REGEX]
    started = time.perf_counter()
    proc = subprocess.run([*cmd, *roots], capture_output=True, text=True)
    return tool, time.perf_counter() - started, len(proc.stdout.splitlines())


class Run(NamedTuple):
    wall: float  # seconds
    rss: float  # MB, the largest process
    user: float  # CPU seconds of every process of the run
    system: float


def _measure(args: list[str]) -> Run:
    """Wall seconds, the peak RSS (MB) of the largest process and the CPU seconds (user, system) of
    every process of ``liftgate ARGS``."""
    cmd = [sys.executable, "-c", _MEASURE, sys.executable, "-m", "liftgate", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()
    rc = int(out[0])
    if rc not in (0, 1):  # 1: the scan found losses (--fail-on); anything else is a failed run
        raise SystemExit(f"liftgate {' '.join(args)} exited {rc}")
    return Run(float(out[1]), int(out[2]) / 1024, float(out[3]), float(out[4]))


def _median(runs: list[Run]) -> Run:
    """The median of each time (the runs' own medians, not one run's) and the largest peak RSS."""
    return Run(
        statistics.median(r.wall for r in runs),
        max(r.rss for r in runs),
        statistics.median(r.user for r in runs),
        statistics.median(r.system for r in runs),
    )


def _cpu(run: Run) -> str:
    return f"{run.user:.0f} + {run.system:.0f} s"


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("specs", nargs="*", default=DEFAULT_SPECS)
    parser.add_argument("--target", default="sm_120")
    parser.add_argument("--jobs", type=int, default=None, help="-j for every run (default: liftgate's)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timing; the median is reported")
    parser.add_argument(
        "--warm-repeat", type=int, default=None, help="runs of the warm timing (default: --repeat)"
    )
    parser.add_argument("--sdist", action="store_true", help="scan the source distributions of the specs")
    parser.add_argument(
        "--scaling", metavar="N,N,…", help="only the cold judged scan, at each of these job counts"
    )
    parser.add_argument(
        "--json-dir", metavar="DIR", help="with --scaling: keep each run's JSON report as DIR/jN.json"
    )
    args = parser.parse_args()

    roots, nfiles = _roots(args.specs, args.sdist)  # downloads and unpacks once, outside the timings
    # As `pip install` leaves it: liftgate's modules compiled to bytecode (an editable install under
    # PYTHONDONTWRITEBYTECODE would otherwise compile every module on every run, about 0.3 s).
    compileall.compile_dir(os.path.dirname(liftgate.__file__), quiet=1)
    base = ["scan", *args.specs, "--target", args.target, *(["--sdist"] if args.sdist else [])]
    print(f"# {' + '.join(args.specs)} ({nfiles} files), target {args.target}")
    print(f"# {time.strftime('%Y-%m-%d')}, {_machine()}")
    if args.scaling:
        jobs_list = [int(j) for j in args.scaling.split(",")]
        first = None
        print("| jobs | judged cold | speed-up | CPU user + system | peak RSS |\n|---:|---:|---:|---:|---:|")
        for jobs in jobs_list:
            report = (
                ["--format", "json", "-o", os.path.join(args.json_dir, f"j{jobs}.json")]
                if args.json_dir
                else []
            )
            run = _median(
                [_measure([*base, "--no-cache", "-j", str(jobs), *report]) for _ in range(args.repeat)]
            )
            first = first or run.wall
            print(
                f"| {jobs} | {run.wall:.1f} s | {first / run.wall:.2f}× | {_cpu(run)} | {run.rss:.0f} MB |",
                flush=True,
            )
        return 0

    jobs = ["-j", str(args.jobs)] if args.jobs else []
    tool, regex, matched = "", 0.0, 0
    regex_times = []
    for _ in range(args.repeat):
        tool, elapsed, matched = _regex_pass(roots)
        regex_times.append(elapsed)
    regex = statistics.median(regex_times)
    cold = _median([_measure([*base, "--no-cache", *jobs]) for _ in range(args.repeat)])
    inventory = _median([_measure([*base, "--no-cache", "--no-judge", *jobs]) for _ in range(args.repeat)])
    _measure([*base, *jobs])  # fills the scan cache (detections and verdicts)
    warm = _median([_measure([*base, *jobs]) for _ in range(args.warm_repeat or args.repeat)])
    print("| what | wall | CPU user + system | peak RSS |\n|---|---:|---:|---:|")
    print(f"| `{tool}` over the unpacked trees ({matched} files matched) | {regex:.2f} s | | |")
    for label, run in (
        ("`liftgate scan` judged, cold (`--no-cache`)", cold),
        ("`liftgate scan --no-judge`, cold", inventory),
        ("`liftgate scan` judged, warm", warm),
    ):
        print(f"| {label} | {run.wall:.1f} s | {_cpu(run)} | {run.rss:.0f} MB |")
    print(
        f"# jobs: {args.jobs or 'default'}; medians of {args.repeat} (warm: {args.warm_repeat or args.repeat}); "
        "CPU: every process of the run; peak RSS: the largest process"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
