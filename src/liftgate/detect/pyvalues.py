"""The abstract values the Python detector computes with: one set of possible values per device.

The runtime sees the device's compute capability and nothing else of the architecture, so
every value is held as *lanes*, one per known capability (7.0 … 12.1), and each lane holds the
set of concrete Python values the expression can take on such a device. A capability query is
``{(9, 0)}`` on the 9.0 lane and ``{(12, 0)}`` on the 12.0 lane; ``major * 10 + minor`` is
computed lane by lane with ordinary Python; a value the detector cannot see (a tensor's dtype,
``torch.version.cuda``) is the pair of markers ``{ANY_TRUE, ANY_FALSE}``: *something*, truthy or
not. A condition is an architecture gate when its truth differs between lanes.

Lanes never run scanned code: only whitelisted operations on plain data (ints, strings, tuples)
and the modelled device APIs below are evaluated.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from liftgate.arch.core import arch_data
from liftgate.detect.runtime_arch import capabilities
from liftgate.model import Evidence

# Beyond this many possible values on one lane, the lane becomes "anything". Room for every
# device name of one capability (26 on 8.6): `name.lower()` must not forget the device.
MAX_SET = 48
MAX_PRODUCT = 256
MAX_TRAIL = 14
# Plain data is bounded like the lane sets: an int of more bits, or a string or tuple longer than
# this, is "anything" (a capability check computes with small numbers; ``a = a * a`` repeated
# forty times must not compute a 2**40-bit integer). Results are checked, and the operations that
# can grow a value beyond its inputs (``*``, ``**``, ``<<``, ``str.replace``, ``str.join``,
# ``str.format``) are checked before they run.
MAX_INT_BITS = 4096
MAX_LEN = 1 << 20


class _Marker:
    __slots__ = ("name", "truthy")

    def __init__(self, name: str, truthy: bool) -> None:
        self.name = name
        self.truthy = truthy

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name


ANY_TRUE = _Marker("ANY_TRUE", True)
ANY_FALSE = _Marker("ANY_FALSE", False)
TOP_SET: frozenset[object] = frozenset({ANY_TRUE, ANY_FALSE})
NONE_SET: frozenset[object] = frozenset({None})


class Unsupported(Exception):
    """An operation on concrete values that the detector refuses to model (the lane becomes TOP)."""


# Not ``frozen``: a frozen dataclass sets each field through ``object.__setattr__``, which made
# building values (millions per scan) four times slower. No code assigns to a value's fields; the
# hash is the frozen one (from the fields), so values still key dicts and sets.
@dataclass(slots=True, unsafe_hash=True)
class AV:
    """An abstract value: per-lane sets of possible values, how it was derived, what it assumes.

    ``sets`` has one entry (the same on every lane) or one per lane; a value that differs
    between lanes is *arch-dependent* (`arch`). ``inferred`` says that part of it
    came from a name rather than from code; ``trail`` is the resolution chain shown as evidence;
    ``deps`` the non-architecture conditions that were assumed favourable.
    """

    sets: tuple[frozenset[object], ...]
    inferred: bool = False
    trail: tuple[Evidence, ...] = ()
    deps: tuple[str, ...] = ()

    @property
    def arch(self) -> bool:
        """The value differs between devices: the only sense of "derived from the arch" that matters."""
        return len(self.sets) > 1

    def lane(self, i: int) -> frozenset[object]:
        return self.sets[0] if len(self.sets) == 1 else self.sets[i]

    @property
    def uniform(self) -> bool:
        return len(self.sets) == 1

    def single(self) -> object:
        """The one concrete value on every lane, or raise Unsupported."""
        if len(self.sets) == 1 and len(self.sets[0]) == 1:
            (value,) = self.sets[0]
            if not isinstance(value, _Marker):
                return value
        raise Unsupported("not a single value")

    def is_top(self) -> bool:
        return all(s == TOP_SET for s in self.sets)

    def with_trail(self, *steps: Evidence) -> AV:
        return AV(self.sets, self.inferred, _merge_trail(steps, self.trail), self.deps)

    def with_deps(self, deps: Iterable[str]) -> AV:
        merged = tuple(dict.fromkeys((*self.deps, *deps)))
        return AV(self.sets, self.inferred, self.trail, merged)


def _merge_trail(*trails: Iterable[Evidence]) -> tuple[Evidence, ...]:
    out: dict[Evidence, None] = {}
    for trail in trails:
        for step in trail:
            out.setdefault(step, None)
            if len(out) >= MAX_TRAIL:
                return tuple(out)
    return tuple(out)


def const(value: object) -> AV:
    return AV((frozenset({value}),))


TOP = AV((TOP_SET,))
NONE = AV((NONE_SET,))


def lane_count() -> int:
    return len(capabilities())


def normalize(sets: list[frozenset[object]]) -> tuple[frozenset[object], ...]:
    first = sets[0]
    for s in sets:
        if s != first:
            return tuple(sets)
    return (first,)


def combine(parts: Iterable[AV], sets: list[frozenset[object]]) -> AV:
    """A result lane set with the provenance of ``parts``."""
    parts = list(parts)
    normalized = normalize(sets)
    inferred = False
    if len(normalized) > 1:
        for p in parts:
            if p.inferred:
                inferred = True
                break
    trails = [p.trail for p in parts if p.trail]
    deps = [p.deps for p in parts if p.deps]
    return AV(
        normalized,
        inferred,
        _merge_trail(*trails) if trails else (),
        tuple(dict.fromkeys(d for group in deps for d in group)) if deps else (),
    )


def join(values: Iterable[AV]) -> AV:
    values = [v for v in values]
    if not values:
        return NONE
    if len(values) == 1:
        return values[0]
    n = 1 if all(v.uniform for v in values) else lane_count()
    sets = []
    for i in range(n):
        acc: set[object] = set()
        for v in values:
            acc |= v.lane(i)
        sets.append(frozenset(acc) if len(acc) <= MAX_SET else TOP_SET)
    return combine(values, sets)


def lift(fn: Callable[..., object], *args: AV, keep_classes: bool = False) -> AV:
    """Apply ``fn`` lane by lane over every combination of possible values.

    A combination involving an unknown (marker) or an opaque object yields "anything"; one that
    raises is dropped (that path would raise at run time, so it produces no value). With
    ``keep_classes`` a class reference is a value like any other (a list of kernel classes).
    """
    n = 1 if all(a.uniform for a in args) else lane_count()
    if n == 1:
        # An operand that is "anything" on every lane, and none empty (no value): the result is
        # "anything" whatever ``fn`` does, which the loop below finds after more work.
        lanes = [a.sets[0] for a in args]
        if all(lanes) and any(s is TOP_SET for s in lanes):
            return combine(args, [TOP_SET])
    sets: list[frozenset[object]] = []
    for i in range(n):
        lanes = [a.lane(i) for a in args]
        size = 1
        for s in lanes:
            size *= len(s)
        if size > MAX_PRODUCT:
            sets.append(TOP_SET)
            continue
        out: set[object] = set()
        # Some combination holds an unknown or an opaque object exactly when some lane does (and
        # none is empty): the result is then "anything", whatever the others give.
        top = size > 0 and any(_unknowable(c, keep_classes) for s in lanes for c in s)
        if not top:
            for combo in itertools.product(*lanes):
                try:
                    out.add(bounded(fn(*combo)))
                except Unsupported:
                    top = True
                    break
                except Exception:
                    continue
        if top or len(out) > MAX_SET:
            sets.append(TOP_SET)
        else:
            try:
                sets.append(frozenset(out))
            except TypeError:
                sets.append(TOP_SET)
    return combine(args, sets)


def _unknowable(value: object, keep_classes: bool) -> bool:
    return isinstance(value, _Marker) or (
        isinstance(value, Opaque) and not (keep_classes and isinstance(value, ClassRef))
    )


def bounded(value: object) -> object:
    """``value`` itself, or Unsupported when it is plain data beyond MAX_INT_BITS or MAX_LEN."""
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise Unsupported("an integer too large to follow")
    elif isinstance(value, (str, tuple)) and len(value) > MAX_LEN:
        raise Unsupported("a value too long to follow")
    return value


class Truth3:
    TRUE = "T"
    FALSE = "F"
    MAYBE = "M"


def truth_lanes(value: AV) -> list[str]:
    """Per lane: certainly true, certainly false, or either."""
    if value.uniform:  # every lane is the same set: read it once
        return [_truth(value.sets[0])] * lane_count()
    return [_truth(value.lane(i)) for i in range(lane_count())]


def _truth(s: frozenset[object]) -> str:
    seen: set[bool] = set()
    for v in s:
        t = truthiness(v)
        seen.update((True, False) if t is None else (t,))
    if seen == {True}:
        return Truth3.TRUE
    if seen == {False} or not seen:
        return Truth3.FALSE
    return Truth3.MAYBE


def is_marker(value: object) -> bool:
    """One of the "anything" markers (`ANY_TRUE`, `ANY_FALSE`)."""
    return isinstance(value, _Marker)


def truthiness(value: object) -> bool | None:
    if isinstance(value, _Marker):
        return value.truthy
    if isinstance(value, Opaque):
        return None
    try:
        return bool(value)
    except Exception:
        return None


# -- concrete values the modelled device APIs return ---------------------------------------


class Cap(tuple):  # type: ignore[type-arg]
    """A compute capability as torch (a tuple) and vLLM (``DeviceCapability``) return it."""

    __slots__ = ()

    @property
    def major(self) -> int:
        return int(self[0])

    @property
    def minor(self) -> int:
        return int(self[1])

    def to_int(self) -> int:
        return self.major * 10 + self.minor

    def as_version_str(self) -> str:
        return f"{self.major}.{self.minor}"


@dataclass(frozen=True, slots=True)
class DeviceProps:
    """``torch.cuda.get_device_properties()`` on a device of one capability."""

    major: int
    minor: int
    name: str

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class TritonTarget:
    """``triton.runtime.driver.active.get_current_target()``: backend and arch number."""

    backend: str
    arch: int


class Opaque:
    """Objects that are not plain data: modules, functions, classes. Operations on them are unknown."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ModuleRef(Opaque):
    name: str


