"""The cpp-runtime detector: C/C++/CUDA host code that dispatches on the running device's capability.

vLLM's ``int32_t version_num = get_sm_version_num(); if (version_num >= 100 && version_num < 120)``
and FlashInfer's ``TVM_FFI_ICHECK_EQ(major, 10) << "MoE kernel requires 10.x architecture"`` are
gates that no ``#if`` shows: they run on the host and see only the device's compute capability.

Values are followed the way the Python detector follows them (`liftgate.detect.pyvalues`): as
*lanes*, one concrete value per known capability (7.0 … 12.1). Function bodies are executed
abstractly with a mask of the lanes that can reach each statement, so ``major * 10 + minor``,
local variables, early returns, ``static`` caches, ``std::pair`` results and member fields set
in one method and tested in another resolve exactly. The capability comes from the CUDA runtime
and driver (``cudaDeviceGetAttribute(…ComputeCapabilityMajor…)``, ``cudaGetDeviceProperties``,
``cuDeviceGetAttribute``, ``at::cuda::getCurrentDeviceProperties()->major``, NVML) and from the
helpers projects wrap them in, resolved across the package's files (`HelperIndex`); a helper
whose definition is not in the scanned files is read from its name, with confidence ``inferred``.

A condition (``if``, ``else if``, ``case``, ``?:``, check macros, a boolean ``return``) whose
truth differs between capabilities is a gate. Host code compiled only under build flags
(``#if defined ENABLE_SCALED_MM_SM100 && ENABLE_SCALED_MM_SM100``) is read as present, and the
gate names the condition (see `liftgate.detect.cuda.Region`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from liftgate.arch.core import ArchSet
from liftgate.detect.cpp_lex import CAPABILITY_TOKENS, mentions_capability
from liftgate.detect.cpp_syntax import (
    FuncDef,
    Node,
    Stmt,
    StmtParser,
    Tok,
    TooDeep,
    find_functions,
    forget_tables,
    join_tokens,
    node_text,
    tokenize,
)
from liftgate.detect.cuda import Region
from liftgate.detect.interface import Detection
from liftgate.detect.pyvalues import infer_from_name
from liftgate.detect.runtime_arch import archs_for_capabilities, capabilities
from liftgate.model import Confidence, ElseKind, Evidence, Gate, GateKind, Location, Skip, Span, gate_id

__all__ = ["CAPABILITY_TOKENS", "HelperIndex", "detect_cpp_runtime", "mentions_capability"]

MAX_CALL_DEPTH = 6
MAX_TRAIL = 10
_STEP_BUDGET = 200_000  # expression evaluations per walked function, callees included
# Statements and expressions being executed, nested in each other (callees included): past it the
# function is not followed. Parsing already bounds one function (cpp_syntax.MAX_NESTING); this
# bounds a chain of helpers, each nested deep, and keeps the walk inside Python's recursion limit.
MAX_DEPTH = 250
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
def _ccs() -> tuple[tuple[int, int], ...]:
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
    return CV((value,) * len(_ccs()))


UNKNOWN = const(UNK)


def per_cc(fn: Callable[[tuple[int, int]], object], evidence: Evidence, *, inferred: bool = False) -> CV:
    return CV(tuple(fn(cc) for cc in _ccs()), (evidence,), inferred)


# Names that read as data members (sm_, m_sm, mSM): a value assigned to one in a method is seen
# by the other methods. Other undeclared names are left alone (a global, or a declaration that
# liftgate did not read as one).
_MEMBER_NAME = re.compile(r"^(?:m_\w+|m[A-Z]\w*|\w+_)$")


def _prepend(first: Evidence, trail: tuple[Evidence, ...]) -> tuple[Evidence, ...]:
    return (first, *(e for e in trail if e != first))[:MAX_TRAIL]


def _merge_trails(*values: CV) -> tuple[Evidence, ...]:
    out: dict[Evidence, None] = {}
    for v in values:
        for e in v.trail:
            out.setdefault(e, None)
    return tuple(out)[:MAX_TRAIL]


def lanewise(fn: Callable[..., object], *values: CV) -> CV:
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
    return CV(tuple(lanes), _merge_trails(*values), any(v.inferred for v in values))


def truth(value: object) -> object:
    """C++ truthiness of a lane value: True, False or UNK."""
    if value is UNK:
        return UNK
    if isinstance(value, (bool, int, float)):
        return bool(value)
    if isinstance(value, Props):
        return True  # a non-null pointer
    return UNK


def _num(value: object) -> object:
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
    x, y = _num(a), _num(b)
    if isinstance(x, int) and isinstance(y, int) and x.bit_length() + y.bit_length() > MAX_INT_BITS + 1:
        raise OverflowError("an integer too large to follow")
    return _bounded(x * y)  # type: ignore[operator]


def _shl(a: object, b: object) -> object:
    x, y = _num(a), _num(b)
    if isinstance(x, int) and isinstance(y, int) and (y > MAX_INT_BITS or x.bit_length() + y > MAX_INT_BITS):
        raise OverflowError("an integer too large to follow")
    return x << y  # type: ignore[operator]


def _div(a: object, b: object) -> object:
    x, y = _num(a), _num(b)
    if isinstance(x, int) and isinstance(y, int):
        q = abs(x) // abs(y)
        return q if (x >= 0) == (y >= 0) else -q
    return x / y  # type: ignore[operator]


def _mod(a: object, b: object) -> object:
    x, y = _num(a), _num(b)
    if isinstance(x, int) and isinstance(y, int):
        return x - y * _div(x, y)  # type: ignore[operator]
    raise TypeError(a)


_ARITH: dict[str, Callable[[object, object], object]] = {
    "+": lambda a, b: _bounded(_num(a) + _num(b)),  # type: ignore[operator]
    "-": lambda a, b: _bounded(_num(a) - _num(b)),  # type: ignore[operator]
    "*": _mul,
    "/": _div,
    "%": _mod,
    "<<": _shl,
    ">>": lambda a, b: _num(a) >> _num(b),  # type: ignore[operator]
    "&": lambda a, b: _num(a) & _num(b),  # type: ignore[operator]
    "|": lambda a, b: _num(a) | _num(b),  # type: ignore[operator]
    "^": lambda a, b: _num(a) ^ _num(b),  # type: ignore[operator]
    "==": lambda a, b: _eq(a, b),
    "!=": lambda a, b: not _eq(a, b),
    "<": lambda a, b: _num(a) < _num(b),  # type: ignore[operator]
    ">": lambda a, b: _num(a) > _num(b),  # type: ignore[operator]
    "<=": lambda a, b: _num(a) <= _num(b),  # type: ignore[operator]
    ">=": lambda a, b: _num(a) >= _num(b),  # type: ignore[operator]
}


def _eq(a: object, b: object) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        if isinstance(a, str) and isinstance(b, str):
            return a == b
        raise TypeError(a)
    return bool(_num(a) == _num(b))


# -- names of the CUDA runtime, driver and framework APIs -------------------------------------

_ATTRIBUTE_CALLS = frozenset({"cudaDeviceGetAttribute", "cuDeviceGetAttribute", "hipDeviceGetAttribute"})
_PROPS_OUT_CALLS = frozenset(
    {"cudaGetDeviceProperties", "cudaGetDeviceProperties_v2", "cuDeviceGetProperties"}
)
_PROPS_RETURNING = frozenset(
    {
        "getCurrentDeviceProperties",
        "getDeviceProperties",
        "getDeviceProp",
        "get_device_prop",
        "GetDeviceProperties",
    }
)
_PAIR_MAKERS = frozenset({"make_pair", "make_tuple", "pair", "tuple", "tie"})
_FATAL_CALLS = frozenset(
    {
        "abort",
        "exit",
        "_Exit",
        "quick_exit",
        "terminate",
        "__builtin_unreachable",
        "__builtin_trap",
        "unreachable",
    }
)
_CHECK_MACRO = re.compile(
    r"^(?:[A-Z][A-Z0-9]*_)*(?:I?CHECK|ASSERT|ENSURE|REQUIRE|VERIFY|EXPECT)"
    r"(?:_WITH_INFO|_MSG|_NOT_IMPLEMENTED|_VALUE_ERROR|_INDEX_ERROR|_TYPE_ERROR)?"
    r"(?:_(?P<cmp>EQ|NE|GE|GT|LE|LT))?$|^assert$"
)
_CHECK_CMP = {"EQ": "==", "NE": "!=", "GE": ">=", "GT": ">", "LE": "<=", "LT": "<"}
_FATAL_MACRO = re.compile(
    r"^(?:[A-Z][A-Z0-9]*_)*(?:THROW|FATAL|ERROR|UNREACHABLE|UNIMPLEMENTED|PANIC|ABORT)$"
)
# Helpers known only by name: a capability number, or a (major, minor) capability.
_VERSION_NAME = re.compile(
    r"(?:sm|arch|cuda_?arch|device_?sm|gpu_?sm)_?(?:version|ver|arch)(?:_?num(?:ber)?)?$"
)
_CAPABILITY_NAME = re.compile(r"compute_?capability(?:_?version)?$|device_?capability$")


def _last(name: str) -> str:
    return name.rsplit("::", 1)[-1]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def infer_helper(name: str, path: str | None, line: int | None) -> CV | None:
    """The value of a helper whose definition is not in the scanned files, read from its name."""
    snake = _snake(name)
    bare = snake.removeprefix("get_").removeprefix("_")
    if not bare.startswith(("is_", "has_")):
        if _VERSION_NAME.search(bare):
            what = "capability number (major*10+minor)"
        elif _CAPABILITY_NAME.search(bare):
            what = "compute capability"
        else:
            what = ""
        if what:
            ev = Evidence(
                f"{name}() read as the device's {what}; its definition is not in the scanned files",
                path,
                line,
            )
            return per_cc(lambda cc: CapNum(cc), ev, inferred=True)
    found = infer_from_name(snake)
    if found is None:
        return None
    caps, rule = found
    ev = Evidence(f"{rule}; its definition is not in the scanned files", path, line)
    return per_cc(lambda cc: cc in caps, ev, inferred=True)


# -- package-wide knowledge -------------------------------------------------------------------


@dataclass
class HelperIndex:
    """Functions of a package that read the device's capability, directly or through each other,
    and member fields that hold it (``sm_ = getSMVersion();`` in a constructor)."""

    functions: dict[str, list[FuncDef]] = field(default_factory=dict)  # every function parsed, by name
    helpers: dict[str, list[FuncDef]] = field(default_factory=dict)  # those that touch the capability
    tainted: set[str] = field(default_factory=set)  # helpers whose result depends on the device
    fields: dict[str, CV] = field(default_factory=dict)
    # Per file: the preprocessor regions its helpers' tokens refer to (see `region_lookup`).
    region_tables: dict[str, list[Region]] = field(default_factory=dict)
    _done: dict[tuple[str, str, int], frozenset[str]] = field(default_factory=dict)

    def add_source(self, path: str, text: str, regions: list[Region] | None = None) -> None:
        """Read a file's function definitions, as the host pass compiles them when ``regions`` are given."""
        table, of_line = region_lookup(regions or [])
        if regions:
            self.region_tables[path] = table
        try:
            for fdef in find_functions(tokenize(text, of_line), path):
                self.functions.setdefault(fdef.name, []).append(fdef)
        finally:
            forget_tables()

    def names(self) -> set[str]:
        """Names whose use makes a function worth walking (a struct field ``.arch`` as ``arch``)."""
        return self.tainted | {name.lstrip(".") for name in self.fields}

    def needles(self) -> set[bytes]:
        """What a file must contain to use one of `names`: ``.arch``/``->arch`` for a struct field."""
        out = {n.encode() for n in self.tainted}
        for name in self.fields:
            if name.startswith("."):
                out |= {name.encode(), b"->" + name[1:].encode()}
            else:
                out.add(name.encode())
        return out

    def resolve(self) -> bool:
        """Find helpers to a fixed point; True when something new was found.

        A function is (re)evaluated whenever the set of capability names its body mentions grows,
        so the order in which definitions were read does not matter.
        """
        grew = False
        for _ in range(8):
            watch = self.names() | _source_names()
            todo: list[FuncDef] = []
            for fdefs in self.functions.values():
                for fdef in fdefs:
                    key = (fdef.path, fdef.qualname, fdef.line)
                    ids = _body_ids(fdef)
                    touched = (ids & watch) | {i for i in ids if i not in self.functions and _inferable(i)}
                    if not touched or self._done.get(key) == touched:
                        continue
                    if key not in self._done:
                        self.helpers.setdefault(fdef.name, []).append(fdef)
                    self._done[key] = touched
                    todo.append(fdef)
            changed = False
            for fdef in todo:
                interp = Interpreter(self, fdef.path, self.region_tables.get(fdef.path, _ONE_REGION))
                result, fields = interp.run(fdef, [UNKNOWN] * len(fdef.params), collect=None)
                if result.arch and fdef.name not in self.tainted:
                    self.tainted.add(fdef.name)
                    changed = True
                for name, value in fields.items():
                    if value.arch and name not in self.fields:
                        self.fields[name] = value
                        changed = True
            grew = grew or changed
            if not changed:
                break
        return grew

    def export(self) -> HelperIndex:
        """What workers need: the helpers and fields (not every function parsed)."""
        used = {f.path for fdefs in self.helpers.values() for f in fdefs}
        return HelperIndex(
            functions={name: [] for name in self.functions},  # which names are defined at all
            helpers=self.helpers,
            tainted=self.tainted,
            fields=self.fields,
            region_tables={p: t for p, t in self.region_tables.items() if p in used},
        )


