"""Score liftgate's Python, C++ host and build-file gate detectors against hand-labelled ground truth.

Usage: python bench/label_eval.py [LABEL_FILE ...] [--json] [--target sm_120] [--offline]

Each ``bench/labels/<package>-<version>.json`` names a release (``spec``; ``"sdist": true`` to
scan its source distribution, fetched from the index without a build) and, for a few of its
files, every gate (``py-runtime``, ``cpp-runtime``, ``py-build``, ``cmake``) a person found by
reading the code, the near-misses (lines a grep for ``sm_``/``capability``/``major``/``CUDA_ARCH``
would flag that are not gates) and the ambiguous lines (where a detector may reasonably go either
way; they count for nothing). The rules are in ``bench/labels/README.md``.

For every label file the release is scanned with ``liftgate.scan`` (downloads are cached by
liftgate); the detected gates of the four kinds located in the labelled files are matched to
the labels: same path, same kind, and a labelled line within the gate's span or within one line
of its start (one detection per label; nearest first, and among equally near pairs those whose
admitted sets agree first, so two gates on one line, as in a nested ``?:``, pair up sensibly).
Printed per package and in total, per kind: detections, labels, true positives, precision, recall
and admitted-set agreement (matched gates whose admitted set, projected to capabilities for the
runtime kinds ``py-runtime``/``cpp-runtime`` and to arch names for the build kinds, equals the
label's), then the near-misses that were detected, the missed labels (false negatives) and the
unmatched detections (false positives). A measurement, not a test: it exits 0.

The scoring is pure (`load_labels`, `score_file`, `summarize` take dicts and `Detection`s), so
``tests/test_label_eval.py`` checks it without the network.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from liftgate.arch.core import universe

KINDS = ("py-runtime", "cpp-runtime", "py-build", "cmake")
RUNTIME_KINDS = ("py-runtime", "cpp-runtime")  # admit capabilities ("9.0"), not compilation targets
BUILD_KINDS = ("py-build", "cmake")
ELSE_KINDS = ("none", "fallback", "error")
LABELS_DIR = Path(__file__).resolve().parent / "labels"
_ARCH_NAME = re.compile(r"^sm_(\d+)([af]?)$")


# --- the universes ------------------------------------------------------------------------------


def arch_names() -> tuple[str, ...]:
    """Every known compilation target, oldest first: sm_70 … sm_121f."""
    return tuple(a.name for a in universe())


def capabilities() -> tuple[str, ...]:
    """Every known runtime capability as "major.minor", oldest first: 7.0 … 12.1."""
    seen: dict[str, None] = {}
    for a in universe():
        seen.setdefault(f"{a.major}.{a.minor}", None)
    return tuple(seen)


def _cap_key(cap: str) -> tuple[int, int]:
    major, _, minor = cap.partition(".")
    return int(major), int(minor)


def _arch_key(name: str) -> tuple[int, int, str]:
    m = _ARCH_NAME.match(name)
    if m is None:
        raise ValueError(f"not an arch name: {name!r}")
    number = int(m.group(1))
    return number // 10, number % 10, m.group(2)


def cap_of_arch(name: str) -> str:
    """``sm_90a`` -> ``9.0``: what a runtime check sees of a compilation target."""
    major, minor, _ = _arch_key(name)
    return f"{major}.{minor}"


def expand_runtime(spec: str | Sequence[str]) -> frozenset[str]:
    """Capabilities from a label's ``admits``: "9.0", ">=9.0", "9.x", "all", or a list of these."""
    items = [spec] if isinstance(spec, str) else list(spec)
    caps = capabilities()
    out: set[str] = set()
    for item in items:
        item = item.strip()
        if item == "all":
            out.update(caps)
        elif item.startswith(">="):
            low = _cap_key(item[2:])
            out.update(c for c in caps if _cap_key(c) >= low)
        elif item.endswith(".x"):
            major = int(item[:-2])
            out.update(c for c in caps if _cap_key(c)[0] == major)
        elif item in caps:
            out.add(item)
        else:
            raise ValueError(f"unknown capability in admits: {item!r} (known: {', '.join(caps)})")
    return frozenset(out)


