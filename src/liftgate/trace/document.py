"""The trace document: what ``liftgate trace`` writes and ``liftgate scan --trace`` reads.

The tracer (`liftgate.trace.runtime`) writes one JSON-lines file per traced process; `merge`
folds them into one `Trace` (identical queries of several processes become one, with their
count and process ids), and `Trace.to_dict` / `load_trace` give the versioned JSON document that
``data/trace.schema.json`` describes. Every value here is frozen and plain.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

TRACE_SCHEMA_VERSION = "1"
SCHEMA_RESOURCE = "trace.schema.json"


class TraceError(Exception):
    """A trace file that cannot be read; the message names the file and what to do."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame of a Python call stack: absolute file, line, function, and the line's text."""

    path: str
    line: int
    function: str
    text: str = ""

    def render(self) -> str:
        return f"{self.function}() at {self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class TraceProcess:
    pid: int
    ppid: int
    argv: tuple[str, ...]
    executable: str
    python: str
    prefix: str
    sys_path: tuple[str, ...]
    cwd: str
    probes: bool


@dataclass(frozen=True, slots=True)
class Query:
    """A capability query: which API, with what arguments, what it answered, and from where.

    ``stack`` is innermost first (``stack[0]`` made the call). ``synthetic``: the answer came from
    ``--as``, not the device. ``error``: the API raised instead of answering.
    """

    api: str
    args: str
    answer: Any
    synthetic: bool
    stack: tuple[Frame, ...]
    count: int
    pids: tuple[int, ...]
    error: str | None = None

    def render_answer(self) -> str:
        if self.error is not None:
            return f"raised {self.error}"
        return _render_value(self.answer) + (" (--as)" if self.synthetic else "")


@dataclass(frozen=True, slots=True)
class ProbeHit:
    """A gate's condition run by the traced program, and which way it went.

    ``outcome``: ``then`` / ``else`` (the block that ran next), ``past`` (neither block: an ``if``
    without ``else`` skipped, or a guard passed), ``evaluated`` (a condition with no blocks:
    ``return``, ``assert``, conditional expressions), ``returned`` / ``raised`` (the frame ended
    while evaluating it).
    """

    gate: str
    path: str
    line: int
    outcome: str
    count: int
    pids: tuple[int, ...]
    stack: tuple[Frame, ...] = ()


@dataclass(frozen=True, slots=True)
class AsArch:
    name: str
    major: int
    minor: int
    device_name: str


@dataclass(frozen=True, slots=True)
class Trace:
    command: tuple[str, ...]
    exit_code: int | None
    as_arch: AsArch | None
    processes: tuple[TraceProcess, ...]
    queries: tuple[Query, ...]
    probes: tuple[ProbeHit, ...]
    notes: tuple[str, ...] = ()
    limited: tuple[str, ...] = ()  # gates whose probe stopped at the probe limit: counts are lower bounds
    environment: str | None = None  # the prefix whose gates were probed
    probed_gates: int = 0
    elapsed_s: float = 0.0
    liftgate_version: str = ""
    source: str = field(default="", compare=False)  # the file it was read from

    def to_dict(self) -> dict[str, Any]:
        def frames(stack: Iterable[Frame]) -> list[list[Any]]:
            return [[f.path, f.line, f.function, f.text] for f in stack]

        return {
            "schema_version": TRACE_SCHEMA_VERSION,
            "tool": {"name": "liftgate", "version": self.liftgate_version},
            "command": list(self.command),
            "exit_code": self.exit_code,
            "as": None
            if self.as_arch is None
            else {
                "arch": self.as_arch.name,
                "capability": [self.as_arch.major, self.as_arch.minor],
                "device_name": self.as_arch.device_name,
            },
            "environment": self.environment,
            "probed_gates": self.probed_gates,
            "elapsed_s": round(self.elapsed_s, 3),
            "processes": [
                {
                    "pid": p.pid,
                    "ppid": p.ppid,
                    "argv": list(p.argv),
                    "executable": p.executable,
                    "python": p.python,
                    "prefix": p.prefix,
                    "sys_path": list(p.sys_path),
                    "cwd": p.cwd,
                    "probes": p.probes,
                }
                for p in self.processes
            ],
            "queries": [
                {
                    "api": q.api,
                    "args": q.args,
                    "answer": q.answer,
                    "as": q.synthetic,
                    "error": q.error,
                    "count": q.count,
                    "pids": list(q.pids),
                    "stack": frames(q.stack),
                }
                for q in self.queries
            ],
            "probes": [
                {
                    "gate": p.gate,
                    "path": p.path,
                    "line": p.line,
                    "outcome": p.outcome,
                    "count": p.count,
                    "pids": list(p.pids),
                    "stack": frames(p.stack),
                }
                for p in self.probes
            ],
            "limited": list(self.limited),
            "notes": list(self.notes),
        }


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(
        resources.files("liftgate.data").joinpath(SCHEMA_RESOURCE).read_text("utf-8")
    )
    return schema


