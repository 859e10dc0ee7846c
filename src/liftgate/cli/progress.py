"""Progress on stderr through rich, only when stderr is a terminal and not ``--quiet``."""

from __future__ import annotations

import sys
from typing import Any

from liftgate.sources.interface import NullObserver


class RichObserver:
    """Implements `liftgate.sources.interface.Observer` with a transient rich progress bar."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self._console,
            transient=True,
        )
        self._task: Any = None

    def start(self, description: str, total: int | None = None) -> None:
        self.finish()
        self._progress.start()
        self._task = self._progress.add_task(description, total=total)

    def advance(self, amount: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, amount)

    def finish(self) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
            self._task = None
        self._progress.stop()

    def note(self, message: str) -> None:
        self._console.print(f"[dim]{message}[/dim]", highlight=False)


class PlainObserver(NullObserver):
    """Notes only, no bars (stderr is not a terminal, or --quiet for everything but notes)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def note(self, message: str) -> None:
        if not self.quiet:
            sys.stderr.write(f"liftgate: {message}\n")


def make_observer(quiet: bool) -> RichObserver | PlainObserver:
    if not quiet and sys.stderr.isatty():
        return RichObserver()
    return PlainObserver(quiet)
