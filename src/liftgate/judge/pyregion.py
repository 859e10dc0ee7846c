"""Best-effort analysis of a Python gate's branch: what it calls, and which JIT modules it reaches.

A py-runtime gate guards Python code (``if is_sm100a_supported(dev): return gen_x_module()...``).
What that code needs on the GPU is decided elsewhere: in the CUDA sources of the JIT modules it
builds, in precompiled kernels, or in a DSL. This module reads the branch with `ast`, follows
calls into functions of the same file (bounded depth) and records:

* catalog evidence written in the Python itself (``cute.nvgpu.tcgen05``, ``KernelTmaWarpSpecialized``),
* calls to JIT module generators, i.e. functions that hold a py-build gate whose sources are
  known (``gen_trtllm_comm_module`` builds ``trtllm_allreduce.cu``): their sources are what the
  branch compiles, and the build gate must be lifted too.

Everything here is labelled best effort by the verdicts that use it: Python is dynamic, and a call
through a registry or a string is not seen.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from liftgate.detect.py_binding import parse_python, walk

MAX_DEPTH = 2


@dataclass
class PyFunctions:
    """A Python file's functions (module level and methods) by name, with their line spans."""

    spans: dict[str, list[tuple[int, int]]]
    calls: list[tuple[int, str]]  # (line, name called), sorted by line

    @classmethod
    def parse(cls, text: str) -> PyFunctions:
        try:
            tree = parse_python(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return cls({}, [])
        spans: dict[str, list[tuple[int, int]]] = {}
        calls: set[tuple[int, str]] = set()
        for node in walk(tree):  # breadth first, as ast.walk: a name's spans keep that order
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                spans.setdefault(node.name, []).append((node.lineno, node.end_lineno or node.lineno))
            elif isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name):
                    calls.add((node.lineno, func.id))
                elif isinstance(func, ast.Attribute):
                    calls.add((node.lineno, func.attr))
        return cls(spans, sorted(calls))

    def enclosing(self, line: int) -> str | None:
        """The innermost function whose span holds ``line``."""
        best: tuple[int, str] | None = None
        for name, spans in self.spans.items():
            for first, last in spans:
                if first <= line <= last and (best is None or first > best[0]):
                    best = (first, name)
        return best[1] if best else None

    def calls_in(self, first: int, last: int) -> list[tuple[str, int]]:
        """Names called between lines ``first`` and ``last`` (``f()``, ``mod.f()`` as ``f``)."""
        lo = bisect.bisect_left(self.calls, (first, ""))
        out = []
        for line, name in self.calls[lo:]:
            if line > last:
                break
            out.append((name, line))
        return out


@dataclass
class BranchFacts:
    calls: list[str] = field(default_factory=list)  # every name called, in order, deduplicated
    generators: dict[str, int] = field(default_factory=dict)  # generator name -> line of the call
    followed: list[str] = field(default_factory=list)


Resolver = Callable[[str], "list[tuple[PyFunctions, int, int]]"]


def branch_calls(
    functions: PyFunctions,
    first: int,
    last: int,
    generator_names: set[str],
    resolve: Resolver | None = None,
) -> BranchFacts:
    """Calls made by lines ``first..last``, following functions up to MAX_DEPTH.

    Functions of the same file are followed first; ``resolve`` finds a name defined elsewhere in
    the package (by ``def name(``; ambiguous names give every definition).
    """
    facts = BranchFacts()
    _follow_calls(functions, first, last, 0, facts, set(), generator_names, resolve)
    return facts


def _follow_calls(
    funcs: PyFunctions,
    lo: int,
    hi: int,
    level: int,
    facts: BranchFacts,
    seen: set[tuple[int, int, int]],
    generator_names: set[str],
    resolve: Resolver | None,
) -> None:
    """`branch_calls`' walk of lines ``lo..hi`` of ``funcs`` at depth ``level``. A function of the
    module, not a closure that calls itself: such a closure is a reference cycle, and it held the
    region analyser (through ``resolve``) until the cyclic collector ran."""
    for name, line in funcs.calls_in(lo, hi):
        if name not in facts.calls:
            facts.calls.append(name)
        if name in generator_names:
            facts.generators.setdefault(name, line)
            continue
        if level >= MAX_DEPTH:
            continue
        targets = [(funcs, a, b) for a, b in funcs.spans.get(name, ())]
        if not targets and resolve is not None:
            targets = resolve(name)
        for owner, a, b in targets:
            key = (id(owner), a, b)
            if key in seen or (owner is funcs and a <= lo and hi <= b):
                continue
            seen.add(key)
            if name not in facts.followed:
                facts.followed.append(name)
            _follow_calls(owner, a, b, level + 1, facts, seen, generator_names, resolve)
