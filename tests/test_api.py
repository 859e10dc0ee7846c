"""The documented library API: ``liftgate.scan(sources, targets) -> Report`` and findings."""

from __future__ import annotations

from pathlib import Path

import pytest

import liftgate
from liftgate.arch.core import Arch
from liftgate.model import Status

HEADER = """\
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(MY_BUILD_FLAG)
__device__ void fast();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
__device__ void consumer();
#endif
"""


def test_scan_api_and_findings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "k.cuh").write_text(HEADER)
    (pkg / "build.py").write_text('flags = ["-DMY_BUILD_FLAG"]\n')  # the build may set it: unknown
    report = liftgate.scan(str(pkg), ["sm_120", "sm_80"], use_cache=False)
    assert [t.arch.name for t in report.targets] == ["sm_120", "sm_80"]
    first, second = report.gates
    sm120, sm80 = Arch(12, 0), Arch(8, 0)
    by_status = {f.gate.location.line: f for f in report.findings(sm120)}
    assert by_status[2].status is Status.UNKNOWN
    assert "MY_BUILD_FLAG" in by_status[2].reason
    assert first.depends_on and "MY_BUILD_FLAG" in first.depends_on[0]
    # The #elif is evaluated after the #if: for sm_120 it is taken only if MY_BUILD_FLAG is not set.
    assert second.status(sm120) is Status.UNKNOWN
    assert second.status(sm80) is Status.EXCLUDED
    assert {f.status for f in report.findings(sm80)} == {Status.EXCLUDED}
    assert "false for sm_80" in report.findings(sm80)[0].reason
    assert report.excluding(sm80) == [first, second]


def test_macro_nothing_defines_is_undefined_and_said(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "k.cuh").write_text(HEADER)  # no build file passes MY_BUILD_FLAG here
    report = liftgate.scan(str(pkg), ["sm_120"], use_cache=False, cache_dir=str(tmp_path / "c"))
    # Never defined or passed: the #if is compiled out for every target unless the build passes the
    # flag (a switch gate, which admits nothing as things stand), and the #elif decides.
    switch, gate = report.gates
    assert switch.location.line == 2 and not switch.admitted and not switch.unknown
    assert [(w.setting, w.admitted.render()) for w in switch.switches] == [
        ("-DMY_BUILD_FLAG", "sm_90–sm_121 (all variants)")
    ]
    assert gate.location.line == 4 and gate.directive == "#elif"
    assert gate.status(Arch(12, 0)) is Status.ADMITTED
    assert gate.admitted.render() == "sm_120–sm_121 (all variants)"


def test_feature_tests_are_named_as_such(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "k.cuh").write_text("#if __has_include(<cuda_fp4.h>) && __CUDA_ARCH__ >= 1000\nint x;\n#endif\n")
    (gate,) = liftgate.scan(str(pkg), ["sm_100"], use_cache=False, cache_dir=str(tmp_path / "c")).gates
    assert gate.status(Arch(10, 0)) is Status.UNKNOWN and gate.status(Arch(9, 0)) is Status.EXCLUDED
    assert gate.depends_on == (
        "__has_include(…) (a compiler feature test; its answer depends on the toolchain)",
    )
