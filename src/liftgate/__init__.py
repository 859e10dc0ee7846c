"""liftgate: find, judge and lift GPU architecture gates in inference stacks.

The library API is small: ``liftgate.scan(sources, targets) -> Report``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from liftgate.model import Report

__all__ = ["__version__", "scan"]


def scan(sources: Any, targets: Any = (), **options: Any) -> Report:
    """Scan ``sources`` (paths, wheels, sdists, ``name==version``) and evaluate gates for ``targets``."""
    from liftgate.scanner import scan as _scan

    return _scan(sources, targets, **options)
