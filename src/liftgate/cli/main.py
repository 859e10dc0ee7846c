"""The ``liftgate`` command: argparse subcommands, each in its own module with
``configure_parser(subparsers)`` and ``run(args) -> int``. Heavy imports happen inside ``run``
so that ``liftgate --help`` is instant.

Exit codes: 0 nothing to report, 1 findings matching ``--fail-on``, 2 usage or environment error.

The safety net: an exception that no command turned into a user-facing message is a liftgate bug.
It becomes one line naming the command, its input and "please report this" (exit 2); ``--debug``
(anywhere before a wrapped command's ``--``) or ``LIFTGATE_DEBUG=1`` prints the traceback as well.
``LIFTGATE_INTERNAL_ERRORS=raise`` lets the exception through instead: the test suite sets it, so
a bug that the net would hide still fails a test.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import traceback
from collections.abc import Sequence

from liftgate._version import __version__
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
from liftgate.cli.common import ExitCode, error

# The names this module has always had for them (see `ExitCode`).
EXIT_OK = ExitCode.OK
EXIT_FINDINGS = ExitCode.FINDINGS
EXIT_ERROR = ExitCode.ERROR

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
_INPUT_SHOWN = 160  # characters of the command line an internal-error line repeats


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise SystemExit(int(error(message)))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="liftgate",
        description="Find, judge and lift GPU architecture gates in inference stacks.",
        epilog="Exit codes: 0 nothing to report, 1 findings matching --fail-on, 2 usage or environment error.",
    )
    parser.add_argument("--version", action="version", version=f"liftgate {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="on an internal error, print the traceback too (also accepted after the command)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.configure_parser(subparsers)
    return parser


def _strip_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``--debug`` is accepted anywhere in liftgate's own arguments (not in a wrapped command)."""
    return [a for a in argv if a != "--debug"], "--debug" in argv


def _describe_input(argv: Sequence[str]) -> str:
    shown = " ".join(argv)
    return shown if len(shown) <= _INPUT_SHOWN else shown[: _INPUT_SHOWN - 1] + "…"


def internal_error(command: str, argv: Sequence[str], exc: BaseException, *, debug: bool) -> int:
    """Report an exception that escaped a command as one line (and the traceback under ``--debug``)."""
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    detail = str(exc).splitlines()[0] if str(exc) else ""
    what = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    hint = "" if debug else "; run it again with --debug for the traceback"
    sys.stderr.write(
        f"liftgate: internal error in `{command}` on `{_describe_input(argv)}` ({what[:300]}): "
        f"this is a bug in liftgate, please report this with the command line{hint}\n"
    )
    return ExitCode.ERROR


GC_THRESHOLDS = (100_000, 20, 20)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] | None = None
    subcommand = next((a for a in argv if not a.startswith("-")), None)
    if subcommand in _WRAPPING and "--" in argv and argv.index(subcommand) < argv.index("--"):
        # Everything after "--" is the user's command, options and all.
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    argv, debug = _strip_debug(argv)
    debug = debug or os.environ.get("LIFTGATE_DEBUG", "") not in ("", "0")
    args = parser.parse_args(argv)
    if command is not None:
        args.command = command
    if args.command is None:
        parser.print_help(sys.stderr)
        return ExitCode.ERROR
    # A command holds tens of thousands of long-lived objects (gates, verdicts, readings) and makes
    # few cycles: at the default thresholds the cyclic collector rescanned them some 600 times in a
    # warm scan (a tenth of its time). Fewer, later collections, as mypy does; restored on return.
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        return _run(args, argv, command, debug)
    finally:
        gc.set_threshold(*thresholds)


def _run(args: argparse.Namespace, argv: list[str], command: list[str] | None, debug: bool) -> int:
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        sys.stderr.write("liftgate: interrupted\n")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.OK
    except Exception as exc:
        if os.environ.get("LIFTGATE_INTERNAL_ERRORS") == "raise":
            raise
        name = next((a for a in argv if not a.startswith("-")), "liftgate")
        shown = argv[argv.index(name) + 1 :] if name in argv else argv
        return internal_error(name, shown + (["--", *command] if command else []), exc, debug=debug)