@cache
def _source_names() -> frozenset[str]:
    return frozenset(
        {
            *_ATTRIBUTE_CALLS,
            *_PROPS_OUT_CALLS,
            *_PROPS_RETURNING,
            "cudaDeviceProp",
            "cuDeviceComputeCapability",
            "nvmlDeviceGetCudaComputeCapability",
        }
    )


_BODY_IDS: dict[tuple[str, str, int], frozenset[str]] = {}


def _body_ids(fdef: FuncDef) -> frozenset[str]:
    key = (fdef.path, fdef.qualname, fdef.line)
    ids = _BODY_IDS.get(key)
    if ids is None:
        ids = frozenset(t.text for t in fdef.body if t.kind == "id") | frozenset(
            t.text for _, toks in fdef.inits for t in toks if t.kind == "id"
        )
        if len(_BODY_IDS) > 20_000:
            _BODY_IDS.clear()
        _BODY_IDS[key] = ids
    return ids


def _touches(fdef: FuncDef, names: set[str]) -> bool:
    ids = _body_ids(fdef)
    return not ids.isdisjoint(_source_names()) or not ids.isdisjoint(names)


@cache
def _inferable(name: str) -> bool:
    return infer_helper(name, None, None) is not None


# -- the interpreter --------------------------------------------------------------------------

