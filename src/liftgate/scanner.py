"""Orchestrates a scan: sources → prefilter → parallel detection → `Report`.

Speed comes from three things, in this order:

1. A byte-level prefilter. Every C-family file is read once and indexed with one regular
   expression (`quick_index`); only files that mention ``__CUDA_ARCH`` — and, in later rounds,
   files whose conditionals use a macro that an analysed file derived from the architecture —
   are parsed in full.
2. Parallel workers for both the index and the full analysis (``--jobs``).
3. A content-hash cache: the index of a file is keyed by its stat and digest, the result of a
   package by the digests of all its C-family files, so an unchanged tree re-scans in the time
   it takes to stat it.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import marshal
import os
import posixpath
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, cast

from liftgate import __version__
from liftgate.arch.core import Arch, ArchSet
from liftgate.detect.cmake import detect_cmake, is_cmake_file
from liftgate.detect.cpp_lex import BUILD_FILE_EXTENSIONS, QuickIndex, build_defines, quick_index
from liftgate.detect.cpp_runtime import HelperIndex, detect_cpp_runtime
from liftgate.detect.cuda import CUDA_EXTENSIONS, PackageAnalyzer, host_regions, relevant_macros
from liftgate.model import (
    Chain,
    Confidence,
    ElseKind,
    Evidence,
    Gate,
    GateKind,
    Location,
    PackageSummary,
    Report,
    Skip,
    Span,
    Target,
    Truth,
    Verdict,
    gate_id,
)
from liftgate.sources.interface import NullObserver, Observer, Package, SourceFile

if TYPE_CHECKING:
    from liftgate.trace.document import Trace

CACHE_FORMAT = "scan-v3"
DEFAULT_MAX_FILE_SIZE = 16 * 1024 * 1024
DEFAULT_MAX_PY_FILE_SIZE = 4 * 1024 * 1024
_BINARY_SNIFF = 8192
# The stat caches trust a file's size and mtime only when the mtime is older than the moment its
# entry was computed, minus this margin (file-system clocks are coarse): git's "racy git" rule.
# A file changed in place since (same size, mtime put back) is read again.
_RACY_MARGIN_NS = 2_000_000_000

# path -> (size, mtime_ns, tag, stamp_ns): the tag is the content digest or ``skip:<reason>``,
# stamp_ns when the file was read (a clock reading taken before it).
StatEntry = tuple[int, int, str, int]
# Below this many files, a process pool costs more than it saves.
_POOL_THRESHOLD = 64


@dataclass(frozen=True, slots=True)
class IndexedFile:
    path: str
    digest: str
    index: QuickIndex


IndexResult = IndexedFile | Skip


def _index_one(path: str, fspath: str, max_size: int, package: str) -> IndexResult:
    try:
        size = os.stat(fspath).st_size
        if size > max_size:
            return Skip(
                path,
                f"{size / 1e6:.1f} MB is larger than the {max_size / 1e6:.0f} MB limit (--max-file-size)",
                package,
            )
        with open(fspath, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return Skip(path, f"cannot read: {exc.strerror or exc}", package)
    if b"\x00" in data[:_BINARY_SNIFF]:
        return Skip(path, "binary content in a source file", package)
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    try:
        if not _is_cfamily(path):  # a build file: only the macros it passes to the compiler matter
            return IndexedFile(path, digest, QuickIndex(False, frozenset(), build_defines(data), (), ()))
        return IndexedFile(path, digest, quick_index(data))
    except Exception as exc:  # the last resort: one odd file must never stop a scan
        return Skip(path, f"cannot index it ({_failure(exc)}); gates in it are not reported", package)


def _failure(exc: BaseException) -> str:
    """An unexpected exception for a Skip's reason: its type, and its message cut short."""
    text = str(exc)
    return type(exc).__name__ + (f": {text[:200]}{'…' if len(text) > 200 else ''}" if text else "")


def _index_chunk(chunk: list[tuple[str, str]], max_size: int, package: str) -> list[IndexResult]:
    return [_index_one(path, fspath, max_size, package) for path, fspath in chunk]


# -- full analysis (runs in workers) -------------------------------------------------------

_ANALYZERS: dict[tuple[str, str | None], PackageAnalyzer] = {}


@dataclass(frozen=True, slots=True)
class _PackageJob:
    name: str
    version: str | None
    fspaths: dict[str, str]
    cuda_version: tuple[int, int]
    relevant: frozenset[str]
    defined_anywhere: frozenset[str]
    helpers: HelperIndex | None = None  # capability helpers of the package (cpp-runtime)
    runtime_paths: frozenset[str] = frozenset()  # files whose host code is walked for cpp-runtime gates


def _read_text_lenient(fspath: str) -> str | None:
    try:
        with open(fspath, "rb") as fh:
            data = fh.read(DEFAULT_MAX_FILE_SIZE + 1)
    except OSError:
        return None
    if len(data) > DEFAULT_MAX_FILE_SIZE or b"\x00" in data[:_BINARY_SNIFF]:
        return None
    return data.decode("utf-8", "replace")


