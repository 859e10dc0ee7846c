"""Verdicts: could the code behind a gate that excludes a target run there?

`judge_report` takes a scan's gates and the packages they came from and, for every gate that
excludes (or may exclude) a target, analyses what the gated code needs and decides:

* ``blocked``: the code uses a feature the target lacks; each is named with where it is used
  (tcgen05 on sm_120 is blocked; ``griddepcontrol`` on sm_120 is not: it assembles there).
* ``unknown``: every feature seen exists on the target, but something was not seen: a call that
  could not be followed into the package, or code that is not analysed (a binary, a Python
  branch that reaches no source liftgate can read).
* ``liftable``: everything the code needs exists on the target.

What "the code" is depends on the gate kind:

* cuda-pp: the gate's then-region as the target would compile it once lifted, and the device
  functions and macros it calls (`liftgate.judge.region`).
* py-build / cmake: the CUDA sources the filter or arch list builds (named in the gate's
  evidence) and the package headers they include. CUDA gates inside those sources that still
  exclude the target are noted: lifting the filter alone compiles their code out.
* cpp-runtime: the host branch, with the functions it calls (kernels and launchers).
* py-runtime: best effort (`liftgate.judge.pyregion`): catalog evidence in the branch, and the
  sources of JIT modules the branch builds.

Hazards are reported whatever the verdict: ordering or synchronisation compiled out with
nothing in its place (with programmatic dependent launch still enabled by the host, that is a
data race, not a clean failure), and shared-memory sizes beyond the target's per-block limit.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from liftgate.arch.core import Arch, universe
from liftgate.collector import collector_off
from liftgate.detect.py_binding import line_matches
from liftgate.judge.catalog import Feature, load_catalog
from liftgate.judge.pyregion import PyFunctions, branch_calls
from liftgate.judge.region import (
    MAX_CLOSURE,
    MAX_DEPENDENTS,
    MAX_DEPTH,
    FileStore,
    RegionAnalyzer,
    RegionFacts,
    Use,
    feature_matcher,
    shared_memory_limit,
)
from liftgate.model import (
    ElseKind,
    FeatureUse,
    Gate,
    GateKind,
    Hazard,
    HazardKind,
    Report,
    Status,
    Verdict,
    VerdictKind,
)
from liftgate.scan.pool import POOL_THRESHOLD, default_jobs
from liftgate.sources.interface import NullObserver, Observer
from liftgate.sources.workspace import Workspace

_PY_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.M)
MAX_LISTED = 6
BEST_EFFORT = "best effort"


def _fmt(use: FeatureUse) -> str:
    via = f" via {use.via}{'()' if use.via.isidentifier() else ''}" if use.via else ""
    return f"{use.text} at {use.path}:{use.line}{via}"


def _listed(items: Sequence[str], limit: int = MAX_LISTED) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


@dataclass
class _Generator:
    """A Python function that holds a build gate whose sources are known: calling it builds them."""

    gate: Gate
    module: str
    sources: list[str]


@dataclass
class PackageContext:
    """What verdicts of one package share: its paths, its analyser, its JIT module generators."""

    def fresh(self) -> PackageContext:
        """The same context with a fresh region analyser (`RegionAnalyzer.fresh`); the caches of
        pure reads (Python functions, definitions) stay shared."""
        return replace(self, analyzer=self.analyzer.fresh())

    paths: list[str]
    analyzer: RegionAnalyzer
    read: Callable[[str], str | None]
    generators: dict[str, list[_Generator]] = field(default_factory=dict)
    _python: dict[str, PyFunctions] = field(default_factory=dict)

    # Filled in place (not rebound), so that every fresh() copy shares them.
    _py_index: dict[str, list[str]] = field(default_factory=dict)
    _py_indexed: list[bool] = field(default_factory=list)
    _py_defs: dict[str, list[tuple[PyFunctions, int, int]]] = field(default_factory=dict)

    def python(self, path: str) -> PyFunctions:
        if path not in self._python:
            text = self.read(path)
            self._python[path] = PyFunctions.parse(text) if text is not None else PyFunctions({}, [])
        return self._python[path]

    def py_definitions(self, name: str) -> list[tuple[PyFunctions, int, int]]:
        """Functions called ``name`` anywhere in the package's Python (at most 4 files)."""
        if name in self._py_defs:
            return self._py_defs[name]
        if not self._py_indexed:
            # One pass over the package's Python: which files define which names.
            self._py_indexed.append(True)
            for path in self.paths:
                if path.endswith(".py"):
                    text = self.read(path)
                    if text is not None and "def " in text:
                        for defined in {
                            m.group(1) for m in line_matches(_PY_DEF, text, "def", at_break=False)
                        }:
                            self._py_index.setdefault(defined, []).append(path)
        found: list[tuple[PyFunctions, int, int]] = []
        for path in self._py_index.get(name, ())[:4]:
            funcs = self.python(path)
            found.extend((funcs, a, b) for a, b in funcs.spans.get(name, ()))
        self._py_defs[name] = found
        return found


def _build_context(store: FileStore, paths: list[str], gates: Sequence[Gate], target: Arch) -> PackageContext:
    ctx = PackageContext(paths, RegionAnalyzer(store, gates, target), store.read)
    for gate in gates:
        if gate.kind is not GateKind.PY_BUILD or not gate.location.path.endswith(".py"):
            continue
        sources = jit_sources(gate, paths)
        holder = ctx.python(gate.location.path).enclosing(gate.location.line)
        if holder:
            module = jit_module(gate) or holder
            ctx.generators.setdefault(holder, []).append(_Generator(gate, module, sources))
    return ctx


