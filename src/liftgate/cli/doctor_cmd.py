"""``liftgate doctor [--target ARCH] [--env PATH]``: GPUs, driver, toolkit, torch, build variables,
JIT caches and the kernel coverage of installed packages, each line with a verdict and a hint."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

_MARK = {"ok": "✓", "warn": "!", "fail": "✗", "info": "·"}
_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "info": "dim"}


def configure_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "doctor",
        help="the local picture: GPUs, driver, nvcc, torch, build variables, JIT caches, kernel coverage",
        description=(
            "One screen about this machine and environment: GPUs and capabilities (NVML), the driver and "
            "the CUDA version it supports, nvcc/ptxas and the targets they build, torch's arch list, the "
            "variables that steer builds and caches, JIT caches and their sizes, and the installed "
            "packages that ship CUDA kernels with their coverage for the target."
        ),
        epilog=(
            "Exit codes: 0 nothing failed (warnings included), 1 a check failed (a package with a library "
            "that has no kernel image for the target, a toolkit that cannot build it), 2 usage error or "
            "an --env that is not an environment."
        ),
    )
    p.add_argument(
        "-t",
        "--target",
        metavar="ARCH",
        help="the architecture to check for (sm_120, 12.0, rtx5090, …; default: the local GPUs)",
    )
    p.add_argument(
        "--env",
        metavar="PATH",
        help=(
            "check another environment (a virtualenv or prefix directory, e.g. ~/venvs/serve, or its "
            "site-packages): its torch and its packages' kernels (default: the one liftgate runs in)"
        ),
    )
    p.add_argument(
        "-f",
        "--format",
        choices=("text", "json"),
        default="text",
        help="text (default): one screen with a verdict and a hint per line; json: the checks as a document",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from liftgate.arch.parse import UnknownArchError, parse_target
    from liftgate.doctor import FAIL, diagnose
    from liftgate.sources.environment import find_site_packages
    from liftgate.sources.interface import SourceError

    try:
        target = parse_target(args.target) if args.target else None
    except UnknownArchError as exc:
        sys.stderr.write(f"liftgate: error: {exc}\n")
        return 2
    try:
        if args.env:
            find_site_packages(args.env)  # a wrong --env fails now, not after the slow checks
        checks = diagnose(target, args.env)
    except SourceError as exc:
        sys.stderr.write(f"liftgate: error: {exc}\n")
        return 2
    if args.format == "json":
        doc = [
            {"section": c.section, "item": c.item, "verdict": c.verdict, "value": c.value, "hint": c.hint}
            for c in checks
        ]
        sys.stdout.write(json.dumps({"schema_version": 1, "checks": doc}, indent=2) + "\n")
    else:
        sys.stdout.write(render(checks, sys.stdout.isatty() and "NO_COLOR" not in os.environ))
    return 1 if any(c.verdict == FAIL for c in checks) else 0


def render(checks: list[Any], color: bool) -> str:
    import io

    from rich.console import Console
    from rich.text import Text

    out = io.StringIO()
    console = Console(
        file=out, force_terminal=color, no_color=not color, width=120, highlight=False, soft_wrap=True
    )
    section = None
    for c in checks:
        if c.section != section:
            section = c.section
            console.print(Text(section, style="bold"))
        line = Text.assemble(("  " + _MARK[c.verdict] + " ", _STYLE[c.verdict]), f"{c.item}: ", c.value)
        console.print(line)
        if c.hint:
            console.print(Text(f"      {c.hint}", style="dim"))
    return "\n".join(line.rstrip() for line in out.getvalue().split("\n"))