Lanes = frozenset[int]


_ONE_REGION = [Region(0, True, ())]


@dataclass
class _Frame:
    fdef: FuncDef
    toks: tuple[Tok, ...]
    env: dict[str, CV]
    regions: list[Region] = field(default_factory=lambda: _ONE_REGION)
    returns: list[tuple[Lanes, CV, bool]] = field(default_factory=list)  # lanes, value, assumed
    breaks: list[set[int]] = field(default_factory=list)
    fields: dict[str, CV] = field(default_factory=dict)
    assumed_depth: int = 0  # > 0 inside a branch taken on a favourable assumption


class _Budget(Exception):
    pass


class _DepthExceeded(TooDeep):
    """MAX_DEPTH reached while executing: the walk of the whole function ends."""


class Interpreter:
    """Executes function bodies over lanes; reports gates to a sink when asked to."""

    def __init__(self, index: HelperIndex, path: str, regions: list[Region]) -> None:
        self.index = index
        self.path = path
        self.regions = regions
        self.all_lanes: Lanes = frozenset(range(len(_ccs())))
        self.sink: _GateSink | None = None
        self.depth = 0
        self.steps = 0
        self.nesting = 0  # statements and expressions in execution (see MAX_DEPTH)
        self.assumptions: list[str] = []
        self._memo: dict[tuple[object, ...], CV] = {}
        self._parsed: dict[tuple[str, str, int], Stmt | TooDeep] = {}

    # -- entry points -----------------------------------------------------------------------
    def run(self, fdef: FuncDef, args: list[CV], collect: _GateSink | None) -> tuple[CV, dict[str, CV]]:
        """The function's return value for these arguments, and the fields it sets."""
        self.sink = collect
        self.steps = 0
        try:
            return self._call(fdef, args)
        except (_Budget, TooDeep, RecursionError):
            return UNKNOWN, {}
        finally:
            self.sink = None
            self.nesting = 0

    def _body(self, fdef: FuncDef) -> Stmt:
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
        frame = _Frame(fdef, fdef.body, env, self.index.region_tables.get(fdef.path, _ONE_REGION))
        for name, toks in fdef.inits:  # member initialisers: sm_(getSMVersion())
            from liftgate.detect.cpp_syntax import ExprParser

            value = self.eval(ExprParser(toks, 0, len(toks)).parse(), _Frame(fdef, toks, env), self.all_lanes)
            frame.fields[name] = value
        body = self._body(fdef)
        self.exec_block(body.body, self.all_lanes, frame, 0)
        return self._return_value(frame), frame.fields

    def _return_value(self, frame: _Frame) -> CV:
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
        return CV(tuple(lanes), _merge_trails(*trails), inferred)

    # -- statements ---------------------------------------------------------------------------
    def _region(self, stmt: Stmt, frame: _Frame) -> int:
        return frame.toks[stmt.start].region if stmt.start < len(frame.toks) else 0

    def exec_block(self, stmts: list[Stmt], mask: Lanes, frame: _Frame, region: int) -> Lanes:
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
                before = dict(frame.env)
                after = self._exec_seq(group, mask, frame, r, stmts[k + 1 :])
                frame.env = self._merge_env(before, mask, frame.env, after)
                mask = mask | after
                k += 1
                continue
            mask = self.exec_stmt(stmt, mask, frame, region, stmts[k + 1 :])
            k += 1
        return mask

    def _exec_seq(
        self, stmts: list[Stmt], mask: Lanes, frame: _Frame, region: int, rest: list[Stmt]
    ) -> Lanes:
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
            out[name] = CV(tuple(lanes), _merge_trails(va, vb), va.inferred or vb.inferred)
        return out

    def exec_stmt(self, stmt: Stmt, mask: Lanes, frame: _Frame, region: int, rest: list[Stmt]) -> Lanes:
        self._enter()
        try:
            return self._exec_stmt(stmt, mask, frame, region, rest)
        finally:
            self.nesting -= 1

    def _exec_stmt(self, stmt: Stmt, mask: Lanes, frame: _Frame, region: int, rest: list[Stmt]) -> Lanes:
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
            return frozenset() if _is_failure(stmt, frame.toks) else mask
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

    def _declare(self, stmt: Stmt, mask: Lanes, frame: _Frame) -> None:
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
                _prepend(Evidence(shown, frame.fdef.path, stmt.line), value.trail),
                value.inferred,
            )
        if len(stmt.names) == 1:
            frame.env[stmt.names[0]] = value
            return
        for k, name in enumerate(stmt.names):  # auto [major, minor] = ...
            frame.env[name] = lanewise(lambda v, k=k: _component(v, k), value)

    def _if(self, stmt: Stmt, mask: Lanes, frame: _Frame, region: int, rest: list[Stmt]) -> Lanes:
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

    def _switch(self, stmt: Stmt, mask: Lanes, frame: _Frame, region: int) -> Lanes:
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
                eq = lanewise(_eq, value, label_value)
                if self.sink is not None and frame is self.sink.frame and eq.arch:
                    self.sink.case_gate(self, stmt, label, frame, eq, region, segments)
                for lane in mask:
                    t = eq.lanes[lane]
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

    def _loop(self, stmt: Stmt, mask: Lanes, frame: _Frame, region: int) -> Lanes:
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
    def eval(self, node: Node | None, frame: _Frame, mask: Lanes) -> CV:
        if node is None:
            return UNKNOWN
        self.steps += 1
        if self.steps > _STEP_BUDGET:
            raise _Budget
        self._enter()
        try:
            return self._eval(node, frame, mask)
        finally:
            self.nesting -= 1

    def _eval(self, node: Node, frame: _Frame, mask: Lanes) -> CV:
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
            member = _last(str(node.value))
            if obj_node.kind == "name" and obj_node.value == "this":
                return self._name(member, frame)
            path = _member_path(node)
            if path is not None and path in frame.env:
                return frame.env[path]
            obj = self.eval(obj_node, frame, mask)
            if obj.unknown and member not in _GENERIC_MEMBERS:
                key = "." + member
                return frame.fields.get(key) or self.index.fields.get(key) or UNKNOWN
            return lanewise(lambda v: _member(v, member), obj)
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
            return CV(tuple(lanes), _merge_trails(cond, a, b), cond.inferred or a.inferred or b.inferred)
        if kind == "assign":
            value = self.eval(node.args[1], frame, mask)
            if node.op != "=":
                current = self.eval(node.args[0], frame, mask)
                fn = _ARITH.get(node.op[:-1])
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

    def _lambda_body(self, brace: int, frame: _Frame, mask: Lanes) -> None:
        """Walk a lambda's body for its gates (``DISPATCH_SWITCH(…, [&] { if (is_sm8x) … })``): it
        sees the enclosing variables; what it returns or assigns stays inside it."""
        block, _ = StmtParser(frame.toks).block(brace)
        saved_env, saved_returns, saved_breaks = frame.env, frame.returns, frame.breaks
        frame.env, frame.returns, frame.breaks = dict(saved_env), [], []
        try:
            self.exec_block(block.body, mask, frame, frame.toks[brace].region)
        finally:
            frame.env, frame.returns, frame.breaks = saved_env, saved_returns, saved_breaks

    def _name(self, name: str, frame: _Frame) -> CV:
        if name in frame.env:
            return frame.env[name]
        short = _last(name)
        if short in frame.fields:
            return frame.fields[short]
        if name in ("true", "false"):
            return const(name == "true")
        if name in ("nullptr", "NULL"):
            return const(0)
        if short in self.index.fields:
            return self.index.fields[short]
        return UNKNOWN

    def _assign(
        self,
        target: Node,
        value: CV,
        frame: _Frame,
        mask: Lanes,
        note: bool = True,
        source: Node | None = None,
    ) -> None:
        if note and value.arch and value.trail:  # the step shows in the gate's chain
            line = frame.toks[target.start].line if target.start < len(frame.toks) else None
            shown = f"{node_text(frame.toks, target)} = {node_text(frame.toks, source) if source else '…'}"
            value = CV(
                value.lanes, _prepend(Evidence(shown, frame.fdef.path, line), value.trail), value.inferred
            )
        this = target.kind == "member" and target.args[0].kind == "name" and target.args[0].value == "this"
        if target.kind == "member" and not this:
            # params.arch = major * 10 + minor: the object's field here, and any object's field of
            # that name elsewhere (a struct filled in one function and read in another).
            path = _member_path(target)
            if path is None or not value.arch:
                return
            frame.env[path] = value
            if _last(str(target.value)) not in _GENERIC_MEMBERS:
                frame.fields.setdefault("." + _last(str(target.value)), value)
            return
        if this:
            name = _last(str(target.value))
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
            value = CV(lanes, _merge_trails(old, value), old.inferred or value.inferred)
        frame.env[name] = value
        if not local and (this or _MEMBER_NAME.match(name)):
            frame.fields[_last(name)] = value

    def _binary(self, node: Node, frame: _Frame, mask: Lanes) -> CV:
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
            return CV(tuple(lanes), _merge_trails(a, b), a.inferred or b.inferred)
        fn = _ARITH.get(op)
        if fn is None:
            return UNKNOWN
        return lanewise(fn, a, b)

    def _unary(self, node: Node, frame: _Frame, mask: Lanes) -> CV:
        op = node.op
        value = self.eval(node.args[0], frame, mask)
        if op == "!":
            return lanewise(lambda v: not truth(v) if truth(v) is not UNK else UNK, value)
        if op == "-":
            return lanewise(lambda v: -_num(v), value)  # type: ignore[operator]
        if op == "~":
            return lanewise(lambda v: ~_num(v), value)  # type: ignore[operator]
        if op in ("cast", "+", "*", "&"):
            return value
        return UNKNOWN

    def _call_expr(self, node: Node, frame: _Frame, mask: Lanes) -> CV:
        callee = node.args[0]
        args = node.args[1:]
        if callee.kind == "member":
            # obj.method(...): a value's own accessors; otherwise unknown (arguments still run).
            member = _last(str(callee.value))
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
        name = _last(full)
        line = frame.toks[node.start].line if node.start < len(frame.toks) else None
        path = frame.fdef.path
        if name in _ATTRIBUTE_CALLS and len(args) >= 2:
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
        if name in _PROPS_OUT_CALLS and args:
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
        if name in _PROPS_RETURNING:
            for a in args:
                self.eval(a, frame, mask)
            return per_cc(lambda cc: Props(cc), Evidence(f"{full}()", path, line))
        values = [self.eval(a, frame, mask) for a in args]
        if name in ("static_cast", "reinterpret_cast", "const_cast", "int", "int32_t", "int64_t", "unsigned"):
            return values[0] if values else UNKNOWN
        if name in _PAIR_MAKERS and values:
            return lanewise(lambda *vs: tuple(vs), *values)
        if name == "get" and values:
            m = re.search(r"get\s*<\s*(\d+)\s*>", node_text(frame.toks, callee))
            if m:
                k = int(m.group(1))
                return lanewise(lambda v: _component(v, k), values[0])
        if name in ("min", "max") and len(values) == 2:
            pick: Callable[[Any, Any], object] = min if name == "min" else max
            return lanewise(lambda a, b: pick(_num(a), _num(b)), *values)
        fdefs = self.index.helpers.get(name)
        if fdefs:
            return self._call_helper(name, fdefs, values, node, frame)
        if name not in self.index.functions and not _CHECK_MACRO.match(name):
            inferred = infer_helper(name, path, line) if _inferable(name) else None
            if inferred is not None:
                return inferred
        return UNKNOWN

    def _assign_out(self, arg: Node, value: CV, frame: _Frame, mask: Lanes) -> None:
        """An out-parameter: ``&major`` (or a pointer variable)."""
        target = arg.args[0] if arg.kind == "unary" and arg.op == "&" else arg
        self._assign(target, value, frame, mask, note=False)

    def _call_helper(self, name: str, fdefs: list[FuncDef], args: list[CV], node: Node, frame: _Frame) -> CV:
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
                    _prepend(Evidence(f"{fdef.qualname}(){shown}", fdef.path, fdef.line), result.trail),
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
        parts.append(_last(str(node.value)))
        node = node.args[0]
    if node.kind != "name" or node.value == "this":
        return None
    parts.append(str(node.value))
    return ".".join(reversed(parts))


