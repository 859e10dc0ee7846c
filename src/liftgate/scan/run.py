"""The runner: sources → workspace → every registered detector → links → a sorted `Report`.

`scan` resolves what the user named into packages (`liftgate.sources`), makes the `Workspace`
later stages read files through, and calls each detector of `liftgate.detect.registry` with the
files it wants: per package, per file or all at once, as the detector's scope says. Every call
is wrapped in the one safety net (an exception becomes a `Skip` naming the file and the failure,
`liftgate.detect.interface.not_analysed`). A detector that does not cache its own work is cached
here, under the digests of the files it wanted and of the facts earlier detectors published for it
(`Detection.ops`, handed on as `Batch.ops`: the C-family detector's torch ops, which the Python
detector resolves ``torch.ops.…`` calls with). Judging, chains and traces are separate library
calls on the result (`liftgate.judge.judge_scan`, `liftgate.chain.find_chains`,
`liftgate.trace.match.map_trace`).
"""

from __future__ import annotations

import gc
import hashlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from typing import Any

from liftgate.arch.core import Arch
from liftgate.detect.interface import Batch, Detection, Detector, Scope, Settings, not_analysed
from liftgate.model import Gate, PackageSummary, Report, Skip, Target, TorchOp
from liftgate.scan.cache import ScanCache, code_fingerprint, content_digests, forget_stats, ops_digest
from liftgate.scan.pool import Pool, default_jobs
from liftgate.scan.toolkit import local_cuda_version
from liftgate.sources.interface import DEFAULT_MAX_FILE_SIZE, NullObserver, Observer, Package, SourceFile
from liftgate.sources.workspace import Workspace

Overlay = Mapping[tuple[str, str], str]
# Below this many files, a detector that `runs_ahead` is run in order: a process costs more than it saves.
RUN_AHEAD_THRESHOLD = 64


def resolve_targets(targets: Iterable[str | Arch | Target]) -> tuple[Target, ...]:
    """Targets as the user spelled them (``rtx5090``, ``sm_120a``, ``12.0``) with the arch each resolves to."""
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
    only_packages: Iterable[str] | None = None,
    overlay: Overlay | None = None,
    only_python: bool = False,
    judge_ahead: bool = False,
) -> Report:
    """Scan sources for architecture gates and evaluate them for ``targets``.

    ``sources`` are paths (directories, wheels, sdists), ``name==version`` specs fetched from the
    package index, or ``env:PATH``; empty means the current environment (or ``env``).
    ``only_packages`` keeps just the named distributions; ``overlay`` reads some files from
    elsewhere (``(package, path) -> filesystem path``): how `liftgate.lift` re-detects a plan's
    edits before it changes anything. ``only_python`` runs the Python detector alone (py-runtime
    and py-build gates): what ``liftgate trace`` needs for its probes. The result's ``workspace``
    reads the packages' files for the stages after it. ``judge_ahead``: the caller will judge the
    report (`liftgate.judge.judge_scan`), so the CUDA gates are judged while the Python detector
    still runs in a process of its own (`liftgate.judge.verdict.JudgeAhead`); the verdicts are the
    same either way.
    """
    from liftgate.detect.registry import DETECTORS, LINKS
    from liftgate.sources import resolve_sources
    from liftgate.sources.cache import cache_root

    started = time.perf_counter()
    forget_stats()
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
    packages, source_skips = resolve_sources(
        specs, env=env, cache_dir=str(cache_root_dir), observer=observer, offline=offline, sdist=sdist
    )
    if only_packages is not None:
        wanted = {n.lower() for n in only_packages}
        packages = [p for p in packages if p.name.lower() in wanted]
    if overlay:
        packages = [_overlaid(p, overlay) for p in packages]
    workspace = Workspace(tuple(packages))
    settings = Settings(cuda_version, max_file_size)
    detectors = [d for d in DETECTORS if d.name == "python"] if only_python else list(DETECTORS)
    runner = Runner(
        workspace, settings, ScanCache(cache_root_dir if use_cache else None), observer,
        Pool(jobs or default_jobs()),
    )  # fmt: skip
    gates: list[Gate] = []
    skips: list[Skip] = list(source_skips)
    examined: set[tuple[int, str]] = set()  # (package's index, path): each file any detector wanted, once
    ahead_judge: Any = None
    try:  # whatever ends the scan early stops the judging it started
        try:
            if runner.pool.jobs > 1:
                runner.run_ahead(detectors, packages)
            for detector in detectors:
                found = runner.run(detector, packages, examined)
                gates.extend(found.gates)
                skips.extend(found.skips)
                runner.published.extend(found.ops)
                if judge_ahead and ahead_judge is None and resolved_targets and runner.ahead and found.gates:
                    ahead_judge = runner.judge_ahead(gates, resolved_targets)
        finally:
            runner.close()
        if not only_python:
            for link in LINKS:
                gates = link(gates)
        gates.sort(key=lambda g: (g.location.package.lower(), g.location.path, g.location.span.start))
        skips.sort(key=lambda s: ((s.package or "").lower(), s.path))
        return Report(
            targets=resolved_targets,
            packages=tuple(PackageSummary(p.name, p.version, p.origin, len(p.files)) for p in packages),
            gates=tuple(gates),
            skips=tuple(skips),
            files_scanned=len(examined),
            elapsed_s=time.perf_counter() - started,
            cuda_version=cuda_version,
            notes=tuple(notes),
            workspace=workspace,
            cache_root=str(cache_root_dir) if use_cache else None,
            judge_ahead=ahead_judge,
        )
    except BaseException:
        if ahead_judge is not None:
            ahead_judge.cancel()
        raise