def _render_value(value: Any) -> str:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"({value[0]}, {value[1]})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={v!r}" for k, v in value.items()) + "}"
    return repr(value)


def _frames(rows: Any) -> tuple[Frame, ...]:
    out = []
    for row in rows or ():
        if isinstance(row, (list, tuple)) and len(row) >= 3:
            out.append(Frame(str(row[0]), int(row[1] or 0), str(row[2]), str(row[3]) if len(row) > 3 else ""))
    return tuple(out)


def merge(
    files: Sequence[str],
    *,
    command: Sequence[str],
    exit_code: int | None,
    as_arch: AsArch | None,
    environment: str | None = None,
    probed_gates: int = 0,
    elapsed_s: float = 0.0,
    notes: Sequence[str] = (),
    liftgate_version: str = "",
) -> Trace:
    """One `Trace` from the tracer's per-process JSON-lines files (damaged lines are skipped and counted)."""
    processes: list[TraceProcess] = []
    queries: dict[tuple[Any, ...], list[Any]] = {}
    probes: dict[tuple[str, str], list[Any]] = {}
    all_notes: list[str] = list(notes)
    limited: list[str] = []
    damaged = 0
    for path in sorted(files):
        by_id: dict[int, tuple[Any, ...]] = {}
        pid = 0
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError as exc:
            all_notes.append(f"{os.path.basename(path)}: unreadable ({exc.strerror or exc})")
            continue
        for raw in lines:
            try:
                doc = json.loads(raw)
                kind = doc["type"]
            except (ValueError, KeyError, TypeError):
                damaged += 1  # a process killed mid-write leaves half a line
                continue
            if kind == "process":
                pid = int(doc.get("pid", 0))
                processes.append(
                    TraceProcess(
                        pid=pid,
                        ppid=int(doc.get("ppid", 0)),
                        argv=tuple(str(a) for a in doc.get("argv", ())),
                        executable=str(doc.get("executable", "")),
                        python=str(doc.get("python", "")),
                        prefix=str(doc.get("prefix", "")),
                        sys_path=tuple(str(p) for p in doc.get("sys_path", ())),
                        cwd=str(doc.get("cwd", "")),
                        probes=bool(doc.get("probes", False)),
                    )
                )
            elif kind == "query":
                stack = _frames(doc.get("stack"))
                key = (
                    doc.get("api"),
                    doc.get("args", ""),
                    json.dumps(doc.get("answer"), sort_keys=True),
                    bool(doc.get("as")),
                    doc.get("error"),
                    tuple((f.path, f.line, f.function) for f in stack),
                )
                by_id[int(doc.get("id", 0))] = key
                entry = queries.setdefault(key, [doc, stack, 0, []])
                entry[2] += 1
                if pid not in entry[3]:
                    entry[3].append(pid)
            elif kind == "count":
                qkey = by_id.get(int(doc.get("id", 0)))
                if qkey is not None:
                    queries[qkey][2] += int(doc.get("count", 1)) - 1
            elif kind == "probe":
                pkey = (str(doc.get("gate", "")), str(doc.get("outcome", "")))
                pentry = probes.setdefault(pkey, [doc, _frames(doc.get("stack")), 0, []])
                pentry[2] += 1
                if pid not in pentry[3]:
                    pentry[3].append(pid)
            elif kind == "probe-count":
                pkey = (str(doc.get("gate", "")), str(doc.get("outcome", "")))
                if pkey in probes:
                    probes[pkey][2] += int(doc.get("count", 1)) - 1
            elif kind == "probe-limit":
                gate = str(doc.get("gate", ""))
                if gate and gate not in limited:
                    limited.append(gate)
            elif kind == "note":
                text = str(doc.get("text", ""))
                if text and text not in all_notes:
                    all_notes.append(text)
    if damaged:
        all_notes.append(
            f"{damaged} damaged line(s) in the per-process files skipped (a process killed mid-write)"
        )
    return Trace(
        command=tuple(command),
        exit_code=exit_code,
        as_arch=as_arch,
        processes=tuple(sorted(processes, key=lambda p: p.pid)),
        queries=tuple(
            Query(
                api=str(doc.get("api", "")),
                args=str(doc.get("args", "")),
                answer=doc.get("answer"),
                synthetic=bool(doc.get("as")),
                stack=stack,
                count=count,
                pids=tuple(sorted(pids)),
                error=doc.get("error"),
            )
            for doc, stack, count, pids in queries.values()
        ),
        probes=tuple(
            sorted(
                (
                    ProbeHit(
                        gate=gate,
                        path=str(doc.get("path", "")),
                        line=int(doc.get("line", 0)),
                        outcome=outcome,
                        count=count,
                        pids=tuple(sorted(pids)),
                        stack=stack,
                    )
                    for (gate, outcome), (doc, stack, count, pids) in probes.items()
                ),
                key=lambda p: (p.path, p.line, p.outcome),
            )
        ),
        notes=tuple(all_notes),
        limited=tuple(sorted(limited)),
        environment=environment,
        probed_gates=probed_gates,
        elapsed_s=elapsed_s,
        liftgate_version=liftgate_version,
    )


