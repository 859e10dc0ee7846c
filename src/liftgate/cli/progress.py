"""Progress on stderr: a rich progress bar on a terminal, one line every ~10 seconds elsewhere.

On a terminal (and not ``--quiet``) each phase is a transient rich bar with its count (``1,200/3,300``),
the time elapsed and the time left. Off a terminal (CI logs, ``2> log``) a long phase would
otherwise print nothing for minutes: `PlainObserver` writes ``liftgate: judging the gated code:
1,200 of 3,300 gates, about 40 s left`` every `PROGRESS_INTERVAL` seconds while a phase runs,
from the phase's own advances or, for a phase that reports none, from a heartbeat thread. Its
clock is injectable, so tests drive it without sleeping.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from liftgate.sources.interface import NullObserver

PROGRESS_INTERVAL = 10.0  # seconds between two progress lines off a terminal
HEARTBEAT = 1.0  # seconds between the heartbeat thread's looks at the clock
# What a phase counts, by how its description starts: "judging …: 1,200 of 3,300 gates".
UNITS = (("judging", "gates"), ("indexing", "files"), ("analysing CMake", "files"), ("listing", "files"))


def unit_of(description: str) -> str:
    return next((unit for prefix, unit in UNITS if description.lower().startswith(prefix)), "")


def duration_text(seconds: float) -> str:
    """``40 s``, ``3 min 20 s``, ``1 h 5 min``: whole seconds, or minutes past the hour."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, rest = divmod(whole, 3600)
    return f"{hours} h {rest // 60} min"


def eta_text(seconds: float) -> str:
    """A rough time left: ``40 s`` (to 5 s), ``4 min`` (to the minute past 2 minutes), ``1 h 5 min``."""
    if seconds < 120:
        return duration_text(max(5, 5 * math.ceil(seconds / 5)))
    return duration_text(60 * math.ceil(seconds / 60))


def progress_text(description: str, done: int, total: int | None, elapsed: float) -> str:
    """``judging the gated code: 1,200 of 3,300 gates, about 40 s left`` (the rate so far gives the
    time left); without a total, or before the first unit is done, the time so far instead."""
    unit = unit_of(description)
    noun = f" {unit}" if unit else ""
    if total is None:
        counted = f"{done:,}{noun} done, " if done else ""
        return f"{description}: {counted}{duration_text(elapsed)} so far"
    head = f"{description}: {done:,} of {total:,}{noun}"
    if done <= 0 or elapsed <= 0:
        return f"{head}, {duration_text(elapsed)} so far"
    left = max(0, total - done) * elapsed / done
    return f"{head}, about {eta_text(left)} left"


class RichObserver:
    """Implements `liftgate.sources.interface.Observer` with a transient rich progress bar."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=self._console,
            transient=True,
        )
        self._task: Any = None

    def start(self, description: str, total: int | None = None) -> None:
        self.finish()
        self._progress.start()
        self._task = self._progress.add_task(description, total=total, unit=unit_of(description))

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
    """Notes, and a progress line every `PROGRESS_INTERVAL` seconds of a phase (stderr is not a
    terminal); ``quiet`` keeps the notes only. ``clock`` and ``heartbeat`` are for tests: a fake
    clock, and no thread (call `tick` instead)."""

    def __init__(
        self,
        quiet: bool,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = PROGRESS_INTERVAL,
        heartbeat: bool = True,
        stream: TextIO | None = None,
    ) -> None:
        self.quiet = quiet
        self._clock = clock
        self._interval = interval
        self._heartbeat = heartbeat and not quiet
        self._stream = stream  # None: sys.stderr when written (tests swap it)
        self._lock = threading.Lock()
        self._description: str | None = None
        self._total: int | None = None
        self._done = 0
        self._started = 0.0
        self._last = 0.0
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def _write(self, line: str) -> None:
        stream = self._stream or sys.stderr
        stream.write(f"liftgate: {line}\n")
        stream.flush()

    def start(self, description: str, total: int | None = None) -> None:
        self.finish()
        if self.quiet:
            return
        with self._lock:
            self._description, self._total, self._done = description, total, 0
            self._started = self._last = self._clock()
        if self._heartbeat:
            stop = threading.Event()
            self._stop = stop
            self._thread = threading.Thread(
                target=self._beat, args=(stop,), name="liftgate-progress", daemon=True
            )
            self._thread.start()

    def _beat(self, stop: threading.Event) -> None:
        # A phase that reports no advances (or few) still says it is alive.
        while not stop.wait(HEARTBEAT):
            self.tick()

    def advance(self, amount: int = 1) -> None:
        if self.quiet:
            return
        with self._lock:
            self._done += amount
        self.tick()

    def tick(self) -> None:
        """Write a progress line if `PROGRESS_INTERVAL` seconds have passed since the phase started
        or since the last line."""
        with self._lock:
            if self._description is None:
                return
            now = self._clock()
            if now - self._last < self._interval:
                return
            self._last = now
            line = progress_text(self._description, self._done, self._total, now - self._started)
        self._write(line)

    def finish(self) -> None:
        stop, thread = self._stop, self._thread
        self._stop = self._thread = None
        if stop is not None:
            stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            self._description = None

    def note(self, message: str) -> None:
        if not self.quiet:
            self._write(message)


def make_observer(quiet: bool) -> RichObserver | PlainObserver:
    if not quiet and sys.stderr.isatty():
        return RichObserver()
    return PlainObserver(quiet)
