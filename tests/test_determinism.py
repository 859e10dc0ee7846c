"""The same inputs give the same report whatever ``-j`` is (issue 21): fixture trees with include
cycles, build flags, Python indirection and shipped-kernel-free packages are scanned with 1, 2 and 4
workers, files cut into chunks of one so that every worker sees a different order (the judge's
runs of gates have a fixed size, small here), and the JSON reports with their verdicts (timings
aside) are byte-identical."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.detect import cfamily
from liftgate.judge import verdict
from liftgate.judge.verdict import judge_scan
from liftgate.model import Gate, Report, Status
from liftgate.report import OutputFormat, render
from liftgate.report.interface import RenderOptions, Show
from liftgate.scan import run, scan
from test_cuda_detector import CYCLE as CUDA_CYCLE

FIXTURES = Path(__file__).parent / "fixtures"
TREES = [
    FIXTURES / "cuda" / "minikern",
    FIXTURES / "cuda" / "flagpkg",
    FIXTURES / "cuda" / "jitflagpkg",
    FIXTURES / "outcomes" / "unsafe",
    FIXTURES / "outcomes" / "polar",
    FIXTURES / "python" / "indirect",
]
T = TypeVar("T")

# Two headers that include each other, entered from different sources (test_cuda_detector's), plus
# a third source: what each header exports must not depend on which one a worker analysed first.
CYCLE = {**CUDA_CYCLE, "csrc/z_via_a.cu": '#include "../include/a.h"\n#if HAS_B\nint z;\n#endif\n'}


def _one_file_chunks(items: Sequence[T], parts: int, min_size: int) -> list[list[T]]:
    return [[item] for item in items]


def _report(trees: list[str], jobs: int, judge_ahead: bool = False) -> str:
    report = judge_scan(
        scan(
            trees, ["sm_120", "sm_90", "sm_121a"], cuda_version=(13, 0), jobs=jobs, use_cache=False,
            judge_ahead=judge_ahead,
        ),
        jobs=jobs,
    )  # fmt: skip
    doc = json.loads(render(report, OutputFormat.JSON, RenderOptions(show=Show.ALL)))
    doc.pop("elapsed_s", None)
    doc.get("summary", {}).pop("elapsed_s", None)
    return json.dumps(doc, sort_keys=True)


@pytest.mark.parametrize("jobs", [2, 4])
def test_the_report_is_the_same_whatever_the_job_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    cycle = tmp_path / "cycle"
    for path, text in CYCLE.items():
        (cycle / path).parent.mkdir(parents=True, exist_ok=True)
        (cycle / path).write_text(text)
    trees = [str(t) for t in TREES] + [str(cycle)]
    monkeypatch.setattr(cfamily, "_chunks", _one_file_chunks)
    monkeypatch.setattr(cfamily, "_POOL_THRESHOLD", 1)  # the worker pool even for a few files
    # The judge too: runs of two gates (whatever -j is), each in whichever worker is free.
    monkeypatch.setattr(verdict, "JUDGE_RUN", 2)
    monkeypatch.setattr(verdict, "POOL_THRESHOLD", 1)
    one = _report(trees, 1)
    assert '"gates": []' not in one
    assert '"verdicts": [{' in one
    assert _report(trees, jobs) == one


def _two_packages() -> Report:
    """An unjudged scan of two packages with CUDA gates, for sm_120 and sm_90, in one process."""
    return scan(
        [str(FIXTURES / "outcomes" / "unsafe"), str(FIXTURES / "cuda" / "minikern")],
        ["sm_120", "sm_90"],
        cuda_version=(13, 0),
        jobs=1,
        use_cache=False,
    )


Taken = tuple[list[verdict.Verdict], int] | None


def _takes(monkeypatch: pytest.MonkeyPatch) -> list[Taken]:
    """What each `JudgeAhead.take` call hands over, from now on: the verdicts and how many CUDA
    gates are left to the judge (None: nothing)."""
    taken: list[Taken] = []
    take = verdict.JudgeAhead.take

    def recorded(self: verdict.JudgeAhead, *args: Any) -> Taken:
        found = take(self, *args)
        taken.append(found)
        return found

    monkeypatch.setattr(verdict.JudgeAhead, "take", recorded)
    return taken


@pytest.mark.parametrize("jobs", [2, 4])
def test_cuda_gates_judged_ahead_give_the_same_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """The CUDA gates judged while the Python detector runs ahead in its process (what ``liftgate
    scan`` does when it judges): the report is the one judged after the scan, at any job count."""
    trees = [str(t) for t in TREES]
    monkeypatch.setattr(run, "RUN_AHEAD_THRESHOLD", 1)  # the Python detector in a process of its own
    monkeypatch.setattr(verdict, "JUDGE_RUN", 2)
    monkeypatch.setattr(verdict, "POOL_THRESHOLD", 1)
    taken = _takes(monkeypatch)
    one = _report(trees, 1)
    assert not taken  # one job: nothing runs ahead
    assert _report(trees, jobs, judge_ahead=True) == one
    assert taken and None not in taken  # every package's CUDA runs were judged ahead or left to the judge
    # (how many of each depends on how far the judging ahead got: see the next test for both)
    assert sum(len(found[0]) + found[1] for found in taken if found is not None) > 10


def test_cuda_runs_not_started_when_the_judge_starts_are_judged_by_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the judge starts, the CUDA runs judged ahead that no worker has started are dropped
    there and judged with the judge's own jobs: the runs it takes and those it judges make the
    verdicts a judge after the scan reaches."""
    report = _two_packages()
    monkeypatch.setattr(verdict, "JUDGE_RUN", 1)  # a run per gate: one worker starts two at a time
    monkeypatch.setattr(verdict, "POOL_THRESHOLD", 1)
    serial = judge_scan(report, jobs=1).verdicts
    archs = report.target_archs()
    workspace = report.files("the test")
    ahead = verdict.JudgeAhead(report.gates, archs, workspace, 1)
    assert ahead._submitted is not None
    runs = [future for pair in ahead._submitted._futures.values() for _, future in pair]
    assert len(runs) > 20
    runs[0].result()  # one run judged ahead; one worker has not judged them all (most are left)
    taken = _takes(monkeypatch)
    got = verdict.judge_report(report.gates, archs, workspace, jobs=2, ahead=ahead)
    assert tuple(got) == serial
    assert taken and None not in taken
    assert any(found[0] for found in taken if found is not None)  # some runs were judged ahead,
    assert any(found[1] for found in taken if found is not None)  # and some left to the judge


