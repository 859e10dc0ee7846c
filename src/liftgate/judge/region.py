"""What the code behind a gate uses: hardware features, calls, shared-memory sizes.

A CUDA gate's region is the code its condition guards (its then-lines), as compiled for the
target once the gate itself is lifted: lines under *nested* gates that still exclude the target
are left out, and so are the other branches of nested gates that admit it. Functions and macros
the region calls are followed into the same file and the package headers it includes (bounded
depth), with the same rule applied to their bodies. Features are recognised by the catalog's
evidence (`liftgate.judge.catalog`): PTX mnemonics inside string literals (inline ``asm``),
identifiers (intrinsics, runtime calls, CUTLASS/CuTe names) and patterns.

Each file is read once per analyser: its feature evidence, calls and shared-memory sizes are
indexed by line in one pass (`_FileInfo`), so a region costs a walk over its line numbers.
What a region keeps is bounded (a few examples per feature), so deep call graphs over large
header libraries such as CUTLASS cannot grow without limit.
"""

from __future__ import annotations

import ast
import bisect
import copy
import itertools
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache

from liftgate.arch.core import Arch
from liftgate.detect.cpp_lex import LITERALS, LexLimit, lex_directives, strip_comments
from liftgate.detect.cpp_syntax import find_functions, tokenize
from liftgate.detect.cuda import IncludeIndex
from liftgate.detect.py_binding import parse_python_expression
from liftgate.judge.catalog import Feature, load_catalog
from liftgate.model import Gate, GateKind, Hazard, Status

MAX_DEPTH = 12  # nested calls followed from a region (each function is analysed once, then reused)
MAX_DEPENDENTS = 400  # regions guarded by macros a region defines, per region
MAX_CLOSURE = 80  # header files searched for definitions, per file
MAX_EXAMPLES = 3  # places kept per feature, per region
MAX_SMEM = 8  # shared-memory sizes kept per region

_IDENT = re.compile(r"[A-Za-z_]\w*")
_NEWLINE = re.compile(r"\n")
_PY_COMMENT_OR_STRING = re.compile(r"(\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*')|#[^\n]*")
_WORD_CHAR = re.compile(r"\w")
# ``name(`` and ``ns::name<T>(`` with no word, ``.`` or ``>`` before: a call or a declaration.
# The pattern opens with a character class, so the regex engine skips to where one can start
# (a look-behind first made it try every position), and its runs are possessive: giving back part
# of a name, of the blanks or of a template argument list can never lead to a match, since what
# must follow (``::``, ``<``, ``(``) is none of those. It finds what
# ``(?<![\w.>])((?:[A-Za-z_]\w*::)*[A-Za-z_]\w*)\s*(?:<…>)?\s*\(`` finds, three times faster
# (tests/test_judge_text_index.py holds it to that pattern).
_CALL = re.compile(
    r"([A-Za-z_](?<![\w.>].)\w*+(?:::[A-Za-z_]\w*+)*+)"
    r"\s*+(?:<[^<>();{}]*+(?:<[^<>();{}]*+>[^<>();{}]*+)*+>)?\s*+\("
)
_SMEM_ATTR = re.compile(
    r"cudaFuncSetAttribute\s*\([^;]*?cudaFuncAttributeMaxDynamicSharedMemorySize\s*,\s*([^;]*?)\)\s*;", re.S
)
_SHARED_ARRAY = re.compile(
    r"__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w:<>, ]*?)\s+\w+\s*((?:\[\s*[\w\s*+()]+\s*\])+)"
)
_BUILTIN_TYPE = re.compile(
    r"(?:u?char|u?short|u?int|u?long|u?longlong|float|double|half|bfloat16|__half|__nv_bfloat16)[1-4]?"
    r"|(?:unsigned|signed|bool|size_t|u?int(?:8|16|32|64)_t|nv_bfloat16[2]?|half2|nv_half2?)"
)
# CUDA runtime and driver API calls (host side, on every arch) and launch-configuration types.
_HOST_API = re.compile(r"(?:cuda|cu|cublas|cublasLt|nvrtc|cudnn)[A-Z]\w*|dim3|operator|abort|exit")
_VECTOR_CTOR = re.compile(r"make_(?:u?char|u?short|u?int|u?long|u?longlong|float|double|half|bfloat16)[1-4]?")

