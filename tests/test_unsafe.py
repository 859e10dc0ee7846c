"""Unsafe admissions (issue 20): a gate that lets a target into code using a feature it lacks.

The fixture ``outcomes/unsafe`` marks each gate ``unsafe: ARCH …`` / ``safe: ARCH …`` by reading the
code: a JIT filter too loose for its sources (flashinfer #2560's shape), one whose sources guard
themselves, a CUDA region under ``__CUDA_ARCH__ >= 1000`` that uses tcgen05 (and one whose use is
guarded by the feature macro), and SGLang 0.5.19's DeepGEMM deny-list shape (sglang #36551).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from liftgate.arch.parse import parse_target
from liftgate.cli.main import main
from liftgate.judge.verdict import judge_scan
from liftgate.model import VerdictKind
from liftgate.report import OutputFormat, render
from liftgate.report.interface import RenderOptions
from liftgate.report.json_format import load_schema
from liftgate.scan import scan

FIXTURE = Path(__file__).parent / "fixtures" / "outcomes" / "unsafe"
TARGETS = ("sm_100a", "sm_120a", "sm_121a", "sm_100")
MARK = re.compile(r"(unsafe|safe): ((?:sm_\d+[af]?\s*)+)")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))


def _marks() -> dict[tuple[str, int], dict[str, bool]]:
    marks: dict[tuple[str, int], dict[str, bool]] = {}
    for path in sorted(FIXTURE.rglob("*")):
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            comment = re.split(r"#|//", line, maxsplit=1)
            if len(comment) < 2 or "afe:" not in comment[1]:
                continue
            for word, archs in MARK.findall(comment[1]):
                for arch in archs.split():
                    marks.setdefault((path.relative_to(FIXTURE).as_posix(), number), {})[arch] = (
                        word == "unsafe"
                    )
    return marks


def test_every_marked_gate_is_unsafe_exactly_for_the_targets_marked() -> None:
    report = judge_scan(scan([str(FIXTURE)], [parse_target(t) for t in TARGETS], use_cache=False))
    marks = _marks()
    assert len(marks) == 5
    by_id = {g.id: g for g in report.gates}
    unsafe = {
        (by_id[v.gate_id].location.path, by_id[v.gate_id].location.line, v.target.name)
        for v in report.verdicts
        if v.kind is VerdictKind.UNSAFE
    }
    expected = {
        (path, line, arch) for (path, line), archs in marks.items() for arch, bad in archs.items() if bad
    }
    assert unsafe == expected
    # Each unsafe verdict names the missing feature and where it is used.
    for v in report.verdicts:
        if v.kind is VerdictKind.UNSAFE:
            assert v.missing and v.missing[0].feature.startswith("tcgen05")
            assert v.reasons[0].startswith(f"{v.target.name} is admitted here")


def test_unsafe_in_every_format_and_fail_on(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(FIXTURE), "-t", "sm_121a", "--no-cache"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("sm_121a: 3 unsafe admissions; loses")
    assert "unsafe (admitted into code that uses what it lacks" in captured.out
    assert "JIT module fmha_sm100 (loose/jit.py:" in captured.out
    assert "; sm_121a: 3 unsafe admissions;" in captured.err and "verdicts: 3 unsafe," in captured.err
    assert main(["scan", str(FIXTURE), "-t", "sm_121a", "--no-cache", "-q", "--fail-on", "unsafe"]) == 1
    assert "--fail-on unsafe: 3 gates match" in capsys.readouterr().err
    assert main(["scan", str(FIXTURE), "-t", "sm_100a", "--no-cache", "-q", "--fail-on", "unsafe"]) == 0
    capsys.readouterr()

    report = judge_scan(scan([str(FIXTURE)], [parse_target("sm_121a")], use_cache=False))
    doc = json.loads(render(report, OutputFormat.JSON, RenderOptions()))
    jsonschema.validate(doc, load_schema())
    assert doc["summary"]["targets"]["sm_121a"]["unsafe"] == 3
    assert doc["summary"]["verdicts"]["sm_121a"]["unsafe"] == 3
    sarif = json.loads(render(report, OutputFormat.SARIF, RenderOptions()))
    results = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "liftgate/unsafe-admission"]
    assert len(results) == 3 and {r["level"] for r in results} == {"error"}
    assert all("tcgen05-ld-st at " in r["message"]["text"] for r in results)
    rules = [r["id"] for r in sarif["runs"][0]["tool"]["driver"]["rules"]]
    assert results[0]["ruleIndex"] == rules.index("liftgate/unsafe-admission")
    markdown = render(report, OutputFormat.MARKDOWN, RenderOptions())
    assert "| unsafe |" in markdown.replace("| sm_121a | unsafe |", "| unsafe |")


def test_explain_shows_the_admitted_region_and_what_it_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    report = scan([str(FIXTURE)], [parse_target("sm_121a")], use_cache=False)
    (gate,) = [
        g for g in report.gates if g.location.path == "include/loose/epilogue.cuh" and g.location.line == 6
    ]
    assert main(["explain", gate.id, str(FIXTURE), "-t", "sm_121a", "-t", "sm_100a"]) == 0
    out = capsys.readouterr().out
    assert "sm_121a: UNSAFE  (the gate: admitted)" in out
    assert "sm_121a lacks tcgen05-ld-st" in out and "region, as sm_121a compiles it today:" in out
    assert "sm_100a: ADMITTED" in out


def test_a_chain_that_admits_a_target_unsafely_is_unsafe_for_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The root lets sm_121a in and the JIT filter under it admits 12.x into tcgen05 sources: the
    chain is unsafe for sm_121a (nothing of it shuts the target out, so no lift is asked of it),
    safe for sm_100a, listed by ``scan --by chain``, in the JSON, and it names the narrowing."""
    assert main(["scan", str(FIXTURE), "-t", "sm_121a", "-t", "sm_100a", "--by", "chain", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert (
        "sm_121a: UNSAFE — 2 links let it into code that uses what it lacks (tcgen05-ld-st): "
        "py-3540b3b238, pb-4cd4f4b342" in out
    )
    assert "sm_100a: nothing in this chain shuts it out" in out
    assert "liftgate lift pb-4cd4f4b342 --exclude sm_121a" in out
    assert (
        main(
            [
                "scan",
                str(FIXTURE),
                "-t",
                "sm_121a",
                "-t",
                "sm_100a",
                "--by",
                "chain",
                "-f",
                "json",
                "--no-cache",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, load_schema())
    (chain,) = doc["chains"]
    by_target = {t["target"]: t for t in chain["targets"]}
    assert by_target["sm_121a"]["unsafe"] == ["py-3540b3b238", "pb-4cd4f4b342"]
    assert by_target["sm_121a"]["verdict"] is None and not by_target["sm_121a"]["required"]
    assert by_target["sm_100a"]["unsafe"] == []


@pytest.mark.network
def test_flashinfer_066_cutlass_fmha_filter_is_unsafe_for_sm12x_not_sm100a(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """flashinfer #2560: 0.6.6's CUTLASS FMHA JIT filter [10, 11, 12] sends sm_12x into tcgen05 kernels."""
    monkeypatch.delenv("LIFTGATE_CACHE_DIR")  # the download cache the other network tests share
    archs = [parse_target(t) for t in ("sm_121a", "sm_120a", "sm_100a")]
    report = scan(["flashinfer-python==0.6.6"], archs, only_python=True)
    (fmha,) = [
        g
        for g in report.gates
        if g.location.path == "flashinfer/jit/attention/modules.py"
        and "supported_major_versions=[10, 11, 12]" in g.condition
        and any("fmha_cutlass_sm100.cu" in s for b in g.builds for s in b.sources)
    ]
    report = judge_scan(report, only=lambda g: g.id == fmha.id)
    verdicts = {v.target.name: v for v in report.verdicts if v.gate_id == fmha.id}
    assert set(verdicts) == {"sm_121a", "sm_120a"}  # nothing for sm_100a: it has what the code needs
    for verdict in verdicts.values():
        assert verdict.kind is VerdictKind.UNSAFE
        lacking = {u.feature for u in verdict.missing}
        assert {"tcgen05-mma", "tcgen05-ld-st"} <= lacking
        assert all(u.path and u.line for u in verdict.missing)
