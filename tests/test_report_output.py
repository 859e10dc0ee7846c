"""What a new user meets in the report: ids never cut, Markdown that fits a GitHub comment,
narrowing by verdict and path, counts of the kinds chosen, PTX-JIT-only binaries, runnable
SARIF commands, and progress off a terminal.

The reports are hand-built (test_report's fixture, and synthetic ones of many gates); nothing
here scans, fetches or sleeps.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shlex

import pytest

from liftgate.arch.core import Arch
from liftgate.cli.progress import PlainObserver, eta_text, progress_text
from liftgate.model import (
    Gate,
    GateKind,
    Hazard,
    HazardKind,
    Report,
    Span,
    Target,
    Verdict,
    VerdictKind,
)
from liftgate.report import (
    OutputFormat,
    RenderOptions,
    Show,
    VerdictFilter,
    render,
    select_gates,
    summary_line,
)
from liftgate.report.markdown import GITHUB_COMMENT_LIMIT, SUMMARY_BUDGET
from test_report import (
    ALLREDUCE_GATE,
    CUTLASS_MMA,
    DEEPGEMM_GATE,
    FLASHINFER,
    RTX5090,
    SM90,
    SM90A_GATE,
    at_least,
    capabilities,
    make_gate,
    sample_report,
)
from test_report_verdicts import VERDICTS

SM100A = Target("sm_100a", Arch(10, 0, "a"))
SM121 = Target("sm_121", Arch(12, 1))
SM80 = Target("sm_80", Arch(8, 0))
SM86 = Target("sm_86", Arch(8, 6))


@pytest.fixture
def judged() -> Report:
    return dataclasses.replace(sample_report(), verdicts=VERDICTS)


def _many_gates(count: int, package: str = FLASHINFER) -> tuple[Gate, ...]:
    """``count`` CUDA gates with long conditions in vendored-looking files, a few of them in examples."""
    gates = []
    for index in range(count):
        folder = "examples" if index % 10 == 0 else "include/cutlass/gemm/kernel"
        path = f"flashinfer/data/cutlass/{folder}/sm90_gemm_tma_warpspecialized_{index // 7}.hpp"
        condition = (
            f"defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(CUTLASS_ARCH_MMA_SM90A_ENABLED) "
            f"&& (KERNEL_SCHEDULE_{index} == KernelTmaWarpSpecializedCooperative)"
        )
        gates.append(
            make_gate(
                GateKind.CUDA_PP,
                package,
                "0.6.2",
                path,
                Span(10 + index, 10 + index),
                condition,
                capabilities((9, 0), (10, 0)),
                directive="#if",
            )
        )
    return tuple(gates)


def _verdicts_for(gates: tuple[Gate, ...], targets: tuple[Target, ...]) -> tuple[Verdict, ...]:
    """Blocked for most, liftable for every 50th, a hazard for every 100th: as a judged scan would."""
    verdicts = []
    for index, gate in enumerate(gates):
        for target in targets:
            if gate.status(target.arch).value == "admitted":
                continue
            kind = VerdictKind.LIFTABLE if index % 50 == 0 else VerdictKind.BLOCKED
            hazards = (
                (Hazard(HazardKind.SILENT_EXCLUSION, "silent exclusion: a wait compiled out"),)
                if index % 100 == 0
                else ()
            )
            verdicts.append(Verdict(gate.id, target.arch, kind, ("reason",), hazards=hazards))
    return tuple(verdicts)


# --- 1. the table never cuts a gate id ---------------------------------------------------------


def _ids_whole(text: str, gates: list[Gate]) -> None:
    for gate in gates:
        assert re.search(rf"(?<![\w-]){re.escape(gate.id)}(?![\w…])", text), f"{gate.id} cut or missing"


@pytest.mark.parametrize("judge", [False, True])
@pytest.mark.parametrize(
    "targets",
    [
        (RTX5090, SM90),
        (RTX5090, SM90, SM100A),
        (RTX5090, SM90, SM100A, SM121),
        (RTX5090, SM90, SM100A, SM121, SM80, SM86),
    ],
    ids=["2 targets", "3 targets", "4 targets", "6 targets"],
)
@pytest.mark.parametrize("width", [80, 100])
def test_table_never_cuts_an_id(targets: tuple[Target, ...], judge: bool, width: int) -> None:
    report = dataclasses.replace(sample_report(), targets=targets, verdicts=VERDICTS if judge else ())
    text = render(report, OutputFormat.TABLE, RenderOptions(width=width))
    gates = select_gates(report, RenderOptions())
    assert gates
    _ids_whole(text, gates)
    assert max(len(line) for line in text.splitlines()) <= width
    # Statuses are never cut either.
    assert "exclu…" not in text and "admit…" not in text


def test_table_with_three_targets_at_80_columns_keeps_every_id_of_a_large_report() -> None:
    gates = _many_gates(300)
    targets = (RTX5090, SM90, SM100A)
    report = dataclasses.replace(
        sample_report(), targets=targets, gates=gates, verdicts=_verdicts_for(gates, targets), skips=()
    )
    text = render(report, OutputFormat.TABLE, RenderOptions(width=80))
    listed = select_gates(report, RenderOptions())
    assert len(listed) == 300
    _ids_whole(text, listed)
    assert max(len(line) for line in text.splitlines()) <= 80


def test_table_says_which_columns_gave_way() -> None:
    report = dataclasses.replace(sample_report(), targets=(RTX5090, SM90, SM100A))
    narrow = render(report, OutputFormat.TABLE, RenderOptions(width=80))
    assert "(no kind or else column: to fit 80 columns)" in narrow
    assert "columns)" not in render(report, OutputFormat.TABLE, RenderOptions(width=200))
    judged = dataclasses.replace(
        report, verdicts=VERDICTS, targets=(RTX5090, SM90, SM100A, SM121, SM80, SM86)
    )
    stacked = render(judged, OutputFormat.TABLE, RenderOptions(width=80))
    assert "condition and admitted set under each row" in stacked
    # Under the row, the condition and the admitted set are still there.
    assert "#ifdef CUTLASS_ARCH_MMA_SM90A_ENABLED" in stacked
    assert "admits sm_90a; not sm_100+; else error" in stacked


def test_merged_columns_show_verdicts_in_place_of_excluded(judged: Report) -> None:
    report = dataclasses.replace(judged, targets=(RTX5090, SM90, SM100A))
    text = render(report, OutputFormat.TABLE, RenderOptions(width=80))
    assert "verdicts in the target columns" in text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("96 "))
    assert "blocked:" in row and SM90A_GATE.id in row


# --- 2. Markdown: an id column, and a summary that fits a GitHub comment -----------------------


def test_markdown_has_an_id_column(judged: Report) -> None:
    text = render(judged, OutputFormat.MARKDOWN, RenderOptions())
    for line in text.splitlines():
        if line.startswith("| file:line | condition |"):
            assert line.endswith("| id |")
    for gate in (SM90A_GATE, ALLREDUCE_GATE, DEEPGEMM_GATE):
        row = next(line for line in text.splitlines() if line.startswith(f"| `{gate.location.path}:"))
        assert row.endswith(f"| `{gate.id}` |")


def _gate_rows(markdown: str) -> list[str]:
    """The rows of the per-package gate tables (those end with the gate id)."""
    return re.findall(r"^\| `flashinfer/.*\| `cu-[0-9a-f]+` \|$", markdown, re.MULTILINE)


def _big_report(count: int = 3000) -> Report:
    gates = _many_gates(count)
    targets = (RTX5090, SM90)
    return dataclasses.replace(
        sample_report(), targets=targets, gates=gates, verdicts=_verdicts_for(gates, targets)
    )


def test_markdown_default_is_a_summary_under_githubs_limit() -> None:
    report = _big_report()
    listed = select_gates(report, RenderOptions())
    text = render(report, OutputFormat.MARKDOWN, RenderOptions())
    assert len(text) < SUMMARY_BUDGET < GITHUB_COMMENT_LIMIT
    rows = _gate_rows(text)
    assert 0 < len(rows) < len(listed)
    last = text.rstrip("\n").splitlines()[-1]
    assert last == (
        f"{len(listed) - len(rows):,} more gates not shown: use `--show all` (too long for a GitHub comment) "
        "or `--format json`"
    )
    # The summary line and the counts per package, kind and target come first.
    assert "scanned 3,232 files in 2 packages (1 skipped), 3,000 gates" in text
    assert (
        f"| {FLASHINFER} 0.6.2 | cuda-pp | 3,000 | 3,000 excluded, 0 unknown | 0 excluded, 0 unknown |"
        in text
    )
    # The gates that matter most: every hazard (every 100th gate) and liftable one (every 50th) is listed.
    hazard_ids = {gate.id for index, gate in enumerate(report.gates) if index % 50 == 0}
    shown = {m.group(1) for m in re.finditer(r"\| `(cu-[0-9a-f]+)` \|$", text, re.MULTILINE)}
    assert hazard_ids <= shown
    assert len(shown) == len(rows)


def test_markdown_show_all_renders_everything_and_says_it_is_too_long() -> None:
    report = _big_report()
    text = render(report, OutputFormat.MARKDOWN, RenderOptions(show=Show.ALL))
    assert len(text) > GITHUB_COMMENT_LIMIT
    assert len(_gate_rows(text)) == 3000
    heading, blank, note = text.splitlines()[:3]
    assert heading.startswith("## liftgate:") and blank == ""
    assert note.startswith("> **Note:** this Markdown report is ") and "65,536" in note
    assert f"{len(text):,} characters" in note
    assert "more gates not shown" not in text


def test_markdown_small_report_lists_every_gate_without_a_note(judged: Report) -> None:
    text = render(judged, OutputFormat.MARKDOWN, RenderOptions())
    assert "not shown" not in text and "**Note:**" not in text
    assert "Gates per package and kind:" in text


# --- 3. narrowing: --verdict, --path, --exclude-path in every format --------------------------


def _listed_ids(report: Report, fmt: OutputFormat, options: RenderOptions) -> set[str]:
    text = render(report, fmt, options)
    if fmt is OutputFormat.JSON:
        return {gate["id"] for gate in json.loads(text)["gates"]}
    if fmt is OutputFormat.SARIF:
        return {r["properties"]["gateId"] for r in json.loads(text)["runs"][0]["results"]}
    return {gate.id for gate in report.gates if gate.id in text}


@pytest.mark.parametrize("fmt", list(OutputFormat))
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (RenderOptions(verdicts=frozenset({VerdictFilter.LIFTABLE})), {ALLREDUCE_GATE.id}),
        (RenderOptions(verdicts=frozenset({VerdictFilter.BLOCKED})), {SM90A_GATE.id}),
        (RenderOptions(verdicts=frozenset({VerdictFilter.UNKNOWN})), {DEEPGEMM_GATE.id}),
        (RenderOptions(verdicts=frozenset({VerdictFilter.HAZARD})), {SM90A_GATE.id, ALLREDUCE_GATE.id}),
        (
            RenderOptions(verdicts=frozenset({VerdictFilter.LIFTABLE, VerdictFilter.UNKNOWN})),
            {ALLREDUCE_GATE.id, DEEPGEMM_GATE.id},
        ),
        (RenderOptions(paths=("sglang/*",)), {DEEPGEMM_GATE.id}),
        (RenderOptions(exclude_paths=("*/cutlass/*",)), {ALLREDUCE_GATE.id, DEEPGEMM_GATE.id}),
        (RenderOptions(paths=("flashinfer/*",), exclude_paths=("*/comm/*",)), {SM90A_GATE.id}),
    ],
)
def test_narrowing_applies_to_every_format(
    judged: Report, fmt: OutputFormat, options: RenderOptions, expected: set[str]
) -> None:
    assert {g.id for g in select_gates(judged, options)} == expected
    assert _listed_ids(judged, fmt, options) == expected


def test_exclude_path_drops_vendored_examples() -> None:
    report = dataclasses.replace(sample_report(), gates=_many_gates(100))
    kept = select_gates(report, RenderOptions(exclude_paths=("*/examples/*",)))
    assert len(kept) == 90
    assert all("/examples/" not in gate.location.path for gate in kept)


def test_narrowing_by_path_is_counted_and_said(judged: Report) -> None:
    options = RenderOptions(exclude_paths=("*/cutlass/*",))
    line = summary_line(judged, options)
    assert "3 gates at the paths chosen (of 4 found), 1 excludes sm_120, 0 exclude sm_90" in line
    nothing = RenderOptions(paths=("nowhere/*",))
    assert "(--path 'nowhere/*')" in render(judged, OutputFormat.TABLE, nothing)


# --- 4. papercuts ---------------------------------------------------------------------------------


def test_summary_counts_only_the_kinds_chosen(judged: Report) -> None:
    options = RenderOptions(kinds=frozenset({GateKind.PY_RUNTIME}))
    assert summary_line(judged, options) == (
        "scanned 3,232 files in 2 packages (1 skipped), 1 py-runtime gate (of 4 found), 0 exclude sm_120,"
        " 0 exclude sm_90, 1 unknown; sm_120 loses no code path, sm_90 loses no code path; verdicts:"
        " 0 liftable, 0 blocked, 1 unknown — 1.84 s"
    )
    markdown = render(judged, OutputFormat.MARKDOWN, options)
    assert "1 py-runtime gate (of 4 found)" in markdown
    assert "| sglang 0.5.6 | py-runtime | 1 |" in markdown and "| cuda-pp |" not in markdown
    # JSON's summary still counts the whole scan, as its schema says.
    assert json.loads(render(judged, OutputFormat.JSON, options))["summary"]["gates"] == 4
    # Without options (a library caller) nothing changes.
    assert summary_line(judged).startswith("scanned 3,232 files in 2 packages (1 skipped), 4 gates,")


def test_sarif_details_command_names_the_source_and_runs_as_written(judged: Report) -> None:
    from liftgate.cli.main import build_parser

    log = json.loads(render(judged, OutputFormat.SARIF, RenderOptions()))
    origins = {p.name: p.origin for p in judged.packages}
    for result in log["runs"][0]["results"]:
        command = re.search(r"Details: `([^`]+)`", result["message"]["text"])
        assert command is not None
        words = shlex.split(command.group(1))
        assert words[:2] == ["liftgate", "explain"]
        args = build_parser().parse_args(words[1:])
        assert args.gate_id == result["properties"]["gateId"]
        assert args.sources == [origins[result["properties"]["package"]]]
        assert args.target == [result["properties"]["arch"]]


def test_sarif_details_for_a_hand_built_report_without_packages() -> None:
    report = dataclasses.replace(sample_report(), packages=())
    log = json.loads(render(report, OutputFormat.SARIF, RenderOptions()))
    text = log["runs"][0]["results"][0]["message"]["text"]
    assert text.endswith(f"Details: `liftgate explain {SM90A_GATE.id} --target sm_120`.")


# --- progress off a terminal --------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_progress_off_a_terminal_prints_a_count_and_time_left_every_ten_seconds() -> None:
    clock, out = FakeClock(), io.StringIO()
    observer = PlainObserver(False, clock=clock, heartbeat=False, stream=out)
    observer.start("judging the gated code", total=3300)
    observer.advance(600)
    clock.now += 9.9
    observer.advance(500)
    assert out.getvalue() == ""  # less than ten seconds: nothing yet
    clock.now += 10.1  # 20 s in: 1,200 done, 2,100 to go at 60 a second
    observer.advance(100)
    assert out.getvalue() == "liftgate: judging the gated code: 1,200 of 3,300 gates, about 35 s left\n"
    clock.now += 5
    observer.advance(100)  # 5 s since the last line: nothing
    assert out.getvalue().count("\n") == 1
    observer.finish()
    clock.now += 60
    observer.tick()
    observer.advance(1)  # after finish: silent
    assert out.getvalue().count("\n") == 1


def test_progress_of_a_phase_without_advances_comes_from_the_heartbeat() -> None:
    clock, out = FakeClock(), io.StringIO()
    observer = PlainObserver(False, clock=clock, heartbeat=False, stream=out)
    observer.start("following gate chains")
    observer.tick()
    clock.now += 75
    observer.tick()  # what the heartbeat thread does every second
    assert out.getvalue() == "liftgate: following gate chains: 1 min 15 s so far\n"
    observer.finish()


def test_progress_quiet_prints_nothing_and_notes_still_go_through() -> None:
    clock, out = FakeClock(), io.StringIO()
    quiet = PlainObserver(True, clock=clock, heartbeat=False, stream=out)
    quiet.start("judging the gated code", total=10)
    clock.now += 60
    quiet.advance(5)
    assert out.getvalue() == ""
    loud = PlainObserver(False, clock=clock, heartbeat=False, stream=out)
    loud.note("fetching flashinfer-python==0.6.2")
    assert out.getvalue() == "liftgate: fetching flashinfer-python==0.6.2\n"


def test_progress_heartbeat_thread_stops_with_the_phase() -> None:
    observer = PlainObserver(False, heartbeat=True, stream=io.StringIO())
    observer.start("judging the gated code", total=5)
    thread = observer._thread
    assert thread is not None and thread.is_alive()
    observer.finish()
    assert not thread.is_alive()


def test_progress_texts() -> None:
    assert progress_text("indexing flashinfer-python", 0, 1992, 12) == (
        "indexing flashinfer-python: 0 of 1,992 files, 12 s so far"
    )
    assert progress_text("judging the gated code", 10, None, 3725) == (
        "judging the gated code: 10 gates done, 1 h 2 min so far"
    )
    assert [eta_text(s) for s in (0.2, 33, 119, 121, 3600 * 2 + 61)] == [
        "5 s",
        "35 s",
        "2 min",
        "3 min",
        "2 h 2 min",
    ]


def test_cut_markers_are_not_in_ids(judged: Report) -> None:
    # A sanity check of _ids_whole itself: a cut id fails it.
    with pytest.raises(AssertionError):
        _ids_whole(SM90A_GATE.id[:-2] + "…", [SM90A_GATE])
    assert at_least(9).names() and CUTLASS_MMA
