"""The ``liftgate scan`` command end to end on small local inputs: exit codes, formats, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from liftgate.cli.main import main

GATED = """\
#pragma once
// gate: admits sm_90 and newer, compiled out elsewhere
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)
__device__ void fast() {}
#endif
"""


def _package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    (root / "include").mkdir(parents=True)
    (root / "include" / "gated.cuh").write_text(GATED)
    return root


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))


def test_fail_on_excluded_exits_1_and_0_when_admitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _package(tmp_path)
    code, out, err = _run(["scan", str(root), "--target", "sm_120", "--fail-on", "excluded"], capsys)
    assert code == 1
    assert "gated.cuh" in out and "shut out" in out  # the default view: what sm_120 loses
    assert "1 gate," in err and "1 excludes sm_120" in err and "sm_120 loses 1 code path in 1 feature" in err
    code, out, _ = _run(["scan", str(root), "--target", "sm_90", "--fail-on", "excluded"], capsys)
    assert code == 0
    assert "gated.cuh" not in out  # --show excluded (the default) lists nothing for sm_90
    code, out, _ = _run(["scan", str(root), "--target", "sm_120"], capsys)
    assert code == 0  # without --fail-on, findings are reported but do not fail


def test_json_output_to_file_matches_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from jsonschema import validate

    from liftgate.report.json_format import load_schema

    root = _package(tmp_path)
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir()
    code, out, _ = _run(
        ["scan", str(root), "-t", "rtx5090", "-t", "sm_90a", "--format", "json", "-o", str(report), "-q"],
        capsys,
    )
    assert code == 0 and out == ""
    data = json.loads(report.read_text())
    validate(data, load_schema())
    (gate,) = data["gates"]
    assert gate["line"] == 3 and gate["else_kind"] == "none"
    assert gate["status"] == {"sm_120": "excluded", "sm_90a": "admitted"}
    assert gate["admitted_compact"] == "sm_90–sm_110 (all variants); not sm_120+"


@pytest.mark.parametrize("fmt", ["table", "json", "sarif", "markdown"])
def test_every_format_renders(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["scan", str(_package(tmp_path)), "-t", "sm_120", "--format", fmt, "-q"], capsys)
    assert code == 0
    assert "gated.cuh" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["scan", ".", "--target", "rtx5900"], "did you mean rtx5090"),
        (["scan", "/no/such/dir", "--target", "sm_120"], "no such file, directory or package"),
        (["scan", ".", "--target", "sm_120", "--cuda-version", "thirteen"], "invalid CUDA version"),
        (["scan", ".", "--target", "sm_120", "--jobs", "0"], "--jobs must be at least 1"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(_package(tmp_path))
    code, out, err = _run(args, capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and out == ""


def test_no_target_and_no_gpu_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if nvidia-ml-py were not installed
    code, _, err = _run(["scan", str(_package(tmp_path))], capsys)
    assert code == 2
    assert "--target" in err and "Traceback" not in err


def test_corrupt_wheel_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = tmp_path / "broken-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 this is not a zip archive")
    code, _, err = _run(["scan", str(wheel), "-t", "sm_120"], capsys)
    assert code == 2
    assert "broken-1.0-py3-none-any.whl" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_files_are_skipped_with_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _package(tmp_path)
    inc = root / "include"
    (inc / "binary.h").write_bytes(b"\x7fELF\x00\x00\x00#if __CUDA_ARCH__ >= 900\n")
    (inc / "latin1.cuh").write_bytes(b"// caf\xe9\n#if __CUDA_ARCH__ >= 900\nint x;\n#endif\n")
    (inc / "unbalanced.cuh").write_text("#if __CUDA_ARCH__ >= 800\nint y;\n")
    (inc / "stray.cuh").write_text("int z;\n#endif\n#if __CUDA_ARCH__ >= 800\n#endif\n")
    (inc / "huge.h").write_bytes(
        b"#if __CUDA_ARCH__ >= 900\n" + b"// padding\n" * (2 * 1024 * 1024 // 11) + b"#endif\n"
    )
    os.symlink(inc, inc / "loop")
    json_out = tmp_path / "r.json"
    code, _, err = _run(
        ["scan", str(root), "-t", "sm_120", "--max-file-size", "1", "--format", "json", "-o", str(json_out)],
        capsys,
    )
    assert code == 0, err
    assert "Traceback" not in err
    data = json.loads(json_out.read_text())
    reasons = {Path(s["path"]).name.split(":")[0]: s["reason"] for s in data["skips"]}
    assert "binary" in reasons["binary.h"]
    assert "UTF-8" in reasons["latin1.cuh"]
    assert "unbalanced" in reasons["unbalanced.cuh"] and "line 1" in reasons["unbalanced.cuh"]
    assert "unbalanced" in reasons["stray.cuh"] and "#endif at line 2" in reasons["stray.cuh"]
    assert "limit" in reasons["huge.h"]
    assert any("loop" in s["path"] or "symlink" in s["reason"] for s in data["skips"])
    assert [g["path"] for g in data["gates"]] == ["include/gated.cuh"]  # nothing partial from the bad files
    assert data["summary"]["files_skipped"] >= 5


def test_rescan_is_served_from_cache_and_sees_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _package(tmp_path)
    args = ["scan", str(root), "-t", "sm_120", "--format", "json", "--show", "all", "-q"]
    _, first, _ = _run(args, capsys)
    _, second, _ = _run(args, capsys)
    assert json.loads(first)["gates"] == json.loads(second)["gates"]
    header = root / "include" / "gated.cuh"
    header.write_text(GATED.replace("< 1200", "< 1300"))
    _, third, _ = _run(args, capsys)
    (gate,) = json.loads(third)["gates"]
    assert gate["status"]["sm_120"] == "admitted"


def test_python_dash_m_and_help_are_quick() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "liftgate", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "scan" in proc.stdout
    heavy = [
        line for line in proc.stderr.splitlines() if line.rstrip().endswith(("rich", "liftgate.detect.cuda"))
    ]
    assert heavy == [], "liftgate --help must not import rich or the detectors"


def test_wheel_source_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = tmp_path / "minikern-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("minikern/include/gated.cuh", GATED)
        zf.writestr(
            "minikern-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: minikern\nVersion: 0.1\n"
        )
        zf.writestr("minikern-0.1.dist-info/RECORD", "")
    code, out, _ = _run(["scan", str(wheel), "-t", "sm_121", "--format", "markdown", "-q"], capsys)
    assert code == 0
    assert "minikern" in out and "gated.cuh" in out


# --- the first hour: what the report says about itself ---------------------------------------------


def _many_gates_package(tmp_path: Path, count: int, examples: int = 0) -> Path:
    """A tree whose include/many.cuh has ``count`` gates excluding sm_120, and examples/ ``examples`` more."""
    root = tmp_path / "pkg"
    for folder, n in (("include", count), ("cutlass/examples", examples)):
        if not n:
            continue
        (root / folder).mkdir(parents=True, exist_ok=True)
        lines = ["#pragma once"]
        for i in range(n):
            lines += [
                "#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)"
                f" // kernel schedule {i}, enabled for this build of the library",
                f"__device__ void k{i}();",
                "#endif",
            ]
        (root / folder / "many.cuh").write_text("\n".join(lines) + "\n")
    return root


def test_fail_on_says_which_gates_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _many_gates_package(tmp_path, 7)
    code, out, err = _run(
        ["scan", str(root), "-t", "sm_120", "--fail-on", "excluded", "--no-judge", "-q", "-f", "json"], capsys
    )
    assert code == 1
    ids = [g["id"] for g in json.loads(out)["gates"]]
    (line,) = err.splitlines()  # even with -q: it is the reason for the exit status
    first = ", ".join(f"{gate_id} include/many.cuh:{2 + 3 * i}" for i, gate_id in enumerate(ids[:5]))
    assert line == f"--fail-on excluded: 7 gates match (first: {first}, …)"
    code, _, err = _run(["scan", str(_package(tmp_path / "one")), "-t", "sm_120", "--fail-on", "any"], capsys)
    assert code == 1
    assert re.search(
        r"^--fail-on any: 1 gate matches \(first: cu-[0-9a-f]+ include/gated\.cuh:3\)$", err, re.M
    )
    code, _, err = _run(["scan", str(_package(tmp_path / "two")), "-t", "sm_90", "--fail-on", "any"], capsys)
    assert code == 0 and "--fail-on" not in err


def test_a_long_table_has_the_summary_before_and_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _many_gates_package(tmp_path, 41)
    _, _, err = _run(["scan", str(root), "-t", "sm_120", "--no-judge"], capsys)
    summary = "scanned 1 file in 1 package (0 skipped), 41 gates, 41 exclude sm_120, 0 unknown"
    assert [line.startswith(summary) for line in err.splitlines()] == [True, True]
    _, _, err = _run(
        ["scan", str(root), "-t", "sm_120", "--no-judge", "--exclude-path", "*", "-f", "table"], capsys
    )
    assert len(err.splitlines()) == 1  # a short table: once, after it


def test_kind_and_path_narrow_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _many_gates_package(tmp_path, 3, examples=2)
    _, _, err = _run(["scan", str(root), "-t", "sm_120", "--no-judge", "--kind", "cmake"], capsys)
    assert "0 cmake gates (of 5 found), 0 exclude sm_120" in err
    _, out, err = _run(
        ["scan", str(root), "-t", "sm_120", "--no-judge", "-f", "json", "--exclude-path", "*/examples/*"],
        capsys,
    )
    assert [g["path"] for g in json.loads(out)["gates"]] == ["include/many.cuh"] * 3
    assert "3 gates at the paths chosen (of 5 found), 3 exclude sm_120" in err
    _, out, _ = _run(
        ["scan", str(root), "-t", "sm_120", "--no-judge", "-f", "sarif", "--path", "cutlass/*", "-q"], capsys
    )
    uris = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in json.loads(out)["runs"][0]["results"]
    }
    assert uris == {"cutlass/examples/many.cuh"}


def test_verdict_option_judges_and_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _package(tmp_path)
    _, out, _ = _run(["scan", str(root), "-t", "sm_120", "-f", "json", "-q", "--no-judge"], capsys)
    assert "verdicts" not in json.loads(out)["gates"][0]
    _, out, _ = _run(["scan", str(root), "-t", "sm_120", "-f", "json", "-q", "--no-judge", "--verdict", "liftable",
                      "--verdict", "blocked", "--verdict", "unknown"], capsys)  # fmt: skip
    (gate,) = json.loads(out)["gates"]  # --verdict judges, even with --no-judge
    (verdict,) = gate["verdicts"]
    other = next(v for v in ("liftable", "blocked", "unknown") if v != verdict["verdict"])
    _, out, _ = _run(["scan", str(root), "-t", "sm_120", "--verdict", other], capsys)
    assert "gated.cuh" not in out and f"(--verdict {other})" in out


def test_markdown_over_githubs_limit_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _many_gates_package(tmp_path, 600)
    _, out, err = _run(
        ["scan", str(root), "-t", "sm_120", "--no-judge", "-f", "markdown", "--show", "all"], capsys
    )
    assert len(out) > 65_536
    assert "> **Note:** this Markdown report is" in out.splitlines()[2]
    assert f"liftgate: this Markdown report is {len(out):,} characters long, over the 65,536" in err
    _, out, err = _run(["scan", str(root), "-t", "sm_120", "--no-judge", "-f", "markdown"], capsys)
    assert len(out) < 65_000 and "65,536" not in err
    assert out.rstrip("\n").splitlines()[-1].endswith("more gates not shown: use `--show all` (too long for a "
                                                       "GitHub comment) or `--format json`")  # fmt: skip


def test_a_command_runs_with_fewer_collections_and_gives_the_thresholds_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import gc

    import liftgate.cli.arches_cmd as arches_cmd
    from liftgate.cli.main import GC_THRESHOLDS

    seen: list[tuple[int, int, int]] = []
    real = arches_cmd.run
    monkeypatch.setattr(arches_cmd, "run", lambda args: seen.append(gc.get_threshold()) or real(args))
    before = gc.get_threshold()
    assert main(["arches"]) == 0
    assert seen == [GC_THRESHOLDS]
    assert gc.get_threshold() == before


def test_the_reported_time_includes_the_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's seconds are what the user waited for: a judged scan's time counts the judge
    (it was the detection's alone, a quarter short on a cold scan of FlashInfer and SGLang)."""
    import types

    import liftgate.judge.verdict as verdict
    from liftgate.cli import scan_cmd

    clock = [0.0]
    monkeypatch.setattr(scan_cmd, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    real = verdict.judge_scan

    def slow_judge(*args: object, **kwargs: object) -> object:
        clock[0] += 1000.0  # the judge "takes" 1000 s on the command's clock
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(verdict, "judge_scan", slow_judge)
    root = str(_package(tmp_path))
    code, out, err = _run(["scan", root, "-t", "sm_120", "-j", "1", "-f", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["summary"]["elapsed_s"] == 1000.0
    code, out, err = _run(["scan", root, "-t", "sm_120", "-j", "1", "--no-judge"], capsys)
    assert code == 0 and err.rstrip().endswith("— 0.00 s")  # not judged: the judge's time is not counted