def expand_build(spec: str | Sequence[str]) -> frozenset[str]:
    """Arch names from a label's ``admits``: "sm_90a", ">=sm_90" (baseline targets from sm_90 on), "all"."""
    items = [spec] if isinstance(spec, str) else list(spec)
    names = arch_names()
    out: set[str] = set()
    for item in items:
        item = item.strip()
        if item == "all":
            out.update(names)
        elif item.startswith(">="):
            low = _arch_key(item[2:])
            out.update(n for n in names if _arch_key(n)[2] == "" and _arch_key(n)[:2] >= low[:2])
        elif item in names:
            out.add(item)
        else:
            raise ValueError(f"unknown target in admits: {item!r}")
    return frozenset(out)


def expand_admits(kind: str, spec: str | Sequence[str]) -> frozenset[str]:
    return expand_runtime(spec) if kind in RUNTIME_KINDS else expand_build(spec)


def project(kind: str, admitted: Iterable[str]) -> frozenset[str]:
    """A detected admitted set (arch names) in the label's terms: capabilities for runtime gates."""
    if kind in RUNTIME_KINDS:
        return frozenset(cap_of_arch(n) for n in admitted)
    return frozenset(admitted)


def render_set(kind: str, values: Iterable[str]) -> str:
    """Compact rendering for listings: runtime sets as ">=9.0" when they are a suffix of the universe."""
    vals = set(values)
    if kind in RUNTIME_KINDS:
        caps = capabilities()
        ordered = [c for c in caps if c in vals]
        if not ordered:
            return "{}"
        first = caps.index(ordered[0])
        if ordered == list(caps[first:]):
            return "all" if first == 0 else f">={ordered[0]}"
        return "{" + ", ".join(ordered) + "}"
    return "{" + ", ".join(sorted(vals, key=_arch_key)) + "}" if vals else "{}"


# --- labels ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateLabel:
    path: str
    line: int
    kind: str
    admits: frozenset[str]
    else_kind: str | None
    confidence: str
    text: str
    lines: tuple[int, ...]  # every line a detection may anchor on (``line`` first)
    note: str = ""


@dataclass(frozen=True)
class LineLabel:
    """A near-miss or an ambiguous line."""

    path: str
    line: int
    text: str
    why: str
    kind: str | None = None
    admits: frozenset[str] | None = None


@dataclass(frozen=True)
class FileLabels:
    path: str
    gates: tuple[GateLabel, ...]
    near_misses: tuple[LineLabel, ...]
    ambiguous: tuple[LineLabel, ...] = ()
    # Only the labelled lines were read (``"partial": true``): a detection elsewhere in the file is
    # outside what was labelled and counts for nothing, like an ambiguous line.
    partial: bool = False


@dataclass(frozen=True)
class LabelSet:
    package: str
    version: str
    spec: str
    files: tuple[FileLabels, ...]
    source: str = ""  # the label file
    sdist: bool = False  # scan the release's sdist (``liftgate.scan(..., sdist=True)``)

    def gate_count(self, kind: str | None = None) -> int:
        return sum(1 for f in self.files for g in f.gates if kind is None or g.kind == kind)


def load_labels(data: Mapping[str, Any], source: str = "") -> LabelSet:
    """Validate and normalise one label file's content (shorthands expanded)."""
    files: list[FileLabels] = []
    for path, entry in data["files"].items():
        gates: list[GateLabel] = []
        for g in entry.get("gates", []):
            kind = g["kind"]
            if kind not in KINDS:
                raise ValueError(f"{source}:{path}:{g['line']}: unknown kind {kind!r}")
            else_kind = g.get("else")
            if else_kind is not None and else_kind not in ELSE_KINDS:
                raise ValueError(f"{source}:{path}:{g['line']}: unknown else {else_kind!r}")
            lines = tuple(dict.fromkeys([int(g["line"]), *(int(x) for x in g.get("lines", []))]))
            gates.append(
                GateLabel(
                    path=path,
                    line=int(g["line"]),
                    kind=kind,
                    admits=expand_admits(kind, g["admits"]),
                    else_kind=else_kind,
                    confidence=g.get("confidence", "exact"),
                    text=g.get("text", ""),
                    lines=lines,
                    note=g.get("note", ""),
                )
            )
        near = tuple(
            LineLabel(path, int(n["line"]), n.get("text", ""), n.get("why", ""))
            for n in entry.get("near_misses", [])
        )
        ambiguous = tuple(
            LineLabel(
                path,
                int(a["line"]),
                a.get("text", ""),
                a.get("why", ""),
                a.get("kind"),
                expand_admits(a["kind"], a["admits"]) if a.get("kind") and "admits" in a else None,
            )
            for a in entry.get("ambiguous", [])
        )
        # several gates may share a line (a nested ``a ? b : (c ? d : e)``); a line is never both a
        # gate and a near-miss or ambiguous, nor two near-misses/ambiguous lines
        taken = sorted({x.line for x in gates}) + [x.line for x in near] + [x.line for x in ambiguous]
        if len(taken) != len(set(taken)):
            raise ValueError(f"{source}:{path}: a line is labelled twice")
        seen_gates = [(x.line, x.kind, x.admits) for x in gates]
        if len(seen_gates) != len(set(seen_gates)):
            raise ValueError(f"{source}:{path}: the same gate is labelled twice")
        partial = entry.get("partial", False)
        if not isinstance(partial, bool):
            raise ValueError(f"{source}:{path}: partial must be true or false, not {partial!r}")
        files.append(FileLabels(path, tuple(sorted(gates, key=lambda x: x.line)), near, ambiguous, partial))
    sdist = data.get("sdist", False)
    if not isinstance(sdist, bool):
        raise ValueError(f"{source}: sdist must be true or false, not {sdist!r}")
    return LabelSet(data["package"], data["version"], data["spec"], tuple(files), source, sdist)


