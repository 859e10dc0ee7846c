"""The judge phase reports its count: ``judge_report`` starts the observer with the number of
(gate, target) pairs it judges and advances it once per pair (on the minijudge fixture)."""

from __future__ import annotations

from pathlib import Path

from liftgate.arch.parse import parse_arch
from liftgate.judge.verdict import judge_report, judge_scan
from liftgate.scan import scan

FIXTURE = Path(__file__).parent / "fixtures" / "judge" / "minijudge"
TARGETS = ["sm_120", "sm_120a", "sm_90", "sm_90a"]


class Recorder:
    """An observer that records every call, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def start(self, description: str, total: int | None = None) -> None:
        self.events.append(("start", (description, total)))

    def advance(self, amount: int = 1) -> None:
        self.events.append(("advance", amount))

    def finish(self) -> None:
        self.events.append(("finish", None))

    def note(self, message: str) -> None:
        self.events.append(("note", message))


def test_judge_report_counts_its_pairs(tmp_path: Path) -> None:
    report = scan(
        [str(FIXTURE)],
        TARGETS,
        use_cache=False,
        cache_dir=str(tmp_path),
        cuda_version=(13, 0),
    )
    assert report.workspace is not None
    recorder = Recorder()
    verdicts = judge_report(
        report.gates,
        [parse_arch(t) for t in TARGETS],
        report.workspace,
        observer=recorder,
    )
    assert len(verdicts) > 1
    # One step per (gate, target) pair judged: each exclusion, and each admission whose path is
    # read for an unsafe verdict (most give none), so at least as many steps as verdicts.
    (start,) = [arg for kind, arg in recorder.events if kind == "start"]
    pairs = start[1]
    assert start[0] == "judging the gated code" and pairs >= len(verdicts)
    assert recorder.events[1:] == [("advance", 1)] * pairs
    # Without an observer the verdicts are the same.
    plain = judge_report(
        report.gates,
        [parse_arch(t) for t in TARGETS],
        report.workspace,
    )
    assert plain == verdicts


def test_scan_judge_phase_has_a_total(tmp_path: Path) -> None:
    recorder = Recorder()
    report = judge_scan(
        scan(
            [str(FIXTURE)],
            TARGETS,
            use_cache=False,
            cache_dir=str(tmp_path),
            cuda_version=(13, 0),
            observer=recorder,
        ),
        observer=recorder,
    )
    assert len(report.verdicts) > 1
    starts = [i for i, (kind, arg) in enumerate(recorder.events) if kind == "start"]
    judging = [i for i in starts if recorder.events[i][1][0] == "judging the gated code"]
    assert len(judging) == 1
    n = recorder.events[judging[0]][1][1]
    assert n >= len(report.verdicts)
    assert not [i for i in starts if recorder.events[i][1] == ("judging the gated code", None)]
    i = judging[0]
    assert recorder.events[i + 1 : i + 1 + n] == [("advance", 1)] * n
    assert recorder.events[i + 1 + n] == ("finish", None)