def judge_gate(gate: Gate, target: Arch, ctx: PackageContext, admitted: bool = False) -> Verdict:
    """The verdict of one gate for one target (the gate is expected to exclude it, or be unknown for it).

    ``admitted``: the target gets the path (`judge_admitted`); a build's sources are then read from
    their own code through the calls it makes, not every function their headers define, since a
    header's unused definition is no instruction the target runs."""
    catalog = {f.id: f for f in load_catalog()}
    analyzer = ctx.analyzer
    if gate.kind is GateKind.CUDA_PP:
        if gate.then_span is None:
            return Verdict(
                gate.id, target, VerdictKind.LIFTABLE,
                ("the gate guards no code; lifting it changes nothing",), scope="no code",
            )  # fmt: skip
        span = gate.then_span
        if analyzer.file(gate.location.path) is None:
            return _not_analysed(gate, target, "a CUDA gate whose file could not be read")
        region = analyzer.analyze(gate.location.path, span.start, span.end)
        facts = RegionFacts()
        facts.merge(region)
        scope = f"{gate.location.path}:{span.start}-{span.end}" + (
            f", following {_listed(region.followed)}" if region.followed else ""
        )
        if region.defines:
            # A gate that defines a macro (CUTE_ARCH_MMA_SM90A_ENABLED) guards, through it, every
            # region that tests the macro: lifting it turns them on.
            dependents = analyzer.macro_dependents(region.defines, gate.id)
            for macro, dependent, first, last in dependents:
                facts.merge(analyzer.analyze(dependent.location.path, first, last), via=f"macro {macro}")
            if dependents:
                macros = list(dict.fromkeys(m for m, *_ in dependents))
                count = (
                    f"{len(dependents)}"
                    if len(dependents) < MAX_DEPENDENTS
                    else f"at least {MAX_DEPENDENTS} (the first read)"
                )
                scope += f"; it defines {_listed(macros, 3)}, which guards {count} region(s) in the package"
        return _decide(gate, target, facts, catalog, scope)
    if gate.kind in (GateKind.PY_BUILD, GateKind.CMAKE):
        sources = jit_sources(gate, ctx.paths)
        if not sources:
            what = "build filter" if gate.kind is GateKind.PY_BUILD else "CMake arch list"
            return _module_verdict(
                gate,
                target,
                ctx,
                catalog,
                f"a {what} whose sources are not named or not in the scanned files",
            )
        facts, notes = _sources_facts(sources, analyzer, through_calls=admitted)
        scope = (
            "the sources it builds and what they call: "
            if admitted
            else "the sources it builds and the package headers they include: "
        ) + _listed(sources)
        return _decide(gate, target, facts, catalog, scope, notes=notes)
    if gate.kind is GateKind.CPP_RUNTIME:
        if gate.then_span is None:
            return _not_analysed(
                gate,
                target,
                "a host-side check that fails on the target: what it protects is the code after it",
            )
        span = gate.then_span
        facts = analyzer.analyze(gate.location.path, span.start, span.end)
        scope = f"the host branch {gate.location.path}:{span.start}-{span.end}" + (
            f", following {_listed(facts.followed)}" if facts.followed else ""
        )
        return _decide(gate, target, facts, catalog, scope, silent_hazard=False)
    if gate.kind is GateKind.PY_RUNTIME:
        return _judge_python(gate, target, ctx, catalog, admitted)
    return _not_analysed(
        gate,
        target,
        f"shipped binary code with no kernel {target.name} can run: it must be rebuilt from source with the "
        "target in its arch list (TORCH_CUDA_ARCH_LIST, CMAKE_CUDA_ARCHITECTURES …); what its kernels need is not analysed",
    )


_PREDICATE = re.compile(r"_*(?:is|has|use|uses|supports?|can|check|get)_\w*(?:sm|arch|supported|capab)\w*")


def _module_evidence(path: str, line: int, ctx: PackageContext) -> RegionFacts:
    """Catalog patterns matched by a Python file's module path (``cutlass.cute.nvgpu.tcgen05.mma``):
    a gate inside a CuTe DSL op module guards that op."""
    facts = RegionFacts()
    if not path.endswith(".py"):
        return facts
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    for anchor, pattern, fid in feature_matcher().patterns:
        if anchor is None or anchor in module:
            m = pattern.search(module)
            if m:
                facts.add(Use(fid, path, line, f"module {module}"))
    return facts


def _module_verdict(
    gate: Gate, target: Arch, ctx: PackageContext, catalog: dict[str, Feature], what: str
) -> Verdict:
    """Blocked when the gate's module itself names a feature the target lacks; else not analysed."""
    facts = _module_evidence(gate.location.path, gate.location.line, ctx)
    if facts.uses:
        facts.unresolved.setdefault(
            f"{what} (only the module's name was read)", (gate.location.path, gate.location.line)
        )
        return _decide(
            gate,
            target,
            facts,
            catalog,
            f"{BEST_EFFORT}: the module {gate.location.path}",
            silent_hazard=False,
        )
    return _not_analysed(gate, target, what)


def _not_analysed(gate: Gate, target: Arch, what: str) -> Verdict:
    return Verdict(gate.id, target, VerdictKind.UNKNOWN, (f"not analysed: {what}",), scope=BEST_EFFORT)


def _sources_facts(
    sources: Sequence[str], analyzer: RegionAnalyzer, through_calls: bool = False
) -> tuple[RegionFacts, list[str]]:
    """Features of whole source files and their package headers, as compiled for the target.

    ``through_calls``: each source's own lines and what they call (headers only through the calls),
    for a target that gets the build (an unused header definition is not run)."""
    facts = RegionFacts()
    if through_calls:
        for path in sources:
            info = analyzer.file(path)
            if info is None:
                facts.unresolved.setdefault(f"{path} (unreadable)", (path, 0))
                continue
            facts.merge(analyzer.analyze(path, 1, len(info.lines), follow=True))
        # Template and kernel names anywhere in the include closure (UMMA, KernelTmaWarpSpecialized1SmSm100)
        # say which collectives the sources instantiate, through calls the walk cannot follow; an
        # instruction in a header counts only where the sources' own code reaches it (an inline
        # function nobody calls is never emitted).
        whole, _ = _sources_facts(sources, analyzer)
        for use in whole.all_uses():
            if not _INSTRUCTION.match(use.text) and not _LIBRARY.search(use.path):
                facts.add(use)
        return facts, []
    still_excluded: list[str] = []
    for path in sources:
        for member in analyzer.closure(path):
            info = analyzer.file(member)
            if info is None:
                facts.unresolved.setdefault(f"{member} (unreadable)", (member, 0))
                continue
            facts.merge(analyzer.analyze(member, 1, len(info.lines), follow=False))
            for g in analyzer.nested_gates(member, 1, len(info.lines)):
                if g.status(analyzer.target) is Status.EXCLUDED and g.then_span is not None:
                    still_excluded.append(g.id)
                    if g.else_kind is ElseKind.NONE and len(facts.hazards) < MAX_LISTED:
                        hazard = _silent_exclusion(g, analyzer)
                        if hazard:
                            facts.hazards.append(hazard)
    notes = []
    if any(analyzer.store.closure_truncated(path) for path in sources):
        notes.append(f"only the first {MAX_CLOSURE} files of each source's include closure were read")
    if still_excluded:
        unique = list(dict.fromkeys(still_excluded))
        notes.append(
            f"{len(unique)} CUDA gate(s) in these sources still exclude {analyzer.target.name} "
            f"(e.g. {_listed(unique, 3)}): lifting this gate alone compiles their code out; judge them too"
        )
    return facts, notes


