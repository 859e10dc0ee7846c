"""The PatchPlan: which edits lift which gates, as data and a unified diff, before anything changes.

`plan_lift` is pure given the scan it starts from and a way to re-detect: for each gate it picks
the language's edit (`liftgate.edits.cuda`, `py_edit`, `cmake_edit`), marks it with a comment naming
liftgate, the target and the lift id, and groups the edits by file. Then it **re-detects** the
patched files (the same detectors, reading the new text from a temporary copy) and keeps an
edit only if the gate now admits the target and nothing beyond what the edit claims (a CUDA
test admits exactly the target's compilation passes; a runtime test its capability, or every
minor of its major where the code compares majors). Other gates that change are listed: gates
that use a lifted derived macro, callers of a lifted definition, or an ``#elif`` that the lifted
branch now takes first. Any other change rejects the edit, so a heuristic never goes unchecked.

``exclude`` plans the opposite edit (``lift --exclude``, for an unsafe admission): each gate is
made to shut the target out and nothing else (a list compared by majors: every minor of it, said
in the plan), re-detected the same way, journalled and reverted like a lift.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from liftgate.arch.core import Arch, ArchSet, cuda_exact_test, universe
from liftgate.edits.cuda import EditError, lift_directive
from liftgate.lift import py_edit
from liftgate.lift.cmake_edit import cmake_edit
from liftgate.lift.text import Edit, Granularity, NoSafeEdit, TextEdit, apply_edits
from liftgate.model import Gate, GateKind, Report, Status
from liftgate.sources.workspace import Workspace

PLAN_VERSION = 1
_CUDA_MARKER = "\x00liftgate-marker\x00"  # replaced by the marker once the lift id is known

Rescan = Callable[[Mapping[tuple[str, str], str], Sequence[str]], Report]
"""Re-detect the named packages with some files read from elsewhere: ``(package, path) -> file``."""


class PlanError(ValueError):
    """The request cannot be planned (an unknown gate id, an unknown --at): one line for the user."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def safe_relpath(path: object) -> bool:
    """``path`` is a relative path that stays where it is joined (no ``..``, not absolute, no NUL)."""
    if not isinstance(path, str) or not path or "\x00" in path or "\\" in path:
        return False
    if os.path.isabs(path) or re.match(r"[A-Za-z]:", path):
        return False
    return ".." not in path.split("/") and os.path.normpath(path) != "."