def test_dropped_runs_are_the_last_ones_of_each_pair() -> None:
    """`_Submitted.drop_waiting` drops only runs after every run that has started, so a pair's
    runs left to the judge are its last ones (`_runs` then cuts them as the pool did)."""
    report = _two_packages()
    archs = report.target_archs()
    workspace = report.files("the test")
    plan = []
    for key in workspace.package_keys():
        gates = [g for g in report.gates if (g.location.package, g.location.version) == key]
        work = [(t, gates) for t in archs]
        plan.append((key, gates, work))
    submitted = verdict._Submitted(plan, workspace, 1)
    try:
        submitted.drop_waiting()
        states = [f.cancelled() for runs in submitted._futures.values() for _, f in runs]
        assert True in states  # one worker cannot have started them all
        first = states.index(True)
        assert all(states[first:])  # a suffix of the submission order
        for pair in submitted._futures:
            found = submitted.pair(pair)
            assert found is not None
    finally:
        submitted.cancel()


def test_cuda_verdicts_judged_ahead_on_other_gates_are_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A package whose CUDA gates changed after they were judged ahead (a later detector's gate
    merged into one, say) is judged again, whole: the verdicts are the ones judged after the scan."""
    report = _two_packages()
    serial = judge_scan(report, jobs=1).verdicts
    cuda = [g for g in report.gates if g.kind.value == "cuda-pp"]
    assert serial and cuda
    changed = dataclasses.replace(cuda[0], evidence=())  # not the gate the report holds
    stale = [changed if g is cuda[0] else g for g in report.gates]
    archs = report.target_archs()
    workspace = report.files("the test")
    ahead = verdict.JudgeAhead(stale, archs, workspace, 2)
    taken = _takes(monkeypatch)
    got = verdict.judge_report(report.gates, archs, workspace, jobs=1, ahead=ahead)
    assert tuple(got) == serial
    assert None in taken  # the changed gate's package was judged again
    assert any(found is not None for found in taken)  # the other's verdicts were taken


def test_judging_ahead_stops_with_the_scan_and_hands_nothing_over_once_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scan that fails after it started judging ahead stops that judging; a stopped JudgeAhead
    hands no verdict over (a second judge of the same report judges everything itself)."""
    from liftgate.detect import registry

    monkeypatch.setattr(run, "RUN_AHEAD_THRESHOLD", 1)
    monkeypatch.setattr(verdict, "POOL_THRESHOLD", 1)
    started: list[verdict.JudgeAhead] = []
    stopped: list[verdict.JudgeAhead] = []
    init, cancel = verdict.JudgeAhead.__init__, verdict.JudgeAhead.cancel

    def spy_init(self: verdict.JudgeAhead, *args: Any) -> None:
        init(self, *args)
        started.append(self)

    def spy_cancel(self: verdict.JudgeAhead) -> None:
        stopped.append(self)
        cancel(self)

    def broken_link(gates: Any) -> list[Any]:
        raise RuntimeError("a link failed")

    monkeypatch.setattr(verdict.JudgeAhead, "__init__", spy_init)
    monkeypatch.setattr(verdict.JudgeAhead, "cancel", spy_cancel)
    trees = [str(FIXTURES / "outcomes" / "unsafe"), str(FIXTURES / "python" / "indirect")]
    with monkeypatch.context() as patched:
        patched.setattr(registry, "LINKS", (broken_link,))
        with pytest.raises(RuntimeError, match="a link failed"):
            scan(trees, ["sm_120"], cuda_version=(13, 0), jobs=2, use_cache=False, judge_ahead=True)
    assert len(started) == 1 and stopped == started
    report = scan(trees, ["sm_120"], cuda_version=(13, 0), jobs=2, use_cache=False, judge_ahead=True)
    ahead = report.judge_ahead
    assert isinstance(ahead, verdict.JudgeAhead)
    ahead.cancel()
    serial = judge_scan(dataclasses.replace(report, judge_ahead=None), jobs=1).verdicts
    assert serial
    assert judge_scan(report, jobs=2).verdicts == serial
    key = (report.gates[0].location.package, report.gates[0].location.version)
    assert ahead.take(key, report.target_archs()[0], report.gates, report.gates) is None


