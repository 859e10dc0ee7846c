"""Models of what the scanned code calls but the py-runtime interpreter cannot read: the device
APIs (torch, vLLM's platform, NVML, Triton), caching decorators and ``functools.partial``, and
the Python builtins that capability checks use (``int``, ``len``, ``any``, ``getattr``, …).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from liftgate.detect.py_binding import short
from liftgate.detect.py_domain import (
    MAX_LOOP_ITEMS,
    elements_of,
    raise_type_error,
    reorder_trail,
)
from liftgate.detect.pyvalues import (
    AV,
    NONE,
    TOP,
    ArchList,
    BoundMethod,
    Builtin,
    Cap,
    DictObj,
    ExternalRef,
    FuncRef,
    PartialRef,
    Unsupported,
    capability_value,
    const,
    device_name_value,
    device_props_value,
    join,
    lift,
    normalize,
    sm_number_value,
    triton_target_value,
    truthiness,
)
from liftgate.detect.runtime_arch import archs_for_capabilities, capabilities
from liftgate.model import Evidence, TorchOp

if TYPE_CHECKING:
    from liftgate.detect.py_eval import Evaluator
    from liftgate.detect.py_scope import Frame

    _BuiltinFn = Callable[[Evaluator, list[AV], dict[str, AV], Frame, ast.AST], AV]

# Modelled device APIs win over any definition in the scanned code: vLLM's platform classes and
# SGLang's wrappers implement exactly these semantics on top of torch and NVML.
MODEL_WINS = frozenset(
    {"get_device_capability", "has_device_capability", "is_device_capability", "is_device_capability_family",
     "get_device_properties", "get_device_name", "nvmlDeviceGetCudaComputeCapability", "get_current_target",
     "get_arch_list"}
)  # fmt: skip


def call_model(
    interp: Evaluator,
    element: ExternalRef | Builtin,
    args: list[AV],
    kwargs: dict[str, AV],
    frame: Frame,
    node: ast.AST,
) -> AV:
    """A call of a modelled device API (torch, vLLM's platform, NVML, Triton), a caching or
    ``partial`` wrapper, or a Python builtin; anything else is "anything"."""
    dotted = element.dotted if isinstance(element, ExternalRef) else element.name
    name = dotted.rsplit(".", 1)[-1]
    if isinstance(element, Builtin) and element.name in _PY_BUILTINS:
        return _PY_BUILTINS[element.name](interp, args, kwargs, frame, node)
    if isinstance(element, ExternalRef) and dotted.startswith("torch.ops.") and name in interp.torch_ops:
        ops = _ops_for(interp.torch_ops[name], dotted, frame.module.package)
        return call_op(interp, ops, args, _call_site(name, frame, node))
    if name in ("get_device_capability", "nvmlDeviceGetCudaComputeCapability"):
        return capability_value(_call_site(name, frame, node))
    if name == "get_device_properties":
        return device_props_value(_call_site(name, frame, node))
    if name in ("get_device_name", "nvmlDeviceGetName"):
        return device_name_value(_call_site(name, frame, node))
    if name == "get_current_target":
        return triton_target_value(_call_site(name, frame, node))
    if name == "get_arch_list":
        return const(ArchList())
    if name == "get_device_sm" and isinstance(element, ExternalRef):
        return sm_number_value(_call_site(name, frame, node), inferred=True)
    if name in ("has_device_capability", "is_device_capability", "is_device_capability_family"):
        wanted = args[0] if args else kwargs.get("capability", TOP)
        cap = capability_value(_call_site(name, frame, node))
        if name == "has_device_capability":
            fn = _has_capability
        elif name == "is_device_capability":
            fn = _is_capability
        else:
            fn = _is_capability_family
        return lift(fn, cap, wanted)
    if name in ("lru_cache", "cache", "cached", "wraps", "cached_property", "compile", "jit"):
        if (
            args
            and not kwargs
            and name in ("cache", "lru_cache", "cached_property")
            and _is_callable(args[0])
        ):
            return args[0]
        return const(Builtin("identity"))
    if name == "partial":
        if not args:
            return TOP
        text = short(frame.module.segment(node), 160) if isinstance(node, ast.expr) else "partial(…)"
        rest = tuple(args[1:])
        kw = tuple(sorted(kwargs.items()))
        return (
            join([const(PartialRef(f, rest, kw, text)) for f in elements_of(args[0])]).with_trail(
                *args[0].trail
            )
            if elements_of(args[0])
            else TOP
        )
    if isinstance(element, Builtin) and element.name == "identity":
        return args[0] if args else TOP
    return TOP


def _call_site(name: str, frame: Frame, node: ast.AST) -> Evidence:
    """The evidence step of a modelled call: its text where it is. Cut only for a call a model
    answers, not for each of the 382,019 calls `call_model` saw in FlashInfer and SGLang."""
    shown = short(frame.module.segment(node), 80) if isinstance(node, ast.expr) else f"{name}()"
    return Evidence(shown, frame.module.path, getattr(node, "lineno", None))


def _ops_for(ops: list[TorchOp], dotted: str, package: str) -> list[TorchOp]:
    """The ops ``torch.ops.<ns>.<name>`` can mean: the namespace must agree where both are known,
    and the caller's own package's ops win; ops of two other packages are ambiguous (none)."""
    parts = dotted.split(".")
    namespace = parts[2] if len(parts) == 4 else None
    fits = [op for op in ops if op.namespace is None or namespace is None or op.namespace == namespace]
    own = [op for op in fits if op.package == package]
    if own:
        return own
    return fits if len({op.package for op in fits}) == 1 else []


def call_op(interp: Evaluator, ops: list[TorchOp], args: list[AV], site: Evidence) -> AV:
    """``torch.ops.<ns>.<name>(…)`` of a query op the scan's C++ registers (`TorchOp`): when the
    argument at the op's capability position is the device's capability as ``major * 10 + minor``
    in every lane (``capability.to_int()``), the result is what the C++ function returns there,
    and the call is remembered so the C++ branches it decides are reported with it. Anything
    else passed learns nothing ("anything")."""
    for op in ops:
        if op.position >= len(args):
            continue
        value = args[op.position]
        if not all(value.lane(i) == {cc[0] * 10 + cc[1]} for i, cc in enumerate(capabilities())):
            continue
        # The call, then how its caller came by the capability (the frames it was passed down).
        calls = interp.op_calls.setdefault((op.package, op.name, op.position), {})
        calls[site] = None
        for step in value.trail:
            calls.setdefault(step, None)
        sets: list[frozenset[object]] = []
        for cc in capabilities():
            archs = archs_for_capabilities((cc,))
            if archs and not archs - op.returns_true:
                sets.append(frozenset({True}))
            elif not archs & (op.returns_true | op.returns_unknown):
                sets.append(frozenset({False}))
            else:
                sets.append(frozenset({True, False}))
        returned = Evidence(
            f"torch op {op.name} runs the C++ {op.function}() with {op.parameter} = the capability",
            op.path,
            op.line,
        )
        return AV(normalize(sets), value.inferred, value.trail, value.deps).with_trail(site, returned)
    return TOP


def _has_capability(cap: object, wanted: object) -> bool:
    assert isinstance(cap, Cap)
    if isinstance(wanted, tuple):
        return tuple(cap) >= tuple(wanted)
    if isinstance(wanted, int):
        return cap.to_int() >= wanted
    raise Unsupported("capability")


def _is_capability(cap: object, wanted: object) -> bool:
    assert isinstance(cap, Cap)
    if isinstance(wanted, tuple):
        return tuple(cap) == tuple(wanted)
    if isinstance(wanted, int):
        return cap.to_int() == wanted
    raise Unsupported("capability")


def _is_capability_family(cap: object, wanted: object) -> bool:
    assert isinstance(cap, Cap)
    if isinstance(wanted, int):
        return cap.to_int() // 10 == wanted // 10
    raise Unsupported("capability")


def _is_callable(value: AV) -> bool:
    return all(isinstance(x, (FuncRef, PartialRef, BoundMethod)) for x in elements_of(value))


# -- Python builtins ------------------------------------------------------------------------------


def _unary(fn: Callable[[object], object]) -> _BuiltinFn:
    def model(interp: Evaluator, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST) -> AV:
        if len(args) != 1 or kwargs:
            return TOP
        return lift(fn, args[0])

    return model


def _int(value: object) -> object:
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return int(value)
    raise Unsupported("int")


def _str(value: object) -> object:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return str(value)
    raise Unsupported("str")


def _tuple(value: object) -> object:
    if isinstance(value, (tuple, str, frozenset)):
        return tuple(value)
    raise Unsupported("tuple")


def _len(value: object) -> object:
    if isinstance(value, (tuple, str, frozenset)):
        return len(value)
    raise Unsupported("len")


def _any_all(fn: Callable[[Iterable[object]], bool]) -> Callable[[object], object]:
    def model(value: object) -> object:
        if isinstance(value, (tuple, frozenset)):
            truths = [truthiness(x) for x in value]
            if any(t is None for t in truths):
                raise Unsupported("any")
            return fn(truths)
        raise Unsupported("any")

    return model


def _minmax(fn: Callable[..., object]) -> _BuiltinFn:
    def model(interp: Evaluator, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST) -> AV:
        if kwargs or not args:
            return TOP
        if len(args) == 1:
            return lift(
                lambda v: fn(v) if isinstance(v, (tuple, frozenset)) and v else raise_type_error(), args[0]
            )
        return lift(lambda *xs: fn(xs), *args)

    return model


def _getattr_model(
    interp: Evaluator, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST
) -> AV:
    if len(args) < 2:
        return TOP
    try:
        name = args[1].single()
    except Unsupported:
        return TOP
    if not isinstance(name, str):
        return TOP
    value = interp.attribute(args[0], name, frame, node)
    if args[1].trail:
        value = AV(value.sets, value.inferred, reorder_trail(args[1].trail, value.trail), value.deps)
    if len(args) > 2 and value.is_top():
        return join([value, args[2]])
    return value


def _map_model(interp: Evaluator, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST) -> AV:
    if len(args) != 2:
        return TOP
    fns = elements_of(args[0])
    if len(fns) != 1 or not isinstance(fns[0], Builtin) or fns[0].name not in ("int", "str"):
        return TOP
    convert = _int if fns[0].name == "int" else _str
    return lift(
        lambda v: tuple(convert(x) for x in v) if isinstance(v, (tuple, frozenset)) else raise_type_error(),
        args[1],
    )


def _range_model(interp: Evaluator, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST) -> AV:
    if kwargs or not 1 <= len(args) <= 3:
        return TOP

    def make(*xs: object) -> object:
        if not all(isinstance(x, int) for x in xs):
            raise Unsupported("range")
        r = range(*xs)  # type: ignore[call-overload]
        if len(r) > MAX_LOOP_ITEMS:
            raise Unsupported("range")
        return tuple(r)

    return lift(make, *args)


def _top_model(interp: Evaluator, args: list[AV], kwargs: dict[str, AV], frame: Frame, node: ast.AST) -> AV:
    return TOP


_PY_BUILTINS: dict[str, _BuiltinFn] = {
    "int": _unary(_int),
    "str": _unary(_str),
    "float": _unary(lambda v: float(v) if isinstance(v, (int, float, str)) else raise_type_error()),
    "bool": _unary(lambda v: bool(v) if truthiness(v) is not None else raise_type_error()),
    "tuple": _unary(_tuple),
    "list": _unary(_tuple),
    "len": _unary(_len),
    "any": _unary(_any_all(any)),
    "all": _unary(_any_all(all)),
    "sorted": _unary(lambda v: tuple(sorted(v)) if isinstance(v, (tuple, frozenset)) else raise_type_error()),
    "abs": _unary(lambda v: abs(v) if isinstance(v, (int, float)) else raise_type_error()),
    "min": _minmax(min),
    "max": _minmax(max),
    "getattr": _getattr_model,
    "map": _map_model,
    "range": _range_model,
    "isinstance": _top_model,
    "hasattr": _top_model,
    "print": lambda *a: NONE,
}
BUILTIN_NAMES: dict[str, AV] = {
    **{name: const(Builtin(name)) for name in _PY_BUILTINS},
    "True": const(True),
    "False": const(False),
    "None": NONE,
    "object": const(Builtin("object")),
}


def dict_method(
    interp: Evaluator, d: DictObj, method: str, args: list[AV], frame: Frame, node: ast.AST
) -> AV:
    if method == "get" and args:
        return interp.dict_lookup(d, args[0], frame, node, args[1] if len(args) > 1 else NONE)
    return TOP
