"""The tracer that runs inside a traced Python process (injected by ``liftgate trace``).

``liftgate trace`` puts a directory holding a ``sitecustomize.py`` and a copy of this file at the
front of ``PYTHONPATH``; every Python process the command starts (workers of ``torchrun`` and
``multiprocessing`` included, since they inherit the environment) imports it at start-up. Nothing
of the user's files or environment changes. This module must therefore stand alone: standard
library only, no import of liftgate (the traced interpreter may not have it), code that
Python 3.9 runs, and never an exception into the traced program.

It records two things, each to a JSON-lines file per process in ``$LIFTGATE_TRACE_DIR``:

* **capability queries**: calls of ``torch.cuda.get_device_capability`` / ``get_device_properties``
  / ``get_device_name`` / ``get_arch_list``, vLLM's platform (``get_device_capability``,
  ``has_device_capability``, ``is_device_capability``, ``is_device_capability_family``,
  ``get_device_name``), NVML (``nvmlDeviceGetCudaComputeCapability``, ``nvmlDeviceGetName``),
  CuPy (``runtime.getDeviceProperties``; ``Device.compute_capability`` is a compiled property that
  cannot be wrapped without breaking CuPy, so only the probes see it) and Triton's
  ``get_current_target``, each with its Python call stack and its answer. The APIs are wrapped
  when their module is imported (a post-import hook on ``sys.meta_path``); a query made inside
  another wrapped API (vLLM's platform asking torch) is part of the outer one. With
  ``$LIFTGATE_TRACE_AS`` they answer as another architecture, and every such answer is marked.
* **gate probes** (``$LIFTGATE_TRACE_PROBES``, a JSON file written by ``liftgate trace`` from a
  static scan): each time a known Python gate's condition runs, and which way it went, seen by
  line events in the functions that hold a gate only (``sys.monitoring`` on Python 3.12+, where
  other functions cost one event each; ``sys.settrace`` before). This sees gates whose capability
  answer came from a cache (``functools.lru_cache``), which the queries cannot.

Each distinct record is written when first seen (so a process that dies keeps what it saw);
counts are written at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.abc
import importlib.machinery
import json
import linecache
import os
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType, ModuleType
from typing import IO, Any

Probe = dict[str, Any]
TraceFunction = Callable[[FrameType, str, Any], Any]

ENV_DIR = "LIFTGATE_TRACE_DIR"
ENV_AS = "LIFTGATE_TRACE_AS"
ENV_PROBES = "LIFTGATE_TRACE_PROBES"
ENV_PROBE_LIMIT = "LIFTGATE_TRACE_PROBE_LIMIT"
FORMAT = 1
MAX_FRAMES = 64
MAX_RECORDS = 20000
_THIS_FILE = os.path.normcase(os.path.abspath(__file__))
_SKIP_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")

# module -> what to wrap once it has been imported
_TORCH_FUNCTIONS = ("get_device_capability", "get_device_properties", "get_device_name", "get_arch_list")
_NVML_FUNCTIONS = ("nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetName")
_VLLM_METHODS = (
    "get_device_capability",
    "has_device_capability",
    "is_device_capability",
    "is_device_capability_family",
    "get_device_name",
)
_WATCHED = (
    "torch.cuda",
    "pynvml",
    "vllm.third_party.pynvml",
    "vllm.platforms.interface",
    "vllm.platforms.cuda",
    "triton.backends.nvidia.driver",
    "cupy.cuda",
    "cupy.cuda.runtime",
    "cupy_backends.cuda.api.runtime",
)


def _short(value: object, limit: int = 200) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ in the traced program is not ours to raise
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = ""
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"


def _render(value: object) -> Any:
    """A JSON-ready picture of an API's answer: capability tuples, property objects, targets."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [_render(v) for v in value[:64]]
    if isinstance(value, dict):
        keys = ("major", "minor", "name", "computeCapabilityMajor", "computeCapabilityMinor")
        picked = {k: _render(value[k]) for k in keys if k in value}
        return picked or _short(value)
    fields = {}
    for attr in ("major", "minor", "name", "backend", "arch", "warp_size"):
        try:
            got = getattr(value, attr)
        except Exception:
            continue
        if isinstance(got, (bool, int, float, str)):
            fields[attr] = got
    return fields or _short(value)


