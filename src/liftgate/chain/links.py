"""Gate chains: the gates that stand together between a user-facing feature and a GPU.

A chain starts at a *root* gate and follows the code to the gates that must also admit the
target for the feature to work there:

* **calls** (from a Python gate): the code the gate admits (its then-block, or for a guard the
  rest of its function, and, when the guard raises, everything its callers do after the call
  returns) calls into functions of any scanned package (`liftgate.chain.callgraph`). A reached
  function that *is* guarded (an ``if not …: raise`` at the top of its body) adds that guard;
* **builds**: a reached function holds a JIT build filter (a ``py-build`` gate: FlashInfer's
  ``gen_trtllm_comm_module`` and its ``get_nvcc_flags_list(supported_major_versions=[9, 10])``):
  the filter is a link, and the search stops there;
* **compiles** (from a build filter or a CMake arch list): the sources it builds, named in its
  evidence, and the package headers they include; each CUDA gate there whose code is compiled
  out with nothing in its place (or that fails), and that is open for some arch the build
  targets, is a link. Gates with a fallback (``#if __CUDA_ARCH__ < 800 … #else …``) are not:
  the target takes the other branch.
* **flag**: a C++ host gate compiled only where a CMake gate passes its ``-D`` flag.
* **op**: a C++ branch on a parameter that decides what a torch op returns, linked to the Python
  gates at the calls that pass it the capability (`Gate.decided_at`).

Each link says how it was found (the calls, the include) and whether every step was exact;
a step resolved by a method's name alone is marked inexact. Nothing here names a package: the
chains come from the code. Per target, `liftgate.chain.view` keeps the links that exclude it.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from liftgate.arch.core import ArchSet
from liftgate.chain.callgraph import CallGraph, Function
from liftgate.model import Chain, ChainLink, ElseKind, Gate, GateKind, Relation
from liftgate.sources.workspace import Workspace

if TYPE_CHECKING:
    from liftgate.judge.region import FileStore

MAX_HOPS = 10  # calls followed from a root (callers and callees together)
MAX_UP = 3  # caller levels a raising guard's continuation is followed up
MAX_FUNCTIONS = 4000  # functions visited for one root
MAX_VIA = 12  # steps kept in a link's "via"
ROOT_KINDS = (GateKind.PY_RUNTIME, GateKind.PY_BUILD, GateKind.CMAKE)  # gates a chain can start from


@dataclass
class ChainContext:
    """What the chains of one scan share: gates, files, the call graph and the include closures."""

    gates: Sequence[Gate]
    workspace: Workspace
    graph: CallGraph = field(init=False)
    _by_id: dict[str, Gate] = field(init=False)
    _build_at: dict[int, list[Gate]] | None = None
    _guards_at: dict[int, list[Gate]] | None = None
    _stores: dict[tuple[str, str | None], FileStore] = field(default_factory=dict)
    _cuda_at: dict[tuple[str, str | None, str], list[Gate]] | None = None  # CUDA gates by file
    _compiles: dict[str, list[ChainLink]] = field(default_factory=dict)
    _chains: dict[str, Chain] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.graph = CallGraph(self.workspace)
        self._by_id = {g.id: g for g in self.gates}

    def gate(self, gate_id: str) -> Gate | None:
        return self._by_id.get(gate_id)

    # -- indexes ------------------------------------------------------------------------------

    def _index(self) -> None:
        build: dict[int, list[Gate]] = {}
        guards: dict[int, list[Gate]] = {}
        for gate in self.gates:
            if not gate.location.path.endswith(".py"):
                continue
            if gate.kind is GateKind.PY_BUILD:
                fn = self.graph.function_at(gate.location.package, gate.location.path, gate.location.line)
                if fn is not None:
                    build.setdefault(id(fn), []).append(gate)
            elif gate.kind is GateKind.PY_RUNTIME and _is_precondition(gate):
                fn = self.graph.function_at(gate.location.package, gate.location.path, gate.location.line)
                if fn is not None and _top_level(fn, gate.location.line):
                    guards.setdefault(id(fn), []).append(gate)
        self._build_at, self._guards_at = build, guards

    def builds_in(self, fn: Function) -> list[Gate]:
        if self._build_at is None:
            self._index()
        assert self._build_at is not None
        return self._build_at.get(id(fn), [])

    def guards_in(self, fn: Function) -> list[Gate]:
        if self._guards_at is None:
            self._index()
        assert self._guards_at is not None
        return self._guards_at.get(id(fn), [])

    def _store(self, gate: Gate) -> FileStore:
        from liftgate.judge.region import FileStore

        key = (gate.location.package, gate.location.version)
        if key not in self._stores:
            paths = self.workspace.files(*key)
            self._stores[key] = FileStore(sorted(paths), lambda p: self.workspace.read(*key, p))
        return self._stores[key]

    # -- chains -------------------------------------------------------------------------------

    def chain(self, gate_id: str) -> Chain:
        """The chain rooted at ``gate_id`` (cached)."""
        if gate_id not in self._chains:
            gate = self._by_id[gate_id]
            self._chains[gate_id] = _build_chain(self, gate)
        return self._chains[gate_id]

    def compile_links(self, gate: Gate) -> list[ChainLink]:
        """The CUDA gates in the sources a build filter or CMake arch list compiles."""
        if gate.id in self._compiles:
            return self._compiles[gate.id]
        from liftgate.judge.verdict import jit_sources

        store = self._store(gate)
        package, version = gate.location.package, gate.location.version
        sources = jit_sources(gate, sorted(self.workspace.files(package, version)))
        builds_for = gate.admitted | gate.unknown
        if self._cuda_at is None:
            self._cuda_at = {}
            for g in self.gates:
                if g.kind is GateKind.CUDA_PP:
                    key = (g.location.package, g.location.version, g.location.path)
                    self._cuda_at.setdefault(key, []).append(g)
        links: list[ChainLink] = []
        seen: set[str] = set()
        for source in sources:
            closure = store.closure(source)
            for member in closure:
                for g in self._cuda_at.get((package, version, member), ()):
                    if g.id in seen or not _obstacle(g, builds_for) or _defines_only(g, store):
                        continue
                    seen.add(g.id)
                    via = [f"builds {source}"] + ([f"which includes {member}"] if member != source else [])
                    links.append(ChainLink(g.id, gate.id, Relation.COMPILES, tuple(via), True))
        self._compiles[gate.id] = links
        return links

    def chains(self, roots: Iterable[str]) -> list[Chain]:
        return [self.chain(r) for r in roots]


def _is_precondition(gate: Gate) -> bool:
    """A guard that fails: ``if not X: raise`` (or an ``assert``): calling the function needs it."""
    guard = gate.then_span is None and gate.else_span is not None
    return gate.else_kind is ElseKind.ERROR and (guard or gate.directive == "assert")


def _top_level(fn: Function, line: int) -> bool:
    """Whether a statement of ``fn``'s own body (not nested in another block) starts at ``line``."""
    return any(isinstance(stmt, (ast.If, ast.Assert)) and stmt.lineno == line for stmt in fn.node.body)


