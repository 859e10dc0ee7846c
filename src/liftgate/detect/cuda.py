"""The CUDA/C++ preprocessor detector: ``#if`` gates on the target architecture.

A file is walked once while simulating every compilation pass at the same time — one *lane*
per known target (sm_70 … sm_121f) plus the host pass. Each lane has its own macro table
(nvcc's predefined macros differ per pass; ``#define``s under arch conditions make *derived*
macros such as CUTLASS's ``CUTLASS_ARCH_MMA_SM90A_ENABLED`` differ too), and every condition
is evaluated in three-valued logic in every lane. A conditional whose value differs across
device lanes is a gate.

Macros defined in headers of the same package reach a file through ``#include "…"`` and
``#include <…>``; each header's effect is computed once (from a clean state) and merged under
the conditions in force at the include. A macro that is never defined in the translation
unit as far as liftgate can see is *unknown* (the build may pass ``-D``), not undefined.

Hostile files are bounded, and the bounds are far above what real packages do: one condition's
macro expansion (`CONDITION_STEPS`: past it the condition is unknown), one file's preprocessing
(`FILE_STEPS`: past it the file is a `Skip`), ``#if`` nesting (`MAX_NESTING`: the deeper part is
not read, and the macros it defines are unknown after it), ``#include`` nesting
(`MAX_INCLUDE_DEPTH`, the limit gcc enforces too: past it the file is a `Skip`) and the length of a
directive (`MAX_DIRECTIVE_CHARS`: the condition or macro is unknown). Includes are followed with an
explicit stack, never by recursion.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache

from liftgate.arch.core import TOOLKIT_MACROS, ArchSet, universe
from liftgate.detect.buildflags import ArchFlag
from liftgate.detect.cpp_lex import (
    CONDITIONAL_KEYWORDS,
    LITERALS,
    Directive,
    LexedFile,
    LexLimit,
    lex_directives,
)
from liftgate.detect.interface import GateSink
from liftgate.detect.ppexpr import (
    CONDITION_STEPS,
    UNKNOWN_MACRO,
    UNKNOWN_TOKEN,
    BudgetExceeded,
    ExprError,
    Lookup,
    MacroDef,
    MacroEntry,
    MacroExpander,
    MaybeDef,
    StepBudget,
    UnknownEntry,
    evaluate,
    parse_define,
    tokenize,
)
from liftgate.model import (
    Confidence,
    ElseKind,
    Evidence,
    Gate,
    GateKind,
    MacroOrigin,
    Skip,
    Span,
    Switch,
    SwitchKind,
    Truth,
)

CUDA_EXTENSIONS = frozenset(
    {".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".inl", ".c", ".hxx", ".inc"}
)

# Bounds (see the module docstring), each far above what real packages do. Measured on vLLM,
# SGLang and FlashInfer (with CUTLASS and CCCL): #if nesting at most 6, #include nesting 73, the
# costliest file 514,000 steps (a step: a token a condition expands or evaluates, or a unit of
# bookkeeping per directive), the longest #define 170,000 characters, the longest context 705.
MAX_NESTING = 2_000
MAX_INCLUDE_DEPTH = 200  # gcc stops at 200 nested #includes (-fmax-include-depth)
MAX_DIRECTIVE_CHARS = 1 << 20
FILE_STEPS = 20_000_000
_GATE_STEPS = 500  # what one gate costs (at most 40,000 per file; CUTLASS's largest has 737)
_REGION_STEPS = 20  # what recording one region costs (a file of 16 MB has at most a million)
_CONTEXT_CHARS = 8_000  # the "defined under …" evidence of a macro: longer contexts are elided
_SHOWN_CHARS = 300  # a directive's text quoted in a Skip
_FLAG_REGION_DEPTH = 64  # deeper #if nests: host code under build flags is "maybe there" for every target

T, F, U = True, False, None
Tri = bool | None
Vec = tuple[Tri, ...]
# A macro's state across lanes: one entry for all lanes, or a tuple with one entry per lane.
Stored = MacroEntry | tuple[MacroEntry, ...]


@cache
def lane_count() -> int:
    return len(universe()) + 1  # device lanes, then the host pass


def host_lane() -> int:
    return lane_count() - 1


def _all(vec: Vec, value: Tri) -> bool:
    return all(v is value for v in vec)


def _and(a: Vec, b: Vec) -> Vec:
    return tuple(
        F if (x is F or y is F) else (T if (x is T and y is T) else U) for x, y in zip(a, b, strict=True)
    )


def _or(a: Vec, b: Vec) -> Vec:
    return tuple(
        T if (x is T or y is T) else (F if (x is F and y is F) else U) for x, y in zip(a, b, strict=True)
    )


def _not(a: Vec) -> Vec:
    return tuple(U if x is U else (not x) for x in a)


_KIND_CACHE: dict[Vec, Tri] = {}
# Conditions repeat across a package (``defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900``): a
# condition's lane vector is a function of the stored states of the names it touches, and those
# are often the very same objects (nvcc's predefined macros, undefined, unknown) from file to file.
_EVAL_CACHE: dict[
    tuple[str, ...],
    list[tuple[tuple[str, ...], tuple[object, ...], tuple[Vec, frozenset[str], str | None, int]]],
] = {}
_EVAL_CACHE_LIMIT = 50_000


def clear_caches() -> None:
    """Drop the module-level memo tables (they hold macro states of the last package scanned)."""
    _EVAL_CACHE.clear()
    _KIND_CACHE.clear()


_EVAL_CACHE_VARIANTS = 4  # macro states remembered per condition text


def _has_maybe(stored: Stored) -> bool:
    if isinstance(stored, tuple):
        return any(isinstance(e, MaybeDef) for e in stored)
    return isinstance(stored, MaybeDef)


def _with(cur: MacroEntry, definition: MacroDef, untouched: bool) -> MacroEntry:
    """A macro that is ``cur``, or else defined as ``definition``."""
    if cur is definition or (isinstance(cur, MacroDef) and cur.same_as(definition)):
        return cur
    if isinstance(cur, MaybeDef) and cur.definition.same_as(definition):
        return cur
    if cur is None and untouched:
        return MaybeDef(definition)
    return UNKNOWN_MACRO


def _settle(cur: MacroEntry, new: MacroEntry, active: Tri, untouched: bool) -> MacroEntry:
    """One lane of a macro that is ``cur`` and is set to ``new`` where ``active`` holds.

    ``new`` may be a `MaybeDef` (from a header's export: its definition, or as it was).
    ``untouched``: nothing in this walk set the macro yet; in a header walked from a clean state
    that stands for whatever its includers have.
    """
    if active is F:
        return cur
    if isinstance(new, MaybeDef):
        return _with(cur, new.definition, untouched)
    if active is T or cur is new:
        return new
    if isinstance(cur, MacroDef) and cur.same_as(new):
        return cur
    if isinstance(new, MacroDef):
        return _with(cur, new, untouched)
    return UNKNOWN_MACRO


def _kind(vec: Vec) -> Tri:
    """T when every lane is true, F when every lane is false, U when mixed (memoised: few distinct vectors)."""
    kind = _KIND_CACHE.get(vec, 0)
    if kind == 0:
        kind = T if _all(vec, T) else (F if _all(vec, F) else U)
        if len(_KIND_CACHE) < 4096:
            _KIND_CACHE[vec] = kind
    return kind  # type: ignore[return-value]


def _device_uniform(vec: Vec) -> bool:
    first = vec[0]
    return all(v is first for v in vec[:-1])


def _vec_to_sets(vec: Vec) -> tuple[ArchSet, ArchSet]:
    admitted = unknown = 0
    for i, v in enumerate(vec[:-1]):
        if v is T:
            admitted |= 1 << i
        elif v is U:
            unknown |= 1 << i
    return ArchSet.from_mask(admitted), ArchSet.from_mask(unknown)


def _truth(v: Tri) -> Truth:
    return Truth.UNKNOWN if v is U else (Truth.TRUE if v else Truth.FALSE)


_FEATURE_TESTS = frozenset(
    {
        "__has_include",
        "__has_include_next",
        "__has_builtin",
        "__has_attribute",
        "__has_cpp_attribute",
        "__has_feature",
    }
)
_OTHER_TOOLCHAINS = (
    "__clang__",
    "__CUDA__",
    "__HIP__",
    "__HIPCC__",
    "__CUDACC_RTC__",
    "_MSC_VER",
    "__NVCOMPILER",
    "__INTEL_COMPILER",
    "_WIN32",
    "_WIN64",
    "WIN32",
    "__WIN32",
    "__CYGWIN__",
    "__APPLE__",
)


@cache
def builtin_macros(cuda_version: tuple[int, int]) -> dict[str, Stored]:
    """nvcc's predefined macros per lane (see `liftgate.arch.core.nvcc_macros`), as stored entries."""
    from liftgate.arch.core import nvcc_macros

    lanes = [*universe(), None]
    per_lane = [nvcc_macros(arch, cuda_version) for arch in lanes]
    names = sorted({name for macros in per_lane for name in macros})
    defs: dict[tuple[str, int], MacroDef] = {}

    def make(name: str, value: int) -> MacroDef:
        key = (name, value)
        if key not in defs:
            defs[key] = MacroDef(name, None, False, (str(value),), None, None, "predefined by nvcc")
        return defs[key]

    table: dict[str, Stored] = {}
    for name in names:
        entries: list[MacroEntry] = [make(name, m[name]) if name in m else None for m in per_lane]
        if name == "__CUDA_ARCH_LIST__":
            # The host pass defines it too, as the whole build's list: defined, value unknown.
            entries[-1] = MacroDef(name, None, False, (UNKNOWN_TOKEN,), None, None, "predefined by nvcc")
        table[name] = entries[0] if all(e is entries[0] for e in entries) else tuple(entries)
    table["__CUDACC_VER_BUILD__"] = UNKNOWN_MACRO
    # The toolchain liftgate models: nvcc with a GCC host compiler on Linux. Other compilers'
    # identification macros (clang's CUDA mode, NVRTC, MSVC, nvc++) are undefined there.
    for name in _OTHER_TOOLCHAINS:
        table[name] = None
    for name in ("__GNUC__", "__GNUC_MINOR__", "__linux__", "__unix__"):
        table[name] = MacroDef(
            name, None, False, (UNKNOWN_TOKEN,), None, None, "the host compiler (GCC on Linux)"
        )
    table["__cplusplus"] = MacroDef(
        "__cplusplus", None, False, ("201703L",), None, None, "nvcc default -std=c++17"
    )
    # From crt/host_defines.h, included by every nvcc translation unit.
    table["__CUDA_ARCH_HAS_FEATURE__"] = parse_define(
        "__CUDA_ARCH_HAS_FEATURE__(_FEAT) __CUDA_ARCH_FEAT_##_FEAT"
    )
    return table


_NAME = re.compile(r"[A-Za-z_]\w*")
_FIRST_WORD = re.compile(r"[^\s(]+")  # the name a #define defines (its first word, before any '(')
_BUDGET_NOTE = " (macros that double at each level?); its condition is unknown"
_CXX_LITERALS = frozenset({"true", "false", "and", "or", "not", "bitand", "bitor", "xor", "compl", "not_eq"})


def _arch_builtin_name(name: str) -> bool:
    """nvcc defines these per target; any spelling it does not define for a target is undefined there."""
    return name.startswith("__CUDA_ARCH")


@dataclass
class Branch:
    keyword: str
    text: str
    line: int
    end_line: int
    effective: Vec
    offset: int = 0  # of the directive's '#'
    body_offset: int = 0  # where the branch's region starts
    draft: _Draft | None = None
    error: bool = False  # an #error directly in this branch: taking it fails the build
    nested_error: bool = False  # an #error in a conditional inside it
    build_macros: tuple[str, ...] = ()  # macros in the condition that only the build can set
    region_condition: RegionCondition | None = None  # computed once, shared by every region


@dataclass(frozen=True, slots=True)
class RegionCondition:
    """A preprocessor condition in force over host code: its text and line, its cuda-pp gate id
    when it is an arch gate, and the macros in it that only the build can set."""

    text: str
    line: int
    gate_id: str | None
    build_macros: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Region:
    """From ``line`` on (until the next region): whether the host pass compiles the code
    (True, False, or None when it depends on the build), and the conditions in force."""

    line: int
    host: Tri
    conditions: tuple[RegionCondition, ...]
    # When ``host`` is None only because of build flags the package passes for some targets
    # (`ArchFlag`): the targets whose build compiles the code, and those whose build may.
    targets: tuple[ArchSet, ArchSet] | None = None


@dataclass
class _Draft:
    id: str
    norm: str
    condition: str
    keyword: str
    admitted: ArchSet
    unknown: ArchSet
    host: Truth
    evidence: tuple[Evidence, ...]
    depends_on: tuple[str, ...]
    enclosing: tuple[str, ...]
    macros: tuple[MacroOrigin, ...] = ()
    switches: tuple[Switch, ...] = ()


@cache
def _switched_on(name: str) -> MacroDef:
    """``-DNAME``: the macro defined to 1 (one object per name, so evaluations of it memoise)."""
    return MacroDef(name, None, False, ("1",), None, None, "")


@dataclass
class Frame:
    line: int
    parent: Vec
    taken: Vec
    active: Vec
    branches: list[Branch] = field(default_factory=list)
    seen_else: bool = False
    flag_only: bool = True  # every condition so far tests only build flags and non-arch macros
    # What holds from the outermost frame down to this one's current branch, computed once per
    # branch and shared (a 2,000-deep nest must not rebuild 2,000-long tuples at every directive):
    # the evidence context, the region conditions, and the (ids, norms) of the enclosing drafts.
    context: str | None = None
    conditions: tuple[RegionCondition, ...] | None = None
    drafts: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    def new_branch(self, branch: Branch) -> None:
        self.branches.append(branch)
        self.context = self.conditions = self.drafts = None


class Unbalanced(Exception):
    pass


class OverBudget(Exception):
    """A file took more than `FILE_STEPS` steps: its gates are not reported."""


def _first_token(text: str) -> str:
    """The first whitespace-separated word (without splitting the rest of a long directive)."""
    parts = text.split(None, 1)
    return parts[0] if parts else ""


def _shown(text: str) -> str:
    """A directive's text for a Skip: long ones are cut (a 14 MB #if must not make a 14 MB reason)."""
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS]}… ({len(text):,} characters)"


