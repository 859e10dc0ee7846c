"""The cpp-runtime interpreter: executes C++ function bodies over lanes, one per known capability.

Function bodies are executed abstractly with a mask of the lanes that can reach each statement,
so ``major * 10 + minor``, local variables, early returns, ``static`` caches, ``std::pair`` results
and member fields set in one method and tested in another resolve exactly. Helpers of the
package (`liftgate.detect.cpp_helpers.HelperIndex`) are followed up to `MAX_CALL_DEPTH` calls
deep. When walking a function for its gates, the interpreter reports each condition whose truth
differs between lanes to a `liftgate.detect.cpp_gates.GateEmitter`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from liftgate.detect.cpp_api import (
    ATTRIBUTE_CALLS,
    CHECK_MACRO,
    PAIR_MAKERS,
    PROPS_OUT_CALLS,
    PROPS_RETURNING,
    infer_helper,
    inferable,
    is_failure,
    last_name,
)
from liftgate.detect.cpp_syntax import (
    ExprParser,
    FuncDef,
    Node,
    Stmt,
    StmtParser,
    Tok,
    TooDeep,
    join_tokens,
    node_text,
)
from liftgate.detect.cpp_values import (
    ARITH,
    CV,
    UNK,
    UNKNOWN,
    Props,
    ccs,
    component,
    const,
    eq,
    lanewise,
    member_of,
    merge_trails,
    num,
    per_cc,
    prepend,
    truth,
)
from liftgate.detect.cuda import Region
from liftgate.detect.runtime_arch import archs_for_capabilities
from liftgate.model import Evidence

if TYPE_CHECKING:
    from liftgate.detect.cpp_gates import GateEmitter
    from liftgate.detect.cpp_helpers import HelperIndex

MAX_CALL_DEPTH = 6
STEP_BUDGET = 200_000  # expression evaluations per walked function, callees included
# Statements and expressions being executed, nested in each other (callees included): past it the
# function is not followed. Parsing already bounds one function (cpp_syntax.MAX_NESTING); this
# bounds a chain of helpers, each nested deep, and keeps the walk inside Python's recursion limit.
MAX_DEPTH = 250

# Names that read as data members (sm_, m_sm, mSM): a value assigned to one in a method is seen
# by the other methods. Other undeclared names are left alone (a global, or a declaration that
# liftgate did not read as one).
_MEMBER_NAME = re.compile(r"^(?:m_\w+|m[A-Z]\w*|\w+_)$")


# -- the interpreter --------------------------------------------------------------------------

Lanes = frozenset[int]  # indexes of lanes (see cpp_values.ccs)

ONE_REGION = [Region(0, True, ())]
_TOOLKIT_VERSIONS = frozenset({"CUDA_VERSION", "CUDART_VERSION"})  # host code's view of the toolkit
_PRESENCE: dict[
    tuple[int, int], tuple[Lanes, Lanes]
] = {}  # (targets' masks) -> (present, absent) lanes  # the region table of a file read without preprocessor regions


@dataclass
class Frame:
    """One function being executed: its tokens, variables, returns and the fields it sets."""

    fdef: FuncDef
    toks: tuple[Tok, ...]
    env: dict[str, CV]
    regions: list[Region] = field(default_factory=lambda: ONE_REGION)
    returns: list[tuple[Lanes, CV, bool]] = field(default_factory=list)  # lanes, value, assumed
    breaks: list[set[int]] = field(default_factory=list)
    fields: dict[str, CV] = field(default_factory=dict)
    assumed_depth: int = 0  # > 0 inside a branch taken on a favourable assumption


class StepBudget(Exception):
    """STEP_BUDGET expression evaluations spent: the walk of the function ends."""


class _DepthExceeded(TooDeep):
    """MAX_DEPTH reached while executing: the walk of the whole function ends."""


class Interpreter:
    """Executes function bodies over lanes; reports gates to a sink when asked to."""

    def __init__(self, index: HelperIndex, path: str, regions: list[Region]) -> None:
        self.index = index
        self.path = path
        self.regions = regions
        self.all_lanes: Lanes = frozenset(range(len(ccs())))
        self.sink: GateEmitter | None = None
        self.depth = 0
        self.steps = 0
        self.nesting = 0  # statements and expressions in execution (see MAX_DEPTH)
        self.assumptions: list[str] = []
        self._memo: dict[tuple[object, ...], CV] = {}
        self._parsed: dict[tuple[str, str, int], Stmt | TooDeep] = {}
        # The file's own functions (set by `liftgate.detect.cpp_runtime`): one called with a
        # device-dependent argument is run with it, and the call is recorded here so its branches
        # on that parameter are reported as parametric gates (first call site per function).
        self.local_functions: dict[str, list[FuncDef]] = {}
        self.parametric_calls: dict[tuple[str, int], tuple[FuncDef, list[CV], Evidence]] = {}

    # -- entry points -----------------------------------------------------------------------
    def run(self, fdef: FuncDef, args: list[CV], collect: GateEmitter | None) -> tuple[CV, dict[str, CV]]:
        """The function's return value for these arguments, and the fields it sets."""
        self.sink = collect
        self.steps = 0
        try:
            return self._call(fdef, args)
        except (StepBudget, TooDeep, RecursionError):
            return UNKNOWN, {}
        finally:
            self.sink = None
            self.nesting = 0

    def body(self, fdef: FuncDef) -> Stmt:
        """The function's parsed body (parsed once; a body too deep to read raises TooDeep each time)."""
        key = (fdef.path, fdef.qualname, fdef.line)
        block = self._parsed.get(key)
        if block is None:
            try:
                block, _ = StmtParser(fdef.body).block(0)
            except TooDeep as exc:
                block = exc
            self._parsed[key] = block
        if isinstance(block, TooDeep):
            raise block
        return block

    def _enter(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise _DepthExceeded(
                f"nested deeper than {MAX_DEPTH} statements and expressions (helpers included)"
            )

    def _call(self, fdef: FuncDef, args: list[CV]) -> tuple[CV, dict[str, CV]]:
        env: dict[str, CV] = {}
        for name, value in zip(fdef.params, args, strict=False):
            if name:
                env[name] = value
        # A helper's tokens refer to the regions its file was read with (`HelperIndex.add_source`).
        frame = Frame(fdef, fdef.body, env, self.index.region_tables.get(fdef.path, ONE_REGION))
        for name, toks in fdef.inits:  # member initialisers: sm_(getSMVersion())
            value = self.eval(ExprParser(toks, 0, len(toks)).parse(), Frame(fdef, toks, env), self.all_lanes)
            frame.fields[name] = value
        body = self.body(fdef)
        self.exec_block(body.body, self.all_lanes, frame, 0)
        return self._return_value(frame), frame.fields

    def return_value(self, frame: Frame) -> CV:
        """What a function walked in ``frame`` returns, lane by lane (unknown where returns differ)."""
        return self._return_value(frame)

    def _return_value(self, frame: Frame) -> CV:
        n = len(self.all_lanes)
        certain = [r for r in frame.returns if not r[2]]
        chosen = certain if any(r[1].lanes for r in certain) and certain else frame.returns
        lanes: list[object] = []
        trails: list[CV] = []
        inferred = False
        for lane in range(n):
            seen: list[object] = []
            for mask, value, _ in chosen:
                if lane in mask:
                    v = value.lanes[lane]
                    if not any(
                        v is s or (v is not UNK and s is not UNK and type(v) is type(s) and v == s)
                        for s in seen
                    ):
                        seen.append(v)
            lanes.append(seen[0] if len(seen) == 1 else UNK)
        for _, value, _ in chosen:
            if value.arch:
                trails.append(value)
                inferred = inferred or value.inferred
        return CV(tuple(lanes), merge_trails(*trails), inferred)

    # -- statements ---------------------------------------------------------------------------
    def _region(self, stmt: Stmt, frame: Frame) -> int:
        return frame.toks[stmt.start].region if stmt.start < len(frame.toks) else 0

    def exec_block(self, stmts: list[Stmt], mask: Lanes, frame: Frame, region: int) -> Lanes:
        """Run statements for the lanes in ``mask``; the lanes that may fall through at the end."""
        k = 0
        while k < len(stmts) and mask:
            stmt = stmts[k]
            r = self._region(stmt, frame)
            if r != region and r < len(frame.regions) and frame.regions[r].host is None:
                # Host code that exists only if the build says so: a group of statements that may
                # or may not be there. Lanes may skip it.
                group = [stmt]
                while k + 1 < len(stmts) and self._region(stmts[k + 1], frame) == r:
                    k += 1
                    group.append(stmts[k])
                present, absent = self.presence(frame.regions[r])
                skipping = mask - present  # lanes whose build may lack the group (or does)
                before = dict(frame.env)
                after = self._exec_seq(group, mask - absent, frame, r, stmts[k + 1 :])
                frame.env = self._merge_env(before, skipping, frame.env, after)
                mask = skipping | after
                k += 1
                continue
            mask = self.exec_stmt(stmt, mask, frame, region, stmts[k + 1 :])
            k += 1
        return mask

    def presence(self, region: Region) -> tuple[Lanes, Lanes]:
        """The lanes whose build compiles host code the build decides (``region.targets``: the
        package passes a flag only for some targets) and those whose build leaves it out; a lane
        whose capability has targets of both kinds (``sm_120`` and ``sm_120a``) is in neither."""
        if region.targets is None:
            return frozenset(), frozenset()
        key = (region.targets[0].mask, region.targets[1].mask)
        known = _PRESENCE.get(key)
        if known is None:
            yes, maybe = region.targets
            present: set[int] = set()
            absent: set[int] = set()
            for lane, cc in enumerate(ccs()):
                archs = archs_for_capabilities((cc,))
                if archs and not archs - yes:
                    present.add(lane)
                elif not archs & (yes | maybe):
                    absent.add(lane)
            known = (frozenset(present), frozenset(absent))
            _PRESENCE[key] = known
        return known

    def _exec_seq(self, stmts: list[Stmt], mask: Lanes, frame: Frame, region: int, rest: list[Stmt]) -> Lanes:
        for j, stmt in enumerate(stmts):
            if not mask:
                break
            mask = self.exec_stmt(stmt, mask, frame, region, [*stmts[j + 1 :], *rest])
        return mask

    def _merge_env(self, a: dict[str, CV], a_lanes: Lanes, b: dict[str, CV], b_lanes: Lanes) -> dict[str, CV]:
        """Variables after two paths: lane-wise, from the path(s) a lane may come by."""
        out: dict[str, CV] = {}
        for name in a.keys() | b.keys():
            va, vb = a.get(name), b.get(name)
            if va is None or vb is None or va is vb:
                out[name] = vb if va is None else va  # type: ignore[assignment]
                continue
            lanes: list[object] = []
            for lane in range(len(self.all_lanes)):
                x, y = va.lanes[lane], vb.lanes[lane]
                in_a, in_b = lane in a_lanes, lane in b_lanes
                if in_a and in_b:
                    same = x is y or (x is not UNK and y is not UNK and type(x) is type(y) and x == y)
                    lanes.append(x if same else UNK)
                elif in_b:
                    lanes.append(y)
                else:
                    lanes.append(x)
            out[name] = CV(tuple(lanes), merge_trails(va, vb), va.inferred or vb.inferred)
        return out

    def exec_stmt(self, stmt: Stmt, mask: Lanes, frame: Frame, region: int, rest: list[Stmt]) -> Lanes:
        self._enter()
        try:
            return self._exec_stmt(stmt, mask, frame, region, rest)
        finally:
            self.nesting -= 1

    def _exec_stmt(self, stmt: Stmt, mask: Lanes, frame: Frame, region: int, rest: list[Stmt]) -> Lanes:
        kind = stmt.kind
        if kind == "block":
            return self.exec_block(stmt.body, mask, frame, region)
        if kind == "decl":
            self._declare(stmt, mask, frame)
            for sub in stmt.body:
                self._declare(sub, mask, frame)
            return mask
        if kind == "expr":
            assert stmt.expr is not None
            if self.sink is not None and frame is self.sink.frame:
                self.sink.check_statement(self, stmt, frame, mask, region)
            self.assumptions = []
            self.eval(stmt.expr, frame, mask)
            return frozenset() if is_failure(stmt, frame.toks) else mask
        if kind == "return":
            value = self.eval(stmt.expr, frame, mask) if stmt.expr is not None else UNKNOWN
            if self.sink is not None and frame is self.sink.frame and stmt.expr is not None:
                self.sink.boolean_return(self, stmt, frame, value, region)
            frame.returns.append((mask, value, frame.assumed_depth > 0))
            return frozenset()
        if kind == "throw":
            return frozenset()
        if kind in ("break", "continue"):
            if frame.breaks:
                frame.breaks[-1].update(mask)
            return frozenset()
        if kind == "if":
            return self._if(stmt, mask, frame, region, rest)
        if kind == "switch":
            return self._switch(stmt, mask, frame, region)
        if kind == "loop":
            return self._loop(stmt, mask, frame, region)
        if kind == "try":
            after = self.exec_block(stmt.body[0].body, mask, frame, region) if stmt.body else mask
            for handler in stmt.body[1:]:
                saved = dict(frame.env)
                self.exec_block(handler.body, mask, frame, region)
                frame.env = saved
            return after
        return mask  # case labels outside a switch, empty statements

    def _declare(self, stmt: Stmt, mask: Lanes, frame: Frame) -> None:
        if stmt.expr is not None:
            value = self.eval(stmt.expr, frame, mask)
        elif "cudaDeviceProp" in stmt.type_text or "CUdevprop" in stmt.type_text:
            value = per_cc(
                lambda cc: Props(cc),
                Evidence(f"{stmt.type_text} {stmt.names[0]}", frame.fdef.path, stmt.line),
            )
        else:
            value = UNKNOWN
        if value.arch and stmt.expr is not None:
            shown = f"{', '.join(stmt.names)} = {node_text(frame.toks, stmt.expr)}"
            value = CV(
                value.lanes,
                prepend(Evidence(shown, frame.fdef.path, stmt.line), value.trail),
                value.inferred,
            )
        if len(stmt.names) == 1:
            frame.env[stmt.names[0]] = value
            return
        for k, name in enumerate(stmt.names):  # auto [major, minor] = ...
            frame.env[name] = lanewise(lambda v, k=k: component(v, k), value)

    def _if(self, stmt: Stmt, mask: Lanes, frame: Frame, region: int, rest: list[Stmt]) -> Lanes:
        assert stmt.expr is not None
        self.assumptions = []
        cond = self.eval(stmt.expr, frame, mask)
        truths = [truth(v) for v in cond.lanes]
        gate_id_: str | None = None
        if self.sink is not None and frame is self.sink.frame and cond.arch:
            gate_id_ = self.sink.if_gate(self, stmt, frame, cond, region, rest)
        then = stmt.body[0] if stmt.body else None
        other = stmt.body[1] if len(stmt.body) > 1 else None
        if self.sink is not None and gate_id_ is not None:
            self.sink.enclosing.append(gate_id_)
        try:
            if cond.unknown and then is not None:
                # A fact liftgate cannot see, not the device: walk both sides; where one side only
                # leaves the function (an error path, a cached early return), assume the other.
                saved = dict(frame.env)
                frame.assumed_depth += 1
                maybe_out = self.exec_stmt(then, mask, frame, region, rest)
                frame.assumed_depth -= 1
                then_env = frame.env
                frame.env = dict(saved)
                else_out = self.exec_stmt(other, mask, frame, region, rest) if other is not None else mask
                if not maybe_out and else_out:
                    return else_out
                if not else_out and maybe_out:
                    frame.env = then_env
                    return maybe_out
                frame.env = self._merge_env(then_env, maybe_out, frame.env, else_out)
                return maybe_out | else_out
            true_lanes = frozenset(lane for lane in mask if truths[lane] is not False)
            false_lanes = frozenset(lane for lane in mask if truths[lane] is not True)
            saved = dict(frame.env)
            then_out: Lanes = frozenset()
            if then is not None and true_lanes:
                then_out = self.exec_stmt(then, true_lanes, frame, region, rest)
            elif then is None:
                then_out = true_lanes
            then_env = frame.env
            frame.env = dict(saved)
            else_out = false_lanes
            if other is not None and false_lanes:
                else_out = self.exec_stmt(other, false_lanes, frame, region, rest)
            frame.env = self._merge_env(then_env, then_out, frame.env, else_out)
            return then_out | else_out
        finally:
            if self.sink is not None and gate_id_ is not None:
                self.sink.enclosing.pop()

    def _switch(self, stmt: Stmt, mask: Lanes, frame: Frame, region: int) -> Lanes:
        assert stmt.expr is not None
        value = self.eval(stmt.expr, frame, mask)
        body = stmt.body[0].body if stmt.body and stmt.body[0].kind == "block" else stmt.body
        # Segments: the labels before a run of statements, and the statements.
        segments: list[tuple[list[Stmt], list[Stmt]]] = []
        for s in body:
            if s.kind == "case":
                if not segments or segments[-1][1]:
                    segments.append(([], []))
                segments[-1][0].append(s)
            elif segments:
                segments[-1][1].append(s)
        matched: set[int] = set()
        entries: list[Lanes] = []
        default_index: int | None = None
        for k, (labels, _) in enumerate(segments):
            lanes: set[int] = set()
            for label in labels:
                if label.expr is None:
                    default_index = k
                    continue
                label_value = self.eval(label.expr, frame, mask)
                matches = lanewise(eq, value, label_value)
                if self.sink is not None and frame is self.sink.frame and matches.arch:
                    self.sink.case_gate(self, stmt, label, frame, matches, region, segments)
                for lane in mask:
                    t = matches.lanes[lane]
                    if t is not False:
                        lanes.add(lane)
                    if t is True:
                        matched.add(lane)
            entries.append(frozenset(lanes))
        if default_index is not None:
            entries[default_index] = entries[default_index] | (mask - matched)
        frame.breaks.append(set())
        out: set[int] = set()
        carry: Lanes = frozenset()
        saved = dict(frame.env)
        for k, (_, stmts) in enumerate(segments):
            lanes_in = entries[k] | carry
            if not lanes_in:
                carry = frozenset()
                continue
            frame.env = dict(saved)
            carry = self.exec_block(stmts, lanes_in, frame, region)
        out |= frame.breaks.pop()
        out |= carry
        if default_index is None:
            out |= mask - matched
        frame.env = saved
        return frozenset(out)

    def _loop(self, stmt: Stmt, mask: Lanes, frame: Frame, region: int) -> Lanes:
        # One pass over the body with every variable it assigns unknown: enough to find the gates
        # inside; the values after the loop are unknown too.
        assigned = _assigned_names(stmt, frame.toks)
        for name in assigned:
            if name in frame.env:
                frame.env[name] = UNKNOWN
        frame.breaks.append(set())
        if stmt.body:
            self.exec_stmt(stmt.body[0], mask, frame, region, [])
        frame.breaks.pop()
        for name in assigned:
            if name in frame.env:
                frame.env[name] = UNKNOWN
        return mask

    # -- expressions --------------------------------------------------------------------------
    def eval(self, node: Node | None, frame: Frame, mask: Lanes) -> CV:
        if node is None:
            return UNKNOWN
        self.steps += 1
        if self.steps > STEP_BUDGET:
            raise StepBudget
        self._enter()
        try:
            return self._eval(node, frame, mask)
        finally:
            self.nesting -= 1

    def _eval(self, node: Node, frame: Frame, mask: Lanes) -> CV:
        kind = node.kind
        if kind == "num":
            return const(node.value) if node.value is not None else UNKNOWN
        if kind == "str":
            return const(node.value)
        if kind == "name":
            return self._name(str(node.value), frame)
        if kind == "bin":
            return self._binary(node, frame, mask)
        if kind == "unary":
            return self._unary(node, frame, mask)
        if kind == "call":
            return self._call_expr(node, frame, mask)
        if kind == "member":
            obj_node = node.args[0]
            member = last_name(str(node.value))
            if obj_node.kind == "name" and obj_node.value == "this":
                return self._name(member, frame)
            path = _member_path(node)
            if path is not None and path in frame.env:
                return frame.env[path]
            obj = self.eval(obj_node, frame, mask)
            if obj.unknown and member not in _GENERIC_MEMBERS:
                key = "." + member
                return frame.fields.get(key) or self.index.fields.get(key) or UNKNOWN
            return lanewise(lambda v: member_of(v, member), obj)
        if kind == "tern":
            cond = self.eval(node.args[0], frame, mask)
            a = self.eval(node.args[1], frame, mask)
            b = self.eval(node.args[2], frame, mask)
            if self.sink is not None and frame is self.sink.frame and cond.arch:
                self.sink.ternary_gate(self, node, frame, cond)
            lanes = []
            for lane in range(len(self.all_lanes)):
                t = truth(cond.lanes[lane])
                lanes.append(a.lanes[lane] if t is True else (b.lanes[lane] if t is False else UNK))
            return CV(tuple(lanes), merge_trails(cond, a, b), cond.inferred or a.inferred or b.inferred)
        if kind == "assign":
            value = self.eval(node.args[1], frame, mask)
            if node.op != "=":
                current = self.eval(node.args[0], frame, mask)
                fn = ARITH.get(node.op[:-1])
                value = lanewise(fn, current, value) if fn else UNKNOWN
            self._assign(node.args[0], value, frame, mask, source=node.args[1])
            return value
        if kind == "init":
            items = [self.eval(a, frame, mask) for a in node.args]
            if not items:
                return UNKNOWN
            return lanewise(lambda *vs: tuple(vs), *items)
        if kind == "index":
            self.eval(node.args[0], frame, mask)
            return UNKNOWN
        if kind == "lambda" and node.value is not None and self.sink is not None and frame is self.sink.frame:
            self._lambda_body(int(str(node.value)), frame, mask)
        return UNKNOWN

    def _lambda_body(self, brace: int, frame: Frame, mask: Lanes) -> None:
        """Walk a lambda's body for its gates (``DISPATCH_SWITCH(…, [&] { if (is_sm8x) … })``): it
        sees the enclosing variables; what it returns or assigns stays inside it."""
        block, _ = StmtParser(frame.toks).block(brace)
        saved_env, saved_returns, saved_breaks = frame.env, frame.returns, frame.breaks
        frame.env, frame.returns, frame.breaks = dict(saved_env), [], []
        try:
            self.exec_block(block.body, mask, frame, frame.toks[brace].region)
        finally:
            frame.env, frame.returns, frame.breaks = saved_env, saved_returns, saved_breaks

    def _name(self, name: str, frame: Frame) -> CV:
        if name in frame.env:
            return frame.env[name]
        short = last_name(name)
        if short in frame.fields:
            return frame.fields[short]
        if name in ("true", "false"):
            return const(name == "true")
        if name in ("nullptr", "NULL"):
            return const(0)
        if short in self.index.fields:
            return self.index.fields[short]
        if name in _TOOLKIT_VERSIONS and self.index.cuda_version is not None:
            major, minor = self.index.cuda_version
            self.assumptions.append(
                f"{name} = {major * 1000 + minor * 10} (assumed for CUDA {major}.{minor})"
            )
            return const(major * 1000 + minor * 10)
        return UNKNOWN

    def _assign(
        self,
        target: Node,
        value: CV,
        frame: Frame,
        mask: Lanes,
        note: bool = True,
        source: Node | None = None,
    ) -> None:
        if note and value.arch and value.trail:  # the step shows in the gate's chain
            line = frame.toks[target.start].line if target.start < len(frame.toks) else None
            shown = f"{node_text(frame.toks, target)} = {node_text(frame.toks, source) if source else '…'}"
            value = CV(
                value.lanes, prepend(Evidence(shown, frame.fdef.path, line), value.trail), value.inferred
            )
        this = target.kind == "member" and target.args[0].kind == "name" and target.args[0].value == "this"
        if target.kind == "member" and not this:
            # params.arch = major * 10 + minor: the object's field here, and any object's field of
            # that name elsewhere (a struct filled in one function and read in another).
            path = _member_path(target)
            if path is None or not value.arch:
                return
            frame.env[path] = value
            if last_name(str(target.value)) not in _GENERIC_MEMBERS:
                frame.fields.setdefault("." + last_name(str(target.value)), value)
            return
        if this:
            name = last_name(str(target.value))
        elif target.kind == "name":
            name = str(target.value)
        elif target.kind == "unary" and target.op == "*" and target.args[0].kind == "name":
            name = str(target.args[0].value)  # *out = value: an out-parameter
        else:
            return
        old = frame.env.get(name)
        local = old is not None or name in frame.fdef.params
        if old is not None and mask != self.all_lanes:
            lanes = tuple(value.lanes[k] if k in mask else old.lanes[k] for k in range(len(self.all_lanes)))
            value = CV(lanes, merge_trails(old, value), old.inferred or value.inferred)
        frame.env[name] = value
        if not local and (this or _MEMBER_NAME.match(name)):
            frame.fields[last_name(name)] = value

    def _binary(self, node: Node, frame: Frame, mask: Lanes) -> CV:
        op = node.op
        a = self.eval(node.args[0], frame, mask)
        b = self.eval(node.args[1], frame, mask)
        if op in ("&&", "||"):
            # A fact that does not depend on the device is assumed favourable: the gate then shows
            # what the device decides, and names the assumption.
            if a.unknown and b.arch:
                self.assumptions.append(node_text(frame.toks, node.args[0]))
                return b
            if b.unknown and a.arch:
                self.assumptions.append(node_text(frame.toks, node.args[1]))
                return a
            lanes = []
            for x, y in zip(a.lanes, b.lanes, strict=True):
                tx, ty = truth(x), truth(y)
                if op == "&&":
                    lanes.append(
                        False
                        if (tx is False or ty is False)
                        else (True if (tx is True and ty is True) else UNK)
                    )
                else:
                    lanes.append(
                        True
                        if (tx is True or ty is True)
                        else (False if (tx is False and ty is False) else UNK)
                    )
            return CV(tuple(lanes), merge_trails(a, b), a.inferred or b.inferred)
        fn = ARITH.get(op)
        if fn is None:
            return UNKNOWN
        return lanewise(fn, a, b)

    def _unary(self, node: Node, frame: Frame, mask: Lanes) -> CV:
        op = node.op
        value = self.eval(node.args[0], frame, mask)
        if op == "!":
            return lanewise(lambda v: not truth(v) if truth(v) is not UNK else UNK, value)
        if op == "-":
            return lanewise(lambda v: -num(v), value)  # type: ignore[operator]
        if op == "~":
            return lanewise(lambda v: ~num(v), value)  # type: ignore[operator]
        if op in ("cast", "+", "*", "&"):
            return value
        return UNKNOWN

    def _call_expr(self, node: Node, frame: Frame, mask: Lanes) -> CV:
        callee = node.args[0]
        args = node.args[1:]
        if callee.kind == "member":
            # obj.method(...): a value's own accessors; otherwise unknown (arguments still run).
            member = last_name(str(callee.value))
            obj = self.eval(callee.args[0], frame, mask)
            for a in args:
                self.eval(a, frame, mask)
            if member in ("value", "get", "operator*") and not args:
                return obj
            return UNKNOWN
        if callee.kind != "name":
            for a in args:
                self.eval(a, frame, mask)
            return UNKNOWN
        full = str(callee.value)
        name = last_name(full)
        line = frame.toks[node.start].line if node.start < len(frame.toks) else None
        path = frame.fdef.path
        if name in ATTRIBUTE_CALLS and len(args) >= 2:
            attr = node_text(frame.toks, args[1])
            part = (
                0
                if ("Major" in attr or "MAJOR" in attr)
                else (1 if ("Minor" in attr or "MINOR" in attr) else None)
            )
            if (part is not None and "apability" in attr) or "APABILITY" in attr:
                value = per_cc(lambda cc: cc[part], Evidence(f"{name}({attr})", path, line))  # type: ignore[index]
                self._assign_out(args[0], value, frame, mask)
            return UNKNOWN
        if name in PROPS_OUT_CALLS and args:
            value = per_cc(lambda cc: Props(cc), Evidence(f"{name}()", path, line))
            self._assign_out(args[0], value, frame, mask)
            return UNKNOWN
        if name == "cuDeviceComputeCapability" and len(args) >= 2:
            ev = Evidence(f"{name}()", path, line)
            self._assign_out(args[0], per_cc(lambda cc: cc[0], ev), frame, mask)
            self._assign_out(args[1], per_cc(lambda cc: cc[1], ev), frame, mask)
            return UNKNOWN
        if name == "nvmlDeviceGetCudaComputeCapability" and len(args) >= 3:
            ev = Evidence(f"{name}()", path, line)
            self._assign_out(args[1], per_cc(lambda cc: cc[0], ev), frame, mask)
            self._assign_out(args[2], per_cc(lambda cc: cc[1], ev), frame, mask)
            return UNKNOWN
        if name in PROPS_RETURNING:
            for a in args:
                self.eval(a, frame, mask)
            return per_cc(lambda cc: Props(cc), Evidence(f"{full}()", path, line))
        values = [self.eval(a, frame, mask) for a in args]
        if name in ("static_cast", "reinterpret_cast", "const_cast", "int", "int32_t", "int64_t", "unsigned"):
            return values[0] if values else UNKNOWN
        if name in PAIR_MAKERS and values:
            return lanewise(lambda *vs: tuple(vs), *values)
        if name == "get" and values:
            m = re.search(r"get\s*<\s*(\d+)\s*>", node_text(frame.toks, callee))
            if m:
                k = int(m.group(1))
                return lanewise(lambda v: component(v, k), values[0])
        if name in ("min", "max") and len(values) == 2:
            pick: Callable[[Any, Any], object] = min if name == "min" else max
            return lanewise(lambda a, b: pick(num(a), num(b)), *values)
        local = self.local_functions.get(name)
        if local and self.sink is not None and any(v.arch for v in values):
            fdef = _closest(local, self.path, len(values))
            site = Evidence(f"called as {node_text(frame.toks, node)}", frame.fdef.path, line)
            self.parametric_calls.setdefault((fdef.qualname, fdef.line), (fdef, values, site))
        fdefs = self.index.helpers.get(name)
        if fdefs:
            return self._call_helper(name, fdefs, values, node, frame)
        if local and self.sink is not None and any(v.arch for v in values):
            return self._call_helper(name, local, values, node, frame)
        if name not in self.index.functions and not CHECK_MACRO.match(name):
            inferred = infer_helper(name, path, line) if inferable(name) else None
            if inferred is not None:
                return inferred
        return UNKNOWN

    def _assign_out(self, arg: Node, value: CV, frame: Frame, mask: Lanes) -> None:
        """An out-parameter: ``&major`` (or a pointer variable)."""
        target = arg.args[0] if arg.kind == "unary" and arg.op == "&" else arg
        self._assign(target, value, frame, mask, note=False)

    def _call_helper(self, name: str, fdefs: list[FuncDef], args: list[CV], node: Node, frame: Frame) -> CV:
        fdef = _closest(fdefs, self.path, len(args))
        if self.depth >= MAX_CALL_DEPTH:
            return UNKNOWN
        key = (fdef.path, fdef.qualname, fdef.line, *(a.lanes for a in args))
        cached = self._memo.get(key)
        if cached is None:
            self._memo[key] = UNKNOWN  # recursion
            self.depth += 1
            sink, self.sink = self.sink, None
            saved_assumptions = self.assumptions
            self.assumptions = []
            try:
                result, fields = self._call(fdef, args)
            except TooDeep as exc:
                if isinstance(exc, _DepthExceeded):
                    raise
                result, fields = UNKNOWN, {}  # a helper too deep to read: its result is unknown
            finally:
                self.depth -= 1
                self.sink = sink
                self.assumptions = saved_assumptions
            if result.arch:
                call_text = node_text(frame.toks, node)
                shown = _render_return(fdef)
                del call_text
                result = CV(
                    result.lanes,
                    prepend(Evidence(f"{fdef.qualname}(){shown}", fdef.path, fdef.line), result.trail),
                    result.inferred,
                )
            for fname, value in fields.items():
                if value.arch:
                    frame.fields.setdefault(fname, value)
            cached = result
            self._memo[key] = cached
        return cached


def _render_return(fdef: FuncDef) -> str:
    """`` returns <expr>`` for a helper with one ``return``, for the evidence chain."""
    toks = fdef.body
    returns = [i for i, t in enumerate(toks) if t.text == "return"]
    if len(returns) != 1:
        return ""
    i = returns[0]
    j = i + 1
    while j < len(toks) and toks[j].text != ";":
        j += 1
    text = join_tokens(toks[i + 1 : j])
    return f" returns {text}" if text and len(text) <= 120 else ""


def _closest(fdefs: list[FuncDef], path: str, nargs: int) -> FuncDef:
    """The definition a call most likely means: the same file, then the nearest directory."""

    def score(f: FuncDef) -> tuple[int, int, int]:
        common = 0
        for a, b in zip(f.path.split("/"), path.split("/"), strict=False):
            if a != b:
                break
            common += 1
        return (f.path == path, len(f.params) == nargs, common)

    return max(fdefs, key=score)


# Field names too common to follow from one struct to any other (a CUDA version's .major, a
# pair's .first): they are followed within a function only.
_GENERIC_MEMBERS = frozenset({"major", "minor", "first", "second", "value", "x", "y", "version"})


def _member_path(node: Node) -> str | None:
    """``params.arch`` / ``p->cfg.sm`` as a dotted path when it is names all the way down."""
    parts: list[str] = []
    while node.kind == "member":
        parts.append(last_name(str(node.value)))
        node = node.args[0]
    if node.kind != "name" or node.value == "this":
        return None
    parts.append(str(node.value))
    return ".".join(reversed(parts))


def _assigned_names(stmt: Stmt, toks: tuple[Tok, ...]) -> set[str]:
    out: set[str] = set()
    for i in range(stmt.start, min(stmt.end, len(toks)) - 1):
        if toks[i].kind == "id" and toks[i + 1].text in ("=", "+=", "-=", "*=", "/=", "++", "--", "|=", "&="):
            out.add(toks[i].text)
    return out
