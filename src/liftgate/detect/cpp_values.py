"""Values of the cpp-runtime interpreter: one lane per known compute capability.

A `CV` holds a value in every lane (7.0 … 12.1), with the evidence of how it was obtained; a
lane is `UNK` where liftgate cannot tell. `Props` stands for a ``cudaDeviceProp`` of a device, and
`CapNum` for a capability number read from a helper's name. Arithmetic follows C++ (integer
division truncates) on Python integers bounded to `MAX_INT_BITS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from liftgate.detect.runtime_arch import capabilities
from liftgate.model import Evidence

MAX_TRAIL = 10  # evidence kept with one value
MAX_INT_BITS = 4096  # an integer beyond it is unknown (C++ has 64 bits; `a = a * a` must stay small)


# -- values -----------------------------------------------------------------------------------


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "?"

    def __reduce__(self) -> str:
        return "UNK"  # the singleton survives pickling (values travel to worker processes)


UNK: object = _Unknown()


@dataclass(frozen=True, slots=True)
class Props:
    """A ``cudaDeviceProp`` (or a pointer to one) of a device with capability ``cc``."""

    cc: tuple[int, int]


class CapNum(int):
    """A capability from a helper known only by name: ``major*10+minor``, and a pair as well."""

    cc: tuple[int, int]

    def __new__(cls, cc: tuple[int, int]) -> CapNum:
        obj = super().__new__(cls, cc[0] * 10 + cc[1])
        obj.cc = cc
        return obj

    def __reduce__(self) -> tuple[type[CapNum], tuple[tuple[int, int]]]:
        return (CapNum, (self.cc,))


@cache
def ccs() -> tuple[tuple[int, int], ...]:
    """The capabilities of the lanes, in lane order."""
    return capabilities()


@dataclass(frozen=True, slots=True)
class CV:
    """A value in every lane (one per capability), with how it was obtained."""

    lanes: tuple[object, ...]
    trail: tuple[Evidence, ...] = ()
    inferred: bool = False

    @property
    def arch(self) -> bool:
        first = self.lanes[0]
        return any(v is not first and (v is UNK or first is UNK or v != first) for v in self.lanes[1:])

    @property
    def unknown(self) -> bool:
        return all(v is UNK for v in self.lanes)


def const(value: object) -> CV:
    return CV((value,) * len(ccs()))


UNKNOWN = const(UNK)


def per_cc(fn: Callable[[tuple[int, int]], object], evidence: Evidence, *, inferred: bool = False) -> CV:
    return CV(tuple(fn(cc) for cc in ccs()), (evidence,), inferred)


def prepend(first: Evidence, trail: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
    """``trail`` with ``first`` as its first step (bounded to MAX_TRAIL)."""
    return (first, *(e for e in trail if e != first))[:MAX_TRAIL]


def merge_trails(*values: CV) -> tuple[Evidence, ...]:
    """The evidence of several values, in order, deduplicated (bounded to MAX_TRAIL)."""
    out: dict[Evidence, None] = {}
    for v in values:
        for e in v.trail:
            out.setdefault(e, None)
    return tuple(out)[:MAX_TRAIL]


def lanewise(fn: Callable[..., object], *values: CV) -> CV:
    """``fn`` applied lane by lane; a lane where an operand is unknown, or ``fn`` raises, is unknown."""
    if all(not v.arch and v.lanes[0] is UNK for v in values) and values:
        return UNKNOWN
    lanes: list[object] = []
    for args in zip(*(v.lanes for v in values), strict=True):
        if any(a is UNK for a in args):
            lanes.append(UNK)
            continue
        try:
            lanes.append(fn(*args))
        except Exception:
            lanes.append(UNK)
    return CV(tuple(lanes), merge_trails(*values), any(v.inferred for v in values))


def truth(value: object) -> object:
    """C++ truthiness of a lane value: True, False or UNK."""
    if value is UNK:
        return UNK
    if isinstance(value, (bool, int, float)):
        return bool(value)
    if isinstance(value, Props):
        return True  # a non-null pointer
    return UNK


def num(value: object) -> object:
    """A lane value as a number (a bool as 0 or 1); TypeError when it is not one."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    raise TypeError(value)


