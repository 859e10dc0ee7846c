"""Expressions of the scanned code, evaluated over capability lanes (`liftgate.detect.pyvalues`).

`Evaluator` follows values through names (`liftgate.detect.py_scope`), attributes of modules,
classes, instances (properties, ``self.x = …`` in initialisers, ``__getattr__``) and dicts, and
through calls: a scanned function is run on its arguments (memoized, depth-bounded), a device
API or builtin is modelled (`liftgate.detect.py_models`). Statements are
`liftgate.detect.py_exec.Executor`'s.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from liftgate.detect.py_binding import (
    Module,
    decorator_name,
    local_names,
    parse_python_expression,
    short,
    walk,
)
from liftgate.detect.py_choices import (
    MAX_CHOICES,
    MAX_FAMILY_CHOICES,
    MAX_FAMILY_MODULES,
    Candidate,
    RuntimeChoice,
    class_methods,
    is_abstract,
    is_test_code,
    reads_the_device,
)
from liftgate.detect.py_domain import (
    all_dicts,
    and_values,
    compare,
    elements_of,
    format_value,
    is_unknown,
    not_value,
    only_plain,
    or_values,
    raise_type_error,
    reached,
    reorder_trail,
    subscript,
)
from liftgate.detect.py_gates import terminates
from liftgate.detect.py_models import MODEL_WINS, call_model, dict_method
from liftgate.detect.py_scope import ClassInfo, Frame, FunctionInfo, Scopes
from liftgate.detect.pyvalues import (
    AV,
    MAX_INT_BITS,
    MAX_SET,
    NONE,
    TOP,
    TOP_SET,
    BoundMethod,
    Builtin,
    ClassRef,
    DeviceProps,
    DictObj,
    ExternalRef,
    FuncRef,
    Instance,
    ModuleRef,
    Opaque,
    PartialRef,
    Truth3,
    Unsupported,
    call_concrete_method,
    combine,
    concrete_attribute,
    const,
    cupy_capability_value,
    inferred_predicate,
    is_marker,
    join,
    lane_count,
    lift,
    safe_binop,
    truth_lanes,
)
from liftgate.model import ElseKind, Evidence, Span

_MAX_CALL_DEPTH = 8
MAX_CALL_SITES = 8  # call sites kept per parameter of a function walked with its callers' values
# Expressions being evaluated inside each other, callees included: a deeper one is "anything".
# Real code nests expressions ~20 deep; the bound keeps the walk well inside the recursion limit
# `PythonAnalyzer.analyze` sets (6,000), each level costing about three Python frames.
MAX_EVAL_NESTING = 1_000
_INITIALIZER = re.compile(r"__init__|__post_init__|_?init|_?setup|_?initialize|_?build|_?configure|_?load")
# Expression evaluations allowed for one function's walk, callees included (they are memoized).
_STEP_BUDGET = 50_000

T = TypeVar("T")


def _site_order(entry: tuple[AV, Evidence]) -> tuple[str, int, str]:
    """Where a call site is in the code: the order the sites kept per parameter are chosen in."""
    site = entry[1]
    return (site.path or "", site.line or 0, site.text)


@dataclass(frozen=True, slots=True)
class _Member:
    """An implementation of a method in a class family: the class, where the class and the method
    are defined, and whether the method reads the device (`reads_the_device`)."""

    cls: ClassRef
    path: str
    class_line: int
    line: int
    reads: bool


class _Terminated(Exception):
    pass


class Evaluator(Scopes):
    """Expressions, attributes and calls over capability lanes (see the module docstring)."""

    def eval(self, node: ast.expr, frame: Frame) -> AV:
        self._steps += 1
        if self._steps > _STEP_BUDGET:
            return TOP  # a pathological function: give up on it rather than on the scan
        kind = type(node)
        table = self._eval_table
        method = table[kind] if kind in table else self._handler(table, "_eval_", kind)
        if method is None:
            return TOP
        if self._nesting >= MAX_EVAL_NESTING:
            self.too_deep[frame.module.path] = None
            return TOP
        self._nesting += 1
        try:
            result: AV = method(node, frame)
        except (Unsupported, _Terminated):
            return TOP
        finally:
            self._nesting -= 1
        return result

    def _eval_Constant(self, node: ast.Constant, frame: Frame) -> AV:
        if isinstance(node.value, int) and node.value.bit_length() > MAX_INT_BITS:
            return TOP  # a literal too large to follow (a 0x… of a million digits)
        return const(node.value)

    def _eval_Name(self, node: ast.Name, frame: Frame) -> AV:
        return self.lookup(node.id, frame, node)

    def _eval_NamedExpr(self, node: ast.NamedExpr, frame: Frame) -> AV:
        value = self.eval(node.value, frame)
        frame.env[node.target.id] = value
        return value

    def _eval_Tuple(self, node: ast.Tuple | ast.List, frame: Frame) -> AV:
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return TOP
        parts = [self.eval(e, frame) for e in node.elts]
        if len(parts) > 64:
            return TOP
        # A list of classes is kept (``_KERNELS = [CutlassKernel, MarlinKernel]``): a loop over it
        # is a choice made at run time (`liftgate.detect.py_choices`).
        return lift(lambda *xs: tuple(xs), *parts, keep_classes=True) if parts else const(())

    _eval_List = _eval_Tuple

    def _eval_Set(self, node: ast.Set, frame: Frame) -> AV:
        parts = [self.eval(e, frame) for e in node.elts]
        return lift(lambda *xs: frozenset(xs), *parts) if parts else const(frozenset())

    def _eval_Dict(self, node: ast.Dict, frame: Frame) -> AV:
        items: list[tuple[object, AV]] = []
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                return TOP
            try:
                key = self.eval(k, frame).single()
                hash(key)
            except (Unsupported, TypeError):
                return TOP
            items.append((key, self.eval(v, frame)))
        where = Evidence("", frame.module.path, node.lineno)
        return const(DictObj(tuple(items), where))

    def _eval_JoinedStr(self, node: ast.JoinedStr, frame: Frame) -> AV:
        parts: list[AV] = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(const(str(value.value)))
            elif isinstance(value, ast.FormattedValue):
                if value.format_spec is not None or value.conversion not in (-1, 115):
                    return TOP
                parts.append(
                    lift(
                        lambda x: x if isinstance(x, str) else format_value(x), self.eval(value.value, frame)
                    )
                )
            else:
                return TOP
        return lift(lambda *xs: "".join(xs), *parts) if parts else const("")

    def _eval_BinOp(self, node: ast.BinOp, frame: Frame) -> AV:
        op = type(node.op).__name__
        return lift(
            lambda a, b: safe_binop(op, a, b), self.eval(node.left, frame), self.eval(node.right, frame)
        )

    def _eval_UnaryOp(self, node: ast.UnaryOp, frame: Frame) -> AV:
        operand = self.eval(node.operand, frame)
        if isinstance(node.op, ast.Not):
            return not_value(operand)
        if isinstance(node.op, ast.USub):
            return lift(lambda a: -a if isinstance(a, (int, float)) else raise_type_error(), operand)
        return (
            lift(lambda a: +a if isinstance(a, (int, float)) else raise_type_error(), operand)
            if isinstance(node.op, ast.UAdd)
            else TOP
        )

    def _eval_Compare(self, node: ast.Compare, frame: Frame) -> AV:
        left = self.eval(node.left, frame)
        result: AV | None = None
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self.eval(comparator, frame)
            name = type(op).__name__
            step = compare(name, left, right)
            result = step if result is None else and_values([result, step])
            left = right
        assert result is not None
        return result

    def _eval_BoolOp(self, node: ast.BoolOp, frame: Frame) -> AV:
        values = [self.eval(v, frame) for v in node.values]
        texts = [frame.module.segment(v) for v in node.values]
        if self.assume and any(v.arch for v in values):
            # Facts that do not depend on the device are assumed favourable and reported.
            kept, deps = [], []
            for value, text in zip(values, texts, strict=True):
                if value.arch or not is_unknown(value):
                    kept.append(value)
                else:
                    deps.append(short(text, 90))
            values = kept or values
            result = and_values(values) if isinstance(node.op, ast.And) else or_values(values)
            return result.with_deps(deps) if deps else result
        return and_values(values) if isinstance(node.op, ast.And) else or_values(values)

    def _eval_IfExp(self, node: ast.IfExp, frame: Frame) -> AV:
        test = self.eval(node.test, frame)
        if frame.sink is not None:
            frame.sink.add(
                node, node.test, test, "conditional expression", frame.scope,
                guard=False, else_kind=ElseKind.FALLBACK,
                then_span=Span(node.body.lineno, node.body.end_lineno or node.body.lineno),
                else_span=Span(node.orelse.lineno, node.orelse.end_lineno or node.orelse.lineno),
            )  # fmt: skip
        body, orelse = self.eval(node.body, frame), self.eval(node.orelse, frame)
        if not test.arch:
            t = truth_lanes(test)
            if all(x == Truth3.TRUE for x in t):
                return body
            if all(x == Truth3.FALSE for x in t):
                return orelse
            return join([body, orelse])
        truths = truth_lanes(test)
        sets = []
        n = lane_count()
        for i in range(n):
            if truths[i] == Truth3.TRUE:
                sets.append(body.lane(i))
            elif truths[i] == Truth3.FALSE:
                sets.append(orelse.lane(i))
            else:
                sets.append(body.lane(i) | orelse.lane(i))
        return combine([test, body, orelse], sets)

    def _eval_Subscript(self, node: ast.Subscript, frame: Frame) -> AV:
        value = self.eval(node.value, frame)
        if isinstance(node.slice, ast.Slice):
            lower = self.eval(node.slice.lower, frame) if node.slice.lower else NONE
            upper = self.eval(node.slice.upper, frame) if node.slice.upper else NONE
            return lift(lambda v, lo, hi: subscript(v, slice(lo, hi)), value, lower, upper)
        index = self.eval(node.slice, frame)
        out = []
        for container in elements_of(value):
            if isinstance(container, DictObj):
                out.append(self.dict_lookup(container, index, frame, node))
        if out:
            return join(out + ([lift(subscript, value, index)] if not all_dicts(value) else []))
        return lift(subscript, value, index)

    def dict_lookup(self, d: DictObj, key: AV, frame: Frame, node: ast.AST, default: AV | None = None) -> AV:
        # Lane by lane: `BY_MAJOR.get(major)` with a device-dependent key is a device-dependent value.
        expr_text = frame.module.segment(node) if isinstance(node, ast.expr) else ""
        by_key: dict[object, AV] = {}

        def value_for(k: object) -> AV:
            cached = by_key.get(k)
            if cached is not None:
                return cached
            found = None if is_marker(k) else d.get(k)
            if found is None:
                value = default if default is not None and not is_marker(k) else TOP
            else:
                where = d.where
                step = Evidence(
                    _render_lookup(expr_text, k, found),
                    where.path if where else None,
                    where.line if where else None,
                )
                value = found.with_trail(step)
            by_key[k] = value
            return value

        try:
            lanes = [[value_for(k) for k in _in_stable_order(s)] for s in key.sets]
        except TypeError:  # an unhashable key
            return TOP
        parts = list(by_key.values())
        if not parts:
            return TOP
        n = 1 if key.uniform and all(p.uniform for p in parts) else lane_count()
        sets: list[frozenset[object]] = []
        for i in range(n):
            acc: set[object] = set()
            for value in lanes[0 if key.uniform else i]:
                acc |= value.lane(i)
            sets.append(frozenset(acc) if len(acc) <= MAX_SET else TOP_SET)
        return combine([key, *parts], sets)

    def _eval_Attribute(self, node: ast.Attribute, frame: Frame) -> AV:
        if frame.attributes_bound and isinstance(node.value, ast.Name):
            assigned = frame.env.get(f"{node.value.id}.{node.attr}")
            if assigned is not None:
                return assigned  # `self.x = …` earlier in this function: the value it was given here
        base = self.eval(node.value, frame)
        return self.attribute(base, node.attr, frame, node)

    def attribute(self, base: AV, name: str, frame: Frame, node: ast.AST) -> AV:
        if frame is self.choice_frame and name not in MODEL_WINS and not name.startswith("__"):
            base = self._choose(base, name, frame, node)
        results: list[AV] = []
        plain = False
        for element in elements_of(base):
            if is_marker(element):
                results.append(self._unknown_attribute(name, frame, node))
            elif isinstance(element, ModuleRef):
                if name in MODEL_WINS:
                    # `torch.cuda.get_device_capability` with torch's own source in the scan: the
                    # model wins here too, as it does for `from torch.cuda import …` (`import_from`).
                    results.append(const(ExternalRef(f"{element.name}.{name}")))
                    continue
                module = self.module(element.name)
                found = self.module_attribute(module, name) if module else None
                results.append(found if found is not None else TOP)
            elif isinstance(element, ExternalRef):
                results.append(self._external_attribute(element, name, node, frame))
            elif isinstance(element, (Instance, ClassRef)) and name in MODEL_WINS:
                # A platform class's capability methods (vLLM's `cls.is_device_capability(90)`) mean
                # what the model says, whatever the body reaching NVML or torch looks like.
                owner = element.cls if isinstance(element, Instance) else element
                results.append(const(ExternalRef(f"{owner.name}.{name}")))
            elif isinstance(element, Instance):
                results.append(self._instance_attribute(element, name, frame, node))
            elif isinstance(element, ClassRef):
                results.append(self._class_attribute(element, name, None, frame, node) or TOP)
            elif isinstance(element, DictObj):
                results.append(const(BoundMethod(Builtin(f"dict.{name}"), element)) if name == "get" else TOP)
            elif isinstance(element, Opaque):
                results.append(TOP)
            else:
                plain = True
        if plain:
            results.append(lift(lambda v: concrete_attribute(v, name), only_plain(base)))
        value = join(results) if results else TOP
        if base.arch or base.trail:
            value = combine([base, value], list(value.sets))
        if (
            plain
            and name == "name"
            and value.arch
            and any(isinstance(x, DeviceProps) for x in elements_of(base))
        ):
            # `get_device_properties(0).name`: what a product name says is read from the product list.
            value = AV(value.sets, True, value.trail, value.deps)
        return value

    def _choose(self, base: AV, name: str, frame: Frame, node: ast.AST) -> AV:
        """``base`` for looking up ``name``: unchanged, or, where the lookup is a runtime choice
        (`liftgate.detect.py_choices`) and this walk fixes it, the one candidate it is fixed to."""
        choice = self._runtime_choice(base, name, frame, node)
        if choice is None:
            return base
        fixed = self.fixed_choices.get(choice.key)
        if fixed is not None:
            chosen = const(choice.candidates[fixed].receiver)
            return AV(chosen.sets, base.inferred, base.trail, base.deps)
        if choice.loose or (choice.key[0] != "self" and not self._worth_choosing(choice, name, frame, node)):
            self._unsettled[id(node)] = choice  # the call's arguments may still make it one (`_eval_Call`)
        else:
            self.choices_met.setdefault(choice.key, choice)
        return base

    def _runtime_choice(self, base: AV, name: str, frame: Frame, node: ast.AST) -> RuntimeChoice | None:
        if not base.uniform:
            return None
        elements = elements_of(base)
        if not elements:
            return None
        receiver = node.value if isinstance(node, ast.Attribute) else None
        if (
            isinstance(receiver, ast.Name)
            and receiver.id == frame.open_self
            and frame.cls is not None
            and len(elements) == 1
            and isinstance(elements[0], (ClassRef, Instance))
            and (elements[0] if isinstance(elements[0], ClassRef) else elements[0].cls) == frame.cls
        ):
            # `cls.supports_head_size(...)` in the method's own walk: cls is the class or any subclass.
            return self._self_choice(frame, isinstance(elements[0], Instance))
        if all(is_marker(e) for e in elements):
            if (
                isinstance(receiver, ast.Call)
                and isinstance(receiver.func, ast.Name)
                and receiver.func.id == "super"
            ):
                return None  # `super().can_implement(c)`: the base class's method, not a choice
            if isinstance(receiver, ast.Name) and frame.annotations and receiver.id in frame.annotations:
                roots, as_instance = self._declared_family(frame.annotations[receiver.id], frame.module)
                if roots:
                    return self._family_choice(name, roots, as_instance, _choice_label(node, name, frame))
            implementations = self.method_candidates(name)
            if implementations is None:
                return None
            candidates, relevant = implementations
            return RuntimeChoice(
                ("method", name), _choice_label(node, name, frame), candidates, loose=not relevant
            )
        if len(elements) < 2 or not all(isinstance(e, (ClassRef, Instance)) for e in elements):
            return None
        found: dict[tuple[str, int], Candidate] = {}
        for element in elements:
            assert isinstance(element, (ClassRef, Instance))
            cls = element.cls if isinstance(element, Instance) else element
            where = self._definition(cls, name)
            info = self._classes.get(cls.key)
            if where is None or info is None:
                return None  # an attribute one of the classes lacks: not a choice this reads
            if is_test_code(info.module.path):
                continue  # a test's fake, passed by a test: not a deployment's choice
            candidate = Candidate(element, f"{info.qualname}.{name}", *where)
            key = (info.module.path, info.node.lineno)
            found.setdefault(key, candidate)
        if len(found) < 2 or len(found) > MAX_CHOICES:
            return None
        ordered = tuple(found[k] for k in sorted(found))
        return RuntimeChoice(("classes", name, *sorted(found)), _choice_label(node, name, frame), ordered)

    def _self_choice(self, frame: Frame, as_instance: bool) -> RuntimeChoice | None:
        """The class of a method's own ``self``/``cls`` as a runtime choice: the class the method is
        defined in (when it resolves one of the looked-up methods to an implementation) and each
        subclass that overrides a method the function looks up on it, when at least one of those
        overrides reads the device. One choice for every lookup on ``cls`` in the function: a
        candidate walk reads all of them through the same class."""
        root = frame.cls
        assert root is not None and frame.open_self is not None
        names = frame.self_lookups or frozenset()
        key = ("self", root.key, as_instance, *sorted(names))
        if key in self._family_choices:
            cached = self._family_choices[key]
            return None if cached is None else RuntimeChoice(key, self._self_label(frame), cached)
        self._family_choices[key] = None
        classes: dict[tuple[str, int], Candidate] = {}
        relevant = False
        for name in sorted(names):
            for member in self._family_members(root, name):
                if member.cls.key == root.key:
                    continue
                relevant = relevant or member.reads
                receiver = Instance(member.cls) if as_instance else member.cls
                where = (member.path, member.class_line)
                classes.setdefault(where, Candidate(receiver, member.cls.name, *where))
        info = self._classes.get(root.key)
        if info is not None and any(
            (found := self._definition_node(root, name)) is not None and not is_abstract(found[1])
            for name in sorted(names)
        ):
            where = (info.module.path, info.node.lineno)
            classes.setdefault(
                where, Candidate(Instance(root) if as_instance else root, info.qualname, *where)
            )
        if not relevant or not 2 <= len(classes) <= MAX_FAMILY_CHOICES:
            return None
        ordered = tuple(classes[k] for k in sorted(classes))
        self._family_choices[key] = ordered
        return RuntimeChoice(key, self._self_label(frame), ordered)

    def _family_members(self, root: ClassRef, name: str) -> tuple[_Member, ...]:
        """The implementations of ``name`` in ``root`` and the classes derived from it, test code
        left out, in module order; memoised, as every method of a class asks for the names it
        looks up on ``self``, and annotations name the same families again and again."""
        memo = (root.key, name)
        known = self._member_memo.get(memo)
        if known is not None:
            return known
        found: list[_Member] = []
        for module in self.method_modules(name, MAX_FAMILY_MODULES, root.name.rsplit(".", 1)[-1]) or ():
            if is_test_code(module.path):
                continue
            for cls_node, fn in class_methods(module, name):
                ref = self.class_ref(module, cls_node, cls_node.name)
                if self._is_subclass(ref, root):
                    reads = reads_the_device(module.segment(fn), fn)
                    found.append(_Member(ref, module.path, cls_node.lineno, fn.lineno, reads))
        result = tuple(found)
        self._member_memo[memo] = result
        return result

    def _self_label(self, frame: Frame) -> str:
        info = self._classes.get(frame.cls.key) if frame.cls is not None else None
        return f"{frame.open_self} ({info.qualname if info else '?'} or a subclass)"

    def _family_choice(
        self, name: str, roots: tuple[ClassRef, ...], as_instance: bool, label: str
    ) -> RuntimeChoice | None:
        """A runtime choice among the implementations of ``name`` in the subclasses of ``roots``
        (each root included, with the implementation it inherits), when there are 2 to
        `MAX_CHOICES` and at least one reads the device; None otherwise."""
        key = ("family", name, as_instance, *sorted(r.key for r in roots))
        if key in self._family_choices:
            cached = self._family_choices[key]
            return None if cached is None else RuntimeChoice(key, label, cached)
        self._family_choices[key] = None  # a lookup met again while this one is read
        found: dict[tuple[str, int], Candidate] = {}
        relevant = False
        for root in roots:
            for member in self._family_members(root, name):
                receiver = Instance(member.cls) if as_instance else member.cls
                where = (member.path, member.line)
                found[where] = Candidate(receiver, f"{member.cls.name}.{name}", *where)
                relevant = relevant or member.reads
        for root in roots:  # a root that inherits the method: what subclasses that keep it run
            inherited = self._definition_node(root, name)
            if inherited is None:
                continue
            info, fn = inherited
            where = (info.module.path, fn.lineno)
            if where in found or is_abstract(fn) or is_test_code(info.module.path):
                continue
            receiver = Instance(root) if as_instance else root
            found[where] = Candidate(receiver, f"{info.node.name}.{name}", *where)
            relevant = relevant or reads_the_device(info.module.segment(fn), fn)
        if not relevant or not 2 <= len(found) <= MAX_FAMILY_CHOICES:
            return None
        ordered = tuple(found[k] for k in sorted(found))
        self._family_choices[key] = ordered
        return RuntimeChoice(key, label, ordered)

    def _is_subclass(self, cls: ClassRef, root: ClassRef, depth: int = 0) -> bool:
        """Whether ``cls`` is ``root`` or derives from it, through base classes the interpreter resolves."""
        if cls.key == root.key:
            return True
        memo = (cls.key, root.key)
        known = self._subclass.get(memo)
        if known is not None:
            return known
        info = self._classes.get(cls.key)
        found = False
        if info is not None and depth <= 8:
            self._subclass[memo] = False  # a cycle of bases
            found = any(self._is_subclass(base, root, depth + 1) for base in self._base_classes(info))
        self._subclass[memo] = found
        return found

    def _definition_node(
        self, cls: ClassRef, name: str
    ) -> tuple[ClassInfo, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The method ``name`` resolves to for ``cls`` (its own body first, then its bases)."""

        def method(
            info: ClassInfo, stmt: ast.stmt
        ) -> tuple[ClassInfo, ast.FunctionDef | ast.AsyncFunctionDef] | None:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return info, stmt
            return None

        return self._in_class_or_bases(cls, method)

    def _in_class_or_bases(
        self, cls: ClassRef, pick: Callable[[ClassInfo, ast.stmt], T | None], depth: int = 0
    ) -> T | None:
        """The first statement of ``cls``'s body, then of its bases' (depth first, a generic base
        ``Kernel[Config]`` read as ``Kernel``), that ``pick`` accepts: what it makes of it."""
        info = self._classes.get(cls.key)
        if info is None or depth > 8:
            return None
        for stmt in info.node.body:
            found = pick(info, stmt)
            if found is not None:
                return found
        for base in self._base_classes(info):
            inherited = self._in_class_or_bases(base, pick, depth + 1)
            if inherited is not None:
                return inherited
        return None

    def _base_classes(self, info: ClassInfo) -> Iterator[ClassRef]:
        """The classes ``info``'s bases resolve to, in order (a generic base ``Kernel[Config]`` is
        ``Kernel``)."""
        for base in info.node.bases:
            base = base.value if isinstance(base, ast.Subscript) else base  # `Kernel[Config, Params]`
            for element in elements_of(self.eval(base, Frame(info.module, {}, {}))):
                if isinstance(element, ClassRef):
                    yield element

    def _declared_family(self, annotation: ast.expr, module: Module) -> tuple[tuple[ClassRef, ...], bool]:
        """The classes a parameter annotation names (``type[A]``, ``A | None``, ``Optional[A]``, a
        string, a module-level ``TypeVar`` with ``bound=``) and whether the value is an instance
        (``A``) rather than the class (``type[A]``). Memoised by annotation node."""
        known = self._declared.get(id(annotation))
        if known is not None:
            return known
        roots: list[ClassRef] = []
        as_instance = self._annotation_classes(annotation, module, 0, roots)
        result = (tuple(roots), as_instance)
        self._declared[id(annotation)] = result
        return result

    def _annotation_classes(self, expr: ast.expr, module: Module, depth: int, roots: list[ClassRef]) -> bool:
        """`_declared_family`'s reading of one annotation: the classes it names go to ``roots``;
        False when it names a class object (``type[A]``) rather than an instance. A method, not a
        closure that calls itself: such a closure is a reference cycle, and one holding the
        interpreter kept every syntax tree alive until the cyclic collector ran."""
        if depth > 4:
            return True
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            try:
                parsed = parse_python_expression(expr.value).body
            except SyntaxError:
                return True
            return self._annotation_classes(parsed, module, depth + 1, roots)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            left = self._annotation_classes(expr.left, module, depth, roots)
            right = self._annotation_classes(expr.right, module, depth, roots)
            return left and right
        if isinstance(expr, ast.Subscript):
            head = expr.value.attr if isinstance(expr.value, ast.Attribute) else getattr(expr.value, "id", "")
            inner = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            as_instance = head not in ("type", "Type")
            if head in ("type", "Type", "Optional", "Union"):
                for item in inner:
                    as_instance = self._annotation_classes(item, module, depth + 1, roots) and as_instance
            return as_instance
        if isinstance(expr, ast.Name):
            bound = _typevar_bound(module, expr.id)
            if bound is not None:
                return self._annotation_classes(bound, module, depth + 1, roots)
        if isinstance(expr, (ast.Name, ast.Attribute)):
            for element in elements_of(self.eval(expr, Frame(module, {}, {}))):
                if isinstance(element, ClassRef) and element not in roots:
                    roots.append(element)
        return True

    def _worth_choosing(self, choice: RuntimeChoice, name: str, frame: Frame, node: ast.AST) -> bool:
        """Whether walking once per candidate can change a reading: some candidate's ``name``,
        called with its arguments unknown (or read, if not a method), differs between devices, or
        the candidates give different numbers (``get_min_capability()`` returning 75, 89, 100,
        which the caller compares with the device). Anything else reads the same through every
        candidate, or differs in ways no device test sees, and is left joined."""
        cached = self._choice_worth.get(choice.key)
        if cached is not None:
            return cached
        self._choice_worth[choice.key] = False  # a lookup met again while this one is read
        numbers: set[object] = set()
        worth = False
        for candidate in choice.candidates:
            value = self.attribute(const(candidate.receiver), name, Frame(frame.module, {}, {}), node)
            if any(isinstance(x, (FuncRef, BoundMethod, PartialRef)) for x in elements_of(value)):
                value = self.call(value, [], {}, frame, node)
            if value.arch:
                worth = True
                break
            numbers.update(
                x for x in elements_of(value) if isinstance(x, (int, float)) and not isinstance(x, bool)
            )
            if len(numbers) > 1:
                worth = True
                break
        self._choice_worth[choice.key] = worth
        return worth

    def _definition(self, cls: ClassRef, name: str) -> tuple[str, int] | None:
        """Where ``name`` is defined for ``cls``: in its own body or a base class's (path, line)."""

        def defines(info: ClassInfo, stmt: ast.stmt) -> tuple[str, int] | None:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return info.module.path, stmt.lineno
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and t.id == name for t in targets
            ):
                return info.module.path, stmt.lineno
            return None

        return self._in_class_or_bases(cls, defines)

    def _unknown_attribute(self, name: str, frame: Frame, node: ast.AST) -> AV:
        if name in MODEL_WINS:
            return const(ExternalRef(f"?.{name}"))
        if name == "compute_capability":
            return cupy_capability_value(
                Evidence(
                    ".compute_capability (cupy: a string such as '90')",
                    frame.module.path,
                    getattr(node, "lineno", None),
                )
            )
        inferred = inferred_predicate(name, frame.module.path, getattr(node, "lineno", None))
        return inferred if inferred is not None else TOP

    def _external_attribute(self, ref: ExternalRef, name: str, node: ast.AST, frame: Frame) -> AV:
        if name == "compute_capability":
            return cupy_capability_value(
                Evidence(f"{ref.dotted}.compute_capability", frame.module.path, getattr(node, "lineno", None))
            )
        dotted = f"{ref.dotted}.{name}"
        if name not in MODEL_WINS and self.has_module(dotted):
            return self._module_value(dotted)
        if name not in MODEL_WINS and not self.has_module(ref.dotted):
            # `deep_gemm.utils.is_sm90()` from a library outside the scan: read from the name.
            inferred = inferred_predicate(name, frame.module.path, getattr(node, "lineno", None))
            if inferred is not None:
                return inferred
        return const(ExternalRef(dotted))

    def _class_attribute(
        self,
        cls: ClassRef,
        name: str,
        instance: Instance | None,
        frame: Frame,
        node: ast.AST,
        depth: int = 0,
    ) -> AV | None:
        info = self._classes.get(cls.key)
        if info is None or depth > 8:
            return None
        members = self._class_members.get(id(info.node))
        if members is None:
            members = self._class_members[id(info.node)] = _class_members(info.node)
        stmt = members.get(name)
        if stmt is not None:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decorators = {decorator_name(d) for d in stmt.decorator_list}
                func = self.function_value(info.module, stmt, None, f"{info.qualname}.{name}", cls)
                if (
                    "property" in decorators
                    or "cached_property" in decorators
                    or "functools.cached_property" in decorators
                ):
                    return self.call(func, [const(instance or cls)], {}, frame, node)
                if "staticmethod" in decorators:
                    return func
                if instance is not None or "classmethod" in decorators:
                    receiver = instance if instance is not None else cls
                    return const(BoundMethod(func.single(), receiver))
                return func
            assert isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None
            scope = self._class_scope(cls, info, stmt, frame, node, depth)
            return self.eval(stmt.value, Frame(info.module, scope, {}))
        for base in info.node.bases:
            base_value = self.eval(base, Frame(info.module, {}, {}))
            for element in elements_of(base_value):
                if isinstance(element, ClassRef):
                    found = self._class_attribute(element, name, instance, frame, node, depth + 1)
                    if found is not None:
                        return found
        return None

    def _class_scope(
        self, cls: ClassRef, info: ClassInfo, stmt: ast.stmt, frame: Frame, node: ast.AST, depth: int
    ) -> dict[str, AV]:
        """The class-body names bound before ``stmt`` that it reads: ``block = 128 if hopper else 64``
        sees the ``hopper = …`` above it, not a module global."""
        read = {n.id for n in walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        bound: set[str] = set()
        for earlier in info.node.body:
            if earlier is stmt:
                break
            if isinstance(earlier, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(earlier.name)
            elif isinstance(earlier, ast.Assign):
                bound.update(t.id for t in earlier.targets if isinstance(t, ast.Name))
            elif (
                isinstance(earlier, ast.AnnAssign) and isinstance(earlier.target, ast.Name) and earlier.value
            ):
                bound.add(earlier.target.id)
        scope: dict[str, AV] = {}
        for name in sorted(read & bound):
            found = self._class_attribute(cls, name, None, frame, node, depth + 1)
            if found is not None:
                scope[name] = found
        return scope

    def _record_fields(
        self, cls: ClassRef, args: list[AV], kwargs: dict[str, AV]
    ) -> tuple[tuple[str, AV], ...]:
        """The device-dependent fields of a dataclass or NamedTuple built from these arguments
        (positional in declaration order, then by keyword); () for any other class."""
        info = self._classes.get(cls.key)
        if info is None or not _declares_fields(info.node):
            return ()
        names = [
            stmt.target.id
            for stmt in info.node.body
            if isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and "ClassVar" not in info.module.segment(stmt.annotation)
        ]
        bound: dict[str, AV] = dict(zip(names, args, strict=False))
        bound.update((k, v) for k, v in kwargs.items() if k in names)
        return tuple((k, v) for k, v in bound.items() if v.arch)

    def _instance_attribute(self, inst: Instance, name: str, frame: Frame, node: ast.AST) -> AV:
        for field_name, value in inst.fields:
            if field_name == name:
                return value
        found = self._class_attribute(inst.cls, name, inst, frame, node)
        if found is not None:
            return found
        assigned = self._self_assignments(inst.cls, name)
        if assigned is not None:
            return assigned
        getattr_method = self._class_attribute(inst.cls, "__getattr__", inst, frame, node)
        if getattr_method is not None and name not in ("__dict__",):
            info = self._classes[inst.cls.key]
            step = Evidence(
                f".{name} → {info.qualname}.__getattr__({name!r})",
                info.module.path,
                _def_line(info.node, "__getattr__"),
            )
            result = self.call(getattr_method, [const(name)], {}, frame, node)
            return result.with_trail(step) if result.arch else result
        return self._unknown_attribute(name, frame, node)

    def _self_entries(self, cls: ClassRef, name: str) -> list[SelfAssignments]:
        """The methods of the class that assign ``self.<name>``, with those assignments. Which
        attributes a method assigns is read from its text once per class (a regular expression);
        a method's syntax tree is walked once, and only when an attribute it assigns is read."""
        key = (cls.key, name)
        found_entries = self._self_indexes.get(key)
        if found_entries is not None:
            return found_entries
        entries: list[SelfAssignments] = []
        info = self._classes.get(cls.key)
        if info is not None:
            for method in self._assigning_methods(cls, info).get(name, ()):
                summary = self._method_summary(info, method)
                assigns = summary.assigns.get(name)
                if not assigns:
                    continue
                # Run the method only where the value needs it: a local in the value, or an
                # assignment under a branch; otherwise the value alone is read (cheaper).
                needs_run = any(
                    id(a) not in summary.top_level
                    or a.value is None
                    or not summary.local.isdisjoint(n.id for n in walk(a.value) if isinstance(n, ast.Name))
                    for a in assigns
                )
                entries.append(SelfAssignments(method, summary.self_name, assigns, needs_run))
            # initialisers first: the attributes that gate code are set up front
            entries.sort(key=lambda m: not _INITIALIZER.match(m.method.name))
        self._self_indexes[key] = entries
        return entries

    def _assigning_methods(
        self, cls: ClassRef, info: ClassInfo
    ) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
        index = self._assigners.get(cls.key)
        if index is None:
            index = {}
            for stmt in info.node.body:
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or not stmt.args.args:
                    continue
                self_name = re.escape(stmt.args.args[0].arg)
                text = info.module.segment(stmt)
                for m in re.finditer(rf"\b{self_name}\.(\w+)\s*(?::[^=\n]*)?=(?!=)", text):
                    methods = index.setdefault(m.group(1), [])
                    if not methods or methods[-1] is not stmt:
                        methods.append(stmt)
            self._assigners[cls.key] = index
        return index

    def _method_summary(
        self, info: ClassInfo, method: ast.FunctionDef | ast.AsyncFunctionDef
    ) -> MethodSummary:
        summary = self._summaries.get(id(method))
        if summary is None:
            self_name = method.args.args[0].arg
            assigns: dict[str, list[ast.Assign | ast.AnnAssign]] = {}
            local = local_names(method) - {self_name}
            for sub in walk(method):
                if isinstance(sub, ast.Assign):
                    targets = sub.targets
                elif isinstance(sub, ast.AnnAssign) and sub.value is not None:
                    targets = [sub.target]
                else:
                    continue
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == self_name
                    ):
                        assigns.setdefault(t.attr, []).append(sub)
            summary = MethodSummary(
                self_name,
                {k: tuple(v) for k, v in assigns.items()},
                frozenset(local),
                frozenset(id(s) for s in method.body),
            )
            self._summaries[id(method)] = summary
        return summary

    def _captured(
        self, cls: ClassRef, info: ClassInfo, method: ast.FunctionDef | ast.AsyncFunctionDef
    ) -> dict[str, list[tuple[AV, int, str]]]:
        """Run one method with ``self`` bound to an instance of ``cls`` and record what it assigns to
        ``self.<attr>``, each value with its method's locals in sight (``self.use_x = is_blackwell``
        after ``is_blackwell = …is_device_capability_family(100)``) and on the lanes that reach it."""
        key = ("capture", cls.key, id(method))
        done = self._captures.get(key)
        if done is not None:
            return done
        if key in self._in_progress:
            return {}
        self_name = method.args.args[0].arg
        env: dict[str, AV] = {}
        for param in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs):
            inferred = inferred_predicate(param.arg, info.module.path, param.lineno)
            env[param.arg] = inferred if inferred is not None else TOP
        if method.args.vararg:
            env[method.args.vararg.arg] = TOP
        if method.args.kwarg:
            env[method.args.kwarg.arg] = TOP
        env[self_name] = const(Instance(cls))
        frame = Frame(info.module, env, {}, cls=cls)
        frame.captures = {}
        frame.self_name = self_name
        self._in_progress.add(key)
        saved_steps = self._steps
        try:
            self.exec_block(method.body, frame)
        except RecursionError:
            pass
        finally:
            self._steps = saved_steps
            self._in_progress.discard(key)
        self._captures[key] = frame.captures
        return frame.captures

    def _self_assignments(self, cls: ClassRef, name: str) -> AV | None:
        key = ("self", cls.key, name)
        if key in self._self_values:
            return self._self_values[key]
        if key in self._in_progress:
            return TOP
        info = self._classes.get(cls.key)
        methods = self._self_entries(cls, name)
        if info is None or not methods:
            return None
        values: list[AV] = []
        self._in_progress.add(key)
        try:
            for entry in methods[:8]:
                if entry.needs_run:
                    captured = self._captured(cls, info, entry.method).get(name, [])
                else:
                    frame = Frame(info.module, {entry.self_name: const(Instance(cls))}, {}, cls=cls)
                    captured = [
                        (self.eval(a.value, frame), a.lineno, short(info.module.segment(a.value), 100))
                        for a in entry.assigns
                        if a.value is not None
                    ]
                for value, line, shown in captured:
                    if value.arch:
                        step = Evidence(f"self.{name} = {shown}", info.module.path, line)
                        value = value.with_trail(step)
                    values.append(value)
        finally:
            self._in_progress.discard(key)
        result = _where_assigned(join(values)) if values else TOP
        if result.arch:
            self.arch_names.add_members((name,))
        self._self_values[key] = result
        return result

    def _eval_Lambda(self, node: ast.Lambda, frame: Frame) -> AV:
        return self.function_value(frame.module, node, {**frame.closure, **frame.env}, "<lambda>", None)

    # calls

    def _eval_Call(self, node: ast.Call, frame: Frame) -> AV:
        func = self.eval(node.func, frame)
        args: list[AV] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                return TOP  # *args: the arguments cannot be bound
            args.append(self.eval(a, frame))
        kwargs: dict[str, AV] = {}
        for kw in node.keywords:
            if kw.arg is None:
                return TOP  # **kwargs: the arguments cannot be bound
            kwargs[kw.arg] = self.eval(kw.value, frame)
        if frame is self.choice_frame and isinstance(node.func, ast.Attribute):
            choice = self._unsettled.pop(id(node.func), None)
            if choice is not None and (any(a.arch for a in args) or any(v.arch for v in kwargs.values())):
                self._settle(choice, node.func, args, kwargs, frame, node)
        return self.call(func, args, kwargs, frame, node)

    def _settle(
        self,
        choice: RuntimeChoice,
        attribute: ast.Attribute,
        args: list[AV],
        kwargs: dict[str, AV],
        frame: Frame,
        node: ast.Call,
    ) -> None:
        """A method of a runtime choice called with a device-dependent value
        (``backend_cls.supports_compute_capability(cap)``): each candidate is called with it (its
        branches on the parameter become parametric gates, `_record_call_site`), and if any
        answers differently per device, the choice is one after all."""
        differs = False
        for candidate in choice.candidates:
            method = self.attribute(const(candidate.receiver), attribute.attr, frame, attribute)
            differs = self.call(method, args, kwargs, frame, node).arch or differs
        if differs:
            self.choices_met.setdefault(choice.key, choice)

    def call(self, func: AV, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST) -> AV:
        if func.inferred and all(isinstance(x, bool) for x in elements_of(func)):
            # A predicate known only by its name (`is_sm90`, read as a flag): its call reads the same.
            return func
        results = {
            element: self._call_one(element, args, kwargs, frame, node) for element in elements_of(func)
        }
        if not results:
            value = TOP
        elif func.uniform:
            value = join(results.values())
        else:
            # A callee that differs between devices (`cap.to_int` bound to each lane's capability):
            # each lane takes the results of its own callees, or `.to_int()` forgets the device.
            sets: list[frozenset[object]] = []
            for i in range(lane_count()):
                acc: set[object] = set()
                for element in func.lane(i):
                    acc |= results[element].lane(i)
                sets.append(frozenset(acc) if len(acc) <= MAX_SET else TOP_SET)
            value = combine(list(results.values()), sets)
        if func.trail and value.arch:
            value = value.with_trail(*func.trail)
            value = AV(
                value.sets,
                value.inferred or func.inferred,
                reorder_trail(func.trail, value.trail),
                value.deps,
            )
        return value

    def _call_one(
        self, element: object, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST
    ) -> AV:
        if isinstance(element, FuncRef):
            if any(a.arch for a in args) or any(v.arch for v in kwargs.values()):
                self._record_call_site(element, args, kwargs, frame, node)
            return self._call_function(element, args, kwargs, node)
        if isinstance(element, PartialRef):
            merged = {**dict(element.kwargs), **kwargs}
            result = self._call_one(element.func, [*element.args, *args], merged, frame, node)
            return result
        if isinstance(element, BoundMethod):
            if isinstance(element.func, Builtin) and element.func.name.startswith("dict."):
                assert isinstance(element.receiver, DictObj)
                return dict_method(self, element.receiver, element.func.name[5:], args, frame, node)
            if isinstance(element.func, Builtin) and "." in element.func.name:
                return self._call_concrete(element, args, kwargs)
            return self._call_one(element.func, [const(element.receiver), *args], kwargs, frame, node)
        if isinstance(element, ClassRef):
            if any(a.arch for a in args) or any(v.arch for v in kwargs.values()):
                fields = self._record_fields(element, args, kwargs)
                if fields:
                    return const(Instance(element, fields))
            return const(Instance(element))
        if isinstance(element, (ExternalRef, Builtin)):
            return call_model(self, element, args, kwargs, frame, node)
        return TOP

    def _call_concrete(self, method: BoundMethod, args: list[AV], kwargs: dict[str, AV]) -> AV:
        name = method.func.name  # type: ignore[attr-defined]
        receiver = const(method.receiver)
        keys = list(kwargs)
        return lift(
            lambda r, *xs: call_concrete_method(name, r, tuple(xs[: len(args)]), dict(zip(keys, xs[len(args):], strict=True))),
            receiver, *args, *kwargs.values(),
        )  # fmt: skip

    def _record_call_site(
        self, ref: FuncRef, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST
    ) -> None:
        """A scanned function called with a value that differs between devices: its branches on that
        parameter are gates (parametric), instantiated with what its callers pass (`walk_parametric`)."""
        info = self._callables.get(ref.key)
        if info is None or isinstance(info.node, ast.Lambda):
            return
        module_frame = Frame(info.module, {}, dict(info.closure or {}), cls=info.cls)
        bound = self.bind_arguments(info, args, kwargs, module_frame)
        shown = short(frame.module.segment(node), 100) if isinstance(node, ast.expr) else f"{info.qualname}()"
        site = Evidence(f"called as {shown}", frame.module.path, getattr(node, "lineno", None))
        sites = self.call_sites.setdefault(id(info.node), {})
        for name, value in bound.items():
            if value.arch:
                entries = sites.setdefault(name, [])
                if all(v.sets != value.sets or e != site for v, e in entries):
                    # The first sites by place in the code, not the first the walk met: which
                    # modules were walked first must not choose the callers a gate is read with.
                    entries.append((value, site))
                    entries.sort(key=_site_order)
                    del entries[MAX_CALL_SITES:]

    def _call_function(self, ref: FuncRef, args: list[AV], kwargs: dict[str, AV], node: ast.AST) -> AV:
        info = self._callables.get(ref.key)
        if info is None:
            return TOP
        key = (ref.key, tuple(a.sets for a in args), tuple(sorted((k, v.sets) for k, v in kwargs.items())))
        cached = self._calls.get(key)
        if cached is not None:
            return cached
        if key in self._in_progress or self._depth >= _MAX_CALL_DEPTH:
            return TOP
        self._in_progress.add(key)
        self._depth += 1
        try:
            result = self._run_function(info, args, kwargs)
        except RecursionError:
            result = TOP
        finally:
            self._depth -= 1
            self._in_progress.discard(key)
        self._calls[key] = result
        return result

    def bind_arguments(
        self, info: FunctionInfo, args: list[AV], kwargs: dict[str, AV], module_frame: Frame
    ) -> dict[str, AV]:
        spec = info.node.args
        env: dict[str, AV] = {}
        positional = [*spec.posonlyargs, *spec.args]
        defaults = [None] * (len(positional) - len(spec.defaults)) + list(spec.defaults)
        for i, param in enumerate(positional):
            if i < len(args):
                env[param.arg] = args[i]
            elif param.arg in kwargs:
                env[param.arg] = kwargs[param.arg]
            elif defaults[i] is not None:
                env[param.arg] = self.eval(defaults[i], module_frame)  # type: ignore[arg-type]
            else:
                env[param.arg] = TOP
        for param, default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if param.arg in kwargs:
                env[param.arg] = kwargs[param.arg]
            elif default is not None:
                env[param.arg] = self.eval(default, module_frame)
            else:
                env[param.arg] = TOP
        if spec.vararg:
            env[spec.vararg.arg] = TOP
        if spec.kwarg:
            env[spec.kwarg.arg] = TOP
        return env

    def _run_function(self, info: FunctionInfo, args: list[AV], kwargs: dict[str, AV]) -> AV:
        module_frame = Frame(info.module, {}, dict(info.closure or {}), cls=info.cls)
        env = self.bind_arguments(info, args, kwargs, module_frame)
        frame = Frame(info.module, env, dict(info.closure or {}), cls=info.cls)
        if isinstance(info.node, ast.Lambda):
            return self.eval(info.node.body, frame)
        self.exec_block(info.node.body, frame)
        if not terminates(info.node.body):
            frame.returns.append((NONE, list(frame.guards)))
        return self._function_result(info, frame)

    def _function_result(self, info: FunctionInfo, frame: Frame) -> AV:
        result = returns_result(frame.returns, info.qualname)
        if result.arch:
            node = info.node
            arch_returns = [r for r in walk(node) if isinstance(r, ast.Return) and r.value is not None]
            shown = " | ".join(
                short(info.module.segment(r.value), 80) for r in arch_returns[:2] if r.value is not None
            )
            line = arch_returns[0].lineno if arch_returns else getattr(node, "lineno", None)
            step = Evidence(f"{info.qualname}() returns {shown}", info.module.path, line)
            result = AV(result.sets, result.inferred, (step, *result.trail)[:16], result.deps)
            self.arch_names.add_function(info.qualname.split(".")[-1], method=info.cls is not None)
        return result

    def exec_block(self, stmts: list[ast.stmt], frame: Frame) -> None:
        """Run statements in ``frame`` (`liftgate.detect.py_exec.Executor.exec_block`)."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class SelfAssignments:
    """One method's assignments of one ``self.<attr>``, and whether reading them needs the method run."""

    method: ast.FunctionDef | ast.AsyncFunctionDef
    self_name: str
    assigns: tuple[ast.Assign | ast.AnnAssign, ...]
    needs_run: bool


