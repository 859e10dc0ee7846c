"""``liftgate doctor [--target ARCH] [--env PATH]``: GPUs, driver, toolkit, torch, build variables,
JIT caches and the kernel coverage of installed packages, each line with a verdict and a hint."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from liftgate.cli.common import (
    ExitCode,
    TargetError,
    TextFormat,
    add_env_option,
    add_format_option,
    add_target_option,
    error,
    parse_target,
)

if TYPE_CHECKING:
    from liftgate.doctor import CheckVerdict


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
    add_target_option(
        p,
        repeatable=False,
        help="the architecture to check for (sm_120, 12.0, rtx5090, …; default: the local GPUs)",
    )
    add_env_option(
        p,
        help=(
            "check another environment (a virtualenv or prefix directory, e.g. ~/venvs/serve, or its "
            "site-packages): its torch and its packages' kernels (default: the one liftgate runs in)"
        ),
    )
    add_format_option(
        p,
        TextFormat,
        help="text (default): one screen with a verdict and a hint per line; json: the checks as a document",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from liftgate.doctor import CheckVerdict, diagnose
    from liftgate.sources.environment import find_site_packages
    from liftgate.sources.interface import SourceError

    try:
        target = parse_target(args.target) if args.target else None
    except TargetError as exc:
        return error(str(exc))
    try:
        if args.env:
            find_site_packages(args.env)  # a wrong --env fails now, not after the slow checks
        checks = diagnose(target, args.env)
    except SourceError as exc:
        return error(str(exc))
    if TextFormat(args.format) is TextFormat.JSON:
        doc = [
            {
                "section": c.section,
                "item": c.item,
                "verdict": CheckVerdict(c.verdict).value,
                "value": c.value,
                "hint": c.hint,
            }
            for c in checks
        ]
        sys.stdout.write(json.dumps({"schema_version": 1, "checks": doc}, indent=2) + "\n")
    else:
        sys.stdout.write(render(checks, sys.stdout.isatty() and "NO_COLOR" not in os.environ))
    return ExitCode.FAILED if any(c.verdict == CheckVerdict.FAIL for c in checks) else ExitCode.OK


def _marks() -> dict[CheckVerdict, tuple[str, str]]:
    """Each verdict's mark in the text and its style."""
    from liftgate.doctor import CheckVerdict

    return {
        CheckVerdict.OK: ("✓", "green"),
        CheckVerdict.WARN: ("!", "yellow"),
        CheckVerdict.FAIL: ("✗", "bold red"),
        CheckVerdict.INFO: ("·", "dim"),
    }


def render(checks: list[Any], color: bool) -> str:
    import io

    from rich.console import Console
    from rich.text import Text

    out = io.StringIO()
    console = Console(
        file=out, force_terminal=color, no_color=not color, width=120, highlight=False, soft_wrap=True
    )
    marks = _marks()
    section = None
    for c in checks:
        if c.section != section:
            section = c.section
            console.print(Text(section, style="bold"))
        mark, style = marks[c.verdict]
        line = Text.assemble(("  " + mark + " ", style), f"{c.item}: ", c.value)
        console.print(line)
        if c.hint:
            console.print(Text(f"      {c.hint}", style="dim"))
    return "\n".join(line.rstrip() for line in out.getvalue().split("\n"))