# A PTX mnemonic as the catalog matches it in inline asm (tcgen05.ld, wgmma.fence, cp.async.bulk).
_INSTRUCTION = re.compile(r"[a-z][a-z0-9_]*\.[a-z0-9_.:]+")
# A vendored CUTLASS/CuTe header: it defines every collective and policy (KernelTmaWarpSpecialized in
# dispatch_policy.hpp), so a name there is a definition, not a sign the sources instantiate it.
_LIBRARY = re.compile(r"(?:^|/)(?:cutlass|cute)/")


def _silent_exclusion(gate: Gate, analyzer: RegionAnalyzer) -> Hazard | None:
    """The hazard of building sources whose gate ``gate`` stays shut: ordering compiled out."""
    span = gate.then_span
    if span is None:
        return None
    sub = analyzer.analyze(gate.location.path, span.start, span.end)
    catalog = {f.id: f for f in load_catalog()}
    ordering = [u for u in sub.all_uses() if catalog[u.feature].ordering]
    if not ordering:
        return None
    first = ordering[0]
    return Hazard(
        HazardKind.SILENT_SOURCE,
        f"silent exclusion inside the sources: built for {analyzer.target.name} with only this gate lifted, "
        f"{gate.location.path}:{gate.location.line} ({gate.id}) compiles out {first.text} at {first.path}:{first.line} "
        "with nothing in its place. If the host launches with programmatic dependent launch, that is a data "
        f"race; lift {gate.id} too",
        (gate.id,),
    )


def _judge_python(
    gate: Gate, target: Arch, ctx: PackageContext, catalog: dict[str, Feature], admitted: bool = False
) -> Verdict:
    path = gate.location.path
    functions = ctx.python(path)
    if gate.then_span is not None:
        first, last = gate.then_span.start, gate.then_span.end
        what = f"the branch {path}:{first}-{last}"
    else:
        holder = functions.enclosing(gate.location.line)
        spans = [s for s in functions.spans.get(holder or "", ()) if s[0] <= gate.location.line <= s[1]]
        if not spans:
            return _module_verdict(
                gate,
                target,
                ctx,
                catalog,
                "a Python check outside any function: what it protects is not followed",
            )
        first, last = gate.location.line, spans[-1][1]
        if _PREDICATE.match(holder or "") and last - spans[-1][0] <= 12:
            return _module_verdict(
                gate, target, ctx, catalog,
                f"a capability helper ({holder}()): what it protects is at its callers, whose checks are "
                "gates of their own",
            )  # fmt: skip
        what = f"the rest of {holder}() after the check ({path}:{first}-{last})"
    branch = branch_calls(functions, first, last, set(ctx.generators), ctx.py_definitions)
    facts = RegionFacts()
    # Catalog evidence written in the Python itself (CuTe DSL names, CUTLASS kernel names).
    facts.merge(ctx.analyzer.analyze(path, first, last, follow=False))
    facts.unresolved.clear()
    notes: list[str] = []
    reached: list[str] = []
    for name in branch.generators:
        for gen in ctx.generators[name]:
            if admitted and gen.gate.status(target) is not Status.ADMITTED:
                continue  # its own build gate keeps the target out of these sources
            if gen.sources:
                sub, sub_notes = _sources_facts(gen.sources, ctx.analyzer, through_calls=admitted)
                facts.merge(sub, via=name)
                notes.extend(sub_notes)
                reached.extend(gen.sources)
            else:
                facts.unresolved.setdefault(
                    f'JIT module "{gen.module}" ({name}(): its sources are not named or not in the package)',
                    (gen.gate.location.path, gen.gate.location.line),
                )
            if gen.gate.status(target) is not Status.ADMITTED:
                notes.append(
                    f'it builds JIT module "{gen.module}" ({name}()), whose build gate {gen.gate.id} also '
                    f"excludes {target.name}: lift both"
                )
    facts.merge(_module_evidence(path, gate.location.line, ctx))
    scope = f"{BEST_EFFORT}: {what}" + (f", following {_listed(branch.followed)}" if branch.followed else "")
    if reached:
        scope += "; JIT sources " + _listed(list(dict.fromkeys(reached)))
    elif not facts.uses and not branch.generators:
        calls = _listed(branch.calls) if branch.calls else "nothing"
        return Verdict(
            gate.id, target, VerdictKind.UNKNOWN,
            (f"not analysed: {what} calls {calls}; none of it leads to a JIT module or source liftgate can read",),
            scope=scope,
        )  # fmt: skip
    elif not reached and not branch.generators:
        facts.unresolved.setdefault(
            f"{what} (kernels it runs are not found; only names in the Python were read)", (path, first)
        )
    return _decide(gate, target, facts, catalog, scope, silent_hazard=False, notes=notes)


def jit_sources(gate: Gate, paths: Sequence[str]) -> list[str]:
    """Package paths of the sources a build gate guards: every source its `BuildTarget` facts list
    (a bare file name matches the shortest package path ending in it; a glob matches nothing)."""
    out: list[str] = []
    for build in gate.builds:
        for name in build.sources:
            if not name or "*" in name or "…" in name:
                continue
            matches = [p for p in paths if p == name or p.endswith("/" + name)]
            if matches:
                out.append(min(matches, key=len))
    return list(dict.fromkeys(out))


