"""Lift as a library: scan an environment, plan, apply, revert, export and re-apply patch series.

These functions tie `liftgate.scan` to the pure planner (`liftgate.lift.plan`) and the journal
(`liftgate.lift.journal`); the CLI commands (``lift``, ``status``, ``revert``,
``apply-patches``) are thin layers over them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from liftgate.arch.core import Arch
from liftgate.lift.caches import CacheMover, shadowing_packages
from liftgate.lift.journal import Journal, LiftError, prefix_for
from liftgate.lift.plan import PatchPlan, PlanError, SkippedGate, plan_lift
from liftgate.model import Report, Status, VerdictKind
from liftgate.sources.interface import Observer

SERIES_FILE = "series"
SERIES_JSON = "liftgate-series.json"
SERIES_VERSION = 1


@dataclass(frozen=True)
class EnvScan:
    report: Report
    files: dict[tuple[str, str | None], dict[str, str]]
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
    from liftgate.scanner import scan

    files: dict[tuple[str, str | None], dict[str, str]] = {}
    report = scan(
        [], [target], env=env, judge=judge, files_out=files, cache_dir=cache_dir,
        observer=observer, only_packages=only_packages,
    )  # fmt: skip

    def rescan(overlay: Mapping[tuple[str, str], str], packages: Sequence[str]) -> Report:
        return scan([], [target], env=env, overlay=overlay, only_packages=packages, cache_dir=cache_dir)

    return EnvScan(report, files, env, rescan)


def choose_gates(
    es: EnvScan, target: Arch, gate_ids: Sequence[str], all_liftable: bool, force: bool
) -> tuple[list[str], list[SkippedGate]]:
    """The gate ids to plan, and those refused because the judge says they are blocked."""
    index = es.report.verdict_index()
    if all_liftable:
        ids = [v.gate_id for v in es.report.verdicts if v.target == target and v.kind is VerdictKind.LIFTABLE]
        return list(dict.fromkeys(ids)), []
    chosen, refused = [], []
    from liftgate.lift.plan import _resolve_ids

    for gate in _resolve_ids(es.report.gates, gate_ids):
        verdict = index.get((gate.id, target))
        if verdict is not None and verdict.kind is VerdictKind.BLOCKED and not force:
            why = verdict.reasons[0] if verdict.reasons else "blocked"
            refused.append(
                SkippedGate(gate.id, f"judged blocked for {target.name}: {why} (--force lifts it anyway)")
            )
        else:
            chosen.append(gate.id)
    return chosen, refused


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
    from liftgate.lift.plan import _resolve_ids
    from liftgate.scanner import _read_text_lenient

    (gate,) = _resolve_ids(es.report.gates, [gate_id])
    # A gate that starts a chain lifts its own; any other, the one chain that reaches it.
    chains = chains_of_gate(gate.id, es.report.gates, [target], es.files, _read_text_lenient, reaching=False)
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
    verdicts += judge_members([chain], es.report.gates, [target], es.files, _read_text_lenient, verdicts)
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
) -> PatchPlan:
    plan = plan_lift(es.report, gate_ids, target, es.files, at=at, rescan=es.rescan)
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
        tuple(dict.fromkeys(notes)), plan.verified,
    )  # fmt: skip


def apply_plan(plan: PatchPlan, env: str | None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    journal = Journal(prefix_for(env))
    with journal.locked():
        doc = journal.apply(plan, CacheMover(dict(environ if environ is not None else os.environ)))
    doc["recovery_notes"] = journal.notes
    return doc


def revert(
    lift_id: str | None, env: str | None, *, force: bool = False, environ: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Revert one lift, or every active lift newest first (``lift_id`` None)."""
    journal = Journal(prefix_for(env))
    mover = CacheMover(dict(environ if environ is not None else os.environ))
    done = []
    with journal.locked():
        if lift_id is None:
            for doc in reversed(journal.active()):
                done.append(journal.revert(doc["lift_id"], force=force, caches=mover))
        else:
            done.append(journal.revert(lift_id, force=force, caches=mover))
    return done, journal.notes


def export_series(plan: PatchPlan, directory: str) -> list[str]:
    """Write one unified diff per package, a quilt-style ``series`` and ``liftgate-series.json``."""
    os.makedirs(directory, exist_ok=True)
    written = []
    by_package: dict[tuple[str, str | None], list[Any]] = {}
    for f in plan.files:
        by_package.setdefault((f.package, f.version), []).append(f)
    names = []
    for (package, version), changes in sorted(by_package.items(), key=lambda kv: kv[0][0].lower()):
        name = f"{package}-{version or 'unversioned'}.patch"
        header = (
            f"liftgate {plan.lift_id}: lift {package} {version or ''} for {plan.target.name}\n\n".replace(
                "  ", " "
            )
        )
        gates = [p for p in plan.planned if p.package == package]
        header += "".join(f"  {g.gate_id} {g.path}:{g.line} {g.how}\n" for g in gates) + "\n"
        body = "".join(c.diff() for c in changes)
        with open(os.path.join(directory, name), "w", encoding="utf-8", newline="") as fh:
            fh.write(header + body)
        names.append(name)
        written.append(os.path.join(directory, name))
    lines = [f"# liftgate patch series {plan.lift_id}: target {plan.target.name}"]
    for package, version in sorted(by_package, key=lambda k: k[0].lower()):
        ids = [p.gate_id for p in plan.planned if p.package == package]
        lines.append(f"# {package} {version or ''}: {' '.join(ids)}".rstrip())
    lines.append(
        "# apply from the root a package installs into (site-packages or an unpacked wheel): patch -p1"
    )
    lines.extend(names)
    with open(os.path.join(directory, SERIES_FILE), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    meta = {
        "series_version": SERIES_VERSION,
        "lift_id": plan.lift_id,
        "target": plan.target.name,
        "packages": [
            {"name": p, "version": v, "patch": f"{p}-{v or 'unversioned'}.patch"} for p, v in by_package
        ],
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
    with open(os.path.join(directory, SERIES_JSON), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(meta, indent=2) + "\n")
    written += [os.path.join(directory, SERIES_FILE), os.path.join(directory, SERIES_JSON)]
    return written


def read_series(directory: str) -> dict[str, Any]:
    path = os.path.join(directory, SERIES_JSON)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise LiftError(
            f"cannot read {path}: {exc.strerror or exc}; export a series with `liftgate lift --export DIR`"
        ) from exc
    except ValueError as exc:
        raise LiftError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("series_version") != SERIES_VERSION:
        raise LiftError(f"{path}: not a liftgate series (series_version {SERIES_VERSION} expected)")
    return doc


def relocate_series(doc: Mapping[str, Any], es: EnvScan, target: Arch) -> tuple[list[str], list[SkippedGate]]:
    """The series' gates found by identity in ``es``, and those gone or changed (refused, gate by gate)."""
    by_id = {g.id: g for g in es.report.gates}
    installed = {p.name.lower(): p.version for p in es.report.packages}
    found, refused = [], []
    for g in doc.get("gates", []):
        gid, package = g.get("gate_id", ""), g.get("package", "")
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
                    f"not in {package} {version}: the gate at {g.get('path')} ({g.get('condition', '')[:80]}) "
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
    "plan_env",
    "read_series",
    "relocate_series",
    "revert",
    "scan_env",
]
