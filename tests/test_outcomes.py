"""Outcomes (issue 19): what each target gets from a gate, read in the direction of the gated path.

The fixture ``outcomes/polar`` has one gate of each polarity in Python, C++ host code, CUDA ``#if``
chains and CMake, each line marked ``outcome: ARCH=OUTCOME …`` by reading the code (positive guard,
deny-list, raise guard, fallback, alternative branch, a path for older GPUs only, a switch, a trap).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.arch.core import Arch, ArchSet, universe
from liftgate.arch.parse import parse_target
from liftgate.cli.main import main
from liftgate.diff import diff
from liftgate.evaluate import Outcomes
from liftgate.lift.workflow import choose_gates, judge_env, scan_env
from liftgate.model import (
    ElseKind,
    Gate,
    GateKind,
    Location,
    Outcome,
    Span,
    VerdictKind,
)
from liftgate.scan import scan

FIXTURE = Path(__file__).parent / "fixtures" / "outcomes" / "polar"
TARGETS = ("sm_90", "sm_120", "sm_80")
MARK = re.compile(r"outcome:((?:\s+sm_\d+[af]?=[a-z-]+)+)")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))


def _marks() -> dict[tuple[str, int], dict[str, str]]:
    marks = {}
    for path in sorted(FIXTURE.rglob("*")):
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found = MARK.search(line)
            if found:
                pairs = dict(part.split("=") for part in found.group(1).split())
                marks[(path.relative_to(FIXTURE).as_posix(), number)] = pairs
    return marks


@pytest.fixture(scope="module")
def polar_json() -> dict:  # type: ignore[type-arg]
    report = scan([str(FIXTURE)], [parse_target(t) for t in TARGETS], use_cache=False)
    from liftgate.report import OutputFormat, render
    from liftgate.report.interface import RenderOptions, Show

    return json.loads(render(report, OutputFormat.JSON, RenderOptions(show=Show.ALL)))


def test_every_marked_line_has_the_outcomes_it_was_marked_with(polar_json: dict) -> None:  # type: ignore[type-arg]
    marks = _marks()
    assert len(marks) == 19  # the marks themselves are read
    found = {
        (g["path"], g["line"]): {arch: o["outcome"] for arch, o in g["outcomes"].items()}
        for g in polar_json["gates"]
    }
    assert found == marks


def test_losses_are_what_another_target_gets(polar_json: dict) -> None:  # type: ignore[type-arg]
    for gate in polar_json["gates"]:
        for arch, reading in gate["outcomes"].items():
            lost = reading["outcome"] in ("fallback", "shut-out", "off")
            reached = "not reached" not in reading["text"]
            assert reading["loss"] == (
                lost and reached and (bool(gate["admitted"]) or reading["outcome"] == "off")
            ), (
                gate["path"],
                gate["line"],
                arch,
            )
    # The dispatch's branches name each other: the target they leave out takes the other one.
    (cap90,) = [g for g in polar_json["gates"] if g["condition"] == "cap == (9, 0)"]
    (cap10,) = [g for g in polar_json["gates"] if g["condition"] == "cap[0] >= 10"]
    assert cap90["facts"]["dispatch"] == cap10["facts"]["dispatch"] == cap90["line"]
    assert cap90["outcomes"]["sm_120"]["via"] == cap10["id"]


def test_default_view_lists_losses_by_feature_and_no_alternative(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(FIXTURE), "-t", "sm_120", "--no-cache", "--no-judge", "-v"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sm_120 loses 9 code paths in 4 features (6 shut out, 2 fallback, 1 off)")
    rows = [line for line in out.splitlines() if " — " in line and ": " in line.split(" — ")[0]]
    outcomes = {line.split(" — ")[1].split(" ")[0] for line in rows}
    assert outcomes == {"shut-out", "fallback", "off"}
    assert "set ENABLE_SM120=1" in out
    assert "not losses: 5 gates where sm_120 takes its own or a newer path" in out
    # --show excluded still lists every gate that leaves sm_120 out, alternatives included.
    assert (
        main(["scan", str(FIXTURE), "-t", "sm_120", "--no-cache", "--no-judge", "--show", "excluded", "-v"])
        == 0
    )
    assert "__CUDA_ARCH__ < 800" in capsys.readouterr().out


def test_fail_on_loss(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["scan", str(FIXTURE), "--no-cache", "--no-judge", "-q", "--fail-on", "loss"]
    assert main([*args, "-t", "sm_120"]) == 1
    assert "--fail-on loss: 9 gates match" in capsys.readouterr().err
    # Narrowed to the old-GPU path alone, sm_120 loses nothing: it takes its own path there.
    assert main([*args, "-t", "sm_120", "--path", "polar/dispatch.py", "--kind", "cuda-pp"]) == 0


def test_all_liftable_never_lifts_an_alternative(
    fake_env: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache = str(tmp_path / "cache")
    fake_env(FIXTURE, "polar", "0.1")
    sm120 = Arch(12, 0)
    es = judge_env(scan_env(str(tmp_path / "env"), sm120, cache_dir=cache), sm120, None)
    outcomes = Outcomes(es.report.gates)
    by_id = {g.id: g for g in es.report.gates}
    liftable = {v.gate_id for v in es.report.verdicts if v.kind is VerdictKind.LIFTABLE}
    alternatives = {i for i in liftable if outcomes.of(by_id[i], sm120).outcome is Outcome.ALTERNATIVE}
    assert alternatives, "the fixture has liftable alternatives: the test must be able to fail"
    ids, _ = choose_gates(es, sm120, [], all_liftable=True, force=False)
    assert ids and not set(ids) & alternatives
    assert all(outcomes.of(by_id[i], sm120).loss for i in ids)
    only = choose_gates(es, sm120, [], all_liftable=True, force=False, paths=["include/*"])[0]
    assert only and {by_id[i].location.path for i in only} == {"include/dispatch.cuh"}


def _gate(gid: str, admitted: ArchSet, *, unknown: ArchSet | None = None, dispatch: int | None = None,
          line: int = 1, else_kind: ElseKind = ElseKind.NONE, kind: GateKind = GateKind.CUDA_PP) -> Gate:  # fmt: skip
    return Gate(
        id=gid, kind=kind, location=Location("p", "1", "k.cuh", Span(line, line)), condition=gid,
        admitted=admitted, unknown=unknown or ArchSet.none(), host=None, then_span=None, else_span=None,
        else_kind=else_kind, dispatch=dispatch,
    )  # fmt: skip


def _archs(*ccs: tuple[int, int]) -> ArchSet:
    from liftgate.detect.runtime_arch import archs_for_capabilities

    return archs_for_capabilities(list(ccs))


def test_a_branch_that_may_be_taken_first_makes_the_outcome_unknown() -> None:
    first = _gate("cu-a", _archs((9, 0)), unknown=_archs((12, 0)), dispatch=1, line=1)
    second = _gate("cu-b", _archs((12, 0), (10, 0)), dispatch=1, line=3)
    reading = Outcomes([first, second]).of(first, Arch(12, 0))
    assert (reading.outcome, reading.loss) == (Outcome.UNKNOWN, False)
    assert Outcomes([first, second]).of(second, Arch(9, 0)).outcome is Outcome.FALLBACK


def test_a_path_no_target_gets_is_no_loss() -> None:
    nobody = _gate("cu-n", ArchSet.none(), else_kind=ElseKind.FALLBACK)
    reading = Outcomes([nobody]).of(nobody, Arch(12, 0))
    assert reading.outcome is Outcome.FALLBACK and not reading.loss


def test_a_binary_without_an_image_is_a_shut_out() -> None:
    binary = _gate("bin-x", _archs((9, 0)), kind=GateKind.BINARY, else_kind=ElseKind.ERROR)
    reading = Outcomes([binary]).of(binary, Arch(12, 0))
    assert (reading.outcome, reading.loss) == (Outcome.SHUT_OUT, True)
    assert "no kernel image" in reading.text


DENY_OLD = """\
import torch


