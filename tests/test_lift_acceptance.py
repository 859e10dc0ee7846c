"""Acceptance for lift on real releases: the three layers of FlashInfer all-reduce fusion for sm_120.

sglang==0.5.23 and flashinfer-python==0.6.2 are installed with ``pip install --no-deps`` into a
throwaway virtual environment (wheels from liftgate's download cache). The SGLang guard in
``srt/layers/flashinfer_comm_fusion.py``, FlashInfer's ``gen_trtllm_comm_module`` filter and the
13 ``trtllm_allreduce.cuh`` gates are lifted for sm_120; then the environment is scanned again,
the patched Python compiles, the patched header preprocesses for sm_120a and sm_90a (sm_90a
unchanged), the exported series applies with ``patch -p1`` to fresh unpacked wheels and with
``apply-patches`` to a second environment, and ``revert --all`` restores every file's sha256.
"""

from __future__ import annotations

import json
import os
import py_compile
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import fetch_release, sha256_snapshot, venv_with
from liftgate.arch.core import Arch
from liftgate.cli.main import main
from liftgate.lift.workflow import apply_plan, choose_chain, choose_gates, export_series, plan_env, scan_env
from liftgate.model import Status

pytestmark = pytest.mark.network

SM120 = Arch(12, 0)
HEADER = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"
CONDITION = "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
COMM_PY = "flashinfer/jit/comm.py"
SGLANG_PY = "sglang/srt/layers/flashinfer_comm_fusion.py"