def load_label_file(path: str | Path) -> LabelSet:
    with open(path, encoding="utf-8") as fh:
        return load_labels(json.load(fh), str(path))


# --- detections and matching --------------------------------------------------------------------


@dataclass(frozen=True)
class Detection:
    """What the scorer needs of a detected gate (built from a `liftgate.model.Gate` by `from_gate`)."""

    path: str
    start: int
    end: int
    kind: str
    admitted: frozenset[str]  # arch names, e.g. {"sm_90", "sm_90a"}
    condition: str = ""
    else_kind: str | None = None
    gate_id: str = ""

    def covers(self, line: int) -> bool:
        return self.start <= line <= self.end or abs(line - self.start) <= 1

    def distance(self, line: int) -> int:
        if self.start <= line <= self.end:
            return 0
        return abs(line - self.start)


def from_gate(gate: Any) -> Detection:
    """A `Detection` from a liftgate `Gate` (duck-typed so tests can pass a fake)."""
    span = gate.location.span
    kind = getattr(gate.kind, "value", gate.kind)
    else_kind = getattr(gate.else_kind, "value", gate.else_kind)
    return Detection(
        path=gate.location.path,
        start=span.start,
        end=span.end,
        kind=str(kind),
        admitted=frozenset(a.name for a in gate.admitted),
        condition=gate.condition,
        else_kind=None if else_kind is None else str(else_kind),
        gate_id=gate.id,
    )


@dataclass
class Match:
    label: GateLabel
    detection: Detection
    projected: frozenset[str]

    @property
    def agrees(self) -> bool:
        return self.projected == self.label.admits

    @property
    def else_agrees(self) -> bool | None:
        if self.label.else_kind is None or self.detection.else_kind is None:
            return None
        return self.label.else_kind == self.detection.else_kind


@dataclass
class FileScore:
    path: str
    matches: list[Match] = field(default_factory=list)
    missed: list[GateLabel] = field(default_factory=list)  # false negatives
    false_positives: list[tuple[Detection, str]] = field(default_factory=list)  # with a reason
    near_miss_hits: list[tuple[LineLabel, Detection]] = field(default_factory=list)
    ambiguous_hits: list[tuple[LineLabel, Detection]] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)


