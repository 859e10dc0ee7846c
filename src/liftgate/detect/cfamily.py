"""The C family detector: ``#if`` gates in CUDA/C++ sources and headers (cuda-pp) and the host
code's capability checks (cpp-runtime), package by package.

A package's files are indexed first (a byte-level quick index of each: does it test the arch,
which macros its conditions read, which it defines), in parallel and cached by stat; then the
files that test the arch, or read a macro derived from it, are analysed in rounds until no new
derived macro turns up. The result is cached under the digests of every indexed file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

from liftgate.detect.buildflags import ArchFlag, arch_flags
from liftgate.detect.cmake import detect_cmake, is_cmake_file
from liftgate.detect.cpp_lex import (
    BUILD_FILE_EXTENSIONS,
    COMPUTED_DEFINE,
    QuickIndex,
    build_defines,
    quick_index,
)
from liftgate.detect.cpp_ops import find_registrations, read_ops
from liftgate.detect.cpp_runtime import HelperIndex, detect_cpp_runtime
from liftgate.detect.cuda import CUDA_EXTENSIONS, PackageAnalyzer, clear_caches, host_regions, relevant_macros
from liftgate.detect.interface import Batch, Detection, DetectorCache, Scope, not_analysed
from liftgate.detect.pybuild import detect_py_build
from liftgate.detect.pybuild_passes import link_imported_flags, may_pass_flags
from liftgate.model import Gate, Skip, TorchOp
from liftgate.sources.interface import DEFAULT_MAX_FILE_SIZE, Observer, Package, SourceFile
from liftgate.sources.workspace import BINARY_SNIFF, read_text, stat_hit

# Below this many files, a process pool costs more than it saves.
_POOL_THRESHOLD = 64
T = TypeVar("T")


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
    if b"\x00" in data[:BINARY_SNIFF]:
        return Skip(path, "binary content in a source file", package)
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    try:
        if not _is_cfamily(path):  # a build file: only the macros it passes to the compiler matter
            return IndexedFile(path, digest, QuickIndex(False, frozenset(), build_defines(data), (), ()))
        return IndexedFile(path, digest, quick_index(data))
    except Exception as exc:  # the last resort: one odd file must never stop a scan
        return not_analysed(path, package, exc, "cannot index it")


def _index_chunk(chunk: list[tuple[str, str]], max_size: int, package: str) -> list[IndexResult]:
    return [_index_one(path, fspath, max_size, package) for path, fspath in chunk]


# -- full analysis (runs in workers) ---------------------------------------------------------

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
    flags: tuple[ArchFlag, ...] = ()  # -D flags the build passes only for some targets


def _analyzer(job: _PackageJob) -> PackageAnalyzer:
    key = (job.name, job.version)
    analyzer = _ANALYZERS.get(key)
    if analyzer is None:
        fspaths = job.fspaths
        analyzer = PackageAnalyzer(
            job.name,
            job.version,
            lambda p: read_text(fspaths[p]) if p in fspaths else None,
            fspaths.keys(),
            job.cuda_version,
            job.relevant,
            job.defined_anywhere,
            job.flags,
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
            skips.append(not_analysed(path, job.name, exc))
            continue
        gates.extend(result.gates)
        skips.extend(result.skips)
        derived |= result.derived
        if job.helpers is not None and path in job.runtime_paths:
            try:
                runtime = detect_cpp_runtime(job.name, job.version, path, text, result.regions, job.helpers)
            except Exception as exc:
                # C++ that the host-code reader cannot follow: the file's other gates stand.
                skips.append(not_analysed(path, job.name, exc, "host code not analysed", ""))
                continue
            gates.extend(runtime.gates)
            skips.extend(runtime.skips)
    return gates, skips, derived


def _tag(r: IndexResult) -> str:
    return f"skip:{r.reason}" if isinstance(r, Skip) else r.digest


def _details_row(q: QuickIndex) -> tuple[object, ...]:
    return (q.has_arch, q.condition_idents, q.defines, q.includes, q.define_bodies, q.has_capability)


def _details_from_row(row: tuple[object, ...]) -> QuickIndex:
    has_arch, idents, defines, includes, bodies, has_capability = row
    return QuickIndex(has_arch, idents, defines, includes, bodies, has_capability)  # type: ignore[arg-type]


def _index_files(
    todo: list[tuple[str, str]], package: str, max_file_size: int, pool: _Jobs, observer: Observer
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
            pool.get().submit(_index_chunk, chunk, max_file_size, package)
            for chunk in _chunks(todo, pool.jobs * 8, 32)
        ]
        for fut in futures:
            part = fut.result()
            results.extend(part)
            observer.advance(len(part))
    observer.finish()
    return results


def _update_details(scan_cache: DetectorCache, key: str, index: dict[str, IndexResult]) -> None:
    details = scan_cache.load_details(key)
    details.update((r.digest, _details_row(r.index)) for r in index.values() if isinstance(r, IndexedFile))
    scan_cache.store_details(key, details)


def _scan_package(
    pkg: Package,
    cfiles: list[SourceFile],
    cuda_version: tuple[int, int],
    max_file_size: int,
    scan_cache: DetectorCache,
    pool: _Jobs,
    observer: Observer,
) -> tuple[list[Gate], list[Skip], list[TorchOp]]:
    key = _package_key(pkg, max_file_size)
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
        f"{scan_cache.fingerprint}\x1f{cuda_version}\x1f{pkg.name}\x1f{pkg.version}".encode()
    )
    for path in sorted(tags):
        digest.update(f"{path}\x1f{tags[path]}\x1e".encode())
    result_key = digest.hexdigest()[:32]
    cached = scan_cache.load_result(result_key)
    if cached is not None:
        if todo:
            _update_details(scan_cache, key, index)
        return cached[0], cached[1], cached[2]

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
    flags = _arch_flags(pkg, indexed, stats, cuda_version)
    helpers, runtime_paths = _capability_helpers(
        cfamily,
        [p for p, r in indexed.items() if r.index.has_capability and p in cfamily],
        cuda_version,
        observer,
        pkg.name,
        flags,
    )
    flag_names = frozenset(f.macro for f in flags)
    job = _PackageJob(
        pkg.name,
        pkg.version,
        cfamily,
        cuda_version,
        relevant,
        defined_anywhere,
        helpers,
        runtime_paths,
        flags,
    )
    gates: list[Gate] = []
    analyzed: set[str] = set()
    derived: set[str] = set()
    selected = sorted(
        p
        for p, r in indexed.items()
        if r.index.has_arch
        or p in runtime_paths
        or (p in cfamily and not r.index.condition_idents.isdisjoint(flag_names))
    )
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
                pool.get().submit(_analyze_chunk, job, chunk) for chunk in _chunks(selected, pool.jobs * 4, 8)
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
    failed = False
    try:
        ops = _torch_ops(pkg, cfamily, cuda_version, flags, helpers, observer)
    except Exception as exc:  # the op reader is bounded; what is caught here is a bug, and costs only the ops
        ops = ()
        skips.append(
            not_analysed(
                "torch op registrations", pkg.name, exc, "torch ops not read",
                "Python calls into this package's C++ learn nothing from it",
            )
        )  # fmt: skip
        failed = True
    if not failed:  # a failure is never remembered
        scan_cache.store_result(result_key, gates, skips, ops)
    return gates, skips, list(ops)


_OP_SOURCES = (".cu", ".cpp", ".cc", ".cxx")  # where ops are registered and their functions defined


def _torch_ops(
    pkg: Package,
    cfamily: dict[str, str],
    cuda_version: tuple[int, int],
    flags: tuple[ArchFlag, ...],
    helpers: HelperIndex | None,
    observer: Observer,
) -> tuple[TorchOp, ...]:
    """The package's query ops (`liftgate.detect.cpp_ops`), published for the Python detector."""
    sources = sorted(p for p in cfamily if posixpath.splitext(p)[1].lower() in _OP_SOURCES)
    texts: dict[str, str] = {}
    for path in sources:  # one file in memory at a time: a package may have thousands
        data = _read_source(cfamily[path])
        if (
            data is not None
            and b".impl(" in data
            and b".def(" in data
            and (text := _decode(data)) is not None
        ):
            texts[path] = text
    if not texts:
        return ()
    observer.start(f"reading the torch ops of {pkg.name}", total=None)
    try:
        names = {r.function.encode() for r in find_registrations(texts)}
        if names:
            for path in sources:
                if path in texts:
                    continue
                data = _read_source(cfamily[path])
                if data is not None and any(n in data for n in names) and (text := _decode(data)) is not None:
                    texts[path] = text
        return read_ops(pkg.name, pkg.version, texts, cuda_version, flags, helpers)
    finally:
        observer.finish()