class Runner:
    """Calls detectors with the files they want, inside the one safety net, with the cache."""

    def __init__(
        self, workspace: Workspace, settings: Settings, cache: ScanCache, observer: Observer, pool: Pool
    ) -> None:
        self.workspace = workspace
        self.settings = settings
        self.cache = cache
        self.observer = observer
        self.pool = pool
        self.published: list[TorchOp] = []  # facts earlier detectors published for later ones
        self.ahead: dict[str, _RunAhead] = {}  # detector name -> its detection, under way in a process

    def close(self) -> None:
        for ahead in self.ahead.values():
            ahead.cancel()
        self.ahead.clear()
        self.pool.close()
        from liftgate.detect.registry import reset_workers

        reset_workers()  # the in-process detectors may hold whole packages' lexed headers

    def judge_ahead(self, gates: Sequence[Gate], targets: Sequence[Target]) -> Any:
        """Start judging the CUDA gates found so far (`liftgate.judge.verdict.JudgeAhead`), while a
        detector runs ahead in its process: in this scan's worker processes' place, whose detector
        has ended (only the C-family detector uses them; a later one would start them again)."""
        from liftgate.judge.verdict import JudgeAhead

        self.pool.close()
        try:
            return JudgeAhead(
                gates, list(dict.fromkeys(t.arch for t in targets)), self.workspace, self.pool.jobs
            )
        except OSError:  # no process to start (a limit on them): the judge does it all after the scan
            return None  # (`_Submitted` let go of the processes it had started)

    def run_ahead(self, detectors: Sequence[Detector], packages: Sequence[Package]) -> None:
        """Start each detector that `runs_ahead` (after the first) in a process of its own, with no
        published facts, unless the cache already holds that detection: a cold scan then runs it
        beside the detectors before it instead of after them (`_cached` takes the result only when
        they published nothing, so the report is the one a scan in order gives)."""
        for detector in detectors[1:]:
            if not (detector.runs_ahead and detector.scope is Scope.WORKSPACE and not detector.caches_itself):
                continue
            files = [f for p in packages for f in p.files if detector.wants(f.path)]
            if len(files) >= RUN_AHEAD_THRESHOLD and not self.cache.has_result(
                self._key(detector, files, ())
            ):
                self.ahead[detector.name] = _RunAhead(detector, tuple(files), self.workspace, self.settings)
        if self.ahead and self.pool.executor is None:
            # A process running ahead is busy on one core for the whole detection: the pool takes
            # the rest, not one worker per core beside it. Three processes on two cores made the
            # run-ahead detector, the longest phase, run at two thirds of a core.
            self.pool.jobs = max(1, self.pool.jobs - len(self.ahead))

    def _groups(
        self, detector: Detector, packages: Sequence[Package], examined: set[tuple[int, str]]
    ) -> list[tuple[Package | None, list[SourceFile]]]:
        wanted = [[f for f in p.files if detector.wants(f.path)] for p in packages]
        for k, files in enumerate(wanted):
            examined.update((k, f.path) for f in files)
        return (
            [(None, [f for files in wanted for f in files])]
            if detector.scope is Scope.WORKSPACE
            else list(zip(packages, wanted, strict=True))
        )

    def run(
        self, detector: Detector, packages: Sequence[Package], examined: set[tuple[int, str]]
    ) -> Detection:
        gates: list[Gate] = []
        skips: list[Skip] = []
        ops: list[TorchOp] = []
        groups = self._groups(detector, packages, examined)
        for package, files in groups:
            if not files:
                continue
            found = self._cached(detector, package, files)
            gates.extend(found.gates)
            skips.extend(found.skips)
            ops.extend(found.ops)
        return Detection(tuple(gates), tuple(skips), tuple(ops))

    def _key(self, detector: Detector, files: Sequence[SourceFile], published: Sequence[TorchOp]) -> str:
        contents = content_digests(files, self.cache)
        digest = hashlib.sha256(
            f"{detector.name}\x1f{code_fingerprint()}\x1f{self.settings.max_file_size}\x1f"
            f"{self.settings.cuda_version}".encode()
        )
        for f in sorted(files, key=lambda f: (f.package, f.path)):
            digest.update(f"{f.package}\x1f{f.version}\x1f{f.path}\x1f{contents[f.fspath]}\x1e".encode())
        digest.update(ops_digest(published).encode())  # what earlier detectors told this one
        return f"{detector.name}-{digest.hexdigest()[:32]}"

    def _cached(self, detector: Detector, package: Package | None, files: list[SourceFile]) -> Detection:
        if detector.caches_itself:
            return self._call(detector, package, files)[0]
        key = self._key(detector, files, self.published)
        ahead = self.ahead.pop(detector.name, None)
        cached = self.cache.load_result(key)
        if cached is not None:
            if ahead is not None:
                ahead.cancel()
            return Detection(tuple(cached[0]), tuple(cached[1]), tuple(cached[2]))
        found: Detection | None = None
        failed = False
        if ahead is not None:
            if self.published:  # it assumed no published facts, and there are some: not its result
                ahead.cancel()
            else:
                self.observer.start(detector.phase, total=None)
                try:
                    found = ahead.result()  # None when it failed: run here, inside the safety net
                finally:
                    self.observer.finish()
        if found is None:
            found, failed = self._call(detector, package, files)
        if not failed:  # a failure may pass (memory, a broken worker): it is never remembered
            self.cache.store_result(key, list(found.gates), list(found.skips), found.ops)
        return found

    def _call(
        self, detector: Detector, package: Package | None, files: list[SourceFile]
    ) -> tuple[Detection, bool]:
        """The detection, and whether the safety net caught a failure on the way."""
        if detector.scope is Scope.FILE:
            gates: list[Gate] = []
            skips: list[Skip] = []
            failed = False
            self.observer.start(detector.phase, total=len(files))
            for f in files:
                found, failure = self._guarded(detector, package, (f,))
                gates.extend(found.gates)
                skips.extend(found.skips)
                failed |= failure
                self.observer.advance(1)
            self.observer.finish()
            return Detection(tuple(gates), tuple(skips)), failed
        if detector.scope is Scope.WORKSPACE and detector.phase:
            self.observer.start(detector.phase, total=None)
            try:
                return self._guarded(detector, package, tuple(files))
            finally:
                self.observer.finish()
        return self._guarded(detector, package, tuple(files))

    def _guarded(
        self, detector: Detector, package: Package | None, files: tuple[SourceFile, ...]
    ) -> tuple[Detection, bool]:
        """The one safety net: whatever a detector raises becomes a Skip, and the scan goes on."""
        batch = Batch(
            files, self.workspace, self.settings, self.observer, package,
            self.pool.get, self.pool.jobs, self.cache, tuple(self.published),
        )  # fmt: skip
        try:
            return detector.detect(batch), False
        except Exception as exc:
            if isinstance(exc, BrokenProcessPool):
                self.pool.discard()  # the next package gets fresh workers, not the broken pool
            where = files[0].path if len(files) == 1 else f"{len(files)} files"
            owner = package.name if package is not None else (files[0].package if len(files) == 1 else None)
            skip = not_analysed(where, owner, exc, f"{detector.name} detector failed")
            return Detection(skips=(skip,)), True