def score_file(labels: FileLabels, detections: Sequence[Detection]) -> FileScore:
    """Match the detections of one file to its labels, one-to-one, nearest first.

    Among equally near pairs, those whose admitted sets agree go first: two gates on one line (a
    nested conditional expression) then pair with the detections that read them the same way.
    """
    dets = [d for d in detections if d.path == labels.path and d.kind in KINDS]
    out = FileScore(labels.path, detections=list(dets))
    # (distance, 0 when the admitted sets agree, label line, label index, detection index)
    pairs: list[tuple[int, int, int, int, int]] = []
    for li, label in enumerate(labels.gates):
        for di, det in enumerate(dets):
            if det.kind != label.kind:
                continue
            hits = [det.distance(line) for line in label.lines if det.covers(line)]
            if hits:
                disagrees = int(project(label.kind, det.admitted) != label.admits)
                pairs.append((min(hits), disagrees, label.line, li, di))
    used_labels: set[int] = set()
    used_dets: set[int] = set()
    for _, _, _, li, di in sorted(pairs):
        if li in used_labels or di in used_dets:
            continue
        used_labels.add(li)
        used_dets.add(di)
        label, det = labels.gates[li], dets[di]
        out.matches.append(Match(label, det, project(label.kind, det.admitted)))
    out.matches.sort(key=lambda m: m.label.line)
    out.missed = [g for i, g in enumerate(labels.gates) if i not in used_labels]
    for di, det in enumerate(dets):
        if di in used_dets:
            continue
        amb = _nearest(labels.ambiguous, det, same_kind=True)
        if amb is not None:
            out.ambiguous_hits.append((amb, det))
            continue
        near = _nearest(labels.near_misses, det)
        if near is not None:
            out.near_miss_hits.append((near, det))
            out.false_positives.append((det, f"near-miss: {near.why}"))
            continue
        other_kind = [g for g in labels.gates if g.kind != det.kind and any(det.covers(x) for x in g.lines)]
        if labels.partial and not other_kind:
            out.ambiguous_hits.append(
                (LineLabel(labels.path, det.start, "", "outside the labelled part"), det)
            )
            continue
        reason = f"kind mismatch: labelled {other_kind[0].kind}" if other_kind else "not labelled"
        out.false_positives.append((det, reason))
    return out


def _nearest(items: Sequence[LineLabel], det: Detection, same_kind: bool = False) -> LineLabel | None:
    """The labelled line nearest to ``det`` that it covers (for ambiguous lines with a kind: of its kind)."""
    found = [
        (det.distance(x.line), x.line, x)
        for x in items
        if det.covers(x.line) and not (same_kind and x.kind is not None and x.kind != det.kind)
    ]
    return min(found, key=lambda t: (t[0], t[1]))[2] if found else None


# --- aggregation ---------------------------------------------------------------------------------


@dataclass
class KindStats:
    detections: int = 0
    ambiguous: int = 0
    labels: int = 0
    tp: int = 0
    agree: int = 0
    else_agree: int = 0
    else_compared: int = 0
    near_miss_hits: int = 0

    def add(self, other: KindStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def precision(self) -> float | None:
        scored = self.detections - self.ambiguous
        return self.tp / scored if scored else None

    @property
    def recall(self) -> float | None:
        return self.tp / self.labels if self.labels else None

    @property
    def agreement(self) -> float | None:
        return self.agree / self.tp if self.tp else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "detections": self.detections,
            "ambiguous_detections": self.ambiguous,
            "labels": self.labels,
            "true_positives": self.tp,
            "precision": self.precision,
            "recall": self.recall,
            "admitted_agreement": self.agreement,
            "else_agreement": self.else_agree / self.else_compared if self.else_compared else None,
            "near_miss_hits": self.near_miss_hits,
        }


def summarize(scores: Sequence[FileScore], labels: LabelSet | None = None) -> dict[str, KindStats]:
    """Per-kind statistics over file scores, plus "all"."""
    stats = {k: KindStats() for k in KINDS}
    if labels is not None:
        for f in labels.files:
            for g in f.gates:
                stats[g.kind].labels += 1
    else:
        for s in scores:
            for m in s.matches:
                stats[m.label.kind].labels += 1
            for g in s.missed:
                stats[g.kind].labels += 1
    for s in scores:
        for d in s.detections:
            stats[d.kind].detections += 1
        for _, d in s.ambiguous_hits:
            stats[d.kind].ambiguous += 1
        for _, d in s.near_miss_hits:
            stats[d.kind].near_miss_hits += 1
        for m in s.matches:
            st = stats[m.label.kind]
            st.tp += 1
            st.agree += int(m.agrees)
            if m.else_agrees is not None:
                st.else_compared += 1
                st.else_agree += int(m.else_agrees)
    total = KindStats()
    for k in KINDS:
        total.add(stats[k])
    return {**stats, "all": total}


@dataclass
class PackageResult:
    labels: LabelSet
    scores: list[FileScore]
    stats: dict[str, KindStats]
    detections_elsewhere: int = 0  # gates of the scored kinds outside the labelled files
    label_problems: list[str] = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0


