"""Gate chains: every gate that must be lifted together for one user-facing feature.

`liftgate.chain.callgraph` resolves Python calls across the scanned packages,
`liftgate.chain.links` follows a root gate through calls, JIT build filters, their sources and
includes to the gates behind it, and `liftgate.chain.view` says, for one target, which of those
gates shut it out and what the weakest link decides. ``liftgate explain GATE --chain``,
``liftgate scan --by chain`` and ``liftgate lift --chain GATE`` use the functions below.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from liftgate.arch.core import Arch
from liftgate.chain.links import ROOT_KINDS, ChainContext, chain_roots
from liftgate.chain.view import ChainView, view
from liftgate.model import Chain, Gate, Report, Status, Verdict, VerdictKind
from liftgate.sources.interface import NullObserver, Observer
from liftgate.sources.workspace import Workspace

__all__ = [
    "ChainContext",
    "ChainView",
    "chains_for_report",
    "chains_of_gate",
    "containing",
    "find_chains",
    "judge_members",
    "listed_chains",
    "view",
]


def chains_for_report(
    gates: Sequence[Gate],
    targets: Sequence[Arch],
    workspace: Workspace,
    context: ChainContext | None = None,
    unsafe: Iterable[str] = (),
) -> list[Chain]:
    """The chain of every gate that can start one (a Python runtime gate, a build filter, a CMake
    arch list) and shuts out at least one of ``targets``, or is one of the ``unsafe`` admissions."""
    ctx = context or ChainContext(gates, workspace)
    loose = set(unsafe)

    def excludes(gate: Gate) -> bool:
        return gate.id in loose or any(gate.status(t) is not Status.ADMITTED for t in targets)

    return ctx.chains(chain_roots(gates, excludes))


def listed_chains(
    chains: Iterable[Chain],
    gates: Mapping[str, Gate],
    targets: Sequence[Arch],
    verdicts: Mapping[tuple[str, Arch], Verdict],
) -> list[Chain]:
    """The chains worth showing: at least two gates to lift together for some target, or a member
    that admits one unsafely, and not already part of a longer chain (a build filter's chain inside the chain of the Python gate
    that reaches it)."""
    kept = [
        c
        for c in chains
        if any(
            len(seen.required) >= 2 or seen.unsafe for seen in (view(c, gates, t, verdicts) for t in targets)
        )
    ]
    return _maximal(kept)


def _maximal(chains: Sequence[Chain]) -> list[Chain]:
    """Chains that no other chain holds whole (a filter's chain is held by the chain of the Python
    gate that reaches it; a guard reached as a precondition of another root keeps its own chain)."""
    sets = [set(c.gate_ids) for c in chains]
    return [
        c
        for i, c in enumerate(chains)
        if not any(
            j != i and sets[i] <= sets[j] and (sets[i] != sets[j] or j < i) for j in range(len(chains))
        )
    ]


def containing(chains: Iterable[Chain], gate_id: str) -> list[Chain]:
    """The chains ``gate_id`` belongs to, its own (as root) first."""
    found = [c for c in chains if gate_id in c.gate_ids]
    return sorted(found, key=lambda c: c.root_id != gate_id)


def chains_of_gate(
    gate_id: str,
    gates: Sequence[Gate],
    targets: Sequence[Arch],
    workspace: Workspace,
    reaching: bool = True,
) -> list[Chain]:
    """The chains ``gate_id`` belongs to: its own, when it can start one, then every chain of the
    scan (from the roots that shut a target out) that reaches it. ``reaching=False`` stops at its
    own chain when it has one (every root's chain is the costly part)."""
    ctx = ChainContext(gates, workspace)
    gate = ctx.gate(gate_id)
    found = [ctx.chain(gate_id)] if gate is not None and gate.kind in ROOT_KINDS else []
    if found and not reaching:
        return found
    others = [
        c
        for c in chains_for_report(gates, targets, workspace, ctx)
        if c.root_id != gate_id and gate_id in c.gate_ids and len(c.links) > 1
    ]
    # A chain held whole by a longer one (a filter's, inside the chain of the Python gate that
    # reaches it) is part of that one: keep the longest.
    return found + _maximal(others)


def judge_members(
    chains: Iterable[Chain],
    gates: Sequence[Gate],
    targets: Sequence[Arch],
    workspace: Workspace,
    already: Iterable[Verdict] = (),
) -> list[Verdict]:
    """Verdicts for the chains' gates that ``already`` lacks: for the targets they shut out, and
    ``unsafe`` where one admits a target into code using what it lacks (the judge gives nothing
    for a safe admission): what the combined verdict and the chain's unsafe members need."""
    from liftgate.judge.verdict import judge_report

    have = {(v.gate_id, v.target) for v in already}
    members = {g for c in chains for g in c.gate_ids}
    todo = {g for g in members if any((g, t) not in have for t in targets)}
    if not todo:
        return []
    return [
        v
        for v in judge_report(gates, targets, workspace, only=lambda g: g.id in todo)
        if (v.gate_id, v.target) not in have
    ]


def find_chains(report: Report, judge: bool = False, observer: Observer | None = None) -> Report:
    """``report`` with the gate chains that hold two gates or more to lift together for one of its
    targets (``scan --by chain``); with ``judge``, the chains' members get verdicts too (added to
    the report's). Needs the report's workspace (`liftgate.scan` sets it)."""
    if not report.targets:
        return report
    workspace = report.files("following chains")
    observer = observer or NullObserver()
    archs = report.target_archs()
    observer.start("following gate chains", total=None)
    try:
        unsafe = sorted({v.gate_id for v in report.verdicts if v.kind is VerdictKind.UNSAFE})
        every = chains_for_report(report.gates, archs, workspace, unsafe=unsafe)
        verdicts = list(report.verdicts)
        if judge:
            verdicts += judge_members(every, report.gates, archs, workspace, verdicts)
        index = {(v.gate_id, v.target): v for v in verdicts}
        found = listed_chains(every, {g.id: g for g in report.gates}, archs, index)
    finally:
        observer.finish()
    return replace(report, verdicts=tuple(verdicts), chains=tuple(found))
