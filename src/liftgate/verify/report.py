"""The verify report as a terminal table, JSON (``schema_version``) and Markdown."""

from __future__ import annotations

import json
from typing import Any

from liftgate.verify.compare import Comparison
from liftgate.verify.runner import Outcome, Run

SCHEMA_VERSION = 1
_HEADLINE = (
    "wall_s",
    "output_throughput",
    "request_throughput",
    "ttft_ms",
    "itl_ms",
    "tokens_per_j",
    "power_w_mean",
    "energy_j",
    "sm_util_mean",
)


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _rows(outcome: Outcome, verbose: bool) -> list[list[str]]:
    names = list(outcome.summary)
    if not verbose:
        names = [n for n in names if n in _HEADLINE or n == outcome.primary]
    rows = []
    for name in names:
        row = outcome.summary[name]
        cells = [name + (" *" if name == outcome.primary else "")]
        for state in ("stock", "lifted"):
            s = row.get(state)
            cells.append("n/a" if not s else f"{_fmt(s['median'])} [{_fmt(s['min'])}–{_fmt(s['max'])}]")
        ratio = row.get("ratio")
        note = (
            ""
            if ratio is None
            else (
                "within noise"
                if row.get("within_noise")
                else ("higher is better" if row["higher_is_better"] else "lower is better")
            )
        )
        cells += [_fmt(ratio), note]
        rows.append(cells)
    return rows


def render_text(outcome: Outcome, verbose: bool = False) -> str:
    head = ["metric", "stock median [min–max]", "lifted median [min–max]", "lifted/stock", ""]
    rows = _rows(outcome, verbose)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    lines.append(f"verdict: {outcome.verdict.upper()}  (primary metric *: {outcome.primary})")
    lines += [f"  - {r}" for r in outcome.reasons]
    lines += [
        f"  compare {c.path}: {'ok' if c.equal else 'DIFFERS'} — {c.detail}" for c in outcome.comparisons
    ]
    lines += [f"  note: {n}" for n in outcome.notes]
    lines.append(f"environment left {outcome.final_state}")
    return "\n".join(lines) + "\n"


def render_json(outcome: Outcome) -> str:
    return (
        json.dumps(
            {"schema_version": SCHEMA_VERSION, "tool": "liftgate verify", **outcome.to_dict()}, indent=2
        )
        + "\n"
    )


def render_markdown(outcome: Outcome, verbose: bool = False) -> str:
    out = [f"**liftgate verify: {outcome.verdict}** (primary metric: `{outcome.primary}`)", ""]
    out.append("| metric | stock median [min–max] | lifted median [min–max] | lifted/stock | |")
    out.append("|---|---|---|---|---|")
    out += ["| " + " | ".join(r) + " |" for r in _rows(outcome, verbose)]
    out.append("")
    out += [f"- {r}" for r in outcome.reasons]
    out += [
        f"- compare `{c.path}`: {'ok' if c.equal else '**differs**'} — {c.detail}"
        for c in outcome.comparisons
    ]
    out += [f"- note: {n}" for n in outcome.notes]
    out.append(f"- environment left **{outcome.final_state}**")
    return "\n".join(out) + "\n"


def outcome_from_json(doc: dict[str, Any]) -> Outcome:
    """An `Outcome` back from ``render_json``'s document (to render another format or a chart later)."""
    keys = ("state", "index", "warmup", "returncode", "wall_s", "metrics", "telemetry", "log")
    runs = [Run(**{k: r[k] for k in keys}, failure=r.get("failure")) for r in doc["runs"]]
    comparisons = [Comparison(c["path"], c["equal"], c["detail"]) for c in doc.get("comparisons", [])]
    return Outcome(
        doc["verdict"], list(doc["reasons"]), runs, doc["primary_metric"], doc["summary"], comparisons,
        list(doc.get("notes", [])), doc.get("final_state", "lifted"),
    )  # fmt: skip
