"""Evaluate a gate for one target: admitted, excluded or unknown, with the reason in words; and what
that means for the target, read in the direction of the path the gate guards (`Outcomes`)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from liftgate.arch.core import Arch, ArchSet, universe
from liftgate.model import (
    ElseKind,
    Finding,
    Gate,
    GateKind,
    Outcome,
    Reading,
    Report,
    Status,
    Verdict,
    VerdictKind,
)


def evaluate(gate: Gate, target: Arch) -> Finding:
    status = gate.status(target)
    if status is Status.ADMITTED:
        reason = f"condition is true for {target.name}"
    elif status is Status.UNKNOWN:
        parts = ", ".join(gate.depends_on) or "something liftgate cannot see"
        reason = f"for {target.name} the condition depends on {parts}"
    else:
        reason = f"condition is false for {target.name}"
    return Finding(gate=gate, target=target, status=status, reason=reason)


LOSSES = frozenset({Outcome.FALLBACK, Outcome.SHUT_OUT, Outcome.OFF})


def feature_of(gate: Gate) -> str:
    """What a gate's path serves, for grouping losses: the JIT module, extension or CMake target a
    build gate builds (``JIT module trtllm_comm``), else the file the gated code is in."""
    if gate.kind in (GateKind.PY_BUILD, GateKind.CMAKE):
        for build in gate.builds:
            if build.name and _NAME.fullmatch(build.name):  # not an arch list a CMake block is built for
                return f"{build.what} {build.name}"
    return gate.location.path


_NAME = re.compile(r"[A-Za-z_][\w.+-]*")


def _runs_elsewhere(gate: Gate, target: Arch) -> bool:
    """A binary's compiled unit that ``target`` has no image for runs on some other target: its
    kernels are lost to ``target`` (no target need run every unit of a library for that)."""
    coverage = gate.coverage
    if coverage is None:
        return False
    return any(not u.empty and not u.runs(target) and (u.native or u.ptx_jit) for u in coverage.units)


def _oldest(archs: ArchSet) -> tuple[int, int] | None:
    # The universe is ordered old to new (`Arch.sort_key`): the lowest bit is the oldest target.
    # Read from the mask, not by iterating the set: every gate's outcome asks, on every report.
    mask = archs.mask
    return universe()[(mask & -mask).bit_length() - 1].cc if mask else None


def _newest(archs: ArchSet) -> tuple[int, int] | None:
    mask = archs.mask
    return universe()[mask.bit_length() - 1].cc if mask else None


# (gates, verdicts, outcomes) of the last report `Outcomes.of_report` was asked for.
_LAST_REPORT: list[tuple[tuple[Gate, ...], tuple[Verdict, ...], Outcomes]] = []


class Outcomes:
    """Each gate's outcome per target, read from the gates' facts (never from evidence text).

    A gate's ``admitted`` set holds the targets that get the path it guards (for a guard, the code
    after it). A target it leaves out:

    * takes another branch of the same dispatch (`Gate.dispatch`, the first branch in source order
      that admits it): an **alternative** when that branch was written for the same or newer GPUs
      (its oldest admitted target is not older than the gate's), else a **fallback**;
    * is one of the targets a switch would let in (`Gate.switches`): **off** until it is set;
    * otherwise takes what the gate leaves to everyone it does not admit: when every such target
      is newer than every target the gate admits, the gate guards a path for older GPUs that newer
      ones skip (an **alternative**); else an error or trap (**shut out**), another implementation
      (**fallback**), or nothing (**shut out**).

    A **loss** is a fallback or a shut-out while some other target gets the path, or a switch that
    would give the target the path; never inside an enclosing gate that keeps the target out, nor
    under build flags that only builds the target never gets pass (the loss is counted at the CMake
    or py-build gates that pass them: `_not_built`). Given
    the judge's verdicts, a target a gate admits into code that uses what it lacks is **unsafe**.
    """

    def __init__(self, gates: Iterable[Gate], verdicts: Iterable[Verdict] = ()) -> None:
        # A target a gate admits into code that uses what it lacks (the judge's `unsafe`).
        self._unsafe = {(v.gate_id, v.target): v for v in verdicts if v.kind is VerdictKind.UNSAFE}
        branches: dict[tuple[str, str | None, str, int], list[Gate]] = defaultdict(list)
        gates = list(gates)
        self._by_id = {g.id: g for g in gates}
        for gate in gates:
            if gate.dispatch is not None:
                loc = gate.location
                branches[(loc.package, loc.version, loc.path, gate.dispatch)].append(gate)
        self._branches = {
            key: sorted(group, key=lambda g: (g.location.span.start, g.id)) for key, group in branches.items()
        }
        self._memo: dict[tuple[str, Arch], Reading] = {}

    @classmethod
    def of_report(cls, report: Report) -> Outcomes:
        """The outcomes of ``report``'s gates, shared by everything that renders the same report (the
        summary line, the selection and the table or JSON each read every gate's outcome; reading
        them once matters on a warm scan of thousands of gates). Keyed by the identity of the
        report's gate and verdict tuples, which a report never changes (it is frozen); the last one
        only is kept."""
        for gates, verdicts, outcomes in _LAST_REPORT:
            if gates is report.gates and verdicts is report.verdicts:
                return outcomes
        outcomes = cls(report.gates, report.verdicts)
        _LAST_REPORT[:] = [(report.gates, report.verdicts, outcomes)]
        return outcomes

    def _siblings(self, gate: Gate) -> list[Gate]:
        if gate.dispatch is None:
            return []
        loc = gate.location
        return [
            g
            for g in self._branches.get((loc.package, loc.version, loc.path, gate.dispatch), [])
            if g.id != gate.id
        ]

    def of(self, gate: Gate, target: Arch) -> Reading:
        key = (gate.id, target)
        found = self._memo.get(key)
        if found is None:
            found = self._read(gate, target)
            outer = self._keeps_out(gate, target)
            if outer is not None and found.loss:
                # Inside a gate that keeps the target out: it never gets this far, nothing is lost here.
                found = Reading(
                    found.gate_id,
                    target,
                    found.outcome,
                    False,
                    f"{found.text}; not reached: the enclosing gate {outer} keeps {target.name} out",
                    found.via,
                )
            builders = self._not_built(gate, target) if outer is None and found.loss else None
            if builders:
                # Code under build flags whose every passing build leaves the target out: the loss
                # is theirs (counted at those gates), not this #if's as well.
                found = Reading(
                    found.gate_id,
                    target,
                    found.outcome,
                    False,
                    f"{found.text}; not reached: only builds that {', '.join(builders)} keep "
                    f"{target.name} out of pass the flags it tests",
                    found.via,
                )
            self._memo[key] = found
        return found

    def _keeps_out(self, gate: Gate, target: Arch) -> str | None:
        for outer in gate.enclosing:
            other = self._by_id.get(outer)
            if other is not None and target not in other.admitted and target not in other.unknown:
                return outer
        return None

    def _not_built(self, gate: Gate, target: Arch) -> list[str]:
        """The build gates (CMake, py-build) that pass the flags a cuda-pp gate tests, when every one
        keeps ``target`` out and the gate admits only targets some of them let in: the code is
        compiled only in builds the target never gets, so its loss is counted at those gates."""
        flagged = tuple(dict.fromkeys(m.build_gate for m in gate.macros if m.build_gate is not None))
        if not flagged or gate.kind is not GateKind.CUDA_PP:
            return []
        reach = ArchSet.none()
        for gid in flagged:
            builder = self._by_id.get(gid)
            if builder is None:
                return []
            reach = reach | builder.admitted | builder.unknown
        if target in reach or not (gate.admitted | gate.unknown).issubset(reach):
            return []
        return list(flagged)

    def losses(self, gate: Gate, targets: Iterable[Arch]) -> list[Reading]:
        return [r for r in (self.of(gate, t) for t in targets) if r.loss]

    def _read(self, gate: Gate, target: Arch) -> Reading:
        name = target.name

        def reading(outcome: Outcome, text: str, via: str | None = None) -> Reading:
            loss = outcome in LOSSES and (
                bool(gate.admitted) or outcome is Outcome.OFF or _runs_elsewhere(gate, target)
            )
            return Reading(gate.id, target, outcome, loss, text, via)

        if target in gate.admitted:
            unsafe = self._unsafe.get((gate.id, target))
            if unsafe is not None:
                lacks = ", ".join(dict.fromkeys(u.feature for u in unsafe.missing)) or "a feature"
                return reading(Outcome.UNSAFE, f"{name} gets the path, which uses what it lacks: {lacks}")
            return reading(Outcome.GETS, f"{name} gets the path it guards")
        if target in gate.unknown:
            parts = ", ".join(gate.depends_on) or "something liftgate cannot see"
            return reading(Outcome.UNKNOWN, f"whether {name} gets it depends on {parts}")
        for switch in gate.switches:
            if target in switch.admitted or target in switch.unknown:
                return reading(Outcome.OFF, f"off unless {switch.setting}; with it set, {name} would get it")
        siblings = self._siblings(gate)
        for other in siblings:
            where = f"the branch at line {other.location.line} (`{other.condition}`)"
            if target in other.unknown:
                return reading(
                    Outcome.UNKNOWN,
                    f"{name} may take {where}, which depends on what liftgate cannot see",
                    other.id,
                )
            if target in other.admitted:
                theirs, ours = _oldest(other.admitted), _oldest(gate.admitted)
                if ours is None or (theirs is not None and theirs >= ours):
                    return reading(
                        Outcome.ALTERNATIVE,
                        f"{name} takes {where}, written for the same or newer GPUs",
                        other.id,
                    )
                return reading(
                    Outcome.FALLBACK, f"{name} takes {where}, written for older GPUs than this path", other.id
                )
        rest = gate.excluded
        for other in siblings:
            rest = rest - other.admitted - other.unknown
        newest, oldest_left = _newest(gate.admitted), _oldest(rest)
        # A guard (raise, deny-list), an error or trap, a build list or a binary shuts newer GPUs out
        # on purpose or by omission: only a plain branch can be a path older GPUs need and newer skip.
        plain = (
            gate.kind in (GateKind.CUDA_PP, GateKind.PY_RUNTIME, GateKind.CPP_RUNTIME)
            and gate.else_kind is not ElseKind.ERROR
            and not (gate.then_span is None and gate.else_span is not None)
        )
        if plain and newest is not None and oldest_left is not None and oldest_left > newest:
            return reading(
                Outcome.ALTERNATIVE,
                f"a path for older GPUs only: every target it leaves out is newer than those it admits, {name} included",
            )
        if gate.kind is GateKind.BINARY:
            if gate.coverage is not None and gate.coverage.units:
                from liftgate.detect.binary import coverage_text

                return reading(Outcome.SHUT_OUT, coverage_text(gate.coverage, target))
            return reading(Outcome.SHUT_OUT, f"no kernel image {name} can run")
        if gate.else_kind is ElseKind.ERROR:
            return reading(
                Outcome.SHUT_OUT, f"{name} hits an error instead (a raise, #error, static_assert or trap)"
            )
        if gate.else_kind is ElseKind.FALLBACK:
            return reading(
                Outcome.FALLBACK, f"{name} takes the other branch, which the targets it admits are spared"
            )
        return reading(Outcome.SHUT_OUT, f"left out for {name} with nothing in its place")