def _analyzer(job: _PackageJob) -> PackageAnalyzer:
    key = (job.name, job.version)
    analyzer = _ANALYZERS.get(key)
    if analyzer is None:
        fspaths = job.fspaths
        analyzer = PackageAnalyzer(
            job.name,
            job.version,
            lambda p: _read_text_lenient(fspaths[p]) if p in fspaths else None,
            fspaths.keys(),
            job.cuda_version,
            job.relevant,
            job.defined_anywhere,
        )
        _ANALYZERS[key] = analyzer
    return analyzer


def _analyze_chunk(job: _PackageJob, paths: list[str]) -> tuple[list[Gate], list[Skip], set[str]]:
    analyzer = _analyzer(job)
    gates: list[Gate] = []
    skips: list[Skip] = []
    derived: set[str] = set()
    for path in paths:
        try:
            with open(job.fspaths[path], "rb") as fh:
                data = fh.read()
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            skips.append(
                Skip(path, f"not valid UTF-8 (byte {exc.start}); gates in it are not reported", job.name)
            )
            continue
        except OSError as exc:
            skips.append(Skip(path, f"cannot read: {exc.strerror or exc}", job.name))
            continue
        # The detectors bound their own work (see liftgate.detect.cuda and cpp_runtime): what is
        # caught here is a bug, turned into a Skip that names it instead of ending the scan.
        try:
            result = analyzer.analyze(path, text)
        except Exception as exc:
            skips.append(
                Skip(path, f"not analysed ({_failure(exc)}); gates in it are not reported", job.name)
            )
            continue
        gates.extend(result.gates)
        skips.extend(result.skips)
        derived |= result.derived
        if job.helpers is not None and path in job.runtime_paths:
            try:
                runtime = detect_cpp_runtime(job.name, job.version, path, text, result.regions, job.helpers)
            except Exception as exc:
                # C++ that the host-code reader cannot follow: the file's other gates stand.
                skips.append(Skip(path, f"host code not analysed ({_failure(exc)})", job.name))
                continue
            gates.extend(runtime.gates)
            skips.extend(runtime.skips)
    return gates, skips, derived


def _reset_worker() -> None:
    from liftgate.detect.cuda import clear_caches

    _ANALYZERS.clear()
    clear_caches()


# -- cache ------------------------------------------------------------------------------


class ScanCache:
    """Marshalled (plain-data) index and result caches under ``<cache_dir>/scan-v1``; any damage means a miss."""

    def __init__(self, root: Path | None) -> None:
        self.root = root / CACHE_FORMAT if root else None

    def _load(self, name: str) -> object | None:
        if self.root is None:
            return None
        try:
            with open(self.root / name, "rb") as fh:
                value: object = marshal.load(fh)
            return value
        except Exception:
            return None

    def _store(self, name: str, value: object) -> None:
        if self.root is None:
            return
        try:
            target = self.root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                marshal.dump(value, fh)  # type: ignore[arg-type]
            os.replace(tmp, target)
        except (OSError, ValueError):
            pass  # a cache that cannot be written is only a slower next run

    # Frozen slotted dataclasses unpickle slowly (dataclasses' __setstate__), so the caches hold
    # plain tuples written with marshal; this keeps a warm scan of a 10k-file tree well under a second.
    def load_stats(self, key: str) -> dict[str, StatEntry]:
        """path -> `StatEntry`; use an entry only where `stat_hit` says it is fresh."""
        value = self._load(f"stats/{key}-{_code_fingerprint()[:16]}.bin")
        return value if isinstance(value, dict) else {}

    def store_stats(self, key: str, value: dict[str, StatEntry]) -> None:
        self._store(f"stats/{key}-{_code_fingerprint()[:16]}.bin", value)

    def load_details(self, key: str) -> dict[str, tuple[object, ...]]:
        """digest -> the file's quick index, as a plain row."""
        value = self._load(f"details/{key}-{_code_fingerprint()[:16]}.bin")
        return value if isinstance(value, dict) else {}

    def store_details(self, key: str, value: dict[str, tuple[object, ...]]) -> None:
        self._store(f"details/{key}-{_code_fingerprint()[:16]}.bin", value)

    def load_result(self, key: str) -> tuple[list[Gate], list[Skip]] | None:
        value = self._load(f"result/{key}.bin")
        if not (isinstance(value, tuple) and len(value) == 2):
            return None
        # Thousands of small objects at once: the cyclic GC would only slow this down.
        enabled = gc.isenabled()
        gc.disable()
        try:
            gate_rows, skip_rows = value
            return [_gate_from_row(row) for row in gate_rows], [Skip(*row) for row in skip_rows]
        except (TypeError, ValueError):
            return None
        finally:
            if enabled:
                gc.enable()

    def store_result(self, key: str, gates: list[Gate], skips: list[Skip]) -> None:
        self._store(
            f"result/{key}.bin",
            (_shared([_gate_to_row(g) for g in gates]), [(s.path, s.reason, s.package) for s in skips]),
        )


def stat_hit(entry: object, size: int, mtime_ns: int) -> str | None:
    """The cached tag of a file whose size and mtime match ``entry``, unless the entry is racy.

    Racy: the file's mtime is not clearly older than the moment the entry was computed, so the
    file may have changed since without its size or mtime showing it. It is read again.
    """
    if not (isinstance(entry, tuple) and len(entry) == 4):
        return None
    cached_size, cached_mtime, tag, stamp = entry
    if cached_size != size or cached_mtime != mtime_ns or not isinstance(tag, str):
        return None
    if not isinstance(stamp, int) or mtime_ns >= stamp - _RACY_MARGIN_NS:
        return None
    return tag