def _read_source(fspath: str) -> bytes | None:
    try:
        with open(fspath, "rb") as fh:
            return fh.read(DEFAULT_MAX_FILE_SIZE + 1)
    except OSError:
        return None


def _decode(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _arch_flags(
    pkg: Package, indexed: dict[str, IndexedFile], stats: dict[str, SourceFile], cuda_version: tuple[int, int]
) -> tuple[ArchFlag, ...]:
    """The ``-D`` flags the package's build passes only for some targets (see
    `liftgate.detect.buildflags.arch_flags`): read from the CMake gates, and the py-build gates
    (JIT filters, arch flag lists), of the build files that pass any."""
    build = {p: r for p, r in indexed.items() if not _is_cfamily(p) and r.index.defines}
    gate_paths = sorted(p for p in build if is_cmake_file(p) or p.endswith(".py"))
    if not gate_paths:
        return ()
    build_gates: dict[str, tuple[Gate, ...]] = {}
    texts: dict[str, str] = {}
    for path in gate_paths:
        text = read_text(stats[path].fspath)
        if text is None:
            continue
        texts[path] = text
        with contextlib.suppress(Exception):  # the build detectors report their own problems
            if is_cmake_file(path):
                build_gates[path] = detect_cmake(pkg.name, pkg.version, path, text, cuda_version).gates
            else:
                build_gates[path] = _py_build_gates(pkg, path, text)
    build_gates = link_imported_flags(
        build_gates,
        texts,
        lambda path: read_text(stats[path].fspath) if path in stats else None,
        lambda path, text: _py_build_gates(pkg, path, text),
    )
    passed = {flag.macro for gs in build_gates.values() for g in gs for flag in g.passes}
    if not passed:
        return ()
    for path in sorted(build):
        if path not in texts and not build[path].index.defines.isdisjoint(passed):
            text = read_text(stats[path].fspath)
            if text is None:  # unreadable: what it passes is unknown, so nothing it may pass qualifies
                passed -= build[path].index.defines
                continue
            texts[path] = text
    source_defines = {n for p, r in indexed.items() if _is_cfamily(p) for n in r.index.defines}
    computed = any(COMPUTED_DEFINE in r.index.defines for p, r in build.items() if p.endswith(".py"))
    flags = arch_flags(build_gates, texts, source_defines, python_computes_names=computed)
    return tuple(f for f in flags if f.macro in passed)


def _py_build_gates(pkg: Package, path: str, text: str) -> tuple[Gate, ...]:
    """The py-build gates of a build file, as far as the flags beside them go: none for a file
    that cannot hold one with a ``-D`` beside it."""
    if not may_pass_flags(text):
        return ()
    return detect_py_build(pkg.name, pkg.version, path, text).gates  # never raises


def _capability_helpers(
    fspaths: dict[str, str],
    candidates: list[str],
    cuda_version: tuple[int, int],
    observer: Observer,
    package: str,
    flags: tuple[ArchFlag, ...] = (),
) -> tuple[HelperIndex | None, frozenset[str]]:
    """The package's capability helpers (``get_sm_version_num()``, a ``sm_`` member …) and the files
    whose host code is worth walking: those that query the capability or use such a helper.

    Helpers are found to a fixed point: files that mention a helper found so far are read too
    (a byte search), so a helper defined in one header and used across the tree resolves.
    """
    if not candidates:
        return None, frozenset()
    observer.start(f"finding capability helpers in {package}", total=None)
    index = HelperIndex(cuda_version=cuda_version)
    read: set[str] = set()
    todo = list(candidates)
    searched: set[bytes] = set()
    for _ in range(4):
        for path in todo:
            text = read_text(fspaths[path])
            read.add(path)
            if text is not None:
                with contextlib.suppress(Exception):  # a file the reader cannot follow adds no helper
                    index.add_source(path, text, host_regions(path, text, cuda_version, flags))
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
            if any(map(data.__contains__, needles)):
                todo.append(path)
        if not todo:
            break
    observer.finish()
    return index.export(), frozenset(read)


class CFamilyDetector:
    """cuda-pp and cpp-runtime gates of one package's C, C++ and CUDA files (and the build files
    whose ``-D`` flags their conditions read)."""

    name = "c-family"
    scope = Scope.PACKAGE
    phase = ""  # it reports its own phases: indexing, capability helpers, analysing (rounds)
    caches_itself = True
    runs_ahead = False

    def wants(self, path: str) -> bool:
        return _is_indexed(path)

    def detect(self, batch: Batch) -> Detection:
        assert batch.package is not None
        cache = batch.cache if batch.cache is not None else _NO_CACHE
        gates, skips, ops = _scan_package(
            batch.package,
            list(batch.files),
            batch.settings.cuda_version,
            batch.settings.max_file_size,
            cache,
            _Jobs(batch.jobs, batch.executor),
            batch.observer,
        )
        return Detection(tuple(gates), tuple(skips), tuple(ops))

    def reset(self) -> None:
        _ANALYZERS.clear()  # the in-process analysers hold whole packages' lexed headers
        clear_caches()


@dataclass
class _Jobs:
    jobs: int
    executor: Callable[[], Executor] | None

    def get(self) -> Executor:
        assert self.executor is not None
        return self.executor()


class _NoCache:
    fingerprint = "none"

    def load_stats(self, key: str) -> dict[str, tuple[int, int, str, int]]:
        return {}

    def store_stats(self, key: str, value: dict[str, tuple[int, int, str, int]]) -> None:
        pass

    def load_details(self, key: str) -> dict[str, tuple[object, ...]]:
        return {}

    def store_details(self, key: str, value: dict[str, tuple[object, ...]]) -> None:
        pass

    def load_result(self, key: str) -> tuple[list[Gate], list[Skip], list[TorchOp]] | None:
        return None

    def store_result(
        self, key: str, gates: list[Gate], skips: list[Skip], ops: Sequence[TorchOp] = ()
    ) -> None:
        pass


_NO_CACHE = _NoCache()


def _is_cfamily(path: str) -> bool:
    return posixpath.splitext(path)[1].lower() in CUDA_EXTENSIONS


def _is_indexed(path: str) -> bool:
    ext = posixpath.splitext(path)[1].lower()
    return ext in CUDA_EXTENSIONS or ext in BUILD_FILE_EXTENSIONS


def _package_key(pkg: Package, max_file_size: int) -> str:
    """The stat and details caches' key: a file's tag may be a skip for its size, so the limit is part of it."""
    h = hashlib.sha256(f"{pkg.name}\x1f{pkg.version}\x1f{pkg.origin}\x1f{max_file_size}".encode())
    return h.hexdigest()[:24]


def _chunks(items: Sequence[T], parts: int, min_size: int) -> list[list[T]]:
    size = max(min_size, -(-len(items) // max(parts, 1)))
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