@dataclass(frozen=True, slots=True)
class MethodSummary:
    """What one walk of a method tells about its ``self.`` assignments."""

    self_name: str
    assigns: dict[str, tuple[ast.Assign | ast.AnnAssign, ...]]
    local: frozenset[str]
    top_level: frozenset[int]


def _declares_fields(node: ast.ClassDef) -> bool:
    """A dataclass (``@dataclass``, ``@dataclasses.dataclass(frozen=True)``) or a ``NamedTuple``:
    its constructor's arguments are its annotated fields, in order."""
    if any(decorator_name(d).split(".")[-1] == "dataclass" for d in node.decorator_list):
        return True
    return any(
        (isinstance(b, ast.Name) and b.id == "NamedTuple")
        or (isinstance(b, ast.Attribute) and b.attr == "NamedTuple")
        for b in node.bases
    )


def _where_reached(masked: AV, joined: AV) -> AV:
    """A function's result: on each lane, the returns that lane reaches (``masked``); on a lane that
    reaches none (the function raises there, or its guards are undecided), the join of all returns,
    so that a raise is not read as a ``False`` result."""
    if not masked.arch:
        return masked if all(masked.lane(i) for i in range(lane_count())) else joined
    sets = [masked.lane(i) or joined.lane(i) for i in range(lane_count())]
    return combine([masked, joined], sets)