def trace_from_dict(doc: Any, source: str = "") -> Trace:
    """A `Trace` from its JSON document. Raises `TraceError` naming ``source`` when it is not one."""
    where = source or "the trace"
    if not isinstance(doc, dict) or "queries" not in doc or "schema_version" not in doc:
        raise TraceError(
            f"{where} is not a liftgate trace: write one with `liftgate trace -o FILE -- COMMAND`"
        )
    if str(doc["schema_version"]) != TRACE_SCHEMA_VERSION:
        raise TraceError(
            f"{where} is a trace of schema {doc['schema_version']}; this liftgate reads schema "
            f"{TRACE_SCHEMA_VERSION}: trace the command again"
        )
    try:
        as_doc = doc.get("as")
        as_arch = (
            None
            if not as_doc
            else AsArch(
                str(as_doc["arch"]),
                int(as_doc["capability"][0]),
                int(as_doc["capability"][1]),
                str(as_doc.get("device_name", "")),
            )
        )
        return Trace(
            command=tuple(str(c) for c in doc.get("command", ())),
            exit_code=doc.get("exit_code"),
            as_arch=as_arch,
            processes=tuple(
                TraceProcess(
                    pid=int(p["pid"]),
                    ppid=int(p.get("ppid", 0)),
                    argv=tuple(p.get("argv", ())),
                    executable=str(p.get("executable", "")),
                    python=str(p.get("python", "")),
                    prefix=str(p.get("prefix", "")),
                    sys_path=tuple(p.get("sys_path", ())),
                    cwd=str(p.get("cwd", "")),
                    probes=bool(p.get("probes", False)),
                )
                for p in doc.get("processes", ())
            ),
            queries=tuple(
                Query(
                    api=str(q["api"]),
                    args=str(q.get("args", "")),
                    answer=q.get("answer"),
                    synthetic=bool(q.get("as", False)),
                    stack=_frames(q.get("stack")),
                    count=int(q.get("count", 1)),
                    pids=tuple(int(p) for p in q.get("pids", ())),
                    error=q.get("error"),
                )
                for q in doc["queries"]
            ),
            probes=tuple(
                ProbeHit(
                    gate=str(p["gate"]),
                    path=str(p.get("path", "")),
                    line=int(p.get("line", 0)),
                    outcome=str(p["outcome"]),
                    count=int(p.get("count", 1)),
                    pids=tuple(int(x) for x in p.get("pids", ())),
                    stack=_frames(p.get("stack")),
                )
                for p in doc.get("probes", ())
            ),
            notes=tuple(str(n) for n in doc.get("notes", ())),
            limited=tuple(str(g) for g in doc.get("limited", ())),
            environment=doc.get("environment"),
            probed_gates=int(doc.get("probed_gates", 0)),
            elapsed_s=float(doc.get("elapsed_s", 0.0)),
            liftgate_version=str((doc.get("tool") or {}).get("version", "")),
            source=source,
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TraceError(
            f"{where} is damaged ({type(exc).__name__}: {exc}): trace the command again"
        ) from exc


def load_trace(path: str) -> Trace:
    """Read a trace file. Raises `TraceError` with the file's name and what to do."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise TraceError(
            f"{path} is not JSON ({exc}): write a trace with `liftgate trace -o {path} -- COMMAND`"
        ) from exc
    return trace_from_dict(doc, path)