def resolve_inside(path: str, root: str) -> str | None:
    """``path`` with every link resolved when that lies strictly inside ``root`` (resolved too), else None.

    Every file liftgate writes, moves or deletes is checked with this first: a path built from
    package- or journal-controlled text (a RECORD entry, a manifest) never reaches outside its root.
    """
    if not path or "\x00" in path or "\x00" in root:
        return None
    real = os.path.realpath(path)
    base = os.path.realpath(root)
    if real == base:
        return None
    return real if real.startswith(base.rstrip(os.sep) + os.sep) else None


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file of one package, before and after."""

    package: str
    version: str | None
    path: str  # inside the package: also the path in the exported patch (a/PATH, b/PATH)
    fspath: str
    before: bytes
    after: bytes
    gate_ids: tuple[str, ...]

    @property
    def sha_before(self) -> str:
        return sha256(self.before)

    @property
    def sha_after(self) -> str:
        return sha256(self.after)

    def diff(self) -> str:
        old = self.before.decode("utf-8", "surrogateescape").splitlines(keepends=True)
        new = self.after.decode("utf-8", "surrogateescape").splitlines(keepends=True)
        lines = list(difflib.unified_diff(old, new, f"a/{self.path}", f"b/{self.path}", n=3))
        return "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
        )


@dataclass(frozen=True, slots=True)
class PlannedGate:
    gate_id: str
    kind: str
    package: str
    path: str
    line: int
    condition: str
    how: str
    granularity: Granularity
    via: str | None = None  # the gate actually edited when it is not this one (a derived macro's definition)
    jit_modules: tuple[str, ...] = ()  # JIT modules a build filter guards (their cache entries go stale)

    def __post_init__(self) -> None:
        # A plan read back from its JSON (``verify --plan``) names the granularity by its value.
        object.__setattr__(self, "granularity", Granularity(self.granularity))


@dataclass(frozen=True, slots=True)
class SkippedGate:
    gate_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class PatchPlan:
    lift_id: str
    target: Arch
    planned: tuple[PlannedGate, ...]
    skipped: tuple[SkippedGate, ...]
    files: tuple[FileChange, ...]
    notes: tuple[str, ...] = ()
    verified: bool = False
    exclude: bool = False  # the edits shut the target out (``lift --exclude``) instead of admitting it

    def diff(self) -> str:
        return "".join(f.diff() for f in self.files)

    def packages(self) -> dict[str, str | None]:
        return {f.package: f.version for f in self.files}

    def jit_modules(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for p in self.planned:
            out.setdefault(p.package, set()).update(p.jit_modules)
        return out

    def to_dict(self, with_content: bool = False) -> dict[str, Any]:
        """JSON-ready; ``with_content`` adds each file's new text (``verify --plan`` applies it)."""
        doc = self._dict()
        if with_content:
            for entry, f in zip(doc["files"], self.files, strict=True):
                entry["after"] = f.after.decode("utf-8")
        return doc

    def _dict(self) -> dict[str, Any]:
        return {
            "plan_version": PLAN_VERSION,
            "lift_id": self.lift_id,
            "target": self.target.name,
            "exclude": self.exclude,
            "verified": self.verified,
            "gates": [_planned_dict(p) for p in self.planned],
            "skipped": [{"gate_id": s.gate_id, "reason": s.reason} for s in self.skipped],
            "files": [
                {
                    "package": f.package,
                    "version": f.version,
                    "path": f.path,
                    "fspath": f.fspath,
                    "sha256_before": f.sha_before,
                    "sha256_after": f.sha_after,
                    "gates": list(f.gate_ids),
                }
                for f in self.files
            ],
            "notes": list(self.notes),
        }


def _planned_dict(p: PlannedGate) -> dict[str, Any]:
    return {
        "gate_id": p.gate_id,
        "kind": p.kind,
        "package": p.package,
        "path": p.path,
        "line": p.line,
        "condition": p.condition,
        "how": p.how,
        "granularity": p.granularity.value,
        "via": p.via,
        "jit_modules": list(p.jit_modules),
    }


def exact_archs(target: Arch) -> ArchSet:
    """The targets `liftgate.arch.core.cuda_exact_test` is true for (a CUDA lift admits these)."""
    same = [a for a in universe() if a.cc == target.cc]
    if target.variant == "a":
        return ArchSet(a for a in same if a.variant == "a")
    if target.variant == "f":
        return ArchSet(a for a in same if a.variant in ("a", "f"))
    return ArchSet(same)


def allowed_archs(target: Arch, granularity: Granularity) -> ArchSet:
    if granularity is Granularity.MAJOR:
        return ArchSet(a for a in universe() if a.major == target.major)
    if granularity is Granularity.CAPABILITY:
        return ArchSet(a for a in universe() if a.cc == target.cc)
    return exact_archs(target)


def lift_id_for(target: Arch, gate_ids: Iterable[str], shas: Iterable[str], exclude: bool = False) -> str:
    key = "\x1f".join([target.name, *(["exclude"] if exclude else []), *sorted(gate_ids), *sorted(shas)])
    return "lg-" + hashlib.sha256(key.encode()).hexdigest()[:8]


def marker(target: Arch, lift_id: str, exclude: bool = False) -> str:
    return f"liftgate: {'-' if exclude else '+'}{target.name} {lift_id}"


