#!/usr/bin/env python3
"""Prove the feature catalog against the real assembler: feature x target, assembles or not.

Every feature in ``src/liftgate/data/features.json`` carries a probe (a few PTX statements). This
tool places each probe into the catalog's kernel template (`liftgate.judge.catalog.probe_ptx`)
for every known compile target, runs ``ptxas -arch=<target> probe.ptx -o /dev/null`` for all of
them in parallel, and prints the matrix. With ``--write`` it rewrites the ``archs`` field of every
feature from ptxas's answers (and the ``ptxas``/``ptx_version`` header), leaving everything else
as it is, so the catalog can be refreshed for a new CUDA release:

    python tools/probe_matrix.py              # show the matrix and what differs from the catalog
    python tools/probe_matrix.py --write      # make the catalog say what this ptxas says
    python tools/probe_matrix.py -f wgmma -f setmaxnreg --show-errors

Targets this ptxas cannot compile for at all (an empty kernel fails) are reported and left out:
``--write`` keeps the catalog's membership for them (what the documentation says). The PTX ISA
version of the probes is the newest this ptxas accepts, read from its own error message.
tests/test_catalog_ptxas.py imports this module to run the same check.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CATALOG_PATH = REPO / "src" / "liftgate" / "data" / "features.json"

if str(REPO / "src") not in sys.path:  # running from a checkout without the package installed
    sys.path.insert(0, str(REPO / "src"))

from liftgate.arch.core import universe  # noqa: E402
from liftgate.judge.catalog import Feature, parse_catalog, probe_module, probe_ptx  # noqa: E402

# A failure whose diagnostics do not mention a target is a broken probe, not a missing feature.
ARCH_ERROR = re.compile(r"\.target|sm_\d+|not supported on|requires .*sm_")
TIMEOUT_S = 60


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One ptxas run: did the module assemble for the target, and what did ptxas say."""

    feature: str
    target: str
    assembles: bool
    output: str

    @property
    def first_line(self) -> str:
        for line in self.output.splitlines():
            if line.strip():
                return line.strip()
        return ""

    @property
    def arch_related(self) -> bool:
        """Whether a failure is about the target (as opposed to a syntax error in the probe).

        ptxas writes ``ptxas <file>, line N; error   : <message>``; only the message counts (the
        probe's file name contains the target).
        """
        messages = (line.split("; ", 1)[-1] for line in self.output.splitlines())
        return self.assembles or any(ARCH_ERROR.search(message) for message in messages)


@dataclass(frozen=True, slots=True)
class Matrix:
    """The answers of one ptxas for every (feature, target) pair it was asked about."""

    ptxas_version: str
    ptx_version: str
    targets: tuple[str, ...]
    untestable: tuple[str, ...]
    results: dict[tuple[str, str], ProbeResult]

    def assembling(self, feature_id: str) -> set[str]:
        return {t for t in self.targets if self.results[(feature_id, t)].assembles}