def _die(*args: object) -> None:
    import os

    os._exit(3)  # a worker killed mid-chunk (the kernel's OOM killer, say)


def test_a_judging_worker_that_dies_costs_no_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    report = scan(
        [str(FIXTURES / "outcomes" / "unsafe")],
        ["sm_120", "sm_90"],
        cuda_version=(13, 0),
        jobs=1,
        use_cache=False,
    )  # no verdict cache: both calls judge
    serial = judge_scan(report, jobs=1).verdicts
    assert serial
    monkeypatch.setattr(verdict, "POOL_THRESHOLD", 1)
    monkeypatch.setattr(verdict, "_judge_chunk", _die)
    assert judge_scan(report, jobs=2).verdicts == serial


# Fifteen device functions, each calling the next; the last uses tcgen05. Gate A reaches it 15
# calls deep (past the judge's depth limit of 12), gate B 10 calls deep. An analyser shared by
# both remembers f5 as A reached it (cut at depth 12) and gives B that cut answer.
_CALL_CHAIN = (
    '__device__ void f14(unsigned a) { asm volatile("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%0}, [%0];" :: "r"(a)); }\n'
    + "".join(f"__device__ void f{k}(unsigned a) {{ f{k + 1}(a); }}\n" for k in range(13, -1, -1))
    + "#if __CUDA_ARCH__ == 1000\n__global__ void a(unsigned x) { f0(x); }\n#endif\n"
    + "#if __CUDA_ARCH__ == 1000\n__global__ void b(unsigned x) { f5(x); }\n#endif\n"
)


