"""The scan's runner (`liftgate.scan.run`): which files each detector reads, what it caches, and the
one safety net. Each test pins a defect found in review of the spine's first version."""

from __future__ import annotations

import ast
import importlib
import shutil
from pathlib import Path
from typing import Any

import pytest

import liftgate.detect.registry as registry
from liftgate.model import GateKind
from liftgate.scan import scan
from liftgate.scan.cache import fingerprinted_files

CMAKE_FIXTURE = Path(__file__).parent / "fixtures" / "cmake" / "minibuild"
SRC = Path(__file__).parent.parent / "src" / "liftgate"
CU_GATE = "#if __CUDA_ARCH__ >= 900\n__device__ void f() {}\n#endif\n"


def test_two_packages_of_one_name_each_have_their_cmake_read(tmp_path: Path) -> None:
    """Two trees named alike (same name, no version): each CMake file is read from its own tree."""
    shutil.copytree(CMAKE_FIXTURE, tmp_path / "a" / "minibuild")
    (tmp_path / "b" / "minibuild").mkdir(parents=True)
    (tmp_path / "b" / "minibuild" / "CMakeLists.txt").write_text("project(empty)\n")
    alone = scan([str(tmp_path / "a" / "minibuild")], ["sm_120"], use_cache=False)
    both = scan(
        [str(tmp_path / "a" / "minibuild"), str(tmp_path / "b" / "minibuild")], ["sm_120"], use_cache=False
    )
    cmake_alone = [g.id for g in alone.gates if g.kind is GateKind.CMAKE]
    assert cmake_alone
    assert [g.id for g in both.gates if g.kind is GateKind.CMAKE] == cmake_alone
    assert both.files_scanned == alone.files_scanned + 1  # b's CMakeLists.txt counts too
    assert not [s for s in both.skips if "unreadable" in s.reason]


def test_the_size_limit_is_part_of_the_cfamily_cache(tmp_path: Path) -> None:
    """A file skipped for its size under a small limit is read under a larger one, cache or not."""
    tree = tmp_path / "pkg"
    tree.mkdir()
    (tree / "big.cu").write_text(CU_GATE + "// padding\n" * 150_000)  # 1.6 MB
    cache = str(tmp_path / "cache")
    small = scan([str(tree)], ["sm_120"], cache_dir=cache, max_file_size=1_000_000)
    assert not [g for g in small.gates if g.kind is GateKind.CUDA_PP]
    assert any("limit" in s.reason for s in small.skips)
    large = scan([str(tree)], ["sm_120"], cache_dir=cache, max_file_size=16_000_000)
    assert [g for g in large.gates if g.kind is GateKind.CUDA_PP]


def test_a_failure_caught_by_the_safety_net_is_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(CMAKE_FIXTURE, tmp_path / "minibuild")
    cache = str(tmp_path / "cache")
    real = registry.detect_cmake

    def failing(*args: object, **kwargs: object) -> object:
        raise MemoryError("a passing shortage")

    monkeypatch.setattr(registry, "detect_cmake", failing)
    first = scan([str(tmp_path / "minibuild")], ["sm_120"], cache_dir=cache)
    assert not [g for g in first.gates if g.kind is GateKind.CMAKE]
    assert any("cmake detector failed (MemoryError: a passing shortage)" in s.reason for s in first.skips)
    monkeypatch.setattr(registry, "detect_cmake", real)
    again = scan([str(tmp_path / "minibuild")], ["sm_120"], cache_dir=cache)
    assert [g for g in again.gates if g.kind is GateKind.CMAKE]
    assert not any("detector failed" in s.reason for s in again.skips)