def _component(value: object, k: int) -> object:
    if isinstance(value, tuple):
        return value[k] if k < len(value) else UNK
    if isinstance(value, CapNum) and k < 2:
        return value.cc[k]
    if isinstance(value, Props) and k < 2:
        return value.cc[k]
    return UNK


def _member(value: object, member: str) -> object:
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


def _assigned_names(stmt: Stmt, toks: tuple[Tok, ...]) -> set[str]:
    out: set[str] = set()
    for i in range(stmt.start, min(stmt.end, len(toks)) - 1):
        if toks[i].kind == "id" and toks[i + 1].text in ("=", "+=", "-=", "*=", "/=", "++", "--", "|=", "&="):
            out.add(toks[i].text)
    return out


# -- what a statement does: fail, return, go on ------------------------------------------------


def _callee_name(node: Node | None) -> str:
    while node is not None and node.kind == "bin" and node.op == "<<":
        node = node.args[0]
    if node is not None and node.kind == "call" and node.args[0].kind == "name":
        return _last(str(node.args[0].value))
    return ""


def _stream_root(node: Node) -> Node:
    while node.kind == "bin" and node.op == "<<":
        node = node.args[0]
    return node


def _is_false_literal(node: Node) -> bool:
    return (node.kind == "name" and node.value == "false") or (node.kind == "num" and node.value == 0)


