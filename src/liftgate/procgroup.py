"""Run a user's command in a process group of its own, and stop the whole group, not just its leader.

``liftgate trace`` and ``liftgate verify`` run commands such as ``sh -c 'server & client'``:
killing the shell alone on a timeout leaves its children running. `start` puts the command in a
new session (so in a process group of its own, which a Ctrl-C at the terminal no longer
reaches directly), `stop` signals the whole group (the first signal, then SIGTERM, then SIGKILL,
each after a grace in which the group has not exited), and `forwarding` passes the SIGTERM or
SIGHUP liftgate itself gets on to the group, so that stopping liftgate stops the command too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

_POLL_S = 0.05


class Terminated(Exception):
    """liftgate got SIGTERM or SIGHUP while the command ran (`forwarding`); the group got it too."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def start(args: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(args, **popen)`` in a new session: the command leads a process group of its own."""
    return subprocess.Popen(list(args), start_new_session=True, **popen)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the group; False when nobody is left in it (or it is no longer ours)."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _running(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies do not count: an orphan's zombie waits
    for init to reap it, which some containers' init never does."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return _signal_group(pgid, 0)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _wait(proc: subprocess.Popen[bytes], grace: float) -> bool:
    """Wait up to ``grace`` seconds for the leader and the rest of its group to exit; whether they did.

    A Ctrl-C meanwhile cuts the wait short (the caller moves on to a stronger signal).
    """
    deadline = time.monotonic() + grace
    try:
        while True:
            leader_done = proc.poll() is not None  # reaps the leader, whose zombie would hold the group
            if leader_done and not _running(proc.pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
    except KeyboardInterrupt:
        return False


def stop(proc: subprocess.Popen[bytes], first: int = signal.SIGTERM, grace: float = 5.0) -> int:
    """Stop ``proc``'s whole process group and return the leader's exit status.

    ``first`` goes to the group (SIGINT lets Python processes run their exit handlers), then
    SIGTERM, then SIGKILL, each only to a group that has not exited within ``grace`` seconds.
    """
    steps = [first] if first == signal.SIGTERM else [first, signal.SIGTERM]
    for signum in steps:
        if not _signal_group(proc.pid, signum) or _wait(proc, grace):
            break
    else:
        _signal_group(proc.pid, signal.SIGKILL)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            _signal_group(proc.pid, signal.SIGKILL)


def wait(proc: subprocess.Popen[bytes], timeout: float | None = None) -> int:
    """``proc.wait(timeout)``, in slices of a quarter second.

    A process-directed signal (Ctrl-C at the terminal, a ``kill`` of liftgate) goes to any thread
    of the process. Python runs the handler in the main thread, but a main thread blocked in one
    long ``waitpid`` is woken only if the signal landed on it; with another thread alive (a
    progress display, a worker pool's manager), a Ctrl-C could wait for the command to end. In
    slices, the main thread returns to Python at least every 0.25 s and the handler runs.
    Raises `subprocess.TimeoutExpired` like ``Popen.wait``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = 0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic()))
        try:
            return proc.wait(timeout=step)
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout or 0.0) from None


@contextlib.contextmanager
def forwarding(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP sent to liftgate go to ``proc``'s group as well, and
    end the block with `Terminated`. (Only in the main thread, where Python handles signals.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: FrameType | None) -> None:
        _signal_group(proc.pid, signum)
        raise Terminated(signum)

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, forward)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
