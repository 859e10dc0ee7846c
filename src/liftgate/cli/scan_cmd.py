"""``liftgate scan``: inventory the gates in sources and evaluate them for target architectures."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import time
from typing import Any

from liftgate.cli.common import (
    ExitCode,
    TargetError,
    add_cache_dir_option,
    add_env_option,
    add_format_option,
    add_offline_option,
    add_sdist_option,
    add_target_option,
    choices,
    error,
    targets_or_local,
)
from liftgate.detect.binary import needs_jit
from liftgate.model import GateKind
from liftgate.report.interface import GroupBy, OutputFormat, Show, VerdictFilter
from liftgate.report.losses import loss_gates

# --fail-on: a verdict on an admission (unsafe), an outcome (loss), a status (excluded, unknown,
# any: either), a verdict (blocked, liftable, hazard), or a binary's kernels that need the PTX JIT (jit).
FAIL_ON = ("unsafe", "loss", "excluded", "unknown", "any", "blocked", "liftable", "hazard", "jit")
VERDICT_FAILS = ("unsafe", "blocked", "liftable", "hazard")
LONG_TABLE = 40  # rows: a longer table gets the summary line before it as well as after it
FAIL_ON_SHOWN = 5  # gates the --fail-on line names


def configure_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "scan",
        help="find architecture gates and evaluate them for a target",
        description=(
            "Find architecture gates in SOURCEs and evaluate them for each --target. A SOURCE is a "
            "directory, a wheel, an sdist, NAME==VERSION or NAME (fetched from the package index into "
            "the cache, never installed), or env:PATH. Without a SOURCE, the current environment (or "
            "--env) is scanned."
        ),
        epilog="Exit codes: 0 nothing matching --fail-on, 1 gates matching --fail-on, 2 usage or environment error.",
    )
    p.add_argument("sources", nargs="*", metavar="SOURCE")
    add_target_option(p)
    add_env_option(p, help="scan another environment (a virtualenv or prefix)")
    add_format_option(p, OutputFormat, help="output format (default: table)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument(
        "--show",
        choices=choices(Show),
        default=Show.LOSSES.value,
        help=(
            "which gates to list (default: losses, the code paths a target loses, grouped by feature; "
            "excluded: every gate that leaves a target out, alternatives included; "
            "traced: those a --trace run evaluated)"
        ),
    )
    p.add_argument(
        "--by",
        choices=choices(GroupBy),
        default=GroupBy.FILE.value,
        help=(
            "group gates by file (default), or by chain: for each feature, every gate that must be lifted "
            "together (Python gate → the JIT build filter it reaches → the CUDA gates in its sources), with "
            "the combined verdict of the weakest link"
        ),
    )
    p.add_argument(
        "--trace",
        metavar="FILE",
        help=(
            "a trace from `liftgate trace`: mark the gates the traced run evaluated (and how), and list "
            "the capability queries it made where this scan found no gate"
        ),
    )
    p.add_argument(
        "--kind",
        action="append",
        choices=choices(GateKind),
        help="only gates of this kind (repeatable)",
    )
    p.add_argument(
        "--verdict",
        action="append",
        choices=choices(VerdictFilter),
        help=(
            "only gates judged liftable, blocked or unknown for a target, unsafe (admitting one into code "
            "that uses what it lacks), or carrying a hazard for one (repeatable; implies judging)"
        ),
    )
    p.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="GLOB",
        help=(
            "only gates in files whose package-relative path matches GLOB (fnmatch: * also matches /; "
            "repeatable); the summary counts only these"
        ),
    )
    p.add_argument(
        "--exclude-path",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave out gates in files matching GLOB, e.g. '*/examples/*' (repeatable); not counted either",
    )
    p.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        help=(
            "exit 1 if a listed gate admits a target into code that uses what it lacks (unsafe), "
            "is a loss for a target (loss: a fallback, shut-out or switch where "
            "another target gets the path), excludes a target (excluded), is unknown for one (unknown), "
            "either (any), is judged blocked, liftable, or carries a hazard for one (blocked, liftable, hazard), "
            "or is a binary with kernels a target runs only through the driver's PTX JIT (jit). A binary some of "
            "whose compiled units have no image for a target (partial) excludes it"
        ),
    )
    p.add_argument(
        "--judge",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=(
            "judge every gate that excludes a target: could its code run there (liftable, blocked, "
            "unknown) and hazards (default: on; --no-judge for the inventory only)"
        ),
    )
    p.add_argument(
        "--cuda-version", metavar="X.Y", help="toolkit version assumed for CUDART_VERSION-style conditions"
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        metavar="N",
        help="processes working at once (default: the CPU count, at most 8)",
    )
    p.add_argument("--no-cache", action="store_true", help="ignore and do not update the scan cache")
    add_cache_dir_option(p)
    add_offline_option(p)
    add_sdist_option(
        p,
        help=(
            "fetch source distributions for NAME==VERSION specs: the C/C++/CUDA sources that wheels "
            "leave out; downloaded from the index without building"
        ),
    )
    p.add_argument(
        "--max-file-size", type=int, metavar="MB", default=16, help="skip source files larger than this"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or summary on stderr")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="evidence, dependencies and skipped files in the table"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from liftgate.cli.progress import make_observer
    from liftgate.model import Status, Target
    from liftgate.report import RenderOptions, render, select_gates, summary_line
    from liftgate.report.interface import printable
    from liftgate.scan import parse_cuda_version, scan
    from liftgate.sources.interface import SourceError

    try:
        targets: list[Target] = targets_or_local(args.target)
    except TargetError as exc:
        return error(str(exc))
    cuda_version = None
    if args.cuda_version:
        try:
            cuda_version = parse_cuda_version(args.cuda_version)
        except ValueError as exc:
            return error(str(exc))
    if args.jobs is not None and args.jobs < 1:
        return error("--jobs must be at least 1")
    trace = None
    if args.trace:
        from liftgate.trace.document import TraceError, load_trace

        try:
            trace = load_trace(args.trace)
        except TraceError as exc:
            return error(str(exc))
    elif args.show == "traced":
        return error("--show traced needs --trace FILE (write one with `liftgate trace -o FILE -- COMMAND`)")
    observer = make_observer(args.quiet)
    started = time.perf_counter()
    judge = args.judge or bool(args.verdict) or args.fail_on in VERDICT_FAILS
    try:
        report = scan(
            args.sources,
            targets,
            env=args.env,
            cuda_version=cuda_version,
            jobs=args.jobs,
            use_cache=not args.no_cache,
            cache_dir=args.cache_dir,
            max_file_size=args.max_file_size * 1024 * 1024,
            offline=args.offline,
            observer=observer,
            sdist=args.sdist,
            judge_ahead=judge,
        )
        if judge and report.targets:
            from liftgate.judge.verdict import judge_scan

            report = judge_scan(report, observer=observer, jobs=args.jobs)
        if args.by == "chain" and report.targets:
            from liftgate.chain import find_chains

            report = find_chains(report, judge=judge, observer=observer)
        if trace is not None:
            from liftgate.trace.match import map_trace

            report = map_trace(report, trace)
    except SourceError as exc:
        return error(str(exc))
    finally:
        observer.finish()
    # The time the user waited for: the judge (a quarter of a cold scan) and the chains included,
    # not only the detection that `scan` times.
    report = dataclasses.replace(report, elapsed_s=time.perf_counter() - started)
    fmt = OutputFormat(args.format)
    to_terminal = args.output is None and sys.stdout.isatty()
    options = RenderOptions(
        show=Show(args.show),
        kinds=frozenset(GateKind(k) for k in args.kind) if args.kind else None,
        color=to_terminal and "NO_COLOR" not in os.environ,
        width=max(80, shutil.get_terminal_size((120, 24)).columns) if to_terminal else None,
        verbose=args.verbose,
        by=GroupBy(args.by),
        verdicts=frozenset(VerdictFilter(v) for v in args.verdict) if args.verdict else None,
        paths=tuple(args.path),
        exclude_paths=tuple(args.exclude_path),
    )
    text = render(report, fmt, options)
    summary = summary_line(report, options)
    listed = select_gates(report, options)
    if not args.quiet and args.output is None and fmt is OutputFormat.TABLE and len(listed) > LONG_TABLE:
        # A long table scrolls the summary's first half away: say it before the table as well.
        sys.stderr.write(summary + "\n")
        sys.stderr.flush()
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            return error(f"cannot write {args.output}: {exc.strerror or exc}")
    else:
        sys.stdout.write(text)
        if text and not text.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
    if fmt is OutputFormat.MARKDOWN and not args.quiet:
        from liftgate.report.markdown import GITHUB_COMMENT_LIMIT, too_long_note

        if len(text) > GITHUB_COMMENT_LIMIT:
            observer.note(too_long_note(len(text)))
    if not args.quiet:
        sys.stderr.write(summary + "\n")
    if not args.fail_on:
        return ExitCode.OK
    if args.fail_on not in ("loss", "unsafe", "jit") and options.show is Show.LOSSES:
        # A status or verdict is matched over every gate of the scope, as before the losses view:
        # an exclusion that is an alternative still excludes.
        listed = select_gates(report, dataclasses.replace(options, show=Show.EXCLUDED))
    if args.fail_on in VERDICT_FAILS:
        hit = {
            v.gate_id
            for v in report.verdicts
            if (v.hazards if args.fail_on == "hazard" else v.kind.value == args.fail_on)
        }
        matched = [g for g in listed if g.id in hit]
    elif args.fail_on == "jit":
        # Over every gate in scope: a binary that runs everywhere can still need the JIT.
        scope = select_gates(report, dataclasses.replace(options, show=Show.ALL))
        matched = [
            g
            for g in scope
            if g.coverage is not None and any(needs_jit(g.coverage, t.arch) for t in report.targets)
        ]
    elif args.fail_on == "loss":
        lost = {g.id for g in loss_gates(report, [t.arch for t in report.targets])}
        matched = [g for g in listed if g.id in lost]
    else:
        wanted = {
            "excluded": {Status.EXCLUDED},
            "unknown": {Status.UNKNOWN},
            "any": {Status.EXCLUDED, Status.UNKNOWN},
        }[args.fail_on]
        matched = [g for g in listed if any(g.status(t.arch) in wanted for t in report.targets)]
    if not matched:
        return ExitCode.OK
    # Exit 1 says that something matched; this line says what (even with -q: it is the reason).
    shown = ", ".join(f"{g.id} {g.location.path}:{g.location.line}" for g in matched[:FAIL_ON_SHOWN])
    more = ", …" if len(matched) > FAIL_ON_SHOWN else ""
    count = f"{len(matched):,} {'gate matches' if len(matched) == 1 else 'gates match'}"
    sys.stderr.write(printable(f"--fail-on {args.fail_on}: {count} (first: {shown}{more})") + "\n")
    return ExitCode.FINDINGS