class _AsArch:
    """The architecture that queries answer as (``liftgate trace --as``)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name = str(spec.get("name", ""))  # sm_120
        self.major = int(spec["major"])
        self.minor = int(spec["minor"])
        self.device_name = str(
            spec.get("device_name") or f"NVIDIA GPU (compute capability {self.major}.{self.minor})"
        )
        self.limits = dict(spec.get("limits") or {})


class _Props:
    """``get_device_properties`` under ``--as``: the real object's fields where a GPU answers, the
    target's capability, name and shared-memory limits over them."""

    def __init__(self, real: object, arch: _AsArch) -> None:
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_arch", arch)

    def __getattr__(self, name: str) -> object:
        arch = object.__getattribute__(self, "_arch")
        if name == "major":
            return arch.major
        if name == "minor":
            return arch.minor
        if name == "name":
            return arch.device_name
        if name == "shared_memory_per_block_optin" and "smem_per_block_optin" in arch.limits:
            return arch.limits["smem_per_block_optin"]
        if name == "shared_memory_per_multiprocessor" and "smem_per_sm" in arch.limits:
            return arch.limits["smem_per_sm"]
        real = object.__getattribute__(self, "_real")
        if real is None:
            raise AttributeError(f"{name} (liftgate trace --as {arch.name}: no real device to read it from)")
        return getattr(real, name)

    def __repr__(self) -> str:
        arch = object.__getattribute__(self, "_arch")
        return f"_CudaDeviceProperties(name='{arch.device_name}', major={arch.major}, minor={arch.minor}, as={arch.name})"