# Calls that exist on every target liftgate knows (CUDA device builtins, math, C++ casts and
# keywords that look like calls): they never make a verdict unknown.
PORTABLE = frozenset(
    """
    if for while switch return sizeof alignof decltype static_assert defined constexpr typeid
    static_cast reinterpret_cast const_cast dynamic_cast noexcept alignas catch throw new delete
    __syncthreads __syncwarp __syncthreads_count __syncthreads_and __syncthreads_or __threadfence
    __threadfence_block __threadfence_system __nanosleep __trap __brkpt __activemask __launch_bounds__
    __shfl_sync __shfl_xor_sync __shfl_up_sync __shfl_down_sync __ballot_sync __any_sync __all_sync
    __match_any_sync __match_all_sync __popc __popcll __clz __clzll __ffs __ffsll __brev __byte_perm
    __funnelshift_l __funnelshift_r __mul24 __umul24 __mulhi __umulhi __sad __usad __fns __align__
    atomicAdd atomicSub atomicExch atomicMin atomicMax atomicInc atomicDec atomicCAS atomicAnd atomicOr
    atomicXor __ldg __ldca __ldcg __ldcs __ldlu __ldcv __stwb __stcg __stcs __stwt __isGlobal __isShared
    __cvta_generic_to_shared __cvta_generic_to_global __cvta_shared_to_generic
    __float2half __half2float __float2half_rn __floats2half2_rn __half22float2 __float22half2_rn
    __float2bfloat16 __bfloat162float __float2bfloat16_rn __floats2bfloat162_rn __bfloat1622float2
    __hadd __hsub __hmul __hfma __hadd2 __hmul2 __hfma2 __hmax __hmin __hmax2 __hmin2 __habs __hneg
    __low2float __high2float __low2half __high2half __halves2half2 __half2half2 __float2int_rn
    __int2float_rn __float_as_int __int_as_float __float_as_uint __uint_as_float __double_as_longlong
    __expf __exp10f __logf __log2f __sinf __cosf __tanf __powf __fdividef __frcp_rn __fsqrt_rn __saturatef
    expf exp2f exp logf log2f log sqrtf sqrt rsqrtf rsqrt powf pow fabsf fabs abs fmaxf fminf fmax fmin
    max min floorf ceilf roundf truncf tanhf tanh erff erf sinf cosf fmaf fma isnan isinf isfinite
    copysignf signbit ldexpf frexpf modff __float2uint_rn __uint2float_rn __ull2float_rn
    printf fprintf snprintf sprintf puts fputs fflush getenv strcmp strncmp strlen atoi exit abort
    assert memcpy memset malloc free asm volatile void
    """.split()  # noqa: SIM905 - a word list reads better than 200 quoted strings
)
_PORTABLE_NAMESPACES = ("std::", "cuda::std::", "::std::", "cooperative_groups::", "cg::")


@dataclass(frozen=True, slots=True)
class Use:
    """A feature used by a region: where, what matched, and through which call (if any)."""

    feature: str
    path: str
    line: int
    text: str
    via: str | None = None


