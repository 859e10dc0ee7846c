"""What the subcommands share: their common options, the targets they name, one error line, exit codes.

In the manner of auditwheel's ``options.py``: an option that several subcommands take is added by
one function here (`add_target_option`, `add_env_option`, `add_cache_dir_option`,
`add_offline_option`, `add_sdist_option`, `add_format_option`), so its spelling, metavar and
parsing are the same everywhere; a subcommand passes its own help text only where what the
option means there differs. The targets a ``--target`` names are read by `parse_targets` (or
`parse_target` for one), and the local-GPU fallback without ``--target`` lives in `local_targets`
alone; each raises `TargetError`, whose message is the error line. `error` writes the one line
every user-facing error is; `ExitCode` holds the exit statuses of docs/exit-codes.md.

Nothing heavy is imported at module level: ``liftgate --help`` stays instant.
"""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from liftgate.arch.core import Arch
    from liftgate.model import Target


class ExitCode(enum.IntEnum):
    """liftgate's exit statuses (docs/exit-codes.md). Several meanings share 1: which one a command
    means is in its epilog; the aliases name them where the code returns them."""

    OK = 0  # nothing to report: nothing matched, applied, compared, the traced command succeeded
    FINDINGS = 1  # scan, diff: gates matching --fail-on
    ERROR = 2  # usage or environment error: bad target spelling, no GPU and no --target, no network
    REGRESSION = 3  # verify: the primary metric regressed
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    # Aliases of 1, by command.
    REFUSED = 1  # lift, apply-patches: nothing to apply, declined, some gates refused
    DRIFT = 1  # status: a lift's files changed since, or a lift not finished
    FAILED = 1  # trace: the command failed; verify: a lifted run failed; doctor: a check failed


class TextFormat(str, enum.Enum):
    """What ``--format`` accepts where a command prints text or JSON (explain, lift, status, doctor)."""

    TEXT = "text"
    JSON = "json"


def choices(kind: type[enum.Enum], *, leave_out: Iterable[enum.Enum] = ()) -> list[str]:
    """An enum's values, in its order, as argparse ``choices``."""
    skip = set(leave_out)
    return [member.value for member in kind if member not in skip]


# -- one error line ----------------------------------------------------------------------------


def error(
    message: str, *, path: str | None = None, hint: str | None = None, code: ExitCode = ExitCode.ERROR
) -> ExitCode:
    """Write ``liftgate: error: [PATH: ]MESSAGE[; HINT]`` as one line on stderr; return ``code``.

    ``path`` names the file (or environment) the error is about, ``hint`` what to do about it.
    """
    line = f"{path}: {message}" if path else message
    if hint:
        line += f"; {hint}"
    sys.stderr.write(f"liftgate: error: {line}\n")
    return code


# -- the shared options ------------------------------------------------------------------------

TARGET_HELP = "target architecture, repeatable (sm_120, sm_120a, 12.0, rtx5090, …); default: the local GPU"
ENV_HELP = "the environment (a virtualenv or prefix; default: this one)"
CACHE_DIR_HELP = "cache directory (default: the user cache dir; $LIFTGATE_CACHE_DIR)"
OFFLINE_HELP = "never contact the package index; use the cache only"
SDIST_HELP = "fetch source distributions for NAME==VERSION specs"


def add_target_option(
    p: argparse.ArgumentParser, *, repeatable: bool = True, required: bool = False, help: str = TARGET_HELP
) -> None:
    """``-t/--target ARCH``: repeatable (a list, each item comma-separated: see `parse_targets`),
    or one architecture (see `parse_target`)."""
    if repeatable:
        p.add_argument(
            "-t", "--target", action="append", default=[], metavar="ARCH", required=required, help=help
        )
    else:
        p.add_argument("-t", "--target", metavar="ARCH", required=required, help=help)


def add_env_option(p: argparse.ArgumentParser, *, help: str = ENV_HELP) -> None:
    """``--env PATH``: an environment, read by `liftgate.sources.environment.resolve_env`."""
    p.add_argument("--env", metavar="PATH", help=help)


def add_cache_dir_option(p: argparse.ArgumentParser, *, help: str = CACHE_DIR_HELP) -> None:
    """``--cache-dir DIR``: the scan and download cache."""
    p.add_argument("--cache-dir", metavar="DIR", help=help)


def add_offline_option(p: argparse.ArgumentParser, *, help: str = OFFLINE_HELP) -> None:
    p.add_argument("--offline", action="store_true", help=help)


def add_sdist_option(p: argparse.ArgumentParser, *, help: str = SDIST_HELP) -> None:
    p.add_argument("--sdist", action="store_true", help=help)


def add_format_option(
    p: argparse.ArgumentParser,
    kind: type[enum.Enum] = TextFormat,
    *,
    leave_out: Iterable[enum.Enum] = (),
    default: enum.Enum | None = None,
    help: str | None = None,
) -> None:
    """``-f/--format``, its choices the values of ``kind`` (default: its first member)."""
    values = choices(kind, leave_out=leave_out)
    first = default.value if default is not None else values[0]
    p.add_argument("-f", "--format", choices=values, default=first, help=help)


# -- the targets a command names ---------------------------------------------------------------


class TargetError(Exception):
    """A ``--target`` that names no known architecture, or none given and no usable local GPU;
    the message says what to pass."""


def parse_target(spelling: str) -> Arch:
    """One ``--target`` spelling. Raises `TargetError`."""
    from liftgate.arch.parse import UnknownArchError
    from liftgate.arch.parse import parse_target as parse

    try:
        return parse(spelling)
    except UnknownArchError as exc:
        raise TargetError(str(exc)) from exc


def parse_targets(spellings: Sequence[str]) -> list[Target]:
    """Every target of a repeatable ``--target``, each value comma-separated. Raises `TargetError`."""
    from liftgate.model import Target

    items = [item.strip() for spelling in spellings for item in spelling.split(",") if item.strip()]
    return [Target(item, parse_target(item)) for item in items]


def local_targets() -> list[Target]:
    """The local GPUs, for a command given no ``--target``: one target per distinct architecture,
    named ``local GPU (sm_120)``. Raises `TargetError` when there is none (NVML missing or
    failing, no device, an unknown capability), saying to pass ``--target``."""
    from liftgate.arch import nvml
    from liftgate.model import Target

    try:
        archs = nvml.detect_local_archs()
    except nvml.NoGpuError as exc:
        raise TargetError(str(exc)) from exc
    return [Target(f"local GPU ({arch.name})", arch) for arch in archs]


def targets_or_local(spellings: Sequence[str]) -> list[Target]:
    """The targets a repeatable ``--target`` names, else the local GPUs'. Raises `TargetError`."""
    return parse_targets(spellings) or local_targets()


def target_or_local(spelling: str | None) -> Arch:
    """The one architecture ``--target`` names, else the local GPUs' when they share a compute
    capability. Raises `TargetError`."""
    if spelling:
        return parse_target(spelling)
    archs = [t.arch for t in local_targets()]
    if len({a.cc for a in archs}) > 1:
        raise TargetError("GPUs of several capabilities are visible: pass --target")
    return archs[0]