@dataclass(frozen=True, slots=True)
class ExternalRef(Opaque):
    """Something outside the scanned code, by its dotted name (``torch.cuda``)."""

    dotted: str


@dataclass(frozen=True, slots=True)
class FuncRef(Opaque):
    key: int  # the interpreter's registry key of (module, node, closure)
    name: str


@dataclass(frozen=True, slots=True)
class ClassRef(Opaque):
    key: int
    name: str


@dataclass(frozen=True, slots=True)
class Instance(Opaque):
    cls: ClassRef
    # A dataclass or NamedTuple built with device-dependent fields (`KernelConfig(use_tma=cap >= 90)`):
    # those fields' values, read back by `cfg.use_tma` wherever the instance flows.
    fields: tuple[tuple[str, AV], ...] = ()


@dataclass(frozen=True, slots=True)
class BoundMethod(Opaque):
    func: object
    receiver: object


@dataclass(frozen=True, slots=True, eq=False)  # identity: hashing nested values on every lookup is too slow
class PartialRef(Opaque):
    func: object
    args: tuple[AV, ...]
    kwargs: tuple[tuple[str, AV], ...]
    text: str  # how the partial was written, for evidence


@dataclass(frozen=True, slots=True, eq=False)  # identity, like PartialRef
class DictObj(Opaque):
    items: tuple[tuple[object, AV], ...]
    where: Evidence | None = None

    def get(self, key: object) -> AV | None:
        for k, v in self.items:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class Builtin(Opaque):
    name: str


