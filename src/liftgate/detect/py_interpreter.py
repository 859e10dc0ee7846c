"""The py-runtime interpreter's walk: which functions of a module are interpreted in gate mode.

A module's top level and class bodies are always walked; a function only when its text mentions
the device (`runtime_prefilter`) or a name already found to carry an arch-dependent value. The
others wait in `Interpreter.deferred` until a later round finds such a name in them. The
package-level driver is `liftgate.detect.python.PythonAnalyzer`.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from liftgate.detect.py_binding import Module, decorator_name, runtime_prefilter, walk
from liftgate.detect.py_choices import RuntimeChoice
from liftgate.detect.py_eval import returns_result
from liftgate.detect.py_exec import Executor
from liftgate.detect.py_gates import GateEmitter, PendingGate, admitted_lanes_of
from liftgate.detect.py_scope import Frame
from liftgate.detect.pyvalues import (
    AV,
    TOP,
    ClassRef,
    Instance,
    carries_arch,
    const,
    inferred_predicate,
    join,
)

MAX_CHOICE_WALKS = 128  # walks of one function, over all candidates of the runtime choices met in it

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Interpreter(Executor):
    """Evaluates expressions of the scanned modules over capability lanes and reports their gates
    (`liftgate.detect.python`'s module docstring tells what it follows)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Each function walked in gate mode, with the frame it was defined in: parametric walks
        # (`walk_parametric`) go back to it. Their order keeps those walks deterministic.
        self._walked_functions: dict[
            int, tuple[ast.FunctionDef | ast.AsyncFunctionDef, Frame, tuple[str, ...], ClassRef | None]
        ] = {}
        self._function_order: dict[int, int] = {}
        self._parametric_done: dict[int, tuple[object, ...]] = {}  # by function: the call sites walked with
        self._self_lookups: dict[int, frozenset[str]] = {}  # by function node: the names read on its self
        self._mentions_device: dict[int, bool] = {}  # by statement node: whether its text mentions the device
        # Which functions' text names an arch-dependent name (`_names_arch`): each identifier to the
        # function nodes whose text holds it, each function indexed to whether its text holds a name
        # in ``arch_names``, and the names of ``arch_names`` already looked up (it only grows).
        self._name_index: dict[str, list[int]] = {}
        self._named_arch: dict[int, bool] = {}
        self._names_applied: set[str] = set()

    def function_gate_walk(self, module: Module, sink: GateEmitter) -> None:
        """Walk the module's top level and classes, and each function that can hold a gate, reporting gates.

        A function is walked when its text mentions the device or a name already known to carry an
        arch-dependent value; the others wait in ``deferred`` until a later round finds such a name
        in them (`walk_deferred`). Interpreting every function of every module costs minutes.
        """
        top = Frame(module, {}, {}, sink=sink, scope=())
        self._walk_block(module.tree.body, top, (), None)

    def walk_deferred(self) -> None:
        """Walk the deferred functions that mention a name found arch-dependent since they were deferred."""
        pending, self.deferred = self.deferred, []
        for item in pending:
            stmt, frame, scope, cls = item
            if self._names_arch(frame.module, stmt):
                self._walk_function(stmt, frame, scope, cls)
            else:
                self.deferred.append(item)

    def walk_parametric(self) -> int:
        """Walk again, in gate mode, each function whose callers pass it a device-dependent value,
        with those parameters bound to what the callers pass (joined over the call sites, each site
        in the evidence): ``def supported(capability): return capability >= 110`` called as
        ``supported(cap.to_int())`` is a gate at its ``return``, read with the caller's value. A
        walk may find calls of its own (a capability passed down several frames), for the next
        call of this. Returns how many functions were walked."""
        walked = 0
        for node_id in sorted(self.call_sites, key=lambda n: self._function_order.get(n, 0)):
            sites = self.call_sites[node_id]
            # Walked again when a site joins (or, past the cap, displaces one), not only when one is added.
            signature = tuple(
                sorted((name, tuple(site for _, site in entries)) for name, entries in sites.items())
            )
            context = self._walked_functions.get(node_id)
            if context is None or self._parametric_done.get(node_id) == signature:
                continue
            self._parametric_done[node_id] = signature
            stmt, frame, scope, cls = context
            bound: dict[str, AV] = {}
            for name, entries in sites.items():
                value = join([v for v, _ in entries])
                steps = [site for _, site in entries[:3]]
                bound[name] = value.with_trail(*steps)
            self._walk_function(stmt, frame, scope, cls, bound)
            walked += 1
        return walked

    def _remember(
        self,
        stmt: ast.FunctionDef | ast.AsyncFunctionDef,
        frame: Frame,
        scope: tuple[str, ...],
        cls: ClassRef | None,
    ) -> None:
        node_id = id(stmt)
        if node_id not in self._walked_functions:
            self._walked_functions[node_id] = (stmt, frame, scope, cls)
            self._function_order[node_id] = len(self._function_order)

    def _names_arch(self, module: Module, node: ast.AST, text: str | None = None) -> bool:
        """Whether an identifier of ``node``'s text is in ``arch_names`` now (``text``: that text,
        when the caller has just cut it).

        The text is read once. Its identifiers go into an index from each identifier to the nodes
        whose text holds it, and a node is marked once a name of its text joins ``arch_names``.
        The deferred functions are asked again after every round of walks, and keeping each one's
        set of identifiers instead held 460 MB for FlashInfer and SGLang, 213 MB of it copies of
        the same 15 MB of strings."""
        applied = self._names_applied
        if len(applied) != len(self.arch_names):  # names joined since the last question
            index, named = self._name_index, self._named_arch
            for name in self.arch_names - applied:
                named.update(dict.fromkeys(index.get(name, ()), True))
            applied.update(self.arch_names)
        key = id(node)
        found = self._named_arch.get(key)
        if found is not None:
            return found
        names = set(_IDENTIFIER.findall(module.segment(node) if text is None else text))
        index = self._name_index
        for name in names:
            keys = index.get(name)
            if keys is None:
                index[name] = [key]
            else:
                keys.append(key)
        found = self._named_arch[key] = not names.isdisjoint(self.arch_names)
        return found

    def _worth_walking(self, module: Module, stmt: ast.AST) -> bool:
        mentions = self._mentions_device.get(id(stmt))
        text = None
        if mentions is None:  # its text does not change: read once per statement
            text = module.segment(stmt)
            mentions = self._mentions_device[id(stmt)] = runtime_prefilter(text.encode())
        return mentions or self._names_arch(module, stmt, text)

    def _walk_block(
        self,
        body: list[ast.stmt],
        frame: Frame,
        scope: tuple[str, ...],
        cls: ClassRef | None,
        nested: bool = True,
    ) -> None:
        frame.scope = scope
        self._steps = 0
        with contextlib.suppress(RecursionError):
            self.exec_block(body, frame)
        if cls is not None:  # a class body: `Config.block` read elsewhere deserves a walk, like `self.x`
            self.arch_names.add_members(name for name, value in frame.env.items() if value.arch)
        if not nested:
            return
        for stmt in _nested_definitions(body):
            if isinstance(stmt, ast.ClassDef):
                ref = self.class_ref(frame.module, stmt, ".".join((*scope, stmt.name)))
                class_frame = Frame(frame.module, {}, {}, cls=ref, sink=frame.sink)
                self._walk_block(stmt.body, class_frame, (*scope, stmt.name), ref)
            else:
                self._remember(stmt, frame, scope, cls)
                if self._worth_walking(frame.module, stmt):
                    self._walk_function(stmt, frame, scope, cls)
                else:
                    self.deferred.append((stmt, frame, scope, cls))

    def _walk_function(
        self,
        stmt: ast.FunctionDef | ast.AsyncFunctionDef,
        frame: Frame,
        scope: tuple[str, ...],
        cls: ClassRef | None,
        bound: dict[str, AV] | None = None,
    ) -> None:
        """Walk one function in gate mode. Its conditions wait in the sink's buffer while it is
        walked; when the walk meets runtime choices (`liftgate.detect.py_choices`), it is walked
        again once per candidate and each condition takes the reading that applies."""
        self._remember(stmt, frame, scope, cls)
        inner = self._function_frame(stmt, frame, cls, bound)
        sink = frame.sink
        saved = (self.choice_frame, self.choices_met)
        self.choice_frame, self.choices_met = inner, {}
        if sink is not None:
            sink.begin()
        try:
            self._walk_block(stmt.body, inner, (*scope, stmt.name), None)
        except BaseException:
            self.choice_frame, self.choices_met = saved
            if sink is not None:
                sink.put_all(sink.end())
            raise
        choices = self.choices_met
        self.choice_frame, self.choices_met = saved
        if sink is not None:
            pending = sink.end()
            if choices:
                pending = self._read_choices(stmt, frame, scope, cls, bound, choices, pending)
            sink.put_all(pending)
        if any(carries_arch(value) for value, _ in inner.returns) or _returns_differ(
            inner.returns, stmt.name
        ):
            self.arch_names.add_function(stmt.name, method=cls is not None)
        if inner.attributes_bound:
            # `self.x = False; if is_sm100(): self.x = …`: arch-dependent only after the branches
            # merge, so the methods reading `self.x` are found here rather than at an assignment.
            self.arch_names.add_members(
                k.split(".", 1)[1] for k, v in inner.env.items() if "." in k and v.arch
            )

    def _read_choices(
        self,
        stmt: ast.FunctionDef | ast.AsyncFunctionDef,
        frame: Frame,
        scope: tuple[str, ...],
        cls: ClassRef | None,
        bound: dict[str, AV] | None,
        choices: dict[tuple[object, ...], RuntimeChoice],
        pending: list[PendingGate],
    ) -> list[PendingGate]:
        """Walk the function once per candidate of each runtime choice met in it (the other choices
        left open; at most `MAX_CHOICE_WALKS` walks), and give each pending condition the reading
        that applies: split between the candidates of the first choice whose readings of it differ
        and depend on the device, else the reading through a candidate (a definition in the scan
        beats a guess from the method's name)."""
        sink = frame.sink
        assert sink is not None
        readings: list[tuple[RuntimeChoice, list[dict[tuple[int, int], PendingGate]]]] = []
        budget = MAX_CHOICE_WALKS
        for choice in choices.values():
            if len(choice.candidates) > budget:
                break
            budget -= len(choice.candidates)
            walks: list[dict[tuple[int, int], PendingGate]] = []
            for index in range(len(choice.candidates)):
                collected: dict[tuple[int, int], PendingGate] = {}
                inner = self._function_frame(stmt, frame, cls, bound)
                saved = (self.choice_frame, self.choices_met, self.fixed_choices, sink.collecting)
                self.choice_frame, self.choices_met = inner, {}
                self.fixed_choices, sink.collecting = {choice.key: index}, collected
                try:
                    self._walk_block(stmt.body, inner, (*scope, stmt.name), None, nested=False)
                finally:
                    self.choice_frame, self.choices_met, self.fixed_choices, sink.collecting = saved
                walks.append(collected)
            readings.append((choice, walks))
        out: list[PendingGate] = []
        for item in pending:
            chosen = item
            agreed: PendingGate | None = None
            for choice, walks in readings:
                reached = [
                    (candidate, walk[item.key])
                    for candidate, walk in zip(choice.candidates, walks, strict=True)
                    if item.key in walk
                ]
                if not reached:
                    continue
                lanes = {tuple(admitted_lanes_of(p.value, p.guard)) for _, p in reached}
                if len(lanes) > 1 and any(p.value.arch for _, p in reached):
                    chosen = replace(item, split=tuple(reached), label=choice.label)
                    break
                if agreed is None:
                    agreed = reached[0][1]
            else:
                chosen = agreed if agreed is not None else item
            out.append(chosen)
        return out

    def _function_frame(
        self,
        stmt: ast.FunctionDef | ast.AsyncFunctionDef,
        frame: Frame,
        cls: ClassRef | None,
        bound: dict[str, AV] | None,
    ) -> Frame:
        """The frame a gate-mode walk of ``stmt`` starts from: parameters read from their names or
        defaults (or bound to what callers pass), ``self``/``cls`` the class."""
        env: dict[str, AV] = {}
        spec = stmt.args
        params = [*spec.posonlyargs, *spec.args]
        defaults: list[ast.expr | None] = [None] * (len(params) - len(spec.defaults)) + list(spec.defaults)
        kw_defaults = dict(zip((p.arg for p in spec.kwonlyargs), spec.kw_defaults, strict=True))
        module_frame = Frame(frame.module, {}, dict(frame.closure))
        for i, param in enumerate(params):
            env[param.arg] = self._param_value(param.arg, frame.module, param, defaults[i], module_frame)
            if i == 0 and cls is not None:
                decorators = {decorator_name(d) for d in stmt.decorator_list}
                if "staticmethod" not in decorators:
                    env[param.arg] = const(cls if "classmethod" in decorators else Instance(cls))
        for param in spec.kwonlyargs:
            env[param.arg] = self._param_value(
                param.arg, frame.module, param, kw_defaults[param.arg], module_frame
            )
        if spec.vararg:
            env[spec.vararg.arg] = TOP
        if spec.kwarg:
            env[spec.kwarg.arg] = TOP
        if bound:
            env.update((name, value) for name, value in bound.items() if name in env)
        closure = {**frame.closure, **frame.env}
        walked = Frame(frame.module, env, closure, cls=cls, sink=frame.sink)
        if (
            cls is not None
            and params
            and "staticmethod" not in {decorator_name(d) for d in stmt.decorator_list}
        ) and (not bound or params[0].arg not in bound):  # a caller's own instance is its class, exactly
            walked.open_self = own = params[0].arg
            lookups = self._self_lookups.get(id(stmt))
            if lookups is None:  # a function is walked many times (candidates, callers' values)
                lookups = self._self_lookups[id(stmt)] = frozenset(
                    n.attr
                    for n in walk(stmt)
                    if isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Load)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == own
                )
            walked.self_lookups = lookups
        annotated = {p.arg: p.annotation for p in (*params, *spec.kwonlyargs) if p.annotation is not None}
        if annotated:
            walked.annotations = annotated
        return walked

    def _param_value(
        self,
        name: str,
        module: Module,
        node: ast.AST,
        default: ast.expr | None = None,
        frame: Frame | None = None,
    ) -> AV:
        """A parameter's value while walking its function: read from its name (``is_sm90``), or its
        default where that is a list of names (``ref_gpus=("h100", "h200")``: the list the function
        is written for), else unknown."""
        inferred = inferred_predicate(name, module.path, getattr(node, "lineno", None))
        if inferred is not None:
            return inferred
        # Only lists of names: a flag default (`is_multi_node: bool = False`, `dot_precision: int = 0`,
        # `enable_es=(False, False)`) is what callers override, and fixing it kills the branches it picks.
        if (
            default is not None
            and frame is not None
            and isinstance(default, (ast.Tuple, ast.List))
            and default.elts
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in default.elts)
        ):
            value = self.eval(default, frame)
            if not value.is_top():
                return value.with_deps([f"{name} has its default value"])
        return TOP


def _nested_definitions(
    body: list[ast.stmt],
) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield stmt
        elif isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While, ast.AsyncFor, ast.AsyncWith)):
            for block in ("body", "orelse", "finalbody"):
                yield from _nested_definitions(getattr(stmt, block, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                yield from _nested_definitions(handler.body)


def _returns_differ(returns: list[tuple[AV, list[tuple[AV, str]]]], name: str) -> bool:
    """Whether what a call returns (`py_eval.returns_result`) differs between devices through the
    guards of the function's returns (``if not can_use(...): return False`` then ``return True``):
    then callers that name the function deserve a walk, before any of them is found by another
    name. Read only where a return's guard depends on the device (most walked functions have none)."""
    return any(g.arch for _, guards in returns for g, _ in guards) and returns_result(returns, name).arch