def _obstacle(gate: Gate, builds_for: ArchSet) -> bool:
    """A CUDA gate that keeps code out with nothing in its place (or fails), open for some arch the
    build targets: it is part of what the module compiles, and a target it excludes loses that code."""
    if gate.then_span is None or gate.else_kind is ElseKind.FALLBACK:
        return False
    return bool((gate.admitted | gate.unknown) & builds_for)


def _defines_only(gate: Gate, store: FileStore) -> bool:
    """A gate whose region only defines macros (CUTLASS's ``#define CUTLASS_ARCH_MMA_SM100_ENABLED``
    for ``__CUDA_ARCH__ == 1000``): it selects another arch's features; lifting it would claim
    them. Its macro's users are gates of their own."""
    info = store.file(gate.location.path)
    span = gate.then_span
    if info is None or span is None:
        return False
    numbers = range(span.start, min(span.end, len(info.lines)) + 1)
    return bool(numbers) and all(n in info.directive_lines or not info.lines[n - 1].strip() for n in numbers)


def _region(ctx: ChainContext, gate: Gate) -> tuple[Function | None, int, int, bool]:
    """The function and lines a Python gate admits, and whether its failure propagates to callers."""
    fn = ctx.graph.function_at(gate.location.package, gate.location.path, gate.location.line)
    if fn is None:
        return None, 0, 0, False
    if gate.then_span is not None:
        return fn, gate.then_span.start, gate.then_span.end, False
    if gate.else_span is not None or gate.directive == "assert":
        # A guard: what it admits is the rest of its function (and, when it raises, its callers' rest).
        return fn, gate.location.span.end + 1, fn.last, gate.else_kind is ElseKind.ERROR
    return None, 0, 0, False  # a boolean return: its callers' checks are gates of their own


def _step(fn: Function, line: int) -> str:
    return f"{fn.qualname}() at {fn.module.path}:{line}"