def _is_failure(stmt: Stmt, toks: tuple[Tok, ...]) -> bool:
    """Does this statement end the path with an error (throw, ``CHECK(false, …)``, abort)?"""
    if stmt.kind == "throw":
        return True
    if stmt.kind == "block":
        return bool(stmt.body) and _is_failure(stmt.body[-1], toks)
    if stmt.kind != "expr" or stmt.expr is None:
        return False
    name = _callee_name(stmt.expr)
    if not name:
        return False
    if name in _FATAL_CALLS or _FATAL_MACRO.match(name):
        return True
    m = _CHECK_MACRO.match(name)
    if m and not m.group("cmp"):
        root = _stream_root(stmt.expr)
        return len(root.args) > 1 and _is_false_literal(root.args[1])
    return False


def _terminates(stmt: Stmt | None) -> bool:
    if stmt is None:
        return False
    if stmt.kind in ("return", "throw", "break", "continue"):
        return True
    if stmt.kind == "block":
        return any(_terminates(s) for s in stmt.body)
    if stmt.kind == "if":
        return len(stmt.body) == 2 and _terminates(stmt.body[0]) and _terminates(stmt.body[1])
    return False


def failure_message(stmt: Stmt, toks: tuple[Tok, ...]) -> str:
    """The text an error statement shows: its string literals, with other parts as ``<expr>``."""
    target = stmt
    while target.kind == "block" and target.body:
        target = target.body[-1]
    node = target.expr
    if target.kind == "throw":
        pieces = _literal_pieces(toks[target.start + 1 : target.end])
        return _shorten("".join(pieces))
    if node is None:
        return ""
    parts: list[Node] = []
    while node.kind == "bin" and node.op == "<<":
        parts.insert(0, node.args[1])
        node = node.args[0]
    if node.kind == "call":
        name = _callee_name(node)
        m = _CHECK_MACRO.match(name)
        skip = 3 if (m and m.group("cmp")) else (2 if m else 1)
        parts = node.args[skip:] + parts
    pieces = []
    for p in parts:
        if p.kind == "str":
            pieces.append(str(p.value))
        else:
            pieces.append(f"<{node_text(toks, p)}>")
    return _shorten("".join(pieces))


