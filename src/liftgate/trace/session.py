"""Run a command with liftgate's tracer injected, and collect what it recorded.

`prepare` writes a throwaway directory holding ``sitecustomize.py`` and a copy of
`liftgate.trace.runtime`; `run_traced` puts it at the front of ``PYTHONPATH`` (with the
``LIFTGATE_TRACE_*`` variables) for the command alone, runs it, and merges the per-process files
into a `Trace`. Nothing outside that directory changes: the user's files, environment and
``sitecustomize`` stay as they are (theirs still runs, after ours).

The command runs in a process group of its own (`liftgate.procgroup`): on ``--timeout`` or a
Ctrl-C the whole group gets SIGINT (so traced Python processes write what they recorded), then
SIGTERM, then SIGKILL, each after `GRACE_S` seconds in which it has not exited, so a shell's
background children do not outlive the trace.

Gate probes come from a static scan of the environment the command runs in (`probes_for`):
each Python gate's condition lines and blocks, by the real path of its file.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from liftgate import procgroup
from liftgate.model import Gate, GateKind
from liftgate.trace import runtime
from liftgate.trace.document import AsArch, Trace, merge

RUNTIME_MODULE = "_liftgate_trace_runtime"
GRACE_S = 10.0  # for each signal of a stop: SIGINT, SIGTERM, then SIGKILL
_BRANCHING = ("if", "elif", "while")

SITECUSTOMIZE = f'''"""Written by `liftgate trace` for one traced command: start liftgate's tracer, then run the
sitecustomize this one shadows, if there is one."""
import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
try:
    import {RUNTIME_MODULE}

    {RUNTIME_MODULE}.start()
except Exception as _exc:  # never stop the traced program
    _sys.stderr.write("liftgate trace: tracer not started in %s: %s\\n" % (_sys.executable, _exc))


def _chain():
    import importlib.machinery
    import importlib.util

    path = [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    _sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_chain()
'''


@dataclass(frozen=True, slots=True)
class TraceRun:
    trace: Trace
    exit_code: int | None  # None: the command could not be started
    error: str | None = None


def as_arch_spec(as_arch: AsArch, limits: Mapping[str, int] | None = None) -> dict[str, Any]:
    return {
        "name": as_arch.name,
        "major": as_arch.major,
        "minor": as_arch.minor,
        "device_name": as_arch.device_name,
        "limits": dict(limits or {}),
    }


def resolve_as(spelling: str, device_name: str | None = None) -> tuple[AsArch, dict[str, int]]:
    """``--as`` spelled any way `liftgate.arch.parse` accepts; the device name from the product
    spelled (``rtx-pro-6000``), else the data file's first product of that capability."""
    from liftgate.arch.core import arch_data
    from liftgate.arch.parse import resolve_arch
    from liftgate.detect.pyvalues import device_names, product_device_name

    resolution = resolve_arch(spelling)
    arch = resolution.arch
    name = device_name
    if name is None:
        name = (
            product_device_name(resolution.product)
            if resolution.product
            else device_names().get(arch.cc, (f"NVIDIA GPU (compute capability {arch.major}.{arch.minor})",))[
                0
            ]
        )
    cap = arch_data().capability(arch.cc)
    limits = dict(cap.limits) if cap else {}
    return AsArch(arch.name, arch.major, arch.minor, name), limits


def probes_for(
    gates: Sequence[Gate], files: Mapping[tuple[str, str | None], Mapping[str, str]]
) -> list[dict[str, Any]]:
    """Probe descriptions of the Python runtime gates, by the real path of each gate's file."""
    out = []
    for gate in gates:
        if gate.kind is not GateKind.PY_RUNTIME:
            continue
        fspath = files.get((gate.location.package, gate.location.version), {}).get(gate.location.path)
        if fspath is None:
            continue
        span = gate.location.span
        out.append(
            {
                "gate": gate.id,
                "path": os.path.normcase(os.path.realpath(fspath)),
                "lines": [span.start, span.end],
                "then": None if gate.then_span is None else [gate.then_span.start, gate.then_span.end],
                "else": None if gate.else_span is None else [gate.else_span.start, gate.else_span.end],
                "branches": gate.directive in _BRANCHING,
            }
        )
    return out