def _preprocess(nvcc: str, site: Path, arch: str) -> str:
    data = site / "flashinfer" / "data"
    out = subprocess.run(
        [nvcc, "-E", "-x", "cu", f"-arch={arch}", f"-I{data / 'include'}", f"-I{data / 'spdlog' / 'include'}", str(site / HEADER)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    out = out.replace(str(site), "<root>")  # __FILE__ expansions
    return "\n".join(line for line in out.splitlines() if not re.match(r"#\s*\d+ ", line))


def test_lift_allreduce_fusion_for_sm120_export_reapply_and_revert(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # JIT caches looked up here, never the real ones
    wheels = [fetch_release("flashinfer-python==0.6.2"), fetch_release("sglang==0.5.23")]
    env = tmp_path / "env"
    site = venv_with(env, wheels)
    stock = sha256_snapshot(site)

    es = scan_env(str(env), SM120, judge=lambda g: g.location.path in (HEADER, COMM_PY, SGLANG_PY))
    header_gates = [g for g in es.report.gates if g.location.path == HEADER and g.condition == CONDITION]
    (comm_filter,) = [g for g in es.report.gates if g.location.path == COMM_PY and g.location.line == 61]
    (sglang_guard,) = [g for g in es.report.gates if g.location.path == SGLANG_PY and g.location.line == 48]
    assert len(header_gates) == 13
    wanted = [g.id for g in header_gates] + [comm_filter.id, sglang_guard.id]

    # `lift --chain` finds the same 15 gates from the SGLang guard alone (tests/test_chain_network.py
    # shows how), and refuses them whole for plain sm_120 unless forced, for the reason below.
    choice = choose_chain(es, SM120, sglang_guard.id, force=False)
    assert set(choice.gate_ids) == set(wanted)
    assert choice.refusal is not None and "cvt-fp4" in choice.refusal
    assert choose_chain(es, SM120, sglang_guard.id, force=True).refusal is None

    # The judge blocks the filter for plain sm_120: its sources use FP4 conversions only sm_120a has
    # (FlashInfer's JIT builds sm_120a). Lifting for sm_120 therefore needs --force for that gate.
    _ids, refused = choose_gates(es, SM120, wanted, False, False)
    assert [r.gate_id for r in refused] == [comm_filter.id]
    assert "cvt-fp4" in refused[0].reason and "--force" in refused[0].reason
    ids, refused = choose_gates(es, SM120, wanted, False, True)
    assert not refused
    plan = plan_env(es, SM120, ids)
    assert plan.verified and not plan.skipped
    assert {p.gate_id for p in plan.planned} == set(wanted)
    assert {(f.package, f.path) for f in plan.files} == {
        ("flashinfer-python", HEADER), ("flashinfer-python", COMM_PY), ("sglang", SGLANG_PY)
    }  # fmt: skip
    by_path = {f.path: f for f in plan.files}
    assert (
        "supported_major_versions=[9, 10, 12]\n    )  # liftgate: +sm_120 lg-"
        in by_path[COMM_PY].after.decode()
    )
    assert (
        "if not (get_platform().is_sm90 or get_platform().is_sm100 or torch.cuda.get_device_capability() == (12, 0)):"
        in by_path[SGLANG_PY].after.decode()
    )
    series = tmp_path / "series"
    export_series(plan, str(series))

    doc = apply_plan(plan, str(env))
    assert doc["state"] == "applied"
    lifted = sha256_snapshot(site)
    assert {k for k in stock if stock[k] != lifted[k]} == {HEADER, COMM_PY, SGLANG_PY}

    # Scanned again: the 15 gates admit sm_120, and no other gate of either package changed.
    again = scan_env(str(env), SM120)
    lifted_lines = {(HEADER, g.location.line) for g in header_gates} | {(COMM_PY, 61), (SGLANG_PY, 48)}
    after_by_loc = {(g.location.path, g.location.line, g.kind): g for g in again.report.gates}
    for path, line in lifted_lines:
        (gate,) = [g for (p, n, _k), g in after_by_loc.items() if p == path and n == line]
        assert gate.status(SM120) is Status.ADMITTED, (path, line)
    before = {
        (g.id, g.admitted.mask, g.unknown.mask)
        for g in es.report.gates
        if (g.location.path, g.location.line) not in lifted_lines
    }
    after = {
        (g.id, g.admitted.mask, g.unknown.mask)
        for g in again.report.gates
        if (g.location.path, g.location.line) not in lifted_lines
    }
    assert before == after

    for path in (COMM_PY, SGLANG_PY):
        py_compile.compile(str(site / path), cfile=str(tmp_path / "check.pyc"), doraise=True)

    nvcc = shutil.which("nvcc")
    if nvcc:
        lifted_90a, lifted_120a = _preprocess(nvcc, site, "sm_90a"), _preprocess(nvcc, site, "sm_120a")
        stock_site = tmp_path / "stock"
        for sub in ("include", "spdlog"):
            shutil.copytree(site / "flashinfer" / "data" / sub, stock_site / "flashinfer" / "data" / sub)
        (stock_site / HEADER).write_bytes(by_path[HEADER].before)
        stock_90a, stock_120a = (
            _preprocess(nvcc, stock_site, "sm_90a"),
            _preprocess(nvcc, stock_site, "sm_120a"),
        )
        assert lifted_90a == stock_90a  # sm_90a compiles exactly what it did
        pdl = ("cudaGridDependencySynchronize()", "cudaTriggerProgrammaticLaunchCompletion()")
        assert sum(lifted_120a.count(c) for c in pdl) == sum(stock_90a.count(c) for c in pdl)
        assert sum(stock_120a.count(c) for c in pdl) < sum(lifted_120a.count(c) for c in pdl)

    # The series applies with patch -p1 to fresh unpacked wheels, byte for byte.
    if shutil.which("patch"):
        fresh = tmp_path / "fresh"
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(fresh, [n for n in zf.namelist() if n in (HEADER, COMM_PY, SGLANG_PY)])
        for name in (
            line for line in (series / "series").read_text().splitlines() if line and not line.startswith("#")
        ):
            subprocess.run(["patch", "-p1", "-s", "-i", str(series / name)], cwd=fresh, check=True)
        for path in (HEADER, COMM_PY, SGLANG_PY):
            assert (fresh / path).read_bytes() == by_path[path].after, path

    # apply-patches re-applies it to a second environment, relocating each gate by identity.
    env2 = tmp_path / "env2"
    site2 = venv_with(env2, wheels)
    assert main(["apply-patches", str(series), "--env", str(env2), "--yes"]) == 0
    for path in (HEADER, COMM_PY, SGLANG_PY):
        assert (site2 / path).read_bytes() == by_path[path].after, path
    meta = json.loads((series / "liftgate-series.json").read_text())
    assert meta["target"] == "sm_120" and len(meta["gates"]) == 15

    assert main(["revert", "--all", "--env", str(env)]) == 0
    assert sha256_snapshot(site) == stock
    assert main(["revert", "--all", "--env", str(env2)]) == 0
    assert os.path.isdir(env / ".liftgate")