def jit_module(gate: Gate) -> str | None:
    """The name of the JIT module a py-build gate guards, when a `BuildTarget` fact names one."""
    return next((b.name for b in gate.builds if b.what == "JIT module" and b.name), None)


def _variant_with(missing: Iterable[str], target: Arch, catalog: dict[str, Feature]) -> Arch | None:
    """An arch-specific variant of the target's capability that has every missing feature."""
    if target.variant:
        return None
    for arch in sorted(universe(), key=lambda a: a.name):
        if arch.cc == target.cc and arch.variant and all(arch in catalog[f].archs for f in missing):
            return arch
    return None


def _decide(
    gate: Gate,
    target: Arch,
    facts: RegionFacts,
    catalog: dict[str, Feature],
    scope: str,
    silent_hazard: bool = True,
    notes: Sequence[str] = (),
) -> Verdict:
    uses = [FeatureUse(u.feature, u.path, u.line, u.text, u.via) for u in facts.all_uses()]
    missing = [u for u in uses if target not in catalog[u.feature].archs]
    unresolved = [
        f"{name} ({path}:{line})" if line else name for name, (path, line) in facts.unresolved.items()
    ]
    reasons: list[str] = []
    if missing:
        kind = VerdictKind.BLOCKED
        by_feature: dict[str, list[FeatureUse]] = {}
        for u in missing:
            by_feature.setdefault(u.feature, []).append(u)
        for fid, found in by_feature.items():
            feature = catalog[fid]
            more = facts.counts.get(fid, len(found)) - len(found)
            where = "; ".join(_fmt(u) for u in found) + (f" (+{more} more)" if more > 0 else "")
            reasons.append(f"{target.name} lacks {fid} ({feature.description}): used at {where}")
        variant = _variant_with(by_feature, target, catalog)
        if variant is not None:
            reasons.append(
                f"{variant.name} has all of these: if the build compiles arch-specific targets "
                f"(FlashInfer's JIT does from 9.0 on), judge with --target {variant.name}"
            )
    elif unresolved or facts.deeper:
        kind = VerdictKind.UNKNOWN
        if unresolved:
            reasons.append(
                f"every feature seen exists on {target.name}, but these were not found in the package: "
                f"{_listed(unresolved)}"
            )
        if facts.deeper:
            deeper = [f"{name} ({path}:{line})" for name, (path, line) in facts.deeper.items()]
            reasons.append(
                f"every feature seen exists on {target.name}, but calls deeper than {MAX_DEPTH} levels were not "
                f"followed: {_listed(deeper)}"
            )
    else:
        kind = VerdictKind.LIFTABLE
        present = sorted({u.feature for u in uses})
        reasons.append(
            f"everything the code uses exists on {target.name}"
            + (f" ({', '.join(present)})" if present else " (no special hardware feature)")
        )
    reasons.extend(notes)
    hazards: list[Hazard] = list(facts.hazards)
    if silent_hazard and gate.kind is GateKind.CUDA_PP and gate.else_kind is ElseKind.NONE:
        ordering = [u for u in uses if catalog[u.feature].ordering]
        if ordering:
            hazards.append(
                Hazard(
                    HazardKind.SILENT_EXCLUSION,
                    f"silent exclusion: on {target.name} this code is compiled out with nothing in its place, "
                    f"and it orders or synchronises ({'; '.join(_fmt(u) for u in ordering[:3])}). If the host "
                    "still launches the kernel with programmatic dependent launch, the dependent kernel can run "
                    "before its producer finishes: a data race, not an error",
                )
            )
    flagged = [m for m in gate.macros if m.build_gate is not None]
    if flagged and gate.kind is GateKind.CUDA_PP:
        cmake = tuple(dict.fromkeys(m.build_gate for m in flagged if m.build_gate is not None))
        macros = ", ".join(dict.fromkeys(f"-D{m.macro}" for m in flagged))
        hazards.append(
            Hazard(
                HazardKind.BUILD_FLAG,
                f"build flag: this #if tests {macros}, which the build passes only where build gate "
                f"{', '.join(cmake)} admits the target; lifting the #if alone compiles code that calls "
                f"kernels a build for {target.name} does not make. The build gate decides: lift it too",
                cmake,
            )
        )
    limit = shared_memory_limit(target)
    if limit is not None:
        for size, path, line, text in facts.smem:
            if size > limit:
                hazards.append(
                    Hazard(
                        HazardKind.SHARED_MEMORY,
                        f"shared memory: {text} at {path}:{line} asks for {size:,} bytes per block; "
                        f"{target.name} allows {limit:,}",
                    )
                )
    return Verdict(
        gate.id,
        target,
        kind,
        tuple(dict.fromkeys(reasons)),
        tuple(uses),
        tuple(missing),
        tuple(unresolved)
        + tuple(f"{n} ({p}:{line}; not followed: too deep)" for n, (p, line) in facts.deeper.items()),
        tuple(dict.fromkeys(hazards)),
        scope,
    )


def judge_report(
    gates: Iterable[Gate],
    targets: Sequence[Arch],
    workspace: Workspace,
    only: Callable[[Gate], bool] | None = None,
    observer: Observer | None = None,
    cache_root: str | None = None,
    jobs: int | None = None,
    ahead: JudgeAhead | None = None,
) -> list[Verdict]:
    """Verdicts for every gate that excludes (or may exclude) one of ``targets``, and an ``unsafe``
    verdict for every gate that admits one into code using a feature it lacks (`judge_admitted`).

    ``workspace`` reads the packages' files. ``only`` limits which gates are judged (all gates
    still inform the analysis). ``observer`` is started once with the number of (gate, target)
    pairs to judge and advanced by one per pair; the caller finishes it. With ``cache_root`` (and
    no ``only``), a package's verdicts for a target are taken from the cache when nothing they can
    depend on changed (`liftgate.judge.cache`), and stored there otherwise. ``jobs``: worker
    processes (default: the CPU count, at most 8); the verdicts do not depend on it. ``ahead``:
    the CUDA gates' runs a scan judged while it went on (`JudgeAhead`), taken where they are still
    the runs to judge; it is shut down on the way out.
    """
    try:
        return _judge_report(gates, targets, workspace, only, observer, cache_root, jobs, ahead)
    finally:
        if ahead is not None:
            ahead.cancel()


