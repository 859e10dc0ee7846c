"""Text edits shared by the Python and CMake lifters: offsets into a file's text, applied back to front."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass


class NoSafeEdit(ValueError):
    """No safe edit exists for a gate: the reason goes into the plan, and the gate is skipped."""


@dataclass(frozen=True, slots=True)
class TextEdit:
    """Replace ``text[start:end]`` with ``new``."""

    start: int
    end: int
    new: str


@dataclass(frozen=True, slots=True)
class Edit:
    edits: tuple[TextEdit, ...]
    how: str  # one line for the plan: what the edit does
    granularity: str  # "capability" (exactly the target), "major" (every minor of its major)


def apply_edits(text: str, edits: Iterable[TextEdit]) -> str:
    """``text`` with ``edits`` applied; raises `NoSafeEdit` when two edits overlap."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    for a, b in itertools.pairwise(ordered):
        if b.start < a.end:
            raise NoSafeEdit("two edits overlap in one file")
    out = text
    for e in reversed(ordered):
        out = out[: e.start] + e.new + out[e.end :]
    return out
