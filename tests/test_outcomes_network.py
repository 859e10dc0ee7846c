"""Acceptance for issue 19 (losses, not lines) on real releases from the package index.

* flashinfer-python 0.6.2 for sm_120: the default view lists the losses by feature, with the
  all-reduce fusion path (the ``gen_trtllm_comm_module`` filter and the 13 ``trtllm_allreduce.cuh``
  gates) shut out, and no alternative; ``lift --all-liftable`` lifts liftable losses only, skips
  what does not verify with one line each, exits 0, and ``revert --all`` restores every sha256.
* sglang 0.5.19 ``deep_gemm_wrapper/configurer.py:22`` ``if sm_version == 120: return False``:
  sm_120 loses DeepGEMM there, sm_121 gets it; 0.5.21 widens the deny-list to 12.1 (while the
  installed DeepGEMM lacks the SM120 APIs): ``diff`` says closed for sm_121.
* flashinfer-python 0.6.3 ``fmha_v2/generator_utils.py:6772`` ``"ENABLE_SM120" in os.environ``: a
  switch, off for every target, naming ENABLE_SM120=1 and sm_120 as what it would enable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fetch_release, sha256_snapshot
from liftgate.arch.core import Arch
from liftgate.cli.main import main
from liftgate.diff import ChangeKind, diff
from liftgate.evaluate import Outcomes
from liftgate.model import Outcome
from liftgate.report import OutputFormat, render
from liftgate.report.interface import RenderOptions, Show
from liftgate.scan import scan

pytestmark = pytest.mark.network

SM120, SM121 = Arch(12, 0), Arch(12, 1)
ALLREDUCE = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"
CONFIGURER = "sglang/srt/layers/deep_gemm_wrapper/configurer.py"


def test_flashinfer_062_default_view_is_the_losses_with_allreduce_fusion_shut_out() -> None:
    report = scan(["flashinfer-python==0.6.2"], [SM120])
    doc = json.loads(render(report, OutputFormat.JSON, RenderOptions(show=Show.LOSSES)))
    features = {(f["feature"], f["outcome"]): f for f in doc["losses"]}
    comm = features[("JIT module trtllm_comm", "shut-out")]
    assert len(comm["gates"]) == 1
    allreduce = features[(ALLREDUCE, "shut-out")]
    assert len(allreduce["gates"]) == 13 and allreduce["outcomes"] == {"shut-out": 13}
    # The view holds no alternative: every listed gate is a loss or of unknown outcome for sm_120.
    listed = {g["outcomes"]["sm_120"]["outcome"] for g in doc["gates"]}
    assert "alternative" not in listed and listed <= {"shut-out", "fallback", "off", "unknown"}
    # ... while the scan has alternatives (the legacy branches the issue counted as exclusions).
    summary = doc["summary"]["targets"]["sm_120"]
    assert summary["alternatives"] > 100
    assert summary["losses"] < summary["excluded"]


def test_flashinfer_062_lift_all_liftable_lifts_losses_and_reverts(
    tmp_path: Path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # JIT caches looked up here, never the real ones
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "-q", "--no-deps",
         "--no-compile", fetch_release("flashinfer-python==0.6.2")],
        check=True,
    )  # fmt: skip
    (site,) = (env / "lib").glob("python3*/site-packages")
    stock = sha256_snapshot(site)
    capsys.readouterr()
    assert main(["lift", "--all-liftable", "-t", "sm_120", "--env", str(env), "-y"]) == 0
    out, err = capsys.readouterr()
    (counts,) = [line for line in err.splitlines() if "liftable losses for sm_120" in line]
    planned = [line for line in out.splitlines() if line.startswith("  + ")]
    skipped = [line for line in out.splitlines() if line.startswith("  - ")]
    assert planned and f"{len(planned)} gates planned" in counts
    assert all(len(line) < 400 for line in skipped)  # one line each: the gate and why
    ids = [line.split()[1] for line in planned]
    assert main(["revert", "--all", "--env", str(env)]) == 0
    assert sha256_snapshot(site) == stock
    # Only losses were lifted: the release as shipped reads every planned gate as a loss for sm_120.
    stock_report = scan(["flashinfer-python==0.6.2"], [SM120])
    outcomes = Outcomes(stock_report.gates)
    by_id = {g.id: g for g in stock_report.gates}
    found = [by_id[i] for i in ids if i in by_id]
    assert found and all(outcomes.of(g, SM120).loss for g in found)


def test_sglang_deny_list_reads_in_deep_gemms_direction_and_the_fix_closes_it() -> None:
    old = scan(["sglang==0.5.19"], [SM120, SM121], only_python=True)
    (deny,) = [g for g in old.gates if g.location.path == CONFIGURER and g.location.line == 22]
    outcomes = Outcomes(old.gates)
    assert outcomes.of(deny, SM120).outcome is Outcome.FALLBACK and outcomes.of(deny, SM120).loss
    assert outcomes.of(deny, SM121).outcome is Outcome.GETS
    new = scan(["sglang==0.5.21"], [SM121], only_python=True)
    changes = [c for c in diff(old, new, [SM121]) if c.before is not None and c.before.id == deny.id]
    (change,) = changes
    assert change.change is ChangeKind.CLOSED
    assert change.after is not None and change.after.condition.startswith("sm_version in (120, 121)")


def test_flashinfer_063_enable_sm120_is_a_switch_off_for_every_target() -> None:
    report = scan(["flashinfer-python==0.6.3"], [SM120, Arch(9, 0)], only_python=True)
    (switch_gate,) = [
        g
        for g in report.gates
        if g.location.path == "flashinfer/jit/attention/fmha_v2/generator_utils.py"
        and g.location.line == 6772
    ]
    assert not switch_gate.admitted and not switch_gate.unknown
    (switch,) = switch_gate.switches
    assert switch.setting == "ENABLE_SM120=1" and SM120 in switch.admitted
    outcomes = Outcomes(report.gates)
    assert outcomes.of(switch_gate, SM120).outcome is Outcome.OFF
    assert outcomes.of(switch_gate, Arch(9, 0)).outcome is Outcome.SHUT_OUT
    assert not outcomes.of(switch_gate, Arch(9, 0)).loss  # no target gets it with the switch unset
