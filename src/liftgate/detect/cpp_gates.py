"""cpp-runtime gates: the conditions the interpreter finds device-dependent, as `Gate`s.

The `liftgate.detect.cpp_interp.Interpreter` reports each ``if``/``else if``, check macro,
``case``, ``?:`` and boolean ``return`` whose truth differs between capabilities to a
`GateEmitter`, which words the gate (what happens otherwise, the failure message), names what it
assumed and the preprocessor conditions the host code sits in, and builds it through a `GateSink`.
A gate inside ``#if defined ENABLE_X`` carries the build macros (``ENABLE_X``) as a typed fact,
``build_macros``, beside the ``depends_on`` sentence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from liftgate.arch.core import ArchSet
from liftgate.detect.cpp_api import (
    CHECK_CMP,
    CHECK_MACRO,
    callee_name,
    failure_message,
    is_failure,
    is_false_literal,
    stream_root,
    terminates,
)
from liftgate.detect.cpp_interp import Frame, Interpreter, Lanes
from liftgate.detect.cpp_syntax import Node, Stmt, Tok, node_text
from liftgate.detect.cpp_values import ARITH, CV, UNK, ccs, lanewise, truth
from liftgate.detect.cuda import Region
from liftgate.detect.interface import GateSink, lone_dispatch_cleared
from liftgate.detect.runtime_arch import archs_for_capabilities
from liftgate.model import Confidence, ElseKind, Evidence, Gate, GateKind, Span


@dataclass
class GateEmitter:
    """The cpp-runtime gates of one file, reported by the interpreter as it walks each function."""

    package: str
    version: str | None
    path: str
    regions: list[Region]  # the file's region table (`liftgate.detect.cpp_helpers.region_lookup`)
    frame: Frame | None = None  # the function being walked: only conditions in its own body are gates
    enclosing: list[str] = field(default_factory=list)  # ids of the host gates around the statement
    seen: set[tuple[str, int, int, str]] = field(default_factory=set)
    sink: GateSink = field(init=False)
    # An if's else branch that is an if (``else if``) -> the line of the chain's first if.
    chain_heads: dict[int, tuple[Stmt, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sink = GateSink(GateKind.CPP_RUNTIME, self.package, self.version, self.path)

    @property
    def gates(self) -> list[Gate]:
        """The file's gates; a branch of an if/else-if chain names the chain (`Gate.dispatch`) only
        where another branch of it is a gate too."""
        return lone_dispatch_cleared(self.sink.gates)

    def _emit(
        self,
        interp: Interpreter,
        frame: Frame,
        cond_node: Node,
        cond: CV,
        directive: str,
        span: Span,
        *,
        invert: bool,
        else_kind: ElseKind,
        then_span: Span | None,
        else_span: Span | None,
        region: int,
        extra: Iterable[Evidence] = (),
        text: str | None = None,
        dispatch: int | None = None,
    ) -> str | None:
        key = (frame.fdef.qualname, frame.fdef.line, cond_node.start, directive)
        if key in self.seen:
            return None
        self.seen.add(key)
        lanes = ccs()
        tok_region = frame.toks[cond_node.start].region if cond_node.start < len(frame.toks) else region
        reg = self.regions[tok_region]
        # A lane whose build lacks this host code (build flags): an undecided condition there is
        # no unknown, the code is not there; a decided one stays as written.
        _present, absent = interp.presence(reg)
        admitted: list[tuple[int, int]] = []
        unknown: list[tuple[int, int]] = []
        for lane, (cc, v) in enumerate(zip(lanes, cond.lanes, strict=True)):
            t = truth(v)
            if t is UNK:
                if lane not in absent:
                    unknown.append(cc)
            elif (t is True) != invert:
                admitted.append(cc)
        if len(admitted) == len(lanes) or (not admitted and not unknown):
            return None
        shown = text if text is not None else node_text(frame.toks, cond_node)
        norm = f"{directive} {' '.join(t.text for t in frame.toks[cond_node.start : cond_node.end])}"
        gid = self.sink.identify(norm, (frame.fdef.qualname,))
        depends = [f"assumed: {a}" for a in dict.fromkeys(interp.assumptions)]
        enclosing = list(self.enclosing)
        pp_ids: list[str] = []
        build_macros: list[str] = []
        for c in reg.conditions:
            if c.gate_id:
                pp_ids.append(c.gate_id)
            if c.build_macros:
                build_macros.extend(c.build_macros)
                macros = ", ".join(c.build_macros)
                depends.append(
                    f"inside #if {c.text} (line {c.line}): {macros} set by the build (-D); "
                    "this host code exists only in builds that define it"
                )
        evidence = [*cond.trail, *extra]
        # Host code that only some targets' builds compile (flags the package passes per target):
        # the condition as written stays the gate's; who reaches it is a fact beside it.
        reach = None if reg.targets is None else reg.targets[0] | reg.targets[1]
        if reach is not None:
            passes = archs_for_capabilities(admitted) | archs_for_capabilities(unknown)
            if passes - reach:
                evidence.append(
                    Evidence(
                        "the condition admits " + ", ".join((passes - reach).names()) + ", but no build "
                        "for those targets compiles this code: the build flags it sits under are "
                        "passed only for other targets",
                        outcome=True,
                    )
                )
        self.sink.gate(
            gid,
            span=span,
            condition=shown if len(shown) <= 400 else shown[:399] + "…",
            admitted=archs_for_capabilities(admitted),
            unknown=archs_for_capabilities(unknown) if unknown else ArchSet.none(),
            then_span=then_span,
            else_span=else_span,
            else_kind=else_kind,
            confidence=Confidence.INFERRED if cond.inferred else Confidence.EXACT,
            evidence=tuple(dict.fromkeys(evidence)),
            depends_on=tuple(dict.fromkeys(depends)),
            directive=directive,
            enclosing=tuple(dict.fromkeys([*pp_ids, *enclosing])),
            build_macros=tuple(dict.fromkeys(build_macros)),
            reach=reach,
            dispatch=dispatch,
        )
        return gid

    def if_gate(
        self, interp: Interpreter, stmt: Stmt, frame: Frame, cond: CV, region: int, rest: list[Stmt]
    ) -> str | None:
        assert stmt.expr is not None
        toks = frame.toks
        then = stmt.body[0] if stmt.body else None
        other = stmt.body[1] if len(stmt.body) > 1 else None
        directive = "else if" if stmt.start > 0 and toks[stmt.start - 1].text == "else" else "if"
        close = max(stmt.cond_end - 1, stmt.start)
        span = Span(stmt.line, toks[close].line)
        then_span = Span(then.line, then.end_line) if then is not None else None
        else_span = Span(other.line, other.end_line) if other is not None else None
        extra: list[Evidence] = []
        invert = False
        known = self.chain_heads.get(id(stmt))
        head = known[1] if known is not None and known[0] is stmt else None
        if other is not None and other.kind == "if":
            head = head if head is not None else stmt.line
            self.chain_heads[id(other)] = (other, head)  # the statement kept: its id is never reused
        if other is not None:
            if is_failure(other, toks):
                else_kind = ElseKind.ERROR
                extra.append(
                    Evidence(
                        f'otherwise fails: "{failure_message(other, toks)}"',
                        self.path,
                        other.line,
                        outcome=True,
                    )
                )
            else:
                else_kind = ElseKind.FALLBACK
        elif then is not None and is_failure(then, toks):
            invert = True  # if (!supported) throw …: the code beyond runs where the test is false
            else_kind = ElseKind.ERROR
            extra.append(
                Evidence(f'fails with: "{failure_message(then, toks)}"', self.path, then.line, outcome=True)
            )
        elif then is not None and _denies(then, toks):
            invert = True  # if (sm == 120) return false; …: the code beyond is the path, turned off where the test holds
            else_kind = ElseKind.FALLBACK
        elif terminates(then):
            else_kind, found = _after_dispatch(rest, toks)
            if found is not None:
                how = "fails" if else_kind is ElseKind.ERROR else "if no later branch matches, fails"
                extra.append(
                    Evidence(
                        f'otherwise {how}: "{failure_message(found, toks)}"',
                        self.path,
                        found.line,
                        outcome=True,
                    )
                )
        else:
            else_kind = ElseKind.NONE
        if invert:  # a guard: what it guards is the code after it; its body is the exclusion
            then_span, else_span = None, then_span
        return self._emit(
            interp,
            frame,
            stmt.expr,
            cond,
            directive,
            span,
            invert=invert,
            else_kind=else_kind,
            then_span=then_span,
            else_span=else_span,
            region=region,
            extra=extra,
            dispatch=head,
        )

    def check_statement(
        self, interp: Interpreter, stmt: Stmt, frame: Frame, mask: Lanes, region: int
    ) -> None:
        """``TORCH_CHECK(cond, msg…)``, ``TVM_FFI_ICHECK_EQ(major, 10) << msg``, ``assert(cond)``."""
        assert stmt.expr is not None
        root = stream_root(stmt.expr)
        name = callee_name(stmt.expr)
        m = CHECK_MACRO.match(name) if name else None
        if m is None or root.kind != "call" or len(root.args) < 2:
            return
        toks = frame.toks
        interp.assumptions = []
        if m.group("cmp"):
            if len(root.args) < 3:
                return
            op = CHECK_CMP[m.group("cmp")]
            a = interp.eval(root.args[1], frame, mask)
            b = interp.eval(root.args[2], frame, mask)
            fn = ARITH[op]
            cond = lanewise(fn, a, b)
            text = f"{node_text(toks, root.args[1])} {op} {node_text(toks, root.args[2])}"
            cond_node = Node("bin", root.args[1].start, root.args[2].end, op=op, args=root.args[1:3])
        else:
            cond_node = root.args[1]
            if is_false_literal(cond_node):
                return
            cond = interp.eval(cond_node, frame, mask)
            text = None
        if not cond.arch:
            return
        message = failure_message(stmt, toks)
        extra = [Evidence(f'fails with: "{message}"', self.path, stmt.line, outcome=True)] if message else []
        self._emit(
            interp,
            frame,
            cond_node,
            cond,
            name,
            Span(stmt.line, stmt.end_line),
            invert=False,
            else_kind=ElseKind.ERROR,
            then_span=None,
            else_span=None,
            region=region,
            extra=extra,
            text=text,
        )

    def case_gate(
        self,
        interp: Interpreter,
        stmt: Stmt,
        label: Stmt,
        frame: Frame,
        eq: CV,
        region: int,
        segments: list[tuple[list[Stmt], list[Stmt]]],
    ) -> None:
        assert stmt.expr is not None and label.expr is not None
        toks = frame.toks
        default = next((stmts for labels, stmts in segments if any(lb.expr is None for lb in labels)), None)
        extra: list[Evidence] = []
        if default is None:
            else_kind = ElseKind.NONE
        elif default and is_failure(Stmt("block", 0, 0, 0, 0, body=default), toks):
            else_kind = ElseKind.ERROR
            failing = default[-1]
            extra.append(
                Evidence(
                    f'default fails: "{failure_message(failing, toks)}"',
                    self.path,
                    failing.line,
                    outcome=True,
                )
            )
        else:
            else_kind = ElseKind.FALLBACK
        text = f"{node_text(toks, stmt.expr)} == {node_text(toks, label.expr)}"
        self._emit(
            interp,
            frame,
            label.expr,
            eq,
            "case",
            Span(label.line, label.end_line),
            invert=False,
            else_kind=else_kind,
            then_span=None,
            else_span=None,
            region=region,
            extra=extra,
            text=text,
        )

    def ternary_gate(self, interp: Interpreter, node: Node, frame: Frame, cond: CV) -> None:
        line = frame.toks[node.start].line
        self._emit(
            interp,
            frame,
            node.args[0],
            cond,
            "?:",
            Span(line, frame.toks[max(node.args[0].end - 1, node.start)].line),
            invert=False,
            else_kind=ElseKind.FALLBACK,
            then_span=None,
            else_span=None,
            region=frame.toks[node.start].region,
        )

    def boolean_return(self, interp: Interpreter, stmt: Stmt, frame: Frame, value: CV, region: int) -> None:
        if stmt.expr is None or not value.arch:
            return
        if not all(v is UNK or isinstance(v, bool) for v in value.lanes):
            return
        self._emit(
            interp,
            frame,
            stmt.expr,
            value,
            "return",
            Span(stmt.line, stmt.end_line),
            invert=False,
            else_kind=ElseKind.NONE,
            then_span=None,
            else_span=None,
            region=region,
        )


def _denies(stmt: Stmt, toks: tuple[Tok, ...]) -> bool:
    """The branch only turns the path off: ``return false;``, ``return nullptr;`` or ``return;`` alone
    (the deny-list shape ``if (sm == 120) return false;``; not ``{ fast(); return; }``)."""
    while stmt.kind == "block" and len(stmt.body) == 1:
        stmt = stmt.body[0]
    if stmt.kind != "return":
        return False
    value = [t.text for t in toks[stmt.start + 1 : stmt.end] if t.text != ";"]
    return value in ([], ["false"], ["nullptr"], ["NULL"])


def _after_dispatch(rest: list[Stmt], toks: tuple[Tok, ...]) -> tuple[ElseKind, Stmt | None]:
    """What runs after an early-returning ``if`` for the devices it does not admit.

    Later dispatch arms (``if (…) { …; return; }``) are skipped over: a device they do not take
    falls further. A failure right after is ``error``; a failure after other arms is still
    ``fallback`` (another arm may take the device), with the failure as evidence; nothing at all
    is ``none``; any other code is ``fallback``.
    """
    skipped = False
    for stmt in rest:
        if stmt.kind == "if" and len(stmt.body) == 1 and terminates(stmt.body[0]):
            skipped = True
            continue
        if is_failure(stmt, toks):
            return (ElseKind.FALLBACK if skipped else ElseKind.ERROR), stmt
        return ElseKind.FALLBACK, None
    return (ElseKind.FALLBACK if skipped else ElseKind.NONE), None
