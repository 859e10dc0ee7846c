"""Every detector, in the order the runner calls them, and the cross-detector links run after them.

Adding a detector is adding it here (and writing its module): the runner (`liftgate.scan.run`)
gives each the files it wants, wraps each call in the one safety net, caches by content the
detections of those that do not cache themselves, and sorts the gates. The order matters only
for ties: gates are sorted by package, path and line, and a stable sort keeps detector order.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from liftgate.collector import collector_off
from liftgate.detect.binary import detect_binaries, is_binary_candidate
from liftgate.detect.buildflags import link_build_flags
from liftgate.detect.cfamily import CFamilyDetector
from liftgate.detect.cmake import detect_cmake, is_cmake_file
from liftgate.detect.interface import Batch, Detection, Detector, Scope, not_analysed
from liftgate.model import Evidence, Gate, Skip, TorchOp
from liftgate.sources.interface import DEFAULT_MAX_PY_FILE_SIZE
from liftgate.sources.workspace import read_text, stat_trusted


class CMakeDetector:
    """cmake gates: arch lists and ``if()`` blocks of ``CMakeLists.txt`` and ``*.cmake`` files, one file at a time."""

    name = "cmake"
    scope = Scope.FILE
    caches_itself = False
    runs_ahead = False
    phase = "analysing CMake files"

    def wants(self, path: str) -> bool:
        return is_cmake_file(path)

    def detect(self, batch: Batch) -> Detection:
        (f,) = batch.files
        text = read_text(f.fspath)  # the file itself: two packages of one name and version may be scanned
        if text is None:
            return Detection(skips=(Skip(f.path, "unreadable, binary or too large", f.package),))
        return detect_cmake(f.package, f.version, f.path, text, batch.settings.cuda_version)

    def reset(self) -> None:
        pass


class PythonDetector:
    """py-runtime and py-build gates of every package's Python at once, so a predicate defined in
    one package and used in another resolves exactly."""

    name = "python"
    scope = Scope.WORKSPACE
    caches_itself = False
    # The longest phase, and one process: it runs beside the C-family detector, which publishes
    # torch ops for it only where a package registers query ops (none of FlashInfer's or SGLang's).
    runs_ahead = True
    phase = "analysing Python"

    def wants(self, path: str) -> bool:
        return path.endswith(".py")

    def detect(self, batch: Batch) -> Detection:
        from liftgate.detect.pybuild import PY_BUILD_PREFILTER, detect_py_build
        from liftgate.detect.python import PythonAnalyzer, source_from_file

        files = batch.files
        gates: list[Gate] = []
        skips: list[Skip] = []
        # Hundreds of syntax trees stay alive for the whole phase; the cyclic collector would rescan
        # them on every allocation burst (it tripled the time of this phase). There are no cycles to find.
        with collector_off():
            analyzer = PythonAnalyzer(
                (source_from_file(f.package, f.version, f.path, f.fspath) for f in files),
                max_file_size=min(batch.settings.max_file_size, DEFAULT_MAX_PY_FILE_SIZE),
            )
            analyzer.add_torch_ops(batch.ops)
            try:
                gates.extend(analyzer.analyze())
            except Exception as exc:  # the analyzer catches per module itself; this is a bug
                skips.append(
                    not_analysed(
                        f"{len(files)} Python files", None, exc, "py-runtime analysis failed",
                        "py-runtime gates are not reported",
                    )
                )  # fmt: skip
            for module_name in analyzer.build_candidates(PY_BUILD_PREFILTER):
                try:
                    module = analyzer.module_for_build(module_name)
                    if module is None:
                        continue
                    detection = detect_py_build(
                        module.package, module.version, module.path, module.text, module.tree
                    )
                except Exception as exc:  # detect_py_build has its own net; this is a bug
                    src = analyzer.source(module_name)
                    skips.append(not_analysed(src.path, src.package, exc, "py-build not analysed", ""))
                    continue
                gates.extend(detection.gates)
                skips.extend(detection.skips)
            skips.extend(analyzer.skips)
            gates.extend(op_gates(batch.ops, analyzer.interpreter.op_calls, gates))
            # Emptied and dropped while the collector is still off: freed by reference counts, not
            # by a collection over millions of syntax-tree objects the moment it is back on.
            if not batch.process_ends:
                analyzer.close()
            del analyzer
        return Detection(tuple(gates), tuple(skips))

    def reset(self) -> None:
        pass


def op_gates(
    ops: Sequence[TorchOp],
    calls: Mapping[tuple[str, str, int], Mapping[Evidence, None]],
    python: Sequence[Gate] = (),
) -> list[Gate]:
    """The parametric C++ gates of each torch op some Python passes the capability to, each with
    the call sites that decide it (a C++ branch on a parameter is a gate only where a caller
    passes the device's capability; `liftgate.detect.cpp_ops`) and, in ``decided_at``, the ids of
    the ``python`` gates at those calls."""
    at: dict[tuple[str, int], list[str]] = {}
    for g in python:
        at.setdefault((g.location.path, g.location.line), []).append(g.id)
    out: list[Gate] = []
    for op in ops:
        steps = calls.get((op.package, op.name, op.position))
        if not steps:
            continue
        # The calls and how their callers came by the capability, in a fixed order (the walk's
        # order depends on which module was read first), at most 12.
        ordered = sorted(steps, key=lambda e: (e.path or "", e.line or 0, e.text))
        shown = ordered[:12]
        registered = Evidence(f"{op.function}() is registered as torch op {op.name}", *op.registered)
        via = Evidence(f"Python passes the capability to torch op {op.name}:")
        deciding = tuple(
            dict.fromkeys(gid for e in ordered if e.path and e.line for gid in at.get((e.path, e.line), ()))
        )
        out.extend(
            replace(g, evidence=(*g.evidence, registered, via, *shown), decided_at=deciding) for g in op.gates
        )
    return out


class BinaryDetector:
    """binary gates: the kernel images (SASS, PTX) of each shared object, cubin or fatbin of a package."""

    name = "binary"
    scope = Scope.PACKAGE
    runs_ahead = False
    # Keyed by its files' stats, not their bytes (`_stat_key`): only ELF section tables and fatbin
    # headers are read, kilobytes of files that can be gigabytes, which a content digest would read.
    caches_itself = True
    phase = ""

    def wants(self, path: str) -> bool:
        return is_binary_candidate(path)

    def detect(self, batch: Batch) -> Detection:
        assert batch.package is not None
        key = _stat_key(self.name, batch) if batch.cache is not None else None
        if key is not None and batch.cache is not None:
            cached = batch.cache.load_result(key)
            if cached is not None:
                return Detection(tuple(cached[0]), tuple(cached[1]))
        gates, skips, _seen = detect_binaries(batch.package.name, batch.package.version, batch.files)
        if key is not None and batch.cache is not None:
            batch.cache.store_result(key, gates, skips)
        return Detection(tuple(gates), tuple(skips))

    def reset(self) -> None:
        pass


def _stat_key(name: str, batch: Batch) -> str | None:
    """A detection's cache key from its files' paths, sizes and mtimes (and the code, the package and
    where it lies), or None when a file's mtime is too recent to trust: the stat caches' rule
    (`liftgate.sources.workspace.stat_trusted`), applied to the moment of this scan."""
    assert batch.package is not None and batch.cache is not None
    now = time.time_ns()
    files = sorted(batch.files, key=lambda f: f.path)
    if not all(stat_trusted(f.mtime_ns, now) for f in files):
        return None
    digest = hashlib.sha256(
        f"{name}\x1f{batch.cache.fingerprint}\x1f{batch.package.name}\x1f{batch.package.version}".encode()
    )
    for f in files:
        digest.update(f"{f.path}\x1f{f.fspath}\x1f{f.size}\x1f{f.mtime_ns}\x1e".encode())
    return f"{name}-stat-{digest.hexdigest()[:32]}"


DETECTORS: tuple[Detector, ...] = (CFamilyDetector(), CMakeDetector(), PythonDetector(), BinaryDetector())


def merge_same_gates(gates: Sequence[Gate]) -> list[Gate]:
    """One gate per id. A C++ branch on a parameter can be found twice, by the C-family detector
    (a caller in its file passes the capability) and through a torch op the Python detector
    resolved: the same branch, the same id. Merged: evidence, ``decided_at`` and enclosing gates
    joined; a target admitted by one reading and not the other is unknown."""
    first: dict[str, int] = {}
    out: list[Gate] = []
    for g in gates:
        k = first.get(g.id)
        if k is None:
            first[g.id] = len(out)
            out.append(g)
            continue
        kept = out[k]
        admitted = kept.admitted & g.admitted
        out[k] = replace(
            kept,
            admitted=admitted,
            unknown=(kept.unknown | g.unknown | kept.admitted | g.admitted) - admitted,
            evidence=tuple(dict.fromkeys((*kept.evidence, *g.evidence))),
            decided_at=tuple(dict.fromkeys((*kept.decided_at, *g.decided_at))),
            enclosing=tuple(dict.fromkeys((*kept.enclosing, *g.enclosing))),
        )
    return out


# Steps over every detector's gates, in order: each returns the gates with facts joined across kinds.
LINKS: tuple[Callable[[Sequence[Gate]], list[Gate]], ...] = (merge_same_gates, link_build_flags)


def reset_workers() -> None:
    """A pool worker's start: no detector state from an earlier scan."""
    for detector in DETECTORS:
        detector.reset()
