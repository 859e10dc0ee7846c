"""A chain seen from one target: which of its gates must be lifted, and the combined verdict.

A link is *required* for a target when its gate shuts the target out. Not required: gates that
already admit it, and CUDA gates that admit an arch-specific variant of the target's capability
(``defined(__CUDA_ARCH_SPECIFIC__)`` admits ``sm_120a``): the build's variant decides those, not
the GPU, and lifting them for plain ``sm_120`` would be wrong.

The combined verdict is the weakest link's: ``blocked`` if any required gate is blocked, else
``unknown`` if any is unknown (or was not judged), else ``liftable``. A Python gate's own verdict
is best effort (`liftgate.judge.pyregion`); when the chain reaches the JIT module its code builds,
the module's gates speak for it, and its ``unknown`` does not count. Hazards that lifting the
whole chain resolves (a filter lifted without the CUDA gates that compile out
``griddepcontrol.wait``) are *covered*: they are the reason to lift the chain as one.

A chain can be too loose as well: a member that admits the target into code using what it lacks
(an ``unsafe`` verdict: the root lets sm_121 in, the JIT filter under it admits 12.x, the sources
use tcgen05) makes the chain unsafe for that target (``unsafe``, whatever is required of a lift).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from liftgate.arch.core import Arch
from liftgate.model import Chain, ChainLink, Gate, GateKind, Hazard, HazardKind, Status, Verdict, VerdictKind

_RANK = {VerdictKind.LIFTABLE: 0, VerdictKind.UNKNOWN: 1, VerdictKind.BLOCKED: 2, VerdictKind.UNSAFE: 3}


@dataclass(frozen=True, slots=True)
class ChainMember:
    link: ChainLink
    gate: Gate
    status: Status
    verdict: Verdict | None
    required: bool
    why_not: str | None = None  # why a link is not required for the target
    superseded: bool = False  # its own best-effort "unknown" gives way to the links found under it


@dataclass(frozen=True, slots=True)
class ChainView:
    chain: Chain
    target: Arch
    title: str
    members: tuple[ChainMember, ...]
    verdict: VerdictKind | None  # None: nothing in the chain shuts the target out
    weakest: tuple[str, ...]  # the gates that decide the verdict
    reasons: tuple[str, ...]
    hazards: tuple[Hazard, ...]  # not resolved by lifting the chain
    covered: tuple[Hazard, ...]  # resolved by lifting the chain together
    unsafe: tuple[str, ...] = ()  # members that admit the target into code using what it lacks
    unsafe_reasons: tuple[str, ...] = ()  # "ID: the missing feature and where it is used", per member
    unsafe_features: tuple[str, ...] = ()  # the features those members use and the target lacks

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(m.gate.id for m in self.members if m.required)


def title(chain: Chain, gates: Mapping[str, Gate]) -> str:
    """``_resolve_backend() in sglang/srt/layers/flashinfer_comm_fusion.py: builds JIT module "trtllm_comm"``."""
    root = gates[chain.root_id]
    where = f"{root.location.package}: {root.location.path}:{root.location.line}"
    modules = []
    for link in chain.links:
        gate = gates.get(link.gate_id)
        if gate is not None and gate.kind is GateKind.PY_BUILD:
            for build in gate.builds:
                if build.what == "JIT module" and build.name and build.name not in modules:
                    modules.append(build.name)
    built = f"; builds JIT module {', '.join(modules)}" if modules else ""
    return f"{where}{built}"


def _why_not(gate: Gate, target: Arch) -> str | None:
    status = gate.status(target)
    if status is Status.ADMITTED:
        return f"already admits {target.name}"
    if gate.kind is GateKind.CUDA_PP:
        variants = [a for a in gate.admitted if a.cc == target.cc and a != target]
        if variants:
            return (
                f"admits {', '.join(a.name for a in variants)}: the variant the build compiles decides it, not the GPU "
                f"(judge with --target {variants[0].name} if the build compiles it)"
            )
    return None


def view(
    chain: Chain, gates: Mapping[str, Gate], target: Arch, verdicts: Mapping[tuple[str, Arch], Verdict]
) -> ChainView:
    members: list[ChainMember] = []
    for link in chain.links:
        gate = gates.get(link.gate_id)
        if gate is None:
            continue
        why_not = _why_not(gate, target)
        members.append(
            ChainMember(
                link, gate, gate.status(target), verdicts.get((gate.id, target)), why_not is None, why_not
            )
        )
    required = [m for m in members if m.required]
    required_ids = {m.gate.id for m in required}
    parent_of = {m.gate.id: m.link.parent_id for m in members}
    above_required: set[str] = set()  # gates some required link descends from
    for m in required:
        parent = m.link.parent_id
        while parent is not None and parent not in above_required:
            above_required.add(parent)
            parent = parent_of.get(parent)
    worst: VerdictKind | None = None
    superseded: set[str] = set()
    weakest: list[str] = []
    reasons: list[str] = []
    for m in required:
        if m.verdict is None:
            kind, why = VerdictKind.UNKNOWN, "not judged"
        else:
            kind, why = m.verdict.kind, (m.verdict.reasons[0] if m.verdict.reasons else m.verdict.kind.value)
        if kind is VerdictKind.UNKNOWN and m.gate.kind is GateKind.PY_RUNTIME and m.gate.id in above_required:
            superseded.add(m.gate.id)
            continue  # its best-effort verdict is superseded by the links the chain found under it
        if worst is None or _RANK[kind] > _RANK[worst]:
            worst, weakest, reasons = kind, [m.gate.id], [f"{m.gate.id}: {why}"]
        elif kind is worst and kind is not VerdictKind.LIFTABLE:
            weakest.append(m.gate.id)
            reasons.append(f"{m.gate.id}: {why}")
    if worst is None and required:
        worst = VerdictKind.LIFTABLE
    if worst is VerdictKind.LIFTABLE:
        reasons = [f"every gate of the chain that shuts {target.name} out is liftable"]
        weakest = []
    hazards: list[Hazard] = []
    covered: list[Hazard] = []
    for m in required:
        for hazard in m.verdict.hazards if m.verdict else ():
            named = set(hazard.gates)
            own_silent = hazard.kind is HazardKind.SILENT_EXCLUSION and m.gate.kind is GateKind.CUDA_PP
            if own_silent or (named and named <= required_ids):
                if hazard not in covered:
                    covered.append(hazard)
            elif hazard not in hazards:
                hazards.append(hazard)
    if superseded:
        members = [replace(m, superseded=True) if m.gate.id in superseded else m for m in members]
    unsafe = [
        m
        for m in members
        if m.status is Status.ADMITTED and m.verdict is not None and m.verdict.kind is VerdictKind.UNSAFE
    ]
    unsafe_reasons = []
    for m in unsafe:
        assert m.verdict is not None
        lacking = [r for r in m.verdict.reasons if " lacks " in r]
        unsafe_reasons.append(f"{m.gate.id}: {(lacking or list(m.verdict.reasons) or ['unsafe'])[0]}")
    return ChainView(
        chain=chain,
        target=target,
        title=title(chain, gates),
        members=tuple(members),
        verdict=worst if required else None,
        weakest=tuple(weakest),
        reasons=tuple(reasons),
        hazards=tuple(hazards),
        covered=tuple(covered),
        unsafe=tuple(m.gate.id for m in unsafe),
        unsafe_reasons=tuple(unsafe_reasons),
        unsafe_features=tuple(
            dict.fromkeys(u.feature for m in unsafe if m.verdict for u in m.verdict.missing)
        ),
    )
