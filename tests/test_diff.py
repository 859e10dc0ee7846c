"""``liftgate diff``: gates matched across two releases by identity, line and order."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from liftgate.arch.parse import parse_target
from liftgate.cli.main import main
from liftgate.diff import diff
from liftgate.scan import scan

OLD = """\
#pragma once
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)
__device__ void a();
#endif
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
__device__ void b();
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ void c();
#endif
"""
NEW = """\
#pragma once
// a new comment moves everything down
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
__device__ void a();
#endif
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 800)
__device__ void b();
#endif
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 1000) && (__CUDA_ARCH__ < 1200)
__device__ void d();
#endif
"""


@pytest.fixture
def releases(tmp_path: Path) -> tuple[str, str]:
    for name, text in (("old", OLD), ("new", NEW)):
        (tmp_path / name / "pkg").mkdir(parents=True)
        (tmp_path / name / "pkg" / "k.cuh").write_text(text)
    return str(tmp_path / "old" / "pkg"), str(tmp_path / "new" / "pkg")


def test_opened_unchanged_removed_added(releases: tuple[str, str]) -> None:
    old, new = releases
    sm120 = parse_target("sm_120")
    changes = diff(scan([old], [sm120], use_cache=False), scan([new], [sm120], use_cache=False), [sm120])
    got = sorted((c.change, c.gate.location.line, c.matched_by) for c in changes)
    # a: condition changed (new id), matched in order, now admits sm_120; b: same id, moved a line;
    # c (sm_90a only) is gone and d (10.x–11.x) is new: the order match pairs them as one changed gate.
    assert ("opened", 3, "order") in got
    assert ("unchanged", 6, "id") in got
    assert [c for c in got if c[0] in ("added", "removed", "changed")] == [("changed", 9, "order")]


def test_cli_json_and_markdown(releases: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    old, new = releases
    assert main(["diff", old, new, "-t", "sm_120", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (opened,) = [r for r in doc["changes"] if r["change"] == "opened"]
    assert (
        opened["line_before"] == 2 and opened["line_after"] == 3 and opened["id_before"] != opened["id_after"]
    )
    assert main(["diff", old, new, "-t", "sm_120", "--format", "markdown"]) == 0
    assert "| sm_120 | opened | `k.cuh:3` |" in capsys.readouterr().out
    assert main(["diff", new, old, "-t", "sm_120", "--fail-on", "closed"]) == 1  # going back closes it


def test_header_names_each_target_once(releases: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    old, new = releases
    assert main(["diff", old, new, "-t", "sm_120,sm_90", "--all"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header.count("sm_120:") == 1 and header.count("sm_90:") == 1
    # Each target's counts follow it once: "sm_120: 1 opened, 1 changed, 1 unchanged".
    assert re.search(r"sm_120: 1 opened, 1 changed, 1 unchanged(;|$)", header)
    assert main(["diff", old, new, "-t", "sm_120", "--format", "markdown"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(": sm_120: 1 opened, 1 changed") and first.count("sm_120") == 1


def test_every_diff_option_has_help() -> None:
    from liftgate.cli.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    diff_parser = subparsers.choices["diff"]
    missing = [a.dest for a in diff_parser._actions if not a.help]
    assert missing == []