def _where_assigned(value: AV) -> AV:
    """An attribute of ``self`` read in any method, when every lane that reaches an assignment of it
    gets the same values and the others reach none (each assignment is under a guard false there,
    or after a ``raise`` the constructor takes there): those values on every lane. An object that
    never exists on a device has no value to test there; read as "no value", every condition on
    the attribute, in every method, was a gate shutting that device out (`self.use_fp8`, after
    ``if major != 9: raise`` in ``__init__``), the guard's echo. Lanes that assign different values
    keep the others empty: ``self.impl`` set only under ``if is_sm100():`` and ``elif is_sm90():``
    is tested as neither elsewhere, where reading it fails."""
    if value.uniform:
        return value
    assigned = {value.lane(i) for i in range(lane_count())}
    assigned.discard(frozenset())
    if len(assigned) != 1:
        return value  # no lane left empty, none assigned, or values that differ between lanes
    return AV(tuple(assigned), value.inferred, value.trail, value.deps)


def _def_line(cls: ast.ClassDef, name: str) -> int | None:
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt.lineno
    return cls.lineno


def _in_stable_order(keys: frozenset[object]) -> Iterable[object]:
    """A set's elements in an order of their own (type, then ``repr``), not the set's: the order of a
    set of strings is the hash seed's, and it ordered the evidence of a lookup with several keys
    on one device, so two scans of the same files gave two reports."""
    if len(keys) < 2:
        return keys
    return sorted(keys, key=lambda k: (type(k).__name__, repr(k)))


