"""Gates across two releases (or environments): "has upstream already opened this?"

Gates are matched by identity first (`liftgate.model.gate_id`: package, path, normalised
condition, scope, occurrence — no line numbers) when they gate the same thing
(`liftgate.evaluate.feature_of`: a build gate's JIT module or CMake target). A gate whose condition
changed has a new id, so the ones left are matched by what they build (the same JIT module in both
releases, wherever it moved), then within the same file and kind: at the same line, then in order
of appearance (difflib's alignment of the two files' gate sequences). Admitted sets are read in the
feature's direction (a deny-list guard admits what it lets through), so for each target a matched
gate is ``opened`` (the path became available), ``closed`` (it no longer is), ``changed`` (its
condition or admitted set changed, not for this target) or unchanged; the rest are ``added`` or
``removed``. Pure: two reports in, rows out.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Sequence
from dataclasses import dataclass

from liftgate.arch.core import Arch
from liftgate.evaluate import feature_of
from liftgate.model import Gate, Report, Status


class ChangeKind(str, enum.Enum):
    """What happened to a gate between two scans, for one target."""

    OPENED = "opened"  # it now admits the target
    CLOSED = "closed"  # it no longer does
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"  # its condition or admitted set changed, not for this target
    UNCHANGED = "unchanged"


CHANGES = (ChangeKind.OPENED, ChangeKind.CLOSED, ChangeKind.ADDED, ChangeKind.REMOVED, ChangeKind.CHANGED)


@dataclass(frozen=True, slots=True)
class GateChange:
    change: ChangeKind
    target: Arch
    before: Gate | None
    after: Gate | None
    matched_by: str  # "id", "feature", "line", "order", or "" for added/removed

    @property
    def gate(self) -> Gate:
        g = self.after or self.before
        assert g is not None
        return g


def _built(g: Gate) -> bool:
    return feature_of(g) != g.location.path


def _feature_key(g: Gate) -> tuple[str, str, str]:
    return (g.location.package.lower(), g.kind.value, feature_of(g))


def _file_key(g: Gate) -> tuple[str, str, str]:
    return (g.location.package.lower(), g.location.path, g.kind.value)


def match(
    before: Sequence[Gate], after: Sequence[Gate]
) -> tuple[list[tuple[Gate, Gate, str]], list[Gate], list[Gate]]:
    """(matched pairs with how, only in ``before``, only in ``after``)."""
    by_id = {g.id: g for g in after}
    pairs: list[tuple[Gate, Gate, str]] = []
    left: list[Gate] = []
    used: set[str] = set()
    for g in before:
        other = by_id.get(g.id)
        if other is not None and other.id not in used and feature_of(other) == feature_of(g):
            pairs.append((g, other, "id"))
            used.add(other.id)
        else:
            left.append(g)
    right = [g for g in after if g.id not in used]
    # What a build gate builds names it better than its text: the same JIT module or CMake target in
    # both releases is the same gate, wherever it moved and whatever its arch list became.
    by_feature_l: dict[tuple[str, str, str], list[Gate]] = {}
    by_feature_r: dict[tuple[str, str, str], list[Gate]] = {}
    for g in left:
        if _built(g):
            by_feature_l.setdefault(_feature_key(g), []).append(g)
    for g in right:
        if _built(g):
            by_feature_r.setdefault(_feature_key(g), []).append(g)
    paired: set[int] = set()
    for key in sorted(set(by_feature_l) & set(by_feature_r)):
        for old, new in zip(by_feature_l[key], by_feature_r[key], strict=False):
            pairs.append((old, new, "feature"))
            paired |= {id(old), id(new)}
    left = [g for g in left if id(g) not in paired]
    right = [g for g in right if id(g) not in paired]
    groups_l: dict[tuple[str, str, str], list[Gate]] = {}
    groups_r: dict[tuple[str, str, str], list[Gate]] = {}
    for g in left:
        groups_l.setdefault(_file_key(g), []).append(g)
    for g in right:
        groups_r.setdefault(_file_key(g), []).append(g)
    removed: list[Gate] = []
    added: list[Gate] = []
    for key in sorted(set(groups_l) | set(groups_r)):
        a = sorted(groups_l.get(key, []), key=lambda g: g.location.line)
        b = sorted(groups_r.get(key, []), key=lambda g: g.location.line)
        at_line = {g.location.line: g for g in b}
        rest_a = []
        for g in a:
            other = at_line.pop(g.location.line, None)
            if other is not None and other.directive == g.directive:
                pairs.append((g, other, "line"))
            else:
                if other is not None:
                    at_line[g.location.line] = other
                rest_a.append(g)
        rest_b = sorted(at_line.values(), key=lambda g: g.location.line)
        sig_a = [g.directive for g in rest_a]
        sig_b = [g.directive for g in rest_b]
        taken_a: set[int] = set()
        taken_b: set[int] = set()
        for block in difflib.SequenceMatcher(a=sig_a, b=sig_b, autojunk=False).get_matching_blocks():
            for k in range(block.size):
                pairs.append((rest_a[block.a + k], rest_b[block.b + k], "order"))
                taken_a.add(block.a + k)
                taken_b.add(block.b + k)
        removed += [g for i, g in enumerate(rest_a) if i not in taken_a]
        added += [g for i, g in enumerate(rest_b) if i not in taken_b]
    return pairs, removed, added


def diff(before: Report, after: Report, targets: Sequence[Arch]) -> list[GateChange]:
    pairs, removed, added = match(before.gates, after.gates)
    out: list[GateChange] = []
    for target in targets:
        for a, b, how in pairs:
            was, now = a.status(target), b.status(target)
            if was is not Status.ADMITTED and now is Status.ADMITTED:
                change = ChangeKind.OPENED
            elif was is Status.ADMITTED and now is not Status.ADMITTED:
                change = ChangeKind.CLOSED
            elif a.condition != b.condition or a.admitted != b.admitted or a.unknown != b.unknown:
                change = ChangeKind.CHANGED
            else:
                change = ChangeKind.UNCHANGED
            out.append(GateChange(change, target, a, b, how))
        out += [GateChange(ChangeKind.REMOVED, target, g, None, "") for g in removed]
        out += [GateChange(ChangeKind.ADDED, target, None, g, "") for g in added]
    out.sort(
        key=lambda c: (
            c.target.sort_key(),
            CHANGES.index(c.change) if c.change in CHANGES else 9,
            c.gate.location.path,
            c.gate.location.line,
        )
    )
    return out


def summary_text(changes: Sequence[GateChange]) -> str:
    """``sm_120: 13 opened, 2 changed; sm_90: 1 closed``: each target once, its counts in `CHANGES`
    order (``unchanged`` last), targets in the order of the changes (`diff` sorts them); empty for none."""
    order = [*CHANGES, ChangeKind.UNCHANGED]
    per_target: dict[str, dict[ChangeKind, int]] = {}
    for change in changes:
        counts = per_target.setdefault(change.target.name, {})
        counts[change.change] = counts.get(change.change, 0) + 1
    parts = []
    for target, counts in per_target.items():
        ordered = sorted(counts, key=order.index)
        parts.append(f"{target}: " + ", ".join(f"{counts[kind]:,} {kind.value}" for kind in ordered))
    return "; ".join(parts)
