"""The sources stage's contract: the files it hands on, the error it raises and how it reports progress.

A source turns what the user named (a directory, a wheel, an sdist, ``name==version``, an
environment) into `Package`s of `SourceFile`s: files on disk, each knowing which package it
belongs to and its path inside that package. Sources never read file contents; the scanner
does. Anything a source could not list is a `liftgate.model.Skip`, not an exception;
`SourceError` is kept for what stops the whole run (a missing path, an unreachable index).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file of a package: where it sits in the package and where to read its bytes."""

    package: str  # distribution name as published, e.g. "flashinfer-python"
    version: str | None
    path: str  # POSIX path inside the package, e.g. "flashinfer/data/include/flashinfer/comm/x.cuh"
    fspath: str  # absolute path on disk to read the bytes from
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
