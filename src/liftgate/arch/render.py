"""Render an `ArchSet` for people: short, exact, and readable from old to new.

Reports show which targets a gate admits (``sm_90–sm_110 (all variants); not sm_120+``). The
rules, over the capabilities in the order of ``data/archs.json``:

- a capability is *full* when every variant of it is in the set, *partial* when only some are;
- consecutive full capabilities form a run, written ``sm_90–sm_110`` (en dash) or ``sm_90`` alone,
  followed by ``(all variants)`` when any capability in the run has variants beyond the baseline;
- a partial capability lists its members: ``sm_100a, sm_100f``;
- when the set stops before the newest capability, ``; not sm_120+`` names the first capability
  after the last member, so a reader never mistakes the end of a list for "and newer";
- the empty set is ``none``, the whole universe ``all``, and a set missing only one or two targets
  may read ``all except sm_90a`` when that is shorter.

`render_archset_long` lists every member instead.
"""

from __future__ import annotations

from typing import Any

from liftgate.arch.core import Arch, ArchSet, Capability, arch_data

__all__ = ["render_archset", "render_archset_long"]

EN_DASH = "\u2013"
# A set missing at most this many targets may be written "all except ...".
_EXCEPT_LIMIT = 2


def _name(cap: Capability, variant: str = "") -> str:
    return Arch(cap.major, cap.minor, variant).name


def _render_run(run: list[Capability]) -> str:
    text = _name(run[0]) if len(run) == 1 else f"{_name(run[0])}{EN_DASH}{_name(run[-1])}"
    if any(len(cap.variants) > 1 for cap in run):
        text += " (all variants)"
    return text


# (the arch data, mask -> text): listings render the same few sets for thousands of gates.
_RENDERED: list[Any] = [None, {}]


def render_archset(archs: ArchSet) -> str:
    """Compact rendering, e.g. ``sm_90–sm_110 (all variants); not sm_120+`` or ``sm_90a; not sm_100+``."""
    data = arch_data()
    if _RENDERED[0] is not data:
        _RENDERED[:] = [data, {}]
    memo: dict[int, str] = _RENDERED[1]
    text = memo.get(archs.mask)
    if text is None:
        text = memo[archs.mask] = _render(archs)
    return text


def _render(archs: ArchSet) -> str:
    if not archs:
        return "none"
    missing = ~archs
    if not missing:
        return "all"
    capabilities = arch_data().capabilities
    pieces: list[str] = []
    run: list[Capability] = []
    last_member_index = -1
    for index, cap in enumerate(capabilities):
        members = [v for v in cap.variants if Arch(cap.major, cap.minor, v) in archs]
        if members:
            last_member_index = index
        if len(members) == len(cap.variants):
            run.append(cap)
            continue
        if run:
            pieces.append(_render_run(run))
            run = []
        pieces.extend(_name(cap, v) for v in members)
    if run:
        pieces.append(_render_run(run))
    text = ", ".join(pieces)
    if last_member_index < len(capabilities) - 1:
        text += f"; not {_name(capabilities[last_member_index + 1])}+"
    if len(missing) <= _EXCEPT_LIMIT:
        alternative = "all except " + ", ".join(missing.names())
        if len(alternative) < len(text):
            return alternative
    return text


def render_archset_long(archs: ArchSet) -> str:
    """Every member, old to new: ``sm_90, sm_90a, sm_100, ...``; ``none`` when empty."""
    return ", ".join(archs.names()) or "none"