@dataclass
class _FileWork:
    package: str
    version: str | None
    path: str
    fspath: str
    data: bytes
    text: str
    edits: list[TextEdit] = field(default_factory=list)
    gates: list[str] = field(default_factory=list)
    marker_at: set[int] = field(default_factory=set)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def _definition_gates(gate: Gate, gates: Sequence[Gate], target: Arch) -> list[Gate] | None:
    """For a CUDA gate that sees the arch only through derived macros: the gates around their
    ``#define``s (those are what a lift edits), or None when the gate tests the arch itself."""
    if "__CUDA_ARCH" in gate.condition:  # the condition's own code tests the arch
        return None
    # Defined under a condition in the sources (a flag the build passes is lifted where it is tested).
    defs = [m for m in gate.macros if m.path and m.line and m.condition and m.build_gate is None]
    if not defs:
        return None
    found: list[Gate] = []
    for e in defs:
        for g in gates:
            if (
                g.kind is GateKind.CUDA_PP
                and g.location.package == gate.location.package
                and g.location.path == e.path
                and g.then_span is not None
                and e.line is not None
                and g.then_span.start <= e.line <= g.then_span.end
                and g.status(target) is not Status.ADMITTED
            ):
                found.append(g)
    return list(dict.fromkeys(found)) or None


def plan_lift(
    report: Report,
    gate_ids: Sequence[str],
    target: Arch,
    workspace: Workspace,
    *,
    at: str = "call-site",
    rescan: Rescan | None = None,
    partial: bool = False,
    exclude: bool = False,
) -> PatchPlan:
    """Plan the lift of ``gate_ids`` (ids or unique prefixes from ``report``) for ``target``.

    ``workspace`` holds the packages' files on disk (a scan's ``report.workspace``). With
    ``rescan``, edits are re-detected and only verified ones are kept (``verified=True``): a gate
    whose edit does not verify is dropped and the rest planned again. Without ``partial`` that
    happens at most three times before the plan fails as a whole; with it (``lift --all-liftable``)
    until the plan verifies, each dropped gate skipped with its reason.
    """
    files = workspace.as_mapping()
    if at not in ("call-site", "definition"):
        raise PlanError(f"--at must be call-site or definition, not {at!r}")
    gates = resolve_ids(report.gates, gate_ids)
    skipped: list[SkippedGate] = []
    rejected: dict[str, str] = {}
    # Each round drops at least one gate, so a partial plan converges within len(gates) + 1 rounds.
    for _round in range(len(gates) + 1 if partial else 3):
        plan = _plan_once(report, gates, target, files, at, skipped, rejected, exclude)
        if rescan is None or not plan.files:
            return plan
        problems, notes = _verify(report, plan, target, rescan)
        if not problems:
            return PatchPlan(
                plan.lift_id, target, plan.planned, plan.skipped, plan.files,
                (*plan.notes, *notes), verified=True, exclude=exclude,
            )  # fmt: skip
        rejected.update({k: f"did not verify: {v}" if partial else v for k, v in problems.items()})
    raise PlanError(
        "the plan did not verify after three rounds of dropping the gates whose edits did not: "
        + "; ".join(f"{k}: {v}" for k, v in rejected.items())
    )


def matching_ids(ids: Sequence[str], wanted: str) -> list[str]:
    """The ids ``wanted`` names: itself when it is one of ``ids``, else every id it begins."""
    return [wanted] if wanted in ids else [i for i in ids if i.startswith(wanted)]


def resolve_ids(gates: Sequence[Gate], wanted: Sequence[str]) -> list[Gate]:
    """The gates ``wanted`` names (ids or unique prefixes), in order, each once; `PlanError` otherwise."""
    by_id = {g.id: g for g in gates}
    out: list[Gate] = []
    for w in wanted:
        w = w.strip()
        matches = [by_id[i] for i in matching_ids(list(by_id), w)]
        if not matches:
            raise PlanError(
                f"no gate {w!r} in the scan: run `liftgate scan` on the same environment to list ids"
            )
        if len(matches) > 1:
            raise PlanError(
                f"gate id {w!r} is ambiguous ({', '.join(g.id for g in matches[:6])}): give more characters"
            )
        out.append(matches[0])
    return list(dict.fromkeys(out))


