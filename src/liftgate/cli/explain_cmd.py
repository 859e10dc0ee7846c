"""``liftgate explain GATE_ID [SOURCE…] --target ARCH``: one gate, judged, with its code.

Shows the gate (where, kind, condition, directive), how it evaluates for every target asked
for, its evidence chain, the region it guards as the target would compile it once lifted (each
line that uses a catalog feature marked with the feature; lines that nested gates keep out
marked as such), the verdict with its reasons, what was analysed, hazards, and, for CUDA gates,
the directive a lift would write (`liftgate.arch.core.cuda_exact_test`). ``--compile-check``
also compiles the gated translation unit with the gate lifted (`liftgate.judge.compile_check`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from liftgate.cli.common import (
    ExitCode,
    TargetError,
    TextFormat,
    add_cache_dir_option,
    add_env_option,
    add_format_option,
    add_offline_option,
    add_sdist_option,
    add_target_option,
    error,
    targets_or_local,
)
from liftgate.sources.workspace import Workspace, read_text

MAX_REGION_LINES = 40


def configure_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help="show one gate: its condition, the code it guards, the verdict and hazards",
        description=(
            "Explain one gate for each --target: its condition and evidence, the region it guards "
            "with the hardware features it uses, the verdict (liftable, blocked, unknown) with "
            "reasons and hazards, and the directive a lift would write. SOURCEs are as for scan "
            "(the gate id comes from a scan of the same sources); a unique prefix of the id is enough."
        ),
        epilog="Exit codes: 0 explained, 2 usage error or no such gate.",
    )
    p.add_argument("gate_id", metavar="GATE_ID")
    p.add_argument("sources", nargs="*", metavar="SOURCE")
    add_target_option(p, help="target architecture, repeatable")
    add_env_option(p, help="look in another environment (a virtualenv or prefix)")
    add_format_option(p, TextFormat, help="output format")
    add_sdist_option(p)
    add_offline_option(p, help="never contact the package index")
    add_cache_dir_option(p, help="cache directory (default: the user cache dir)")
    p.add_argument(
        "--compile-check",
        action="store_true",
        help="also compile the gated translation unit with the gate lifted, with nvcc, for each target",
    )
    p.add_argument(
        "--unit",
        metavar="FILE",
        help="for --compile-check: compile this translation unit (a driver that calls the gated code) instead",
    )
    p.add_argument(
        "--chain",
        action="store_true",
        help=(
            "also show the gate chains the gate belongs to: every gate that must be lifted together with it "
            "for the feature it guards (across packages), and the weakest link's verdict per target"
        ),
    )
    p.add_argument(
        "--include-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="extra include directory for --compile-check (headers from outside the package), repeatable",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from liftgate.cli.progress import make_observer
    from liftgate.scan import scan
    from liftgate.sources.interface import SourceError

    try:
        targets = targets_or_local(args.target)
    except TargetError as exc:
        return error(str(exc))
    wanted = args.gate_id.strip()
    if len(wanted) < 4:
        return error(f"gate id {wanted!r} is too short: give at least 4 characters (e.g. cu-1a2b)")
    observer = make_observer(quiet=not sys.stderr.isatty())
    try:
        report = scan(
            args.sources,
            targets,
            env=args.env,
            cache_dir=args.cache_dir,
            offline=args.offline,
            sdist=args.sdist,
            observer=observer,
        )
        from liftgate.judge.verdict import judge_scan

        report = judge_scan(report, only=lambda g: g.id.startswith(wanted), observer=observer)
    except SourceError as exc:
        return error(str(exc))
    finally:
        observer.finish()
    matches = [g for g in report.gates if g.id.startswith(wanted)]
    if not matches:
        where = ", ".join(args.sources) or "the environment"
        return error(
            f"no gate {wanted!r} in {where}: run `liftgate scan` on the same sources to list gate ids"
        )
    if len(matches) > 1:
        ids = ", ".join(g.id for g in matches[:8])
        return error(f"gate id {wanted!r} is ambiguous ({ids}): give more characters")
    gate = matches[0]
    assert report.workspace is not None
    files = report.workspace
    package_files = dict(files.files(gate.location.package, gate.location.version))
    checks: list[Any] = []
    if args.compile_check:
        from liftgate.judge.compile_check import compile_check

        index = report.verdict_index()
        for t in report.targets:
            verdict = index.get((gate.id, t.arch))
            expect = [u.feature for u in verdict.uses] if verdict else []
            checks.append(
                compile_check(
                    gate, t.arch, package_files, include_dirs=args.include_dir, expect=expect, unit=args.unit
                )
            )
    doc = explanation(report, gate, package_files, checks)
    if args.chain:
        doc["chains"], chain_lines = _chains(report, gate, files)
    if TextFormat(args.format) is TextFormat.JSON:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render_text(doc, color))
        if args.chain:
            sys.stdout.write(chain_lines)
    return ExitCode.OK


def _chains(report: Any, gate: Any, files: Workspace) -> tuple[list[Any], str]:
    """The chains ``gate`` belongs to, judged for the report's targets: as JSON and as text."""
    from dataclasses import replace

    from liftgate.chain import chains_of_gate, judge_members
    from liftgate.report.chains import chain_text, chain_to_dict

    archs = list(dict.fromkeys(t.arch for t in report.targets))
    chains = chains_of_gate(gate.id, report.gates, archs, files)
    more = judge_members(chains, report.gates, archs, files, report.verdicts)
    report = replace(report, verdicts=(*report.verdicts, *more))
    text = [
        "",
        "chains:" if chains else f"chains: {gate.id} is in no chain (no gate it leads to shuts a target out)",
    ]
    for chain in chains:
        text.append("")
        text += [line for line, _style in chain_text(report, chain, verbose=True, list_covered=False)]
    return [chain_to_dict(report, c) for c in chains], "\n".join(text) + "\n"