def _bounded(value: object) -> object:
    """An integer result beyond MAX_INT_BITS is unknown (`lanewise` turns the error into UNK)."""
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise OverflowError("an integer too large to follow")
    return value


def _mul(a: object, b: object) -> object:
    x, y = num(a), num(b)
    if isinstance(x, int) and isinstance(y, int) and x.bit_length() + y.bit_length() > MAX_INT_BITS + 1:
        raise OverflowError("an integer too large to follow")
    return _bounded(x * y)  # type: ignore[operator]


def _shl(a: object, b: object) -> object:
    x, y = num(a), num(b)
    if isinstance(x, int) and isinstance(y, int) and (y > MAX_INT_BITS or x.bit_length() + y > MAX_INT_BITS):
        raise OverflowError("an integer too large to follow")
    return x << y  # type: ignore[operator]


def _div(a: object, b: object) -> object:
    x, y = num(a), num(b)
    if isinstance(x, int) and isinstance(y, int):
        q = abs(x) // abs(y)
        return q if (x >= 0) == (y >= 0) else -q
    return x / y  # type: ignore[operator]


def _mod(a: object, b: object) -> object:
    x, y = num(a), num(b)
    if isinstance(x, int) and isinstance(y, int):
        return x - y * _div(x, y)  # type: ignore[operator]
    raise TypeError(a)


# C++ binary operators on lane values (`lanewise` turns their errors into unknown lanes).
ARITH: dict[str, Callable[[object, object], object]] = {
    "+": lambda a, b: _bounded(num(a) + num(b)),  # type: ignore[operator]
    "-": lambda a, b: _bounded(num(a) - num(b)),  # type: ignore[operator]
    "*": _mul,
    "/": _div,
    "%": _mod,
    "<<": _shl,
    ">>": lambda a, b: num(a) >> num(b),  # type: ignore[operator]
    "&": lambda a, b: num(a) & num(b),  # type: ignore[operator]
    "|": lambda a, b: num(a) | num(b),  # type: ignore[operator]
    "^": lambda a, b: num(a) ^ num(b),  # type: ignore[operator]
    "==": lambda a, b: eq(a, b),
    "!=": lambda a, b: not eq(a, b),
    "<": lambda a, b: num(a) < num(b),  # type: ignore[operator]
    ">": lambda a, b: num(a) > num(b),  # type: ignore[operator]
    "<=": lambda a, b: num(a) <= num(b),  # type: ignore[operator]
    ">=": lambda a, b: num(a) >= num(b),  # type: ignore[operator]
}


def eq(a: object, b: object) -> bool:
    """C++ ``==`` of two lane values (strings only with strings)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        if isinstance(a, str) and isinstance(b, str):
            return a == b
        raise TypeError(a)
    return bool(num(a) == num(b))


# -- parts of values ------------------------------------------------------------------------


def component(value: object, k: int) -> object:
    """Part ``k`` of a pair or tuple (``std::get<k>``, a structured binding); of a capability, major or minor."""
    if isinstance(value, tuple):
        return value[k] if k < len(value) else UNK
    if isinstance(value, CapNum) and k < 2:
        return value.cc[k]
    if isinstance(value, Props) and k < 2:
        return value.cc[k]
    return UNK


def member_of(value: object, member: str) -> object:
    """A member of a value: ``.major``/``.minor`` of a capability, ``.first``/``.second`` of a pair."""
    if isinstance(value, (Props, CapNum)):
        cc = value.cc
        if member in ("major", "first", "Major"):
            return cc[0]
        if member in ("minor", "second", "Minor"):
            return cc[1]
        return UNK
    if isinstance(value, tuple):
        if member == "first" and value:
            return value[0]
        if member == "second" and len(value) > 1:
            return value[1]
    return UNK