def _plan_once(
    report: Report,
    gates: Sequence[Gate],
    target: Arch,
    files: Mapping[tuple[str, str | None], Mapping[str, str]],
    at: str,
    skipped_before: list[SkippedGate],
    rejected: Mapping[str, str],
    exclude: bool = False,
) -> PatchPlan:
    work: dict[tuple[str, str], _FileWork] = {}
    skipped = list(skipped_before)
    planned: list[PlannedGate] = []
    notes: list[str] = []
    edited: dict[str, tuple[str, Granularity]] = {}  # the gate edited -> the first requested gate it serves
    trees: dict[tuple[str, str], ast.Module] = {}

    def file_work(gate: Gate) -> _FileWork:
        key = (gate.location.package, gate.location.path)
        if key not in work:
            pkg_files = files.get((gate.location.package, gate.location.version), {})
            fspath = pkg_files.get(gate.location.path)
            if not safe_relpath(gate.location.path):
                raise NoSafeEdit(
                    f"{gate.location.path} points outside {gate.location.package}'s files (a RECORD entry "
                    "with '..' or an absolute path): liftgate does not edit it"
                )
            if fspath is None:
                raise NoSafeEdit(
                    f"{gate.location.path} is not among the scanned files of {gate.location.package}"
                )
            try:
                data = Path(fspath).read_bytes()
            except OSError as exc:
                raise NoSafeEdit(f"cannot read {fspath}: {exc.strerror or exc}") from exc
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise NoSafeEdit(f"{gate.location.path} is not UTF-8: liftgate does not edit it") from exc
            work[key] = _FileWork(
                gate.location.package, gate.location.version, gate.location.path, fspath, data, text
            )
        return work[key]

    for requested in gates:
        if requested.id in rejected:
            skipped.append(SkippedGate(requested.id, rejected[requested.id]))
            continue
        status = requested.status(target)
        if status is Status.ADMITTED and not exclude:
            skipped.append(SkippedGate(requested.id, f"already admits {target.name}"))
            continue
        if status is Status.EXCLUDED and exclude:
            skipped.append(SkippedGate(requested.id, f"already shuts {target.name} out"))
            continue
        targets_to_edit = [requested]
        via_note = None
        if requested.kind is GateKind.CUDA_PP and not exclude:
            defs = _definition_gates(requested, report.gates, target)
            if defs:
                targets_to_edit = defs
                where = ", ".join(f"{d.location.path}:{d.location.line}" for d in defs)
                via_note = where
                notes.append(
                    f"{requested.id} sees the arch only through a derived macro: the lift edits its "
                    f"definition ({where}), which admits {target.name} in every use of it"
                )
        if exclude and at == "definition":
            try:
                chosen = _definition_guard(requested, report, target, file_work, trees)
            except (NoSafeEdit, EditError) as exc:
                skipped.append(SkippedGate(requested.id, str(exc)))
                continue
            targets_to_edit = [chosen]
            via_note = f"{chosen.location.path}:{chosen.location.line}"
            notes.append(
                f"{requested.id} is narrowed in its helper, at the guard {chosen.id} ({via_note}): "
                f"that shuts {target.name} out for every caller of the helper"
            )
        for gate in targets_to_edit:
            if gate.id in edited:
                first_id, first_granularity = edited[gate.id]
                planned.append(
                    _planned(
                        requested, "the same definition edit as " + first_id, first_granularity, via_note
                    )
                )
                break
            try:
                fw = file_work(gate)
                edit = _edit_for(gate, fw, target, at, trees, report, exclude)
                granularity = edit.granularity
            except (NoSafeEdit, EditError) as exc:
                skipped.append(SkippedGate(requested.id, str(exc)))
                break
            fw.edits.extend(edit.edits)
            fw.gates.append(requested.id)
            if gate.kind is not GateKind.CUDA_PP:
                last = max(e.end for e in edit.edits)
                fw.marker_at.add(
                    py_edit.marker_position(fw.text, last)
                    if gate.kind is not GateKind.CMAKE
                    else _eol(fw.text, last)
                )
            edited[gate.id] = (requested.id, granularity)
            planned.append(_planned(requested, edit.how, granularity, via_note))
    shas = [sha256(fw.data) for fw in work.values()]
    lift_id = lift_id_for(target, [p.gate_id for p in planned], shas, exclude)
    text_marker = marker(target, lift_id, exclude)
    changes: list[FileChange] = []
    for fw in work.values():
        if not fw.edits:
            continue
        edits = list(fw.edits)
        comment = "#"
        for pos in sorted(fw.marker_at):
            edits.append(TextEdit(pos, pos, f"  {comment} {text_marker}"))
        try:
            new_text = apply_edits(fw.text, edits)
        except NoSafeEdit as exc:
            for gid in fw.gates:
                skipped.append(SkippedGate(gid, f"{fw.path}: {exc}"))
            planned = [p for p in planned if p.gate_id not in fw.gates]
            continue
        new_text = new_text.replace(_CUDA_MARKER, text_marker)
        changes.append(
            FileChange(
                fw.package, fw.version, fw.path, fw.fspath, fw.data, new_text.encode("utf-8"), tuple(fw.gates)
            )
        )
    changes.sort(key=lambda c: (c.package.lower(), c.path))
    return PatchPlan(
        lift_id, target, tuple(planned), tuple(skipped), tuple(changes), tuple(dict.fromkeys(notes)),
        exclude=exclude,
    )  # fmt: skip