@dataclass(frozen=True, slots=True)
class ArchList(Opaque):
    """``torch.cuda.get_arch_list()``: which archs the running torch was built for."""


# -- device facts ---------------------------------------------------------------------------


def product_device_name(slug: str) -> str:
    """A CUDA device name as the driver reports it, from a product slug of the arch data."""
    m = re.fullmatch(r"(rtx|gtx)(\d{4})(ti|super|tisuper)?", slug)
    if m:
        suffix = {"ti": " Ti", "super": " SUPER", "tisuper": " Ti SUPER", None: ""}[m.group(3)]
        return f"NVIDIA GeForce {m.group(1).upper()} {m.group(2)}{suffix}"
    words = slug.replace("-", " ").split()
    text = " ".join(w.upper() if any(ch.isdigit() for ch in w) or len(w) <= 3 else w.title() for w in words)
    if slug.startswith(("jetson", "agx", "orin", "thor", "xavier")):
        return text
    return f"NVIDIA {text}"


@cache
def device_names() -> dict[tuple[int, int], tuple[str, ...]]:
    out: dict[tuple[int, int], tuple[str, ...]] = {}
    for cap in arch_data().capabilities:
        names = dict.fromkeys(product_device_name(p) for p in cap.products)
        out[cap.cc] = tuple(names) or (f"NVIDIA GPU (compute capability {cap.major}.{cap.minor})",)
    return out