@pytest.mark.xfail(
    strict=True,
    reason="known limit: gates judged in one run share a region analyser, whose facts for a function "
    "depend on the depth it was first reached at; runs have a fixed size, so -j changes nothing",
)
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_verdict_does_not_depend_on_the_gates_judged_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    (tmp_path / "chain.cu").write_text(_CALL_CHAIN)
    report = scan([str(tmp_path)], ["sm_120"], cuda_version=(13, 0), jobs=1, use_cache=False)
    first, second = sorted(
        (g for g in report.gates if g.kind.value == "cuda-pp"), key=lambda g: g.location.line
    )
    monkeypatch.setattr(verdict, "POOL_THRESHOLD", 1)
    together = {v.gate_id: v for v in judge_scan(report, jobs=jobs).verdicts}
    alone = judge_scan(report, only=lambda g: g.id == second.id, jobs=jobs).verdicts
    assert [v.kind.value for v in alone] == ["blocked"]  # tcgen05, 10 calls deep
    assert together[second.id] == alone[0]
    assert together[first.id].kind.value != "blocked"  # 15 calls deep: not followed that far


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(1, 48), min_size=1, max_size=30), max_size=5), st.integers(1, 16))
def test_bundles_cut_each_pairs_runs_in_order(sizes: list[list[int]], jobs: int) -> None:
    """`_bundles` takes every run of every pair once, in order, at least one run a bundle, and
    cuts a pair in about ``jobs`` times its share of the gates (at least one bundle)."""
    counts = verdict._bundles(sizes, jobs)
    assert len(counts) == len(sizes)
    total = sum(map(sum, sizes))
    for runs, cut in zip(sizes, counts, strict=True):
        assert sum(cut) == len(runs) and min(cut) >= 1
        assert len(cut) == max(1, min(len(runs), round(jobs * sum(runs) / total)))


def test_two_workers_judging_two_packages_build_each_context_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judging pool hands out bundles of consecutive runs (`_bundles`): with two workers and two
    packages with as many gates to judge, each package is one bundle, so its context is built once,
    in whichever worker took it; runs given one by one to whichever worker was free made both
    workers build both. The verdicts are the ones judged in one process. (Which worker takes which
    bundle is the pool's business: one worker may take both, if it is free first.)"""
    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the count is kept by a patched function, which only a forked worker inherits")
    report = _two_packages()
    target = report.target_archs()[0]
    excluding: dict[str, list[str]] = {}
    for g in report.gates:
        if g.status(target) is not Status.ADMITTED:
            excluding.setdefault(g.location.package, []).append(g.id)
    assert len(excluding) == 2
    size = min(len(ids) for ids in excluding.values())
    assert size >= 4  # runs of one gate: at least eight in all
    chosen = {i for ids in excluding.values() for i in ids[:size]}

    def only(g: Gate) -> bool:
        return g.id in chosen

    monkeypatch.setattr(verdict, "JUDGE_RUN", 1)  # a run per gate
    monkeypatch.setattr(verdict, "POOL_THRESHOLD", 1)
    workspace = report.files("the test")
    serial = verdict.judge_report(report.gates, [target], workspace, only=only, jobs=1)
    built = tmp_path / "built"
    build = verdict._build_context

    def recorded(store: Any, paths: list[str], gates: Sequence[Any], target: Any) -> Any:
        with built.open("a") as fh:
            fh.write(f"{os.getpid()} {gates[0].location.package}\n")
        return build(store, paths, gates, target)

    monkeypatch.setattr(verdict, "_build_context", recorded)
    got = verdict.judge_report(report.gates, [target], workspace, only=only, jobs=2)
    assert got == serial and len(got) >= 2 * size
    packages = [line.split()[1] for line in built.read_text().splitlines()]
    assert sorted(packages) == sorted(excluding)  # each package's context built once