def _render_lookup(expr_text: str, key: object, found: AV) -> str:
    try:
        value = found.single()
        shown = repr(value) if isinstance(value, (str, int)) else getattr(value, "name", "…")
    except Unsupported:
        shown = "…"
    base = expr_text.split("[")[0].split(".get(")[0] if expr_text else "dict"
    return f"{short(base, 60)}[{key!r}] → {shown}"


def returns_result(returns: list[tuple[AV, list[tuple[AV, str]]]], qualname: str) -> AV:
    """What a call of function ``qualname`` returns, from its returns (each with the guards of its
    path); TOP when it has none (it always raises)."""
    if not returns:
        return TOP  # always raises: no value
    if not any(v.arch for v, _ in returns) and not any(g.arch for _, guards in returns for g, _ in guards):
        return join(v for v, _ in returns)
    kept: list[AV] = []
    masked: list[AV] = []
    deps: list[str] = []
    for value, guards in returns:
        non_arch = [(g, text) for g, text in guards if not g.arch]
        if not value.arch and (non_arch or is_unknown(value)) and not any(g.arch for g, _ in guards):
            # A return that depends on something other than the device (`if not is_cuda():
            # return False`, an override dict): assumed not taken, and reported.
            deps.extend(f"{_negated(text)} (in {qualname})" for _, text in non_arch[-1:])
            continue
        # Each return on the lanes that reach it: `if c < 90: return False` then `return True`
        # is False below 9.0 and True from it, not "either" everywhere.
        kept.append(value)
        masked.append(reached(value, guards))
    result = join(kept) if kept else join(v for v, _ in returns)
    if masked:
        result = _where_reached(join(masked), result)
    return result.with_deps(deps) if deps else result