def per_capability(
    fn: Callable[[tuple[int, int]], Iterable[object]], evidence: Evidence, *, inferred: bool = False
) -> AV:
    sets = [frozenset(fn(cc)) for cc in capabilities()]
    return AV(normalize(sets), inferred=inferred, trail=(evidence,))


def capability_value(evidence: Evidence) -> AV:
    return per_capability(lambda cc: (Cap(cc),), evidence)


def sm_number_value(evidence: Evidence, *, inferred: bool = False) -> AV:
    return per_capability(lambda cc: (cc[0] * 10 + cc[1],), evidence, inferred=inferred)


def device_name_value(evidence: Evidence) -> AV:
    return per_capability(lambda cc: device_names()[cc], evidence, inferred=True)


def device_props_value(evidence: Evidence) -> AV:
    return per_capability(lambda cc: (DeviceProps(cc[0], cc[1], n) for n in device_names()[cc]), evidence)


def triton_target_value(evidence: Evidence) -> AV:
    return per_capability(lambda cc: (TritonTarget("cuda", cc[0] * 10 + cc[1]),), evidence)


def cupy_capability_value(evidence: Evidence) -> AV:
    return per_capability(lambda cc: (f"{cc[0]}{cc[1]}",), evidence)


# -- names: inference when no definition can be seen ----------------------------------------

_CODENAMES = {
    "volta": {(7, 0), (7, 2)},
    "turing": {(7, 5)},
    "ampere": {(8, 0), (8, 6), (8, 7), (8, 8)},
    "ada": {(8, 9)},
    "lovelace": {(8, 9)},
    "hopper": {(9, 0)},
    "blackwell": {(10, 0), (10, 3), (11, 0), (12, 0), (12, 1)},
}
_NAME_SM = re.compile(
    r"^_*(?:is|has|use|supports?|enable|check)?_?(?:cuda_)?(?:sm|arch|cc|compute_capability)_?(\d{2,3})[af]?"
    r"(?:_?(?:supported|available|device|gpu|arch))?"
    r"(?P<later>_?(?:or_?(?:later|above|newer|higher|greater|plus)|plus|and_?(?:later|above|newer)|up))?$"
)
_NAME_AT_LEAST = re.compile(
    r"^_*(?:is|has)_?(?:sm|arch|cc|compute_capability)_?(?:at_?least|ge|gte|min)_?(\d{2,3})[af]?$"
)
_NAME_CODENAME = re.compile(
    r"^_*(?:is|has|use|on)_?(volta|turing|ampere|ada|lovelace|hopper|blackwell)"
    r"(?:_?(?:gpu|arch|device|supported|available))?(?P<later>_?(?:or_?(?:later|above|newer)|plus))?$"
)


def _number_caps(number: int) -> set[tuple[int, int]]:
    major, minor = divmod(number, 10)
    if minor == 0:  # is_sm100 in SGLang's sense: every 10.x device
        return {cc for cc in capabilities() if cc[0] == major}
    return {(major, minor)}


def infer_from_name(name: str) -> tuple[set[tuple[int, int]], str] | None:
    """The capabilities an arch-named predicate plausibly admits, and the rule used."""
    known = _inferred(name)
    return (set(known[0]), known[1]) if known is not None else None


@cache  # the interpreter asks about every unknown name it meets, most of them many times
def _inferred(name: str) -> tuple[frozenset[tuple[int, int]], str] | None:
    found = _infer_from_name(name)
    return (frozenset(found[0]), found[1]) if found is not None else None