def _eol(text: str, offset: int) -> int:
    end = text.find("\n", offset)
    end = len(text) if end < 0 else end
    return end - 1 if end > 0 and text[end - 1] == "\r" else end


def _planned(gate: Gate, how: str, granularity: Granularity, via: str | None) -> PlannedGate:
    modules = tuple(dict.fromkeys(b.name for b in gate.builds if b.what == "JIT module" and b.name))
    return PlannedGate(
        gate.id, gate.kind.value, gate.location.package, gate.location.path, gate.location.line,
        gate.condition, how, granularity, via, modules,
    )  # fmt: skip


def _edit_for(
    gate: Gate,
    fw: _FileWork,
    target: Arch,
    at: str,
    trees: dict[tuple[str, str], ast.Module],
    report: Report,
    exclude: bool = False,
) -> Edit:
    if exclude:
        return _exclude_edit(gate, fw, target, trees)
    if gate.kind is GateKind.CUDA_PP:
        return _cuda_edit(gate, fw, target, exclude=False)
    if gate.kind in (GateKind.PY_RUNTIME, GateKind.PY_BUILD):
        tree = _tree(fw, trees)
        if gate.kind is GateKind.PY_BUILD:
            return py_edit.build_edit(fw.text, gate, target, tree)
        if at == "definition":
            edit = _definition_edit(gate, fw, target, report)
            if edit is not None:
                return edit
        return py_edit.runtime_edit(fw.text, gate, target, tree)
    if gate.kind is GateKind.CMAKE:
        return cmake_edit(fw.text, gate, target, _line_starts(fw.text))
    raise NoSafeEdit(
        f"a {gate.kind.value} gate is compiled into the package's binaries: lifting it needs a rebuild "
        "from source, which liftgate does not do"
    )