def _shared(value: object, seen: dict[object, object] | None = None) -> object:
    """Equal strings and tuples made one object, so marshal writes each once (back-references):
    conditions, paths and evidence repeat across thousands of gates."""
    if seen is None:
        seen = {}
    if isinstance(value, list):
        return [_shared(v, seen) for v in value]
    if isinstance(value, tuple):
        value = tuple(_shared(v, seen) for v in value)
    if isinstance(value, (str, tuple)):
        return seen.setdefault(value, value)
    return value


def _tag(r: IndexResult) -> str:
    return f"skip:{r.reason}" if isinstance(r, Skip) else r.digest


def _details_row(q: QuickIndex) -> tuple[object, ...]:
    return (q.has_arch, q.condition_idents, q.defines, q.includes, q.define_bodies, q.has_capability)


def _details_from_row(row: tuple[object, ...]) -> QuickIndex:
    has_arch, idents, defines, includes, bodies, has_capability = row
    return QuickIndex(has_arch, idents, defines, includes, bodies, has_capability)  # type: ignore[arg-type]


def _span_row(span: Span | None) -> tuple[int, int] | None:
    return None if span is None else (span.start, span.end)


def _span_from(row: tuple[int, int] | None) -> Span | None:
    return None if row is None else Span(*row)


_GATE_KINDS = {k.value: k for k in GateKind}
_TRUTHS = {t.value: t for t in Truth}
_ELSE_KINDS = {e.value: e for e in ElseKind}
_CONFIDENCES = {c.value: c for c in Confidence}


def _gate_to_row(g: Gate) -> tuple[object, ...]:
    loc = g.location
    return (
        g.id,
        g.kind.value,
        (loc.package, loc.version, loc.path, loc.span.start, loc.span.end),
        g.condition,
        g.admitted.mask,
        g.unknown.mask,
        None if g.host is None else g.host.value,
        _span_row(g.then_span),
        _span_row(g.else_span),
        g.else_kind.value,
        g.confidence.value,
        tuple((e.text, e.path, e.line) for e in g.evidence),
        g.depends_on,
        g.directive,
        g.enclosing,
    )


def _gate_from_row(row: tuple[object, ...]) -> Gate:
    (gid, kind, loc, condition, admitted, unknown, host, then_span, else_span, else_kind, confidence, evidence,
     depends_on, directive, enclosing) = row  # fmt: skip
    package, version, path, start, end = cast(tuple[str, str | None, str, int, int], loc)
    return Gate(
        id=gid,  # type: ignore[arg-type]
        kind=_GATE_KINDS[kind],  # type: ignore[index]
        location=Location(package, version, path, Span(start, end)),
        condition=condition,  # type: ignore[arg-type]
        admitted=ArchSet.from_mask(admitted),  # type: ignore[arg-type]
        unknown=ArchSet.from_mask(unknown),  # type: ignore[arg-type]
        host=None if host is None else _TRUTHS[host],  # type: ignore[index]
        then_span=_span_from(then_span),  # type: ignore[arg-type]
        else_span=_span_from(else_span),  # type: ignore[arg-type]
        else_kind=_ELSE_KINDS[else_kind],  # type: ignore[index]
        confidence=_CONFIDENCES[confidence],  # type: ignore[index]
        evidence=tuple(Evidence(*e) for e in evidence),  # type: ignore[attr-defined]
        depends_on=depends_on,  # type: ignore[arg-type]
        directive=directive,  # type: ignore[arg-type]
        enclosing=enclosing,  # type: ignore[arg-type]
    )


# -- toolkit ----------------------------------------------------------------------------


