"""Text edits shared by the Python and CMake lifters: offsets into a file's text, applied back to front."""

from __future__ import annotations

import enum
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


class Granularity(str, enum.Enum):
    """Which targets a lifted gate admits besides the one asked for."""

    EXACT = "exact"  # a CUDA test: exactly the target's compilation passes
    CAPABILITY = "capability"  # exactly the target's capability
    MAJOR = "major"  # every minor of the target's major (the code compares majors)


@dataclass(frozen=True, slots=True)
class Edit:
    edits: tuple[TextEdit, ...]
    how: str  # one line for the plan: what the edit does
    granularity: Granularity


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
