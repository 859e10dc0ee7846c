"""The cyclic garbage collector paused around work that builds many long-lived objects without
cycles (syntax trees, lexed files, a cached detection rebuilt): left on, it rescans them on every
burst of allocations and finds nothing to free."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """The cyclic collector off inside; on the way out, back on if it was on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