def _overlaid(pkg: Package, overlay: Overlay) -> Package:
    files = []
    for f in pkg.files:
        replacement = overlay.get((pkg.name, f.path))
        if replacement is None:
            files.append(f)
        else:
            st = os.stat(replacement)
            files.append(replace(f, fspath=replacement, size=st.st_size, mtime_ns=st.st_mtime_ns))
    return replace(pkg, files=tuple(files))


class _RunAhead:
    """A WORKSPACE-scoped detector's detection under way in a process of its own (`Runner.run_ahead`)."""

    def __init__(
        self, detector: Detector, files: tuple[SourceFile, ...], workspace: Workspace, settings: Settings
    ) -> None:
        import multiprocessing

        context = multiprocessing.get_context()
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_detect_ahead, args=(detector.name, files, workspace, settings, send), daemon=True
        )
        self._process.start()
        send.close()  # the child holds the sending end: its exit ends the pipe

    def result(self) -> Detection | None:
        """The detection, or None when the detector raised or the process died."""
        try:
            found = self._receive.recv()
        except (EOFError, OSError):
            found = None
        self._process.join()
        self._receive.close()
        return found if isinstance(found, Detection) else None

    def cancel(self) -> None:
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._receive.close()


def _detect_ahead(
    name: str, files: tuple[SourceFile, ...], workspace: Workspace, settings: Settings, send: Any
) -> None:
    """In the run-ahead process: the detection with no published facts, or None if it raised (the
    runner then runs the detector itself, inside the one safety net, for the Skip it makes)."""
    from liftgate.detect.registry import DETECTORS

    (detector,) = (d for d in DETECTORS if d.name == name)
    detector.reset()
    # The process ends once the detection is sent: the cyclic collector is not run at all (its first
    # pass after the Python detector scanned millions of syntax-tree objects), and nothing is freed.
    gc.disable()
    try:
        found: Detection | None = detector.detect(
            Batch(
                files, workspace, settings, NullObserver(), None, None, 1, ScanCache(None), (),
                process_ends=True,
            )
        )  # fmt: skip
    except Exception:
        found = None
    send.send(found)
    send.close()
