"""``liftgate lift GATE_ID… | --all-liftable``: plan, show and apply a reversible lift; ``--export DIR``.

Also ``liftgate apply-patches DIR``: re-apply an exported series to another environment, each
gate found again by identity (`liftgate.lift.workflow.relocate_series`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from liftgate.cli.common import (
    ExitCode,
    TargetError,
    TextFormat,
    add_cache_dir_option,
    add_env_option,
    add_format_option,
    add_target_option,
    error,
    target_or_local,
)


def add_apply_options(p: argparse.ArgumentParser) -> None:
    """The options ``lift`` and ``apply-patches`` share."""
    add_env_option(p, help="the environment to change (a virtualenv or prefix; default: this one)")
    p.add_argument("--dry-run", action="store_true", help="show the plan and the diff; change nothing")
    p.add_argument("-y", "--yes", action="store_true", help="apply without asking")
    add_format_option(p, TextFormat, help="how to print the plan")
    add_cache_dir_option(p, help="liftgate's scan cache directory")


def configure_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "lift",
        help="patch gates so they also admit the target, reversibly (journal, backups, JIT caches)",
        description=(
            "Plan edits that make each GATE_ID also admit --target and nothing else, re-detect them to "
            "check that, show the diff, and apply it to the environment with a journal "
            "(<prefix>/.liftgate): byte-exact backups, sha256 before and after, JIT-cache entries built "
            "from the old sources moved aside. `liftgate status` shows lifts, `liftgate revert` undoes them."
        ),
        epilog="Exit codes: 0 applied (or planned, with --dry-run), 1 nothing to apply or declined, 2 error.",
    )
    p.add_argument(
        "gate_ids", nargs="*", metavar="GATE_ID", help="gate ids from `liftgate scan` (unique prefixes work)"
    )
    add_target_option(p, repeatable=False, help="the architecture to admit (default: the local GPU)")
    p.add_argument(
        "--all-liftable",
        action="store_true",
        help=(
            "every gate the judge finds liftable whose outcome for the target is a loss (never an "
            "alternative: the target's own or newer path); gates whose edits do not verify are skipped, "
            "one line each, and the rest is lifted"
        ),
    )
    p.add_argument(
        "--exclude",
        metavar="ARCH",
        help=(
            "shut ARCH out of each GATE_ID instead of admitting a target: the narrowing edit for an unsafe "
            "admission (12 removed from a JIT filter, `== 120` becomes `in (120, 121)` in a deny-list, "
            "`&& !EXACT` added to an #if), re-detected, journalled and reverted like a lift"
        ),
    )
    p.add_argument(
        "--all-unsafe",
        action="store_true",
        help="with --exclude ARCH: every gate the judge finds an unsafe admission for ARCH",
    )
    p.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="GLOB",
        help=(
            "with --all-liftable or --all-unsafe: only gates in files whose package-relative path matches "
            "GLOB (repeatable)"
        ),
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="with --all-liftable or --all-unsafe: fail, applying nothing, if any gate would be skipped",
    )
    p.add_argument(
        "--chain",
        metavar="GATE_ID",
        help=(
            "lift the gate chain of GATE_ID as one: every gate that must admit the target for its feature "
            "(`liftgate explain GATE_ID --chain` shows them); all of them or none"
        ),
    )
    p.add_argument(
        "--at",
        choices=("call-site", "definition"),
        default="call-site",
        help="for a helper predicate: edit the call site (default) or its definition (changes every caller)",
    )
    p.add_argument("--force", action="store_true", help="also lift gates the judge says are blocked")
    p.add_argument(
        "--export", metavar="DIR", help="also write the patch series (one diff per package) to DIR"
    )
    add_apply_options(p)
    p.set_defaults(run=run)

    a: argparse.ArgumentParser = subparsers.add_parser(
        "apply-patches",
        help="re-apply an exported patch series to an environment, gate by gate",
        description=(
            "Re-apply a series written by `liftgate lift --export DIR`: each gate is found again by its "
            "identity (not its line), so the series survives releases that moved code; a gate that is "
            "gone or changed is refused on its own, the others are lifted."
        ),
        epilog="Exit codes: 0 applied, 1 some gates refused or nothing to apply, 2 error.",
    )
    a.add_argument("directory", metavar="DIR")
    add_apply_options(a)
    a.set_defaults(run=run_apply_patches)


def run(args: argparse.Namespace) -> int:
    from liftgate.cli.progress import make_observer
    from liftgate.lift.workflow import (
        LiftError,
        PlanError,
        choose_gates,
        judge_env,
        plan_env,
        resolve_gate_ids,
        scan_env,
    )
    from liftgate.sources.interface import SourceError

    if args.exclude is not None:
        return _exclude(args)
    if args.all_unsafe:
        return error("--all-unsafe goes with --exclude ARCH (the target to shut out)")
    if args.chain and (args.gate_ids or args.all_liftable):
        return error("--chain lifts one chain: give no other GATE_IDs and no --all-liftable")
    if not args.gate_ids and not args.all_liftable and not args.chain:
        return error("name GATE_IDs (from `liftgate scan`), --chain GATE_ID, or pass --all-liftable")
    if (args.path or args.strict) and not args.all_liftable:
        return error("--path and --strict go with --all-liftable")
    try:
        target = target_or_local(args.target)
    except TargetError as exc:
        return error(str(exc))
    observer = make_observer(quiet=not sys.stderr.isatty())
    try:
        try:
            # The ids first, from the scan alone (a warm scan cache makes it quick): a mistyped or
            # ambiguous one fails before anything is judged. Then only what the plan needs is judged:
            # the requested gates, every excluded gate for --all-liftable, a chain's members (in
            # `choose_chain`) for --chain.
            es = scan_env(args.env, target, cache_dir=args.cache_dir, observer=observer)
            wanted = resolve_gate_ids(es, target, [args.chain] if args.chain else args.gate_ids)
            if not args.chain:
                es = judge_env(es, target, None if args.all_liftable else wanted, observer)
        finally:
            observer.finish()
        if args.chain:
            return _lift_chain(es, target, args)
        ids, refused = choose_gates(es, target, wanted, args.all_liftable, args.force, paths=args.path)
        if args.all_liftable and not ids:
            where = f" in files matching {', '.join(args.path)}" if args.path else ""
            sys.stderr.write(f"liftgate: no liftable loss for {target.name}{where}: nothing to lift\n")
            return ExitCode.REFUSED
        plan = plan_env(es, target, ids, at=args.at, refused=refused, partial=args.all_liftable)
    except (SourceError, PlanError, LiftError) as exc:
        return error(str(exc))
    if args.all_liftable:
        refused_all = _counted(plan, f"{len(ids)} liftable losses for {target.name}", args.strict)
        if refused_all is not None:
            return refused_all
    return _show_and_apply(plan, args)


def _counted(plan: Any, what: str, strict: bool) -> int | None:
    """The count line of a whole-scope lift (``--all-liftable``, ``--all-unsafe``) on stderr; with
    ``strict``, the error when a gate would be skipped (nothing is applied then)."""
    sys.stderr.write(
        f"liftgate: {what}: {len(plan.planned)} gates planned"
        + (f", {len(plan.skipped)} skipped (the lines marked - above)" if plan.skipped else "")
        + "\n"
    )
    if strict and plan.skipped:
        return error(
            f"--strict: {len(plan.skipped)} gate(s) would be skipped "
            f"(first: {plan.skipped[0].gate_id}: {plan.skipped[0].reason}); nothing applied"
        )
    return None


def _exclude(args: argparse.Namespace) -> int:
    """``lift --exclude ARCH``: narrow each gate (or every unsafe admission) so ARCH is shut out."""
    from liftgate.cli.progress import make_observer
    from liftgate.lift.workflow import (
        LiftError,
        PlanError,
        judge_env,
        plan_env,
        resolve_gate_ids,
        scan_env,
        unsafe_gates,
    )
    from liftgate.sources.interface import SourceError

    if args.target:
        return error("--exclude names the target to shut out: give no --target with it")
    if args.all_liftable or args.chain or args.force:
        return error("--exclude goes with GATE_IDs or --all-unsafe (not --all-liftable, --chain or --force)")
    if bool(args.gate_ids) == bool(args.all_unsafe):
        return error("with --exclude, name GATE_IDs (from `liftgate scan`) or pass --all-unsafe, not both")
    if (args.path or args.strict) and not args.all_unsafe:
        return error("--path and --strict go with --all-unsafe")
    try:
        target = target_or_local(args.exclude)
    except TargetError as exc:
        return error(str(exc))
    observer = make_observer(quiet=not sys.stderr.isatty())
    try:
        try:
            es = scan_env(args.env, target, cache_dir=args.cache_dir, observer=observer)
            wanted = resolve_gate_ids(es, target, args.gate_ids) if args.gate_ids else None
            if args.all_unsafe:
                es = judge_env(es, target, None, observer)
        finally:
            observer.finish()
        ids = wanted if wanted is not None else unsafe_gates(es, target, args.path)
        if not ids:
            where = f" in files matching {', '.join(args.path)}" if args.path else ""
            sys.stderr.write(f"liftgate: no unsafe admission for {target.name}{where}: nothing to exclude\n")
            return ExitCode.REFUSED
        plan = plan_env(es, target, ids, at=args.at, partial=args.all_unsafe, exclude=True)
    except (SourceError, PlanError, LiftError) as exc:
        return error(str(exc))
    if args.all_unsafe:
        refused_all = _counted(plan, f"{len(ids)} unsafe admissions for {target.name}", args.strict)
        if refused_all is not None:
            return refused_all
    return _show_and_apply(plan, args)


def _lift_chain(es: Any, target: Any, args: argparse.Namespace) -> int:
    """``lift --chain``: every gate of the chain that shuts the target out, in one lift, or none."""
    from liftgate.lift.workflow import choose_chain, plan_env

    choice = choose_chain(es, target, args.chain.strip(), args.force)
    seen = choice.view
    sys.stderr.write(
        f"liftgate: chain {choice.root}: {len(choice.gate_ids)} gate(s) shut {target.name} out; combined verdict "
        f"{seen.verdict.value if seen.verdict else 'none'}\n"
    )
    if choice.refusal is not None:
        sys.stderr.write(f"liftgate: {choice.refusal}\n")
        return ExitCode.REFUSED
    plan = plan_env(es, target, list(choice.gate_ids), at=args.at)
    if plan.skipped:
        for s in plan.skipped:
            sys.stderr.write(f"liftgate: cannot lift {s.gate_id}: {s.reason}\n")
        sys.stderr.write(
            f"liftgate: the chain of {choice.root} cannot be lifted as one ({len(plan.skipped)} of its gates "
            "cannot be edited); nothing applied: lifting part of a chain is how a data race gets in\n"
        )
        return ExitCode.REFUSED
    return _show_and_apply(plan, args)


def _show_and_apply(plan: Any, args: argparse.Namespace) -> int:
    from liftgate.lift.journal import prefix_for
    from liftgate.lift.workflow import LiftError, apply_plan, export_series

    if TextFormat(args.format) is TextFormat.JSON:
        doc = plan.to_dict(with_content=True)
        doc["diff"] = plan.diff()
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render_plan(plan))
        sys.stdout.write(plan.diff())
    if getattr(args, "export", None) and plan.files:
        try:
            exported = export_series(plan, args.export)
        except LiftError as exc:
            return error(str(exc))
        except OSError as exc:
            return error(f"cannot write {exc.filename or args.export}: {exc.strerror or exc}")
        for path in exported:
            sys.stderr.write(f"liftgate: wrote {path}\n")
    if not plan.files:
        sys.stderr.write("liftgate: nothing to lift\n")
        return ExitCode.REFUSED
    if args.dry_run:
        sys.stderr.write(f"liftgate: dry run: {plan.lift_id} not applied\n")
        return ExitCode.OK
    try:
        prefix = prefix_for(args.env)
    except LiftError as exc:
        return error(str(exc))
    if not args.yes:
        if not sys.stdin.isatty():
            return error("no terminal to confirm on: pass --yes to apply, or --dry-run to only look")
        sys.stderr.write(f"Apply {plan.lift_id} to {prefix} ({len(plan.files)} files)? [y/N] ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            sys.stderr.write("liftgate: not applied\n")
            return ExitCode.REFUSED
    try:
        doc = apply_plan(plan, args.env)
    except LiftError as exc:
        return error(str(exc))
    except OSError as exc:
        env = f" --env {args.env}" if args.env else ""
        return error(
            str(exc.strerror or exc),
            path=getattr(exc, "filename", "") or prefix,
            hint=f"`liftgate status{env}` shows what each file holds now",
        )
    for note in doc.get("recovery_notes", []):
        sys.stderr.write(f"liftgate: {note}\n")
    moved = doc.get("caches_moved", [])
    what = f"excluding {plan.target.name}" if plan.exclude else f"for {plan.target.name}"
    sys.stderr.write(
        f"liftgate: applied {plan.lift_id} {what}: {len(plan.files)} files changed, "
        f"{len(moved)} JIT-cache entries moved aside; journal in {os.path.join(prefix, '.liftgate')}\n"
    )
    for m in moved:
        sys.stderr.write(f"  moved aside: {m['original']} ({m['cache']})\n")
    sys.stderr.write(
        f"liftgate: undo with `liftgate revert {plan.lift_id}"
        + (f" --env {args.env}`\n" if args.env else "`\n")
    )
    return ExitCode.OK


def render_plan(plan: Any) -> str:
    what = f"excluding {plan.target.name}" if plan.exclude else f"for {plan.target.name}"
    lines = [f"lift {plan.lift_id} {what}" + ("" if plan.verified else " (not re-detected)")]
    for g in plan.planned:
        lines.append(f"  + {g.gate_id}  {g.package} {g.path}:{g.line}  {g.how}")
        if g.granularity == "major":
            done = "shut out" if plan.exclude else "admitted"
            lines.append(f"      (the code compares majors: every {plan.target.major}.x is {done})")
        if g.via:
            lines.append(f"      (edited at its definition: {g.via})")
    for s in plan.skipped:
        reason = " ".join(s.reason.split())
        lines.append(f"  - {s.gate_id}  not lifted: {reason[:300] + '…' if len(reason) > 300 else reason}")
    for n in plan.notes:
        lines.append(f"  note: {n}")
    if plan.verified:
        lines.append(
            f"  re-detected: every planned gate now {'shuts the target out' if plan.exclude else 'admits the target'}, "
            "and nothing else changed beyond the notes"
        )
    return "\n".join(lines) + "\n\n"


def run_apply_patches(args: argparse.Namespace) -> int:
    from liftgate.arch.parse import UnknownArchError, parse_target
    from liftgate.lift.workflow import LiftError, PlanError, plan_env, read_series, relocate_series, scan_env
    from liftgate.sources.interface import SourceError

    try:
        doc = read_series(args.directory)
        target = parse_target(doc["target"])
        packages = [p["name"] for p in doc.get("packages", [])]
        es = scan_env(args.env, target, only_packages=packages, cache_dir=args.cache_dir)
        found, refused = relocate_series(doc, es, target)
        for r in refused:
            sys.stderr.write(f"liftgate: refused {r.gate_id}: {r.reason}\n")
        if not found:
            return error("no gate of the series is in this environment: nothing to apply")
        plan = plan_env(es, target, found, refused=refused)
    except (SourceError, PlanError, LiftError, UnknownArchError, KeyError) as exc:
        return error(str(exc))
    args.export = None
    code = _show_and_apply(plan, args)
    return ExitCode.REFUSED if code == ExitCode.OK and refused and not args.dry_run else code