def prepare(directory: str) -> str:
    """Write the injected directory (sitecustomize + the runtime) under ``directory``; return it."""
    inject = os.path.join(directory, "inject")
    os.makedirs(inject, exist_ok=True)
    source = resources.files("liftgate.trace").joinpath("runtime.py").read_text("utf-8")
    with open(os.path.join(inject, f"{RUNTIME_MODULE}.py"), "w", encoding="utf-8") as fh:
        fh.write(source)
    with open(os.path.join(inject, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write(SITECUSTOMIZE)
    return inject


def traced_environment(
    base: Mapping[str, str],
    inject: str,
    records: str,
    as_spec: Mapping[str, Any] | None,
    probes_file: str | None,
    probe_limit: int | None = None,
) -> dict[str, str]:
    env = dict(base)
    env["PYTHONPATH"] = inject + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    env[runtime.ENV_DIR] = records
    env.pop(runtime.ENV_AS, None)
    env.pop(runtime.ENV_PROBES, None)
    if as_spec is not None:
        env[runtime.ENV_AS] = json.dumps(dict(as_spec))
    if probes_file is not None:
        env[runtime.ENV_PROBES] = probes_file
    env.pop(runtime.ENV_PROBE_LIMIT, None)
    if probe_limit is not None:
        env[runtime.ENV_PROBE_LIMIT] = str(probe_limit)
    return env


def run_traced(
    command: Sequence[str],
    *,
    as_arch: AsArch | None = None,
    as_limits: Mapping[str, int] | None = None,
    probes: Sequence[Mapping[str, Any]] = (),
    environment: str | None = None,
    base_env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
    notes: Sequence[str] = (),
    probe_limit: int | None = None,
    probed_prefix: str | None = None,
) -> TraceRun:
    """Run ``command`` traced; the trace is returned whatever the command's exit status.

    ``probed_prefix``: the environment whose installed packages the probes come from (``--env``,
    or this interpreter's), None when they come from ``--source`` trees only; when no probe ran,
    the note says to pass ``--env`` only if the command's Python runs from another prefix."""
    import liftgate

    started = time.perf_counter()
    work = tempfile.mkdtemp(prefix="liftgate-trace-")
    all_notes = list(notes)
    try:
        inject = prepare(work)
        records = os.path.join(work, "records")
        os.makedirs(records)
        probes_file = None
        if probes:
            probes_file = os.path.join(work, "probes.json")
            with open(probes_file, "w", encoding="utf-8") as fh:
                json.dump({"probes": list(probes)}, fh)
        env = traced_environment(
            os.environ if base_env is None else base_env,
            inject,
            records,
            as_arch_spec(as_arch, as_limits) if as_arch else None,
            probes_file,
            probe_limit,
        )
        exit_code: int | None
        error = None
        try:
            proc = procgroup.start(command, env=env, cwd=cwd)
        except OSError as exc:
            exit_code, error = None, f"cannot run {command[0]!r}: {exc.strerror or exc}"
        else:
            try:
                with procgroup.forwarding(proc):
                    exit_code = procgroup.wait(proc, timeout)
            except subprocess.TimeoutExpired:
                exit_code = procgroup.stop(proc, signal.SIGINT, GRACE_S)
                all_notes.append(f"the command ran past {timeout:g} s and was interrupted")
            except KeyboardInterrupt:
                # The command runs in its own process group: pass the Ctrl-C on, let it finish writing.
                exit_code = procgroup.stop(proc, signal.SIGINT, GRACE_S)
                all_notes.append("interrupted (Ctrl-C): the trace holds what ran until then")
            except procgroup.Terminated as exc:
                procgroup.stop(proc, exc.signum, GRACE_S)
                raise SystemExit(128 + exc.signum) from None
        files = [os.path.join(records, n) for n in os.listdir(records) if n.endswith(".jsonl")]
        if not files and error is None:
            all_notes.append(
                "no Python process reported: the command ran no Python, or ran it with -I, -E or -S "
                "(which ignore PYTHONPATH or site), so nothing could be traced"
            )
        trace = merge(
            files,
            command=command,
            exit_code=exit_code,
            as_arch=as_arch,
            environment=environment,
            probed_gates=len(probes),
            elapsed_s=time.perf_counter() - started,
            notes=all_notes,
            liftgate_version=liftgate.__version__,
        )
        if probes and trace.processes and not trace.probes:
            trace = _with_note(trace, nothing_probed_note(trace, environment, probed_prefix))
        return TraceRun(trace, exit_code, error)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _same_prefix(prefix: str, probed: str) -> bool:
    """Whether an interpreter's ``sys.prefix`` is the environment ``probed`` names (its prefix or
    one of its site-packages)."""
    from liftgate.sources.environment import install_prefix

    real = os.path.realpath(prefix)
    probed_real = os.path.realpath(probed)
    return real in (probed_real, os.path.realpath(install_prefix(probed_real)))


def nothing_probed_note(trace: Trace, environment: str | None, probed_prefix: str | None) -> str:
    """Why no probed gate may have run, and what to pass: ``--env PREFIX`` only when the command's
    Python runs from a prefix other than the one probed (``probed_prefix``)."""
    where = environment or "this environment"
    prefixes = sorted({p.prefix for p in trace.processes if p.prefix})
    others = [p for p in prefixes if probed_prefix is None or not _same_prefix(p, probed_prefix)]
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        executables = ", ".join(sorted({p.executable for p in trace.processes if p.prefix in others}))
        return (
            f"no gate probed in {where} ran: the command's Python ({executables}) runs from {shown}, "
            f"so pass --env {shlex.quote(others[0])} to probe the packages installed there, or --source "
            "with the tree it imports"
        )
    return (
        f"no gate probed in {where} ran: the command's Python runs from that environment, so either it "
        "never reached them, or it imports these packages from elsewhere (PYTHONPATH, a source tree): "
        "then pass --source with the tree it imports"
    )


def _with_note(trace: Trace, note: str) -> Trace:
    from dataclasses import replace

    return replace(trace, notes=(*trace.notes, note))