def _build_chain(ctx: ChainContext, root: Gate) -> Chain:
    links: list[ChainLink] = [ChainLink(root.id, None, Relation.ROOT, (), True)]
    notes: list[str] = []
    members = {root.id}

    def add(link: ChainLink) -> bool:
        if link.gate_id in members:
            return False
        members.add(link.gate_id)
        links.append(link)
        return True

    if root.kind in (GateKind.PY_BUILD, GateKind.CMAKE):
        for link in ctx.compile_links(root):
            add(link)
        if root.kind is GateKind.CMAKE:
            for g in ctx.gates:
                if root.id in g.enclosing and g.kind is GateKind.CPP_RUNTIME:
                    add(
                        ChainLink(
                            g.id,
                            root.id,
                            Relation.FLAG,
                            ("compiled only where this CMake gate passes its -D flag",),
                            True,
                        )
                    )
        return Chain(root.id, tuple(links), tuple(notes))
    if root.kind is not GateKind.PY_RUNTIME:
        return Chain(root.id, tuple(links), tuple(notes))
    for g in ctx.gates:  # C++ branches that decide what a torch op this gate calls returns
        if root.id in g.decided_at:
            add(
                ChainLink(
                    g.id,
                    root.id,
                    Relation.OP,
                    ("its value comes from this C++ branch through a torch op",),
                    True,
                )
            )

    fn, lo, hi, raises = _region(ctx, root)
    if fn is None:
        notes.append(
            "the gate is not inside a function (or is a boolean return): what it protects is not followed"
        )
        return Chain(root.id, tuple(links), tuple(notes))
    # Breadth first over (function, lines); each entry carries the gate it was reached from and
    # the calls that led there, so a link can say how it was found.
    Entry = tuple[Function, int, int, int, str, tuple[str, ...], bool]
    queue: deque[Entry] = deque([(fn, lo, hi, 0, root.id, (), True)])
    visited: set[int] = {id(fn)}
    up_frontier: list[tuple[Function, int, tuple[str, ...]]] = [(fn, 0, ())] if raises else []
    truncated = False
    builds_reached: list[Gate] = []

    def expand_up() -> None:
        # A raising guard admits what its callers do after the call returns, up to MAX_UP levels.
        nonlocal up_frontier
        next_frontier: list[tuple[Function, int, tuple[str, ...]]] = []
        for callee, level, path in up_frontier:
            if level >= MAX_UP:
                continue
            for call in ctx.graph.callers(callee):
                caller = call.caller
                step = (*path, f"returns to {_step(caller, call.line)}")
                queue.append((caller, call.line, caller.last, level + 1, root.id, step, call.exact))
                next_frontier.append((caller, level + 1, step))
        up_frontier = next_frontier

    expand_up()
    while queue:
        fn, lo, hi, hops, parent, path, exact = queue.popleft()
        if hops > MAX_HOPS:
            truncated = True
            continue
        for call in ctx.graph.callees(fn, lo, hi):
            callee = call.callee
            if id(callee) in visited:
                continue
            if len(visited) >= MAX_FUNCTIONS:
                truncated = True
                break
            visited.add(id(callee))
            step = (*path, f"calls {callee.render()} from {_step(fn, call.line)}")
            step_exact = exact and call.exact
            here = parent
            for guard in ctx.guards_in(callee):
                if guard.id != root.id and add(
                    ChainLink(guard.id, parent, Relation.CALLS, step[-MAX_VIA:], step_exact)
                ):
                    here = guard.id
            builds = ctx.builds_in(callee)
            if builds:
                for build in builds:
                    if add(ChainLink(build.id, here, Relation.BUILDS, step[-MAX_VIA:], step_exact)):
                        builds_reached.append(build)
                continue  # a JIT generator: what it compiles is the build gate's link
            # The path keeps growing past a guard: each link's "via" reads from the root.
            queue.append((callee, callee.first, callee.last, hops + 1, here, step, step_exact))
        if not queue and up_frontier:
            expand_up()
    for build in builds_reached:
        for link in ctx.compile_links(build):
            add(link)
    if truncated:
        notes.append(
            f"the search stopped at its bounds ({MAX_HOPS} calls deep, {MAX_FUNCTIONS} functions): gates further "
            "away are not in this chain"
        )
    if ctx.graph.parse_failures:
        notes.append(
            f"{len(ctx.graph.parse_failures)} Python file(s) could not be parsed and were not followed"
        )
    return Chain(root.id, tuple(links), tuple(notes))


def chain_roots(gates: Iterable[Gate], excluded: Callable[[Gate], bool]) -> list[str]:
    """Gates a chain can start from, among those ``excluded`` says shut a target out: Python
    runtime gates, and build filters and CMake arch lists (their sources' gates follow)."""
    return [g.id for g in gates if g.kind in ROOT_KINDS and excluded(g)]
