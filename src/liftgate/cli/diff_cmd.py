"""``liftgate diff SPEC_A SPEC_B --target ARCH``: gates opened, closed, added, removed or changed between two releases."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from liftgate.cli.common import (
    ExitCode,
    TargetError,
    add_cache_dir_option,
    add_format_option,
    add_offline_option,
    add_sdist_option,
    add_target_option,
    choices,
    error,
    parse_targets,
)
from liftgate.diff import ChangeKind
from liftgate.model import GateKind
from liftgate.report.interface import OutputFormat


def configure_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "diff",
        help="gates opened, closed, added, removed or changed between two releases or environments",
        description=(
            "Scan SPEC_A and SPEC_B (NAME==VERSION, a wheel, an sdist, a directory, env:PATH) and match their "
            "gates by identity (then by the JIT module or CMake target they build, then, for gates whose "
            "condition changed, by file, line and order): for each --target, which gates the newer one opened "
            "(the path became available to it) or closed, added or removed, or changed."
        ),
        epilog="Exit codes: 0 compared, 1 a gate closed for a target (with --fail-on closed), 2 usage or source error.",
    )
    p.add_argument(
        "spec_a",
        metavar="SPEC_A",
        help="the baseline: a release, wheel, sdist, directory or env:PATH, as for scan",
    )
    p.add_argument(
        "spec_b", metavar="SPEC_B", help="what to compare with the baseline (usually a newer release)"
    )
    add_target_option(
        p, required=True, help="target architecture, repeatable or comma-separated (sm_120, rtx5090, 12.0, …)"
    )
    p.add_argument(
        "--kind",
        action="append",
        choices=choices(GateKind),
        help="only gates of this kind (repeatable)",
    )
    p.add_argument("--all", action="store_true", help="also list unchanged gates")
    p.add_argument(
        "--fail-on", choices=[ChangeKind.CLOSED.value], help="exit 1 if a gate closed for a target"
    )
    add_format_option(p, OutputFormat, leave_out=(OutputFormat.SARIF,), help="output format (default: table)")
    add_sdist_option(p)
    add_offline_option(p)
    add_cache_dir_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from liftgate.diff import diff
    from liftgate.scan import scan
    from liftgate.sources.interface import SourceError

    try:
        targets = [t.arch for t in parse_targets(args.target)]
    except TargetError as exc:
        return error(str(exc))
    try:
        kw = dict(cache_dir=args.cache_dir, offline=args.offline, sdist=args.sdist)
        before = scan([args.spec_a], targets, **kw)
        after = scan([args.spec_b], targets, **kw)
    except SourceError as exc:
        return error(str(exc))
    changes = [c for c in diff(before, after, targets) if args.all or c.change != ChangeKind.UNCHANGED]
    if args.kind:
        changes = [c for c in changes if c.gate.kind.value in args.kind]
    sys.stdout.write(render(changes, args.format, args.spec_a, args.spec_b))
    closed = any(c.change == ChangeKind.CLOSED for c in changes)
    return ExitCode.FINDINGS if args.fail_on == ChangeKind.CLOSED and closed else ExitCode.OK


def _row(c: Any) -> dict[str, Any]:
    a, b = c.before, c.after
    return {
        "target": c.target.name,
        "change": c.change.value,
        "kind": c.gate.kind.value,
        "path": c.gate.location.path,
        "line_before": a.location.line if a else None,
        "line_after": b.location.line if b else None,
        "condition_before": a.condition if a else None,
        "condition_after": b.condition if b else None,
        "id_before": a.id if a else None,
        "id_after": b.id if b else None,
        "matched_by": c.matched_by or None,
    }


def render(changes: list[Any], fmt: str, spec_a: str, spec_b: str) -> str:
    from liftgate.diff import summary_text

    rows = [_row(c) for c in changes]
    if fmt == "json":
        return (
            json.dumps({"schema_version": 1, "before": spec_a, "after": spec_b, "changes": rows}, indent=2)
            + "\n"
        )
    summary = summary_text(changes)
    if fmt == "markdown":
        out = [f"**liftgate diff** `{spec_a}` → `{spec_b}`: {summary or 'no change'}", "",
               "| target | change | file:line | before | after |", "|---|---|---|---|---|"]  # fmt: skip
        for r in rows:
            line = r["line_after"] or r["line_before"]
            out.append(
                f"| {r['target']} | {r['change']} | `{r['path']}:{line}` | `{r['condition_before'] or ''}` | `{r['condition_after'] or ''}` |"
            )
        return "\n".join(out) + "\n"
    out = [f"{spec_a} -> {spec_b}: {summary or 'no change'}"]
    for r in rows:
        where = f"{r['path']}:{r['line_before'] or '-'}->{r['line_after'] or '-'}"
        cond = r["condition_after"] or r["condition_before"] or ""
        out.append(f"  {r['target']:8} {r['change']:8} {r['kind']:11} {where}  {cond[:90]}")
    return "\n".join(out) + "\n"