def explanation(report: Any, gate: Any, package_files: dict[str, str], checks: list[Any]) -> dict[str, Any]:
    """Everything ``explain`` shows, as JSON-ready data (the text form renders this)."""
    from liftgate.judge.catalog import load_catalog
    from liftgate.judge.region import FileStore, RegionAnalyzer
    from liftgate.model import GateKind, VerdictKind
    from liftgate.report.json_format import gate_to_dict, verdict_to_dict

    index = report.verdict_index()
    catalog = {f.id: f for f in load_catalog()}
    doc: dict[str, Any] = {"gate": gate_to_dict(gate, report, index), "targets": []}
    store = FileStore(
        list(package_files),
        lambda p: read_text(package_files[p]) if p in package_files else None,
    )
    info = store.file(gate.location.path)
    for n, target in enumerate(report.targets):
        arch = target.arch
        entry: dict[str, Any] = {"target": arch.name, "status": gate.status(arch).value}
        verdict = index.get((gate.id, arch))
        entry["verdict"] = verdict_to_dict(verdict) if verdict else None
        if verdict is not None and verdict.kind is VerdictKind.UNSAFE:
            # The narrowing edit: `lift --exclude` (a Python call site can also be narrowed in its
            # helper's guard, with --at definition).
            entry["exclude_command"] = f"liftgate lift {gate.id} --exclude {arch.name}"
            if gate.kind is GateKind.PY_RUNTIME and gate.evidence:
                entry["exclude_command_definition"] = (
                    f"liftgate lift {gate.id} --exclude {arch.name} --at definition"
                )
        if gate.choices:
            # The class is chosen at run time: which implementations let this target through.
            entry["choices"] = {
                "admit": [c.implementation for c in gate.choices if arch in c.admitted],
                "exclude": [c.implementation for c in gate.choices if arch not in c.admitted | c.unknown],
                "unknown": [c.implementation for c in gate.choices if arch in c.unknown],
            }
        if verdict is not None:
            entry["features"] = [
                {
                    "id": fid,
                    "description": catalog[fid].description,
                    "on_target": arch in catalog[fid].archs,
                    "ptx_section": catalog[fid].ptx_section,
                }
                for fid in dict.fromkeys(u.feature for u in verdict.uses)
            ]
        span = gate.then_span
        if (
            info is not None
            and span is not None
            and gate.kind in (GateKind.CUDA_PP, GateKind.CPP_RUNTIME, GateKind.PY_RUNTIME)
        ):
            analyzer = RegionAnalyzer(store, report.gates, arch)
            compiled = set(analyzer.compiled_lines(gate.location.path, span.start, span.end))
            lines = []
            for number in range(span.start, min(span.end, len(info.lines)) + 1):
                raw = _source_line(package_files, gate.location.path, number)
                lines.append(
                    {
                        "line": number,
                        "text": raw,
                        "compiled": number in compiled,
                        "features": [fid for fid, _ in info.hits.get(number, ())]
                        if number in compiled
                        else [],
                    }
                )
            entry["region"] = lines
        if (
            gate.kind is GateKind.CUDA_PP
            and gate.directive in ("#if", "#elif", "#ifdef", "#ifndef")
            and entry["status"] != "admitted"
        ):
            preview = _lift_preview(gate, arch, package_files)
            if preview:
                entry["lift_preview"] = preview
        if checks:
            c = checks[n]
            entry["compile_check"] = {
                "status": c.status.value,
                "command": c.command,
                "translation_unit": c.translation_unit,
                "diagnostics": list(c.diagnostics),
                "reason": c.reason,
                "notes": list(c.notes),
            }
        doc["targets"].append(entry)
    return doc


_LINES_CACHE: dict[str, list[str]] = {}


def _source_line(files: dict[str, str], path: str, number: int) -> str:
    if path not in _LINES_CACHE:
        text = read_text(files[path]) if path in files else None
        _LINES_CACHE[path] = (text or "").split("\n")
    lines = _LINES_CACHE[path]
    return lines[number - 1].rstrip() if 0 < number <= len(lines) else ""


def _lift_preview(gate: Any, arch: Any, package_files: dict[str, str]) -> dict[str, str] | None:
    """The directive a lift would write, from the file's own lines (`liftgate.edits.cuda`)."""
    from liftgate.edits.cuda import EditError, lift_directive

    path = gate.location.path
    span = gate.location.span
    lines = [_source_line(package_files, path, n) + "\n" for n in range(span.start, span.end + 1)]
    try:
        edit = lift_directive(lines, None, arch)
    except EditError:
        return None
    return {"before": "".join(edit.before).rstrip(), "after": "".join(edit.after).rstrip()}