@dataclass
class RegionFacts:
    """What a region uses. ``uses`` keeps up to MAX_EXAMPLES places per feature; ``counts`` all."""

    uses: dict[str, list[Use]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    unresolved: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> first use (path, line)
    deeper: dict[str, tuple[str, int]] = field(default_factory=dict)  # defined, but past MAX_DEPTH
    followed: list[str] = field(default_factory=list)
    defines: list[str] = field(default_factory=list)  # macros the region defines
    hazards: list[Hazard] = field(default_factory=list)  # found while analysing (e.g. in built sources)
    smem: list[tuple[int, str, int, str]] = field(default_factory=list)  # bytes, path, line, text
    code_lines: int = 0

    def add(self, use: Use, count: int = 1) -> None:
        kept = self.uses.setdefault(use.feature, [])
        if len(kept) < MAX_EXAMPLES and use not in kept:
            kept.append(use)
        self.counts[use.feature] = self.counts.get(use.feature, 0) + count

    def merge(self, other: RegionFacts, via: str | None = None) -> None:
        for fid, kept in other.uses.items():
            for i, use in enumerate(kept):
                labelled = (
                    use if use.via or via is None else Use(use.feature, use.path, use.line, use.text, via)
                )
                self.add(labelled, other.counts.get(fid, 1) if i == 0 else 0)
        for name, where in other.unresolved.items():
            self.unresolved.setdefault(name, where)
        for name, where in other.deeper.items():
            self.deeper.setdefault(name, where)
        for hazard in other.hazards:
            if hazard not in self.hazards:
                self.hazards.append(hazard)
        for entry in other.smem:
            if len(self.smem) < MAX_SMEM and entry not in self.smem:
                self.smem.append(entry)

    def all_uses(self) -> list[Use]:
        return [u for kept in self.uses.values() for u in kept]


FileReader = Callable[[str], "str | None"]


class _Matcher:
    """The catalog's evidence compiled for whole-file search (`match_evidence` per line is the spec)."""

    def __init__(self, catalog: Iterable[Feature]) -> None:
        self.catalog = list(catalog)
        self.exact: dict[str, list[str]] = {}
        self.prefixes: list[tuple[str, str]] = []
        for f in self.catalog:
            for name in f.identifiers:
                if name.endswith(("_", "x")):
                    self.prefixes.append((name, f.id))
                else:
                    self.exact.setdefault(name, []).append(f.id)
        self.prefix_tuple = tuple(p for p, _ in self.prefixes)
        self.patterns = [(_anchor(p), re.compile(p), f.id) for f in self.catalog for p in f.patterns]
        self.ptx_prefixes = [(p, f.id) for f in self.catalog for p in f.ptx]
        ptx_alts = sorted({p for p, _ in self.ptx_prefixes}, key=len, reverse=True)
        # Longest prefix first; shorter prefixes at the same place are found by `ptx_features_of`.
        self.ptx = (
            re.compile(r"(?<![\w.])(?:" + "|".join(map(re.escape, ptx_alts)) + r")(?!\w)")
            if ptx_alts
            else None
        )
        self.ptx_patterns = [(_anchor(p), re.compile(p), f.id) for f in self.catalog for p in f.ptx_patterns]
        self._ptx_memo: dict[str, tuple[str, ...]] = {}  # `ptx_features_of` by matched text

    def features_of(self, name: str) -> list[str]:
        found = list(self.exact.get(name, ()))
        found.extend(fid for prefix, fid in self.prefixes if name.startswith(prefix) and fid not in found)
        return found

    def asm_hits(self, asm: str) -> list[tuple[str, str, int]]:
        """(feature, matched text, offset) for PTX evidence in ``asm`` (string literals, one per line)."""
        out: list[tuple[str, str, int]] = []
        if self.ptx is not None:
            memo = self._ptx_memo
            for m in self.ptx.finditer(asm):
                text = m.group(0)
                fids = memo.get(text)
                if fids is None:  # the same few mnemonics, over and over: each read once
                    fids = memo[text] = tuple(self.ptx_features_of(text))
                for fid in fids:
                    out.append((fid, text, m.start()))
        for anchor, pattern, fid in self.ptx_patterns:
            if anchor is None or anchor in asm:
                for m in pattern.finditer(asm):
                    out.append((fid, m.group(0), m.start()))
        return out

    def ptx_features_of(self, text: str) -> list[str]:
        """Features with a PTX prefix that ``text`` (a longest match) starts at a mnemonic boundary."""
        found: list[str] = []
        for prefix, fid in self.ptx_prefixes:
            if (
                text.startswith(prefix)
                and (len(text) == len(prefix) or not _WORD_CHAR.match(text, len(prefix)))
                and fid not in found
            ):
                found.append(fid)
        return found


def _anchor(pattern: str) -> str | None:
    """A substring every match of ``pattern`` contains (its longest run of literal characters),
    or None when there is none worth testing (top-level alternation, runs shorter than 3)."""
    depth = 0
    runs: list[str] = []
    run = ""
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt.isalnum():  # \b, \w, \d ...: a class or an assertion, not a literal
                runs.append(run)
                run = ""
            elif depth == 0:
                run += nxt
            i += 2
            continue
        if ch in "?*{" and run:  # the previous character is optional
            run = run[:-1]
        if ch == "|" and depth == 0:
            return None
        if ch in "([":
            if depth == 0:
                runs.append(run)
                run = ""
            depth += 1
            if ch == "[":  # skip the class body
                close = pattern.find("]", i + 2)
                i = close + 1 if close > 0 else len(pattern)
                depth -= 1
                continue
        elif ch == ")":
            depth -= 1
        elif depth == 0 and (ch.isalnum() or ch in "_:%-"):
            run += ch
        elif depth == 0:
            runs.append(run)
            run = ""
        i += 1
    runs.append(run)
    best = max(runs, key=len)
    return best if len(best) >= 3 else None


@cache
def feature_matcher() -> _Matcher:
    """The catalog's feature patterns, compiled once."""
    return _Matcher(load_catalog())


class _FileInfo:
    """One file, indexed by line: evidence, calls, shared-memory sizes; definitions by name.

    Directives (includes, macro definitions) are read at once, since include closures need
    them; function definitions and the evidence index are built on first use, so headers that
    are only walked through for their includes cost a directive scan.
    """

    def __init__(self, text: str, path: str, index: IncludeIndex) -> None:
        self.path = path
        self.text = text
        self.python = path.endswith((".py", ".pyi"))
        lexed = lex_directives("" if self.python else text)
        self.clean = (
            _strip_python_comments(text) if self.python else strip_comments(text.replace("\x01", " "))
        )
        self.lines = self.clean.split("\n")
        self._starts = [0] + [m.end() for m in _NEWLINE.finditer(self.clean)]
        self.directive_lines: set[int] = set()
        self.macros: dict[str, tuple[int, int]] = {}
        self.defines_at: dict[int, str] = {}
        self.includes: list[str] = []
        for d in lexed.directives:
            self.directive_lines.update(range(d.line, d.end_line + 1))
            if d.keyword == "define" and d.text:
                m = _IDENT.match(d.text)
                if m:
                    self.macros.setdefault(m.group(0), (d.line, d.end_line))
                    self.defines_at[d.line] = m.group(0)
            elif d.keyword == "include":
                inc = d.text.strip()
                if inc[:1] in '<"':
                    close = inc.find(">" if inc[0] == "<" else '"', 1)
                    if close > 0:
                        resolved = index.resolve(path, inc[1:close], inc[0] == "<")
                        if resolved:
                            self.includes.append(resolved)
        self._functions: dict[str, list[tuple[int, int]]] | None = None
        self._indexed = False
        self._hits: dict[int, list[tuple[str, str]]] = {}
        self._calls: dict[int, list[str]] = {}
        self._smem: dict[int, list[tuple[int, str]]] = {}

    @property
    def functions(self) -> dict[str, list[tuple[int, int]]]:
        if self._functions is None:
            self._functions = {}
            if not self.python:
                try:
                    for fdef in find_functions(tokenize(self.text), self.path):
                        if fdef.body:
                            self._functions.setdefault(fdef.name, []).append(
                                (fdef.body[0].line, fdef.body[-1].line)
                            )
                except RecursionError:
                    pass
        return self._functions

    def defines(self, name: str) -> bool:
        """Whether the file may define ``name`` (a cheap test before parsing its functions)."""
        return name in self.macros or name in self.text

    @property
    def hits(self) -> dict[int, list[tuple[str, str]]]:
        self._index()
        return self._hits

    @property
    def calls(self) -> dict[int, list[str]]:
        self._index()
        return self._calls

    @property
    def smem(self) -> dict[int, list[tuple[int, str]]]:
        self._index()
        return self._smem

    def _index(self) -> None:
        """Evidence and calls by line, from one pass over the file."""
        if self._indexed:
            return
        self._indexed = True
        matcher = feature_matcher()
        clean = self.clean
        # One pass over the literals: the string literals, and the code with every literal blanked
        # between its quotes (``"…"`` and ``'…'`` both become ``"  "``; an unclosed one a blank).
        literals: list[re.Match[str]] = []
        pieces: list[str] = []
        last = 0
        for m in LITERALS.finditer(clean):
            start, end = m.span()
            pieces.append(clean[last:start])
            pieces.append('"' + " " * (end - start - 2) + '"' if end - start >= 2 else " ")
            last = end
            if clean[start] == '"':
                literals.append(m)
        pieces.append(clean[last:])
        code = "".join(pieces)
        if literals:
            # All string literals joined (one per line of `asm_text`), searched at once.
            asm_text = "\n".join(m.group(0) for m in literals)
            offsets = list(itertools.accumulate((len(m.group(0)) + 1 for m in literals[:-1]), initial=0))
            for fid, hit, at in matcher.asm_hits(asm_text):
                self._hit(self.line_of(literals[bisect.bisect_right(offsets, at) - 1].start()), fid, hit)
        exact, prefixes = matcher.exact, matcher.prefix_tuple
        for m in _IDENT.finditer(code):
            name = m.group(0)
            if name in exact or name.startswith(prefixes):
                line = self.line_of(m.start())
                for fid in matcher.features_of(name):
                    self._hit(line, fid, name)
        for anchor, pattern, fid in matcher.patterns:
            if anchor is None or anchor in code:
                for m in pattern.finditer(code):
                    self._hit(self.line_of(m.start()), fid, m.group(0))
        for m in _CALL.finditer(code):
            if not _declaration(code, m.start()):
                self._calls.setdefault(self.line_of(m.start()), []).append(m.group(1))
        if "cudaFuncSetAttribute" in code or "__shared__" in code:
            self._shared_memory(code)

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset)

    def _hit(self, line: int, fid: str, text: str) -> None:
        found = self._hits.setdefault(line, [])
        if all(f != fid for f, _ in found):
            found.append((fid, text))

    def _shared_memory(self, code: str) -> None:
        for m in _SMEM_ATTR.finditer(code):
            size = _constant(m.group(1))
            if size is not None:
                self._smem.setdefault(self.line_of(m.start()), []).append(
                    (size, " ".join(m.group(0).split()))
                )
        for m in _SHARED_ARRAY.finditer(code):
            elem = _ELEMENT_SIZES.get(m.group(1).strip().split("::")[-1])
            dims = [_constant(d) for d in re.findall(r"\[\s*([^\]]+)\]", m.group(2))]
            if elem and dims and all(d is not None for d in dims):
                total = elem
                for d in dims:
                    total *= d  # type: ignore[operator]
                self._smem.setdefault(self.line_of(m.start()), []).append(
                    (total, " ".join(m.group(0).split()))
                )


