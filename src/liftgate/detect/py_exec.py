"""Statements of the scanned code, run over capability lanes: assignments, branches, loops,
``try``, definitions, imports (bound lazily) and comprehensions.

`Executor` keeps the guards on the current path (so a function's return values know which
branch they came from) and, in gate mode (a frame with a sink), reports each condition whose
truth differs between capabilities to `liftgate.detect.py_gates.GateEmitter`.
"""

from __future__ import annotations

import ast

from liftgate.detect.py_binding import short, walk
from liftgate.detect.py_domain import (
    MAX_LOOP_ITEMS,
    collect,
    concrete_items,
    elements_of,
    filtered,
    item_at,
    iterate,
    merge_by_truth,
    merge_envs,
    not_value,
    reached,
)
from liftgate.detect.py_eval import Evaluator
from liftgate.detect.py_gates import block_span, denies, is_guard, raises, terminates
from liftgate.detect.py_scope import Frame
from liftgate.detect.pyvalues import (
    AV,
    NONE,
    NONE_SET,
    TOP,
    FuncRef,
    PartialRef,
    Truth3,
    carries_arch,
    const,
    is_marker,
    lift,
    safe_binop,
    truth_lanes,
)
from liftgate.model import ElseKind, Evidence, Span


class Executor(Evaluator):
    """Statements and comprehensions (see the module docstring)."""

    def exec_block(self, stmts: list[ast.stmt], frame: Frame) -> None:
        depth = len(frame.guards)
        try:
            for index, stmt in enumerate(stmts):
                if isinstance(stmt, ast.If):
                    self._rest_of = (stmt, stmts[index + 1 :])  # what follows it, for `_report_if`
                self.exec_stmt(stmt, frame)
                if isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                    break
                if (
                    isinstance(stmt, ast.Assert)
                    and isinstance(stmt.test, ast.Constant)
                    and not stmt.test.value
                ):
                    break
        finally:
            del frame.guards[depth:]

    def exec_stmt(self, stmt: ast.stmt, frame: Frame) -> None:
        kind = type(stmt)
        table = self._exec_table
        method = table[kind] if kind in table else self._handler(table, "_exec_", kind)
        if method is not None:
            method(stmt, frame)
        elif frame.sink is not None:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.expr):
                    self._scan_expression(child, frame)

    def _scan_expression(self, node: ast.expr, frame: Frame) -> None:
        """In gate mode: conditional expressions and comprehension filters anywhere in ``node``."""
        if frame.sink is None or not frame.module.may_hold_branches(node):
            return
        for sub in walk(node):
            if isinstance(sub, (ast.IfExp, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                self.eval(sub, frame)

    def _assign(self, target: ast.expr, value: AV, frame: Frame, source: ast.expr | None = None) -> None:
        if isinstance(target, ast.Name):
            if frame.attributes_bound:
                stale = f"{target.id}."
                for key in [k for k in frame.env if k.startswith(stale)]:
                    del frame.env[key]
            frame.env[target.id] = value
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            # `self.x = …` is read back as `self.x` later in this function (keyed "self.x", which no
            # name can collide with), and recorded for the other methods when the class is captured.
            frame.env[f"{target.value.id}.{target.attr}"] = value
            frame.attributes_bound = True
            if frame.captures is not None and target.value.id == frame.self_name:
                shown = short(frame.module.segment(source), 100) if source is not None else "…"
                captured = (reached(value, frame.guards), target.lineno, shown)
                frame.captures.setdefault(target.attr, []).append(captured)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for index, element in enumerate(target.elts):
                if isinstance(element, ast.Starred):
                    for e in target.elts:
                        self._assign(e.value if isinstance(e, ast.Starred) else e, TOP, frame)
                    return
                self._assign(element, lift(lambda v, i=index: item_at(v, i), value), frame)

    def _exec_Assign(self, stmt: ast.Assign, frame: Frame) -> None:
        self._scan_expression(stmt.value, frame)
        value = self.eval(stmt.value, frame)
        if frame.sink is not None and not frame.scope:
            value = self._module_level_binding(stmt, value, frame)
        for target in stmt.targets:
            self._assign(target, value, frame, stmt.value)
            if value.arch and isinstance(target, ast.Attribute):
                # `self.use_fast = is_sm100()`: methods reading it deserve a walk
                self.arch_names.add_members((target.attr,))

    def _module_level_binding(self, stmt: ast.Assign, value: AV, frame: Frame) -> AV:
        """A module global assigned in the module walk. The functions walked after it read this value
        (their closure), not `global_value`'s, so it carries the same evidence step; and a global
        predicate built with ``partial`` (``has_tcgen05 = lru_cache()(partial(_at_least, 10))``) is
        called once, so functions using it by an innocent name are walked too."""
        names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
        partials = [x for x in elements_of(value) if isinstance(x, PartialRef)]
        if names and partials and not value.arch:
            called = self.call(value, [], {}, frame, stmt)
            if called.arch:
                self.arch_names.update(names)
        if value.arch or partials or any(isinstance(x, FuncRef) for x in elements_of(value)):
            shown = " = ".join(frame.module.segment(t) for t in stmt.targets)
            step = Evidence(
                f"{shown} = {short(frame.module.segment(stmt.value), 140)}",
                frame.module.path,
                getattr(stmt.value, "lineno", None),
            )
            value = value.with_trail(step)
            if value.arch:
                self.arch_names.update(names)
        if carries_arch(value) and not value.arch:
            self.arch_names.update(names)
        return value

    def _exec_AnnAssign(self, stmt: ast.AnnAssign, frame: Frame) -> None:
        if stmt.value is not None:
            self._scan_expression(stmt.value, frame)
            self._assign(stmt.target, self.eval(stmt.value, frame), frame, stmt.value)

    def _exec_AugAssign(self, stmt: ast.AugAssign, frame: Frame) -> None:
        if isinstance(stmt.target, ast.Name):
            op = type(stmt.op).__name__
            current = self.lookup(stmt.target.id, frame, stmt)
            frame.env[stmt.target.id] = lift(
                lambda a, b: safe_binop(op, a, b), current, self.eval(stmt.value, frame)
            )

    def _exec_Expr(self, stmt: ast.Expr, frame: Frame) -> None:
        value = stmt.value
        if frame.sink is not None and isinstance(value, ast.BoolOp) and len(value.values) == 2:
            test = self.eval(value.values[0], frame)
            guard = isinstance(value.op, ast.Or)  # `X or raise_/fallback()`: the rest runs where X holds
            frame.sink.add(
                stmt, value.values[0], test, "and/or statement", frame.scope,
                guard=False, else_kind=ElseKind.NONE if not guard else ElseKind.FALLBACK,
                then_span=Span(value.values[1].lineno, value.values[1].end_lineno or value.lineno), else_span=None,
            )  # fmt: skip
        self._scan_expression(value, frame)

    def _exec_Return(self, stmt: ast.Return, frame: Frame) -> None:
        value = NONE if stmt.value is None else self.eval(stmt.value, frame)
        if stmt.value is not None:
            self._scan_expression(stmt.value, frame)
            if frame.sink is not None and (_is_boolean_expr(stmt.value) or _is_boolean_value(value)):
                frame.sink.add(
                    stmt, stmt.value, value, "return", frame.scope, guard=False, else_kind=ElseKind.NONE,
                    then_span=None, else_span=None,
                )  # fmt: skip
        frame.returns.append((value, list(frame.guards)))

    def _exec_Assert(self, stmt: ast.Assert, frame: Frame) -> None:
        test = self.eval(stmt.test, frame)
        if frame.sink is not None:
            frame.sink.add(
                stmt, stmt.test, test, "assert", frame.scope, guard=False, else_kind=ElseKind.ERROR,
                then_span=None, else_span=None,
            )  # fmt: skip
            self._scan_expression(stmt.test, frame)

    def _exec_If(self, stmt: ast.If, frame: Frame, directive: str = "if", head: int | None = None) -> None:
        # What follows it in its block, read before the test is evaluated (which may walk other functions).
        rest = self._rest_of[1] if self._rest_of is not None and self._rest_of[0] is stmt else None
        test = self.eval(stmt.test, frame)
        text = frame.module.segment(stmt.test)
        is_elif = len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If)
        if head is None and is_elif:
            head = stmt.lineno  # the first test of an if/elif chain
        if frame.sink is not None:
            self._report_if(stmt, test, frame, directive, head, rest)
            self._scan_expression(stmt.test, frame)
        # The gate is the test read with the non-device facts assumed favourable; the control flow is
        # not: `if backend == "sparse" and not is_sm120: raise` does not stop every non-12.x device,
        # and a lifted guard must not make the code behind it look device-dependent.
        test = self.strict(stmt.test, frame) if test.deps else test
        truths = truth_lanes(test)
        certain = None if test.arch else (truths[0] if len(set(truths)) == 1 else None)
        if certain == Truth3.MAYBE:
            certain = None  # either way on every device: both branches run, and what follows knows which
        before = dict(frame.env)
        branches: list[dict[str, AV]] = []
        body_env: dict[str, AV] | None = None
        else_env: dict[str, AV] | None = None
        body_term = terminates(stmt.body)
        else_term = bool(stmt.orelse) and terminates(stmt.orelse)
        if certain != Truth3.FALSE:
            frame.guards.append((test, text))
            _narrow(stmt.test, frame, taken=True)
            self.exec_block(stmt.body, frame)
            frame.guards.pop()
            if not body_term:
                body_env = frame.env
                branches.append(body_env)
        frame.env = dict(before)
        if certain != Truth3.TRUE:
            frame.guards.append((not_value(test), f"not ({text})"))
            _narrow(stmt.test, frame, taken=False)
            nested = stmt.orelse[0] if is_elif else None
            if isinstance(nested, ast.If):
                self._exec_If(nested, frame, "elif", head)
            else:
                self.exec_block(stmt.orelse, frame)
            frame.guards.pop()
            if not else_term:
                else_env = frame.env
                branches.append(else_env)
        if test.arch:
            # Each device continues from the branch it takes (the effective value, not the join).
            frame.env = merge_by_truth(before, body_env, else_env, truths)
        else:
            frame.env = merge_envs(before, branches)
        # Code after `if X: return/raise` runs only where X is false.
        if body_term and not stmt.orelse and certain is None:
            frame.guards.append((not_value(test), f"not ({text})"))
        elif else_term and not body_term and certain is None:
            frame.guards.append((test, text))

    def strict(self, node: ast.expr, frame: Frame) -> AV:
        """``node`` with no fact assumed: an operand that does not depend on the device stays unknown."""
        saved, self.assume = self.assume, False
        try:
            return self.eval(node, frame)
        finally:
            self.assume = saved

    _rest_of: tuple[ast.If, list[ast.stmt]] | None = None

    @staticmethod
    def _only_denies_after(rest: list[ast.stmt] | None) -> bool:
        """What follows an early-returning ``if`` in its block only turns the path off (``return None``)."""
        if not rest or not denies(rest):
            return False
        last = rest[-1]
        # `return False` after `return True` is a predicate's other value (a fallback), not nothing.
        return isinstance(last, ast.Return) and (last.value is None or _is_none(last.value))

    def _report_if(
        self,
        stmt: ast.If,
        test: AV,
        frame: Frame,
        directive: str,
        head: int | None,
        rest: list[ast.stmt] | None,
    ) -> None:
        assert frame.sink is not None
        is_elif = len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If)
        guard = is_guard(stmt)
        if guard:
            else_kind = ElseKind.ERROR if raises(stmt.body) else ElseKind.FALLBACK
        else:
            guard = False
            if stmt.orelse and not is_elif and raises(stmt.orelse):
                else_kind = ElseKind.ERROR
            elif not stmt.orelse and terminates(stmt.body) and self._only_denies_after(rest):
                else_kind = ElseKind.NONE  # `if ok: return fast(x)` then `return None`: nothing in its place
            elif (
                stmt.orelse and not (len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.Pass))
            ) or terminates(stmt.body):
                else_kind = ElseKind.FALLBACK
            else:
                else_kind = ElseKind.NONE
        then_span, else_span = block_span(stmt.body), block_span(stmt.orelse)
        if guard:  # the guarded region is what follows the guard; the body is the exclusion
            then_span, else_span = None, block_span(stmt.body)
        frame.sink.add(
            stmt,
            stmt.test,
            test,
            directive,
            frame.scope,
            guard=guard,
            else_kind=else_kind,
            then_span=then_span,
            else_span=else_span,
            chain=head,
        )

    def _exec_While(self, stmt: ast.While, frame: Frame) -> None:
        test = self.eval(stmt.test, frame)
        if frame.sink is not None:
            frame.sink.add(
                stmt, stmt.test, test, "while", frame.scope, guard=False, else_kind=ElseKind.NONE,
                then_span=block_span(stmt.body), else_span=block_span(stmt.orelse),
            )  # fmt: skip
        self._loop(stmt.body, stmt.orelse, frame)

    def _exec_For(self, stmt: ast.For | ast.AsyncFor, frame: Frame) -> None:
        iterable = self.eval(stmt.iter, frame)
        self._scan_expression(stmt.iter, frame)
        items = iterate(iterable)
        self._assign(stmt.target, items if items is not None else TOP, frame)
        self._loop(stmt.body, stmt.orelse, frame)

    _exec_AsyncFor = _exec_For

    def _loop(self, body: list[ast.stmt], orelse: list[ast.stmt], frame: Frame) -> None:
        before = dict(frame.env)
        self.exec_block(body, frame)
        after_body = frame.env
        frame.env = merge_envs(before, [before, after_body])
        self.exec_block(orelse, frame)

    def _exec_With(self, stmt: ast.With | ast.AsyncWith, frame: Frame) -> None:
        for item in stmt.items:
            if item.optional_vars is not None:
                self._assign(item.optional_vars, TOP, frame)
        self.exec_block(stmt.body, frame)

    _exec_AsyncWith = _exec_With

    def _exec_Try(self, stmt: ast.Try, frame: Frame) -> None:
        before = dict(frame.env)
        self.exec_block(stmt.body, frame)
        self.exec_block(stmt.orelse, frame)
        branches = [frame.env]
        for handler in stmt.handlers:
            frame.env = dict(before)
            if handler.name:
                frame.env[handler.name] = TOP
            self.exec_block(handler.body, frame)
            if not terminates(handler.body):
                branches.append(frame.env)
        frame.env = merge_envs(before, branches)
        self.exec_block(stmt.finalbody, frame)

    _exec_TryStar = _exec_Try

    def _exec_FunctionDef(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef, frame: Frame) -> None:
        # Decorators and defaults run where the function is defined: Triton autotune configs
        # (`for p in (["tf32"] if is_tf32_supported else ["ieee"])`) pick by architecture there.
        for expr in (*stmt.decorator_list, *stmt.args.defaults, *(d for d in stmt.args.kw_defaults if d)):
            self._scan_expression(expr, frame)
        closure = {**frame.closure, **frame.env} if frame.env or frame.closure else None
        frame.env[stmt.name] = self.function_value(frame.module, stmt, closure, stmt.name, None)

    _exec_AsyncFunctionDef = _exec_FunctionDef

    def _exec_ClassDef(self, stmt: ast.ClassDef, frame: Frame) -> None:
        for expr in stmt.decorator_list:
            self._scan_expression(expr, frame)
        frame.env[stmt.name] = const(self.class_ref(frame.module, stmt, stmt.name))

    def _exec_Import(self, stmt: ast.Import, frame: Frame) -> None:
        for alias in stmt.names:
            name = alias.asname or alias.name.split(".")[0]
            frame.env.pop(name, None)
            frame.lazy[name] = ("module", alias.name if alias.asname else name)

    def _exec_ImportFrom(self, stmt: ast.ImportFrom, frame: Frame) -> None:
        # Bound lazily: resolving every import of every walked module would parse half the package.
        source = frame.module.resolve_relative(stmt.level, stmt.module) if stmt.level else (stmt.module or "")
        for alias in stmt.names:
            if alias.name != "*":
                name = alias.asname or alias.name
                frame.env.pop(name, None)
                frame.lazy[name] = (source, alias.name)

    def _exec_Global(self, stmt: ast.Global, frame: Frame) -> None:
        for name in stmt.names:
            frame.env.pop(name, None)

    # comprehensions

    def _comprehension(
        self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, frame: Frame
    ) -> AV:
        inner = Frame(
            frame.module, dict(frame.env), frame.closure, frame.cls, sink=frame.sink, scope=frame.scope
        )
        inner.attributes_bound = frame.attributes_bound
        if len(node.generators) != 1:
            for gen in node.generators:
                self._assign(gen.target, TOP, inner)
                self._report_filters(gen, inner)
            return TOP
        gen = node.generators[0]
        iterable = self.eval(gen.iter, frame)
        items = iterate(iterable)
        self._assign(gen.target, items if items is not None else TOP, inner)
        self._report_filters(gen, inner)
        elements = concrete_items(iterable)
        if elements is None or isinstance(node, ast.DictComp):
            return TOP
        # Evaluate element by element on concrete iterables: `any(x in name for x in ("H100", "H200"))`.
        produced: list[AV] = []
        for item in elements[:MAX_LOOP_ITEMS]:
            inner.env = dict(frame.env)
            self._assign(gen.target, item, inner)
            tests = [self.eval(cond, inner) for cond in gen.ifs]
            element = self.eval(node.elt, inner)
            produced.append(filtered(element, tests))
        return collect(produced, isinstance(node, ast.SetComp))

    def _report_filters(self, gen: ast.comprehension, frame: Frame) -> None:
        if frame.sink is None:
            return
        for cond in gen.ifs:
            value = self.eval(cond, frame)
            frame.sink.add(
                cond,
                cond,
                value,
                "comprehension if",
                frame.scope,
                guard=False,
                else_kind=ElseKind.NONE,
                then_span=None,
                else_span=None,
            )

    _eval_ListComp = _comprehension
    _eval_SetComp = _comprehension
    _eval_GeneratorExp = _comprehension
    _eval_DictComp = _comprehension


def _is_boolean_expr(node: ast.expr) -> bool:
    return isinstance(node, (ast.Compare, ast.BoolOp)) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
    )


def _is_boolean_value(value: AV) -> bool:
    """Every possible value is a bool (``return any(g in name for g in GPUS)``)."""
    return all(isinstance(x, bool) or is_marker(x) for s in value.sets for x in s)


def _narrow(test: ast.expr, frame: Frame, *, taken: bool) -> None:
    """``if sm is not None:`` (taken) or ``if sm is None:`` (not taken): in that branch the local
    ``sm`` is not None, so a ``None`` the value could hold on some path (a failed probe) is dropped."""
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.left, ast.Name)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return
    op = test.ops[0]
    if not ((isinstance(op, ast.IsNot) and taken) or (isinstance(op, ast.Is) and not taken)):
        return
    value = frame.env.get(test.left.id)
    if value is None or not any(None in value.lane(i) for i in range(len(value.sets))):
        return
    sets = [lane - NONE_SET or lane for lane in value.sets]
    frame.env[test.left.id] = AV(tuple(sets), value.inferred, value.trail, value.deps)


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
