"""Map a trace onto a static scan: which gates the run evaluated, how, and what the scan missed.

A traced frame is placed in a scanned package by its real path (the same environment scanned),
else by its path relative to the traced process's ``sys.path`` entry (the same release scanned
from a wheel or a source tree); when the line's text differs between the two, the frame is
not placed (another release ran), and a note says so.

* A **probe** names its gate by id (from the scan ``liftgate trace`` made); ids that the scan
  does not have are placed by file and line.
* A **capability query** was evaluated by every gate whose condition lines hold a frame of its
  stack: the helper's ``return major >= 9`` and the ``if`` that called the helper both did. When
  no frame is in a condition, the answer went through a variable (``major, _ = capability()``,
  then ``return major == 9``): a gate in a function of the stack whose evidence names a place of
  the stack was fed by it (and only that function's: FlashInfer's one query helper for every
  ``is_smXX_supported`` feeds the predicate that called it, not its siblings).
  A query with no such frame is *untraced*: made from a file the scan did not include, or from
  a scanned file where the static analysis found no gate (a recall miss, or a query whose answer
  gates nothing, such as a log line). Both are listed, never hidden.

``took`` reads the outcomes against the gate's shape: for a guard (``if not X: raise``, no
then-block) the body running means the target was excluded and passing it means admitted; for
an ``if`` the then-block means admitted and the else-block (or skipping it) excluded.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from liftgate.arch.core import Arch
from liftgate.detect.py_binding import parse_python
from liftgate.model import (
    Gate,
    GateTrace,
    Report,
    Status,
    TakenSide,
    TracedFrame,
    TraceSummary,
    UntracedQuery,
)
from liftgate.trace.document import Frame, Query, Trace

# APIs whose answer is the device's capability (as opposed to a name or an arch list)
_CAPABILITY_APIS = ("get_device_capability", "nvmlDeviceGetCudaComputeCapability")


@dataclass
class _Placer:
    """Turns absolute paths of the traced processes into (package, package path)."""

    by_real: dict[str, tuple[str, str]]
    by_rel: dict[str, list[tuple[str, str, str]]]  # package path -> [(package, path, fspath)]
    roots: list[str]
    read_line: dict[str, list[str]] = field(default_factory=dict)
    mismatched: set[str] = field(default_factory=set)
    cache: dict[tuple[str, int, str], tuple[str, str] | None] = field(default_factory=dict)

    def place(self, frame: Frame) -> tuple[str, str] | None:
        key = (frame.path, frame.line, frame.text)
        if key not in self.cache:
            self.cache[key] = self._place(frame)
        return self.cache[key]

    def _place(self, frame: Frame) -> tuple[str, str] | None:
        real = os.path.normcase(os.path.realpath(frame.path))
        hit = self.by_real.get(real)
        if hit is not None:
            return hit
        for root in self.roots:
            if real.startswith(root + os.sep):
                rel = real[len(root) + 1 :].replace(os.sep, "/")
                candidates = self.by_rel.get(rel)
                if not candidates:
                    continue
                for package, path, fspath in candidates:
                    if not frame.text or self._line(fspath, frame.line) == frame.text:
                        return package, path
                self.mismatched.add(rel)
                return None
        return None

    def _line(self, fspath: str, number: int) -> str:
        if fspath not in self.read_line:
            try:
                with open(fspath, encoding="utf-8", errors="replace") as fh:
                    self.read_line[fspath] = fh.read().split("\n")
            except OSError:
                self.read_line[fspath] = []
        lines = self.read_line[fspath]
        return lines[number - 1].strip()[:200] if 0 < number <= len(lines) else ""


def _placer(trace: Trace, files: Mapping[tuple[str, str | None], Mapping[str, str]]) -> _Placer:
    by_real: dict[str, tuple[str, str]] = {}
    by_rel: dict[str, list[tuple[str, str, str]]] = {}
    for (package, _version), paths in files.items():
        for path, fspath in paths.items():
            if not path.endswith(".py"):
                continue
            by_real[os.path.normcase(os.path.realpath(fspath))] = (package, path)
            by_rel.setdefault(path, []).append((package, path, fspath))
    roots: list[str] = []
    for process in trace.processes:
        for entry in process.sys_path:
            real = os.path.normcase(os.path.realpath(entry))
            if real not in roots:
                roots.append(real)
    roots.sort(key=len, reverse=True)  # the deepest entry names the module
    return _Placer(by_real, by_rel, roots)


class _FunctionSpans:
    """The innermost function holding a line, per scanned Python file (parsed on demand)."""

    def __init__(self, files: Mapping[tuple[str, str | None], Mapping[str, str]]) -> None:
        self._fspath = {
            (package, path): fs for (package, _v), paths in files.items() for path, fs in paths.items()
        }
        self._spans: dict[tuple[str, str], list[tuple[int, int]]] = {}

    def _innermost(self, key: tuple[str, str], line: int) -> tuple[int, int] | None:
        if key not in self._spans:
            spans: list[tuple[int, int]] = []
            fspath = self._fspath.get(key)
            try:
                with open(fspath or "", encoding="utf-8", errors="replace") as fh:
                    tree = parse_python(fh.read())
            except (OSError, SyntaxError, ValueError, RecursionError):
                tree = None
            if tree is not None:
                for node in ast.walk(tree):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        spans.append((node.lineno, node.end_lineno or node.lineno))
            self._spans[key] = spans
        holding = [s for s in self._spans[key] if s[0] <= line <= s[1]]
        return max(holding, key=lambda s: s[0]) if holding else None

    def same(self, key: tuple[str, str], a: int, b: int) -> bool:
        return self._innermost(key, a) == self._innermost(key, b)


def _read_took(gate: Gate, outcomes: Mapping[str, int]) -> TakenSide:
    admitted = excluded = 0
    guard = gate.then_span is None and gate.else_span is not None
    for outcome, count in outcomes.items():
        if outcome == "then":
            admitted += count
        elif outcome == "else":
            excluded += count
        elif outcome == "past":
            if guard:
                admitted += count
            elif gate.then_span is not None:
                excluded += count
    if admitted and excluded:
        return TakenSide.MIXED
    if admitted:
        return TakenSide.ADMITTED
    if excluded:
        return TakenSide.EXCLUDED
    return TakenSide.UNKNOWN


def _agreement(
    gate: Gate, took: TakenSide, capabilities: tuple[tuple[int, int], ...], as_name: str | None
) -> str | None:
    if took not in (TakenSide.ADMITTED, TakenSide.EXCLUDED) or len(capabilities) != 1:
        return None
    cc = capabilities[0]
    arch = Arch(cc[0], cc[1])
    expected = gate.status(arch)
    who = f"{arch.major}.{arch.minor}" + (f" (--as {as_name})" if as_name else "")
    if expected is Status.UNKNOWN:
        return None
    if (expected is Status.ADMITTED) == (took is TakenSide.ADMITTED):
        return f"agrees: the scan says {expected.value} for {who}, and the run took the {took.value} side"
    if expected is Status.ADMITTED and gate.depends_on:
        return (
            f"differs: the scan says admitted for {who}, the run took the excluded side; the condition also "
            f"depends on {'; '.join(d.removeprefix('assumed: ') for d in gate.depends_on[:3])}"
        )
    return f"differs: the scan says {expected.value} for {who}, but the run took the {took.value} side"


def _frame(frame: Frame, placed: tuple[str, str] | None) -> TracedFrame:
    return TracedFrame(
        frame.path, frame.line, frame.function, placed[0] if placed else None, placed[1] if placed else None
    )


def _site(query: Query, placer: _Placer) -> tuple[TracedFrame, TracedFrame | None]:
    if not query.stack:
        return TracedFrame("?", 0, "?"), None
    site = _frame(query.stack[0], placer.place(query.stack[0]))
    caller = _frame(query.stack[1], placer.place(query.stack[1])) if len(query.stack) > 1 else None
    return site, caller


def map_trace(report: Report, trace: Trace) -> Report:
    """``report`` with ``trace`` (a run's trace, `liftgate.trace.document.load_trace`) mapped onto its
    gates (``scan --trace``). Needs the report's workspace (`liftgate.scan` sets it)."""
    return replace(
        report, trace=match_trace(trace, report.gates, report.files("placing a trace").as_mapping())
    )


def match_trace(
    trace: Trace, gates: Iterable[Gate], files: Mapping[tuple[str, str | None], Mapping[str, str]]
) -> TraceSummary:
    """The trace's queries and probes placed on ``gates`` (from a scan of ``files``, package path ->
    filesystem path per package: `liftgate.sources.workspace.Workspace.as_mapping`)."""
    gate_list = [g for g in gates if g.location.path.endswith(".py")]
    by_id = {g.id: g for g in gate_list}
    by_file: dict[tuple[str, str], list[Gate]] = {}
    for g in gate_list:
        by_file.setdefault((g.location.package, g.location.path), []).append(g)
    placer = _placer(trace, files)

    def gates_at(frame: Frame) -> list[Gate]:
        placed = placer.place(frame)
        if placed is None:
            return []
        return [
            g for g in by_file.get(placed, ()) if g.location.span.start <= frame.line <= g.location.span.end
        ]

    functions = _FunctionSpans(files)

    def fed_by(stack: tuple[Frame, ...]) -> list[Gate]:
        # The answer went into a variable first (``target = get_current_target()``, then ``if
        # target.arch >= 90``; ``major, _ = capability()``, then ``return major == 9``): a gate
        # of a function on the stack whose evidence names a place of the stack. A helper that
        # queries for every predicate of its file feeds only those whose function called it.
        placed = [(f, placer.place(f)) for f in stack]
        where = {(p[0], p[1], f.line) for f, p in placed if p is not None}
        found: list[Gate] = []
        for frame, p in placed:
            if p is None:
                continue
            for g in by_file.get(p, ()):
                if g in found or not functions.same(p, frame.line, g.location.line):
                    continue
                if any(
                    (g.location.package, e.path, e.line) in where for e in g.evidence if e.path and e.line
                ):
                    found.append(g)
        return found

    outcomes: dict[str, dict[str, int]] = {}
    notes: list[str] = []
    unplaced_probes = 0
    for probe in trace.probes:
        gate = by_id.get(probe.gate)
        if gate is None:
            found = gates_at(Frame(probe.path, probe.line, "", ""))
            gate = found[0] if found else None
        if gate is None:
            unplaced_probes += 1
            continue
        tally = outcomes.setdefault(gate.id, {})
        tally[probe.outcome] = tally.get(probe.outcome, 0) + probe.count
    if unplaced_probes:
        notes.append(
            f"{unplaced_probes} probe record(s) name gates this scan does not have (the trace probed another "
            "release or environment)"
        )

    capabilities: list[tuple[int, int]] = []
    query_lines: dict[str, list[str]] = {}
    synthetic_gates: set[str] = set()
    evaluated_by_query: dict[str, int] = {}
    untraced: list[UntracedQuery] = []
    matched = 0
    for query in trace.queries:
        if query.error is None and query.api.endswith(_CAPABILITY_APIS):
            answer = query.answer
            if isinstance(answer, list) and len(answer) == 2 and all(isinstance(v, int) for v in answer):
                cc = (int(answer[0]), int(answer[1]))
                if cc not in capabilities:
                    capabilities.append(cc)
        hit: list[Gate] = []
        for frame in query.stack:
            for gate in gates_at(frame):
                if gate not in hit:
                    hit.append(gate)
        if not hit:
            hit = fed_by(query.stack)
        shown = f"{query.api} → {query.render_answer()}"
        if hit:
            matched += 1
            for gate in hit:
                lines = query_lines.setdefault(gate.id, [])
                if shown not in lines:
                    lines.append(shown)
                evaluated_by_query[gate.id] = evaluated_by_query.get(gate.id, 0) + query.count
                if query.synthetic:
                    synthetic_gates.add(gate.id)
            continue
        site, caller = _site(query, placer)
        reason = (
            "in a scanned file, but no gate there" if site.package is not None else "not in the scanned files"
        )
        untraced.append(UntracedQuery(query.api, query.render_answer(), query.count, site, reason, caller))
    if placer.mismatched:
        shown_paths = ", ".join(sorted(placer.mismatched)[:3])
        notes.append(
            f"the traced code differs from the scanned files at {shown_paths}"
            f"{' …' if len(placer.mismatched) > 3 else ''}: another release ran; those frames are not placed"
        )
    if trace.as_arch is not None:
        caps: tuple[tuple[int, int], ...] = ((trace.as_arch.major, trace.as_arch.minor),)
    else:
        caps = tuple(capabilities)
    if len(capabilities) > 1 and trace.as_arch is None:
        notes.append(
            "the run saw several capabilities ("
            + ", ".join(f"{a}.{b}" for a, b in capabilities)
            + "): the outcomes are not compared with the static evaluation"
        )
    traced: list[GateTrace] = []
    for gate_id in sorted(set(outcomes) | set(query_lines), key=lambda i: _gate_order(by_id[i])):
        gate = by_id[gate_id]
        tally = outcomes.get(gate_id, {})
        took = _read_took(gate, tally) if tally else TakenSide.UNKNOWN
        traced.append(
            GateTrace(
                gate_id=gate_id,
                evaluations=sum(tally.values()),
                outcomes=tuple(sorted(tally.items())),
                took=took,
                queries=tuple(query_lines.get(gate_id, ())),
                queried=evaluated_by_query.get(gate_id, 0),
                limited=gate_id in trace.limited,
                synthetic=gate_id in synthetic_gates or (trace.as_arch is not None and bool(tally)),
                agreement=_agreement(gate, took, caps, trace.as_arch.name if trace.as_arch else None),
            )
        )
    untraced.sort(
        key=lambda u: (u.reason, u.site.package or "", u.site.package_path or u.site.path, u.site.line)
    )
    return TraceSummary(
        source=trace.source,
        command=trace.command,
        as_arch=trace.as_arch.name if trace.as_arch else None,
        capabilities=caps,
        queries=sum(q.count for q in trace.queries),
        distinct_queries=len(trace.queries),
        matched_queries=matched,
        gates=tuple(traced),
        untraced=tuple(untraced),
        notes=tuple([*trace.notes, *notes]),
        probed=trace.probed_gates > 0,
    )


def _gate_order(gate: Gate) -> tuple[str, str, int]:
    return (gate.location.package.lower(), gate.location.path, gate.location.span.start)