def score_package(labels: LabelSet, detections: Sequence[Detection]) -> PackageResult:
    labelled = {f.path for f in labels.files}
    scores = [score_file(f, detections) for f in labels.files]
    elsewhere = sum(1 for d in detections if d.kind in KINDS and d.path not in labelled)
    return PackageResult(labels, scores, summarize(scores, labels), elsewhere)


def check_label_text(labels: LabelSet, read_lines: Mapping[str, Sequence[str]]) -> list[str]:
    """Problems where a label's path is missing or its ``text`` is not what that line says."""

    def norm(s: str) -> str:
        return " ".join(s.split())

    problems: list[str] = []
    for f in labels.files:
        lines = read_lines.get(f.path)
        if lines is None:
            problems.append(f"{f.path}: not in {labels.spec}")
            continue
        entries: list[tuple[int, str]] = [(g.line, g.text) for g in f.gates]
        entries += [(n.line, n.text) for n in (*f.near_misses, *f.ambiguous)]
        for line, text in entries:
            if not text:
                continue
            actual = lines[line - 1] if 0 < line <= len(lines) else ""
            wanted = norm(text.removesuffix("..."))
            if wanted not in norm(actual):
                problems.append(f"{f.path}:{line}: label says {text!r}, the file says {actual.strip()!r}")
    return problems


# --- running liftgate ----------------------------------------------------------------------------


def _ratio(value: float | None) -> str:
    return "   -" if value is None else f"{value:4.2f}"


def _liftgate_scan(spec: str, target: str, offline: bool, sdist: bool = False) -> Any:
    import liftgate

    return liftgate.scan([spec], targets=[target], offline=offline, sdist=sdist)


def _read_labelled_files(spec: str, paths: set[str], sdist: bool = False) -> dict[str, list[str]]:
    """The labelled files' lines, from the release liftgate just fetched (its cache)."""
    from liftgate.sources import resolve_sources

    packages, _ = resolve_sources([spec], offline=True, sdist=sdist)
    read: dict[str, list[str]] = {}
    for pkg in packages:
        for sf in pkg.files:
            if sf.path in paths:
                with open(sf.fspath, encoding="utf-8", errors="replace") as fh:
                    read[sf.path] = fh.read().splitlines()
    return read


def run_package(
    labels: LabelSet,
    target: str = "sm_120",
    offline: bool = False,
    scan: Any = _liftgate_scan,
    read_files: Any = _read_labelled_files,
) -> PackageResult:
    """Scan ``labels.spec`` and score it against the labels.

    ``scan(spec, target, offline, sdist) -> Report``; ``read_files(spec, paths, sdist)`` gives the
    labelled files' lines, to check each label's ``text``.
    """
    started = time.perf_counter()
    try:
        report = scan(labels.spec, target, offline, labels.sdist)
    except Exception as exc:  # a measurement: report the package as not scanned and go on
        result = score_package(labels, [])
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    detections = [from_gate(g) for g in report.gates if str(getattr(g.kind, "value", g.kind)) in KINDS]
    result = score_package(labels, detections)
    result.elapsed_s = time.perf_counter() - started
    try:
        result.label_problems = check_label_text(
            labels, read_files(labels.spec, {f.path for f in labels.files}, labels.sdist)
        )
    except Exception as exc:
        result.label_problems = [f"could not read the labelled files back: {exc}"]
    return result


def _table(rows: list[tuple[str, dict[str, KindStats]]]) -> list[str]:
    head = f"{'package':30} {'kind':11} {'det':>4} {'amb':>4} {'lab':>4} {'tp':>4} {'prec':>5} {'rec':>5} {'admit':>5} {'else':>5} {'nm':>3}"
    out = [head, "-" * len(head)]
    for name, stats in rows:
        for kind in (*KINDS, "all"):
            st = stats[kind]
            d = st.as_dict()
            out.append(
                f"{name:30} {kind:11} {st.detections:4d} {st.ambiguous:4d} {st.labels:4d} {st.tp:4d} "
                f"{_ratio(st.precision):>5} {_ratio(st.recall):>5} {_ratio(st.agreement):>5} "
                f"{_ratio(d['else_agreement']):>5} {st.near_miss_hits:3d}"
            )
    return out


