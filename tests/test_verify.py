"""``liftgate verify``: A/B runs through the journal, metrics, comparisons, verdicts, telemetry.

The lifted environment is the synthetic judge package with its liftable gates lifted; the
"benchmark" is a small script that looks at the installed ``minijudge/ops.py`` to see which
state it runs in, and behaves as each test wants (slower, wrong, crashing). NVML is a fake.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from liftgate.arch.core import Arch
from liftgate.cli.main import main
from liftgate.lift.journal import Journal
from liftgate.lift.workflow import apply_plan, choose_gates, plan_env, scan_env
from liftgate.verify.compare import compare_files
from liftgate.verify.metrics import MetricSpec, collect, known_format, lookup
from liftgate.verify.telemetry import Sampler

FIXTURE = Path(__file__).parent / "fixtures" / "judge" / "minijudge"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the benchmarks write their outputs to the working directory


@pytest.fixture
def lifted_env(fake_env, tmp_path: Path):  # type: ignore[no-untyped-def]
    site = fake_env(FIXTURE, "minijudge", "0.1")
    prefix = tmp_path / "env"
    es = scan_env(str(prefix), Arch(12, 0), judge=True)
    ids, _ = choose_gates(es, Arch(12, 0), [], True, False)
    plan = plan_env(es, Arch(12, 0), ids)
    apply_plan(plan, str(prefix), environ={})
    return prefix, site, plan


def bench(tmp_path: Path, site: Path, body: str) -> Path:
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, os, sys\n"
        f"lifted = 'liftgate:' in open({str(site / 'minijudge' / 'ops.py')!r}).read()\n"
        "assert lifted == (os.environ['LIFTGATE_VERIFY_STATE'] == 'lifted')\n" + textwrap.dedent(body)
    )
    return script


def run_verify(prefix: Path, plan, tmp_path: Path, script: Path, *extra: str) -> tuple[int, dict]:  # type: ignore[no-untyped-def]
    out = tmp_path / "report.json"
    code = main(
        ["verify", plan.lift_id, "--env", str(prefix), "--runs", "3", "--warmup", "1", "--workdir", str(tmp_path / "w"),
         "--format", "json", "-o", str(out), *extra, "--", sys.executable, str(script)]
    )  # fmt: skip
    return code, json.loads(out.read_text())


def state_of(prefix: Path, plan) -> str:  # type: ignore[no-untyped-def]
    return "lifted" if any(d["lift_id"] == plan.lift_id for d in Journal(str(prefix)).active()) else "stock"


def test_correct_but_slower_is_a_regression_and_is_reverted(lifted_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, site, plan = lifted_env
    script = bench(
        tmp_path,
        site,
        """
        import numpy as np
        np.save(os.environ.get('OUT', 'out.npy'), np.arange(8.0))
        print(json.dumps({"throughput": 60.0 if lifted else 100.0, "note": "x"}))
    """,
    )
    code, doc = run_verify(prefix, plan, tmp_path, script, "--compare-output", "out.npy")
    assert code == 3 and doc["verdict"] == "regression"
    assert doc["primary_metric"] == "throughput"
    row = doc["summary"]["throughput"]
    assert row["stock"]["median"] == 100.0 and row["lifted"]["median"] == 60.0 and row["ratio"] == 0.6
    assert not row["within_noise"]
    assert all(c["equal"] for c in doc["comparisons"]) and len(doc["comparisons"]) == 3
    assert [(r["state"], r["warmup"]) for r in doc["runs"]] == [("stock", True), ("lifted", True)] + [
        ("stock", False),
        ("lifted", False),
    ] * 3
    assert state_of(prefix, plan) == "stock"  # --revert-on regress (the default)
    assert "reverted" in doc["final_state"]


def test_faster_and_equal_passes_and_stays_lifted(lifted_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, site, plan = lifted_env
    script = bench(tmp_path, site, 'print(json.dumps({"output_throughput": 120.0 if lifted else 100.0}))\n')
    code, doc = run_verify(prefix, plan, tmp_path, script)
    assert code == 0 and doc["verdict"] == "pass"
    assert "better by 20.0%" in doc["reasons"][0]
    assert state_of(prefix, plan) == "lifted"


def test_different_output_is_a_failure_whatever_the_speed(lifted_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, site, plan = lifted_env
    script = bench(
        tmp_path,
        site,
        """
        json.dump({"logits": [1.0, 2.0, 3.5 if lifted else 3.0]}, open('out.json', 'w'))
        print(json.dumps({"throughput": 500.0 if lifted else 100.0}))
    """,
    )
    code, doc = run_verify(prefix, plan, tmp_path, script, "--compare-output", "out.json")
    assert code == 1 and doc["verdict"] == "failure"
    assert any("$.logits[2]" in r for r in doc["reasons"])
    assert state_of(prefix, plan) == "stock"


def test_no_kernel_image_in_the_lifted_state_is_a_failure_and_never_keeps_it(
    lifted_env, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    prefix, site, plan = lifted_env
    script = bench(
        tmp_path,
        site,
        """
        if lifted:
            print("RuntimeError: CUDA error: no kernel image is available for execution on the device")
            sys.exit(1)
        print(json.dumps({"throughput": 100.0}))
    """,
    )
    code, doc = run_verify(prefix, plan, tmp_path, script, "--revert-on", "fail")
    assert code == 1 and "no kernel image for the device (exit status 1)" in doc["reasons"][0]
    assert state_of(prefix, plan) == "stock"


def test_a_failing_stock_run_is_an_error_and_the_lift_is_left_as_it_was(
    lifted_env, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    prefix, site, plan = lifted_env
    script = bench(tmp_path, site, "sys.exit(0 if lifted else 4)\n")
    code = main(
        [
            "verify",
            plan.lift_id,
            "--env",
            str(prefix),
            "--workdir",
            str(tmp_path / "w"),
            "--",
            sys.executable,
            str(script),
        ]
    )
    assert code == 2
    assert "fails in the stock state too (exit status 4" in capsys.readouterr().err
    assert state_of(prefix, plan) == "lifted"


def test_never_revert_and_wall_time_as_the_primary_metric(lifted_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, site, plan = lifted_env
    script = bench(tmp_path, site, "import time; time.sleep(0.3 if lifted else 0.0)\n")
    code, doc = run_verify(prefix, plan, tmp_path, script, "--revert-on", "never", "--runs", "2")
    assert doc["primary_metric"] == "wall_s" and doc["verdict"] == "regression" and code == 3
    assert state_of(prefix, plan) == "lifted"


def test_usage_errors(lifted_env, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, _site, plan = lifted_env
    assert main(["verify", plan.lift_id, "--env", str(prefix)]) == 2
    assert main(["verify", "lg-nope", "--env", str(prefix), "--", "true"]) == 2
    assert main(["verify", plan.lift_id, "--env", str(prefix), "--metric", "bad", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert (
        "give the command to run after --" in err
        and "no single active lift 'lg-nope'" in err
        and "NAME=FILE:JSONPATH" in err
    )


# -- metrics, comparisons and telemetry on their own -------------------------------------------


def test_metric_readers(tmp_path: Path) -> None:
    sglang = {
        "output_throughput": 3712.5,
        "request_throughput": 7.2,
        "mean_ttft_ms": 41.0,
        "mean_itl_ms": 9.5,
    }
    assert known_format(sglang) == {
        "output_throughput": 3712.5,
        "request_throughput": 7.2,
        "ttft_ms": 41.0,
        "itl_ms": 9.5,
    }
    aiperf = {
        "output_token_throughput": {"unit": "tokens/sec", "avg": 236.0},
        "time_to_first_token": {"avg": 88.0},
    }
    assert known_format(aiperf) == {"output_throughput": 236.0, "ttft_ms": 88.0}
    lines = tmp_path / "bench.jsonl"
    lines.write_text(
        json.dumps({"output_throughput": 1.0}) + "\n" + json.dumps({"output_throughput": 2.0}) + "\n"
    )
    custom = tmp_path / "r.json"
    custom.write_text(json.dumps({"results": [{"tok_per_s": 5.5}]}))
    spec = MetricSpec.parse(f"tps={custom}:results[0].tok_per_s")
    got = collect('log\n{"x": 1, "name": "a"}\n', [spec, MetricSpec.parse("x2=x")], [str(lines)])
    assert got == {"output_throughput": 2.0, "x": 1.0, "tps": 5.5, "x2": 1.0}
    assert lookup({"a": [{"b": 1}]}, "a[1].b") is None


def test_comparisons(tmp_path: Path) -> None:
    import numpy as np

    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(a, np.array([1.0, 2.0, np.nan]))
    np.save(b, np.array([1.0, 2.0 + 1e-9, np.nan]))
    assert compare_files(str(a), str(b)).equal
    np.save(b, np.array([1.0, 2.1, np.nan]))
    result = compare_files(str(a), str(b), rtol=1e-3)
    assert not result.equal and "max abs diff 0.1" in result.detail
    t1, t2 = tmp_path / "x.txt", tmp_path / "y.txt"
    t1.write_text("hello\n")
    t2.write_text("hello\n")
    assert compare_files(str(t1), str(t2)).equal
    assert compare_files(str(t1), str(tmp_path / "none.txt")).detail == "missing in the lifted run"


class NVMLError(Exception):
    pass


class FakeNVML:
    """Two GPUs; the second has no energy counter and no power readings (as on GB10)."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA RTX PRO 6000" if h == 0 else b"NVIDIA GB10"

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise NVMLError("Not Supported")
        return 250_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 600_000

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=90 if h == 0 else 40, memory=50)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return 2400

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=8 << 30)

    def nvmlDeviceGetTemperature(self, h: int, kind: int) -> int:
        return 65

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 0x4 | 0x1

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if h == 1:
            raise NVMLError("Not Supported")
        self.energy = getattr(self, "energy", 0) + 5000
        return self.energy


