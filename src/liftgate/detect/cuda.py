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
"""

from __future__ import annotations

import contextlib
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache

from liftgate.arch.core import TOOLKIT_MACROS, ArchSet, universe
from liftgate.detect.cpp_lex import CONDITIONAL_KEYWORDS, LITERALS, Directive, LexedFile, lex_directives
from liftgate.detect.ppexpr import (
    UNKNOWN_MACRO,
    UNKNOWN_TOKEN,
    ExprError,
    Lookup,
    MacroDef,
    MacroEntry,
    MacroExpander,
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
    Location,
    Skip,
    Span,
    Truth,
    gate_id,
)

CUDA_EXTENSIONS = frozenset(
    {".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".inl", ".c", ".hxx", ".inc"}
)

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
    tuple[str, ...], list[tuple[tuple[str, ...], tuple[object, ...], tuple[Vec, frozenset[str], str | None]]]
] = {}
_EVAL_CACHE_LIMIT = 50_000


def clear_caches() -> None:
    """Drop the module-level memo tables (they hold macro states of the last package scanned)."""
    _EVAL_CACHE.clear()
    _KIND_CACHE.clear()


_EVAL_CACHE_VARIANTS = 4  # macro states remembered per condition text


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


@dataclass
class Frame:
    line: int
    parent: Vec
    taken: Vec
    active: Vec
    branches: list[Branch] = field(default_factory=list)
    seen_else: bool = False


class Unbalanced(Exception):
    pass


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
    ) -> None:
        self.path = path
        self.relevant = relevant
        self.defined_anywhere = defined_anywhere
        self.lexed = lexed
        self.cuda_version = cuda_version
        self.resolve_include = resolve_include
        self.header_export = header_export
        self.collect_gates = collect_gates
        self.package = package
        self.version = version
        self.builtins = builtin_macros(cuda_version)
        self.table: dict[str, Stored] = {}
        self.local_names: set[str] = set(
            d.text.split("(", 1)[0].split()[0]
            for d in lexed.directives
            if d.keyword == "define" and d.text.split()
        )
        n = lane_count()
        self.n = n
        self.all_true: Vec = (T,) * n
        self.stack: list[Frame] = []
        self.gates: list[Gate] = []
        self.skips: list[Skip] = []
        self.occurrences: dict[tuple[str, tuple[str, ...]], int] = {}
        # For host-code analysis: after each conditional directive, from which line on the host
        # pass compiles the code (true, false or unknown) and the conditions in force there.
        self.regions: list[Region] = []

    # -- macro state -------------------------------------------------------
    def fallback(self, name: str) -> Stored:
        if name in self.builtins:
            return self.builtins[name]
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
        if kind is T:
            self.table[name] = new
            return
        if kind is F:
            return
        current = self.stored(name)
        if current is new:
            return
        if not isinstance(current, tuple) and not isinstance(new, tuple):
            same = isinstance(current, MacroDef) and current.same_as(new)
            if same:
                return
            entries = [new if a is T else (current if a is F else UNKNOWN_MACRO) for a in active]
        else:
            entries = []
            for lane, a in enumerate(active):
                cur = current[lane] if isinstance(current, tuple) else current
                nxt = new[lane] if isinstance(new, tuple) else new
                if a is T:
                    entries.append(nxt)
                elif a is F:
                    entries.append(cur)
                else:
                    same = cur is nxt or (isinstance(cur, MacroDef) and cur.same_as(nxt))
                    entries.append(cur if same else UNKNOWN_MACRO)
        first = entries[0]
        self.table[name] = first if all(e is first for e in entries) else tuple(entries)

    # -- evaluation --------------------------------------------------------
    def eval_vec(self, tokens: list[str]) -> tuple[Vec, set[str], str | None]:
        """The condition's value in every lane, the names it touched, and an error if it is malformed.

        Lanes whose entries agree on every lane-varying macro an evaluation touched share its
        result, so a condition is evaluated once per distinct macro state, not once per lane.
        """
        key = tuple(tokens)
        for names, objects, cached in _EVAL_CACHE.get(key, ()):
            if all(self.stored(n) is o for n, o in zip(names, objects, strict=True)):
                return cached[0], set(cached[1]), cached[2]
        vec, touched, error = self._eval_vec(tokens)
        names = tuple(sorted(touched))
        if len(_EVAL_CACHE) > _EVAL_CACHE_LIMIT:
            _EVAL_CACHE.clear()
        # The stored objects themselves are kept (not their ids), so identity checks stay sound.
        variants = _EVAL_CACHE.setdefault(key, [])
        if len(variants) >= _EVAL_CACHE_VARIANTS:
            del variants[0]
        variants.append((names, tuple(self.stored(n) for n in names), (vec, frozenset(touched), error)))
        return vec, touched, error

    def _eval_vec(self, tokens: list[str]) -> tuple[Vec, set[str], str | None]:
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
            expander = MacroExpander(lambda nm, lane=lane: self.entry(nm, lane), seen)  # type: ignore[misc]
            expanded: list[str] = []
            try:
                expanded = expander.expand(tokens)
                value = evaluate(expanded)
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
            out.append(U if e is UNKNOWN_MACRO else e is not None)
        return tuple(out)

    # -- walking -----------------------------------------------------------
    def active(self) -> Vec:
        return self.stack[-1].active if self.stack else self.all_true

    def run(self) -> None:
        for d in self.lexed.directives:
            kw = d.keyword
            if kw in CONDITIONAL_KEYWORDS:
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
                name = d.text.split()[0] if d.text.split() else ""
                if name and self._relevant(name):
                    self._set(name, None, self.active())
            elif kw == "include":
                self._include(d.text)
            elif kw == "error" and self.stack:
                self.stack[-1].branches[-1].error = True
                for frame in self.stack[:-1]:
                    frame.branches[-1].nested_error = True
        if self.stack:
            raise Unbalanced(f"#{'if'} at line {self.stack[-1].line} has no matching #endif")

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

    def _condition(self, keyword: str, text: str) -> tuple[Vec, set[str], str | None, list[str]]:
        if keyword in ("ifdef", "ifndef", "elifdef", "elifndef"):
            name = text.split()[0] if text.split() else ""
            if not name:
                return (U,) * self.n, set(), f"#{keyword} without a macro name", []
            vec = self.defined_vec(name)
            if keyword.endswith("ndef"):
                vec = _not(vec)
            return vec, {name}, None, [name]
        try:
            tokens = tokenize(text)
        except ExprError as exc:
            return (U,) * self.n, set(), str(exc), []
        if not tokens:
            return (U,) * self.n, set(), f"#{keyword} with no expression", []
        vec, touched, error = self.eval_vec(tokens)
        return vec, touched, error, tokens

    def _conditional(self, keyword: str, text: str, line: int, end_line: int) -> None:
        vec, touched, error, tokens = self._condition(keyword, text)
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
        frame.taken = _or(frame.taken, vec)
        frame.active = _and(frame.parent, effective)
        branch = Branch(keyword, text, line, end_line, effective)
        branch.build_macros = tuple(sorted(n for n in touched if self.stored(n) is UNKNOWN_MACRO))
        frame.branches.append(branch)
        if error and any(_arch_builtin_name(n) or isinstance(self.stored(n), tuple) for n in touched):
            self.skips.append(
                Skip(f"{self.path}:{line}", f"cannot evaluate #{keyword} {text}: {error}", self.package)
            )
        if self.collect_gates and not _device_uniform(effective) and not _all(frame.parent, F):
            branch.draft = self._draft(keyword, text, tokens, effective, touched)
        self._record_region(end_line + 1)

    def _record_region(self, line: int) -> None:
        conditions = tuple(
            RegionCondition(_branch_text(b), b.line, b.draft.id if b.draft else None, b.build_macros)
            for f in self.stack
            for b in f.branches[-1:]
            if b.draft is not None or b.effective[-1] is not T
        )
        self.regions.append(Region(line, self.active()[-1], conditions))

    def _draft(self, keyword: str, text: str, tokens: list[str], effective: Vec, touched: set[str]) -> _Draft:
        norm = f"#{keyword} " + (" ".join(tokens) if tokens else text)
        enclosing = [b.draft for f in self.stack[:-1] for b in f.branches[-1:] if b.draft is not None]
        scope = tuple(d.norm for d in enclosing)
        key = (norm, scope)
        occurrence = self.occurrences.get(key, 0)
        self.occurrences[key] = occurrence + 1
        admitted, unknown = _vec_to_sets(effective)
        evidence: list[Evidence] = []
        depends: list[str] = []
        for name in sorted(touched):
            value = self.stored(name)
            if name in TOOLKIT_MACROS:
                entry = value[0] if isinstance(value, tuple) else value
                shown = " ".join(entry.body) if isinstance(entry, MacroDef) else "unknown"
                depends.append(
                    f"{name} = {shown} (assumed for CUDA {self.cuda_version[0]}.{self.cuda_version[1]})"
                )
            elif value is UNKNOWN_MACRO and name in _FEATURE_TESTS:
                depends.append(f"{name}(…) (a compiler feature test; its answer depends on the toolchain)")
            elif value is UNKNOWN_MACRO:
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
                if any(e is UNKNOWN_MACRO for e in value):
                    depends.append(
                        f"{name} (defined only under conditions liftgate cannot decide for some targets)"
                    )
        condition = " ".join(text.split())
        return _Draft(
            id=gate_id(GateKind.CUDA_PP, self.package, self.path, norm, scope, occurrence),
            norm=norm,
            condition=condition,
            keyword=keyword,
            admitted=admitted,
            unknown=unknown,
            host=_truth(effective[-1]),
            evidence=tuple(evidence),
            depends_on=tuple(depends),
            enclosing=tuple(d.id for d in enclosing),
        )

    def _else(self, line: int, end_line: int) -> None:
        if not self.stack:
            raise Unbalanced(f"#else at line {line} has no matching #if")
        frame = self.stack[-1]
        if frame.seen_else:
            raise Unbalanced(f"second #else at line {line}")
        frame.seen_else = True
        effective = _not(frame.taken)
        frame.taken = (T,) * self.n
        frame.active = _and(frame.parent, effective)
        previous = " || ".join(_branch_text(b) for b in frame.branches)
        frame.branches.append(Branch("else", f"!({previous})", line, end_line, effective))
        self._record_region(end_line + 1)

    def _endif(self, line: int, offset: int) -> None:
        if not self.stack:
            raise Unbalanced(f"#endif at line {line} has no matching #if")
        frame = self.stack.pop()
        self._record_region(line + 1)
        if not self.collect_gates:
            return
        branches = frame.branches
        for k, branch in enumerate(branches):
            draft = branch.draft
            if draft is None:
                continue
            body_end = (branches[k + 1].line if k + 1 < len(branches) else line) - 1
            then_span = Span(branch.end_line + 1, body_end) if body_end > branch.end_line else None
            later = branches[k + 1 :]
            else_span = Span(later[0].line, line) if later else None
            else_kind = ElseKind.NONE
            for j, other in enumerate(later, start=k + 1):
                stop = branches[j + 1].offset if j + 1 < len(branches) else offset
                kind = self._region_kind(other, stop)
                if kind is ElseKind.ERROR:
                    else_kind = ElseKind.ERROR
                    break
                if kind is ElseKind.FALLBACK:
                    else_kind = ElseKind.FALLBACK
            self.gates.append(
                Gate(
                    id=draft.id,
                    kind=GateKind.CUDA_PP,
                    location=Location(
                        self.package, self.version, self.path, Span(branch.line, branch.end_line)
                    ),
                    condition=draft.condition,
                    admitted=draft.admitted,
                    unknown=draft.unknown,
                    host=draft.host,
                    then_span=then_span,
                    else_span=else_span,
                    else_kind=else_kind,
                    confidence=Confidence.EXACT,
                    evidence=draft.evidence,
                    depends_on=draft.depends_on,
                    directive=f"#{draft.keyword}",
                    enclosing=draft.enclosing,
                )
            )

    def _region_kind(self, branch: Branch, stop: int) -> ElseKind:
        """What a branch's region does: an #error or only static_asserts fail the build (error);
        any other code is another implementation (fallback); nothing at all is ``none``."""
        if branch.error:
            return ElseKind.ERROR
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
            return ElseKind.FALLBACK
        if asserts_only or branch.nested_error:
            return ElseKind.ERROR
        return ElseKind.NONE

    def _context(self) -> str:
        """The architecture conditions in force here, for evidence."""
        return " && ".join(
            _branch_text(b) for f in self.stack for b in f.branches[-1:] if not _device_uniform(b.effective)
        )

    def _define(self, text: str, line: int) -> None:
        active = self.active()
        if _kind(active) is F:
            return
        try:
            macro = parse_define(text, self.path, line, self._context())
        except ExprError:
            return
        self._set(macro.name, macro, active)

    def _include(self, text: str) -> None:
        active = self.active()
        if _kind(active) is F:
            return
        text = text.strip()
        if not text or text[0] not in '<"':
            return  # a computed include; liftgate does not expand those
        close = text.find(">" if text[0] == "<" else '"', 1)
        if close < 0:
            return
        name = text[1:close]
        target = self.resolve_include(self.path, name, text[0] == "<")
        if target is None:
            return
        export = self.header_export(target)
        # Every macro the header (or its includes) could define is now known: where it did not
        # define one, the macro is undefined rather than unknown.
        self.local_names.update(export.names)
        if _kind(active) is T:
            self.table.update(export.table)
            return
        # Included for some targets only: the evidence says under which condition it comes in.
        context = self._context()
        for macro, stored in export.table.items():
            self._set(macro, _recontext(stored, context), active)


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
        if not isinstance(entry, MacroDef) or not context:
            return entry
        joined = f"{context} && {entry.context}" if entry.context else context
        return MacroDef(entry.name, entry.params, entry.variadic, entry.body, entry.path, entry.line, joined)

    return tuple(one(e) for e in stored) if isinstance(stored, tuple) else one(stored)


def _branch_text(branch: Branch) -> str:
    if branch.keyword in ("ifdef", "elifdef"):
        return f"defined({branch.text.split()[0]})"
    if branch.keyword in ("ifndef", "elifndef"):
        return f"!defined({branch.text.split()[0]})"
    if branch.keyword == "else":
        return branch.text
    return f"({' '.join(branch.text.split())})"


@dataclass(frozen=True, slots=True)
class HeaderExport:
    """What including a header does: the macro states it leaves, and every macro it could define."""

    table: dict[str, Stored]
    names: frozenset[str]


@dataclass
class FileAnalysis:
    gates: list[Gate]
    skips: list[Skip]
    derived: frozenset[str]
    regions: list[Region] = field(default_factory=list)


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
        for p in self.paths:
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

        def closeness(p: str) -> tuple[int, int]:
            common = posixpath.commonpath([p, including]) if "/" in including else ""
            return (-len(common), len(p))

        return min(matches, key=closeness)


def host_regions(path: str, text: str, cuda_version: tuple[int, int]) -> list[Region] | None:
    """The host pass's view of a file on its own (no includes): which lines it compiles.

    Enough to drop device-only code (``#ifdef __CUDA_ARCH__``) and ``#if 0`` from host-code
    analysis; macros from headers stay unknown, so their regions count as maybe-compiled.
    None when the conditionals do not balance.
    """
    walker = Walker(
        path,
        lex_directives(text),
        cuda_version=cuda_version,
        resolve_include=lambda _including, _name, _angle: None,
        header_export=lambda _path: HeaderExport({}, frozenset()),
        collect_gates=False,
    )
    try:
        walker.run()
    except Unbalanced:
        return None
    return walker.regions


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
    ) -> None:
        self.relevant = relevant
        self.defined_anywhere = defined_anywhere
        self.package = package
        self.version = version
        self.read_text = read_text
        self.index = IncludeIndex(paths)
        self.cuda_version = cuda_version
        self._lexed: dict[str, LexedFile | None] = {}
        self._exports: dict[str, HeaderExport] = {}
        self._in_progress: dict[str, Walker] = {}

    def lexed(self, path: str) -> LexedFile | None:
        if path not in self._lexed:
            text = self.read_text(path)
            self._lexed[path] = None if text is None else lex_directives(text)
        return self._lexed[path]

    def export(self, path: str) -> HeaderExport:
        """The macros a header leaves defined, computed from a clean state and memoised.

        An include cycle is resolved the way textual inclusion does it: the header being
        processed contributes what it has defined so far (its guard stops the rest). The
        memoised result is therefore exact for acyclic includes and close for cyclic ones.
        """
        if path in self._exports:
            return self._exports[path]
        if path in self._in_progress:
            partial = self._in_progress[path]
            return HeaderExport(dict(partial.table), frozenset(partial.local_names))
        lexed = self.lexed(path)
        if lexed is None:
            self._exports[path] = HeaderExport({}, frozenset())
            return self._exports[path]
        walker = self._walker(path, lexed, collect_gates=False)
        self._in_progress[path] = walker
        try:
            with contextlib.suppress(Unbalanced):
                walker.run()
        finally:
            del self._in_progress[path]
        self._exports[path] = HeaderExport(walker.table, frozenset(walker.local_names))
        return self._exports[path]

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
        )

    def analyze(self, path: str, text: str) -> FileAnalysis:
        lexed = lex_directives(text)
        self._lexed.setdefault(path, lexed)
        walker = self._walker(path, lexed, collect_gates=True)
        self._in_progress[path] = walker
        try:
            walker.run()
        except Unbalanced as exc:
            return FileAnalysis(
                [], [Skip(path, f"unbalanced conditionals: {exc}", self.package)], frozenset()
            )
        finally:
            del self._in_progress[path]
        derived = frozenset(
            name
            for name, stored in walker.table.items()
            if isinstance(stored, tuple) and any(isinstance(e, MacroDef) and e.path == path for e in stored)
        )
        return FileAnalysis(walker.gates, walker.skips, derived, walker.regions)
