"""Lift as a library: scan an environment, plan, apply, revert, export and re-apply patch series.

These functions tie `liftgate.scan` to the pure planner (`liftgate.lift.plan`) and the journal
(`liftgate.lift.journal`); the CLI commands (``lift``, ``status``, ``revert``,
``apply-patches``) are thin layers over them.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any

from liftgate.arch.core import Arch
from liftgate.evaluate import Outcomes
from liftgate.lift.caches import CacheMover, shadowing_packages
from liftgate.lift.journal import Journal, LiftError, atomic_write, prefix_for
from liftgate.lift.plan import (
    PatchPlan,
    PlanError,
    SkippedGate,
    matching_ids,
    plan_lift,
    resolve_inside,
    safe_relpath,
)
from liftgate.model import Gate, Outcome, Report, Status, VerdictKind
from liftgate.sources.interface import Observer
from liftgate.sources.workspace import Workspace

SERIES_FILE = "series"
SERIES_JSON = "liftgate-series.json"
SERIES_VERSION = 1
_MAX_SERIES = 64 << 20


@dataclass(frozen=True)
class EnvScan:
    report: Report
    workspace: Workspace
    env: str | None
    rescan: Callable[[Mapping[tuple[str, str], str], Sequence[str]], Report]


def scan_env(
    env: str | None,
    target: Arch,
    *,
    judge: bool | Callable[[Any], bool] = False,
    only_packages: Sequence[str] | None = None,
    cache_dir: str | None = None,
    observer: Observer | None = None,
) -> EnvScan:
    from liftgate.judge.verdict import judge_scan
    from liftgate.scan import scan

    report = scan([], [target], env=env, cache_dir=cache_dir, observer=observer, only_packages=only_packages)
    if judge:
        report = judge_scan(report, only=judge if callable(judge) else None, observer=observer)
    assert report.workspace is not None

    def rescan(overlay: Mapping[tuple[str, str], str], packages: Sequence[str]) -> Report:
        return scan([], [target], env=env, overlay=overlay, only_packages=packages, cache_dir=cache_dir)

    return EnvScan(report, report.workspace, env, rescan)


def resolve_gate_ids(es: EnvScan, target: Arch, gate_ids: Sequence[str]) -> list[str]:
    """Each of ``gate_ids`` as the id of the one gate it names in ``es`` (an exact id, else a unique
    prefix, as `liftgate.lift.plan` matches them), in order, without repeats.

    Every id is checked before anything is judged: one that names no gate or several is a one-line
    `PlanError` naming each such id, the close ids of the scan and the command that lists them.
    """
    ids = [g.id for g in es.report.gates]
    problems: list[str] = []
    out: list[str] = []
    for raw in gate_ids:
        w = raw.strip()
        if not w:
            problems.append("an empty gate id")
            continue
        matches = matching_ids(ids, w)
        if len(matches) == 1:
            out.append(matches[0])
        elif matches:
            shown = ", ".join(matches[:6]) + (f" (+{len(matches) - 6} more)" if len(matches) > 6 else "")
            problems.append(f"gate id {w!r} is ambiguous ({shown}): give more characters")
        else:
            where = f"the environment {es.env}" if es.env else "this environment"
            close = _close_ids(w, ids)
            problems.append(
                f"no gate {w!r} in {where}" + (f" (did you mean {', '.join(close)}?)" if close else "")
            )
    if problems:
        env = f" --env {shlex.quote(es.env)}" if es.env else ""
        raise PlanError(f"{'; '.join(problems)}; `liftgate scan{env} -t {target.name}` lists the gate ids")
    return list(dict.fromkeys(out))


def _close_ids(wanted: str, ids: Sequence[str], n: int = 3) -> list[str]:
    """Ids of ``ids`` close to ``wanted``: a typo in it (compared with each id cut to its length,
    since a prefix is enough), or its number under another kind (``cu-`` for ``py-``)."""
    by_head: dict[str, list[str]] = {}
    for i in ids:
        by_head.setdefault(i[: len(wanted)], []).append(i)
    close = [i for head in difflib.get_close_matches(wanted, list(by_head), n, 0.8) for i in by_head[head]]
    _kind, dash, number = wanted.partition("-")
    if dash and len(number) >= 4:
        close += [i for i in ids if i.partition("-")[2].startswith(number)]
    return list(dict.fromkeys(close))[:n]


def judge_env(
    es: EnvScan, target: Arch, gate_ids: Collection[str] | None, observer: Observer | None = None
) -> EnvScan:
    """``es`` with the verdicts for ``target`` of the gates ``gate_ids`` (None: of every gate that
    excludes it, and every admission found unsafe) added: those `scan` gives with ``judge`` (the same call, the same gates informing
    the analysis), for only the gates a lift needs."""
    from liftgate.judge import verdict

    wanted = None if gate_ids is None else set(gate_ids)
    if wanted is not None and not wanted:
        return es
    if observer is not None:
        observer.start("judging the gated code", total=None)
    try:
        verdicts = verdict.judge_report(
            es.report.gates,
            [target],
            es.workspace,
            only=None if wanted is None else (lambda g: g.id in wanted),
        )
    finally:
        if observer is not None:
            observer.finish()
    return replace(es, report=replace(es.report, verdicts=(*es.report.verdicts, *verdicts)))


def choose_gates(
    es: EnvScan,
    target: Arch,
    gate_ids: Sequence[str],
    all_liftable: bool,
    force: bool,
    paths: Sequence[str] = (),
) -> tuple[list[str], list[SkippedGate]]:
    """The gate ids to plan, and those refused because the judge says they are blocked.

    ``all_liftable`` takes every gate judged liftable whose outcome for ``target`` is a loss
    (`liftgate.evaluate.Outcomes`): never an alternative, where lifting would replace the target's
    own or newer path with an older one; ``paths`` (fnmatch patterns) narrow it to those files."""
    index = es.report.verdict_index()
    if all_liftable:
        outcomes = Outcomes(es.report.gates, es.report.verdicts)

        def lost(gate: Gate) -> bool:
            reading = outcomes.of(gate, target)
            return reading.loss and reading.outcome is not Outcome.OFF  # a switch is set, not edited

        return _judged(es, target, VerdictKind.LIFTABLE, paths, lost), []
    chosen, refused = [], []
    from liftgate.lift.plan import resolve_ids

    for gate in resolve_ids(es.report.gates, gate_ids):
        verdict = index.get((gate.id, target))
        if verdict is not None and verdict.kind is VerdictKind.BLOCKED and not force:
            why = verdict.reasons[0] if verdict.reasons else "blocked"
            refused.append(
                SkippedGate(gate.id, f"judged blocked for {target.name}: {why} (--force lifts it anyway)")
            )
        else:
            chosen.append(gate.id)
    return chosen, refused


def unsafe_gates(es: EnvScan, target: Arch, paths: Sequence[str] = ()) -> list[str]:
    """Every gate judged an unsafe admission for ``target`` (``lift --exclude T --all-unsafe``), in
    files matching ``paths`` (fnmatch patterns) when given."""
    return _judged(es, target, VerdictKind.UNSAFE, paths)


def _judged(
    es: EnvScan,
    target: Arch,
    kind: VerdictKind,
    paths: Sequence[str],
    keep: Callable[[Gate], bool] = lambda _gate: True,
) -> list[str]:
    """The ids of the gates with a ``kind`` verdict for ``target`` that ``keep`` keeps, in files
    matching ``paths`` when given; each once, in verdict order."""
    by_id = {g.id: g for g in es.report.gates}
    ids = [
        v.gate_id
        for v in es.report.verdicts
        if v.target == target
        and v.kind is kind
        and v.gate_id in by_id
        and keep(by_id[v.gate_id])
        and (not paths or any(fnmatchcase(by_id[v.gate_id].location.path, p) for p in paths))
    ]
    return list(dict.fromkeys(ids))


@dataclass(frozen=True)
class ChainChoice:
    """The gates ``lift --chain`` lifts, or why it refuses the whole chain."""

    root: str
    gate_ids: tuple[str, ...]
    view: Any  # liftgate.chain.view.ChainView
    refusal: str | None = None


def choose_chain(es: EnvScan, target: Arch, gate_id: str, force: bool) -> ChainChoice:
    """The chain of ``gate_id`` (its own, or the one chain that reaches it), judged for ``target``:
    every gate of it that shuts the target out, lifted as one or not at all."""
    from liftgate.chain import chains_of_gate, judge_members, view
    from liftgate.lift.plan import resolve_ids

    (gate,) = resolve_ids(es.report.gates, [gate_id])
    # A gate that starts a chain lifts its own; any other, the one chain that reaches it.
    chains = chains_of_gate(gate.id, es.report.gates, [target], es.workspace, reaching=False)
    if not chains:
        raise PlanError(
            f"{gate.id} starts no chain and is in none: lift it on its own (`liftgate lift {gate.id}`)"
        )
    if len(chains) > 1:
        roots = ", ".join(c.root_id for c in chains)
        raise PlanError(
            f"{gate.id} is in {len(chains)} chains (roots {roots}): name the root to lift with --chain"
        )
    chain = chains[0]
    if len(chain.links) == 1:
        raise PlanError(f"{gate.id} leads to no other gate: lift it on its own (`liftgate lift {gate.id}`)")
    verdicts = list(es.report.verdicts)
    verdicts += judge_members([chain], es.report.gates, [target], es.workspace, verdicts)
    index = {(v.gate_id, v.target): v for v in verdicts}
    seen = view(chain, {g.id: g for g in es.report.gates}, target, index)
    if not seen.required:
        return ChainChoice(
            chain.root_id, (), seen, f"nothing in the chain of {chain.root_id} shuts {target.name} out"
        )
    if seen.verdict is VerdictKind.BLOCKED and not force:
        why = "; ".join(seen.reasons[:2])
        return ChainChoice(
            chain.root_id, seen.required, seen,
            f"the chain of {chain.root_id} is blocked for {target.name} (weakest link {why}); nothing applied "
            "(--force lifts it anyway)",
        )  # fmt: skip
    return ChainChoice(chain.root_id, seen.required, seen)


def plan_env(
    es: EnvScan,
    target: Arch,
    gate_ids: Sequence[str],
    *,
    at: str = "call-site",
    refused: Sequence[SkippedGate] = (),
    partial: bool = False,
    exclude: bool = False,
) -> PatchPlan:
    """The plan for ``gate_ids`` in the environment; ``partial``: gates whose edits do not verify
    are skipped, each with its reason, and the rest is planned (`liftgate.lift.plan.plan_lift`);
    ``exclude``: the edits shut ``target`` out instead of admitting it."""
    plan = _inside_env(
        plan_lift(
            es.report,
            gate_ids,
            target,
            es.workspace,
            at=at,
            rescan=es.rescan,
            partial=partial,
            exclude=exclude,
        ),
        es.env,
    )
    notes = list(plan.notes)
    installed = [(p.name, p.version) for p in es.report.packages]
    notes.extend(shadowing_packages(installed, plan.packages()))
    if any(f.path.endswith((".cu", ".cuh", ".h", ".hpp")) for f in plan.files):
        notes.append(
            "CUDA sources changed: kernels compiled ahead of time into the package's .so files are not "
            "rebuilt; JIT-built kernels are, once their cache entries are moved aside"
        )
    return PatchPlan(
        plan.lift_id, plan.target, plan.planned, (*refused, *plan.skipped), plan.files,
        tuple(dict.fromkeys(notes)), plan.verified, plan.exclude,
    )  # fmt: skip


def _inside_env(plan: PatchPlan, env: str | None) -> PatchPlan:
    """``plan`` without the files that resolve outside the environment (a RECORD entry with ``..``, a
    link out of it): their gates are skipped, saying why; the journal would refuse them anyway."""
    prefix = prefix_for(env)
    outside = [f for f in plan.files if resolve_inside(f.fspath, prefix) is None]
    if not outside:
        return plan
    refused = []
    for f in outside:
        why = (
            f"{f.fspath} resolves to {os.path.realpath(f.fspath)}, outside the environment {prefix}: "
            "liftgate only changes files inside the environment it lifts"
        )
        refused += [SkippedGate(gid, why) for gid in f.gate_ids]
    ids = {s.gate_id for s in refused}
    return PatchPlan(
        plan.lift_id, plan.target, tuple(p for p in plan.planned if p.gate_id not in ids),
        (*plan.skipped, *refused), tuple(f for f in plan.files if f not in outside), plan.notes, plan.verified,
        plan.exclude,
    )  # fmt: skip


def apply_plan(plan: PatchPlan, env: str | None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    mover = CacheMover(dict(environ if environ is not None else os.environ))
    journal = Journal(prefix_for(env), caches=mover)
    with journal.locked():
        doc = journal.apply(plan, mover)
    doc["recovery_notes"] = journal.notes + journal.warnings
    return doc


def revert(
    lift_id: str | None, env: str | None, *, force: bool = False, environ: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Revert one lift, or every active lift newest first (``lift_id`` None)."""
    mover = CacheMover(dict(environ if environ is not None else os.environ))
    journal = Journal(prefix_for(env), caches=mover)
    done: list[dict[str, Any]] = []
    with journal.locked():
        if lift_id is None:
            for doc in reversed(journal.unfinished()):
                try:
                    done.append(journal.revert(doc["lift_id"], force=force, caches=mover))
                except LiftError as exc:
                    if not done:
                        raise
                    ids = ", ".join(d["lift_id"] for d in done)
                    raise LiftError(f"{exc} (reverted before it: {ids})") from exc
        else:
            done.append(journal.revert(lift_id, force=force, caches=mover))
    return done, journal.notes + journal.warnings