def test_telemetry_per_gpu_total_and_unsupported_fields() -> None:
    import time

    with Sampler(0.01, nvml=FakeNVML()) as sampler:
        time.sleep(0.15)
    summary = sampler.summary()
    first, second = summary["gpus"]
    assert first["name"] == "NVIDIA RTX PRO 6000" and first["power_w_mean"] == 250.0
    assert abs(first["power_pct_mean"] - 41.67) < 0.01
    assert first["energy_j"] == 5.0 and first["energy_source"] == "driver energy counter"
    assert first["throttle_reasons"] == ["sw_power_cap"] and first["samples"] >= 10  # ≥ 10 Hz and more
    assert second["power_w_mean"] is None and second["energy_j"] is None
    assert {"power_w", "energy"} <= set(second["unsupported"])
    assert summary["total"]["power_w_mean"] == 250.0 and summary["total"]["energy_j"] is None
    assert summary["total"]["sm_util_mean"] == 65.0


def test_telemetry_without_a_gpu_is_a_note() -> None:
    def no_nvml():  # type: ignore[no-untyped-def]
        raise ImportError("No module named 'pynvml'")

    with Sampler(loader=no_nvml) as sampler:
        pass
    assert not sampler.available and "no GPU telemetry" in (sampler.note or "")
    assert sampler.summary()["gpus"] == []


