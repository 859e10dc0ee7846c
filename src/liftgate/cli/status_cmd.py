"""``liftgate status`` and ``liftgate revert``: the lifts in an environment, their integrity, undoing them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from liftgate.cli.common import ExitCode, TextFormat, add_env_option, add_format_option, error


def configure_parser(subparsers: Any) -> None:
    s: argparse.ArgumentParser = subparsers.add_parser(
        "status",
        help="the lifts applied to an environment and whether their files are intact",
        description=(
            "List the lifts recorded in <prefix>/.liftgate: target, gates, and each patched file's "
            "state (lifted, reverted, drift: changed since the lift by an upgrade or a hand edit, missing)."
        ),
        epilog=(
            "Exit codes: 0 every active lift intact, 1 drift found (or a lift whose apply or revert could not "
            "be finished, or a file recovery kept as it was), 2 error (a journal that cannot be read)."
        ),
    )
    add_env_option(s)
    add_format_option(s, TextFormat)
    s.add_argument("--all", action="store_true", help="also list reverted lifts")
    s.set_defaults(run=run_status)

    r: argparse.ArgumentParser = subparsers.add_parser(
        "revert",
        help="undo a lift byte for byte (or every lift, newest first)",
        description=(
            "Restore every file of a lift from its backup, check each sha256, move the JIT-cache entries "
            "built while lifted aside and put the stock ones back. Refuses when a file changed since the "
            "lift unless --force (which keeps the changed file in the journal)."
        ),
        epilog="Exit codes: 0 reverted, 2 refused or error.",
    )
    r.add_argument("lift_id", nargs="?", metavar="LIFT_ID")
    r.add_argument("--all", action="store_true", help="revert every active lift, newest first")
    add_env_option(r)
    r.add_argument(
        "--force", action="store_true", help="restore the backups even over files changed since the lift"
    )
    r.set_defaults(run=run_revert)


def run_status(args: argparse.Namespace) -> int:
    import os

    from liftgate.lift.journal import Journal, LiftError, journal_dir, prefix_for

    try:
        prefix = prefix_for(args.env)
    except LiftError as exc:
        return error(str(exc))
    notes: list[str] = []
    warnings: list[str] = []
    if not os.path.isdir(journal_dir(prefix)):
        lifts = []
    else:
        journal = Journal(prefix)
        try:
            with journal.locked():
                lifts = journal.status()
        except LiftError as exc:
            return error(str(exc))
        notes, warnings = journal.notes, journal.warnings
    for note in notes + warnings:
        sys.stderr.write(f"liftgate: {note}\n")
    # Reverted lifts only with --all; an apply or revert that could not be finished, always.
    shown = [lift for lift in lifts if args.all or lift.state != "reverted"]
    unfinished = any(lift.state in ("applying", "reverting") for lift in shown)
    drift = any(lift.drifted for lift in shown if lift.state == "applied") or unfinished or bool(warnings)
    if TextFormat(args.format) is TextFormat.JSON:
        doc = {
            "prefix": prefix,
            "lifts": [
                {
                    "lift_id": lift.lift_id, "state": lift.state, "target": lift.target, "exclude": lift.exclude,
                    "created": lift.created,
                    "gates": list(lift.gates), "caches_moved": lift.caches_moved,
                    "files": [{"path": f.path, "package": f.package, "state": f.state} for f in lift.files],
                }
                for lift in shown
            ],
        }  # fmt: skip
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return ExitCode.DRIFT if drift else ExitCode.OK
    if not shown:
        sys.stdout.write(f"no active lifts in {prefix}\n")
        return ExitCode.DRIFT if warnings else ExitCode.OK
    out = []
    for lift in shown:
        bad = lift.drifted
        health = "intact" if not bad else f"DRIFT in {len(bad)} of {len(lift.files)} files"
        if lift.state in ("applying", "reverting"):
            health = f"NOT FINISHED ({lift.state}): the next liftgate command tries again"
        elif lift.state != "applied":
            health = lift.state
        out.append(
            f"{lift.lift_id}  {'excludes ' if lift.exclude else ''}{lift.target}  {lift.created}  {len(lift.gates)} gates, "
            f"{len(lift.files)} files, {lift.caches_moved} cache entries moved — {health}"
        )
        for f in lift.files:
            mark = {"lifted": " ", "reverted": "r", "drift": "!", "missing": "!"}[f.state]
            out.append(f"  {mark} {f.state:8} {f.path}")
        if bad and lift.state == "applied":
            out.append(
                "  changed since the lift (an upgrade or a hand edit): `liftgate revert "
                f"{lift.lift_id} --force` restores the stock files and keeps the changed ones in the journal"
            )
    sys.stdout.write("\n".join(out) + "\n")
    return ExitCode.DRIFT if drift else ExitCode.OK


def run_revert(args: argparse.Namespace) -> int:
    from liftgate.lift.workflow import LiftError, revert

    if bool(args.lift_id) == bool(args.all):
        return error("name one LIFT_ID or pass --all")
    try:
        done, notes = revert(None if args.all else args.lift_id, args.env, force=args.force)
    except LiftError as exc:
        return error(str(exc))
    for note in notes:
        sys.stderr.write(f"liftgate: {note}\n")
    if not done:
        sys.stderr.write("liftgate: no active lifts to revert\n")
    for doc in done:
        back = len(doc.get("caches_moved", []))
        aside = len(doc.get("lifted_caches_moved", []))
        sys.stderr.write(
            f"liftgate: reverted {doc['lift_id']}: its {len(doc['files'])} files are as before (sha256 checked), "
            f"{aside} lifted-state cache entries moved aside, {back} stock entries put back\n"
        )
    return ExitCode.OK