def _patch_name(package: str, version: str | None, taken: set[str]) -> str:
    """The file name of a package's patch: one path component whatever its metadata says."""
    raw = f"{package}-{version or 'unversioned'}"
    name = re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9._+-]+", "_", raw)).strip(".") or "package"
    candidate, n = f"{name}.patch", 1
    while candidate.lower() in taken or candidate in (SERIES_FILE, SERIES_JSON):
        n += 1
        candidate = f"{name}-{n}.patch"
    taken.add(candidate.lower())
    return candidate


def _write_in(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    real = resolve_inside(path, directory)
    if real is None or os.path.dirname(real) != os.path.realpath(directory):
        raise LiftError(f"{path} would be written outside {directory}: nothing more was exported")
    atomic_write(path, text.encode("utf-8"))  # replaces a link planted at ``path`` instead of following it
    return path


def export_series(plan: PatchPlan, directory: str) -> list[str]:
    """Write one unified diff per package, a quilt-style ``series`` and ``liftgate-series.json``."""
    os.makedirs(directory, exist_ok=True)
    written = []
    by_package: dict[tuple[str, str | None], list[Any]] = {}
    for f in plan.files:
        by_package.setdefault((f.package, f.version), []).append(f)
    taken: set[str] = set()
    patch_names = {
        key: _patch_name(key[0], key[1], taken) for key in sorted(by_package, key=lambda k: k[0].lower())
    }
    names = []
    for (package, version), changes in sorted(by_package.items(), key=lambda kv: kv[0][0].lower()):
        name = patch_names[(package, version)]
        header = (
            f"liftgate {plan.lift_id}: lift {package} {version or ''} for {plan.target.name}\n\n".replace(
                "  ", " "
            )
        )
        gates = [p for p in plan.planned if p.package == package]
        header += "".join(f"  {g.gate_id} {g.path}:{g.line} {g.how}\n" for g in gates) + "\n"
        body = "".join(c.diff() for c in changes)
        written.append(_write_in(directory, name, header + body))
        names.append(name)
    lines = [f"# liftgate patch series {plan.lift_id}: target {plan.target.name}"]
    for package, version in sorted(by_package, key=lambda k: k[0].lower()):
        ids = [p.gate_id for p in plan.planned if p.package == package]
        comment = f"# {package} {version or ''}: {' '.join(ids)}".rstrip()
        lines.append(re.sub(r"[\x00-\x1f\x7f]", " ", comment))  # one comment line, whatever the metadata says
    lines.append(
        "# apply from the root a package installs into (site-packages or an unpacked wheel): patch -p1"
    )
    lines.extend(names)
    written_series = _write_in(directory, SERIES_FILE, "\n".join(lines) + "\n")
    meta = {
        "series_version": SERIES_VERSION,
        "lift_id": plan.lift_id,
        "target": plan.target.name,
        "packages": [{"name": p, "version": v, "patch": patch_names[(p, v)]} for p, v in by_package],
        "gates": [
            {
                "gate_id": g.gate_id,
                "package": g.package,
                "kind": g.kind,
                "path": g.path,
                "condition": g.condition,
                "how": g.how,
            }
            for g in plan.planned
        ],
    }
    written += [written_series, _write_in(directory, SERIES_JSON, json.dumps(meta, indent=2) + "\n")]
    return written


def _series_problem(doc: Any) -> str | None:
    """What makes ``doc`` not a series `export_series` writes (None: nothing)."""
    if not isinstance(doc, dict):
        return f"the document is a JSON {type(doc).__name__}, not an object"
    version = doc.get("series_version")
    if version != SERIES_VERSION or isinstance(version, bool):
        return f"series_version {str(version)[:20]}: {SERIES_VERSION} expected"
    for key in ("lift_id", "target"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            return f"{key} is missing or not a string"
    for key, fields in (("packages", ("name",)), ("gates", ("gate_id", "package", "path"))):
        entries = doc.get(key)
        if not isinstance(entries, list):
            return f"{key} is missing or not a list"
        for n, entry in enumerate(entries):
            if not isinstance(entry, dict):
                return f"{key}[{n}] is not an object"
            for name in fields:
                if not isinstance(entry.get(name), str) or not entry[name]:
                    return f"{key}[{n}].{name} is missing or not a string"
            if key == "gates" and not isinstance(entry.get("condition"), str):
                return f"{key}[{n}].condition is missing or not a string"
            for name in ("version", "patch", "kind", "how"):
                if entry.get(name) is not None and not isinstance(entry[name], str):
                    return f"{key}[{n}].{name} is not a string"
            patch = entry.get("patch")
            if patch is not None and (not safe_relpath(patch) or "/" in patch):
                return f"{key}[{n}].patch {patch[:60]!r} is not a file name in the series directory"
            if key == "gates" and not safe_relpath(entry["path"]):
                return f"{key}[{n}].path {entry['path'][:60]!r} is not a path inside a package"
    return None


def read_series(directory: str) -> dict[str, Any]:
    """The checked ``liftgate-series.json`` of ``directory``; a one-line `LiftError` when it is not one."""
    path = os.path.join(directory, SERIES_JSON)
    again = "export the series again with `liftgate lift --export DIR`"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(_MAX_SERIES + 1)
    except OSError as exc:
        raise LiftError(f"cannot read {path}: {exc.strerror or exc}; {again}") from exc
    try:
        if len(raw) > _MAX_SERIES:
            raise ValueError("larger than any series liftgate writes")
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise LiftError(f"{path} is not valid JSON ({why}); {again}") from None
    problem = _series_problem(doc)
    if problem is not None:
        raise LiftError(f"{path} is not a liftgate series ({problem}); {again}")
    assert isinstance(doc, dict)
    return doc


def relocate_series(doc: Mapping[str, Any], es: EnvScan, target: Arch) -> tuple[list[str], list[SkippedGate]]:
    """The series' gates found by identity in ``es``, and those gone or changed (refused, gate by gate)."""
    by_id = {g.id: g for g in es.report.gates}
    installed = {p.name.lower(): p.version for p in es.report.packages}
    found, refused = [], []
    for g in doc["gates"]:
        gid, package = g["gate_id"], g["package"]
        if package.lower() not in installed:
            refused.append(SkippedGate(gid, f"{package} is not installed in the environment"))
        elif gid in by_id:
            if by_id[gid].status(target) is Status.ADMITTED:
                refused.append(
                    SkippedGate(
                        gid, f"already admits {target.name} here (upstream or an earlier lift opened it)"
                    )
                )
            else:
                found.append(gid)
        else:
            version = installed[package.lower()]
            refused.append(
                SkippedGate(
                    gid,
                    f"not in {package} {version}: the gate at {g['path']} ({g['condition'][:80]}) "
                    "is gone or its condition changed",
                )
            )
    return found, refused


__all__ = [
    "EnvScan",
    "LiftError",
    "PlanError",
    "apply_plan",
    "choose_gates",
    "export_series",
    "judge_env",
    "plan_env",
    "read_series",
    "relocate_series",
    "resolve_gate_ids",
    "revert",
    "scan_env",
]