def _wrap(text: str, width: int = 100) -> str:
    """A long line of prose wrapped under its bullet (paths and code are never split)."""
    import textwrap

    return textwrap.fill(
        text, width, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    )


def render_text(doc: dict[str, Any], color: bool) -> str:
    import io

    from rich.console import Console
    from rich.text import Text

    out = io.StringIO()
    console = Console(
        file=out, force_terminal=color, no_color=not color, width=200, highlight=False, soft_wrap=True
    )
    g = doc["gate"]
    console.print(
        Text.assemble((g["id"], "bold"), f"  {g['kind']}  {g['package']} {g.get('version') or ''}".rstrip())
    )
    console.print(Text(f"  {g['path']}:{g['line']}"))
    console.print(Text(f"  {g.get('directive') or ''} {g['condition']}".rstrip()))
    console.print(Text(f"  admits {g['admitted_compact'] or 'nothing'}; else branch: {g['else_kind']}"))
    for ev in g["evidence"]:
        where = f" ({ev['path']}:{ev['line']})" if ev.get("path") else ""
        console.print(Text(f"  evidence: {ev['text']}{where}", style="dim"))
    styles = {
        "liftable": "green",
        "blocked": "red",
        "unknown": "yellow",
        "admitted": "green",
        "excluded": "red",
    }
    for entry in doc["targets"]:
        console.print()
        verdict = entry.get("verdict")
        head = verdict["verdict"] if verdict else entry["status"]
        console.print(
            Text.assemble(
                f"{entry['target']}: ",
                (head.upper(), f"bold {styles.get(head, '')}".strip()),
                f"  (the gate: {entry['status']})" if verdict else "",
            )
        )
        reading = g.get("outcomes", {}).get(entry["target"])
        if reading is not None:
            lost = " — a loss" if reading["loss"] else ""
            console.print(Text(_wrap(f"  outcome: {reading['outcome']}{lost}: {reading['text']}")))
        choices = entry.get("choices")
        if choices:
            for word, names in (("admit", choices["admit"]), ("exclude", choices["exclude"])):
                if names:
                    listed = ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
                    count = f"{len(names)} implementation{'s' if len(names) != 1 else ''}"
                    verb = word if len(names) != 1 else f"{word}s"
                    console.print(Text(_wrap(f"  chosen at run time: {count} {verb} it: {listed}")))
        if verdict:
            for reason in verdict["reasons"]:
                console.print(Text(_wrap(f"  - {reason}")))
            for hazard in verdict["hazards"]:
                console.print(Text(_wrap(f"  ! hazard: {hazard}"), style="bold yellow"))
            console.print(Text(_wrap(f"  analysed: {verdict['scope']}"), style="dim"))
        if entry.get("exclude_command"):
            console.print(
                Text(_wrap(f"  shut {entry['target']} out: {entry['exclude_command']} (add --env ENV)"))
            )
            if entry.get("exclude_command_definition"):
                console.print(
                    Text(
                        _wrap(f"  or in the helper's guard: {entry['exclude_command_definition']}"),
                        style="dim",
                    )
                )
        for feature in entry.get("features", []):
            mark = "yes" if feature["on_target"] else "NO"
            console.print(
                Text(
                    _wrap(
                        f"  feature {feature['id']}: {feature['description']}; on {entry['target']}: {mark}"
                    )
                )
            )
        region = entry.get("region")
        if region:
            how = "compiles it today" if entry["status"] == "admitted" else "would compile it once lifted"
            console.print(f"  region, as {entry['target']} {how}:")
            shown = (
                region
                if len(region) <= MAX_REGION_LINES
                else [*region[: MAX_REGION_LINES - 5], None, *region[-4:]]
            )
            for item in shown:
                if item is None:
                    console.print(
                        Text(f"        … {len(region) - MAX_REGION_LINES + 1} lines …", style="dim")
                    )
                    continue
                line = Text(f"  {item['line']:>5} | {item['text']}", style="" if item["compiled"] else "dim")
                if not item["compiled"]:
                    line.append("   (compiled out by a nested gate)", style="dim")
                if item["features"]:
                    line.append("   <- " + ", ".join(item["features"]), style="bold magenta")
                console.print(line)
        preview = entry.get("lift_preview")
        if preview:
            console.print("  a lift would write:")
            console.print(Text(f"  - {preview['before']}", style="red"))
            console.print(Text(f"  + {preview['after']}", style="green"))
        check = entry.get("compile_check")
        if check:
            console.print(Text(f"  compile check: {check['status']} — {check['reason']}"))
            if check["command"]:
                console.print(Text(f"    {check['command']}", style="dim"))
            for d in check["diagnostics"]:
                console.print(Text(f"    {d}"))
            for note in check["notes"]:
                console.print(Text(f"    note: {note}", style="dim"))
    text = out.getvalue()
    return "\n".join(line.rstrip() for line in text.split("\n"))