class FileStore:
    """One package's files as the judge reads them, shared by the analysers of every target."""

    def __init__(self, package_paths: Iterable[str], read: FileReader) -> None:
        self.read = read
        self.index = IncludeIndex(package_paths)
        self._files: dict[str, _FileInfo | None] = {}
        self._closure: dict[str, tuple[list[str], bool]] = {}
        self._definitions: dict[tuple[str, str], list[tuple[str, int, int]]] = {}

    def file(self, path: str) -> _FileInfo | None:
        if path not in self._files:
            text = self.read(path)
            info: _FileInfo | None = None
            if text is not None:
                try:
                    info = _FileInfo(text, path, self.index)
                except (RecursionError, LexLimit):  # a line the lexer gives up on (see cpp_lex)
                    info = None
            self._files[path] = info
        return self._files[path]

    def closure(self, path: str) -> list[str]:
        """The file and the package headers it includes, breadth first, at most MAX_CLOSURE files."""
        return self._closure_of(path)[0]

    def closure_truncated(self, path: str) -> bool:
        """Whether `closure` stopped at MAX_CLOSURE files with includes left unread."""
        return self._closure_of(path)[1]

    def _closure_of(self, path: str) -> tuple[list[str], bool]:
        if path in self._closure:
            return self._closure[path]
        order = [path]
        seen = {path}
        k = 0
        truncated = False
        while k < len(order):
            info = self.file(order[k])
            k += 1
            if info is None:
                continue
            for inc in info.includes:
                if inc not in seen:
                    if len(order) >= MAX_CLOSURE:
                        truncated = True
                        break
                    seen.add(inc)
                    order.append(inc)
        self._closure[path] = (order, truncated)
        return order, truncated

    def definitions(self, path: str, name: str) -> list[tuple[str, int, int]]:
        """Where ``name`` is defined (function bodies and macros) in ``path`` and its includes."""
        key = (path, name)
        if key in self._definitions:
            return self._definitions[key]
        found: list[tuple[str, int, int]] = []
        for p in self.closure(path):
            info = self.file(p)
            if info is None or not info.defines(name):
                continue
            for first, last in info.functions.get(name, ()):
                found.append((p, first, last))
            if name in info.macros:
                first, last = info.macros[name]
                found.append((p, first, last))
            if len(found) >= 8:
                break
        self._definitions[key] = found
        return found


