"""Benchmark: what ``liftgate trace`` costs a Python program, per interpreter.

Usage: python bench/trace_bench.py [--python PATH ...] [--repeat K]

The workload (written to a temporary directory) is Python-heavy on purpose: it imports a few dozen
standard modules, makes about a million Python calls that hold no gate (a recursive Fibonacci), and
evaluates a probed gate 200,000 times (a dispatch on a cached capability, as FlashInfer's
selective-state-update is). Each interpreter runs it three ways: untraced; traced with capability
queries only (``--no-probes``); traced with probes. Probes use ``sys.monitoring`` on Python 3.12+
(a function without a gate costs one event, ever) and ``sys.settrace`` before (a Python call on
every function call), which is the difference this measures. Times are medians of ``--repeat``
runs, wall clock, liftgate's own start-up and the (cached) static scan for the probes included.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = """
import functools, json, email.parser, http.client, xml.dom.minidom, asyncio, decimal, argparse
import torch
from benchpkg.dispatch import dispatch

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

fib(28)
print(sum(dispatch(i) for i in range(200000)))
"""
DISPATCH = """
import functools

import torch


@functools.lru_cache(maxsize=None)
def capability():
    return torch.cuda.get_device_capability()


def dispatch(i):
    major, _ = capability()
    if major >= 10:
        return 2
    return 1
"""
TORCH = "def get_device_capability(device=None):\n    return (9, 0)\n"


def run(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--python", action="append", help="interpreters to trace (default: this one and pyenv's 3.12+)"
    )
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    pythons = args.python or [
        sys.executable,
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))[:1],
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "src" / "benchpkg").mkdir(parents=True)
        (root / "src" / "benchpkg" / "__init__.py").write_text("")
        (root / "src" / "benchpkg" / "dispatch.py").write_text(DISPATCH)
        (root / "fake" / "torch").mkdir(parents=True)
        (root / "fake" / "torch" / "__init__.py").write_text("from torch import cuda as cuda\n")
        (root / "fake" / "torch" / "cuda.py").write_text(TORCH)
        (root / "workload.py").write_text(WORKLOAD)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "fake"), str(root / "src")]))
        liftgate = [sys.executable, "-m", "liftgate", "trace", "-q", "-o", str(root / "t.json")]
        print(f"{'python':<8} {'untraced':>9} {'queries':>9} {'probes':>9}   probes/untraced")
        for python in pythons:
            version = subprocess.run(
                [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            ways = {
                "untraced": [python, "workload.py"],
                "queries": [*liftgate, "--no-probes", "--", python, "workload.py"],
                "probes": [*liftgate, "--source", str(root / "src"), "--", python, "workload.py"],
            }
            run(ways["probes"], env, tmp)  # fills liftgate's scan cache for the probes' static scan
            times = {
                name: statistics.median(run(cmd, env, tmp) for _ in range(args.repeat))
                for name, cmd in ways.items()
            }
            print(
                f"{version:<8} {times['untraced']:>8.2f}s {times['queries']:>8.2f}s {times['probes']:>8.2f}s   "
                f"x{times['probes'] / times['untraced']:.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
