"""A CPU rehearsal of the two-GPU verify run (examples/h200x2_verify.sh).

``liftgate verify`` around ``torchrun --nproc_per_node 2 examples/tp_allreduce.py`` (gloo on the
CPU instead of NCCL), with a real lift applied: the chain fixture's three gates, lifted with
``lift --chain``. It checks what the GPU run relies on besides the GPUs: the lift switches state
between runs, the two-process workload's metric is read from rank 0's JSON line, and without
NVML the telemetry is a note, not an error. Needs torch (skipped without it); the per-GPU and
total telemetry of two GPUs is checked with a fake NVML in tests/test_verify.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from liftgate.cli.main import main
from liftgate.scan import scan

pytest.importorskip("torch")

ROOT = Path(__file__).parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "chain"


def test_verify_a_lift_around_a_two_process_torchrun_workload(
    tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    env = tmp_path / "env"
    fake_env(FIXTURE / "app", "app", "1.0", prefix=env)
    fake_env(FIXTURE / "kernlib", "kernlib", "2.0", prefix=env)
    (root,) = [
        g
        for g in scan([], ["sm_120"], env=str(env)).gates
        if g.location.path == "app/fusion.py" and g.location.line == 19
    ]
    assert main(["lift", "--chain", root.id, "--env", str(env), "-t", "sm_120", "--yes"]) == 0
    capsys.readouterr()
    assert main(["status", "--env", str(env), "--format", "json"]) == 0
    lift_id = json.loads(capsys.readouterr().out)["lifts"][0]["lift_id"]
    out = tmp_path / "verify.json"
    workload = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(ROOT / "examples" / "tp_allreduce.py"),
        "--device", "cpu", "--tokens", "32", "--hidden", "128", "--ffn", "512", "--steps", "5", "--warmup", "1",
    ]  # fmt: skip
    code = main(
        ["verify", lift_id, "--env", str(env), "--runs", "2", "--warmup", "0", "--threshold", "100",
         "--metric", "tokens_per_s=tokens_per_s", "--workdir", str(tmp_path / "runs"), "--format", "json",
         "-o", str(out), "--", *workload]
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert code == 0, doc["reasons"]
    assert doc["verdict"] == "pass" and doc["primary_metric"] == "tokens_per_s"
    runs = [r for r in doc["runs"] if not r["warmup"]]
    assert sorted(r["state"] for r in runs) == ["lifted", "lifted", "stock", "stock"]
    for run in runs:
        assert run["returncode"] == 0
        assert run["metrics"]["tokens_per_s"] > 0
        assert not run["telemetry"]["gpus"] and run["telemetry"]["note"]  # no NVML here: a note
    assert doc["final_state"] == "lifted"  # a pass keeps the lift