class RegionAnalyzer:
    """Analyses regions of one package's files for one target; caches what it reads."""

    def __init__(self, store: FileStore, gates: Iterable[Gate], target: Arch) -> None:
        self.store = store
        self.target = target
        self._done: dict[tuple[str, int, int, bool], RegionFacts] = {}
        # Nested gates per file, to leave out what stays compiled out for the target.
        self._gates: dict[str, list[Gate]] = {}
        for gate in gates:
            if gate.kind is GateKind.CUDA_PP:
                self._gates.setdefault(gate.location.path, []).append(gate)
        self._feature_names = _feature_identifiers()
        self._by_macro: dict[str, list[Gate]] = {}
        self._by_macro_built: list[bool] = []  # shared with fresh() twins, like _by_macro

    def fresh(self) -> RegionAnalyzer:
        """An analyser of the same files, gates and target with nothing analysed yet: what it reads
        and indexes (pure functions of the files and gates) is shared, the regions analysed are
        not. A region's facts depend on the calls that led to it (the depth cut, a cycle's entry),
        so the judge analyses each run of gates with a fresh one: a verdict then depends on its
        run only, never on which runs a process judged before (`liftgate.judge.verdict`)."""
        twin = copy.copy(self)
        twin._done = {}
        return twin

    def file(self, path: str) -> _FileInfo | None:
        return self.store.file(path)

    def closure(self, path: str) -> list[str]:
        return self.store.closure(path)

    def definitions(self, path: str, name: str) -> list[tuple[str, int, int]]:
        return self.store.definitions(path, name)

    def nested_gates(self, path: str, start: int, end: int) -> list[Gate]:
        """CUDA gates that start inside ``start..end`` of ``path``."""
        return [g for g in self._gates.get(path, ()) if start <= g.location.span.start <= end]

    def macro_dependents(self, names: Iterable[str], exclude: str) -> list[tuple[str, Gate, int, int]]:
        """Regions guarded by gates whose condition tests one of ``names`` (a derived macro).

        Returns (macro, gate, first, last) for the branch the macro being defined selects: the
        then-region of ``#if defined(M)``/``#ifdef M``, the else-region of ``#ifndef M``/``!defined(M)``.
        """
        if not self._by_macro_built:  # filled in place: every fresh() twin shares it
            for gates in self._gates.values():
                for g in gates:
                    for ident in set(_IDENT.findall(g.condition)):
                        self._by_macro.setdefault(ident, []).append(g)
            self._by_macro_built.append(True)
        out: list[tuple[str, Gate, int, int]] = []
        for name in names:
            negated = re.compile(r"!\s*defined\s*\(?\s*" + re.escape(name) + r"\b")
            for g in self._by_macro.get(name, ()):
                if g.id == exclude:
                    continue
                span = g.else_span if g.directive == "#ifndef" or negated.search(g.condition) else g.then_span
                if span is not None:
                    out.append((name, g, span.start, span.end))
                if len(out) >= MAX_DEPENDENTS:
                    return out
        return out

    # -- regions -----------------------------------------------------------------------------
    def compiled_lines(self, path: str, start: int, end: int) -> list[int]:
        """Lines ``start..end`` of ``path`` that the target compiles once the enclosing gate is lifted."""
        dropped: set[int] = set()
        for g in self.nested_gates(path, start, end):
            status = g.status(self.target)
            if status is Status.EXCLUDED and g.then_span is not None:
                dropped.update(range(g.then_span.start, g.then_span.end + 1))
            elif status is Status.ADMITTED and g.else_span is not None:
                dropped.update(range(g.else_span.start, g.else_span.end + 1))
        return [n for n in range(start, end + 1) if n not in dropped]

    def analyze(self, path: str, start: int, end: int, depth: int = 0, follow: bool = True) -> RegionFacts:
        """What lines ``start..end`` of ``path`` use, following calls (unless ``follow`` is false:
        for whole translation units, whose headers are read anyway)."""
        key = (path, start, end, follow)
        if key in self._done:
            return self._done[key]
        facts = RegionFacts()
        self._done[key] = facts  # recursion guard: a cycle sees the partial facts
        info = self.file(path)
        if info is None:
            facts.unresolved[f"{path} (unreadable)"] = (path, start)
            return facts
        last = min(end, len(info.lines))
        numbers = self.compiled_lines(path, start, last)
        if not numbers:
            return facts  # (the file's indexes are built on first use: not for an empty region)
        # The file's indexes, read once for the region rather than once per line (a property each).
        hits, smem, calls = info.hits, info.smem, info.calls
        defines_at, directive_lines, lines = info.defines_at, info.directive_lines, info.lines
        for number in numbers:
            if number in defines_at and defines_at[number] not in facts.defines:
                facts.defines.append(defines_at[number])
            if number in directive_lines and number not in hits:
                continue
            if lines[number - 1].strip():
                facts.code_lines += 1
            for fid, text in hits.get(number, ()):
                facts.add(Use(fid, path, number, text))
            for size, text in smem.get(number, ()):
                if len(facts.smem) < MAX_SMEM:
                    facts.smem.append((size, path, number, text))
            if follow and number not in directive_lines:
                for full in calls.get(number, ()):
                    self._follow(full, path, number, depth, facts)
        return facts

    def _follow(self, full: str, path: str, number: int, depth: int, facts: RegionFacts) -> None:
        name = full.rsplit("::", 1)[-1]
        if is_portable(full) or name in self._feature_names or name.endswith(("_", "_t")):
            return  # portable, evidence already, or a member initialiser / type (`ptr_(p)`, `value_t(x)`)
        found = self.definitions(path, name)
        if not found:
            if not name[:1].isupper():  # CamelCase: a type being constructed, not a call
                facts.unresolved.setdefault(full, (path, number))
            return
        if depth >= MAX_DEPTH:
            facts.deeper.setdefault(name, (path, number))
            return
        if name not in facts.followed:
            facts.followed.append(name)
        for def_path, first, last in found:
            facts.merge(self.analyze(def_path, first, last, depth + 1), via=name)


