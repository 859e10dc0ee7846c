"""Gate emission for the py-runtime detector: which evaluated conditions become gates, and the
shape of the code they guard (``if``/``else`` blocks, guards that raise or return early).

Every gate is built through the shared `GateSink` (`liftgate.detect.interface`), which counts
occurrences and makes the id; `GateEmitter` decides whether a condition is a gate at all (its
truth differs between capabilities) and reports each condition node once.
"""

from __future__ import annotations

import ast

from liftgate.arch.core import ArchSet
from liftgate.detect.interface import GateSink
from liftgate.detect.py_binding import Module, collapse
from liftgate.detect.pyvalues import AV, Truth3, truth_lanes
from liftgate.detect.runtime_arch import archs_for_capabilities, capabilities
from liftgate.model import Confidence, ElseKind, Gate, GateKind, Span


class GateEmitter:
    """The py-runtime gates of one module, built through its `GateSink`; a condition node reached
    twice (a function walked again, a comprehension filter seen from two places) is reported once."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.sink = GateSink(GateKind.PY_RUNTIME, module.package, module.version, module.path)
        self.seen: set[tuple[int, int]] = set()

    @property
    def gates(self) -> list[Gate]:
        return self.sink.gates

    def add(
        self,
        node: ast.AST,
        condition: ast.expr,
        value: AV,
        directive: str,
        scope: tuple[str, ...],
        *,
        guard: bool,
        else_kind: ElseKind,
        then_span: Span | None,
        else_span: Span | None,
    ) -> None:
        key = (id(node), id(condition))
        if key in self.seen or not value.arch:
            return
        truths = truth_lanes(value)
        # `if not X: raise` (a guard): the feature beyond it runs where the test can be false.
        blocked = Truth3.TRUE if guard else Truth3.FALSE
        admitted_lanes = [t != blocked for t in truths]
        if all(admitted_lanes) or not any(admitted_lanes):
            return
        self.seen.add(key)
        caps = [cc for cc, ok in zip(capabilities(), admitted_lanes, strict=True) if ok]
        text = self.module.segment(condition)
        normalized = collapse(text)
        gate_id = self.sink.identify(normalized, scope)
        start = getattr(node, "lineno", 1)
        end = getattr(condition, "end_lineno", None) or start
        self.sink.gate(
            gate_id,
            span=Span(start, end),
            condition=normalized if len(normalized) <= 400 else normalized[:399] + "…",
            admitted=archs_for_capabilities(caps),
            unknown=ArchSet.none(),
            host=None,
            then_span=then_span,
            else_span=else_span,
            else_kind=else_kind,
            confidence=Confidence.INFERRED if value.inferred else Confidence.EXACT,
            evidence=value.trail,
            depends_on=tuple(f"assumed: {d}" for d in value.deps),
            directive=directive,
            enclosing=(),
        )


def block_span(stmts: list[ast.stmt]) -> Span | None:
    if not stmts:
        return None
    return Span(stmts[0].lineno, getattr(stmts[-1], "end_lineno", None) or stmts[-1].lineno)


def terminates(stmts: list[ast.stmt]) -> bool:
    for stmt in stmts:
        if isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
            return True
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant) and not stmt.test.value:
            return True
        if isinstance(stmt, ast.If) and terminates(stmt.body) and stmt.orelse and terminates(stmt.orelse):
            return True
        if isinstance(stmt, ast.Try) and (
            terminates(stmt.finalbody)
            or (
                (terminates(stmt.body) or terminates(stmt.orelse))
                and all(terminates(h.body) for h in stmt.handlers)
            )
        ):
            return True  # `try: return op(x) except AttributeError: return False`
    return False


def is_guard(stmt: ast.If) -> bool:
    """Whether an ``if`` is a guard: the code it admits is what follows it, where its test is false
    (``if not X: raise``/``if X: raise``, or ``if not X: return fallback``). `liftgate.lift` edits
    a guard's test with the opposite polarity."""
    if stmt.orelse:
        return False
    if raises(stmt.body):
        return True
    return terminates(stmt.body) and isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not)


def raises(stmts: list[ast.stmt]) -> bool:
    """The block ends the path with an error: a raise (possibly after logging) or ``assert False``."""
    for stmt in stmts:
        if isinstance(stmt, ast.Raise):
            return True
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant) and not stmt.test.value:
            return True
        if isinstance(stmt, (ast.Return, ast.Continue, ast.Break)):
            return False
        if isinstance(stmt, ast.If) and stmt.orelse and raises(stmt.body) and raises(stmt.orelse):
            return True
    return False