def _literal_pieces(toks: tuple[Tok, ...]) -> list[str]:
    from liftgate.detect.cpp_syntax import _string_value

    pieces: list[str] = []
    gap = False
    for t in toks:
        if t.kind == "str":
            if gap and pieces:
                pieces.append("<…>")
            pieces.append(_string_value(t.text))
            gap = False
        elif t.kind in ("id", "num") and pieces:
            gap = True
    return pieces


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:299] + "…"


# -- gates ------------------------------------------------------------------------------------


@dataclass
class _GateSink:
    package: str
    version: str | None
    path: str
    regions: list[Region]
    frame: _Frame | None = None
    gates: list[Gate] = field(default_factory=list)
    occurrences: dict[tuple[str, tuple[str, ...]], int] = field(default_factory=dict)
    enclosing: list[str] = field(default_factory=list)
    seen: set[tuple[str, int, int, str]] = field(default_factory=set)

    def _emit(
        self,
        interp: Interpreter,
        frame: _Frame,
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
    ) -> str | None:
        key = (frame.fdef.qualname, frame.fdef.line, cond_node.start, directive)
        if key in self.seen:
            return None
        self.seen.add(key)
        ccs = _ccs()
        admitted: list[tuple[int, int]] = []
        unknown: list[tuple[int, int]] = []
        for cc, v in zip(ccs, cond.lanes, strict=True):
            t = truth(v)
            if t is UNK:
                unknown.append(cc)
            elif (t is True) != invert:
                admitted.append(cc)
        if len(admitted) == len(ccs) or (not admitted and not unknown):
            return None
        shown = text if text is not None else node_text(frame.toks, cond_node)
        norm = f"{directive} {' '.join(t.text for t in frame.toks[cond_node.start : cond_node.end])}"
        scope = (frame.fdef.qualname,)
        occurrence = self.occurrences.get((norm, scope), 0)
        self.occurrences[(norm, scope)] = occurrence + 1
        depends = [f"assumed: {a}" for a in dict.fromkeys(interp.assumptions)]
        enclosing = list(self.enclosing)
        tok_region = frame.toks[cond_node.start].region if cond_node.start < len(frame.toks) else region
        reg = self.regions[tok_region]
        pp_ids: list[str] = []
        for c in reg.conditions:
            if c.gate_id:
                pp_ids.append(c.gate_id)
            if c.build_macros:
                macros = ", ".join(c.build_macros)
                depends.append(
                    f"inside #if {c.text} (line {c.line}): {macros} set by the build (-D); "
                    "this host code exists only in builds that define it"
                )
        evidence = [*cond.trail, *extra]
        gid = gate_id(GateKind.CPP_RUNTIME, self.package, self.path, norm, scope, occurrence)
        self.gates.append(
            Gate(
                id=gid,
                kind=GateKind.CPP_RUNTIME,
                location=Location(self.package, self.version, self.path, span),
                condition=shown if len(shown) <= 400 else shown[:399] + "…",
                admitted=archs_for_capabilities(admitted),
                unknown=archs_for_capabilities(unknown) if unknown else ArchSet.none(),
                host=None,
                then_span=then_span,
                else_span=else_span,
                else_kind=else_kind,
                confidence=Confidence.INFERRED if cond.inferred else Confidence.EXACT,
                evidence=tuple(dict.fromkeys(evidence)),
                depends_on=tuple(dict.fromkeys(depends)),
                directive=directive,
                enclosing=tuple(dict.fromkeys([*pp_ids, *enclosing])),
            )
        )
        return gid

    def if_gate(
        self, interp: Interpreter, stmt: Stmt, frame: _Frame, cond: CV, region: int, rest: list[Stmt]
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
        if other is not None:
            if _is_failure(other, toks):
                else_kind = ElseKind.ERROR
                extra.append(
                    Evidence(f'otherwise fails: "{failure_message(other, toks)}"', self.path, other.line)
                )
            else:
                else_kind = ElseKind.FALLBACK
        elif then is not None and _is_failure(then, toks):
            invert = True  # if (!supported) throw …: the code beyond runs where the test is false
            else_kind = ElseKind.ERROR
            extra.append(Evidence(f'fails with: "{failure_message(then, toks)}"', self.path, then.line))
        elif _terminates(then):
            else_kind, found = _after_dispatch(rest, toks)
            if found is not None:
                how = "fails" if else_kind is ElseKind.ERROR else "if no later branch matches, fails"
                extra.append(
                    Evidence(f'otherwise {how}: "{failure_message(found, toks)}"', self.path, found.line)
                )
        else:
            else_kind = ElseKind.NONE
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
        )

    def check_statement(
        self, interp: Interpreter, stmt: Stmt, frame: _Frame, mask: Lanes, region: int
    ) -> None:
        """``TORCH_CHECK(cond, msg…)``, ``TVM_FFI_ICHECK_EQ(major, 10) << msg``, ``assert(cond)``."""
        assert stmt.expr is not None
        root = _stream_root(stmt.expr)
        name = _callee_name(stmt.expr)
        m = _CHECK_MACRO.match(name) if name else None
        if m is None or root.kind != "call" or len(root.args) < 2:
            return
        toks = frame.toks
        interp.assumptions = []
        if m.group("cmp"):
            if len(root.args) < 3:
                return
            op = _CHECK_CMP[m.group("cmp")]
            a = interp.eval(root.args[1], frame, mask)
            b = interp.eval(root.args[2], frame, mask)
            fn = _ARITH[op]
            cond = lanewise(fn, a, b)
            text = f"{node_text(toks, root.args[1])} {op} {node_text(toks, root.args[2])}"
            cond_node = Node("bin", root.args[1].start, root.args[2].end, op=op, args=root.args[1:3])
        else:
            cond_node = root.args[1]
            if _is_false_literal(cond_node):
                return
            cond = interp.eval(cond_node, frame, mask)
            text = None
        if not cond.arch:
            return
        message = failure_message(stmt, toks)
        extra = [Evidence(f'fails with: "{message}"', self.path, stmt.line)] if message else []
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
        frame: _Frame,
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
        elif default and _is_failure(Stmt("block", 0, 0, 0, 0, body=default), toks):
            else_kind = ElseKind.ERROR
            failing = default[-1]
            extra.append(
                Evidence(f'default fails: "{failure_message(failing, toks)}"', self.path, failing.line)
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

    def ternary_gate(self, interp: Interpreter, node: Node, frame: _Frame, cond: CV) -> None:
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

    def boolean_return(self, interp: Interpreter, stmt: Stmt, frame: _Frame, value: CV, region: int) -> None:
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


def _after_dispatch(rest: list[Stmt], toks: tuple[Tok, ...]) -> tuple[ElseKind, Stmt | None]:
    """What runs after an early-returning ``if`` for the devices it does not admit.

    Later dispatch arms (``if (…) { …; return; }``) are skipped over: a device they do not take
    falls further. A failure right after is ``error``; a failure after other arms is still
    ``fallback`` (another arm may take the device), with the failure as evidence; nothing at all
    is ``none``; any other code is ``fallback``.
    """
    skipped = False
    for stmt in rest:
        if stmt.kind == "if" and len(stmt.body) == 1 and _terminates(stmt.body[0]):
            skipped = True
            continue
        if _is_failure(stmt, toks):
            return (ElseKind.FALLBACK if skipped else ElseKind.ERROR), stmt
        return ElseKind.FALLBACK, None
    return (ElseKind.FALLBACK if skipped else ElseKind.NONE), None


# -- entry points -----------------------------------------------------------------------------


def region_lookup(regions: list[Region]) -> tuple[list[Region], Callable[[int], int | None]]:
    """Region table (index 0: before any conditional) and a line -> region index map (None: not host code)."""
    table = [Region(0, True, ()), *regions]
    starts = [r.line for r in table]

    def of_line(line: int) -> int | None:
        k = bisect.bisect_right(starts, line) - 1
        k = max(k, 0)
        return None if table[k].host is False else k

    return table, of_line


def detect_cpp_runtime(
    package: str,
    version: str | None,
    path: str,
    text: str,
    regions: list[Region],
    index: HelperIndex,
) -> Detection:
    """cpp-runtime gates of one C/C++/CUDA file (its host code, as the host pass compiles it)."""
    table, of_line = region_lookup(regions)
    toks = tokenize(text, of_line)
    watch = index.names()
    sink = _GateSink(package, version, path, table)
    skips: list[Skip] = []
    try:
        for fdef in find_functions(toks, path):
            ids = _body_ids(fdef)
            if ids.isdisjoint(_source_names()) and ids.isdisjoint(watch) and not any(map(_inferable, ids)):
                continue
            _walk(Interpreter(index, path, table), fdef, sink, skips, path, package)
    finally:
        forget_tables()
    return Detection(tuple(sink.gates), tuple(skips))


def _walk(
    interp: Interpreter, fdef: FuncDef, sink: _GateSink, skips: list[Skip], path: str, package: str
) -> None:
    """Run one function with unknown arguments, reporting its gates."""
    from liftgate.detect.cpp_syntax import ExprParser

    env = {name: UNKNOWN for name in fdef.params if name}
    frame = _Frame(fdef, fdef.body, env, interp.regions)
    for name, toks in fdef.inits:
        frame.fields[name] = interp.eval(
            ExprParser(toks, 0, len(toks)).parse(), _Frame(fdef, toks, env), interp.all_lanes
        )
    sink.frame = frame
    interp.sink = sink
    interp.steps = 0
    sink.enclosing = []
    try:
        interp.exec_block(interp._body(fdef).body, interp.all_lanes, frame, 0)
    except _Budget:
        skips.append(Skip(f"{path}:{fdef.line}", f"{fdef.qualname}: too large to follow completely", package))
    except TooDeep as exc:
        skips.append(Skip(f"{path}:{fdef.line}", f"{fdef.qualname}: {exc}; not followed", package))
    except RecursionError:  # a last resort: the bounds above keep the walk well inside the limit
        skips.append(Skip(f"{path}:{fdef.line}", f"{fdef.qualname}: nested too deeply to follow", package))
    finally:
        interp.sink = None
        interp.nesting = 0
        sink.frame = None