def _definition_guard(
    requested: Gate,
    report: Report,
    target: Arch,
    file_work: Callable[[Gate], _FileWork],
    trees: dict[tuple[str, str], ast.Module],
) -> Gate:
    """``lift --exclude --at definition``: the gate inside the helper a call-site gate calls that
    is best narrowed for ``target``: one whose comparison can take the target in (``sm_version ==
    120`` becomes ``in (120, 121)``), else the first that can be narrowed at all."""
    if requested.kind is not GateKind.PY_RUNTIME:
        raise NoSafeEdit("--at definition narrows a Python helper's guard; this gate is no Python call site")
    evidence = [e for e in requested.evidence if e.path and e.line]
    if not evidence:
        raise NoSafeEdit("no helper definition is known for this gate: narrow it at its call site")
    first = evidence[0]
    if first.path != requested.location.path:
        raise NoSafeEdit(
            f"the helper is defined in {first.path}:{first.line}, another module: narrow a gate there"
        )
    fw = file_work(requested)
    assert first.line is not None
    line = first.line
    functions = [
        n
        for n in ast.walk(_tree(fw, trees))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.lineno <= line <= (n.end_lineno or n.lineno)
    ]
    if not functions:
        raise NoSafeEdit(f"{first.path}:{first.line} is in no function: narrow the gate at its call site")
    fn = max(functions, key=lambda n: n.lineno)  # the innermost
    inside = [
        g
        for g in report.gates
        if g.kind is GateKind.PY_RUNTIME
        and g.id != requested.id
        and g.location.package == requested.location.package
        and g.location.path == requested.location.path
        and fn.lineno <= g.location.line <= (fn.end_lineno or fn.lineno)
        and g.status(target) is Status.ADMITTED
    ]
    ranked: list[tuple[int, int, Gate]] = []
    for g in inside:
        try:
            edit = _exclude_edit(g, fw, target, trees)
        except NoSafeEdit:
            continue
        ranked.append(
            (0 if " became " in edit.how or edit.how.startswith("added ") else 1, g.location.line, g)
        )
    if not ranked:
        raise NoSafeEdit(
            f"no gate inside {fn.name}() ({first.path}:{fn.lineno}) admits {target.name} in a form liftgate "
            "can narrow: narrow the gate at its call site"
        )
    return min(ranked, key=lambda r: (r[0], r[1]))[2]


def _tree(fw: _FileWork, trees: dict[tuple[str, str], ast.Module]) -> ast.Module:
    """The file's syntax tree, parsed once per plan."""
    key = (fw.package, fw.path)
    if key not in trees:
        trees[key] = py_edit.parse_module(fw.text, fw.path)
    return trees[key]


def _cuda_edit(gate: Gate, fw: _FileWork, target: Arch, exclude: bool) -> Edit:
    """The directive's lines, or'ed with the target's exact test (or, to exclude it, and'ed with
    its negation): `liftgate.edits.cuda.lift_directive`."""
    starts = _line_starts(fw.text)
    span = gate.location.span
    if span.end > len(starts):
        raise NoSafeEdit(f"{gate.location.path} is shorter than line {span.end}: rescan and plan again")
    begin = starts[span.start - 1]
    end = starts[span.end] if span.end < len(starts) else len(fw.text)
    lines = fw.text[begin:end].splitlines(keepends=True)
    directive = lift_directive(lines, _CUDA_MARKER, target, exclude=exclude)
    test = cuda_exact_test(target)
    how = f"and'ed with !{test}" if exclude else f"or'ed with {test}"
    return Edit((TextEdit(begin, end, "".join(directive.after)),), how, Granularity.EXACT)


def _exclude_edit(gate: Gate, fw: _FileWork, target: Arch, trees: dict[tuple[str, str], ast.Module]) -> Edit:
    """The edit that shuts ``target`` out of what ``gate`` admits (``lift --exclude``)."""
    if gate.kind is GateKind.CUDA_PP:
        return _cuda_edit(gate, fw, target, exclude=True)
    if gate.kind in (GateKind.PY_RUNTIME, GateKind.PY_BUILD):
        tree = _tree(fw, trees)
        if gate.kind is GateKind.PY_BUILD:
            span = gate.location.span
            return py_edit.narrow_list_edit(fw.text, span.start, span.end, target, tree)
        return py_edit.narrow_runtime_edit(fw.text, gate, target, tree)
    raise NoSafeEdit(
        f"liftgate does not narrow a {gate.kind.value} gate: "
        + (
            "edit the arch list by hand (or drop the target from CUDA_ARCHITECTURES / TORCH_CUDA_ARCH_LIST) "
            "and rebuild from source"
            if gate.kind is GateKind.CMAKE
            else "it is compiled into the package's binaries; narrowing it needs a rebuild from source"
        )
    )