class Tracer:
    def __init__(
        self, out_dir: str, as_arch: _AsArch | None, probes: list[Probe], probe_limit: int = 10_000
    ) -> None:
        self.out_dir = out_dir
        self.as_arch = as_arch
        self._lock = threading.RLock()
        self._local = threading.local()
        self._pid = -1
        self._fh: IO[str] | None = None
        self._records: dict[tuple[Any, ...], tuple[int, int]] = {}
        self._probe_counts: dict[tuple[str, str], int] = {}
        self._gate_totals: dict[str, int] = {}
        self.probe_limit = probe_limit
        self.monitor: _Monitor | None = None
        self._dropped = 0
        self._patched: set[str] = set()
        self._probe_lines: dict[str, dict[int, Probe]] = {}  # realpath -> {line: probe}
        self._code_probes: dict[CodeType, dict[int, Probe] | None] = {}
        self._real_paths: dict[str, str] = {}
        for probe in probes:
            try:
                first, last = int(probe["lines"][0]), int(probe["lines"][1])
                table = self._probe_lines.setdefault(os.path.normcase(probe["path"]), {})
                for line in range(first, last + 1):
                    table.setdefault(line, probe)
            except (KeyError, TypeError, ValueError, IndexError):
                continue

    # -- output -----------------------------------------------------------------------------

    def _write(self, doc: dict[str, Any]) -> None:
        with self._lock:
            if self._pid != os.getpid():
                self._open()
            if self._fh is None:
                return
            try:
                self._fh.write(json.dumps(doc, default=_short) + "\n")
                self._fh.flush()
            except (OSError, ValueError):
                self._fh = None

    def _open(self) -> None:
        self._pid = os.getpid()
        self._records = {}
        self._probe_counts = {}
        self._fh = None
        try:
            path = os.path.join(self.out_dir, f"trace-{self._pid}-{os.urandom(3).hex()}.jsonl")
            fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the process's life)
        except OSError:
            return
        self._fh = fh
        fh.write(
            json.dumps(
                {
                    "type": "process",
                    "format": FORMAT,
                    "pid": self._pid,
                    "ppid": os.getppid(),
                    "argv": list(sys.argv) if hasattr(sys, "argv") else [],
                    "executable": sys.executable,
                    "python": ".".join(str(v) for v in sys.version_info[:3]),
                    "prefix": sys.prefix,
                    "sys_path": [
                        os.path.abspath(p or os.curdir)
                        for p in sys.path
                        if os.path.normcase(os.path.abspath(p or os.curdir)) != os.path.dirname(_THIS_FILE)
                    ],
                    "cwd": os.getcwd(),
                    "as": self.as_arch.name if self.as_arch else None,
                    "probes": sum(len(v) for v in self._probe_lines.values()) > 0,
                },
                default=_short,
            )
            + "\n"
        )
        fh.flush()

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (another thread may have held it) and, at the next
        record, a file of its own."""
        self._lock = threading.RLock()
        self._pid = -1

    def note(self, text: str) -> None:
        self._write({"type": "note", "text": text})

    def flush_counts(self) -> None:
        with self._lock:
            if self._pid != os.getpid():
                return
            for rid, count in list(self._records.values()):
                if count > 1:
                    self._write({"type": "count", "id": rid, "count": count})
            for (gate, outcome), count in list(self._probe_counts.items()):
                if count > 1:
                    self._write({"type": "probe-count", "gate": gate, "outcome": outcome, "count": count})
            if self._dropped:
                self._write(
                    {"type": "note", "text": f"{self._dropped} further distinct queries were not recorded"}
                )

    # -- capability queries -----------------------------------------------------------------

    def _stack(self, frame: FrameType | None) -> list[list[Any]]:
        out: list[list[Any]] = []
        while frame is not None and len(out) < MAX_FRAMES:
            code = frame.f_code
            filename = code.co_filename
            if filename not in _SKIP_FILES and os.path.normcase(os.path.abspath(filename)) != _THIS_FILE:
                line = frame.f_lineno
                text = linecache.getline(filename, line).strip() if line else ""
                out.append([os.path.abspath(filename), line, code.co_name, text[:200]])
            frame = frame.f_back
        return out

    def record(
        self,
        api: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        answer: object,
        synthetic: bool,
        error: str | None,
    ) -> None:
        try:
            stack = self._stack(sys._getframe(1))
            shown_args = ", ".join(
                [_short(a, 60) for a in args] + [f"{k}={_short(v, 60)}" for k, v in kwargs.items()]
            )
            rendered = _render(answer) if error is None else None
            key = (
                api,
                shown_args,
                json.dumps(rendered, default=_short),
                synthetic,
                error,
                tuple(tuple(f[:3]) for f in stack),
            )
            with self._lock:
                if self._pid != os.getpid():
                    self._open()
                hit = self._records.get(key)
                if hit is not None:
                    self._records[key] = (hit[0], hit[1] + 1)
                    return
                if len(self._records) >= MAX_RECORDS:
                    self._dropped += 1
                    return
                rid = len(self._records) + 1
                self._records[key] = (rid, 1)
            doc = {
                "type": "query",
                "id": rid,
                "api": api,
                "args": shown_args,
                "answer": rendered,
                "as": synthetic,
                "thread": threading.current_thread().name,
                "stack": stack,
            }
            if error is not None:
                doc["error"] = error
            self._write(doc)
        except Exception as exc:  # the tracer never breaks the traced program
            self._safe_note(f"a query of {api} could not be recorded: {type(exc).__name__}: {exc}")

    def _safe_note(self, text: str) -> None:
        with contextlib.suppress(Exception):
            self.note(text)

    def wrap(
        self,
        api: str,
        original: Callable[..., Any],
        answer_as: Callable[..., Any] | None = None,
        method: bool = False,
    ) -> Callable[..., Any]:
        """``original`` wrapped: recorded when it is the outermost query; answered by ``answer_as``
        under ``--as`` (without calling the real API). ``method``: the first argument is the
        class or instance, left out of the record."""
        tracer = self

        @functools.wraps(original)
        def traced(*args: Any, **kwargs: Any) -> Any:
            local = tracer._local
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            synthetic = tracer.as_arch is not None and answer_as is not None
            try:
                answer = (
                    answer_as(*args, **kwargs)
                    if answer_as is not None and synthetic
                    else original(*args, **kwargs)
                )
            except BaseException as exc:
                local.depth = depth
                if depth == 0:
                    shown = args[1:] if method else args
                    tracer.record(api, shown, kwargs, None, synthetic, _describe(exc))
                raise
            local.depth = depth
            if depth == 0:
                tracer.record(api, args[1:] if method else args, kwargs, answer, synthetic, None)
            return answer

        traced.__liftgate_traced__ = True  # type: ignore[attr-defined]
        return traced

    # -- the APIs ---------------------------------------------------------------------------

    def patch(self, name: str, module: ModuleType) -> None:
        if name in self._patched:
            return
        self._patched.add(name)
        try:
            if name == "torch.cuda":
                self._patch_torch(module)
            elif name in ("pynvml", "vllm.third_party.pynvml"):
                self._patch_nvml(module, name)
            elif name.startswith("vllm.platforms."):
                self._patch_vllm(module, name)
            elif name == "triton.backends.nvidia.driver":
                self._patch_triton(module)
            elif name == "cupy.cuda":
                # Device.compute_capability is a property of a compiled (Cython) class: it cannot be
                # wrapped without handing the program another class, which breaks CuPy (seen on an
                # H200 with cupy-cuda13x 14.2). The probes still see the gates that read it.
                self.note(
                    "cupy.cuda.Device.compute_capability is not traced (a compiled property); "
                    + (
                        "--as does not change its answer"
                        if self.as_arch
                        else "gates reading it are still probed"
                    )
                )
            elif name in ("cupy.cuda.runtime", "cupy_backends.cuda.api.runtime"):
                self._patch_cupy_runtime(module, name)
        except Exception as exc:
            self._safe_note(f"{name}: not traced ({type(exc).__name__}: {exc})")

    def _patch_functions(
        self,
        module: ModuleType,
        prefix: str,
        names: tuple[str, ...],
        answers: dict[str, Callable[..., Any]] | None = None,
    ) -> None:
        for fname in names:
            original = getattr(module, fname, None)
            if original is None or getattr(original, "__liftgate_traced__", False):
                continue
            setattr(module, fname, self.wrap(f"{prefix}.{fname}", original, (answers or {}).get(fname)))

    def _arch(self) -> _AsArch:
        assert self.as_arch is not None  # the answers below run only under --as
        return self.as_arch

    def _patch_torch(self, module: ModuleType) -> None:
        def capability(*args: Any, **kwargs: Any) -> tuple[int, int]:
            return (self._arch().major, self._arch().minor)

        real_props = getattr(module, "get_device_properties", None)

        def properties(*args: Any, **kwargs: Any) -> _Props:
            real = None
            if real_props is not None:
                try:
                    real = real_props(*args, **kwargs)
                except Exception:
                    real = None  # no GPU here: the answer is the target's fields alone
            return _Props(real, self._arch())

        def device_name(*args: Any, **kwargs: Any) -> str:
            return self._arch().device_name

        answers: dict[str, Callable[..., Any]] = {
            "get_device_capability": capability,
            "get_device_properties": properties,
            "get_device_name": device_name,
        }
        # get_arch_list is what torch was built for, not the GPU: --as leaves its answer real.
        self._patch_functions(module, "torch.cuda", _TORCH_FUNCTIONS, answers)

    def _patch_nvml(self, module: ModuleType, name: str) -> None:
        def capability(handle: Any) -> tuple[int, int]:
            return (self._arch().major, self._arch().minor)

        def device_name(handle: Any) -> str:
            return self._arch().device_name

        answers: dict[str, Callable[..., Any]] = {
            "nvmlDeviceGetCudaComputeCapability": capability,
            "nvmlDeviceGetName": device_name,
        }
        self._patch_functions(module, name, _NVML_FUNCTIONS, answers)

    def _patch_vllm(self, module: ModuleType, name: str) -> None:
        interface = sys.modules.get("vllm.platforms.interface")
        capability_type = getattr(interface, "DeviceCapability", None)

        def number() -> int:
            return self._arch().major * 10 + self._arch().minor

        def as_int(cap: Any) -> int:
            return cap if isinstance(cap, int) else int(cap[0]) * 10 + int(cap[1])

        def current(cls: Any, device_id: int = 0) -> Any:
            cc = (self._arch().major, self._arch().minor)
            return capability_type(*cc) if capability_type is not None else cc

        def has(cls: Any, capability: Any, device_id: int = 0) -> bool:
            return number() >= as_int(capability)

        def exactly(cls: Any, capability: Any, device_id: int = 0) -> bool:
            return number() == as_int(capability)

        def family(cls: Any, capability: Any, device_id: int = 0) -> bool:
            return number() // 10 == as_int(capability) // 10

        def device_name(cls: Any, device_id: int = 0) -> str:
            return self._arch().device_name

        answers: dict[str, Callable[..., Any]] = {
            "get_device_capability": current,
            "has_device_capability": has,
            "is_device_capability": exactly,
            "is_device_capability_family": family,
            "get_device_name": device_name,
        }
        for cls in list(vars(module).values()):
            if not isinstance(cls, type) or getattr(cls, "__module__", None) != name:
                continue
            for method in _VLLM_METHODS:
                raw = cls.__dict__.get(method)
                if not isinstance(raw, classmethod):
                    continue
                func = raw.__func__
                if getattr(func, "__liftgate_traced__", False):
                    continue
                wrapped = self.wrap(
                    f"vllm.platforms.{cls.__name__}.{method}", func, answers.get(method), method=True
                )
                setattr(cls, method, classmethod(wrapped))

    def _patch_triton(self, module: ModuleType) -> None:
        driver = getattr(module, "CudaDriver", None)
        if driver is None or getattr(driver.get_current_target, "__liftgate_traced__", False):
            return

        def target(driver_self: Any, *args: Any, **kwargs: Any) -> Any:
            compiler = sys.modules.get("triton.backends.compiler") or __import__(
                "triton.backends.compiler", fromlist=["GPUTarget"]
            )
            return compiler.GPUTarget("cuda", self._arch().major * 10 + self._arch().minor, 32)

        driver.get_current_target = self.wrap(
            "triton.runtime.driver.active.get_current_target", driver.get_current_target, target, method=True
        )

    def _patch_cupy_runtime(self, module: ModuleType, name: str) -> None:
        original = getattr(module, "getDeviceProperties", None)

        def properties(*args: Any, **kwargs: Any) -> dict[str, Any]:
            real: dict[str, Any] = {}
            if original is not None:
                try:
                    real = dict(original(*args, **kwargs))
                except Exception:
                    real = {}
            arch = self._arch()
            real.update({"major": arch.major, "minor": arch.minor, "name": arch.device_name.encode()})
            return real

        self._patch_functions(
            module, "cupy.cuda.runtime", ("getDeviceProperties",), {"getDeviceProperties": properties}
        )

    # -- gate probes ------------------------------------------------------------------------

    def _lines_of(self, code: CodeType) -> dict[int, Probe] | None:
        if code in self._code_probes:
            return self._code_probes[code]
        filename = code.co_filename
        real = self._real_paths.get(filename)
        if real is None:
            try:
                real = os.path.normcase(os.path.realpath(filename))
            except (OSError, ValueError):
                real = ""
            self._real_paths[filename] = real
        probes = self._probe_lines.get(real)
        found = None
        if probes:
            lines = getattr(code, "co_lines", None)  # Python 3.10+
            if lines is not None:
                own = {line for _s, _e, line in lines() if line}
            else:
                own = {line for _o, line in __import__("dis").findlinestarts(code)}
            here = {line: probes[line] for line in own if line in probes}
            found = here or None
        self._code_probes[code] = found
        return found

    def global_trace(self, frame: FrameType, event: str, arg: Any) -> TraceFunction | None:
        if event != "call":
            return None
        try:
            probes = self._lines_of(frame.f_code)
        except Exception:
            return None
        if not probes:
            return None
        return self._local_tracer(probes)

    def _local_tracer(self, probes: dict[int, Probe]) -> TraceFunction:
        tracer = self
        state: list[Probe | None] = [None]  # the probe whose condition is being evaluated in this frame

        def local(frame: FrameType, event: str, arg: Any) -> TraceFunction | None:
            try:
                current = state[0]
                if event == "line":
                    line = frame.f_lineno
                    if current is not None:
                        first, last = current["lines"]
                        if first <= line <= last:
                            return local
                        tracer._tally(current, _outcome(current, line))
                        state[0] = None
                    probe = probes.get(line)
                    if probe is not None:
                        state[0] = probe
                        if not probe.get("branches"):
                            tracer._tally(probe, "evaluated")
                            state[0] = None
                elif event in ("return", "exception") and current is not None:
                    tracer._tally(current, "returned" if event == "return" else "raised")
                    state[0] = None
            except Exception:
                return None
            return local

        return local

    def _tally(self, probe: Probe, outcome: str) -> None:
        gate = str(probe.get("gate", ""))
        key = (gate, outcome)
        with self._lock:
            if self._pid != os.getpid():
                self._open()
            count = self._probe_counts.get(key, 0)
            self._probe_counts[key] = count + 1
            total = self._gate_totals.get(gate, 0) + 1
            self._gate_totals[gate] = total
        if total == self.probe_limit:
            self._retire(probe)
        if count == 0:
            self._write(
                {
                    "type": "probe",
                    "gate": key[0],
                    "path": probe.get("path"),
                    "line": probe["lines"][0],
                    "outcome": outcome,
                    "thread": threading.current_thread().name,
                    "stack": self._stack(sys._getframe(1)),
                }
            )

    def _retire(self, probe: Probe) -> None:
        """A gate seen ``probe_limit`` times is not probed any more: a dispatch in a serving loop
        runs millions of times, and its count is then a lower bound (``limited`` in the trace)."""
        with self._lock:
            for table in [*self._probe_lines.values(), *(t for t in self._code_probes.values() if t)]:
                for line in [n for n, p in table.items() if p is probe]:
                    del table[line]
            for code in [c for c, t in self._code_probes.items() if t is not None and not t]:
                self._code_probes[code] = None
                if self.monitor is not None:
                    self.monitor.stop(code)
        self._write({"type": "probe-limit", "gate": probe.get("gate", ""), "limit": self.probe_limit})


class _Monitor:
    """Probes through ``sys.monitoring`` (Python 3.12+): a function without a probed gate costs one
    callback, ever (its start event is then disabled); only functions holding a gate get line
    events. ``sys.settrace`` pays a Python call on every function call for the whole run.

    Per-frame state is kept per (thread, code object); a frame left by an exception has no
    event of its own here, so its open condition is counted ``raised`` at the function's next
    start, or at exit.
    """

    TOOL_IDS = (4, 3, 2)  # free for tools (0: debugger, 1: coverage, 5: optimizer)

    def __init__(self, tracer: Tracer, tool: int) -> None:
        self.tracer = tracer
        self.tool = tool
        self.open: dict[tuple[int, CodeType], Probe] = {}
        self.enabled: set[CodeType] = set()

    @classmethod
    def start(cls, tracer: Tracer) -> _Monitor | None:
        mon = sys.monitoring  # type: ignore[attr-defined]
        for tool in cls.TOOL_IDS:
            try:
                mon.use_tool_id(tool, "liftgate-trace")
            except ValueError:
                continue  # another tool holds it
            monitor = cls(tracer, tool)
            events = mon.events
            mon.register_callback(tool, events.PY_START, monitor.on_start)
            mon.register_callback(tool, events.LINE, monitor.on_line)
            mon.register_callback(tool, events.PY_RETURN, monitor.on_return)
            mon.set_events(tool, events.PY_START)
            return monitor
        tracer.note("every sys.monitoring tool id is taken: probes fall back to sys.settrace")
        return None

    def on_start(self, code: CodeType, offset: int) -> Any:
        mon = sys.monitoring  # type: ignore[attr-defined]
        try:
            probes = self.tracer._lines_of(code)
        except Exception:
            probes = None
        if not probes:
            return mon.DISABLE
        if code not in self.enabled:
            self.enabled.add(code)
            mon.set_local_events(self.tool, code, mon.events.LINE | mon.events.PY_RETURN)
        stale = self.open.pop((threading.get_ident(), code), None)
        if stale is not None:
            self.tracer._tally(stale, "raised")
        return None

    def on_line(self, code: CodeType, line: int) -> Any:
        try:
            key = (threading.get_ident(), code)
            current = self.open.get(key)
            if current is not None:
                first, last = current["lines"]
                if first <= line <= last:
                    return None
                del self.open[key]
                self.tracer._tally(current, _outcome(current, line))
            probe = (self.tracer._code_probes.get(code) or {}).get(line)
            if probe is not None:
                if probe.get("branches"):
                    self.open[key] = probe
                else:
                    self.tracer._tally(probe, "evaluated")
        except Exception:
            pass
        return None

    def on_return(self, code: CodeType, offset: int, value: object) -> Any:
        current = self.open.pop((threading.get_ident(), code), None)
        if current is not None:
            self.tracer._tally(current, "returned")
        return None

    def stop(self, code: CodeType) -> None:
        """No more events for ``code``: its probes are all retired."""
        with contextlib.suppress(Exception):
            sys.monitoring.set_local_events(self.tool, code, 0)  # type: ignore[attr-defined]

    def flush(self) -> None:
        for probe in list(self.open.values()):
            self.tracer._tally(probe, "raised")
        self.open.clear()


def _outcome(probe: Probe, line: int) -> str:
    """Which way a condition went, from the first line run after it in the same frame."""
    then = probe.get("then")
    other = probe.get("else")
    if then and then[0] <= line <= then[1]:
        return "then"
    if other and other[0] <= line <= other[1]:
        return "else"
    return "past"  # neither block: an if without else skipped, or a guard passed


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched module, wraps the loader that finds it so that the
    module is patched right after it has run (before anyone can import names from it)."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self._busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _WATCHED or fullname in self._busy:
            return None
        self._busy.add(fullname)
        spec = None
        try:
            for finder in sys.meta_path:  # in the order the import system would ask them
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, self.tracer, fullname)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, tracer: Tracer, name: str) -> None:
        self._loader = loader
        self._tracer = tracer
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._tracer.patch(self._name, module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, get_source …
        return getattr(self._loader, name)


_TRACER: Tracer | None = None


def start() -> Tracer | None:
    """Start tracing this process as ``$LIFTGATE_TRACE_*`` says (idempotent; a no-op without it)."""
    global _TRACER
    out_dir = os.environ.get(ENV_DIR)
    if not out_dir or _TRACER is not None:
        return _TRACER
    as_arch = None
    notes = []
    raw_as = os.environ.get(ENV_AS)
    if raw_as:
        try:
            as_arch = _AsArch(json.loads(raw_as))
        except (ValueError, KeyError, TypeError) as exc:
            notes.append(f"{ENV_AS} unreadable ({exc}): answering with the real device")
    probes: list[Probe] = []
    probes_file = os.environ.get(ENV_PROBES)
    if probes_file:
        try:
            with open(probes_file, encoding="utf-8") as fh:
                probes = list(json.load(fh).get("probes", []))
        except (OSError, ValueError, AttributeError) as exc:
            notes.append(f"{probes_file}: gate probes not loaded ({exc})")
    try:
        limit = int(os.environ.get(ENV_PROBE_LIMIT, "") or 10_000)
    except ValueError:
        limit = 10_000
    tracer = Tracer(out_dir, as_arch, probes, max(limit, 1))
    _TRACER = tracer
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=tracer.after_fork)
    for text in notes:
        tracer.note(text)
    sys.meta_path.insert(0, _PostImportFinder(tracer))
    for name in _WATCHED:
        module = sys.modules.get(name)
        if module is not None:
            tracer.patch(name, module)
    if probes:
        monitor = _Monitor.start(tracer) if hasattr(sys, "monitoring") else None
        tracer.monitor = monitor
        if monitor is None:
            sys.settrace(tracer.global_trace)
            threading.settrace(tracer.global_trace)
        else:
            atexit.register(monitor.flush)
    atexit.register(tracer.flush_counts)
    tracer._write({"type": "started"})
    return tracer