def _to_judge(
    pkg_gates: Sequence[Gate], target: Arch, by_id: dict[str, Gate], only: Callable[[Gate], bool] | None
) -> list[Gate]:
    """The gates of a package to judge for ``target``: those that exclude it (or may), and those that
    admit it into a path the judge reads (`ADMITTED_KINDS`) where it reaches them."""
    return [
        g
        for g in pkg_gates
        if (only is None or only(g))
        and (
            g.status(target) is not Status.ADMITTED
            or (g.kind in ADMITTED_KINDS and _reached(g, target, by_id))
        )
    ]


def _judge_report(
    gates: Iterable[Gate],
    targets: Sequence[Arch],
    workspace: Workspace,
    only: Callable[[Gate], bool] | None,
    observer: Observer | None,
    cache_root: str | None,
    jobs: int | None,
    ahead: JudgeAhead | None,
) -> list[Verdict]:
    observer = observer or NullObserver()
    by_package: dict[tuple[str, str | None], list[Gate]] = {}
    for gate in gates:
        by_package.setdefault((gate.location.package, gate.location.version), []).append(gate)
    # The (gate, target) pairs to judge, per package and target, before any is judged: their count
    # is the phase's total.
    from liftgate.judge.cache import VerdictCache

    cache = VerdictCache(cache_root, workspace) if cache_root is not None and only is None else None
    if ahead is not None:
        ahead.drop_waiting()
    cached: dict[tuple[tuple[str, str | None], Arch], list[Verdict]] = {}
    keys: dict[tuple[tuple[str, str | None], Arch], str] = {}
    todos: dict[tuple[tuple[str, str | None], Arch], list[Gate]] = {}
    early: dict[tuple[tuple[str, str | None], Arch], list[Verdict]] = {}
    plan: list[tuple[tuple[str, str | None], list[Gate], list[tuple[Arch, list[Gate]]]]] = []
    for key in workspace.package_keys():
        pkg_gates = by_package.get(key, [])
        if not pkg_gates:
            continue
        work: list[tuple[Arch, list[Gate]]] = []
        by_id = {g.id: g for g in pkg_gates}
        for target in targets:
            todo = _to_judge(pkg_gates, target, by_id, only)
            if todo and cache is not None:
                cache_key = cache.key(key, pkg_gates, target)
                hit = cache.load(cache_key) if cache_key is not None else None
                if hit is not None:
                    cached[(key, target)] = hit
                    continue
                if cache_key is not None:
                    keys[(key, target)] = cache_key
            if not todo:
                continue
            todos[(key, target)] = todo
            found = ahead.take(key, target, pkg_gates, todo) if ahead is not None and only is None else None
            if found is not None:  # the CUDA gates' runs judged ahead: the others are left
                early[(key, target)], left = found
                todo = _without_first_cuda(todo, sum(g.kind is GateKind.CUDA_PP for g in todo) - left)
            if todo:
                work.append((target, todo))
        if work:
            plan.append((key, pkg_gates, work))
    if ahead is not None:
        ahead.cancel()  # what it judged is taken (or not needed): it judges nothing more
    total = sum(len(todo) for _, _, work in plan for _, todo in work)
    observer.start("judging the gated code", total=total)
    judged: dict[tuple[tuple[str, str | None], Arch], list[Verdict]] = dict(cached)
    jobs = jobs or default_jobs()
    fresh = _judge_in_pool(plan, workspace, jobs, observer) if jobs > 1 and total >= POOL_THRESHOLD else None
    if fresh is None:  # one job, little work, or a worker died: judged here, run by run as a pool would
        fresh = {}
        with _collected_every_few_runs() as run_done:
            for (name, version), pkg_gates, work in plan:
                paths = sorted(workspace.files(name, version))
                store = FileStore(paths, functools.partial(workspace.read, name, version))
                for target, todo in work:
                    ctx = _build_context(store, paths, pkg_gates, target)
                    found_here: list[Verdict] = []
                    for run in _runs(todo):
                        found_here.extend(_judge_all(run, target, ctx.fresh(), observer))
                        run_done()
                    fresh[((name, version), target)] = found_here
    for pair, todo in todos.items():
        judged[pair] = _in_order([*early.get(pair, ()), *fresh.get(pair, ())], todo)
        if cache is not None and pair in keys:
            cache.store(keys[pair], judged[pair])
    # In package and target order, whether judged now or taken from the cache.
    return [
        v for key in workspace.package_keys() for target in targets for v in judged.get((key, target), ())
    ]


# Gates judged together, with one region analyser: the unit of work of the judge, in one process or
# many. A fixed size, so that the runs (and so the verdicts) do not depend on the job count.
JUDGE_RUN = 48


# The judge keeps millions of small objects for its whole length (each file's tokens, lines and
# indexes, shared by every run) and makes some reference cycles. Left to itself, the cyclic
# collector ran 178 full collections over all of them in a judge of FlashInfer + SGLang: 45 s of
# 125 s at -j 1. It is off while gates are judged; a full collection every GC_RUNS runs frees the
# cycles (about 120 MB by the end of that judge without any) at a few seconds' cost.
GC_RUNS = 32


def _every_few_runs() -> Callable[[], None]:
    """A function to call after each run of gates: every `GC_RUNS`th call collects."""
    runs = 0

    def run_done() -> None:
        nonlocal runs
        runs += 1
        if runs % GC_RUNS == 0:
            gc.collect()

    return run_done


@contextlib.contextmanager
def _collected_every_few_runs() -> Iterator[Callable[[], None]]:
    """The cyclic collector off inside, collecting through the `_every_few_runs` function it
    yields; the collector's state is restored on the way out."""
    with collector_off():
        yield _every_few_runs()


