"""Evaluate a gate for one target: admitted, excluded or unknown, with the reason in words."""

from __future__ import annotations

from liftgate.arch.core import Arch
from liftgate.model import Finding, Gate, Status


def evaluate(gate: Gate, target: Arch) -> Finding:
    status = gate.status(target)
    if status is Status.ADMITTED:
        reason = f"condition is true for {target.name}"
    elif status is Status.UNKNOWN:
        parts = ", ".join(gate.depends_on) or "something liftgate cannot see"
        reason = f"for {target.name} the condition depends on {parts}"
    else:
        reason = f"condition is false for {target.name}"
    return Finding(gate=gate, target=target, status=status, reason=reason)
