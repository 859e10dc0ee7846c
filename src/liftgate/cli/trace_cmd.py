"""``liftgate trace [--as ARCH] -o trace.json -- COMMAND…``: run a Python command with the tracer.

Records every capability query the command's Python processes make (torch.cuda, vLLM's
platform, NVML, CuPy, Triton), with its call stack and answer, and which known Python gates ran
and which way they went (probes from a static scan of ``--env``). ``--as ARCH`` answers the
queries as another architecture; everything answered so is marked. ``liftgate scan --trace
FILE`` maps the trace onto the gates (`liftgate.trace.match`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from liftgate.cli.common import ExitCode, add_cache_dir_option, add_env_option, error


def configure_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "trace",
        help="run a Python command and record its capability queries and the gates it evaluates",
        description=(
            "Run COMMAND (after --) with liftgate's tracer injected through sitecustomize on PYTHONPATH "
            "(no file of yours changes; child processes are traced too). Every capability query "
            "(torch.cuda.get_device_capability/properties/name/arch list, vLLM's platform, NVML, CuPy, "
            "Triton's target) is recorded with its call stack and answer, and every Python gate the "
            "static scan of --env knows is probed: how often its condition ran and which way it went. "
            "--as ARCH answers the queries as another GPU (no GPU needed); the answers are marked. "
            "Read the trace with `liftgate scan --trace FILE`."
        ),
        epilog=(
            "Exit codes: 0 the command succeeded, 1 it failed (the trace is written all the same), "
            "2 liftgate could not trace it."
        ),
    )
    p.add_argument(
        "--as",
        dest="as_arch",
        metavar="ARCH",
        help="answer capability queries as this architecture (sm_120, 12.0, rtx5090, …)",
    )
    p.add_argument(
        "--as-name",
        metavar="NAME",
        help="the device name answered under --as (default: a product of that capability, e.g. "
        "'NVIDIA GeForce RTX 5090')",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", default="liftgate-trace.json", help="the trace file to write"
    )
    add_env_option(
        p, help="the environment the command's Python uses, whose gates are probed (default: this one)"
    )
    p.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="SOURCE",
        help=(
            "probe the gates of SOURCE (a source tree or wheel the command imports, as for scan) instead "
            "of the environment's; repeatable"
        ),
    )
    p.add_argument(
        "--no-probes",
        action="store_true",
        help="record capability queries only (no static scan, no sys.settrace line tracing)",
    )
    p.add_argument(
        "--probe-limit",
        type=int,
        default=10_000,
        metavar="N",
        help=(
            "stop probing a gate once its condition ran N times in a process (its counts are then lower bounds: "
            "a dispatch in a serving loop runs millions of times); default 10000"
        ),
    )
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="interrupt the command after this long")
    add_cache_dir_option(p, help="liftgate's scan cache directory")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    p.set_defaults(run=run, command=[])  # main() hands over what follows "--"
    # The command comes after "--" and is cut off before argparse sees it: say so in the usage line.
    options = p.format_usage().strip().removeprefix("usage:").strip()
    p.usage = f"{options} -- COMMAND [ARGS…]".replace("%", "%%")


def run(args: argparse.Namespace) -> int:
    from liftgate.arch.parse import UnknownArchError
    from liftgate.trace.session import probes_for, resolve_as, run_traced

    command = list(args.command or [])
    if not command:
        return error("no command to trace: liftgate trace [OPTIONS] -- COMMAND [ARGS…]")
    as_arch = limits = None
    if args.as_arch:
        try:
            as_arch, limits = resolve_as(args.as_arch, args.as_name)
        except UnknownArchError as exc:
            return error(str(exc))
    elif args.as_name:
        return error("--as-name needs --as ARCH")
    if args.probe_limit < 1:
        return error("--probe-limit must be at least 1")
    probes: list[dict[str, Any]] = []
    environment = (
        ", ".join(args.source) if args.source else (os.path.abspath(args.env) if args.env else sys.prefix)
    )
    if not args.no_probes:
        from liftgate.cli.progress import make_observer
        from liftgate.scan import scan
        from liftgate.sources.interface import SourceError

        observer = make_observer(quiet=args.quiet or not sys.stderr.isatty())
        try:
            report = scan(args.source, [], env=args.env, only_python=True,
                          cache_dir=args.cache_dir, observer=observer)  # fmt: skip
        except SourceError as exc:
            return error(f"{exc} (or pass --no-probes to record capability queries only)")
        finally:
            observer.finish()
        assert report.workspace is not None
        probes = probes_for(report.gates, report.workspace.as_mapping())
    result = run_traced(
        command,
        as_arch=as_arch,
        as_limits=limits,
        probes=probes,
        environment=environment if probes else None,
        timeout=args.timeout,
        probe_limit=args.probe_limit,
        # the environment whose installed packages were probed: --env, else this one unless --source
        probed_prefix=os.path.abspath(args.env) if args.env else (None if args.source else sys.prefix),
    )
    if result.error is not None:
        return error(result.error)
    trace = result.trace
    try:
        with open(args.output, "w", encoding="utf-8") as fh:
            json.dump(trace.to_dict(), fh, indent=2, ensure_ascii=False)
            fh.write("\n")
    except OSError as exc:
        return error(f"cannot write {args.output}: {exc.strerror or exc}")
    if not args.quiet:
        sys.stderr.write(summary(trace, args.output) + "\n")
    return ExitCode.OK if result.exit_code == 0 else ExitCode.FAILED


def summary(trace: Any, output: str) -> str:
    """The lines ``liftgate trace`` prints to stderr."""
    sites = {(q.stack[0].path, q.stack[0].line) if q.stack else ("?", 0) for q in trace.queries}
    calls = sum(q.count for q in trace.queries)
    gates = {p.gate for p in trace.probes}
    head = (
        f"liftgate: traced {len(trace.processes)} Python process(es): {calls} capability "
        f"quer{'y' if calls == 1 else 'ies'} ({len(trace.queries)} distinct, from {len(sites)} place(s))"
    )
    if trace.probed_gates:
        head += f"; {len(gates)} of {trace.probed_gates} probed gates evaluated"
    lines = [head]
    if trace.as_arch is not None:
        a = trace.as_arch
        lines.append(
            f"liftgate: answered as {a.name} ({a.major}.{a.minor}, '{a.device_name}'): every such answer is "
            "marked (--as), and a run under --as is a what-if, not the real device"
        )
    status = trace.exit_code
    lines.append(
        f"liftgate: the command exited with {status}"
        + ("" if status == 0 else " (the trace is written all the same)")
    )
    lines.extend(f"liftgate: note: {n}" for n in trace.notes)
    lines.append(f"liftgate: wrote {output}; map it onto the gates with `liftgate scan --trace {output}`")
    return "\n".join(lines)