@cache
def local_cuda_version() -> tuple[int, int] | None:
    """The CUDA version of the nvcc on PATH, if any."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_cuda_version(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?\s*", text)
    if m is None:
        raise ValueError(f"invalid CUDA version {text!r}; expected e.g. 12.8 or 13.0")
    return int(m.group(1)), int(m.group(2) or 0)


# -- the scan ---------------------------------------------------------------------------


@dataclass
class _Pool:
    jobs: int
    executor: Executor | None = None

    def get(self) -> Executor:
        if self.executor is None:
            self.executor = ProcessPoolExecutor(max_workers=self.jobs, initializer=_reset_worker)
        return self.executor

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(cancel_futures=True)


def _chunks(items: Sequence[object], parts: int, min_size: int) -> list[list[object]]:
    size = max(min_size, -(-len(items) // max(parts, 1)))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def _is_cfamily(path: str) -> bool:
    return posixpath.splitext(path)[1].lower() in CUDA_EXTENSIONS


def _is_indexed(path: str) -> bool:
    ext = posixpath.splitext(path)[1].lower()
    return ext in CUDA_EXTENSIONS or ext in BUILD_FILE_EXTENSIONS


def _is_python_or_cmake(path: str) -> bool:
    return path.endswith(".py") or is_cmake_file(path)


def _package_key(pkg: Package) -> str:
    h = hashlib.sha256(f"{pkg.name}\x1f{pkg.version}\x1f{pkg.origin}".encode())
    return h.hexdigest()[:24]


def resolve_targets(targets: Iterable[str | Arch | Target]) -> tuple[Target, ...]:
    from liftgate.arch.parse import parse_target

    out: list[Target] = []
    for t in targets:
        if isinstance(t, Target):
            out.append(t)
        elif isinstance(t, Arch):
            out.append(Target(t.name, t))
        else:
            out.append(Target(t, parse_target(t)))
    return tuple(out)


def scan(
    sources: str | Sequence[str] = (),
    targets: Iterable[str | Arch | Target] = (),
    *,
    env: str | None = None,
    cuda_version: tuple[int, int] | None = None,
    jobs: int | None = None,
    use_cache: bool = True,
    cache_dir: str | None = None,
    max_file_size: int = DEFAULT_MAX_FILE_SIZE,
    offline: bool = False,
    observer: Observer | None = None,
    sdist: bool = False,
    judge: bool | Callable[[Gate], bool] = False,
    files_out: dict[tuple[str, str | None], dict[str, str]] | None = None,
    only_packages: Collection[str] | None = None,
    overlay: Mapping[tuple[str, str], str] | None = None,
    only_python: bool = False,
    trace: Trace | None = None,
    chains: bool = False,
) -> Report:
    """Scan sources for architecture gates and evaluate them for ``targets``.

    ``sources`` are paths (directories, wheels, sdists), ``name==version`` specs fetched from the
    package index, or ``env:PATH``; empty means the current environment (or ``env``). With
    ``judge``, every gate that excludes a target gets a `Verdict` (`liftgate.judge`); a callable
    chooses which gates are judged. ``files_out``, when given, receives each package's files
    (package path -> filesystem path, keyed by (name, version)) for callers that show source.
    ``only_packages`` keeps just the named distributions; ``overlay`` reads some files from
    elsewhere (``(package, path) -> filesystem path``): how `liftgate.lift` re-detects a plan's
    edits before it changes anything. ``only_python`` analyses Python alone (py-runtime and
    py-build gates): what ``liftgate trace`` needs for its probes. ``trace`` (a run's trace,
    `liftgate.trace.document.load_trace`) is mapped onto the gates (`liftgate.trace.match`).
    ``chains`` finds the gate chains (`liftgate.chain`) that hold two gates or more to lift
    together for a target; with ``judge``, their members are judged too.
    """
    from liftgate.sources import resolve_sources
    from liftgate.sources.cache import cache_root

    started = time.perf_counter()
    observer = observer or NullObserver()
    resolved_targets = resolve_targets(targets)
    specs = [sources] if isinstance(sources, str) else list(sources)
    notes: list[str] = []
    if cuda_version is None:
        local = local_cuda_version()
        cuda_version = local or (13, 0)
        notes.append(
            f"toolkit-version conditions evaluated for CUDA {cuda_version[0]}.{cuda_version[1]}"
            + (" (the local nvcc)" if local else " (no nvcc found; pass --cuda-version)")
        )
    else:
        notes.append(f"toolkit-version conditions evaluated for CUDA {cuda_version[0]}.{cuda_version[1]}")
    cache_root_dir = Path(cache_root(cache_dir))
    packages, skips = resolve_sources(
        specs, env=env, cache_dir=str(cache_root_dir), observer=observer, offline=offline, sdist=sdist
    )
    if only_packages is not None:
        wanted = {n.lower() for n in only_packages}
        packages = [p for p in packages if p.name.lower() in wanted]
    if overlay:
        packages = [_overlaid(p, overlay) for p in packages]
    scan_cache = ScanCache(cache_root_dir if use_cache else None)
    pool = _Pool(jobs or max(1, min(os.cpu_count() or 1, 8)))
    all_gates: list[Gate] = []
    all_skips: list[Skip] = list(skips)
    summaries: list[PackageSummary] = []
    files_scanned = 0
    try:
        for pkg in packages:
            cfiles = [] if only_python else [f for f in pkg.files if _is_indexed(f.path)]
            summaries.append(PackageSummary(pkg.name, pkg.version, pkg.origin, len(pkg.files)))
            files_scanned += len(cfiles)
            if not cfiles:
                continue
            gates, pkg_skips = _scan_package(
                pkg, cfiles, cuda_version, max_file_size, scan_cache, pool, observer
            )
            all_gates.extend(gates)
            all_skips.extend(pkg_skips)
        build_files = [
            f
            for pkg in packages
            for f in pkg.files
            if (f.path.endswith(".py") if only_python else _is_python_or_cmake(f.path))
        ]
        files_scanned += sum(1 for f in build_files if only_python or not _is_indexed(f.path))
        gates, py_skips = _scan_python_and_cmake(
            build_files, max_file_size, scan_cache, observer, cuda_version
        )
        all_gates.extend(gates)
        all_skips.extend(py_skips)
        if not only_python:
            all_gates = _link_build_flags(all_gates, build_files)
            binary_gates, binary_skips, binary_files = _scan_binaries(packages)
            all_gates.extend(binary_gates)
            all_skips.extend(binary_skips)
            files_scanned += binary_files
    finally:
        pool.close()
        _reset_worker()  # the in-process analysers hold whole packages' lexed headers
    all_gates.sort(key=lambda g: (g.location.package.lower(), g.location.path, g.location.span.start))
    all_skips.sort(key=lambda s: ((s.package or "").lower(), s.path))
    # Each package's files, package path -> filesystem path: for callers, the judge, chains, the trace.
    package_files = {(p.name, p.version): {f.path: f.fspath for f in p.files} for p in packages}
    if files_out is not None:
        files_out.update(package_files)
    archs = list(dict.fromkeys(t.arch for t in resolved_targets))
    verdicts: list[Verdict] = []
    if judge and resolved_targets:
        from liftgate.judge.verdict import judge_report

        verdicts = judge_report(  # it starts the phase with its count of gates to judge
            all_gates,
            archs,
            [(name, version, files) for (name, version), files in package_files.items()],
            _read_text_lenient,
            only=judge if callable(judge) else None,
            observer=observer,
        )
        observer.finish()
    found_chains: list[Chain] = []
    if chains and resolved_targets:
        from liftgate.chain import chains_for_report, judge_members, listed_chains

        observer.start("following gate chains", total=None)
        every = chains_for_report(all_gates, archs, package_files, _read_text_lenient)
        if judge:
            verdicts += judge_members(every, all_gates, archs, package_files, _read_text_lenient, verdicts)
        index = {(v.gate_id, v.target): v for v in verdicts}
        found_chains = listed_chains(every, {g.id: g for g in all_gates}, archs, index)
        observer.finish()
    trace_summary = None
    if trace is not None:
        from liftgate.trace.match import match_trace

        trace_summary = match_trace(trace, all_gates, package_files)
    return Report(
        targets=resolved_targets,
        packages=tuple(summaries),
        gates=tuple(all_gates),
        skips=tuple(all_skips),
        files_scanned=files_scanned,
        elapsed_s=time.perf_counter() - started,
        cuda_version=cuda_version,
        notes=tuple(notes),
        verdicts=tuple(verdicts),
        trace=trace_summary,
        chains=tuple(found_chains),
    )


def _overlaid(pkg: Package, overlay: Mapping[tuple[str, str], str]) -> Package:
    files = []
    for f in pkg.files:
        replacement = overlay.get((pkg.name, f.path))
        if replacement is None:
            files.append(f)
        else:
            st = os.stat(replacement)
            files.append(replace(f, fspath=replacement, size=st.st_size, mtime_ns=st.st_mtime_ns))
    return replace(pkg, files=tuple(files))


@cache
def _code_fingerprint() -> str:
    """Results depend on the detector's code and the arch data, not only on the version number:
    hash them, so an upgrade or a local edit never serves stale gates from the cache."""
    root = Path(__file__).parent
    h = hashlib.sha256(f"{__version__}\x1f{CACHE_FORMAT}".encode())
    for path in sorted(
        [
            root / "scanner.py",
            root / "model.py",
            *root.glob("detect/*.py"),
            *root.glob("arch/*.py"),
            *root.glob("data/*.json"),
        ]
    ):
        with contextlib.suppress(OSError):
            h.update(path.name.encode() + b"\x1f" + path.read_bytes())
    return h.hexdigest()


def _index_files(
    todo: list[tuple[str, str]], package: str, max_file_size: int, pool: _Pool, observer: Observer
) -> list[IndexResult]:
    if not todo:
        return []
    observer.start(f"indexing {package}", total=len(todo))
    if len(todo) < _POOL_THRESHOLD or pool.jobs == 1:
        results = _index_chunk(todo, max_file_size, package)
        observer.advance(len(todo))
    else:
        results = []
        futures = [
            pool.get().submit(_index_chunk, chunk, max_file_size, package)  # type: ignore[arg-type]
            for chunk in _chunks(todo, pool.jobs * 8, 32)
        ]
        for fut in futures:
            part = fut.result()
            results.extend(part)
            observer.advance(len(part))
    observer.finish()
    return results


def _update_details(scan_cache: ScanCache, key: str, index: dict[str, IndexResult]) -> None:
    details = scan_cache.load_details(key)
    details.update((r.digest, _details_row(r.index)) for r in index.values() if isinstance(r, IndexedFile))
    scan_cache.store_details(key, details)


def _scan_package(
    pkg: Package,
    cfiles: list[SourceFile],
    cuda_version: tuple[int, int],
    max_file_size: int,
    scan_cache: ScanCache,
    pool: _Pool,
    observer: Observer,
) -> tuple[list[Gate], list[Skip]]:
    key = _package_key(pkg)
    stats = {f.path: f for f in cfiles}
    cached_stats = scan_cache.load_stats(key)
    stamp = time.time_ns()  # before any file is read
    tags: dict[str, str] = {}
    stamps: dict[str, int] = {}
    todo: list[tuple[str, str]] = []
    for f in cfiles:
        entry = cached_stats.get(f.path)
        hit = stat_hit(entry, f.size, f.mtime_ns)
        if hit is not None and entry is not None:
            tags[f.path] = hit
            stamps[f.path] = entry[3]
        else:
            todo.append((f.path, f.fspath))
    index: dict[str, IndexResult] = {
        r.path: r for r in _index_files(todo, pkg.name, max_file_size, pool, observer)
    }
    tags.update((path, _tag(r)) for path, r in index.items())
    if todo:
        scan_cache.store_stats(
            key,
            {p: (stats[p].size, stats[p].mtime_ns, tag, stamps.get(p, stamp)) for p, tag in tags.items()},
        )

    # Gates carry their package's name and version (and ids hash the name): the same files in
    # another package or release are another result.
    digest = hashlib.sha256(
        f"{_code_fingerprint()}\x1f{cuda_version}\x1f{pkg.name}\x1f{pkg.version}".encode()
    )
    for path in sorted(tags):
        digest.update(f"{path}\x1f{tags[path]}\x1e".encode())
    result_key = digest.hexdigest()[:32]
    cached = scan_cache.load_result(result_key)
    if cached is not None:
        if todo:
            _update_details(scan_cache, key, index)
        return cached

    # A miss: the quick index of every file is needed, from the details cache where it has them.
    details = scan_cache.load_details(key)
    missing: list[tuple[str, str]] = []
    for path, tag in tags.items():
        if path in index:
            continue
        if tag.startswith("skip:"):
            index[path] = Skip(path, tag[5:], pkg.name)
        elif tag in details:
            index[path] = IndexedFile(path, tag, _details_from_row(details[tag]))
        else:
            missing.append((path, stats[path].fspath))
    for r in _index_files(missing, pkg.name, max_file_size, pool, observer):
        index[r.path] = r
    if todo or missing:
        _update_details(scan_cache, key, index)

    skips = [r for r in index.values() if isinstance(r, Skip)]
    indexed = {p: r for p, r in index.items() if isinstance(r, IndexedFile)}
    relevant = relevant_macros(
        (name for r in indexed.values() for name in r.index.condition_idents),
        (entry for r in indexed.values() for entry in r.index.define_bodies),
    )
    defined_anywhere = frozenset(name for r in indexed.values() for name in r.index.defines)
    cfamily = {p: stats[p].fspath for p in indexed if _is_cfamily(p)}
    helpers, runtime_paths = _capability_helpers(
        cfamily,
        [p for p, r in indexed.items() if r.index.has_capability and p in cfamily],
        cuda_version,
        observer,
        pkg.name,
    )
    job = _PackageJob(
        pkg.name, pkg.version, cfamily, cuda_version, relevant, defined_anywhere, helpers, runtime_paths
    )
    gates: list[Gate] = []
    analyzed: set[str] = set()
    derived: set[str] = set()
    selected = sorted(p for p, r in indexed.items() if r.index.has_arch or p in runtime_paths)
    rounds = 0
    while selected:
        rounds += 1
        observer.start(
            f"analysing {pkg.name}" + (f" (round {rounds})" if rounds > 1 else ""), total=len(selected)
        )
        new_derived: set[str] = set()
        if len(selected) < _POOL_THRESHOLD or pool.jobs == 1:
            g, s, d = _analyze_chunk(job, selected)
            gates.extend(g)
            skips.extend(s)
            new_derived |= d
            observer.advance(len(selected))
        else:
            analyses = [
                pool.get().submit(_analyze_chunk, job, chunk)  # type: ignore[arg-type]
                for chunk in _chunks(selected, pool.jobs * 4, 8)
            ]
            for analysis in analyses:
                g, s, d = analysis.result()
                gates.extend(g)
                skips.extend(s)
                new_derived |= d
                observer.advance(1)
        observer.finish()
        analyzed.update(selected)
        new_derived -= derived
        derived |= new_derived
        selected = sorted(
            p
            for p, r in indexed.items()
            if p not in analyzed and not r.index.condition_idents.isdisjoint(new_derived)
        )
    gates.sort(key=lambda g: (g.location.path, g.location.span.start))
    scan_cache.store_result(result_key, gates, skips)
    return gates, skips


def _capability_helpers(
    fspaths: dict[str, str],
    candidates: list[str],
    cuda_version: tuple[int, int],
    observer: Observer,
    package: str,
) -> tuple[HelperIndex | None, frozenset[str]]:
    """The package's capability helpers (``get_sm_version_num()``, a ``sm_`` member …) and the files
    whose host code is worth walking: those that query the capability or use such a helper.

    Helpers are found to a fixed point: files that mention a helper found so far are read too
    (a byte search), so a helper defined in one header and used across the tree resolves.
    """
    if not candidates:
        return None, frozenset()
    observer.start(f"finding capability helpers in {package}", total=None)
    index = HelperIndex()
    read: set[str] = set()
    todo = list(candidates)
    searched: set[bytes] = set()
    for _ in range(4):
        for path in todo:
            text = _read_text_lenient(fspaths[path])
            read.add(path)
            if text is not None:
                with contextlib.suppress(Exception):  # a file the reader cannot follow adds no helper
                    index.add_source(path, text, host_regions(path, text, cuda_version))
        with contextlib.suppress(Exception):
            index.resolve()
        new_needles = {n for n in index.needles() if len(n) >= 4} - searched
        if not new_needles:
            break
        searched |= new_needles
        needles = sorted(new_needles)
        todo = []
        for path, fspath in fspaths.items():
            if path in read:
                continue
            try:
                with open(fspath, "rb") as fh:
                    data = fh.read(DEFAULT_MAX_FILE_SIZE + 1)
            except OSError:
                continue
            if any(n in data for n in needles):
                todo.append(path)
        if not todo:
            break
    observer.finish()
    return index.export(), frozenset(read)


_BUILD_FLAG_MACRO = re.compile(r"-D\s*([A-Za-z_]\w*)")
_CPP_FLAG_DEPENDENCY = re.compile(r"^inside #if .*?\(line \d+\): (.+?) set by the build")


def _link_build_flags(gates: list[Gate], build_files: list[SourceFile]) -> list[Gate]:
    """Link host gates compiled only under a build flag to the CMake gates that pass the flag.

    vLLM's ``if (version_num >= 100 && version_num < 120)`` sits inside ``#if defined
    ENABLE_SCALED_MM_SM100``; CMake appends ``-DENABLE_SCALED_MM_SM100=1`` only inside the block
    of a ``cuda_archs_loose_intersection`` gate. The host gate then lists that CMake gate as an
    enclosing gate, with the flag's line as evidence.
    """
    wanted: dict[tuple[str, str], list[int]] = {}
    for k, g in enumerate(gates):
        if g.kind is GateKind.CPP_RUNTIME:
            for dep in g.depends_on:
                m = _CPP_FLAG_DEPENDENCY.match(dep)
                if m:
                    for macro in m.group(1).split(", "):
                        wanted.setdefault((g.location.package, macro), []).append(k)
    if not wanted:
        return gates
    cmake_gates = [g for g in gates if g.kind is GateKind.CMAKE and g.then_span is not None]
    files = {(f.package, f.path): f.fspath for f in build_files}
    lines_of: dict[tuple[str, str], list[str]] = {}
    setters: dict[tuple[str, str], list[tuple[Gate, int]]] = {}
    for cg in cmake_gates:
        key = (cg.location.package, cg.location.path)
        if key not in lines_of:
            text = _read_text_lenient(files[key]) if key in files else None
            lines_of[key] = text.splitlines() if text else []
        span = cg.then_span
        assert span is not None
        for number in range(span.start, min(span.end, len(lines_of[key])) + 1):
            for macro in _BUILD_FLAG_MACRO.findall(lines_of[key][number - 1]):
                if (cg.location.package, macro) in wanted:
                    setters.setdefault((cg.location.package, macro), []).append((cg, number))
    if not setters:
        return gates
    out = list(gates)
    for key, indexes in wanted.items():
        found = setters.get(key)
        if not found:
            continue
        for k in indexes:
            g = out[k]
            evidence = [
                Evidence(
                    f"{key[1]} is passed by the build (-D{key[1]}) only where CMake gate {cg.id} "
                    f"admits the target: {cg.condition}",
                    cg.location.path,
                    line,
                )
                for cg, line in found
            ]
            enclosing = tuple(dict.fromkeys([*(cg.id for cg, _ in found), *g.enclosing]))
            out[k] = replace(g, evidence=tuple(dict.fromkeys([*g.evidence, *evidence])), enclosing=enclosing)
    return out


# -- Python and CMake -----------------------------------------------------------------------


def _scan_python_and_cmake(
    files: list[SourceFile],
    max_file_size: int,
    scan_cache: ScanCache,
    observer: Observer,
    cuda_version: tuple[int, int],
) -> tuple[list[Gate], list[Skip]]:
    """py-runtime, py-build and cmake gates of every package together.

    Python is analysed across packages at once, so a predicate defined in one package and used in
    another resolves exactly. The result is cached under a key made of every file's content
    digest (each digest cached by the file's stat), so the same releases installed elsewhere, or
    the files a lift's plan re-detected, are found again. CMake conditions on the toolkit version
    are evaluated for ``cuda_version``, part of the key.
    """
    if not files:
        return [], []
    contents = _content_digests(files, scan_cache)
    digest = hashlib.sha256(
        f"python+cmake\x1f{_code_fingerprint()}\x1f{max_file_size}\x1f{cuda_version}".encode()
    )
    for f in sorted(files, key=lambda f: (f.package, f.path)):
        digest.update(f"{f.package}\x1f{f.version}\x1f{f.path}\x1f{contents[f.fspath]}\x1e".encode())
    key = "py-" + digest.hexdigest()[:32]
    cached = scan_cache.load_result(key)
    if cached is not None:
        return cached

    gates: list[Gate] = []
    skips: list[Skip] = []
    cmake_files = [f for f in files if is_cmake_file(f.path)]
    python_files = [f for f in files if f.path.endswith(".py")]
    observer.start("analysing CMake files", total=len(cmake_files))
    for f in cmake_files:
        text = _read_text_lenient(f.fspath)
        if text is None:
            skips.append(Skip(f.path, "unreadable, binary or too large", f.package))
        else:
            try:
                detection = detect_cmake(f.package, f.version, f.path, text, cuda_version)
            except Exception as exc:  # the last resort (detect_cmake has its own net)
                skips.append(
                    Skip(f.path, f"not analysed ({_failure(exc)}); gates in it are not reported", f.package)
                )
            else:
                gates.extend(detection.gates)
                skips.extend(detection.skips)
        observer.advance(1)
    observer.finish()

    observer.start("analysing Python", total=None)
    # Hundreds of syntax trees stay alive for the whole phase; the cyclic collector would rescan
    # them on every allocation burst (it tripled the time of this phase). There are no cycles to find.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        gates.extend(_analyze_python(python_files, max_file_size, skips))
    finally:
        if gc_was_enabled:
            gc.enable()
    observer.finish()
    gates.sort(key=lambda g: (g.location.package.lower(), g.location.path, g.location.span.start))
    scan_cache.store_result(key, gates, skips)
    return gates, skips


def _scan_binaries(packages: Sequence[Package]) -> tuple[list[Gate], list[Skip], int]:
    """``binary`` gates: each shared object, cubin or fatbin with CUDA kernels, and the archs they run on.

    Only ELF section tables and fatbin entry headers are read (`liftgate.detect.binary`), so this
    needs no cache: a 2 GB library costs kilobytes of I/O.
    """
    from liftgate.detect.binary import (
        admitted_archs,
        kernel_files,
        summarize,
    )

    gates: list[Gate] = []
    skips: list[Skip] = []
    seen = 0
    for pkg in packages:
        for f, images, problem in kernel_files(pkg.files):
            seen += 1
            if problem:
                skips.append(Skip(f.path, problem, pkg.name))
                continue
            if not images:
                continue
            native, jit = admitted_archs(images)
            evidence = [Evidence(f"contains {summarize(images)}", f.path, None)]
            if jit:
                evidence.append(
                    Evidence(
                        f"runs through the driver's PTX JIT on {jit.render()}: compiled at first start, "
                        "and #if __CUDA_ARCH__ inside saw the PTX's arch, not the GPU's"
                    )
                )
            compressed = sum(1 for i in images if i.compressed)
            if compressed:
                evidence.append(Evidence(f"{compressed} of {len(images)} entries compressed"))
            gates.append(
                Gate(
                    id=gate_id(GateKind.BINARY, pkg.name, f.path, "kernel images", (), 0),
                    kind=GateKind.BINARY,
                    location=Location(pkg.name, pkg.version, f.path, Span(1, 1)),
                    condition=summarize(images),
                    admitted=native | jit,
                    unknown=ArchSet.none(),
                    host=None,
                    then_span=None,
                    else_span=None,
                    else_kind=ElseKind.ERROR,
                    evidence=tuple(evidence),
                    directive="fatbin",
                )
            )
    return gates, skips, seen


def _content_digests(files: list[SourceFile], scan_cache: ScanCache) -> dict[str, str]:
    """fspath -> a digest of the file's bytes, read only for files whose stat the cache has not seen."""
    groups: dict[tuple[str, str | None, str], list[SourceFile]] = {}
    for f in files:
        root = f.fspath[: len(f.fspath) - len(f.path)] if f.fspath.endswith(f.path) else ""
        groups.setdefault((f.package, f.version, root), []).append(f)
    out: dict[str, str] = {}
    for (package, version, root), members in groups.items():
        key = "py-" + hashlib.sha256(f"{package}\x1f{version}\x1f{root}".encode()).hexdigest()[:24]
        stats = scan_cache.load_stats(key) if root else {}
        changed = False
        stamp = time.time_ns()  # before any file is read
        for f in members:
            hit = stat_hit(stats.get(f.path), f.size, f.mtime_ns)
            if hit is not None:
                out[f.fspath] = hit
                continue
            try:
                with open(f.fspath, "rb") as fh:
                    value = hashlib.blake2b(fh.read(), digest_size=16).hexdigest()
            except OSError as exc:
                value = f"unreadable:{exc.errno}"
            out[f.fspath] = value
            stats[f.path] = (f.size, f.mtime_ns, value, stamp)
            changed = True
        if changed and root:
            scan_cache.store_stats(key, stats)
    return out


def _analyze_python(python_files: list[SourceFile], max_file_size: int, skips: list[Skip]) -> list[Gate]:
    from liftgate.detect.pybuild import PY_BUILD_PREFILTER, detect_py_build
    from liftgate.detect.python import PythonAnalyzer, source_from_file

    gates: list[Gate] = []
    analyzer = PythonAnalyzer(
        (source_from_file(f.package, f.version, f.path, f.fspath) for f in python_files),
        max_file_size=min(max_file_size, DEFAULT_MAX_PY_FILE_SIZE),
    )
    try:
        gates.extend(analyzer.analyze())
    except Exception as exc:  # the last resort: the analyzer catches per module itself
        skips.append(
            Skip(
                f"{len(python_files)} Python files",
                f"py-runtime analysis failed ({_failure(exc)}); py-runtime gates are not reported",
            )
        )
    for module_name in analyzer.build_candidates(PY_BUILD_PREFILTER):
        try:
            module = analyzer.module_for_build(module_name)
            if module is None:
                continue
            detection = detect_py_build(module.package, module.version, module.path, module.text, module.tree)
        except Exception as exc:  # the last resort (detect_py_build has its own net)
            src = analyzer.source(module_name)
            skips.append(Skip(src.path, f"py-build not analysed ({_failure(exc)})", src.package))
            continue
        gates.extend(detection.gates)
        skips.extend(detection.skips)
    skips.extend(analyzer.skips)
    return gates