def _runs(todo: Sequence[Gate]) -> list[Sequence[Gate]]:
    """``todo`` cut into runs of JUDGE_RUN neighbouring gates (path order: a run's gates mostly
    read the same files), the CUDA preprocessor gates' runs first, apart from the others': they are
    final once the C-family detector ends, so a scan can judge them while the Python detector runs
    (`judge_ahead`), with the same runs and so the same verdicts."""
    streams = (
        [g for g in todo if g.kind is GateKind.CUDA_PP],
        [g for g in todo if g.kind is not GateKind.CUDA_PP],
    )
    return [stream[i : i + JUDGE_RUN] for stream in streams for i in range(0, len(stream), JUDGE_RUN)]


def _without_first_cuda(todo: Sequence[Gate], count: int) -> list[Gate]:
    """``todo`` without its first ``count`` CUDA preprocessor gates: those judged ahead (whole
    runs from the start of the CUDA gates' stream, so `_runs` cuts the rest as it cut them)."""
    out: list[Gate] = []
    for g in todo:
        if g.kind is GateKind.CUDA_PP and count > 0:
            count -= 1
        else:
            out.append(g)
    return out


def _in_order(verdicts: Iterable[Verdict], todo: Sequence[Gate]) -> list[Verdict]:
    """``verdicts`` (at most one per gate of ``todo``) in ``todo``'s order, whatever the runs' (a
    sort that keeps the verdicts of gates sharing an id, which the links merge, in their order)."""
    position: dict[str, int] = {}
    for k, g in enumerate(todo):
        position.setdefault(g.id, k)
    return sorted(verdicts, key=lambda v: position.get(v.gate_id, len(todo)))


def _judge_all(todo: Sequence[Gate], target: Arch, ctx: PackageContext, observer: Observer) -> list[Verdict]:
    """The verdicts of ``todo`` for ``target``, in order: every excluding gate's, and the ``unsafe``
    ones of the admitting gates."""
    found_here: list[Verdict] = []
    for g in todo:
        if g.status(target) is Status.ADMITTED:
            found = judge_admitted(g, target, ctx)
            if found is not None:
                found_here.append(found)
        else:
            found_here.append(judge_gate(g, target, ctx))
        observer.advance(1)
    return found_here


_PackageKey = tuple[str, str | None]
# What every worker of a judging pool is handed once, when it starts: each package's files and
# gates. Its contexts (a package's lexed files, for one target) are kept between the chunks it judges.
_WORKER_STATE: tuple[Workspace, dict[_PackageKey, list[Gate]]] | None = None
_WORKER_CONTEXTS: dict[tuple[_PackageKey, Arch], PackageContext] = {}
_WORKER_STORES: dict[_PackageKey, FileStore] = {}
_WORKER_BY_ID: dict[_PackageKey, dict[str, Gate]] = {}
_WORKER_RUN_DONE: Callable[[], None] = _every_few_runs()  # a worker's collections (`_judge_worker_init`)


def _judge_worker_init(workspace: Workspace, gates: dict[_PackageKey, list[Gate]]) -> None:
    global _WORKER_STATE, _WORKER_RUN_DONE
    # A worker only judges: its collector stays off, and `_judge_chunk` collects every GC_RUNS
    # runs (`GC_RUNS` says why). What it inherited from the parent is frozen, so
    # that those collections neither scan it nor copy its pages.
    gc.disable()
    gc.freeze()
    _WORKER_RUN_DONE = _every_few_runs()
    _WORKER_STATE = (workspace, gates)
    _WORKER_CONTEXTS.clear()
    _WORKER_STORES.clear()
    _WORKER_BY_ID.clear()


def _judge_chunk(key: _PackageKey, target: Arch, ids: list[str]) -> list[Verdict]:
    """In a worker: the verdicts of the gates ``ids`` of package ``key`` for ``target``."""
    assert _WORKER_STATE is not None
    workspace, gates = _WORKER_STATE
    ctx = _WORKER_CONTEXTS.get((key, target))
    if ctx is None:
        paths = sorted(workspace.files(*key))
        store = _WORKER_STORES.get(key)
        if store is None:
            store = _WORKER_STORES[key] = FileStore(paths, functools.partial(workspace.read, *key))
        ctx = _WORKER_CONTEXTS[(key, target)] = _build_context(store, paths, gates[key], target)
    by_id = _WORKER_BY_ID.get(key)
    if by_id is None:  # once per package in this worker, not once per run
        by_id = _WORKER_BY_ID[key] = {g.id: g for g in gates[key]}
    found = _judge_all([by_id[i] for i in ids], target, ctx.fresh(), NullObserver())
    _WORKER_RUN_DONE()
    return found


def _judge_runs(key: _PackageKey, target: Arch, runs: list[list[str]]) -> list[Verdict]:
    """In a worker: the verdicts of consecutive runs of package ``key`` for ``target`` (a
    `_bundles` bundle), each run judged as `_judge_chunk` judges it alone."""
    found: list[Verdict] = []
    for ids in runs:
        found.extend(_judge_chunk(key, target, ids))
    return found


def _bundles(sizes: Sequence[Sequence[int]], jobs: int) -> list[list[int]]:
    """How many consecutive runs each bundle takes, per (package, target) whose runs hold
    ``sizes`` gates: each pair's runs cut in about ``jobs`` times its share of all the gates
    (at least one bundle, at most one per run), of near-equal numbers of gates.

    A worker judging a run first builds the package's context for the target and parses the files
    its gates read; runs handed to whichever worker is free made every worker do that for every
    package. For the 2,171 gates judged after FlashInfer + SGLang's Python detector at ``-j 2``,
    the two workers worked 16.2 s that way, and 11.6 s with one package each (7.5 s and 4.1 s)."""
    total = sum(sum(runs) for runs in sizes) or 1
    out: list[list[int]] = []
    for runs in sizes:
        gates = sum(runs)
        count = max(1, min(len(runs), round(jobs * gates / total)))
        counts: list[int] = []
        taken = done = 0
        for k in range(count):
            goal = gates * (k + 1) / count  # gates judged by the end of bundle k
            start = taken
            # at least one run each, and enough left for the bundles after this one
            while taken < len(runs) - (count - k - 1) and (taken == start or done + runs[taken] / 2 <= goal):
                done += runs[taken]
                taken += 1
            counts.append(taken - start)  # the last bundle's goal is every gate: it takes the rest
        out.append(counts)
    return out