def _infer_from_name(name: str) -> tuple[set[tuple[int, int]], str] | None:
    lowered = name.lower()
    m = _NAME_AT_LEAST.match(lowered)
    if m:
        major, minor = divmod(int(m.group(1)), 10)
        return {
            cc for cc in capabilities() if cc >= (major, minor)
        }, f"name {name!r} reads as 'capability ≥ {major}.{minor}'"
    m = _NAME_SM.match(lowered)
    if m:
        number = int(m.group(1))
        if not 70 <= number <= 129:
            return None
        if m.group("later"):
            major, minor = divmod(number, 10)
            return {
                cc for cc in capabilities() if cc >= (major, minor)
            }, f"name {name!r} reads as 'capability ≥ {major}.{minor}'"
        caps = _number_caps(number)
        shown = ", ".join(f"{a}.{b}" for a, b in sorted(caps))
        return caps, f"name {name!r} reads as 'capability {shown}'"
    m = _NAME_CODENAME.match(lowered)
    if m:
        caps = set(_CODENAMES[m.group(1)])
        if m.group("later"):
            low = min(caps)
            caps = {cc for cc in capabilities() if cc >= low}
        shown = ", ".join(f"{a}.{b}" for a, b in sorted(caps))
        return caps, f"name {name!r} reads as '{m.group(1).title()}' (capability {shown})"
    return None


def inferred_predicate(name: str, evidence_path: str | None, line: int | None) -> AV | None:
    found = infer_from_name(name)
    if found is None:
        return None
    caps, rule = found
    ev = Evidence(f"{rule}; its definition is not in the scanned files", evidence_path, line)
    return per_capability(lambda cc: (True,) if cc in caps else (False,), ev, inferred=True)


# -- operations on concrete values ------------------------------------------------------------

BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "Add": operator.add,
    "Sub": operator.sub,
    "Mult": operator.mul,
    "FloorDiv": operator.floordiv,
    "Mod": operator.mod,
    "Div": operator.truediv,
    "Pow": operator.pow,
    "BitAnd": operator.and_,
    "BitOr": operator.or_,
    "BitXor": operator.xor,
    "LShift": operator.lshift,
    "RShift": operator.rshift,
}


def safe_binop(op: str, a: object, b: object) -> object:
    fn = BINOPS.get(op)
    if fn is None:
        raise Unsupported(op)
    if op in ("Mult", "Pow", "LShift"):
        # Strings and tuples repeated, or huge powers, are not what capability code does.
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
            raise Unsupported(op)
        if op != "Mult" and abs(b) > 64:
            raise Unsupported(op)
        if isinstance(a, int) and isinstance(b, int) and _grown_bits(op, a, b) > MAX_INT_BITS + 1:
            raise Unsupported(f"{op}: an integer too large to follow")
    if op == "Add" and isinstance(a, (str, tuple)) and len(a) + len(b) > 4096:  # type: ignore[arg-type]
        raise Unsupported(op)
    if op == "Mod" and isinstance(a, str):
        raise Unsupported(op)  # %-formatting: not modelled
    return bounded(fn(a, b))


def _grown_bits(op: str, a: int, b: int) -> int:
    """An upper bound of the bits of ``a op b`` for the operations that grow an integer."""
    if op == "Mult":
        return a.bit_length() + b.bit_length()
    if op == "Pow":
        return a.bit_length() * max(b, 0) if abs(a) > 1 else 1
    return a.bit_length() + max(b, 0)  # LShift


CMPOPS: dict[str, Callable[[Any, Any], Any]] = {
    "Eq": operator.eq,
    "NotEq": operator.ne,
    "Lt": operator.lt,
    "LtE": operator.le,
    "Gt": operator.gt,
    "GtE": operator.ge,
    "In": lambda a, b: _contains(b, a),
    "NotIn": lambda a, b: not _contains(b, a),
    "Is": lambda a, b: a is b or (a is None and b is None) or (a == b and isinstance(a, bool)),
    "IsNot": lambda a, b: not (a is b or (a is None and b is None) or (a == b and isinstance(a, bool))),
}


def _contains(container: object, item: object) -> bool:
    if isinstance(container, (str, tuple, frozenset)):
        return item in container
    raise Unsupported("in")


