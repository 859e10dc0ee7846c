"""liftgate: find, judge and lift GPU architecture gates in inference stacks.

The library API: ``liftgate.scan(sources, targets) -> Report``, then the stages as calls on the
report: ``liftgate.judge.judge_scan(report)`` (verdicts), ``liftgate.chain.find_chains(report)``
(gate chains), ``liftgate.trace.match.map_trace(report, trace)`` (a run's trace), and
``liftgate.lift.workflow`` for lifting. See docs/library.md and docs/architecture.md.
"""

from __future__ import annotations

from liftgate._version import __version__

# The function, not the package of the same name: importing it binds ``liftgate.scan`` to it.
from liftgate.scan.run import scan

__all__ = ["__version__", "scan"]
