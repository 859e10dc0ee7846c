"""The py-runtime interpreter's state, and where a name's value comes from.

A name is a local, a lazily bound import, a closure variable, a module global (`global_value`,
joined over every module-level binding of the name), a star import, a submodule, a builtin, or
else read from its spelling (`inferred_predicate`: ``is_sm90``). `Scopes` is the base of the
interpreter's classes: expressions are `liftgate.detect.py_eval.Evaluator`'s, statements
`liftgate.detect.py_exec.Executor`'s, and the gate walk `liftgate.detect.py_interpreter.Interpreter`'s.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from liftgate.detect.py_binding import Module, short
from liftgate.detect.py_choices import (
    MAX_CHOICES,
    MAX_MODULES,
    Candidate,
    RuntimeChoice,
    class_methods,
    is_test_code,
    reads_the_device,
)
from liftgate.detect.py_domain import elements_of, item_at
from liftgate.detect.py_gates import GateEmitter
from liftgate.detect.py_models import BUILTIN_NAMES, MODEL_WINS
from liftgate.detect.py_runtime_objects import RuntimeObject, runtime_object
from liftgate.detect.pyvalues import (
    AV,
    TOP,
    ClassRef,
    ExternalRef,
    FuncRef,
    Instance,
    ModuleRef,
    PartialRef,
    carries_arch,
    const,
    inferred_predicate,
    join,
    lift,
)
from liftgate.model import Evidence, TorchOp


@dataclass(frozen=True, slots=True, eq=False)
class FunctionInfo:
    module: Module
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    closure: dict[str, AV] | None
    qualname: str
    cls: ClassRef | None = None


class ArchNames(set[str]):
    """The names found to carry an arch-dependent value, each known as either a *member* (an
    attribute or a method: ``self.use_fp8 = …``, ``def forward(self)`` whose returns differ), which
    another module can read only as ``x.name`` or by a string (``getattr(x, "name")``), or a *free*
    name (a module global, a module-level or nested function, anything else), which it can also
    read bare (``from m import name``). ``add`` and ``update`` mark a name free, ``add_members``
    marks names members unless they are free already, so a site that does not say is read the
    broad way. Every mention counts for which functions a walked module walks; the second round's
    choice of modules tells the two apart (`liftgate.detect.python.PythonAnalyzer._mentions_found`)."""

    __slots__ = ("free",)

    def __init__(self) -> None:
        super().__init__()
        self.free: set[str] = set()

    def add(self, name: str) -> None:
        self.free.add(name)
        super().add(name)

    def update(self, *names: Iterable[str]) -> None:
        for found in names:
            found = list(found)
            self.free.update(found)
            super().update(found)

    def add_members(self, names: Iterable[str]) -> None:
        super().update(names)

    def add_function(self, name: str, method: bool) -> None:
        """A function whose result depends on the device: a member if it is a method (read as
        ``x.name``), free otherwise."""
        if method:
            super().add(name)
        else:
            self.add(name)


@dataclass(frozen=True, slots=True)
class ClassInfo:
    module: Module
    node: ast.ClassDef
    qualname: str


@dataclass
class Frame:
    """One function activation: its locals, the module it runs in, and the guards on the current path."""

    module: Module
    env: dict[str, AV]
    closure: dict[str, AV]
    cls: ClassRef | None = None
    guards: list[tuple[AV, str]] = field(default_factory=list)
    returns: list[tuple[AV, list[tuple[AV, str]]]] = field(default_factory=list)
    sink: GateEmitter | None = None
    scope: tuple[str, ...] = ()
    lazy: dict[str, tuple[str, str]] = field(default_factory=dict)  # imported names not yet resolved
    attributes_bound: bool = False  # env holds "name.attr" entries (`self.x = …` in this function)
    # Capturing a method for the other methods of its class: each `<self_name>.attr = value`, with
    # the value on the lanes that reach that assignment.
    captures: dict[str, list[tuple[AV, int, str]]] | None = None
    self_name: str | None = None
    # A method's own ``self``/``cls`` in a walk of its definition: the class it is defined in or
    # any subclass, so a method looked up on it is one of the overrides (`py_choices`).
    open_self: str | None = None
    self_lookups: frozenset[str] | None = None  # the attributes the function reads on ``open_self``
    # The walked function's parameter annotations (`kernel: type[ScaledMMLinearKernel]`): the
    # class family a receiver the interpreter cannot see belongs to.
    annotations: dict[str, ast.expr] | None = None


class Scopes:
    """The interpreter's state and name resolution (see the module docstring)."""

    def __init__(self, load_module: Callable[[str], Module | None], module_names: Iterable[str]) -> None:
        self._load_module = load_module
        self._module_names = set(module_names)
        self._callables: dict[int, FunctionInfo] = {}
        self._classes: dict[int, ClassInfo] = {}
        self._globals: dict[tuple[str, str], AV] = {}
        self._in_progress: set[object] = set()
        self._calls: dict[tuple[object, ...], AV] = {}
        self._depth = 0
        self.arch_names = ArchNames()  # names found to carry an arch-dependent value
        self._suffix_index: dict[str, str] | None = None
        self._self_indexes: dict[tuple[int, str], list[Any]] = {}  # py_eval.SelfAssignments
        self._assigners: dict[int, dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]] = {}
        self._summaries: dict[int, Any] = {}  # py_eval.MethodSummary, by method node
        self._captures: dict[tuple[str, int, int], dict[str, list[tuple[AV, int, str]]]] = {}
        self._self_values: dict[tuple[str, int, str], AV] = {}
        self._steps = 0
        # Non-device facts in a condition are assumed favourable (`Evaluator._eval_BoolOp`); off while
        # the control flow is followed (`Executor.strict`).
        self.assume = True
        self._nesting = 0  # evaluations in progress (see py_eval.MAX_EVAL_NESTING)
        self.too_deep: dict[str, None] = {}  # modules with an expression nested past the bound
        self.deferred: list[
            tuple[ast.FunctionDef | ast.AsyncFunctionDef, Frame, tuple[str, ...], ClassRef | None]
        ] = []
        # By class node: each name to the first statement of the class body that defines it (a
        # `def`, an assignment to it, an annotated assignment with a value): `Evaluator._class_attribute`.
        self._class_members: dict[int, dict[str, ast.stmt]] = {}
        self._eval_table: dict[type, Any] = {}  # node type -> its bound _eval_<Type> method (or None)
        self._exec_table: dict[type, Any] = {}  # statement type -> its bound _exec_<Type> method (or None)
        # Parameters that callers fill with a device-dependent value: function node id → parameter →
        # (value, the call site) — at most 8 sites a parameter (`Evaluator._record_call_site`).
        self.call_sites: dict[int, dict[str, list[tuple[AV, Evidence]]]] = {}
        # Torch ops the C-family detector published (`TorchOp`), by op name, and the calls that passed
        # one the capability: (op's package, name, position) -> the call sites (`py_models.call_op`).
        self.torch_ops: dict[str, list[TorchOp]] = {}
        self.op_calls: dict[tuple[str, str, int], dict[Evidence, None]] = {}
        # Runtime choices (`liftgate.detect.py_choices`): the frame of the function being walked in
        # gate mode, the choices met in it, and, while it is walked once per candidate, which
        # candidate each choice is fixed to. ``method_modules`` gives the parsed modules whose text
        # defines a method name (None: too many to be a choice); the analyzer sets it.
        self.choice_frame: Frame | None = None
        self.choices_met: dict[tuple[object, ...], RuntimeChoice] = {}
        self.fixed_choices: dict[tuple[object, ...], int] = {}
        self.method_modules: Callable[..., list[Module] | None] = lambda name, limit, family=None: []
        self._method_choices: dict[str, tuple[tuple[Candidate, ...], bool] | None] = {}
        self._family_choices: dict[tuple[object, ...], tuple[Candidate, ...] | None] = {}
        self._subclass: dict[tuple[int, int], bool] = {}
        self._declared: dict[int, tuple[tuple[ClassRef, ...], bool]] = {}  # by id of an annotation node
        self._member_memo: dict[tuple[int, str], tuple[Any, ...]] = {}  # `Evaluator._family_members`
        self._choice_worth: dict[tuple[object, ...], bool] = {}
        self._unsettled: dict[int, RuntimeChoice] = {}  # lookups whose call decides (`Evaluator._settle`)

    # modules

    def module(self, name: str) -> Module | None:
        return self._load_module(self._canonical(name)) if name else None

    def _canonical(self, name: str) -> str:
        """The scanned module an import names: itself, or the one module whose name ends in it (a
        tree scanned above its import root, such as ``python/sglang/…``). A suffix two modules share
        names neither: ``flash_attn`` in vLLM is the third-party package, not one of vLLM's two
        ``…backends.flash_attn`` modules (picking one made the result depend on the hash seed). A
        lone name never means a module inside a scanned package: ``import torch`` in vLLM 0.33.0
        is torch, not ``vllm.model_executor.kernels.mhc.torch``; a dotted one may
        (FlashInfer 0.7.2's ``b12x._lib.gating`` is its ``flashinfer.experimental.b12x._lib.gating``,
        aliased by an import hook)."""
        if name in self._module_names:
            return name
        if self._suffix_index is None:
            index: dict[str, str] = {}
            shared: set[str] = set()
            for full in sorted(self._module_names):
                parts = full.split(".")
                for i in range(1, len(parts)):
                    if i == len(parts) - 1 and ".".join(parts[:i]) in self._module_names:
                        continue  # a lone name of a module inside a scanned package is not a top-level import
                    suffix = ".".join(parts[i:])
                    if index.setdefault(suffix, full) != full:
                        shared.add(suffix)
            for suffix in shared:
                del index[suffix]
            self._suffix_index = index
        return self._suffix_index.get(name, name)

    def has_module(self, name: str) -> bool:
        return self._canonical(name) in self._module_names

    def _module_value(self, name: str) -> AV:
        canonical = self._canonical(name)
        if canonical in self._module_names:
            return const(ModuleRef(canonical))
        return const(ExternalRef(name))

    def module_attribute(self, module: Module, name: str, seen: frozenset[str] = frozenset()) -> AV | None:
        chosen = runtime_object(module.name, name)
        if chosen is not None:
            found = self._runtime_instance(module, name, chosen)
            if found is not None:
                return found
        if name in module.bindings:
            return self.global_value(module, name)
        for star in module.star_imports:
            if star in seen:
                continue
            other = self.module(star)
            if other is not None:
                found = self.module_attribute(other, name, seen | {module.name})
                if found is not None:
                    return found
        sub = f"{module.name}.{name}" if module.name else name
        if self.has_module(sub):
            return self._module_value(sub)
        if name == "__name__":
            return const(module.name)
        return None

    def _runtime_instance(self, module: Module, name: str, chosen: RuntimeObject) -> AV | None:
        """``vllm.platforms.current_platform``: an instance of the class the stack picks on an NVIDIA
        GPU (`liftgate/data/py_objects.json`), read from the scanned source; None when that class's
        module is not in the scan."""
        key = (module.name, f"<object {name}>")
        cached = self._globals.get(key)
        if cached is not None:
            return cached
        class_module, _, class_name = chosen.cls.rpartition(".")
        other = self.module(class_module)
        if other is None or key in self._in_progress:
            return None
        self._in_progress.add(key)
        try:
            classes = self.module_attribute(other, class_name)
        finally:
            self._in_progress.discard(key)
        elements = elements_of(classes) if classes is not None else []
        refs = [x for x in elements if isinstance(x, ClassRef)]
        if not refs or len(refs) != len(elements):  # something other than the class: not the data's case
            return None
        step = Evidence(
            f"{name} is {chosen.cls} on an NVIDIA GPU (liftgate's data: {chosen.source.split(':')[0]})",
            module.path,
            None,
        )
        value = join([const(Instance(ref)) for ref in refs]).with_trail(step)
        self._globals[key] = value
        return value

    def global_value(self, module: Module, name: str) -> AV:
        key = (module.name, name)
        cached = self._globals.get(key)
        if cached is not None:
            return cached
        if key in self._in_progress:
            return TOP
        self._in_progress.add(key)
        try:
            bindings = module.bindings.get(name, ())
            chosen = [*bindings[:6], *[b for b in bindings[6:] if b[0] == "rebound"][:2]]
            values = [self._binding_value(module, name, b) for b in chosen]
            value = join(values) if values else TOP
        finally:
            self._in_progress.discard(key)
        if carries_arch(value):
            self.arch_names.add(name)
        self._globals[key] = value
        return value

    def _binding_value(self, module: Module, name: str, binding: tuple[str, ast.AST, object]) -> AV:
        kind, node, extra = binding
        if kind == "def":
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            return self.function_value(module, node, None, node.name, None)
        if kind == "class":
            assert isinstance(node, ast.ClassDef)
            return const(self.class_ref(module, node, node.name))
        if kind == "module":
            assert isinstance(extra, str)
            return self._module_value(extra)
        if kind == "from":
            assert isinstance(extra, tuple)
            source, attr = extra
            return self.import_from(str(source), str(attr), module.path, getattr(node, "lineno", None))
        # A function's rebinding ("rebound") is evaluated with that function's own names unknown.
        own = extra if kind == "rebound" and isinstance(extra, frozenset) else frozenset()
        frame = Frame(module, {str(n): TOP for n in own}, {})
        assert isinstance(node, ast.expr)
        value = self.eval(node, frame)
        if kind == "unpack":
            assert isinstance(extra, int)
            index = extra
            value = lift(lambda v: item_at(v, index), value)
        if value.arch or any(isinstance(x, (PartialRef, FuncRef)) for s in value.sets for x in s):
            step = Evidence(
                f"{name} = {short(module.segment(node), 140)}", module.path, getattr(node, "lineno", None)
            )
            value = value.with_trail(step)
        return value

    def import_from(self, source: str, attr: str, path: str | None = None, line: int | None = None) -> AV:
        dotted = f"{source}.{attr}" if source else attr
        if attr in MODEL_WINS:
            return const(ExternalRef(dotted))
        module = self.module(source)
        if module is not None:
            found = self.module_attribute(module, attr)
            if found is not None:
                return found
            return TOP
        if self.has_module(dotted):
            return self._module_value(dotted)
        # `from deep_gemm.utils import is_sm90`: the definition is not in sight, its name is.
        inferred = inferred_predicate(attr, path, line)
        return inferred if inferred is not None else const(ExternalRef(dotted))

    def _handler(self, table: dict[type, Any], prefix: str, kind: type) -> Any:
        """The bound ``<prefix><Type>`` method for node type ``kind`` (None if there is none),
        remembered in ``table``: `eval` and `exec_stmt` look a handler up once per node type, not
        once per node (1.9 million statements for FlashInfer and SGLang)."""
        method = table[kind] = getattr(self, f"{prefix}{kind.__name__}", None)
        return method

    def function_value(
        self,
        module: Module,
        node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda,
        closure: dict[str, AV] | None,
        qualname: str,
        cls: ClassRef | None,
    ) -> AV:
        key = hash((module.path, id(node), id(closure), cls))
        self._callables.setdefault(key, FunctionInfo(module, node, closure, qualname, cls))
        return const(FuncRef(key, qualname))

    def class_ref(self, module: Module, node: ast.ClassDef, qualname: str) -> ClassRef:
        key = hash((module.path, id(node)))
        self._classes.setdefault(key, ClassInfo(module, node, qualname))
        return ClassRef(key, qualname)

    def method_candidates(self, name: str) -> tuple[tuple[Candidate, ...], bool] | None:
        """Every implementation of method ``name`` in the scanned packages (test code left out), as
        candidates of a runtime choice on a receiver the interpreter cannot see, and whether at
        least half of them read the device (`reads_the_device`); None when there are none or more
        than `MAX_CHOICES`."""
        if name in self._method_choices:
            return self._method_choices[name]
        found: list[Candidate] = []
        relevant = 0
        modules = self.method_modules(name, MAX_MODULES)
        for module in modules or ():
            if is_test_code(module.path):
                continue
            for cls_node, fn in class_methods(module, name):
                ref = self.class_ref(module, cls_node, cls_node.name)
                found.append(Candidate(Instance(ref), f"{cls_node.name}.{name}", module.path, fn.lineno))
                relevant += reads_the_device(module.segment(fn), fn)
        result: tuple[tuple[Candidate, ...], bool] | None = None
        if modules is not None and 0 < len(found) <= MAX_CHOICES:
            ordered = tuple(sorted(found, key=lambda c: (c.path, c.line, c.implementation)))
            result = (ordered, 2 * relevant >= len(found))
        self._method_choices[name] = result
        return result

    # names

    def lookup(self, name: str, frame: Frame, node: ast.AST) -> AV:
        if name in frame.env:
            return frame.env[name]
        if name in frame.lazy:
            source, attr = frame.lazy.pop(name)
            value = (
                self._module_value(attr)
                if source == "module"
                else self.import_from(source, attr, frame.module.path, getattr(node, "lineno", None))
            )
            frame.env[name] = value
            return value
        if name in frame.closure:
            return frame.closure[name]
        module = frame.module
        if name in module.bindings or module.star_imports:
            found = self.module_attribute(module, name)
            if found is not None:
                return found
        builtin = BUILTIN_NAMES.get(name)
        if builtin is not None:
            return builtin
        return self._by_name(name, module, node)

    def _by_name(self, name: str, module: Module, node: ast.AST) -> AV:
        inferred = inferred_predicate(name, module.path, getattr(node, "lineno", None))
        return inferred if inferred is not None else TOP

    def eval(self, node: ast.expr, frame: Frame) -> AV:
        """The value of an expression in ``frame`` (`liftgate.detect.py_eval.Evaluator.eval`)."""
        raise NotImplementedError
