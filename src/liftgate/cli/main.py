"""The ``liftgate`` command: argparse subcommands, each in its own module with
``configure_parser(subparsers)`` and ``run(args) -> int``. Heavy imports happen inside ``run``
so that ``liftgate --help`` is instant.

Exit codes: 0 nothing to report, 1 findings matching ``--fail-on``, 2 usage or environment error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from liftgate import __version__
from liftgate.cli import (
    arches_cmd,
    diff_cmd,
    doctor_cmd,
    explain_cmd,
    lift_cmd,
    scan_cmd,
    status_cmd,
    trace_cmd,
    verify_cmd,
)

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2

COMMANDS = (
    scan_cmd,
    explain_cmd,
    arches_cmd,
    lift_cmd,
    status_cmd,
    verify_cmd,
    trace_cmd,
    doctor_cmd,
    diff_cmd,
)
# Commands that run a command of the user's, given after "--".
_WRAPPING = ("verify", "trace")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"liftgate: error: {message}\n")
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="liftgate",
        description="Find, judge and lift GPU architecture gates in inference stacks.",
        epilog="Exit codes: 0 nothing to report, 1 findings matching --fail-on, 2 usage or environment error.",
    )
    parser.add_argument("--version", action="version", version=f"liftgate {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.configure_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] | None = None
    subcommand = next((a for a in argv if not a.startswith("-")), None)
    if subcommand in _WRAPPING and "--" in argv and argv.index(subcommand) < argv.index("--"):
        # Everything after "--" is the user's command, options and all.
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    args = parser.parse_args(argv)
    if command is not None:
        args.command = command
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        sys.stderr.write("liftgate: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK
