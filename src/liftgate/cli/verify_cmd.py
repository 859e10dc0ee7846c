"""``liftgate verify LIFT_ID|--plan FILE -- CMD…``: stock against lifted, with telemetry, and a verdict."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from liftgate.cli.common import add_env_option, add_format_option, error
from liftgate.report.interface import OutputFormat


def configure_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "verify",
        usage="liftgate verify [options] (LIFT_ID | --plan FILE) -- CMD [ARG ...]",
        help="run a check or benchmark stock vs lifted (A/B), with GPU telemetry, and revert on failure",
        description=(
            "Run CMD alternately with the environment stock and lifted (A B A B …: --warmup K of each, "
            "then --runs N of each), switching through the journal. Records exit status, wall time, "
            "metrics (SGLang bench_serving, vLLM bench serve and AIPerf results, the last JSON line CMD "
            "prints, --metric), NVML telemetry per GPU, and compares --compare-output files. The run "
            "sees LIFTGATE_VERIFY_STATE (stock|lifted), LIFTGATE_VERIFY_RUN and LIFTGATE_VERIFY_DIR."
        ),
        epilog=(
            "Exit codes: 0 pass, 1 failure (a lifted run crashed, printed no-kernel-image or wrote "
            "different output), 3 regression, 2 error (the stock run fails, bad usage)."
        ),
    )
    p.add_argument("lift_id", nargs="?", metavar="LIFT_ID", help="an applied lift (see `liftgate status`)")
    p.add_argument(
        "--plan",
        metavar="FILE",
        help="a plan from `liftgate lift --dry-run --format json > FILE`: apply it first",
    )
    add_env_option(p, help="the environment (default: this one)")
    p.add_argument("--runs", type=int, default=3, metavar="N", help="measured runs per state (default 3)")
    p.add_argument(
        "--warmup", type=int, default=1, metavar="K", help="warm-up runs per state, not measured (default 1)"
    )
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=FILE:JSONPATH",
        help="a metric to read, repeatable; the first is the primary",
    )
    p.add_argument(
        "--result-file",
        action="append",
        default=[],
        metavar="FILE",
        help="a benchmark result file (SGLang, vLLM, AIPerf) the command writes",
    )
    p.add_argument(
        "--compare-output",
        action="append",
        default=[],
        metavar="PATH",
        help="a file the command writes, compared between states",
    )
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--atol", type=float, default=1e-8)
    p.add_argument(
        "--threshold",
        type=float,
        default=0.03,
        help="relative change of the primary metric that counts as a regression (default 0.03)",
    )
    p.add_argument(
        "--revert-on",
        choices=("fail", "regress", "never"),
        default="regress",
        help="revert after a failure (fail), a failure or a regression (regress, default), or never",
    )
    p.add_argument("--timeout", type=float, metavar="S", help="seconds one run may take")
    p.add_argument(
        "--workdir",
        default="liftgate-verify",
        metavar="DIR",
        help="where run logs and output copies go (default ./liftgate-verify)",
    )
    add_format_option(p, OutputFormat, leave_out=(OutputFormat.SARIF,))
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE")
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="a chart of the primary metric and GPU power per run (needs liftgate[plot])",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="every metric and telemetry field")
    p.set_defaults(run=run, command=[])  # main() hands over what follows "--"


def run(args: argparse.Namespace) -> int:
    from liftgate.lift.caches import CacheMover
    from liftgate.lift.journal import Journal, LiftError, prefix_for
    from liftgate.verify.metrics import MetricSpec
    from liftgate.verify.report import render_json, render_markdown, render_text
    from liftgate.verify.runner import Options, VerifyError, plot, verify

    command = list(args.command)
    if not command:
        return error("give the command to run after --, e.g. liftgate verify lg-1234 -- python bench.py")
    if bool(args.lift_id) == bool(args.plan):
        return error("name one LIFT_ID or pass --plan FILE")
    if args.runs < 1 or args.warmup < 0:
        return error("--runs must be at least 1 and --warmup at least 0")
    try:
        specs = [MetricSpec.parse(m) for m in args.metric]
    except ValueError as exc:
        return error(str(exc))
    mover = CacheMover(dict(os.environ))
    try:
        journal = Journal(prefix_for(args.env))
        lift_id = args.lift_id or _apply_plan_file(args.plan, args.env)
        with journal.locked():
            active = [d for d in journal.active() if str(d["lift_id"]).startswith(lift_id)]
        if len(active) != 1:
            return error(f"no single active lift {lift_id!r} in {journal.prefix}: see `liftgate status`")
        lift_id = active[0]["lift_id"]
    except LiftError as exc:
        return error(str(exc))

    def switch(state: str) -> None:
        with journal.locked():
            if state == "stock":
                journal.revert(lift_id, caches=mover)
            else:
                journal.reapply(lift_id, caches=mover)

    opts = Options(
        command, runs=args.runs, warmup=args.warmup, metrics=specs, result_files=args.result_file,
        compare=args.compare_output, rtol=args.rtol, atol=args.atol, threshold=args.threshold,
        timeout_s=args.timeout, workdir=args.workdir,
    )  # fmt: skip
    try:
        outcome = verify(opts, switch, "lifted", progress=_progress)
    except (VerifyError, LiftError) as exc:
        _settle(journal, lift_id, mover, "lifted")
        return error(str(exc))
    want = "lifted"
    if (args.revert_on == "fail" and outcome.verdict == "failure") or (
        args.revert_on == "regress" and outcome.verdict in ("failure", "regression")
    ):
        want = "stock"
    try:
        _settle(journal, lift_id, mover, want)
    except LiftError as exc:
        return error(f"the verdict is {outcome.verdict}, but switching to {want} failed: {exc}")
    outcome.final_state = (
        want if want == "lifted" else f"stock ({lift_id} reverted: --revert-on {args.revert_on})"
    )
    if args.plot:
        problem = plot(outcome, args.plot)
        if problem:
            sys.stderr.write(f"liftgate: {problem}\n")
    text = {"table": lambda: render_text(outcome, args.verbose), "json": lambda: render_json(outcome),
            "markdown": lambda: render_markdown(outcome, args.verbose)}[args.format]()  # fmt: skip
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return outcome.exit_code


def _progress(message: str) -> None:
    sys.stderr.write(f"liftgate verify: {message}\n")


def _settle(journal: Any, lift_id: str, mover: Any, want: str) -> None:
    """Leave the lift applied (``lifted``) or reverted (``stock``), whatever state a run left it in."""
    with journal.locked():
        applied = any(d["lift_id"] == lift_id for d in journal.active())
        if want == "stock" and applied:
            journal.revert(lift_id, caches=mover)
        elif want == "lifted" and not applied:
            journal.reapply(lift_id, caches=mover)


def _apply_plan_file(path: str, env: str | None) -> str:
    """Apply a plan written by ``liftgate lift --dry-run --format json``; its lift id."""
    from liftgate.arch.parse import parse_target
    from liftgate.lift.journal import LiftError
    from liftgate.lift.plan import FileChange, PatchPlan, PlannedGate
    from liftgate.lift.workflow import apply_plan

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        files = tuple(
            FileChange(
                f["package"],
                f["version"],
                f["path"],
                f["fspath"],
                Path(f["fspath"]).read_bytes(),
                f["after"].encode("utf-8"),
                tuple(f["gates"]),
            )
            for f in doc["files"]
        )
        planned = tuple(PlannedGate(**g) for g in doc["gates"])
        plan = PatchPlan(
            doc["lift_id"],
            parse_target(doc["target"]),
            planned,
            (),
            files,
            tuple(doc.get("notes", ())),
            doc.get("verified", False),
            doc.get("exclude") is True,
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LiftError(f"{path} is not a plan from `liftgate lift --dry-run --format json`: {exc}") from exc
    for f, meta in zip(plan.files, doc["files"], strict=True):
        if f.sha_before != meta["sha256_before"]:
            raise LiftError(f"{f.fspath} changed since the plan was made: plan again")
    apply_plan(plan, env)
    return plan.lift_id