def _definition_edit(gate: Gate, fw: _FileWork, target: Arch, report: Report) -> Edit | None:
    """``--at definition``: widen a literal arch list on a line of the gate's evidence chain.

    Only edits inside the same file are planned here (the evidence line must be in ``fw``); a
    definition elsewhere raises with where it is, so the user can lift that file's gate.
    """
    for e in reversed(gate.evidence):
        if not (e.path and e.line):
            continue
        if e.path != fw.path:
            raise NoSafeEdit(
                f"the definition is in {e.path}:{e.line}, another module: lift the gate there, "
                "or use the default call-site edit"
            )
        try:
            edit = py_edit.list_edit(fw.text, e.line, e.line, target)
        except NoSafeEdit:
            continue
        callers = [
            g.id
            for g in report.gates
            if g.id != gate.id and any(x.path == e.path and x.line == e.line for x in g.evidence)
        ]
        how = f"{edit.how} in the definition at {e.path}:{e.line}"
        if callers:
            how += f"; this changes every caller ({len(callers)} more gates: {', '.join(callers[:8])})"
        return Edit(edit.edits, how, edit.granularity)
    return None


def _verify(
    report: Report, plan: PatchPlan, target: Arch, rescan: Rescan
) -> tuple[dict[str, str], list[str]]:
    """Re-detect the patched files; (rejected gate ids with why, notes on other gates that changed)."""
    packages = sorted({c.package for c in plan.files})
    with tempfile.TemporaryDirectory(prefix="liftgate-plan-") as tmp:
        overlay: dict[tuple[str, str], str] = {}
        for n, change in enumerate(plan.files):
            dest = os.path.join(tmp, str(n), os.path.basename(change.path))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(change.after)
            overlay[(change.package, change.path)] = dest
        after = rescan(overlay, packages)
    touched = {(c.package, c.path) for c in plan.files}
    before_by_loc = {_loc(g): g for g in report.gates if g.location.package in packages}
    after_by_loc = {_loc(g): g for g in after.gates if g.location.package in packages}
    problems: dict[str, str] = {}
    notes: list[str] = []
    lifted = {p.gate_id: p for p in plan.planned}
    allowed_by_gate = {p.gate_id: allowed_archs(target, p.granularity) for p in plan.planned}
    every_allowed = ArchSet.none()
    for a in allowed_by_gate.values():
        every_allowed = every_allowed | a
    for loc, old in before_by_loc.items():
        new = after_by_loc.get(loc)
        planned = lifted.get(old.id)
        if planned is not None:
            if new is None:
                problems[old.id] = "after the edit the gate is no longer detected at its line (not verified)"
                continue
            if plan.exclude:
                problem = _excluded_problem(old, new, target, allowed_by_gate[old.id])
                if problem is not None:
                    problems[old.id] = problem
                elif len(old.admitted - new.admitted) > 1:
                    notes.append(
                        f"{old.id} now shuts out {(old.admitted - new.admitted).render()} (the code compares "
                        f"{planned.granularity.value}s)"
                    )
                continue
            gained = new.admitted - old.admitted
            if target not in new.admitted:
                problems[old.id] = (
                    f"after the edit the gate still excludes {target.name} (admits {new.admitted.render()})"
                )
            elif (old.admitted - new.admitted) or not gained.issubset(allowed_by_gate[old.id]):
                problems[old.id] = (
                    f"after the edit the gate admits {new.admitted.render()}, beyond {target.name}: not applied"
                )
            continue
        if (
            (old.location.package, old.location.path) not in touched
            and new is not None
            and (new.admitted == old.admitted and new.unknown == old.unknown)
        ):
            continue
        if new is None:
            if (old.location.package, old.location.path) in touched:
                owner = _owner(old, plan)
                problems[owner] = (
                    f"the edit made gate {old.id} ({old.location.path}:{old.location.line}) disappear"
                )
            continue
        if new.admitted == old.admitted and new.unknown == old.unknown:
            continue
        gained, lost = new.admitted - old.admitted, old.admitted - new.admitted
        where = f"{old.id} ({old.location.path}:{old.location.line})"
        if gained and gained.issubset(every_allowed) and not lost:
            notes.append(
                f"{where} now admits {target.name}: the narrowed branch before it no longer takes it"
                if plan.exclude
                else f"{where} now admits {target.name} too (it depends on a lifted gate)"
            )
        elif lost and lost.issubset(every_allowed) and not gained:
            notes.append(
                f"{where} no longer admits {target.name} (it depends on a narrowed gate)"
                if plan.exclude
                else f"{where} no longer admits {target.name}: the lifted branch before it is taken first"
            )
        elif not gained and not lost:
            notes.append(f"{where}: what is unknown for it changed")
        elif _untouched_by(old, new, touched):
            # A CUDA gate outside the edited files that reads no macro they define: the edit cannot
            # change it. (Headers of include cycles once read differently from scan to scan; they
            # no longer do, but such a change is still said, not blamed on the edit.)
            notes.append(
                f"{where} read differently by the re-scan (admits {new.admitted.render()}, was "
                f"{old.admitted.render()}), though it reads nothing the edit changed: not the edit's doing"
            )
        else:
            owner = _owner(old, plan)
            problems[owner] = (
                f"the edit changed gate {where} beyond {target.name} (admits {new.admitted.render()})"
            )
    for loc, new in after_by_loc.items():
        if (
            loc not in before_by_loc
            and (new.location.package, new.location.path) in touched
            and new.location.line not in {p.line for p in plan.planned if p.path == new.location.path}
        ):
            problems[_owner(new, plan)] = (
                f"the edit made a new gate appear at {new.location.path}:{new.location.line}"
            )
    return problems, notes