def test_verify_a_plan_file_applies_it_first(fake_env, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    site = fake_env(FIXTURE, "minijudge", "0.1")
    prefix = tmp_path / "env"
    assert (
        main(
            ["lift", "--all-liftable", "-t", "sm_120", "--env", str(prefix), "--dry-run", "--format", "json"]
        )
        == 0
    )
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(capsys.readouterr().out)
    script = bench(tmp_path, site, 'print(json.dumps({"output_throughput": 100.0}))\n')
    out = tmp_path / "r.json"
    code = main(["verify", "--plan", str(plan_file), "--env", str(prefix), "--runs", "2", "--warmup", "0",
                 "--workdir", str(tmp_path / "w"), "--format", "json", "-o", str(out), "--", sys.executable, str(script)])  # fmt: skip
    doc = json.loads(out.read_text())
    assert code == 0 and doc["verdict"] == "pass" and "within noise" in doc["reasons"][0]
    assert doc["final_state"] == "lifted"
    (lift,) = Journal(str(prefix)).active()
    assert lift["lift_id"] == json.loads(plan_file.read_text())["lift_id"]


def test_every_report_format_renders_the_same_outcome(lifted_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from liftgate.verify.report import outcome_from_json, render_json, render_markdown, render_text

    prefix, site, plan = lifted_env
    script = bench(tmp_path, site, 'print(json.dumps({"output_throughput": 60.0 if lifted else 100.0}))\n')
    _code, doc = run_verify(prefix, plan, tmp_path, script)
    outcome = outcome_from_json(doc)
    text = render_text(outcome)
    assert "output_throughput *" in text and "100 [100–100]" in text and "verdict: REGRESSION" in text
    md = render_markdown(outcome)
    assert (
        md.startswith("**liftgate verify: regression**")
        and "| output_throughput * | 100 [100–100] | 60 [60–60] | 0.6 |" in md
    )
    again = json.loads(render_json(outcome))
    assert (
        again["schema_version"] == 1
        and again["verdict"] == doc["verdict"]
        and again["summary"] == doc["summary"]
    )