def _liftgate_imports(path: Path) -> set[str]:
    """The liftgate modules a file imports (at module level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("liftgate"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("liftgate"))
    return found


def test_the_cache_fingerprint_covers_every_module_detection_depends_on() -> None:
    """Every liftgate module a detector or the runner imports is hashed into the cache key, so an
    edit to any of them never serves stale gates (sources/workspace.py once was not)."""
    hashed = {p.resolve() for p in fingerprinted_files()}
    exempt = {
        "liftgate._version",  # hashed as the version string
        "liftgate.evaluate",  # Report.findings, after the scan: no detection calls it
        "liftgate.sources.cache",  # where the cache lives, not what is in it
        "liftgate.judge.verdict",  # the CUDA gates judged ahead: verdicts, with a cache of their own
    }
    todo = [*SRC.glob("detect/*.py"), *SRC.glob("scan/*.py")]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _liftgate_imports(path) - exempt:
            parts = module.split(".")[1:]
            candidate = SRC.joinpath(*parts).with_suffix(".py")
            package = SRC.joinpath(*parts, "__init__.py")
            target = candidate if candidate.exists() else package
            if not target.exists() or (target.name == "__init__.py" and module == "liftgate"):
                continue
            if target.name == "__init__.py":
                continue  # a package's __init__ re-exports; its modules are followed when imported
            assert target.resolve() in hashed, (
                f"{path.relative_to(SRC)} imports {module}, not in the fingerprint"
            )
            todo.append(target)


def test_a_broken_pool_is_replaced_and_the_package_is_a_skip(tmp_path: Path) -> None:
    """A worker that dies breaks the pool: that package is a skip naming it, and the next package
    gets a fresh pool instead of the broken one (which would fail every package after it)."""
    from concurrent.futures.process import BrokenProcessPool

    from liftgate.detect.interface import Batch, Detection, Scope, Settings
    from liftgate.scan.cache import ScanCache
    from liftgate.scan.pool import Pool
    from liftgate.scan.run import Runner
    from liftgate.sources.interface import NullObserver, Package, SourceFile
    from liftgate.sources.workspace import Workspace

    class Shut:
        def __init__(self) -> None:
            self.down = False

        def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
            self.down = True

    class Dying:
        name, scope, phase, caches_itself, runs_ahead = "dying", Scope.PACKAGE, "", True, False

        def wants(self, path: str) -> bool:
            return True

        def detect(self, batch: Batch) -> Detection:
            raise BrokenProcessPool("a worker died")

        def reset(self) -> None:
            pass

    broken = Shut()
    pool = Pool(2, broken)  # type: ignore[arg-type]
    files = tuple(SourceFile("p", "1", f"f{n}.cu", str(tmp_path / f"f{n}.cu"), 0, 0) for n in range(2))
    packages = [Package("p", "1", "test", files[:1]), Package("q", "1", "test", files[1:])]
    runner = Runner(
        Workspace(tuple(packages)), Settings((13, 0), 1 << 20), ScanCache(None), NullObserver(), pool
    )
    found = runner.run(Dying(), packages, set())
    assert broken.down and pool.executor is None
    assert [s.package for s in found.skips] == ["p", "q"]
    assert all("dying detector failed (BrokenProcessPool: a worker died)" in s.reason for s in found.skips)


RUN_AHEAD_TREES = [
    Path(__file__).parent / "fixtures" / "python" / "indirect",
    Path(__file__).parent / "fixtures" / "cuda" / "minikern",
]
OPS_TREE = Path(__file__).parent / "fixtures" / "cpp_runtime" / "opslib"


def _gate_rows(trees: list[Path], jobs: int) -> list[tuple[object, ...]]:
    from liftgate.scan.cache import gate_to_row

    report = scan(
        [str(t) for t in trees], ["sm_120", "sm_100"], cuda_version=(13, 0), jobs=jobs, use_cache=False
    )
    return [gate_to_row(g) for g in report.gates]


def _spy_run_ahead(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    run = importlib.import_module("liftgate.scan.run")

    calls = {"result": 0, "cancel": 0}
    result, cancel = run._RunAhead.result, run._RunAhead.cancel

    def counted_result(self: run._RunAhead) -> object:
        calls["result"] += 1
        return result(self)

    def counted_cancel(self: run._RunAhead) -> None:
        calls["cancel"] += 1
        cancel(self)

    monkeypatch.setattr(run, "RUN_AHEAD_THRESHOLD", 1)
    monkeypatch.setattr(run._RunAhead, "result", counted_result)
    monkeypatch.setattr(run._RunAhead, "cancel", counted_cancel)
    return calls


def test_the_python_detector_runs_ahead_and_gives_the_same_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    """With more than one job the Python detector runs beside the C-family detector, in a process
    of its own; no torch ops are published, so its detection is taken, and it is the in-order one."""
    in_order = _gate_rows(RUN_AHEAD_TREES, 1)
    calls = _spy_run_ahead(monkeypatch)
    assert _gate_rows(RUN_AHEAD_TREES, 2) == in_order
    assert calls == {"result": 1, "cancel": 0}
    assert any(row[1] == "py-runtime" for row in in_order)


def test_a_run_ahead_that_assumed_no_torch_ops_is_dropped_when_some_are_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """opslib's C++ registers a query op its Python calls with the capability: the Python detector
    must see it, so the detection made without it is thrown away and the detector runs again."""
    in_order = _gate_rows([OPS_TREE], 1)
    calls = _spy_run_ahead(monkeypatch)
    assert _gate_rows([OPS_TREE], 2) == in_order
    assert calls == {"result": 0, "cancel": 1}


@pytest.mark.parametrize(("jobs", "pool_jobs"), [(2, 1), (3, 2)])
def test_a_detector_running_ahead_takes_one_of_the_jobs(
    monkeypatch: pytest.MonkeyPatch, jobs: int, pool_jobs: int
) -> None:
    """``-j N`` means N busy processes: the run-ahead process is one, the pool has the others
    (with a worker per job beside it, two cores ran three processes and the longest phase slowed)."""
    run = importlib.import_module("liftgate.scan.run")
    _spy_run_ahead(monkeypatch)
    seen: list[tuple[str, int]] = []
    original = run.Runner.run

    def spy(self: Any, detector: Any, packages: Any, examined: Any) -> Any:
        seen.append((detector.name, self.pool.jobs))
        return original(self, detector, packages, examined)

    monkeypatch.setattr(run.Runner, "run", spy)
    _gate_rows(RUN_AHEAD_TREES, jobs)
    assert seen and all(n == pool_jobs for _, n in seen), seen


def _dies(*args: object) -> None:
    import os

    os._exit(3)


def test_a_run_ahead_process_that_dies_costs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    run = importlib.import_module("liftgate.scan.run")

    in_order = _gate_rows(RUN_AHEAD_TREES, 1)
    calls = _spy_run_ahead(monkeypatch)
    monkeypatch.setattr(run, "_detect_ahead", _dies)
    assert _gate_rows(RUN_AHEAD_TREES, 2) == in_order
    assert calls["result"] == 1


def test_a_warm_scan_reads_each_stats_file_once_and_each_result_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner, the run-ahead check and the judge all ask for the same packages' stats: read from
    disk once per process. The run-ahead check asks whether a result is stored, without loading
    it; the runner then loads it once."""
    cache_module = importlib.import_module("liftgate.scan.cache")
    from liftgate.judge.verdict import judge_scan

    monkeypatch.setattr(importlib.import_module("liftgate.scan.run"), "RUN_AHEAD_THRESHOLD", 1)
    trees = [str(t) for t in RUN_AHEAD_TREES]
    cold = judge_scan(scan(trees, ["sm_120"], cache_dir=str(tmp_path), jobs=2), jobs=1)
    assert cache_module._STATS_MEMO  # the cold scan's, kept for its judge
    loads: list[str] = []
    real = cache_module.ScanCache._load

    def counted(self: object, name: str) -> object:
        loads.append(name)
        return real(self, name)  # type: ignore[arg-type]

    monkeypatch.setattr(cache_module.ScanCache, "_load", counted)
    warm = judge_scan(scan(trees, ["sm_120"], cache_dir=str(tmp_path), jobs=2), jobs=1)
    assert warm.gates == cold.gates
    assert warm.verdicts == cold.verdicts
    # The warm scan started afresh: it read the stats files from disk, each once.
    stats = [name for name in loads if name.startswith("stats/")]
    results = [name for name in loads if name.startswith("result/")]
    assert stats and len(stats) == len(set(stats))
    assert results and len(results) == len(set(results))


def test_every_gate_comes_back_from_the_cache_as_it_was_stored() -> None:
    """The result codec (`gate_to_row`, `gate_from_row`): every field of every kind of gate of the
    fixtures, switches, dispatches, macros and build flags included, survives the round trip."""
    from liftgate.scan.cache import gate_from_row, gate_to_row

    fixtures = Path(__file__).parent / "fixtures"
    trees = sorted(p for p in fixtures.glob("*/*") if p.is_dir())
    report = scan([str(t) for t in trees], ["sm_120", "sm_90"], cuda_version=(13, 0), use_cache=False)
    kinds = {g.kind for g in report.gates}
    assert {GateKind.CUDA_PP, GateKind.PY_RUNTIME, GateKind.PY_BUILD, GateKind.CMAKE} <= kinds
    assert any(g.switches for g in report.gates) and any(g.dispatch is not None for g in report.gates)
    assert any(g.macros for g in report.gates) and any(g.passes for g in report.gates)
    for gate in report.gates:
        row = gate_to_row(gate)
        assert gate_from_row(row) == gate
        assert gate_to_row(gate_from_row(row)) == row
