"""``lift --exclude ARCH`` (issue 20): the narrowing edit for an unsafe admission.

Each kind's edit is checked as text (a JIT filter loses the target's entry, a deny-list's
comparison takes the target in, a plain branch gains ``and not <exact test>``, an ``#if`` gains
``&& !<exact test>``), then end to end on the ``outcomes/unsafe`` fixture installed into a throwaway
environment: planned, re-detected (each gate now shuts the target out, nothing else changed beyond
the notes), applied with the journal, scanned again (the unsafe admissions are gone and sm_100a
keeps every path), and reverted to the same sha256s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import sha256_snapshot
from liftgate.arch.core import Arch
from liftgate.arch.parse import parse_target
from liftgate.cli.main import main
from liftgate.edits.cuda import lift_directive
from liftgate.judge.verdict import judge_scan
from liftgate.lift.plan import PlanError
from liftgate.lift.py_edit import narrow_list_edit, narrow_runtime_edit, parse_module
from liftgate.lift.text import NoSafeEdit, apply_edits
from liftgate.lift.workflow import apply_plan, judge_env, plan_env, revert, scan_env, unsafe_gates
from liftgate.model import Status, VerdictKind

FIXTURE = Path(__file__).parent / "fixtures" / "outcomes" / "unsafe"
SM121A = parse_target("sm_121a")
SM100A = parse_target("sm_100a")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # JIT caches looked up here, never the real ones


def _gate(condition: str, line: int) -> Any:
    """What the Python edit reads of a gate: its condition and where it is."""
    return SimpleNamespace(
        condition=condition,
        location=SimpleNamespace(path="pkg/m.py", span=SimpleNamespace(start=line, end=line)),
    )


@pytest.mark.parametrize(
    ("source", "line", "condition", "expected"),
    [
        # sglang #36551: the deny-list's comparison takes 12.1 in, as upstream fixed it.
        (
            "def on(sm_version):\n    if sm_version == 120:\n        return False\n    return True\n",
            2, "sm_version == 120", "    if sm_version in (120, 121):\n",
        ),
        # One part of an or-ed deny-list.
        (
            "def on(sm_version):\n    if sm_version < 90 or sm_version in (120, 122):\n        return False\n"
            "    return True\n",
            2, "sm_version < 90 or sm_version in (120, 122)",
            "    if sm_version < 90 or sm_version in (120, 122, 121):\n",
        ),
        # A guard liftgate cannot take the target into by a comparison: or-ed with the exact test.
        (
            "import torch\n\ndef on(cap):\n    if cap[0] < 10:\n        raise RuntimeError('old')\n    return 1\n",
            4, "cap[0] < 10", "    if cap[0] < 10 or torch.cuda.get_device_capability() == (12, 1):\n",
        ),
        # A plain branch: and-ed with not the exact test.
        (
            "import torch\n\ndef run(major):\n    if major >= 10:\n        return fast()\n    return slow()\n",
            4, "major >= 10", "    if major >= 10 and not torch.cuda.get_device_capability() == (12, 1):\n",
        ),
    ],
)  # fmt: skip
def test_python_narrowing_before_after(source: str, line: int, condition: str, expected: str) -> None:
    edit = narrow_runtime_edit(source, _gate(condition, line), SM121A, parse_module(source, "m.py"))
    after = apply_edits(source, edit.edits)
    assert after.splitlines(keepends=True)[line - 1] == expected
    compile(after, "m.py", "exec")


def test_python_narrowing_needs_a_capability_query_in_scope() -> None:
    source = "def run(major):\n    if major >= 10:\n        return fast()\n"
    with pytest.raises(NoSafeEdit, match="never adds an import"):
        narrow_runtime_edit(source, _gate("major >= 10", 2), SM121A)


@pytest.mark.parametrize(
    ("source", "expected", "granularity"),
    [
        ("f(supported_major_versions=[10, 11, 12])\n", "f(supported_major_versions=[10, 11])\n", "major"),
        ("f(supported_major_versions=[12, 10])\n", "f(supported_major_versions=[10])\n", "major"),
        ('archs = ["10.0a", "12.1a", "12.0a"]\n', 'archs = ["10.0a", "12.0a"]\n', "capability"),
        ("sms = (100, 121)\n", "sms = (100,)\n", "capability"),  # still a tuple
        ("sms = (121, 100)\n", "sms = (100,)\n", "capability"),
        ("sms = (100, 121,)\n", "sms = (100,)\n", "capability"),
    ],
)
def test_build_list_narrowing(source: str, expected: str, granularity: str) -> None:
    edit = narrow_list_edit(source, 1, 1, SM121A)
    assert apply_edits(source, edit.edits) == expected
    assert edit.granularity.value == granularity


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("f(supported_major_versions=[12])\n", "removing it leaves nothing"),
        ('archs = ["10.0a", "12.0a"]\n', "does not list '12.1a' itself"),
        ("f(supported_major_versions=majors)\n", "no literal arch list"),
    ],
)
def test_build_list_narrowing_refusals(source: str, why: str) -> None:
    with pytest.raises(NoSafeEdit, match=why):
        narrow_list_edit(source, 1, 1, SM121A)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            "#if __CUDA_ARCH__ >= 1000\n",
            "#if (__CUDA_ARCH__ >= 1000) && !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 1210 && "
            "defined(__CUDA_ARCH_FEAT_SM121_ALL))\n",
        ),
        (
            "#ifdef USE_TMEM // fast path\n",
            "#if defined(USE_TMEM) && !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 1210 && "
            "defined(__CUDA_ARCH_FEAT_SM121_ALL)) // fast path\n",
        ),
    ],
)
def test_cuda_narrowing_before_after(before: str, after: str) -> None:
    assert lift_directive([before], None, SM121A, exclude=True).after == [after]


def _install(fake_env: Callable[..., Path]) -> tuple[Path, Path]:
    site = fake_env(FIXTURE, "loose", "1.0")
    return site.parents[2], site


def test_exclude_every_unsafe_admission_applies_verifies_and_reverts(
    fake_env: Callable[..., Path],
) -> None:
    env, site = _install(fake_env)
    stock = sha256_snapshot(site)
    es = judge_env(scan_env(str(env), SM121A), SM121A, None)
    ids = unsafe_gates(es, SM121A)
    by_id = {g.id: g for g in es.report.gates}
    assert sorted((by_id[i].location.path, by_id[i].location.line) for i in ids) == [
        ("include/loose/epilogue.cuh", 6), ("loose/configurer.py", 24), ("loose/jit.py", 13),
    ]  # fmt: skip
    plan = plan_env(es, SM121A, ids, exclude=True)
    assert plan.verified and plan.exclude and not plan.skipped
    hows = {p.path: p.how for p in plan.planned}
    assert hows["loose/jit.py"] == "removed 12 from [10, 11, 12]"
    assert hows["loose/configurer.py"] == "and'ed with not torch.cuda.get_device_capability() == (12, 1)"
    assert hows["include/loose/epilogue.cuh"].startswith("and'ed with !(defined(__CUDA_ARCH__)")
    # The filter compares majors: every 12.x is shut out with 12.1, and the plan says so.
    assert any("now shuts out sm_120" in n for n in plan.notes)
    assert "liftgate: -sm_121a lg-" in plan.diff()
    doc = apply_plan(plan, str(env))
    assert doc["state"] == "applied"

    again = judge_scan(scan_env(str(env), SM121A).report)
    assert not [v for v in again.verdicts if v.kind is VerdictKind.UNSAFE and v.target == SM121A]
    after = {(g.location.path, g.location.line, g.kind): g for g in again.gates}
    for p in plan.planned:
        (gate,) = [g for (path, line, _k), g in after.items() if path == p.path and line == p.line]
        assert gate.status(SM121A) is Status.EXCLUDED
        assert gate.status(SM100A) is Status.ADMITTED  # sm_100a keeps the path

    done, _notes = revert(plan.lift_id, str(env))
    assert [d["lift_id"] for d in done] == [plan.lift_id]
    assert sha256_snapshot(site) == stock


def test_exclude_at_definition_edits_the_helpers_deny_list(fake_env: Callable[..., Path]) -> None:
    env, site = _install(fake_env)
    stock = sha256_snapshot(site)
    es = scan_env(str(env), SM121A)
    (call,) = [
        g for g in es.report.gates if g.location.path == "loose/configurer.py" and g.location.line == 24
    ]
    plan = plan_env(es, SM121A, [call.id], at="definition", exclude=True)
    assert plan.verified and not plan.skipped
    (change,) = plan.files
    assert "    if sm_version in (120, 121):  # liftgate: -sm_121a lg-" in change.after.decode()
    assert any("narrowed in its helper" in n for n in plan.notes)
    apply_plan(plan, str(env))
    again = scan_env(str(env), SM121A).report
    (now,) = [g for g in again.gates if g.location.path == "loose/configurer.py" and g.location.line == 24]
    assert now.status(SM121A) is Status.EXCLUDED and now.status(SM100A) is Status.ADMITTED
    revert(plan.lift_id, str(env))
    assert sha256_snapshot(site) == stock


def test_exclude_refuses_a_gate_that_already_shuts_the_target_out(fake_env: Callable[..., Path]) -> None:
    env, _site = _install(fake_env)
    es = scan_env(str(env), SM121A)
    (blocked,) = [g for g in es.report.gates if g.location.path == "csrc/norm.cu"]
    plan = plan_env(es, SM121A, [blocked.id], exclude=True)
    assert not plan.files and [s.reason for s in plan.skipped] == ["already shuts sm_121a out"]


def test_cli_exclude_all_unsafe_dry_run_and_json(
    fake_env: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    env, site = _install(fake_env)
    stock = sha256_snapshot(site)
    code = main(["lift", "--exclude", "sm_121a", "--all-unsafe", "--env", str(env), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("lift lg-") and " excluding sm_121a\n" in out.splitlines()[0] + "\n"
    assert "re-detected: every planned gate now shuts the target out" in out
    assert "liftgate: 3 unsafe admissions for sm_121a: 3 gates planned" in err
    assert sha256_snapshot(site) == stock  # a dry run changes nothing
    assert (
        main(
            [
                "lift",
                "--exclude",
                "sm_121a",
                "--all-unsafe",
                "--env",
                str(env),
                "--format",
                "json",
                "--dry-run",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["exclude"] is True and doc["target"] == "sm_121a" and len(doc["gates"]) == 3
    # Misuse is one line, exit 2.
    assert main(["lift", "--exclude", "sm_121a", "-t", "sm_120", "--all-unsafe", "--env", str(env)]) == 2
    assert "give no --target" in capsys.readouterr().err
    assert main(["lift", "--all-unsafe", "--env", str(env)]) == 2
    assert "--all-unsafe goes with --exclude" in capsys.readouterr().err
    assert main(["lift", "--exclude", "sm_100a", "--all-unsafe", "--env", str(env)]) == 1
    assert "no unsafe admission for sm_100a" in capsys.readouterr().err


def test_status_shows_an_exclusion(fake_env: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    env, _site = _install(fake_env)
    es = judge_env(scan_env(str(env), SM121A), SM121A, None)
    plan = plan_env(es, SM121A, unsafe_gates(es, SM121A, ["loose/*"]), exclude=True)
    assert {p.path for p in plan.planned} == {"loose/jit.py", "loose/configurer.py"}
    apply_plan(plan, str(env))
    assert main(["status", "--env", str(env)]) == 0
    assert f"{plan.lift_id}  excludes sm_121a  " in capsys.readouterr().out
    assert main(["status", "--env", str(env), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["lifts"][0]["exclude"] is True


def test_unknown_ids_still_fail_before_planning(fake_env: Callable[..., Path]) -> None:
    env, _site = _install(fake_env)
    es = scan_env(str(env), SM121A)
    with pytest.raises(PlanError, match="no gate"):
        plan_env(es, SM121A, ["py-nothere"], exclude=True)
    assert isinstance(Arch(12, 1, "a"), Arch)


def test_explain_shows_the_exclude_commands_for_an_unsafe_admission(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["explain", "py-3540b3b238", str(FIXTURE), "-t", "sm_121a"]) == 0
    out = capsys.readouterr().out
    assert "shut sm_121a out: liftgate lift py-3540b3b238 --exclude sm_121a (add --env ENV)" in out
    assert "or in the helper's guard: liftgate lift py-3540b3b238 --exclude sm_121a --at definition" in out
    assert main(["explain", "py-3540b3b238", str(FIXTURE), "-t", "sm_100a", "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["targets"]
    assert "exclude_command" not in entry  # admitted, and safe there
