"""Benchmark: liftgate's cold and warm scan against a regex pass with rg (or grep) on the same tree.

Usage: python bench/scan_bench.py [SPEC ...] [--target sm_120] [--jobs N] [--repeat K]

Default specs are flashinfer-python==0.7.2.post1 (~10k files, 427 MB unpacked) and sglang==0.5.23;
``--sdist`` scans source distributions instead (e.g. ``vllm==0.33.0 --sdist``: its csrc/ with the
host-side capability dispatch).
Downloads and unpacked trees are cached (liftgate's user cache), so only the first run pays for
the network. "cold" = liftgate with its scan cache disabled (every file read, indexed and parsed);
"warm" = a second scan with the cache filled. The regex pass lists the files that have a
preprocessor conditional on __CUDA_ARCH or a Python/CMake capability test (what a person would
grep for); it finds candidate lines, liftgate evaluates them for every target, follows includes,
derived macros and Python values across modules. "judge" = a warm scan that also judges every gate
excluding the target (what ``liftgate scan`` does by default): its extra time is the judge's cost.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

from liftgate.judge.verdict import judge_scan
from liftgate.scan import scan
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


def _root_of(spec: str, sdist: bool) -> tuple[str, int]:
    packages, _ = resolve_sources([spec], sdist=sdist)
    paths = [f.fspath for p in packages for f in p.files]
    root = os.path.commonpath(paths)
    return (root if os.path.isdir(root) else os.path.dirname(root)), len(paths)


def _regex_pass(root: str) -> tuple[str, float, int]:
    if shutil.which("rg"):
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
            root,
        ]
        tool = "rg"
    else:
        cmd = ["grep", "-rlE", "-e", GATE_REGEX, "-e", PY_GATE_REGEX, "-e", CPP_GATE_REGEX, root]
        tool = "grep -rlE"
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    return tool, elapsed, len(proc.stdout.splitlines())


def _timed_scan(
    spec: str,
    target: str,
    jobs: int | None,
    use_cache: bool,
    cache_dir: str | None,
    sdist: bool,
    judge: bool = False,
) -> tuple[float, int]:
    started = time.perf_counter()
    report = scan([spec], [target], jobs=jobs, use_cache=use_cache, cache_dir=cache_dir, sdist=sdist)
    if judge:
        report = judge_scan(report)
    return time.perf_counter() - started, len(report.verdicts) if judge else len(report.gates)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("specs", nargs="*", default=DEFAULT_SPECS)
    parser.add_argument("--target", default="sm_120")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timing; the median is reported")
    parser.add_argument("--sdist", action="store_true", help="scan the source distributions of the specs")
    args = parser.parse_args()

    rows = []
    for spec in args.specs:
        root, nfiles = _root_of(spec, args.sdist)  # downloads/unpacks once, outside the timings
        regex_times = []
        tool, matched = "", 0
        for _ in range(args.repeat):
            tool, elapsed, matched = _regex_pass(root)
            regex_times.append(elapsed)
        cold_times, warm_times = [], []
        gates = 0
        for _ in range(args.repeat):
            elapsed, gates = _timed_scan(spec, args.target, args.jobs, False, None, args.sdist)
            cold_times.append(elapsed)
        _timed_scan(spec, args.target, args.jobs, True, None, args.sdist)  # fill the scan cache
        for _ in range(args.repeat):
            elapsed, _ = _timed_scan(spec, args.target, args.jobs, True, None, args.sdist)
            warm_times.append(elapsed)
        judge_times = []
        verdicts = 0
        for _ in range(args.repeat):
            elapsed, verdicts = _timed_scan(spec, args.target, args.jobs, True, None, args.sdist, judge=True)
            judge_times.append(elapsed)
        rg, cold, warm, judged = (
            statistics.median(t) for t in (regex_times, cold_times, warm_times, judge_times)
        )
        rows.append((spec, nfiles, tool, rg, matched, cold, warm, gates, judged, verdicts))

    print(
        f"{'source':34} {'files':>6} {'regex':>14} {'cold':>8} {'warm':>7} {'cold/regex':>10} {'warm/regex':>10}"
        f" {'judge':>8} gates"
    )
    for spec, nfiles, tool, rg, matched, cold, warm, gates, judged, verdicts in rows:
        print(
            f"{spec:34} {nfiles:6d} {tool:>6} {rg:6.2f} s {cold:6.2f} s {warm:5.2f} s "
            f"{cold / rg:9.1f}x {warm / rg:9.1f}x {judged:6.2f} s {gates} ({matched} files matched the regex; "
            f"{verdicts} verdicts for {args.target})"
        )
    print(f"cpus: {os.cpu_count()}, jobs: {args.jobs or 'default'}, python {sys.version.split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