def render_text(results: Sequence[PackageResult], total: dict[str, KindStats]) -> str:
    lines: list[str] = []
    rows = [(r.labels.spec, r.stats) for r in results] + [("TOTAL", total)]
    lines += _table(rows)
    lines.append(
        "det: detections in the labelled files; amb: of which on ambiguous lines (not scored); lab: labels; "
        "admit: matched gates whose admitted set equals the label's; else: else-kind agreement; nm: near-misses detected"
    )
    for r in results:
        lines.append("")
        archive = ", sdist" if r.labels.sdist else ""
        header = f"== {r.labels.spec}{archive} ({len(r.labels.files)} files, {r.labels.gate_count()} gates"
        header += f"; {r.detections_elsewhere} detections outside the labelled files)"
        lines.append(header)
        if r.error:
            lines.append(f"  NOT SCANNED: {r.error}")
        for p in r.label_problems:
            lines.append(f"  label problem: {p}")
        for s in r.scores:
            for m in s.matches:
                if not m.agrees:
                    lines.append(
                        f"  admitted differs  {s.path}:{m.label.line} [{m.label.kind}] label {render_set(m.label.kind, m.label.admits)}"
                        f" detected {render_set(m.label.kind, m.projected)}  ({m.detection.condition})"
                    )
            for g in s.missed:
                lines.append(
                    f"  missed (FN)       {s.path}:{g.line} [{g.kind}] {render_set(g.kind, g.admits)}  {g.text}"
                )
            for d, why in s.false_positives:
                lines.append(f"  false positive    {s.path}:{d.start} [{d.kind}] {why}  ({d.condition})")
            for a, d in s.ambiguous_hits:
                lines.append(f"  ambiguous (skip)  {s.path}:{a.line} [{d.kind}]  ({d.condition})")
    return "\n".join(lines)


def to_json(results: Sequence[PackageResult], total: dict[str, KindStats], target: str) -> dict[str, Any]:
    def file_json(s: FileScore) -> dict[str, Any]:
        return {
            "path": s.path,
            "matches": [
                {
                    "line": m.label.line,
                    "kind": m.label.kind,
                    "detected_line": m.detection.start,
                    "gate_id": m.detection.gate_id,
                    "admitted_agrees": m.agrees,
                    "label_admits": sorted(m.label.admits),
                    "detected_admits": sorted(m.projected),
                    "else_agrees": m.else_agrees,
                }
                for m in s.matches
            ],
            "false_negatives": [
                {"line": g.line, "kind": g.kind, "text": g.text, "admits": sorted(g.admits)} for g in s.missed
            ],
            "false_positives": [
                {"line": d.start, "end": d.end, "kind": d.kind, "condition": d.condition, "reason": why}
                for d, why in s.false_positives
            ],
            "near_miss_hits": [{"line": n.line, "text": n.text, "why": n.why} for n, _ in s.near_miss_hits],
            "ambiguous_hits": [{"line": a.line, "text": a.text} for a, _ in s.ambiguous_hits],
        }

    return {
        "target": target,
        "total": {k: v.as_dict() for k, v in total.items()},
        "packages": [
            {
                "spec": r.labels.spec,
                "sdist": r.labels.sdist,
                "label_file": r.labels.source,
                "error": r.error,
                "elapsed_s": round(r.elapsed_s, 2),
                "detections_outside_labelled_files": r.detections_elsewhere,
                "label_problems": r.label_problems,
                "stats": {k: v.as_dict() for k, v in r.stats.items()},
                "files": [file_json(s) for s in r.scores],
            }
            for r in results
        ],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("labels", nargs="*", help="label files (default: bench/labels/*.json)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--target", default="sm_120", help="target passed to liftgate.scan (default sm_120)")
    parser.add_argument("--offline", action="store_true", help="use only liftgate's download cache")
    args = parser.parse_args(argv)

    paths = [Path(p) for p in args.labels] or sorted(LABELS_DIR.glob("*.json"))
    results: list[PackageResult] = []
    for path in paths:
        labels = load_label_file(path)
        print(f"scanning {labels.spec}{' (sdist)' if labels.sdist else ''} ...", file=sys.stderr, flush=True)
        results.append(run_package(labels, args.target, args.offline))
    total = {k: KindStats() for k in (*KINDS, "all")}
    for r in results:
        for k, st in r.stats.items():
            total[k].add(st)
    if args.json:
        print(json.dumps(to_json(results, total, args.target), indent=1))
    else:
        print(render_text(results, total))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