def find_ptxas() -> str | None:
    """The ``ptxas`` to use: ``$PTXAS``, else the one on PATH, else the CUDA default location."""
    for candidate in (os.environ.get("PTXAS"), shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _run(ptxas: str, target: str, ptx_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ptxas, f"-arch={target}", str(ptx_file), "-o", os.devnull],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def ptxas_version(ptxas: str) -> str:
    """``13.0.88`` from ``Cuda compilation tools, release 13.0, V13.0.88``."""
    out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"\bV(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    if not match:
        raise RuntimeError(f"cannot read the release from `{ptxas} --version`: {out.strip()!r}")
    return match.group(1)


def newest_ptx_version(ptxas: str, workdir: Path) -> str:
    """The newest PTX ISA version ptxas accepts, from its answer to an impossible ``.version``."""
    probe = workdir / "version-probe.ptx"
    probe.write_text(probe_module("", "sm_90", "99.9"))
    result = _run(ptxas, "sm_90", probe)
    match = re.search(r"current version is '(\d+\.\d+)'", result.stdout + result.stderr)
    if not match:
        raise RuntimeError(
            f"ptxas did not name its newest PTX ISA version: {(result.stdout + result.stderr).strip()!r}"
        )
    return match.group(1)


def run_matrix(
    features: Sequence[Feature],
    targets: Sequence[str] | None = None,
    ptxas: str | None = None,
    jobs: int | None = None,
    keep_dir: Path | None = None,
) -> Matrix:
    """Assemble every feature's probe for every target; targets ptxas cannot build for are set apart."""
    ptxas = ptxas or find_ptxas()
    if ptxas is None:
        raise FileNotFoundError("ptxas not found: put the CUDA toolkit's bin directory on PATH or set $PTXAS")
    names = list(targets) if targets is not None else [arch.name for arch in universe()]
    jobs = jobs or max(4, 2 * (os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="liftgate-probes-") as tmp:
        workdir = keep_dir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        version = newest_ptx_version(ptxas, workdir)

        def assemble(label: str, text: str, target: str) -> ProbeResult:
            path = workdir / f"{label}.{target}.ptx"
            path.write_text(text)
            result = _run(ptxas, target, path)
            return ProbeResult(label, target, result.returncode == 0, (result.stdout + result.stderr).strip())

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            baseline = list(pool.map(lambda t: assemble("baseline", probe_module("", t, version), t), names))
            testable = tuple(r.target for r in baseline if r.assembles)
            untestable = tuple(r.target for r in baseline if not r.assembles)
            work = [(f, t) for f in features for t in testable]
            runs = pool.map(lambda ft: assemble(ft[0].id, probe_ptx(ft[0], ft[1], version), ft[1]), work)
            results = {(r.feature, r.target): r for r in runs}
    return Matrix(ptxas_version(ptxas), version, testable, untestable, results)


# --- presentation -----------------------------------------------------------------------------


def _short(target: str) -> str:
    return target.removeprefix("sm_")


def render_matrix(matrix: Matrix, features: Sequence[Feature], show_errors: bool = False) -> str:
    """A text table: one row per feature, one column per target (``+`` assembles, ``!`` with a
    diagnostic, ``.`` fails), plus where the catalog differs."""
    width = max(len(f.id) for f in features)
    head = " " * width + "  " + " ".join(f"{_short(t):>4}" for t in matrix.targets)
    lines = [
        f"ptxas {matrix.ptxas_version}, PTX ISA {matrix.ptx_version}; "
        f"not compilable by this ptxas (left out): {', '.join(matrix.untestable) or 'none'}",
        head,
    ]
    for item in features:
        cells = []
        for target in matrix.targets:
            result = matrix.results[(item.id, target)]
            cells.append(
                f"{'!' if result.assembles and result.output else '+' if result.assembles else '.':>4}"
            )
        lines.append(f"{item.id:<{width}}  " + " ".join(cells))
    lines.append("legend: + assembles, ! assembles with a diagnostic, . rejected")
    for item in features:
        have = {a.name for a in item.archs} & set(matrix.targets)
        got = matrix.assembling(item.id)
        if have != got:
            order = [arch.name for arch in universe()]
            extra, missing = sorted(got - have, key=order.index), sorted(have - got, key=order.index)
            lines.append(
                f"DIFFERS {item.id}: ptxas also assembles {extra or '-'}; catalog claims but ptxas rejects {missing or '-'}"
            )
        broken = [r for r in (matrix.results[(item.id, t)] for t in matrix.targets) if not r.arch_related]
        if broken:
            lines.append(f"BROKEN PROBE {item.id}: {broken[0].target}: {broken[0].first_line}")
        if show_errors:
            seen: dict[str, list[str]] = {}
            for target in matrix.targets:
                result = matrix.results[(item.id, target)]
                if result.output:
                    key = re.sub(r"'sm_\d+[af]?'", "'<target>'", result.first_line.split(";", 1)[-1].strip())
                    seen.setdefault(key, []).append(target)
            for message, where in seen.items():
                lines.append(f"  {item.id} [{', '.join(where)}]: {message}")
    return "\n".join(lines)


def rewrite_catalog(path: Path, matrix: Matrix) -> list[str]:
    """Set every feature's ``archs`` to what ptxas assembles; untestable targets keep their state.

    Returns the ids whose arch set changed. Everything else in the file is kept as it is.
    """
    raw = json.loads(path.read_text("utf-8"))
    order = [arch.name for arch in universe()]
    changed = []
    for entry in raw["features"]:
        kept = {name for name in entry["archs"] if name in matrix.untestable}
        new = [name for name in order if name in kept or name in matrix.assembling(entry["id"])]
        if new != entry["archs"]:
            changed.append(entry["id"])
        entry["archs"] = new
    raw["ptxas"] = matrix.ptxas_version
    raw["ptx_version"] = matrix.ptx_version
    parse_catalog(raw)  # never write a file the loader would refuse
    path.write_text(dump_catalog(raw), "utf-8")
    return changed


_STRING_ARRAY = re.compile(r'\[\n\s*("(?:[^"\\]|\\.)*"(?:,\n\s*"(?:[^"\\]|\\.)*")*)\n\s*\]')


def dump_catalog(raw: object) -> str:
    """The catalog as JSON, two-space indented, with short lists of strings (archs) on one line."""

    def inline(match: re.Match[str]) -> str:
        items = re.split(r",\n\s*", match.group(1))
        one_line = "[" + ", ".join(items) + "]"
        return one_line if len(one_line) <= 200 else match.group(0)

    return _STRING_ARRAY.sub(inline, json.dumps(raw, indent=2, ensure_ascii=False)) + "\n"


def _select(features: Iterable[Feature], wanted: Sequence[str]) -> list[Feature]:
    chosen = [f for f in features if not wanted or f.id in wanted]
    unknown = sorted(set(wanted) - {f.id for f in chosen})
    if unknown:
        raise SystemExit(f"probe_matrix: unknown feature id(s): {', '.join(unknown)}")
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--catalog", type=Path, default=CATALOG_PATH, help="features.json to check or rewrite"
    )
    parser.add_argument("--ptxas", help="the ptxas to run (default: $PTXAS, then PATH)")
    parser.add_argument("-f", "--feature", action="append", default=[], help="only this feature (repeatable)")
    parser.add_argument("-j", "--jobs", type=int, help="parallel ptxas runs")
    parser.add_argument("--show-errors", action="store_true", help="print ptxas's diagnostics per feature")
    parser.add_argument("--keep-dir", type=Path, help="write the probe .ptx files here and keep them")
    parser.add_argument(
        "--write", action="store_true", help="rewrite the archs of the catalog from ptxas's answers"
    )
    args = parser.parse_args(argv)

    _, features = parse_catalog(json.loads(args.catalog.read_text("utf-8")))
    chosen = _select(features, args.feature)
    if args.write and args.feature:
        parser.error("--write rewrites the whole catalog; leave out --feature")
    try:
        matrix = run_matrix(chosen, ptxas=args.ptxas, jobs=args.jobs, keep_dir=args.keep_dir)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"probe_matrix: {exc}", file=sys.stderr)
        return 2
    print(render_matrix(matrix, chosen, show_errors=args.show_errors))
    broken = [f.id for f in chosen if any(not matrix.results[(f.id, t)].arch_related for t in matrix.targets)]
    empty = [f.id for f in chosen if not matrix.assembling(f.id)]
    if args.write:
        if broken or empty:
            print(
                f"probe_matrix: not writing; probes that fail for a reason other than the target: {broken + empty}",
                file=sys.stderr,
            )
            return 1
        changed = rewrite_catalog(args.catalog, matrix)
        print(
            f"wrote {args.catalog}: {len(changed)} feature(s) changed{': ' + ', '.join(changed) if changed else ''}",
            file=sys.stderr,
        )
        return 0
    differs = [
        f.id for f in chosen if {a.name for a in f.archs} & set(matrix.targets) != matrix.assembling(f.id)
    ]
    return 1 if differs or broken or empty else 0


if __name__ == "__main__":
    raise SystemExit(main())