def _judge_in_pool(
    plan: Sequence[tuple[_PackageKey, list[Gate], list[tuple[Arch, list[Gate]]]]],
    workspace: Workspace,
    jobs: int,
    observer: Observer,
) -> dict[tuple[_PackageKey, Arch], list[Verdict]] | None:
    """`judge_report`'s work in ``jobs`` processes: each (package, target)'s runs of gates
    (`_runs`), in bundles of consecutive runs (`_bundles`), each bundle judged in whichever
    worker is free and each run with a fresh region analyser (a worker keeps only what is pure: the
    files it lexed, the package's indexes), then put back in order. A verdict depends only on its
    run, so the result is the one-process one whatever ``jobs`` is. None when a worker died."""
    return _Submitted(plan, workspace, jobs, bundled=True).collect(observer)


class _Submitted:
    """A plan's runs submitted to a pool of judging processes of its own: each run alone, or, with
    ``bundled``, in bundles of consecutive runs (`_bundles`; `drop_waiting` then drops bundles)."""

    def __init__(
        self,
        plan: Sequence[tuple[_PackageKey, list[Gate], list[tuple[Arch, list[Gate]]]]],
        workspace: Workspace,
        jobs: int,
        bundled: bool = False,
    ) -> None:
        from concurrent.futures import Future, ProcessPoolExecutor

        keys = {key for key, _, _ in plan}
        files = Workspace.from_files({key: workspace.files(*key) for key in keys})
        gates = {key: pkg_gates for key, pkg_gates, _ in plan}
        self._todos = {(key, target): todo for key, _, work in plan for target, todo in work}
        self._pool = ProcessPoolExecutor(
            max_workers=jobs, initializer=_judge_worker_init, initargs=(files, gates)
        )
        # Per (package, target), in the plan's order: each run's (or bundle's) size and its verdicts to come.
        self._futures: dict[tuple[_PackageKey, Arch], list[tuple[int, Future[list[Verdict]]]]] = {}
        runs = {pair: [[g.id for g in run] for run in _runs(todo)] for pair, todo in self._todos.items()}
        if bundled:
            counts = _bundles([[len(run) for run in pair_runs] for pair_runs in runs.values()], jobs)
        else:
            counts = [[1] * len(pair_runs) for pair_runs in runs.values()]
        try:
            for (pair, pair_runs), pair_counts in zip(runs.items(), counts, strict=True):
                futures = self._futures[pair] = []
                start = 0
                for count in pair_counts:
                    bundle = pair_runs[start : start + count]
                    start += count
                    size = sum(len(ids) for ids in bundle)
                    futures.append((size, self._pool.submit(_judge_runs, pair[0], pair[1], bundle)))
        except BaseException:  # a process could not start: let go of those that did
            self.cancel()
            raise

    def drop_waiting(self) -> None:
        """Drop the runs no worker has started, so that `pair` hands over those judged (or under
        way) and leaves the rest, whole runs, to whoever calls it. The pool starts runs in the
        order they were submitted, and they are dropped from the last back to the first one that
        has started: what is dropped is a suffix of the submission order, and so of each
        (package, target)'s runs."""
        for _, future in reversed([item for runs in self._futures.values() for item in runs]):
            if not future.cancel():
                break  # started (or done): so are all submitted before it

    def pair(
        self, pair: tuple[_PackageKey, Arch], observer: Observer | None = None
    ) -> tuple[list[Verdict], int] | None:
        """One (package, target)'s verdicts, in its gates' order, once its runs that were not
        dropped (`drop_waiting`) are judged, and how many of its gates the dropped runs hold (the
        last ones of its runs); None when a worker died. Whatever else stops it (an interrupt, a
        bug) stops the pool too."""
        from concurrent.futures.process import BrokenProcessPool

        observer = observer or NullObserver()
        found: list[Verdict] = []
        dropped = 0
        try:
            for size, future in self._futures[pair]:
                if future.cancelled():
                    dropped += size
                    continue
                if dropped:  # a run judged after one dropped: not a suffix (never, as they are dropped)
                    return None
                found.extend(future.result())
                observer.advance(size)
        except BrokenProcessPool:  # a worker died (memory)
            self.cancel()
            return None
        except BaseException:  # the runs not started are not run
            self.cancel()
            raise
        return _in_order(found, self._todos[pair]), dropped

    def collect(self, observer: Observer) -> dict[tuple[_PackageKey, Arch], list[Verdict]] | None:
        """Every (package, target)'s verdicts (`pair`); None when a worker died (the caller then
        judges everything itself)."""
        out: dict[tuple[_PackageKey, Arch], list[Verdict]] = {}
        for pair in self._futures:
            found = self.pair(pair, observer)
            if found is None:
                return None
            out[pair] = found[0]  # nothing is dropped from a pool of the judge's own
        self._pool.shutdown()
        return out

    def cancel(self) -> None:
        """Runs not started are dropped; the workers end after those under way."""
        self._pool.shutdown(wait=False, cancel_futures=True)