_ELEMENT_SIZES = {
    "char": 1, "int8_t": 1, "uint8_t": 1, "__nv_fp8_e4m3": 1, "__nv_fp8_e5m2": 1, "half": 2, "__half": 2,
    "nv_bfloat16": 2, "__nv_bfloat16": 2, "short": 2, "int16_t": 2, "uint16_t": 2, "float": 4, "int": 4,
    "int32_t": 4, "uint32_t": 4, "unsigned": 4, "double": 8, "int64_t": 8, "uint64_t": 8, "float2": 8,
    "half2": 4, "float4": 16, "int4": 16, "uint4": 16,
}  # fmt: skip


def _constant(text: str) -> int | None:
    """A size written as a constant expression of integer literals: ``48 * 1024``, ``(227 << 10)``."""
    text = re.sub(r"(?<=\d)[uUlL]+\b", "", text.strip())
    try:
        tree = parse_python_expression(text)
    except (SyntaxError, ValueError):
        return None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.LShift)):
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.LShift):
                if not 0 <= right < 40:
                    raise ValueError(text)
                return left << right
            return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
        raise ValueError(text)

    try:
        result = value(tree)
    except (ValueError, KeyError):
        return None
    return result if 0 < result < 1 << 40 else None


_NOT_A_TYPE = frozenset(
    {"return", "else", "case", "throw", "new", "do", "co_return", "co_await", "typename", "template"}
)
_WORD_START = frozenset(string.ascii_letters + "_")


