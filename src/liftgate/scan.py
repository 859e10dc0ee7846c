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

import hashlib
import os
import pickle
import posixpath
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from liftgate import __version__
from liftgate.arch.core import Arch
from liftgate.detect.cpp_lex import QuickIndex, quick_index
from liftgate.detect.cuda import CUDA_EXTENSIONS, PackageAnalyzer, relevant_macros
from liftgate.model import Gate, PackageSummary, Report, Skip, Target
from liftgate.sources.interface import NullObserver, Observer, Package, SourceFile

CACHE_FORMAT = "scan-v1"
DEFAULT_MAX_FILE_SIZE = 16 * 1024 * 1024
_BINARY_SNIFF = 8192
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
    return IndexedFile(path, hashlib.blake2b(data, digest_size=16).hexdigest(), quick_index(data))


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
        result = analyzer.analyze(path, text)
        gates.extend(result.gates)
        skips.extend(result.skips)
        derived |= result.derived
    return gates, skips, derived


def _reset_worker() -> None:
    _ANALYZERS.clear()


# -- cache ------------------------------------------------------------------------------


class ScanCache:
    """Pickled index and result caches under ``<cache_dir>/scan-v1``; any damage means a miss."""

    def __init__(self, root: Path | None) -> None:
        self.root = root / CACHE_FORMAT if root else None

    def _load(self, name: str) -> object | None:
        if self.root is None:
            return None
        try:
            with open(self.root / name, "rb") as fh:
                value: object = pickle.load(fh)
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
                pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, target)
        except OSError:
            pass

    def load_index(self, key: str) -> dict[str, tuple[int, int, IndexResult]]:
        value = self._load(f"index/{key}.pkl")
        return value if isinstance(value, dict) else {}

    def store_index(self, key: str, value: dict[str, tuple[int, int, IndexResult]]) -> None:
        self._store(f"index/{key}.pkl", value)

    def load_result(self, key: str) -> tuple[list[Gate], list[Skip]] | None:
        value = self._load(f"result/{key}.pkl")
        if isinstance(value, tuple) and len(value) == 2:
            return value
        return None

    def store_result(self, key: str, gates: list[Gate], skips: list[Skip]) -> None:
        self._store(f"result/{key}.pkl", (gates, skips))


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
) -> Report:
    """Scan sources for architecture gates and evaluate them for ``targets``.

    ``sources`` are paths (directories, wheels, sdists), ``name==version`` specs fetched from the
    package index, or ``env:PATH``; empty means the current environment (or ``env``).
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
        specs, env=env, cache_dir=str(cache_root_dir), observer=observer, offline=offline
    )
    scan_cache = ScanCache(cache_root_dir if use_cache else None)
    pool = _Pool(jobs or max(1, min(os.cpu_count() or 1, 8)))
    all_gates: list[Gate] = []
    all_skips: list[Skip] = list(skips)
    summaries: list[PackageSummary] = []
    files_scanned = 0
    try:
        for pkg in packages:
            cfiles = [f for f in pkg.files if _is_cfamily(f.path)]
            summaries.append(PackageSummary(pkg.name, pkg.version, pkg.origin, len(pkg.files)))
            files_scanned += len(cfiles)
            if not cfiles:
                continue
            gates, pkg_skips = _scan_package(
                pkg, cfiles, cuda_version, max_file_size, scan_cache, pool, observer
            )
            all_gates.extend(gates)
            all_skips.extend(pkg_skips)
    finally:
        pool.close()
    all_gates.sort(key=lambda g: (g.location.package.lower(), g.location.path, g.location.span.start))
    all_skips.sort(key=lambda s: ((s.package or "").lower(), s.path))
    return Report(
        targets=resolved_targets,
        packages=tuple(summaries),
        gates=tuple(all_gates),
        skips=tuple(all_skips),
        files_scanned=files_scanned,
        elapsed_s=time.perf_counter() - started,
        cuda_version=cuda_version,
        notes=tuple(notes),
    )


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
    cached_index = scan_cache.load_index(key)
    index: dict[str, IndexResult] = {}
    todo: list[tuple[str, str]] = []
    for f in cfiles:
        hit = cached_index.get(f.path)
        if hit is not None and hit[0] == f.size and hit[1] == f.mtime_ns:
            index[f.path] = hit[2]
        else:
            todo.append((f.path, f.fspath))
    if todo:
        observer.start(f"indexing {pkg.name}", total=len(todo))
        if len(todo) < _POOL_THRESHOLD or pool.jobs == 1:
            results = _index_chunk(todo, max_file_size, pkg.name)
            observer.advance(len(todo))
        else:
            results = []
            futures = [
                pool.get().submit(_index_chunk, chunk, max_file_size, pkg.name)  # type: ignore[arg-type]
                for chunk in _chunks(todo, pool.jobs * 8, 32)
            ]
            for fut in futures:
                part = fut.result()
                results.extend(part)
                observer.advance(len(part))
        observer.finish()
        for r in results:
            index[r.path] = r
        stats = {f.path: f for f in cfiles}
        scan_cache.store_index(
            key, {p: (stats[p].size, stats[p].mtime_ns, r) for p, r in index.items() if p in stats}
        )

    digest = hashlib.sha256(f"{__version__}\x1f{CACHE_FORMAT}\x1f{cuda_version}".encode())
    for path in sorted(index):
        r = index[path]
        digest.update(
            f"{path}\x1f{r.digest if isinstance(r, IndexedFile) else 'skip:' + r.reason}\x1e".encode()
        )
    result_key = digest.hexdigest()[:32]
    cached = scan_cache.load_result(result_key)
    if cached is not None:
        return cached

    skips = [r for r in index.values() if isinstance(r, Skip)]
    indexed = {p: r for p, r in index.items() if isinstance(r, IndexedFile)}
    relevant = relevant_macros(
        (name for r in indexed.values() for name in r.index.condition_idents),
        (entry for r in indexed.values() for entry in r.index.define_bodies),
    )
    job = _PackageJob(
        pkg.name, pkg.version, {f.path: f.fspath for f in cfiles if f.path in indexed}, cuda_version, relevant
    )
    gates: list[Gate] = []
    analyzed: set[str] = set()
    derived: set[str] = set()
    selected = sorted(p for p, r in indexed.items() if r.index.has_arch)
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
