"""Gate chains in every output format: the views per target and the texts they share.

A report made with ``chains`` (``liftgate scan --by chain``) holds the chains worth showing
(`liftgate.chain.listed_chains`); these helpers turn each into its per-target view
(`liftgate.chain.view`) and into lines, Markdown rows or JSON, so that the table, Markdown and
JSON say the same thing. ``liftgate explain GATE --chain`` renders with the same helpers.
"""

from __future__ import annotations

from typing import Any

from liftgate.arch.core import Arch
from liftgate.chain.view import ChainMember, ChainView, title, view
from liftgate.model import Chain, Report, Verdict
from liftgate.report.interface import printable
from liftgate.report.select import condition_text, distinct_targets, verdict_text

MAX_VIA_SHOWN = 3


def chain_views(report: Report, chain: Chain) -> list[ChainView]:
    gates = {g.id: g for g in report.gates}
    verdicts = report.verdict_index()
    return [view(chain, gates, t.arch, verdicts) for t in distinct_targets(report)]


def verdict_line(v: ChainView) -> str:
    """``sm_120: BLOCKED — 15 gates to lift together; weakest link pb-0e30929539: sm_120 lacks cvt-fp4 …``."""
    unsafe = ""
    if v.unsafe:
        n = len(v.unsafe)
        lacks = f" ({', '.join(v.unsafe_features)})" if v.unsafe_features else ""
        unsafe = (
            f"UNSAFE — {n} link{'s' if n != 1 else ''} let{'' if n != 1 else 's'} it into code that uses what "
            f"it lacks{lacks}: {', '.join(v.unsafe)}"
        )
    if v.verdict is None:
        return f"{v.target.name}: {unsafe or 'nothing in this chain shuts it out'}"
    if unsafe:
        return f"{v.target.name}: {unsafe}; and {len(v.required)} gates shut it out"
    count = len(v.required)
    text = f"{v.target.name}: {v.verdict.value.upper()} — {count} gate{'s' if count != 1 else ''} to lift together"
    if v.weakest:
        text += f"; weakest link {v.reasons[0]}"
    if v.covered:
        text += (
            f"; {len(v.covered)} hazard{'s' if len(v.covered) != 1 else ''} covered by lifting them together"
        )
    return text


def via_text(member: ChainMember, verbose: bool) -> str:
    link = member.link
    if not link.via:
        return ""
    steps = list(link.via) if verbose else [link.via[-1]]
    text = " → ".join(steps)
    if not verbose and len(link.via) > 1:
        text = f"{len(link.via)} steps, last: {text}"
    return text + ("" if link.exact else " (a step resolved by name only)")


def member_line(member: ChainMember, target: Arch, verdict: Verdict | None) -> str:
    gate = member.gate
    loc = gate.location
    shown = verdict_text(verdict) if verdict is not None else member.status.value
    if member.superseded:
        shown += ", decided by its links"
    return (
        f"{member.link.relation.value:<8} {gate.id}  {loc.package}: {loc.path}:{loc.line}  "
        f"{condition_text(gate)[:90]}  [{target.name}: {shown}]"
    )


def chain_to_dict(report: Report, chain: Chain) -> dict[str, Any]:
    views = chain_views(report, chain)
    return {
        "root": chain.root_id,
        "title": title(chain, {g.id: g for g in report.gates}),
        "links": [
            {
                "gate": link.gate_id,
                "parent": link.parent_id,
                "relation": link.relation.value,
                "via": list(link.via),
                "exact": link.exact,
            }
            for link in chain.links
        ],
        "targets": [
            {
                "target": v.target.name,
                "verdict": None if v.verdict is None else v.verdict.value,
                "required": list(v.required),
                "weakest": list(v.weakest),
                "reasons": list(v.reasons),
                "hazards": [h.text for h in v.hazards],
                "covered_hazards": [h.text for h in v.covered],
                "unsafe": list(v.unsafe),
                "unsafe_reasons": list(v.unsafe_reasons),
                "not_required": [
                    {"gate": m.gate.id, "why": m.why_not} for m in v.members if not m.required and m.why_not
                ],
            }
            for v in views
        ],
        "notes": list(chain.notes),
    }


def chain_text(
    report: Report, chain: Chain, verbose: bool = False, list_covered: bool | None = None
) -> list[tuple[str, str]]:
    """The chain as (line, style) pairs for the terminal; styles are rich style names or ''.
    ``verbose`` shows every step of every link and (unless ``list_covered`` says otherwise) the
    hazards lifting the chain covers."""
    list_covered = verbose if list_covered is None else list_covered
    views = chain_views(report, chain)
    if not views:
        return []
    lines: list[tuple[str, str]] = [(f"chain {chain.root_id}  {views[0].title}", "bold")]
    styles = {"liftable": "green", "blocked": "red", "unknown": "yellow"}
    for v in views:
        style = "bold red" if v.unsafe else (styles.get(v.verdict.value, "") if v.verdict else "dim")
        lines.append((f"  {verdict_line(v)}", style))
        for hazard in v.hazards:
            lines.append((f"    ! hazard: {hazard}", "yellow"))
        if list_covered:
            for hazard in v.covered:
                lines.append((f"    covered: {hazard}", "dim"))
    first = views[0]
    verdicts = report.verdict_index()
    # Every view has the chain's members in the same order: keep those some target must lift.
    shown = [
        m
        for i, m in enumerate(first.members)
        if any(v.members[i].required or v.members[i].gate.id in v.unsafe for v in views)
    ]
    hidden = len(first.members) - len(shown)
    for member in shown:
        lines.append(
            (f"    {member_line(member, first.target, verdicts.get((member.gate.id, first.target)))}", "")
        )
        via = via_text(member, verbose)
        if via:
            lines.append((f"        via {via}", "dim"))
    if hidden:
        reasons = sorted({m.why_not.split(":")[0] for m in first.members if m.why_not})
        lines.append(
            (
                f"    ({hidden} more link{'s' if hidden != 1 else ''} not to lift for any target: "
                f"{'; '.join(reasons)}{'' if verbose else '; --format json lists them'})",
                "dim",
            )
        )
    for note in chain.notes:
        lines.append((f"    note: {note}", "dim"))
    targets = [v.target.name for v in views if v.verdict is not None]
    if targets:
        lines.append((f"    lift as one: liftgate lift --chain {chain.root_id} -t {targets[0]}", "dim"))
    for v in views:
        if v.unsafe:
            one = "" if len(v.unsafe) == 1 else f" (at any one of {', '.join(v.unsafe)})"
            lines.append(
                (
                    f"    shut {v.target.name} out{one}: liftgate lift {v.unsafe[-1]} --exclude {v.target.name}",
                    "dim",
                )
            )
    return [(printable(line), style) for line, style in lines]
