"""Gate emission for the py-runtime detector: which evaluated conditions become gates, and the
shape of the code they guard (``if``/``else`` blocks, guards that raise or return early).

Every gate is built through the shared `GateSink` (`liftgate.detect.interface`), which counts
occurrences and makes the id; `GateEmitter` decides whether a condition is a gate at all (its
truth differs between capabilities) and reports each condition node once.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from liftgate.arch.core import ArchSet
from liftgate.detect.interface import GateSink, lone_dispatch_cleared
from liftgate.detect.py_binding import Module, collapse
from liftgate.detect.py_choices import Candidate
from liftgate.detect.pyvalues import AV, Truth3, truth_lanes
from liftgate.detect.runtime_arch import archs_for_capabilities, capabilities
from liftgate.model import Choice, Confidence, ElseKind, Evidence, Gate, GateKind, Span


@dataclass(frozen=True, slots=True)
class PendingGate:
    """A condition reported while a function is walked, kept until the walk has read it once per
    candidate of the runtime choices met in it (`liftgate.detect.py_choices`). ``split`` holds,
    when its reading differs between the candidates of a choice, each candidate with the condition
    as read through it."""

    node: ast.AST
    condition: ast.expr
    value: AV
    directive: str
    scope: tuple[str, ...]
    guard: bool
    else_kind: ElseKind
    then_span: Span | None
    else_span: Span | None
    split: tuple[tuple[Candidate, PendingGate], ...] = ()
    label: str = ""
    chain: int | None = None  # the line of the first test of the if/elif chain it belongs to

    @property
    def key(self) -> tuple[int, int]:
        return (id(self.node), id(self.condition))


class GateEmitter:
    """The py-runtime gates of one module, built through its `GateSink`; a condition node reached
    twice (a function walked again, a comprehension filter seen from two places) is reported once.

    While a function is walked, its conditions wait in a buffer (`begin`/`end`/`put_all`): the
    interpreter may walk it again once per candidate of a runtime choice, with ``collecting`` set,
    and then puts each condition back with the reading that applies."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.sink = GateSink(GateKind.PY_RUNTIME, module.package, module.version, module.path)
        self.seen: set[tuple[int, int]] = set()
        self._buffers: list[list[PendingGate]] = []
        self.collecting: dict[tuple[int, int], PendingGate] | None = None

    @property
    def gates(self) -> list[Gate]:
        """The module's gates; a branch of an if/elif chain names the chain (`Gate.dispatch`) only
        where another branch of it is a gate too."""
        return lone_dispatch_cleared(self.sink.gates)

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
        chain: int | None = None,
    ) -> None:
        pending = PendingGate(
            node, condition, value, directive, scope, guard, else_kind, then_span, else_span, chain=chain
        )
        if self.collecting is not None:
            self.collecting.setdefault(pending.key, pending)
        else:
            self.put_all([pending])

    def begin(self) -> None:
        self._buffers.append([])

    def end(self) -> list[PendingGate]:
        return self._buffers.pop()

    def put_all(self, pending: list[PendingGate]) -> None:
        """Into the enclosing function's buffer, or, outside every walk, out as gates."""
        if self._buffers:
            self._buffers[-1].extend(pending)
            return
        for item in pending:
            self._emit(item)

    def _emit(self, pending: PendingGate) -> None:
        value = pending.value
        if pending.key in self.seen:
            return
        if pending.split:
            self._emit_split(pending)
            return
        if not value.arch:
            return
        admitted_lanes = admitted_lanes_of(value, pending.guard)
        if all(admitted_lanes) or not any(admitted_lanes):
            return
        caps = [cc for cc, ok in zip(capabilities(), admitted_lanes, strict=True) if ok]
        self._gate(
            pending,
            archs_for_capabilities(caps),
            ArchSet.none(),
            Confidence.INFERRED if value.inferred else Confidence.EXACT,
            value.trail,
            value.deps,
            (),
        )

    def _emit_split(self, pending: PendingGate) -> None:
        """A condition whose reading depends on the class chosen at run time: admitted where every
        implementation admits, unknown where only some do, each one listed (`Gate.choices`)."""
        caps = capabilities()
        lanes = [admitted_lanes_of(p.value, p.guard) for _, p in pending.split]
        every = [all(lane[i] for lane in lanes) for i in range(len(caps))]
        some = [any(lane[i] for lane in lanes) for i in range(len(caps))]
        if all(every) or not any(some):
            return
        values = [p.value for _, p in pending.split]
        choices = tuple(
            Choice(
                candidate.implementation,
                candidate.path,
                candidate.line,
                archs_for_capabilities([cc for cc, ok in zip(caps, lane, strict=True) if ok]),
                ArchSet.none(),
            )
            for (candidate, _), lane in zip(pending.split, lanes, strict=True)
        )
        line = getattr(pending.node, "lineno", None)
        steps = [
            Evidence(
                f"{pending.label}: the class is chosen at run time; {len(choices)} implementation"
                f"{'s' if len(choices) != 1 else ''} in the scan",
                self.module.path,
                line,
            )
        ]
        for choice in choices[:_SHOWN_CHOICES]:
            shown = choice.admitted.render() if choice.admitted else "nothing"
            steps.append(Evidence(f"{choice.implementation}: admits {shown}", choice.path, choice.line))
        if len(choices) > _SHOWN_CHOICES:
            steps.append(
                Evidence(f"… and {len(choices) - _SHOWN_CHOICES} more (facts.choices lists all)", None, None)
            )
        trail = next((v.trail for v in values if v.arch), ())
        self._gate(
            pending,
            archs_for_capabilities([cc for cc, ok in zip(caps, every, strict=True) if ok]),
            archs_for_capabilities([cc for cc, a, s in zip(caps, every, some, strict=True) if s and not a]),
            Confidence.INFERRED if any(v.inferred for v in values) else Confidence.EXACT,
            (*steps, *trail),
            tuple(dict.fromkeys(d for v in values for d in v.deps)),
            choices,
        )

    def _gate(
        self,
        pending: PendingGate,
        admitted: ArchSet,
        unknown: ArchSet,
        confidence: Confidence,
        evidence: tuple[Evidence, ...],
        deps: tuple[str, ...],
        choices: tuple[Choice, ...],
    ) -> None:
        self.seen.add(pending.key)
        text = self.module.segment(pending.condition)
        normalized = collapse(text)
        gate_id = self.sink.identify(normalized, pending.scope)
        start = getattr(pending.node, "lineno", 1)
        end = getattr(pending.condition, "end_lineno", None) or start
        self.sink.gate(
            gate_id,
            span=Span(start, end),
            condition=normalized if len(normalized) <= 400 else normalized[:399] + "…",
            admitted=admitted,
            unknown=unknown,
            host=None,
            then_span=pending.then_span,
            else_span=pending.else_span,
            else_kind=pending.else_kind,
            confidence=confidence,
            evidence=evidence,
            depends_on=tuple(f"assumed: {d}" for d in deps),
            directive=pending.directive,
            enclosing=(),
            choices=choices,
            dispatch=pending.chain,
        )


