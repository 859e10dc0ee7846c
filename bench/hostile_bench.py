"""Time a scan of the safety review's hostile tree: one directory holding 100 levels of macro
doubling, 5,000 nested ``#if``s, a 300-deep parenthesised condition and a file whose name is not
UTF-8, next to well-formed files. Each hostile file must be skipped with its reason and every
other file's gates reported; this script says so, and how long the scan took (median of
``--runs``, a fresh process and no cache each time) and its peak memory.

    python bench/hostile_bench.py [--runs 3] [--keep DIR]

The tree is written by `write_hostile_tree`, which tests/test_bounds.py uses too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOOD_CUH = "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\nint hopper;\n#endif\n"
GOOD_PY = "import torch\n\ndef f():\n    if torch.cuda.get_device_capability()[0] >= 9:\n        return 1\n"
# Each hostile file, and the words its skip reason must hold.
HOSTILE_REASONS = {
    "doubling.cuh": "macro expansion",
    "nested.cuh": "#if nesting deeper than",
    "parens.cuh": "nested deeper than",
}
NON_UTF8_NAME = b"caf\xe9.cu"  # scanned, its gate reported under an escaped name
NON_UTF8_SHOWN = "caf\\xe9.cu"


def write_hostile_tree(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    levels = 100
    doubling = ["#define A0 1", *(f"#define A{i} (A{i - 1}+A{i - 1})" for i in range(1, levels + 1))]
    files = {
        "good.cuh": GOOD_CUH,
        "good.py": GOOD_PY,
        "doubling.cuh": "\n".join(doubling)
        + f"\n#if A{levels} > 0 && __CUDA_ARCH__ >= 900\nint a;\n#endif\n",
        "nested.cuh": "#if __CUDA_ARCH__ >= 700\n" * 5000 + "int a;\n" + "#endif\n" * 5000,
        "parens.cuh": "#if " + "(" * 300 + "__CUDA_ARCH__ >= 900" + ")" * 300 + "\nint a;\n#endif\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    with open(os.path.join(os.fsencode(root), NON_UTF8_NAME), "wb") as fh:
        fh.write(GOOD_CUH.replace("900", "1000").encode())


def check_report(doc: dict[str, object]) -> list[str]:
    """What is wrong with the report of the hostile tree ([] when each file fared as it should)."""
    problems = []
    gates = doc["gates"]
    skips = doc["skips"]
    assert isinstance(gates, list) and isinstance(skips, list)
    paths = {g["path"] for g in gates}
    for good in ("good.cuh", "good.py", NON_UTF8_SHOWN):
        if good not in paths:
            problems.append(f"no gate reported in {good}")
    for name, words in HOSTILE_REASONS.items():
        reasons = [s["reason"] for s in skips if str(s["path"]).split(":")[0] == name]
        if not any(words in r for r in reasons):
            problems.append(f"{name}: no skip saying {words!r} (skips: {reasons})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="write the tree here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.keep or os.path.join(scratch, "hostile"))
        write_hostile_tree(root)
        out = os.path.join(scratch, "report.json")
        command = [sys.executable, "-m", "liftgate", "scan", str(root), "-t", "sm_120", "--no-cache",
                   "--show", "all", "-f", "json", "-o", out]  # fmt: skip
        walls = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            walls.append(time.perf_counter() - started)
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        with open(out, encoding="utf-8") as fh:
            problems = check_report(json.load(fh))
    print(
        f"{time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}: hostile tree scanned in {statistics.median(walls):.2f} s "
        f"(median of {args.runs}; runs {', '.join(f'{w:.2f}' for w in walls)}), peak RSS {peak_mib:.0f} MiB"
    )
    for problem in problems:
        print(f"  PROBLEM: {problem}")
    if not problems:
        print("  every hostile file skipped with its reason; every other file's gates reported")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
