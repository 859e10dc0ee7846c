"""What every detector returns: the gates found in one file and the constructs it had to skip.

Detectors are pure functions of a file's text (and, for Python, of the package's other
modules); the scanner decides which files deserve them through each detector's byte-level
prefilter and runs them in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass

from liftgate.model import Gate, Skip


@dataclass(frozen=True, slots=True)
class Detection:
    gates: tuple[Gate, ...] = ()
    skips: tuple[Skip, ...] = ()