def _excluded_problem(old: Gate, new: Gate, target: Arch, allowed: ArchSet) -> str | None:
    """Why a narrowed gate does not verify: it still admits the target (or may), or it changed
    beyond the targets its edit names; None when it verifies."""
    if target in new.admitted or target in new.unknown:
        return f"after the edit the gate still admits {target.name} (admits {new.admitted.render()})"
    if (new.admitted - old.admitted) or not (old.admitted - new.admitted).issubset(allowed):
        return f"after the edit the gate admits {new.admitted.render()}, not only without {target.name}: not applied"
    return None


def _untouched_by(old: Gate, new: Gate, touched: set[tuple[str, str]]) -> bool:
    """A cuda-pp gate in a file the plan does not edit, whose macros are defined outside the edited
    files too: nothing the edit writes reaches its condition."""
    package = old.location.package
    if old.kind is not GateKind.CUDA_PP or (package, old.location.path) in touched:
        return False
    return all((package, m.path) not in touched for m in (*old.macros, *new.macros) if m.path)


def _loc(g: Gate) -> tuple[str, str, int, str]:
    return (g.location.package, g.location.path, g.location.span.start, g.kind.value)


def _owner(g: Gate, plan: PatchPlan) -> str:
    """The planned gate whose edit is to blame for a change in ``g`` (the nearest one in its file)."""
    same = [p for p in plan.planned if p.package == g.location.package and p.path == g.location.path]
    if not same:
        same = list(plan.planned)
    return min(same, key=lambda p: abs(p.line - g.location.line)).gate_id


def plan_to_json(plan: PatchPlan) -> str:
    return json.dumps(plan.to_dict(), indent=2) + "\n"