def enabled():
    major, minor = torch.cuda.get_device_capability()
    sm_version = major * 10 + minor
    if sm_version == 120:
        return False
    return True
"""
DENY_NEW = DENY_OLD.replace("if sm_version == 120:", "if sm_version in (120, 121):")
JIT_OLD = """\
def gen_comm_module():
    flags = ctx.get_nvcc_flags_list(supported_major_versions=[9, 10])
    return gen_jit_spec("trtllm_comm", ["a.cu"], extra_cuda_cflags=flags)


def gen_mnnvl_module():
    flags = ctx.get_nvcc_flags_list(supported_major_versions=[9, 10])
    return gen_jit_spec("trtllm_mnnvl_comm", ["b.cu"], extra_cuda_cflags=flags)
"""
JIT_NEW = """\
def gen_mnnvl_module():
    flags = ctx.get_nvcc_flags_list(supported_major_versions=[9, 10])
    return gen_jit_spec("trtllm_mnnvl_comm", ["b.cu"], extra_cuda_cflags=flags)


def gen_comm_module():
    flags = ctx.get_nvcc_flags_list(supported_major_versions=[9, 10, 12])
    return gen_jit_spec("trtllm_comm", ["a.cu"], extra_cuda_cflags=flags)
"""


@pytest.mark.parametrize(
    ("name", "old", "new", "target", "expected"),
    [
        # A deny-list widened to also deny sm_121 closes the path for sm_121 (sglang #36551).
        ("pkg/configurer.py", DENY_OLD, DENY_NEW, "sm_121", [("closed", 7)]),
        # The successor of a JIT module's filter is found by the module it builds, not its text.
        ("pkg/jit/comm.py", JIT_OLD, JIT_NEW, "sm_120a", [("opened", 7), ("unchanged", 2)]),
    ],
)
def test_diff_reads_the_features_direction(
    tmp_path: Path, name: str, old: str, new: str, target: str, expected: list[tuple[str, int]]
) -> None:
    for release, text in (("old", old), ("new", new)):
        path = tmp_path / release / "rel" / name  # one package name ("rel") in both releases
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    arch = parse_target(target)
    changes = diff(
        scan([str(tmp_path / "old" / "rel")], [arch], use_cache=False),
        scan([str(tmp_path / "new" / "rel")], [arch], use_cache=False),
        [arch],
    )
    assert sorted((c.change.value, c.gate.location.line) for c in changes) == sorted(expected)


def test_explain_says_the_outcome(polar_json: dict, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[type-arg]
    (gate,) = [g for g in polar_json["gates"] if g["condition"] == "cap == (9, 0)"]
    assert main(["explain", gate["id"], str(FIXTURE), "-t", "sm_120"]) == 0
    out = capsys.readouterr().out
    assert "outcome: alternative: sm_120 takes the branch at line" in out
    assert main(["explain", gate["id"], str(FIXTURE), "-t", "sm_80"]) == 0
    assert "outcome: fallback — a loss:" in capsys.readouterr().out


NEWEST_SHUT_OUT = {
    # Shapes that shut the newest GPUs out on purpose or by omission: never "a path for older GPUs".
    "pkg/deny.py": (
        "import torch\n\n\ndef enabled():\n    major, minor = torch.cuda.get_device_capability()\n"
        "    sm_version = major * 10 + minor\n    if sm_version in (120, 121):\n        return False\n"
        "    return True\n"
    ),
    "pkg/raises.py": (
        "import torch\n\n\ndef run():\n    if torch.cuda.get_device_capability()[0] >= 12:\n"
        "        raise NotImplementedError('no')\n    return 1\n"
    ),
    "pkg/trap.cuh": "__device__ void f() {\n#if __CUDA_ARCH__ < 1000\n  int x = 1;\n#else\n  __trap();\n#endif\n}\n",
    "pkg/nested.cuh": (
        "__device__ void g() {\n#if __CUDA_ARCH__ >= 900\n#if __CUDA_ARCH__ == 900\n  int a = 1;\n#else\n"
        "  int b = 2;\n#endif\n#endif\n}\n"
    ),
}


def test_newest_gpus_shut_out_are_losses_and_nested_gates_count_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, text in NEWEST_SHUT_OUT.items():
        (tmp_path / "rel" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "rel" / name).write_text(text)
    archs = [parse_target(t) for t in ("sm_120", "sm_80")]
    report = scan([str(tmp_path / "rel")], archs, use_cache=False)
    outcomes = Outcomes(report.gates)
    read = {(g.location.path, g.location.line): g for g in report.gates}
    sm120, sm80 = archs
    assert outcomes.of(read[("pkg/deny.py", 7)], sm120).outcome is Outcome.FALLBACK
    assert outcomes.of(read[("pkg/deny.py", 7)], sm120).loss
    assert outcomes.of(read[("pkg/raises.py", 5)], sm120).outcome is Outcome.SHUT_OUT
    assert outcomes.of(read[("pkg/trap.cuh", 2)], sm120).outcome is Outcome.SHUT_OUT
    # sm_80 never gets past the outer #if: the inner one is no loss of its own.
    inner = outcomes.of(read[("pkg/nested.cuh", 3)], sm80)
    assert not inner.loss and "not reached" in inner.text
    assert outcomes.of(read[("pkg/nested.cuh", 2)], sm80).loss
    # --fail-on excluded still sees every exclusion, alternatives included, in the losses view.
    args = ["scan", str(tmp_path / "rel"), "--no-cache", "--no-judge", "-q", "-t", "sm_80"]
    assert main([*args, "--fail-on", "excluded"]) == 1
    assert "--fail-on excluded: 2 gates match" in capsys.readouterr().err  # the view lists one


def test_the_outcomes_of_a_report_are_read_once_for_every_view() -> None:
    """The summary line, the selection and the table each read every gate's outcome: one `Outcomes`
    per report (by the identity of its gates and verdicts), a new one for another report."""
    from dataclasses import replace

    report = scan([str(FIXTURE)], [parse_target(t) for t in TARGETS], use_cache=False)
    shared = Outcomes.of_report(report)
    assert Outcomes.of_report(report) is shared
    fewer = replace(report, gates=report.gates[1:])
    other = Outcomes.of_report(fewer)
    assert other is not shared
    first = report.gates[0]
    assert other.of(first, parse_target("sm_120")) == shared.of(first, parse_target("sm_120"))


@settings(max_examples=300, deadline=None)
@given(mask=st.integers(min_value=0, max_value=(1 << len(universe())) - 1))
def test_the_oldest_and_newest_target_of_a_set_are_read_from_its_mask(mask: int) -> None:
    from liftgate.evaluate import _newest, _oldest

    archs = ArchSet.from_mask(mask)
    assert _oldest(archs) == min((a.cc for a in archs), default=None)
    assert _newest(archs) == max((a.cc for a in archs), default=None)