def _negated(text: str) -> str:
    """The negation of a condition's text, without a double ``not``."""
    text = short(text, 90)
    if text.startswith("not (") and text.endswith(")"):
        return text[5:-1]
    if text.startswith("not ") and " and " not in text and " or " not in text:
        return text[4:]
    return f"not ({text})"


def _typevar_bound(module: Module, name: str) -> ast.expr | None:
    """The ``bound=`` of a module-level ``name = TypeVar("name", bound=...)``."""
    for stmt in module.tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == name
            and isinstance(stmt.value, ast.Call)
            and decorator_name(stmt.value.func) in ("TypeVar", "typing.TypeVar")
        ):
            return next((k.value for k in stmt.value.keywords if k.arg == "bound"), None)
    return None


def _class_members(node: ast.ClassDef) -> dict[str, ast.stmt]:
    """Each name to the first statement of the class body that defines it, as
    `Evaluator._class_attribute` looks them up: a ``def``, an assignment with the name among its
    targets, an annotated assignment of the name with a value."""
    members: dict[str, ast.stmt] = {}
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            members.setdefault(stmt.name, stmt)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    members.setdefault(target.id, stmt)
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            members.setdefault(stmt.target.id, stmt)
    return members


def _choice_label(node: ast.AST, name: str, frame: Frame) -> str:
    """How a runtime choice is shown: the looked-up expression's text, or the name. Cut only for
    a lookup that is a choice, not for each of the 745,564 lookups `_runtime_choice` was asked
    about in FlashInfer and SGLang."""
    return short(frame.module.segment(node), 80) if isinstance(node, ast.expr) else name
