"""The sources stage's contract: the files it hands on, the error it raises and how it reports progress.

A source turns what the user named (a directory, a wheel, an sdist, ``name==version``, an
environment) into `Package`s of `SourceFile`s: files on disk, each knowing which package it
belongs to and its path inside that package. Sources never read file contents; the scanner
does. Anything a source could not list is a `liftgate.model.Skip`, not an exception;
`SourceError` is kept for what stops the whole run (a missing path, an unreachable index).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from typing import BinaryIO, Protocol

DEFAULT_MAX_FILE_SIZE = 16 * 1024 * 1024  # larger source files are skipped with a reason
DEFAULT_MAX_PY_FILE_SIZE = (
    4 * 1024 * 1024
)  # a Python file past this is skipped (its syntax tree would be ~100x)


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file of a package: where it sits in the package and where to read its bytes."""

    package: str  # distribution name as published, e.g. "flashinfer-python"
    version: str | None
    path: str  # POSIX path inside the package, e.g. "flashinfer/data/include/flashinfer/comm/x.cuh" (`display_name`)
    fspath: str  # absolute path on disk to read the bytes from (the real name, maybe not valid UTF-8)
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class Package:
    """A distribution (or a source tree, or a lone file) and the files it consists of."""

    name: str
    version: str | None
    origin: str  # what the user named: "flashinfer-python==0.6.2", "/path/to/x.whl", "env:/.../site-packages"
    files: tuple[SourceFile, ...]


class SourceError(Exception):
    """A fatal, user-facing error: one line naming the thing and what to do next."""


class Observer(Protocol):
    """Progress reporting. The CLI passes a rich-based one; the library defaults to `NullObserver`."""

    def start(self, description: str, total: int | None = None) -> None: ...

    def advance(self, amount: int = 1) -> None: ...

    def finish(self) -> None: ...

    def note(self, message: str) -> None: ...


class NullObserver:
    """An observer that does nothing: what liftgate uses when it runs as a library."""

    def start(self, description: str, total: int | None = None) -> None:
        pass

    def advance(self, amount: int = 1) -> None:
        pass

    def finish(self) -> None:
        pass

    def note(self, message: str) -> None:
        pass


# C0 and C1 control characters, DEL, and the lone surrogates ``os`` decodes undecodable bytes to.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte the name really has
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def display_name(name: str) -> str:
    """``name`` as a package path may show it: valid UTF-8 without control characters.

    A file name that is not valid UTF-8 reaches Python with each undecodable byte as a lone
    surrogate (``surrogateescape``), which no report, cache or hash can encode; control
    characters would reach a terminal. Both become backslash escapes (``caf\\xe9.cu``); every
    other name is returned as it is. `SourceFile.fspath` keeps the real name to read the bytes.
    """
    return name if _UNPRINTABLE.search(name) is None else _UNPRINTABLE.sub(_escape, name)


# Pseudo file systems: reading them hangs (``/proc/kmsg``, ``/dev/zero``) or never ends.
SYSTEM_DIRS = ("/proc", "/sys", "/dev")


def is_within(root: str, path: str) -> bool:
    """Whether ``path`` is ``root`` or lies below it (both absolute and resolved, or both relative)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def is_system_path(path: str) -> bool:
    """Whether ``path`` (absolute, already resolved) is or lies under /proc, /sys or /dev."""
    return any(is_within(top, path) for top in SYSTEM_DIRS)


def open_regular(path: str) -> BinaryIO:
    """Open ``path`` for reading bytes, refusing anything but a regular file.

    A FIFO would block the open forever, a device or socket would read without end (and opening
    some devices does something). The path is checked before the open, and what was opened (with
    ``O_NONBLOCK``, so a FIFO swapped in meanwhile cannot block) again after it. Raises `OSError`
    (``EINVAL``, "not a regular file") for the others. Wrap it in `io.TextIOWrapper` for text.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, _NOT_REGULAR, path)
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, _NOT_REGULAR, path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


_NOT_REGULAR = "not a regular file (a FIFO, socket, device or directory)"