_SHOWN_CHOICES = 12  # implementations named in the evidence; facts.choices has them all


def admitted_lanes_of(value: AV, guard: bool) -> list[bool]:
    """The lanes on which a condition admits the code it guards. A guard (``if not X: raise``)
    admits what follows it where its test can be false; any other condition where it can be true."""
    blocked = Truth3.TRUE if guard else Truth3.FALSE
    return [t != blocked for t in truth_lanes(value)]


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
    (``if not X: raise``/``if X: raise``, ``if not X: return fallback``, or a deny-list
    ``if X: return False``/``return None``/``return``, which turns the feature off where X holds).
    `liftgate.lift` edits a guard's test with the opposite polarity."""
    if stmt.orelse:
        return False
    if raises(stmt.body):
        return True
    if not terminates(stmt.body):
        return False
    return (isinstance(stmt.test, ast.UnaryOp) and isinstance(stmt.test.op, ast.Not)) or denies(stmt.body)


def denies(stmts: list[ast.stmt]) -> bool:
    """The block only turns the path off: ``return False``, ``return None`` or a bare ``return``,
    possibly after logging or a warning (the deny-list shape ``if sm_version == 120: return False``;
    not ``fast(); return``)."""
    last = stmts[-1] if stmts else None
    if not isinstance(last, ast.Return) or not all(_tells(stmt) for stmt in stmts[:-1]):
        return False
    return last.value is None or (
        isinstance(last.value, ast.Constant) and (last.value.value is False or last.value.value is None)
    )


_TELLING_CALLS = frozenset({"print", "warn"})
_TELLING_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "warning_once", "info_once"}
)


def _tells(stmt: ast.stmt) -> bool:
    """A statement that only tells: ``print(…)``, ``warnings.warn(…)``, ``logger.info(…)`` (a logging
    method on a receiver named like a logger), or a docstring-like constant."""
    if not isinstance(stmt, ast.Expr):
        return False
    value = stmt.value
    if isinstance(value, ast.Constant):
        return True
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Name):
        return func.id in _TELLING_CALLS
    if isinstance(func, ast.Attribute) and func.attr in _TELLING_METHODS:
        receiver = func.value.attr if isinstance(func.value, ast.Attribute) else getattr(func.value, "id", "")
        return receiver == "warnings" or "log" in receiver.lower()
    return False


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
