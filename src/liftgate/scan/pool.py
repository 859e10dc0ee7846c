"""The scan's process pool: started on first use, its workers reset by every detector's ``reset``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# Below this many files, a process pool costs more than it saves.
POOL_THRESHOLD = 64


def default_jobs() -> int:
    """Worker processes when the user names none: the CPU count, at most 8."""
    return max(1, min(os.cpu_count() or 1, 8))


def _reset_worker() -> None:
    from liftgate.detect.registry import reset_workers

    reset_workers()


@dataclass
class Pool:
    jobs: int
    executor: Executor | None = None

    def get(self) -> Executor:
        if self.executor is None:
            self.executor = ProcessPoolExecutor(max_workers=self.jobs, initializer=_reset_worker)
        return self.executor

    def close(self) -> None:
        """Stop the workers; a later `get` starts new ones."""
        if self.executor is not None:
            self.executor.shutdown(cancel_futures=True)
            self.executor = None

    def discard(self) -> None:
        """Drop a broken pool (a worker died): the next `get` starts a new one."""
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = None


def chunks(items: Sequence[T], parts: int, min_size: int) -> list[list[T]]:
    """``items`` cut into about ``parts`` lists of at least ``min_size`` (the last may be shorter)."""
    size = max(min_size, -(-len(items) // max(parts, 1)))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