def _and_context(outer: str, inner: str) -> str:
    joined = f"{outer} && {inner}" if outer else inner
    if len(joined) <= _CONTEXT_CHARS:
        return joined
    half = _CONTEXT_CHARS // 2
    return f"{joined[:half]} && … && {joined[-half:]}"


HeaderSource = Callable[[str], "LexedFile | None"]
IncludeResolver = Callable[[str, str, bool], "str | None"]


class Walker:
    """Walk one file's directives across every lane. Collects gates only when asked to."""

    def __init__(
        self,
        path: str,
        lexed: LexedFile,
        *,
        cuda_version: tuple[int, int],
        resolve_include: IncludeResolver,
        header_export: Callable[[str], HeaderExport],
        collect_gates: bool,
        package: str = "",
        version: str | None = None,
        relevant: frozenset[str] | None = None,
        defined_anywhere: frozenset[str] | None = None,
        record_regions: bool = True,
        flags: Mapping[str, tuple[Stored, ArchFlag]] | None = None,
    ) -> None:
        self.path = path
        self.relevant = relevant
        self.defined_anywhere = defined_anywhere
        # -D flags the build passes only for some targets: their state per lane, and the fact.
        self.flags: Mapping[str, tuple[Stored, ArchFlag]] = flags or {}
        self.lexed = lexed
        self.cuda_version = cuda_version
        self.resolve_include = resolve_include
        self.header_export = header_export
        self.collect_gates = collect_gates
        self.package = package
        self.version = version
        self.builtins = builtin_macros(cuda_version)
        self.table: dict[str, Stored] = {}
        self.local_names: set[str] = {
            m.group(0) for d in lexed.directives if d.keyword == "define" and (m := _FIRST_WORD.match(d.text))
        }
        n = lane_count()
        self.n = n
        self.all_true: Vec = (T,) * n
        self.stack: list[Frame] = []
        self.gates: list[Gate] = []
        self.skips: list[Skip] = []
        self.sink = GateSink(GateKind.CUDA_PP, package, version, path)
        # For host-code analysis: after each conditional directive, from which line on the host
        # pass compiles the code (true, false or unknown) and the conditions in force there.
        self.regions: list[Region] = []
        self.record_regions = record_regions
        self.steps = 0  # spent against FILE_STEPS
        # Conditionals nested past MAX_NESTING: how deep inside them the walk is (0: not inside),
        # where they started, and the macros they may define or undefine (unknown afterwards).
        self.overflow = 0
        self.overflow_line = 0
        self.overflow_names: dict[str, None] = {}
        self.include_height = 0  # the deepest #include nesting below this file

    def spend(self, steps: int) -> None:
        """Charge ``steps`` to the file; past FILE_STEPS the file is given up (`OverBudget`)."""
        self.steps += steps
        if self.steps > FILE_STEPS:
            raise OverBudget(
                f"more than {FILE_STEPS:,} preprocessor steps (macros or conditionals of hostile size?): "
                "its #if gates are not reported"
            )

    # -- macro state -------------------------------------------------------
    def fallback(self, name: str) -> Stored:
        if name in self.builtins:
            return self.builtins[name]
        flag = self.flags.get(name)
        if flag is not None:
            return flag[0]
        if _arch_builtin_name(name) or name in self.local_names or name in _CXX_LITERALS:
            return None
        if self._assumed_undefined(name):
            return None
        return UNKNOWN_MACRO

    def _assumed_undefined(self, name: str) -> bool:
        """A non-reserved macro that nothing in the package defines or passes with -D is undefined.

        Names in the implementation's namespace (``__x``, ``_X``: compiler and platform macros)
        stay unknown, and so does anything a build file of the package may pass to the compiler.
        """
        if self.defined_anywhere is None or name in self.defined_anywhere or name in self.table:
            return False
        return not (name.startswith("__") or (name[:1] == "_" and name[1:2].isupper()))

    def stored(self, name: str) -> Stored:
        if name in self.table:
            return self.table[name]
        return self.fallback(name)

    def entry(self, name: str, lane: int) -> MacroEntry:
        value = self.stored(name)
        return value[lane] if isinstance(value, tuple) else value

    def _set(self, name: str, new: Stored, active: Vec) -> None:
        kind = _kind(active)
        if kind is T and not _has_maybe(new):
            self.table[name] = new
            return
        if kind is F:
            return
        current = self.stored(name)
        if current is new:
            return
        untouched = name not in self.table  # in a header walked from a clean state: as includers have it
        # Lanes alike (the same entries, the same activity) settle alike: each distinct combination
        # is settled once (a few per macro, against one per lane), and the lanes are mapped to
        # the results without a Python loop over them.
        shared: dict[int, MacroEntry] = {}  # one MaybeDef per definition: lanes alike store one value
        if not isinstance(current, tuple) and not isinstance(new, tuple):  # settled once per activity
            by_activity: dict[Tri, MacroEntry] = {}
            for a in dict.fromkeys(active):  # in lane order
                e = _settle(current, new, a, untouched)
                by_activity[a] = shared.setdefault(id(e.definition), e) if isinstance(e, MaybeDef) else e
            values = list(by_activity.values())
            if all(v is values[0] for v in values):
                self.table[name] = values[0]
            else:
                self.table[name] = tuple(map(by_activity.__getitem__, active))
            return
        n = len(active)
        currents = current if isinstance(current, tuple) else (current,) * n
        news = new if isinstance(new, tuple) else (new,) * n
        keys = list(zip(map(id, currents), map(id, news), active, strict=True))
        objects = dict(zip(keys, zip(currents, news, strict=True), strict=True))  # both held meanwhile
        results: dict[tuple[int, int, Tri], MacroEntry] = {}
        for key, (cur, nxt) in objects.items():
            e = _settle(cur, nxt, key[2], untouched)
            results[key] = shared.setdefault(id(e.definition), e) if isinstance(e, MaybeDef) else e
        distinct = {id(e): e for e in results.values()}
        if len(distinct) == 1:
            (self.table[name],) = distinct.values()
        else:
            self.table[name] = tuple(map(results.__getitem__, keys))

    # -- evaluation --------------------------------------------------------
    def eval_vec(self, tokens: list[str]) -> tuple[Vec, set[str], str | None]:
        """The condition's value in every lane, the names it touched, and an error if it is malformed.

        Lanes whose entries agree on every lane-varying macro an evaluation touched share its
        result, so a condition is evaluated once per distinct macro state, not once per lane.
        """
        key = tuple(tokens)
        for names, objects, cached in _EVAL_CACHE.get(key, ()):
            if all(self.stored(n) is o for n, o in zip(names, objects, strict=True)):
                self.spend(cached[3])  # what it cost the first time: budgets never depend on the cache
                return cached[0], set(cached[1]), cached[2]
        budget = StepBudget(CONDITION_STEPS)
        vec, touched, error = self._eval_vec(tokens, budget)
        cost = budget.used + len(tokens)
        names = tuple(sorted(touched))
        if len(_EVAL_CACHE) > _EVAL_CACHE_LIMIT:
            _EVAL_CACHE.clear()
        # The stored objects themselves are kept (not their ids), so identity checks stay sound.
        variants = _EVAL_CACHE.setdefault(key, [])
        if len(variants) >= _EVAL_CACHE_VARIANTS:
            del variants[0]
        variants.append((names, tuple(self.stored(n) for n in names), (vec, frozenset(touched), error, cost)))
        self.spend(cost)
        return vec, touched, error

    def _eval_vec(self, tokens: list[str], budget: StepBudget) -> tuple[Vec, set[str], str | None]:
        results: list[Tri] = [U] * self.n
        varying: list[tuple[MacroEntry, ...]] = []  # lane-varying stored values touched so far
        varying_ids: set[int] = set()
        evaluated: list[int] = []
        by_key: dict[tuple[int, ...], Tri] = {}
        touched: set[str] = set()
        error: str | None = None
        for lane in range(self.n):
            if varying:
                key = tuple(id(v[lane]) for v in varying)
                if key in by_key:
                    results[lane] = by_key[key]
                    continue
            seen = Lookup()
            expander = MacroExpander(lambda nm, lane=lane: self.entry(nm, lane), seen, budget)  # type: ignore[misc]
            expanded: list[str] = []
            try:
                expanded = expander.expand(tokens)
                budget.spend(len(expanded))
                value = evaluate(expanded)
            except BudgetExceeded as exc:
                # Every lane is unknown: a condition this costly is not evaluated in part.
                return (U,) * self.n, touched | seen.names, f"{exc}{_BUDGET_NOTE}"
            except ExprError as exc:
                value = U
                # A malformed result built from macros liftgate cannot see is just unknown.
                if UNKNOWN_TOKEN not in expanded:
                    error = str(exc)
            results[lane] = value
            evaluated.append(lane)
            touched |= seen.names
            grew = False
            for stored in map(self.stored, seen.names):
                if isinstance(stored, tuple) and id(stored) not in varying_ids:
                    varying_ids.add(id(stored))
                    varying.append(stored)
                    grew = True
            if not varying:
                return (value,) * self.n, touched, error
            if grew:  # a finer key is still sound: rebuild it for the lanes evaluated so far
                by_key = {tuple(id(v[k]) for v in varying): results[k] for k in evaluated}
            else:
                by_key[tuple(id(v[lane]) for v in varying)] = value
        return tuple(results), touched, error

    def defined_vec(self, name: str) -> Vec:
        out: list[Tri] = []
        for lane in range(self.n):
            e = self.entry(name, lane)
            out.append(U if isinstance(e, UnknownEntry) else e is not None)
        return tuple(out)

    # -- walking -----------------------------------------------------------
    def active(self) -> Vec:
        return self.stack[-1].active if self.stack else self.all_true

    def run(self) -> None:
        """Walk the file, asking ``header_export`` for each header it includes.

        `PackageAnalyzer` drives `walk` itself instead, with an explicit stack of includes.
        """
        walk = self.walk()
        try:
            target = next(walk)
            while True:
                target = walk.send(self.header_export(target))
        except StopIteration:
            pass

    def walk(self) -> Generator[str, HeaderExport, None]:
        """Walk the file's directives; yields each header to include and is sent its export."""
        for d in self.lexed.directives:
            self.spend(1)
            kw = d.keyword
            if self.overflow:
                if kw == "include":
                    target = self._include_target(d.text)
                    if target is not None:
                        export = yield target
                        self.include_height = max(self.include_height, export.height)
                        self._forget(sorted(n for n in {*export.table, *export.names} if self._relevant(n)))
                else:
                    self._overflowed(d)
            elif kw in CONDITIONAL_KEYWORDS:
                if kw.startswith("if") and len(self.stack) >= MAX_NESTING:
                    self._start_overflow(d)
                    continue
                self._conditional(d.keyword, d.text, d.line, d.end_line)
                self._mark_offsets(d)
            elif kw == "else":
                self._else(d.line, d.end_line)
                self._mark_offsets(d)
            elif kw == "endif":
                self._endif(d.line, d.offset)
            elif kw == "define":
                if self._relevant(d.text):
                    self._define(d.text, d.line)
            elif kw == "undef":
                name = _first_token(d.text)
                if name and self._relevant(name):
                    self._set(name, None, self.active())
            elif kw == "include":
                target = self._include_target(d.text)
                if target is not None:
                    self._merge_include((yield target))
            elif kw == "error" and self.stack:
                self._error()
        if self.stack or self.overflow:
            line = self.overflow_line if self.overflow else self.stack[-1].line
            raise Unbalanced(f"#{'if'} at line {line} has no matching #endif")

    def _error(self) -> None:
        self.stack[-1].branches[-1].error = True
        for frame in self.stack[:-1]:
            frame.branches[-1].nested_error = True

    # -- conditionals nested past MAX_NESTING ------------------------------------
    def _start_overflow(self, d: Directive) -> None:
        """The walk stops following conditionals here, until the matching #endif.

        The region is not host code either (no cpp-runtime gates in it), and every macro it
        defines, undefines or includes is unknown after it, where the region may be compiled.
        """
        self.overflow = 1
        self.overflow_line = d.line
        self.skips.append(
            Skip(
                f"{self.path}:{d.line}",
                f"#if nesting deeper than {MAX_NESTING:,} at line {d.line}: gates in it are not reported",
                self.package,
            )
        )
        if self.record_regions:
            self.regions.append(Region(d.end_line + 1, False, self._conditions()))

    def _overflowed(self, d: Directive) -> None:
        kw = d.keyword
        if kw in CONDITIONAL_KEYWORDS and kw.startswith("if"):
            self.overflow += 1
        elif kw == "endif":
            self.overflow -= 1
            if not self.overflow:
                self._forget(list(self.overflow_names))
                self.overflow_names.clear()
                self._record_region(d.line + 1)
        elif kw in ("define", "undef"):
            name = _FIRST_WORD.match(d.text)
            if name and self._relevant(name.group(0)):
                self.overflow_names[name.group(0)] = None
        elif kw == "error" and self.stack:
            for frame in self.stack:
                frame.branches[-1].nested_error = True

    def _forget(self, names: list[str]) -> None:
        """Macros a region liftgate did not read may have changed: unknown where it may be compiled."""
        self.spend(len(names))
        active = self.active()
        for name in names:
            self.local_names.add(name)
            self._set(name, UNKNOWN_MACRO, active)

    def _relevant(self, text: str) -> bool:
        """Only macros that some conditional can reach need tracking (see `relevant_macros`)."""
        if self.relevant is None:
            return True
        m = _NAME.match(text)
        return m is not None and m.group(0) in self.relevant

    def _mark_offsets(self, d: Directive) -> None:
        branch = self.stack[-1].branches[-1]
        branch.offset = d.offset
        branch.body_offset = d.end_offset

    def _condition(self, keyword: str, text: str) -> tuple[Vec, set[str], str | None, list[str], str | None]:
        """(lane values, names touched, why it is malformed, tokens, why it is beyond a bound)."""
        if keyword in ("ifdef", "ifndef", "elifdef", "elifndef"):
            name = _first_token(text)
            if not name:
                return (U,) * self.n, set(), f"#{keyword} without a macro name", [], None
            vec = self.defined_vec(name)
            if keyword.endswith("ndef"):
                vec = _not(vec)
            return vec, {name}, None, [name], None
        if len(text) > MAX_DIRECTIVE_CHARS:
            why = f"longer than {MAX_DIRECTIVE_CHARS:,} characters ({len(text):,}); its condition is unknown"
            return (U,) * self.n, set(), why, [], why
        try:
            tokens = tokenize(text)
        except ExprError as exc:
            return (U,) * self.n, set(), str(exc), [], None
        if not tokens:
            return (U,) * self.n, set(), f"#{keyword} with no expression", [], None
        vec, touched, error = self.eval_vec(tokens)
        bound = error if error is not None and error.endswith(_BUDGET_NOTE) else None
        return vec, touched, error, tokens, bound

    def _conditional(self, keyword: str, text: str, line: int, end_line: int) -> None:
        vec, touched, error, tokens, bound = self._condition(keyword, text)
        if keyword.startswith("if"):
            parent = self.active()
            frame = Frame(line=line, parent=parent, taken=(F,) * self.n, active=parent)
            self.stack.append(frame)
            effective = vec
        else:
            if not self.stack:
                raise Unbalanced(f"#{keyword} at line {line} has no matching #if")
            frame = self.stack[-1]
            if frame.seen_else:
                raise Unbalanced(f"#{keyword} at line {line} follows #else")
            effective = _and(_not(frame.taken), vec)
        taken_before = frame.taken
        frame.taken = _or(frame.taken, vec)
        if frame.flag_only and self.flags:
            frame.flag_only = not any(
                _arch_builtin_name(n) or (isinstance(self.stored(n), tuple) and n not in self.flags)
                for n in touched
            )
        frame.active = _and(frame.parent, effective)
        branch = Branch(keyword, text, line, end_line, effective)
        branch.build_macros = tuple(
            sorted(n for n in touched if isinstance(self.stored(n), UnknownEntry) or n in self.flags)
        )
        frame.new_branch(branch)
        reason: str | None = None
        if bound is not None:
            reason = f"#{keyword} at line {line}: {bound}"
        elif error and any(_arch_builtin_name(n) or isinstance(self.stored(n), tuple) for n in touched):
            reason = f"cannot evaluate #{keyword} {_shown(text)}: {_shown(error)}"
        if reason is not None:
            self.spend(_GATE_STEPS)  # a Skip is a result too: a file cannot make a million of them
            self.skips.append(Skip(f"{self.path}:{line}", reason, self.package))
        if self.collect_gates and not _all(frame.parent, F):
            if not _device_uniform(effective):
                branch.draft = self._draft(keyword, text, tokens, effective, touched)
            elif effective[0] is F and error is None:
                switches = self._switches(keyword, text, touched, taken_before)
                if switches:
                    branch.draft = self._draft(keyword, text, tokens, effective, touched, switches)
        self._record_region(end_line + 1)

    def _switches(self, keyword: str, text: str, touched: set[str], taken_before: Vec) -> tuple[Switch, ...]:
        """A condition false for every target only because a macro nothing in the package defines or
        passes is taken as undefined (``defined(CUTLASS_ENABLE_GDC_FOR_SM90) && __CUDA_ARCH__ >= 900``):
        the switches that would open it, each with what the condition admits once it is set.
        Empty when setting them does not make the condition depend on the target."""
        names = sorted(
            n
            for n in touched
            if n not in self.table and n not in self.local_names and self._assumed_undefined(n)
        )
        if not names or not any(_arch_builtin_name(n) or isinstance(self.stored(n), tuple) for n in touched):
            return ()
        self.spend(_GATE_STEPS)
        for n in names:
            self.table[n] = _switched_on(n)
        try:
            vec_on, _, error, _, _ = self._condition(keyword, text)
        finally:
            for n in names:
                del self.table[n]
        if error is not None:
            return ()
        on = vec_on if keyword.startswith("if") else _and(_not(taken_before), vec_on)
        if _device_uniform(on):
            return ()
        admitted, unknown = _vec_to_sets(on)
        return tuple(Switch(n, SwitchKind.BUILD_FLAG, f"-D{n}", admitted, unknown) for n in names)

    def _conditions(self) -> tuple[RegionCondition, ...]:
        """The conditions in force at the current branch of every open conditional (see Region)."""
        if not self.stack:
            return ()
        top = self.stack[-1]
        if top.conditions is None:
            k = len(self.stack) - 1
            while k > 0 and self.stack[k - 1].conditions is None:
                k -= 1
            conditions = self.stack[k - 1].conditions if k > 0 else ()
            assert conditions is not None
            for frame in self.stack[k:]:
                self.spend(2 * len(conditions) + 1)
                b = frame.branches[-1]
                if b.draft is not None or b.effective[-1] is not T:
                    if b.region_condition is None:
                        b.region_condition = RegionCondition(
                            _branch_text(b), b.line, b.draft.id if b.draft else None, b.build_macros
                        )
                    conditions = (*conditions, b.region_condition)
                frame.conditions = conditions
        assert top.conditions is not None
        return top.conditions

    def _record_region(self, line: int) -> None:
        if self.record_regions:
            self.spend(_REGION_STEPS)
            host = self.active()[-1]
            targets = self._host_targets() if host is U and self.flags else None
            self.regions.append(Region(line, host, self._conditions(), targets))

    def _host_targets(self) -> tuple[ArchSet, ArchSet] | None:
        """For host code the host pass may or may not compile: when that depends only on build
        flags the package passes for some targets, which targets' builds compile it (each flag's
        device lane is its value in a build for that target alone) and which may. None otherwise."""
        if len(self.stack) > _FLAG_REGION_DEPTH:
            return None
        vec: Vec = self.all_true
        for frame in self.stack:
            branch = frame.branches[-1]
            if branch.effective[-1] is T:
                continue  # the host pass compiles it whatever the target
            if not frame.flag_only:
                return None
            vec = _and(vec, branch.effective)
        return _vec_to_sets(vec)

    def _enclosing(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(ids, norms) of the drafts of the open conditionals below the top one."""
        if len(self.stack) < 2:
            return (), ()
        below = self.stack[-2]
        if below.drafts is None:
            k = len(self.stack) - 2
            while k > 0 and self.stack[k - 1].drafts is None:
                k -= 1
            ids, norms = self.stack[k - 1].drafts if k > 0 else ((), ())  # type: ignore[misc]
            for frame in self.stack[k:-1]:
                self.spend(2 * len(ids) + 1)
                draft = frame.branches[-1].draft
                if draft is not None:
                    ids, norms = (*ids, draft.id), (*norms, draft.norm)
                frame.drafts = (ids, norms)
        assert below.drafts is not None
        return below.drafts

    def _draft(
        self,
        keyword: str,
        text: str,
        tokens: list[str],
        effective: Vec,
        touched: set[str],
        switches: tuple[Switch, ...] = (),
    ) -> _Draft:
        norm = f"#{keyword} " + (" ".join(tokens) if tokens else text)
        enclosing_ids, scope = self._enclosing()
        self.spend(_GATE_STEPS + len(scope))
        gid = self.sink.identify(norm, scope)
        admitted, unknown = _vec_to_sets(effective)
        evidence: list[Evidence] = []
        macros: list[MacroOrigin] = []
        depends: list[str] = []
        for name in sorted(touched):
            value = self.stored(name)
            flag = self.flags.get(name)
            if flag is not None and name not in self.table:
                for setter in flag[1].setters:
                    evidence.append(
                        Evidence(
                            f"{name} is passed by the build (-D{name}={flag[1].value}) only where "
                            f"{setter.described} admits the target: {setter.condition}",
                            setter.flag.path,
                            setter.flag.line,
                        )
                    )
                    macros.append(
                        MacroOrigin(name, setter.flag.path, setter.flag.line, setter.condition, setter.gate)
                    )
            elif name in TOOLKIT_MACROS:
                entry = value[0] if isinstance(value, tuple) else value
                shown = " ".join(entry.body) if isinstance(entry, MacroDef) else "unknown"
                depends.append(
                    f"{name} = {shown} (assumed for CUDA {self.cuda_version[0]}.{self.cuda_version[1]})"
                )
            elif isinstance(value, MaybeDef):
                where = f" ({value.definition.path}:{value.definition.line})" if value.definition.path else ""
                depends.append(f"{name} (defined{where} only under a condition liftgate cannot decide)")
            elif isinstance(value, UnknownEntry) and name in _FEATURE_TESTS:
                depends.append(f"{name}(…) (a compiler feature test; its answer depends on the toolchain)")
            elif isinstance(value, UnknownEntry):
                depends.append(f"{name} (not defined in this file or its includes; set by the build?)")
            elif value is None and name not in self.local_names and self._assumed_undefined(name):
                depends.append(
                    f"{name} assumed undefined (nothing in the package defines it or passes -D{name})"
                )
            elif isinstance(value, tuple) and name not in self.builtins:
                origins: dict[tuple[str | None, int | None, str], None] = {}
                for e in value:
                    if isinstance(e, MacroDef):
                        origins[(e.path, e.line, e.context)] = None
                for path, line, context in origins:
                    why = f"under {context}" if context else "unconditionally"
                    evidence.append(Evidence(f"{name} is defined {why}", path, line))
                    macros.append(MacroOrigin(name, path, line, context))
                if any(isinstance(e, UnknownEntry) for e in value):
                    depends.append(
                        f"{name} (defined only under conditions liftgate cannot decide for some targets)"
                    )
        if switches:
            setting = " ".join(w.setting for w in switches)
            evidence.append(
                Evidence(
                    f"compiled out for every target unless the build passes {setting} (nothing in the "
                    f"package does); with it, the condition admits {switches[0].admitted.render()}",
                    outcome=True,
                )
            )
        condition = " ".join(text.split())
        return _Draft(
            id=gid,
            norm=norm,
            condition=condition,
            keyword=keyword,
            admitted=admitted,
            unknown=unknown,
            host=_truth(effective[-1]),
            evidence=tuple(evidence),
            depends_on=tuple(depends),
            enclosing=enclosing_ids,
            macros=tuple(macros),
            switches=switches,
        )

    def _else(self, line: int, end_line: int) -> None:
        if not self.stack:
            raise Unbalanced(f"#else at line {line} has no matching #if")
        frame = self.stack[-1]
        if frame.seen_else:
            raise Unbalanced(f"second #else at line {line}")
        frame.seen_else = True
        self.spend(len(frame.branches))
        effective = _not(frame.taken)
        frame.taken = (T,) * self.n
        frame.active = _and(frame.parent, effective)
        previous = " || ".join(_branch_text(b) for b in frame.branches)
        frame.new_branch(Branch("else", f"!({previous})", line, end_line, effective))
        self._record_region(end_line + 1)

    def _endif(self, line: int, offset: int) -> None:
        if not self.stack:
            raise Unbalanced(f"#endif at line {line} has no matching #if")
        frame = self.stack.pop()
        self._record_region(line + 1)
        if not self.collect_gates:
            return
        branches = frame.branches
        drafted = [k for k, b in enumerate(branches) if b.draft is not None]
        if not drafted:
            return
        # What the branches after each one do, from the last back: an #error in any of them makes
        # the else kind ERROR, else any code FALLBACK (each branch's region is read once).
        after: list[ElseKind] = [ElseKind.NONE] * len(branches)
        kind_after = ElseKind.NONE
        for j in range(len(branches) - 1, drafted[0], -1):
            stop = branches[j + 1].offset if j + 1 < len(branches) else offset
            kind = self._region_kind(branches[j], stop)
            if kind is ElseKind.ERROR or kind_after is ElseKind.ERROR:
                kind_after = ElseKind.ERROR
            elif kind is ElseKind.FALLBACK:
                kind_after = ElseKind.FALLBACK
            after[j - 1] = kind_after
        dispatch = branches[0].line if len(drafted) > 1 else None
        for k in drafted:
            branch = branches[k]
            draft = branch.draft
            assert draft is not None
            body_end = (branches[k + 1].line if k + 1 < len(branches) else line) - 1
            then_span = Span(branch.end_line + 1, body_end) if body_end > branch.end_line else None
            else_span = Span(branches[k + 1].line, line) if k + 1 < len(branches) else None
            self.gates.append(
                self.sink.gate(
                    draft.id,
                    span=Span(branch.line, branch.end_line),
                    condition=draft.condition,
                    admitted=draft.admitted,
                    unknown=draft.unknown,
                    host=draft.host,
                    then_span=then_span,
                    else_span=else_span,
                    else_kind=after[k],
                    confidence=Confidence.EXACT,
                    evidence=draft.evidence,
                    depends_on=draft.depends_on,
                    directive=f"#{draft.keyword}",
                    enclosing=draft.enclosing,
                    macros=draft.macros,
                    switches=draft.switches,
                    dispatch=dispatch,
                    keep=False,
                )
            )

    def _region_kind(self, branch: Branch, stop: int) -> ElseKind:
        """What a branch's region does: an #error or only static_asserts fail the build (error);
        any other code is another implementation (fallback); nothing at all is ``none``."""
        if branch.error:
            return ElseKind.ERROR
        self.spend((stop - branch.body_offset) // 16 + 1)
        code = " ".join(
            ln.strip()
            for ln in self.lexed.code_between(branch.body_offset, stop)
            if ln.strip() and not ln.lstrip().startswith("#")
        )
        asserts_only = False
        if "static_assert" in code:
            rest = _without_static_asserts(code)
            asserts_only = not rest.strip()
            code = rest
        if code.strip():
            return ElseKind.ERROR if _traps_only(code) else ElseKind.FALLBACK
        if asserts_only or branch.nested_error:
            return ElseKind.ERROR
        return ElseKind.NONE

    def _context(self) -> str:
        """The architecture conditions in force here, for evidence (long ones are elided)."""
        if not self.stack:
            return ""
        top = self.stack[-1]
        if top.context is None:
            k = len(self.stack) - 1
            while k > 0 and self.stack[k - 1].context is None:
                k -= 1
            context = self.stack[k - 1].context if k > 0 else ""
            assert context is not None
            for frame in self.stack[k:]:
                self.spend(len(context) // 64 + 1)
                b = frame.branches[-1]
                if not _device_uniform(b.effective):
                    context = _and_context(context, _branch_text(b))
                frame.context = context
        assert top.context is not None
        return top.context

    def _define(self, text: str, line: int) -> None:
        active = self.active()
        if _kind(active) is F:
            return
        try:
            if len(text) > MAX_DIRECTIVE_CHARS:
                # Its name and parameters are read; its value is unknown.
                head = re.match(r"[A-Za-z_]\w*(?:\([^)]*\))?", text)
                if head is None:
                    return
                macro = parse_define(head.group(0), self.path, line, self._context())
                macro = dataclasses.replace(macro, body=(UNKNOWN_TOKEN,))
                self.skips.append(
                    Skip(
                        f"{self.path}:{line}",
                        f"#define {macro.name} at line {line} is longer than {MAX_DIRECTIVE_CHARS:,} "
                        "characters; its value is unknown",
                        self.package,
                    )
                )
            else:
                self.spend(len(text) // 16 + 1)
                macro = parse_define(text, self.path, line, self._context())
        except ExprError:
            return
        self._set(macro.name, macro, active)

    def _include_target(self, text: str) -> str | None:
        """The package header an #include in force names, if any."""
        if _kind(self.active()) is F:
            return None
        name = include_name(text)
        return None if name is None else self.resolve_include(self.path, *name)

    def _merge_include(self, export: HeaderExport) -> None:
        self.include_height = max(self.include_height, export.height)
        self.spend(len(export.table) + 1)
        active = self.active()
        # Every macro the header (or its includes) could define is now known: where it did not
        # define one, the macro is undefined rather than unknown.
        self.local_names.update(export.names)
        if _kind(active) is T:
            for macro, stored in export.table.items():
                if _has_maybe(stored):
                    self._set(macro, stored, active)
                else:
                    self.table[macro] = stored
            return
        # Included for some targets only: the evidence says under which condition it comes in.
        context = self._context()
        for macro, stored in export.table.items():
            self._set(macro, _recontext(stored, context), active)


# Statements that stop a kernel where they run: an invalid-path trap (CuTe, CUTLASS), __trap(), a
# trap or breakpoint in inline PTX, assert(0 …)/assert(false …), __builtin_trap/unreachable.
_TRAP_ASM = re.compile(
    r'\basm\s*(?:volatile\s*|__volatile__\s*)?\(\s*"\s*(?:trap|brkpt)\s*;?\s*(?:\\n)?\s*"\s*\)'
)
_TRAP = re.compile(
    r"(?:CUTE_INVALID_CONTROL_PATH\s*\(.*\)|CUTLASS_NOT_IMPLEMENTED\s*\(\s*\)|__trap\s*\(\s*\)"
    r"|__brkpt\s*\(\s*\)|__builtin_trap\s*\(\s*\)|__builtin_unreachable\s*\(\s*\)"
    r"|assert\s*\(\s*(?:0|false)\b.*\))"
)


def _traps_only(code: str) -> bool:
    """Whether a region's code is nothing but traps: it runs for no target (``#else
    CUTE_INVALID_CONTROL_PATH("…")``), so a target that reaches it is shut out, not given a fallback."""
    code = LITERALS.sub('""', _TRAP_ASM.sub("__trap()", code))
    statements = [part.strip().strip("{}").strip() for part in code.split(";")]
    statements = [part for part in statements if part]
    return bool(statements) and all(_TRAP.fullmatch(part) for part in statements)


def _without_static_asserts(code: str) -> str:
    """``code`` minus its ``static_assert(...);`` statements (messages may hold ';' and parens)."""
    code = LITERALS.sub('""', code)
    out: list[str] = []
    pos = 0
    while True:
        start = code.find("static_assert", pos)
        if start < 0:
            break
        open_paren = code.find("(", start)
        if open_paren < 0:
            break
        depth = 0
        end = open_paren
        while end < len(code):
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            end += 1
            if depth == 0:
                break
        while end < len(code) and code[end] in " ;":
            end += 1
        out.append(code[pos:start])
        pos = end
    out.append(code[pos:])
    return "".join(out)


def _recontext(stored: Stored, context: str) -> Stored:
    def one(entry: MacroEntry) -> MacroEntry:
        if isinstance(entry, MaybeDef) and context:
            return MaybeDef(one(entry.definition))  # type: ignore[arg-type]
        if not isinstance(entry, MacroDef) or not context:
            return entry
        joined = _and_context(context, entry.context) if entry.context else context
        return MacroDef(entry.name, entry.params, entry.variadic, entry.body, entry.path, entry.line, joined)

    return tuple(one(e) for e in stored) if isinstance(stored, tuple) else one(stored)


def _branch_text(branch: Branch) -> str:
    if branch.keyword in ("ifdef", "elifdef"):
        return f"defined({_first_token(branch.text)})"
    if branch.keyword in ("ifndef", "elifndef"):
        return f"!defined({_first_token(branch.text)})"
    if branch.keyword == "else":
        return branch.text
    return f"({' '.join(branch.text.split())})"


@dataclass(frozen=True, slots=True)
class HeaderExport:
    """What including a header does: the macro states it leaves, and every macro it could define.

    ``height`` is how deep its own includes nest (1: it includes nothing of the package);
    ``problem`` says why it could not be read (too costly), which makes its includers `Skip`s.
    """

    table: dict[str, Stored]
    names: frozenset[str]
    height: int = 1
    problem: str | None = None


@dataclass
class FileAnalysis:
    gates: list[Gate]
    skips: list[Skip]
    derived: frozenset[str]
    regions: list[Region] = field(default_factory=list)
    steps: int = 0  # what the file's own walk cost (its headers each have their own budget)


def relevant_macros(
    condition_idents: Iterable[str], define_bodies: Iterable[tuple[str, Iterable[str]]]
) -> frozenset[str]:
    """Names a conditional can reach: used in one, or in the body of a macro that is (transitively).

    A macro outside this set can never change the value of any condition in the package, so the
    walkers need not track it; for CUTLASS-sized trees that is most of them.
    """
    bodies: dict[str, set[str]] = {}
    for name, body in define_bodies:
        bodies.setdefault(name, set()).update(body)
    relevant = set(condition_idents)
    frontier = list(relevant)
    while frontier:
        name = frontier.pop()
        for used in bodies.get(name, ()):
            if used not in relevant:
                relevant.add(used)
                frontier.append(used)
    return frozenset(relevant)


class IncludeIndex:
    """Resolves ``#include`` names to files of the same package (relative, then by path suffix)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = set(paths)
        self.by_base: dict[str, list[str]] = {}
        for p in sorted(self.paths):  # sorted: a tie below never depends on the process's hash seed
            self.by_base.setdefault(posixpath.basename(p), []).append(p)

    def resolve(self, including: str, name: str, angle: bool) -> str | None:
        name = name.strip()
        if not name or name.startswith("/"):
            return None
        if not angle:
            candidate = posixpath.normpath(posixpath.join(posixpath.dirname(including), name))
            if candidate in self.paths:
                return candidate
        bucket = self.by_base.get(posixpath.basename(name))
        if not bucket:
            return None
        norm = posixpath.normpath(name)
        suffix = "/" + norm
        matches = [p for p in bucket if p == norm or p.endswith(suffix)]
        if not matches:
            return None
        if len(matches) == 1:
            return matches[0]

        def closeness(p: str) -> tuple[int, int, str]:
            common = posixpath.commonpath([p, including]) if "/" in including else ""
            return (-len(common), len(p), p)

        return min(matches, key=closeness)


def host_regions(
    path: str, text: str, cuda_version: tuple[int, int], flags: Iterable[ArchFlag] = ()
) -> list[Region] | None:
    """The host pass's view of a file on its own (no includes): which lines it compiles.

    Enough to drop device-only code (``#ifdef __CUDA_ARCH__``) and ``#if 0`` from host-code
    analysis; macros from headers stay unknown, so their regions count as maybe-compiled, and
    code under ``flags`` (build flags the package passes for some targets) names the targets whose
    build compiles it (`Region.targets`). None when the conditionals do not balance, or the file
    is beyond `FILE_STEPS`.
    """
    try:
        lexed = lex_directives(text)
    except LexLimit:
        return None
    walker = Walker(
        path,
        lexed,
        cuda_version=cuda_version,
        resolve_include=lambda _including, _name, _angle: None,
        header_export=lambda _path: HeaderExport({}, frozenset()),
        collect_gates=False,
        flags={f.macro: (flag_state(f), f) for f in flags},
    )
    try:
        walker.run()
    except (Unbalanced, OverBudget):
        return None
    return walker.regions


_NOT_COMPILED = [Region(1, False, ())]  # the regions of a file whose gates are not reported


def include_name(text: str) -> tuple[str, bool] | None:
    """The name an #include directive's text gives, and whether in angle brackets; None for a
    computed include (liftgate does not expand those)."""
    text = text.strip()
    if not text or text[0] not in '<"':
        return None
    close = text.find(">" if text[0] == "<" else '"', 1)
    if close < 0:
        return None
    return text[1:close], text[0] == "<"


def _too_deep(path: str, target: str) -> str:
    return (
        f"#include nesting deeper than {MAX_INCLUDE_DEPTH} (through {target}); a compiler stops there "
        "too: its #if gates are not reported"
    )


def flag_state(flag: ArchFlag) -> Stored:
    """A build flag's state per lane: defined where its build gates admit the target, unknown where
    they may, undefined elsewhere; in the host pass unknown (the host code of a build for several
    targets sees the flags of all of them)."""
    where = f"the build passes -D{flag.macro}={flag.value} for this target"
    first = flag.setters[0].flag
    definition = MacroDef(flag.macro, None, False, (flag.value,), first.path, first.line, where)
    entries: list[MacroEntry] = []
    for arch in universe():
        if arch in flag.admitted:
            entries.append(definition)
        elif arch in flag.unknown:
            entries.append(UNKNOWN_MACRO)
        else:
            entries.append(None)
    entries.append(UNKNOWN_MACRO)
    return tuple(entries)


class PackageAnalyzer:
    """Analyses files of one package; caches lexed headers and their macro exports."""

    def __init__(
        self,
        package: str,
        version: str | None,
        read_text: Callable[[str], str | None],
        paths: Iterable[str],
        cuda_version: tuple[int, int],
        relevant: frozenset[str] | None = None,
        defined_anywhere: frozenset[str] | None = None,
        flags: Iterable[ArchFlag] = (),
    ) -> None:
        self.relevant = relevant
        self.defined_anywhere = defined_anywhere
        self.flags = {f.macro: (flag_state(f), f) for f in flags}
        self.package = package
        self.version = version
        self.read_text = read_text
        self.index = IncludeIndex(paths)
        self.cuda_version = cuda_version
        self._lexed: dict[str, LexedFile | None] = {}
        self._exports: dict[str, HeaderExport] = {}
        self._in_progress: dict[str, Walker] = {}
        self._cycle: dict[str, tuple[str, ...]] = {}  # file -> its include cycle's members, sorted
        self._cycle_rank: dict[tuple[str, ...], int] = {}  # cycles in the order found: leaves first
        self._warmed: set[tuple[str, ...]] = set()
        self._settled: set[str] = set()  # files every cycle below which is warm
        self._cycle_open: dict[tuple[str, ...], int] = {}  # members of each cycle on the walk stack
        self._include_edges: dict[str, list[str]] = {}  # file -> the files its #includes name

    def _includes(self, path: str) -> list[str]:
        """The package files ``path`` names in an #include, whatever the conditions around it
        (memoised: the cycle search and the warming walk both follow them)."""
        known = self._include_edges.get(path)
        if known is not None:
            return known
        lexed = self.lexed(path)
        found: list[str] = []
        self._include_edges[path] = found
        if lexed is None:
            return found
        for d in lexed.directives:
            if d.keyword == "include":
                name = include_name(d.text)
                if name is not None:
                    target = self.index.resolve(path, *name)
                    if target is not None:
                        found.append(target)
        return found

    def _find_cycles(self, start: str) -> None:
        """Tarjan's strongly connected components of the include graph reachable from ``start``
        (iterative): each file's cycle, () where it is in none."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        on_stack: list[str] = []
        on: set[str] = set()
        work: list[tuple[str, Iterator[str]]] = [(start, iter(self._includes(start)))]
        index[start] = low[start] = 0
        on_stack.append(start)
        on.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt in self._cycle:
                    continue  # a component found by an earlier search: it cannot reach back
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    on_stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(self._includes(nxt))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = on_stack.pop()
                    on.discard(member)
                    members.append(member)
                    if member == node:
                        break
                looped = len(members) > 1 or node in self._includes(node)
                cycle = tuple(sorted(members)) if looped else ()
                for member in members:
                    self._cycle[member] = cycle
                if cycle:
                    # Tarjan completes a component after every component it reaches: leaves first.
                    self._cycle_rank.setdefault(cycle, len(self._cycle_rank))

    def _warm(self, path: str) -> None:
        """Export, before any is used, the members of every include cycle ``path`` reaches: cycles
        nearer the leaves first (the order Tarjan finds them in), so that warming one never has
        another to warm inside it (no recursion, whatever the depth); each cycle's members in path
        order, then each again as entered at itself."""
        if path in self._settled:
            return
        if path not in self._cycle:
            self._find_cycles(path)
        reached: list[tuple[str, ...]] = []
        todo, seen = [path], {path}
        while todo:  # every file reachable from ``path`` whose cycles are not known to be warm
            node = todo.pop()
            cycle = self._cycle.get(node)
            if cycle and cycle not in self._warmed:
                reached.append(cycle)
            for nxt in self._includes(node):
                if nxt not in seen and nxt not in self._settled:
                    seen.add(nxt)
                    todo.append(nxt)
        # Settled before the cycles are warmed: a file reachable from a cycle reaches only cycles
        # found before it (warm by then) or that cycle itself, so a walk inside warming has nothing
        # left to warm.
        fresh = seen - self._settled
        self._settled |= fresh
        try:
            for cycle in sorted(set(reached), key=self._cycle_rank.__getitem__):
                self._warm_cycle(cycle)
        except BaseException:
            self._settled -= fresh
            raise

    def _warm_cycle(self, cycle: tuple[str, ...]) -> None:
        self._warmed.add(cycle)
        members = [m for m in cycle if self.lexed(m) is not None]
        try:
            for member in members:  # a first approximation: each member as the path order meets it
                if member not in self._exports:
                    self._exports[member] = self._walk_export(member)
            # Then each member as entered at itself, the others as first approximated: what a file
            # that includes it gets (a member walked inside another saw that one part-way).
            entered: dict[str, HeaderExport] = {}
            for member in members:
                first = self._exports.pop(member, None)
                entered[member] = self._walk_export(member)
                if first is not None:
                    self._exports[member] = first
            self._exports.update(entered)
        except BaseException:
            self._warmed.discard(cycle)  # half done: the next file that needs it starts over
            for member in members:
                self._exports.pop(member, None)
            raise

    def lexed(self, path: str) -> LexedFile | None:
        if path not in self._lexed:
            text = self.read_text(path)
            try:
                self._lexed[path] = None if text is None else lex_directives(text)
            except LexLimit:  # read as unreadable: what it defines is unknown to its includers
                self._lexed[path] = None
        return self._lexed[path]

    def export(self, path: str) -> HeaderExport:
        """The macros a header leaves defined, computed from a clean state and memoised.

        An include cycle is resolved the way textual inclusion does it: the header being
        processed contributes what it has defined so far (its guard stops the rest). What a
        header of a cycle exports then depends on where the cycle was entered; so that it never
        depends on which file was analysed first (or in which worker), the members of a cycle
        are exported first, together, in path order, then each again as entered at itself
        (`_warm`). The memoised result is exact for acyclic includes and close for cyclic ones.
        """
        self._warm(path)
        known = self._known_export(path)
        if known is not None:
            return known
        return self._walk_export(path)

    def _walk_export(self, path: str) -> HeaderExport:
        lexed = self.lexed(path)
        assert lexed is not None
        walker = self._walker(path, lexed, collect_gates=False)
        problem = self._drive(path, walker, header=True)
        return self._exports.get(path) or HeaderExport({}, frozenset(), walker.include_height + 1, problem)

    def _known_export(self, path: str) -> HeaderExport | None:
        """A header's export without walking it: memoised, in progress (a cycle), or unreadable."""
        if path in self._exports:
            return self._exports[path]
        if path in self._in_progress:
            partial = self._in_progress[path]
            return HeaderExport(dict(partial.table), frozenset(partial.local_names), 1)
        if self.lexed(path) is None:
            self._exports[path] = HeaderExport({}, frozenset())
            return self._exports[path]
        return None

    def _drive(self, path: str, walker: Walker, header: bool) -> str | None:
        """Walk ``path`` and, depth first, every header it includes: an explicit stack, no recursion.

        A header's export is memoised when its walk is complete. Returns why the file cannot be
        read, if it cannot: its includes nest deeper than MAX_INCLUDE_DEPTH (whether a file is
        within the limit is decided from exact heights, so it never depends on which file was
        analysed first), or a header of it is beyond FILE_STEPS. An unbalanced header exports
        what it has; the file's own `Unbalanced` and `OverBudget` propagate.
        """
        stack: list[tuple[str, Walker, Generator[str, HeaderExport, None]]] = [(path, walker, walker.walk())]
        self._begin(path, walker)
        reply: HeaderExport | None = None
        try:
            while stack:
                top_path, top, walk = stack[-1]
                try:
                    target = walk.send(reply) if reply is not None else next(walk)
                except StopIteration:
                    target = None
                except Unbalanced:
                    if len(stack) == 1 and not header:
                        raise
                    target = None  # a header that does not balance exports what it has
                except OverBudget as exc:
                    if len(stack) == 1 and not header:
                        raise
                    # Memoised: a header this costly makes every file that includes it a Skip.
                    self._exports[top_path] = HeaderExport({}, frozenset(), 1, str(exc))
                    return f"its include {top_path} has {exc}"
                if target is None:  # the file on top is done
                    self._end(top_path)
                    stack.pop()
                    reply = HeaderExport(top.table, frozenset(top.local_names), top.include_height + 1)
                    if stack or header:
                        self._exports[top_path] = reply
                    continue
                depth = len(stack)  # of the header named, below the file at the bottom of the stack
                self._warm(target)
                reply = self._known_export(target)
                cycle = self._cycle.get(target)
                if reply is not None and cycle and self._cycle_open.get(cycle):
                    # Inside its own cycle a member's guard stops most of it: its height as
                    # entered at itself (which walked the others) would count the cycle twice.
                    reply = dataclasses.replace(reply, height=1)
                if reply is not None and reply.problem is not None:
                    return f"its include {target} has {reply.problem}"
                if reply is not None:
                    if depth - 1 + reply.height > MAX_INCLUDE_DEPTH:
                        return _too_deep(path, target)
                    continue
                if depth > MAX_INCLUDE_DEPTH:
                    return _too_deep(path, target)
                lexed = self.lexed(target)
                assert lexed is not None
                header_walker = self._walker(target, lexed, collect_gates=False)
                self._begin(target, header_walker)
                stack.append((target, header_walker, header_walker.walk()))
            return None
        finally:
            for unfinished, _, walk in stack:
                walk.close()
                self._end(unfinished)

    def _begin(self, path: str, walker: Walker) -> None:
        self._in_progress[path] = walker
        cycle = self._cycle.get(path)
        if cycle:
            self._cycle_open[cycle] = self._cycle_open.get(cycle, 0) + 1

    def _end(self, path: str) -> None:
        if self._in_progress.pop(path, None) is not None:
            cycle = self._cycle.get(path)
            if cycle:
                self._cycle_open[cycle] -= 1

    def _walker(self, path: str, lexed: LexedFile, collect_gates: bool) -> Walker:
        return Walker(
            path,
            lexed,
            cuda_version=self.cuda_version,
            resolve_include=self.index.resolve,
            header_export=self.export,
            collect_gates=collect_gates,
            package=self.package,
            version=self.version,
            relevant=self.relevant,
            defined_anywhere=self.defined_anywhere,
            record_regions=collect_gates,
            flags=self.flags,
        )

    def analyze(self, path: str, text: str) -> FileAnalysis:
        try:
            lexed = lex_directives(text)
        except LexLimit as exc:
            reason = f"cannot be lexed ({exc}): its #if gates are not reported"
            return FileAnalysis([], [Skip(path, reason, self.package)], frozenset(), _NOT_COMPILED)
        self._lexed.setdefault(path, lexed)
        self._warm(path)
        walker = self._walker(path, lexed, collect_gates=True)
        try:
            problem = self._drive(path, walker, header=False)
        except Unbalanced as exc:
            return FileAnalysis(
                [],
                [Skip(path, f"unbalanced conditionals: {exc}", self.package)],
                frozenset(),
                steps=walker.steps,
            )
        except OverBudget as exc:
            problem = str(exc)
        if problem is not None:
            return FileAnalysis(
                [], [Skip(path, problem, self.package)], frozenset(), _NOT_COMPILED, walker.steps
            )
        derived = frozenset(
            name
            for name, stored in walker.table.items()
            if isinstance(stored, tuple) and any(isinstance(e, MacroDef) and e.path == path for e in stored)
        )
        return FileAnalysis(walker.gates, walker.skips, derived, walker.regions, walker.steps)
