"""Acceptance for ``lift --exclude`` on a real release (issue 20): SGLang 0.5.19's DeepGEMM deny-list.

``srt/layers/deep_gemm_wrapper/configurer.py:22`` turns DeepGEMM off for ``sm_version == 120``
only, so sm_121 (GB10) slips through into kernels that need tcgen05 (sglang #36551; 0.5.21 fixed
it with ``in (120, 121)``). Narrowing that guard for sm_121 must write exactly upstream's fix,
re-detect (the guard now fires for 12.1, nothing else changed), apply with the journal and revert
to the same bytes.
"""

from __future__ import annotations

import py_compile
from pathlib import Path

import pytest

from conftest import fetch_release, sha256_snapshot, venv_with
from liftgate.arch.parse import parse_target
from liftgate.lift.workflow import apply_plan, plan_env, revert, scan_env
from liftgate.model import Status

pytestmark = pytest.mark.network

CONFIGURER = "sglang/srt/layers/deep_gemm_wrapper/configurer.py"
SM121 = parse_target("sm_121")


def test_exclude_sm121_from_sglang_0_5_19_deep_gemm_writes_upstreams_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    env = tmp_path / "env"
    site = venv_with(env, [fetch_release("sglang==0.5.19")])
    stock = sha256_snapshot(site)
    es = scan_env(str(env), SM121)
    (guard,) = [g for g in es.report.gates if g.location.path == CONFIGURER and g.location.line == 22]
    assert guard.condition == "sm_version == 120"
    assert guard.status(SM121) is Status.ADMITTED  # the deny-list lets 12.1 through

    plan = plan_env(es, SM121, [guard.id], exclude=True)
    assert plan.verified and plan.exclude and not plan.skipped
    (change,) = plan.files
    lines = change.after.decode().splitlines()
    assert lines[21] == f"    if sm_version in (120, 121):  # liftgate: -sm_121 {plan.lift_id}"
    assert [p.how for p in plan.planned] == ["== 120 became in (120, 121) (the guard now shuts sm_121 out)"]
    # Only that line changed.
    before = change.before.decode().splitlines()
    assert [n for n, (a, b) in enumerate(zip(before, lines, strict=True)) if a != b] == [21]

    apply_plan(plan, str(env))
    py_compile.compile(str(site / CONFIGURER), cfile=str(tmp_path / "c.pyc"), doraise=True)
    again = scan_env(str(env), SM121).report
    (now,) = [g for g in again.gates if g.location.path == CONFIGURER and g.location.line == 22]
    assert now.status(SM121) is Status.EXCLUDED
    for other in ("sm_100a", "sm_90a", "sm_103"):
        assert now.status(parse_target(other)) is Status.ADMITTED, other
    revert(plan.lift_id, str(env))
    assert sha256_snapshot(site) == stock