def _declaration(code: str, start: int) -> bool:
    r"""Whether ``name(`` at ``start`` declares a variable (``dim3 grid(n)``) rather than calling:
    a word (not a keyword) ends the 64 characters before it, blanks and one line break aside.

    What ``re.search(r"([A-Za-z_]\w*)[ \t]*$")`` over ``code[start - 64:start]`` finds, read backwards from
    ``start`` instead of tried at each of the 64 places (a test holds it to the search):
    ``$`` matches at the end or before a final line break, so one ``\n`` and then blanks are
    passed over; the word is the run of word characters there, from its first ASCII letter or
    ``_`` (where ``[A-Za-z_]\w*`` starts in that run)."""
    lo = max(0, start - 64)
    end = start
    if end > lo and code[end - 1] == "\n":
        end -= 1
    while end > lo and code[end - 1] in " \t":
        end -= 1
    first = end
    while first > lo and (code[first - 1].isalnum() or code[first - 1] == "_"):
        first -= 1
    while first < end and code[first] not in _WORD_START:
        first += 1
    return first < end and code[first:end] not in _NOT_A_TYPE


def _strip_python_comments(text: str) -> str:
    """Python source with ``#`` comments blanked (lines and offsets kept). Quotes on one line are
    respected; a ``#`` line inside a triple-quoted string is blanked too, which only drops prose."""

    def blank(m: re.Match[str]) -> str:
        return m.group(0) if m.group(1) else " " * len(m.group(0))

    return _PY_COMMENT_OR_STRING.sub(blank, text) if "#" in text else text


def is_portable(full: str) -> bool:
    """Whether a call needs nothing from the target beyond what every known arch has.

    CUDA builtins and math, the toolkit's intrinsics (``__``-prefixed names: they are not in the
    package, and the catalog names the ones tied to hardware), standard-library names, vector
    constructors and functional casts to built-in types.
    """
    name = full.rsplit("::", 1)[-1]
    return (
        name in PORTABLE
        or name.startswith("__")
        or bool(_HOST_API.fullmatch(name))
        or full.startswith(_PORTABLE_NAMESPACES)
        or bool(_VECTOR_CTOR.fullmatch(name))
        or bool(_BUILTIN_TYPE.fullmatch(name))
    )


@cache
def _feature_identifiers() -> frozenset[str]:
    return frozenset(i for f in load_catalog() for i in f.identifiers)


def shared_memory_limit(arch: Arch) -> int | None:
    """The target's opt-in shared memory per block in bytes (archs.json), or None if unknown."""
    from liftgate.arch.core import arch_data

    cap = arch_data().capability(arch.cc)
    value = cap.limits.get("smem_per_block_optin") if cap is not None else None
    return int(value) if value else None