class JudgeAhead:
    """The CUDA preprocessor gates' verdicts, judged in processes of their own while a scan goes
    on (`liftgate.scan.scan`'s ``judge_ahead``): those gates are final once the C-family detector
    ends, and the Python detector, the scan's longest phase, runs minutes after it on one core.

    They are judged in the runs `judge_report` would cut (`_runs`: the CUDA gates' runs apart
    from the others'), with the package's CUDA gates as its context, so each verdict is the one
    the judge would reach. `take` hands a package's verdicts for a target over only if its CUDA
    gates and its CUDA gates to judge are still exactly these, and nothing otherwise: the judge
    then judges them itself."""

    def __init__(
        self, gates: Iterable[Gate], targets: Sequence[Arch], workspace: Workspace, jobs: int
    ) -> None:
        by_package: dict[_PackageKey, list[Gate]] = {}
        for gate in gates:
            if gate.kind is GateKind.CUDA_PP:
                by_package.setdefault((gate.location.package, gate.location.version), []).append(gate)
        self._cuda: dict[_PackageKey, list[Gate]] = {}
        self._todos: dict[tuple[_PackageKey, Arch], list[Gate]] = {}
        plan: list[tuple[_PackageKey, list[Gate], list[tuple[Arch, list[Gate]]]]] = []
        for key in workspace.package_keys():
            cuda = sorted(by_package.get(key, ()), key=lambda g: (g.location.path, g.location.span.start))
            if not cuda:
                continue
            self._cuda[key] = cuda
            by_id = {g.id: g for g in cuda}
            work: list[tuple[Arch, list[Gate]]] = []
            for target in targets:
                todo = _to_judge(cuda, target, by_id, None)
                if todo:
                    self._todos[(key, target)] = todo
                    work.append((target, todo))
            if work:
                plan.append((key, cuda, work))
        self._submitted = _Submitted(plan, workspace, max(1, jobs)) if plan else None
        self._stopped = False
        if self._submitted is not None:  # a report dropped unjudged stops its judging
            weakref.finalize(self, self._submitted.cancel)

    def drop_waiting(self) -> None:
        """Judge no run that has not started: the judge, with every job, judges those itself.
        Called when the judge starts. When the Python detector ended before the CUDA gates were
        all judged, the rest would otherwise wait for these processes, one job fewer than the
        judge's (the Python detector's process held one)."""
        if self._submitted is not None and not self._stopped:
            self._submitted.drop_waiting()

    def take(
        self, key: _PackageKey, target: Arch, pkg_gates: Sequence[Gate], todo: Sequence[Gate]
    ) -> tuple[list[Verdict], int] | None:
        """The verdicts of the CUDA gates of ``todo`` (the package's gates to judge for
        ``target``) that were judged ahead, and how many of those CUDA gates are left to judge: the
        last ones, whole runs, which `drop_waiting` dropped. None where they are not the ones
        judged ahead, its processes failed or it was stopped. It waits for this pair's runs only:
        those of a package whose verdicts the cache holds are never waited for, and `cancel`
        drops them."""
        if self._stopped:
            return None
        if [g for g in pkg_gates if g.kind is GateKind.CUDA_PP] != self._cuda.get(key, []):
            return None
        if [g for g in todo if g.kind is GateKind.CUDA_PP] != self._todos.get((key, target), []):
            return None
        if (key, target) not in self._todos:
            return [], 0  # no CUDA gate of it to judge, ahead or after
        assert self._submitted is not None
        found = self._submitted.pair((key, target))
        if found is None:
            self._stopped = True
        return found

    def cancel(self) -> None:
        """Stop judging (what is not taken is not needed): its processes end, and `take` hands
        nothing over from now on."""
        self._stopped = True
        if self._submitted is not None:
            self._submitted.cancel()


def _reached(gate: Gate, target: Arch, by_id: dict[str, Gate]) -> bool:
    """Whether ``target`` reaches ``gate`` at all: every gate enclosing it admits the target (an
    ``#ifndef`` inside ``#if __CUDA_ARCH__ == 900`` admits nothing to sm_120, whatever it says)."""
    return all(by_id[outer].status(target) is Status.ADMITTED for outer in gate.enclosing if outer in by_id)


# The kinds whose admitted path the judge reads: the region a CUDA gate keeps, the sources a build
# filter or arch list builds, the host branch, the JIT modules a Python branch builds.
ADMITTED_KINDS = frozenset(
    {GateKind.CUDA_PP, GateKind.PY_BUILD, GateKind.CMAKE, GateKind.CPP_RUNTIME, GateKind.PY_RUNTIME}
)


def judge_admitted(gate: Gate, target: Arch, ctx: PackageContext) -> Verdict | None:
    """For a target ``gate`` admits: an ``unsafe`` verdict when the path it lets the target into uses
    a feature the target lacks (the same region analysis and catalog as for an excluded target, on
    the code as the target compiles it: nested gates that still keep it out are left out), None
    when nothing it uses is missing or it could not be read (an admission is not a finding)."""
    if gate.switches and not gate.admitted:
        return None  # a switch off by default lets nobody in
    found = judge_gate(gate, target, ctx, admitted=True)
    if found.kind is not VerdictKind.BLOCKED:
        return None
    catalog = {f.id: f for f in load_catalog()}
    lacking = {u.feature for u in found.missing}
    if gate.kind is not GateKind.CUDA_PP and any(
        arch.cc == target.cc and all(arch in catalog[f].archs for f in lacking) for arch in gate.admitted
    ):
        # A build or a device check that admits a variant of the target's capability which has
        # every missing feature (FlashInfer's JIT compiles sm_100a for a 10.0 device): the build
        # for that device can have them. Only a preprocessor gate compiles for exactly the target.
        return None
    head = (
        f"{target.name} is admitted here, but the path it gets uses what it lacks: a build failure or an "
        "illegal instruction, not a fallback"
    )
    reasons = tuple(r for r in found.reasons if "judge with --target" not in r)
    variant = _variant_with(lacking, target, catalog)
    if variant is not None:
        reasons += (f"fine for {variant.name}, which has all of these",)
    return replace(found, kind=VerdictKind.UNSAFE, reasons=(head, *reasons), hazards=())


def judge_scan(
    report: Report,
    only: Callable[[Gate], bool] | None = None,
    observer: Observer | None = None,
    jobs: int | None = None,
) -> Report:
    """``report`` with a verdict for every gate that excludes one of its targets (``scan --judge``);
    ``only`` chooses which gates are judged, ``jobs`` how many processes judge them. Needs the
    report's workspace (`liftgate.scan` sets it)."""
    if not report.targets:
        return report
    workspace = report.files("the judge")
    observer = observer or NullObserver()
    ahead = report.judge_ahead if isinstance(report.judge_ahead, JudgeAhead) else None
    try:
        verdicts = judge_report(
            report.gates,
            report.target_archs(),
            workspace,
            only=only,
            observer=observer,
            cache_root=report.cache_root,
            jobs=jobs,
            ahead=ahead,
        )
    finally:
        observer.finish()
    return replace(report, verdicts=(*report.verdicts, *verdicts), judge_ahead=None)