def safe_compare(op: str, a: object, b: object) -> object:
    if isinstance(a, DeviceProps) or isinstance(b, DeviceProps):
        raise Unsupported("compare")
    return CMPOPS[op](a, b)


_STR_METHODS = frozenset(
    [
        "lower",
        "upper",
        "strip",
        "lstrip",
        "rstrip",
        "startswith",
        "endswith",
        "split",
        "rsplit",
        "replace",
        "find",
        "rfind",
        "count",
        "isdigit",
        "isnumeric",
        "casefold",
        "title",
        "removeprefix",
        "removesuffix",
        "partition",
        "join",
        "format",
    ]
)
_TUPLE_METHODS = frozenset({"index", "count"})


def concrete_attribute(value: object, name: str) -> object:
    """``value.name`` for the plain data and device records the detector models."""
    if isinstance(value, Cap):
        if name in ("major", "minor"):
            return getattr(value, name)
        if name in ("to_int", "as_version_str"):
            return BoundMethod(Builtin(f"cap.{name}"), value)
        if name in _TUPLE_METHODS:
            return BoundMethod(Builtin(f"tuple.{name}"), value)
        raise Unsupported(name)
    if isinstance(value, DeviceProps):
        if name in ("major", "minor", "name"):
            return getattr(value, name)
        raise Unsupported(name)
    if isinstance(value, TritonTarget):
        if name in ("backend", "arch"):
            return getattr(value, name)
        raise Unsupported(name)
    if isinstance(value, str) and name in _STR_METHODS:
        return BoundMethod(Builtin(f"str.{name}"), value)
    if isinstance(value, tuple) and name in _TUPLE_METHODS:
        return BoundMethod(Builtin(f"tuple.{name}"), value)
    raise Unsupported(name)


def call_concrete_method(
    name: str, receiver: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> object:
    if name == "cap.to_int":
        return receiver.to_int()  # type: ignore[attr-defined]
    if name == "cap.as_version_str":
        return receiver.as_version_str()  # type: ignore[attr-defined]
    kind, method = name.split(".", 1)
    if kind in ("str", "tuple"):
        if any(isinstance(a, (Opaque, _Marker)) for a in (*args, *kwargs.values())):
            raise Unsupported(method)
        if isinstance(receiver, str) and _grows_beyond_bounds(method, receiver, args):
            raise Unsupported(f"str.{method}: a string too long to follow")
        result = getattr(receiver, method)(*args, **kwargs)
        if isinstance(result, list):
            return tuple(result)
        return result
    raise Unsupported(name)


_LONG_FORMAT_FIELD = re.compile(r"\{[^{}]*\d{5,}")  # "{:>100000000}": a width of ten thousand or more


def _grows_beyond_bounds(method: str, receiver: str, args: tuple[object, ...]) -> bool:
    """Whether a string method could build a result beyond MAX_LEN (checked before it runs)."""
    if method == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = len(receiver) + 1 if not args[0] else receiver.count(args[0])
        return len(receiver) + count * max(len(args[1]) - len(args[0]), 0) > MAX_LEN
    if method == "join" and args and isinstance(args[0], (tuple, frozenset)):
        items = args[0]
        return sum(len(i) if isinstance(i, str) else 0 for i in items) + len(receiver) * len(items) > MAX_LEN
    if method == "format":
        return _LONG_FORMAT_FIELD.search(receiver) is not None
    return False


def freeze(value: object) -> object:
    """Lists become tuples so lane sets can hold them."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def render_value(value: AV) -> str:
    """A short rendering of a (uniform) argument for evidence text."""
    try:
        v = value.single()
    except Unsupported:
        return "…"
    if isinstance(v, tuple) and not isinstance(v, Cap):
        return "[" + ", ".join(repr(x) for x in v) + "]"
    if isinstance(v, Opaque):
        return getattr(v, "name", "…")
    return repr(v)


def carries_arch(value: AV) -> bool:
    """The value differs between devices, or holds an object whose fields do (a dataclass built from
    the capability): a name bound to it deserves the walk of the functions that read it."""
    if value.arch:
        return True
    return any(isinstance(x, Instance) and x.fields for s in value.sets for x in s)
