"""Verdicts cached like detections (issue 21): a warm judged scan re-judges nothing that did not
change, gives the same verdicts, and re-judges a package when one of its files changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from liftgate.judge import verdict as verdict_module
from liftgate.judge.verdict import judge_scan
from liftgate.model import VerdictKind
from liftgate.scan import scan

FIXTURE = Path(__file__).parent / "fixtures" / "outcomes" / "unsafe"
TARGETS = ["sm_121a", "sm_100a"]


def _judged(tree: Path, cache: Path | None) -> list[tuple[str, str, str, tuple[str, ...]]]:
    report = scan([str(tree)], TARGETS, use_cache=cache is not None, cache_dir=str(cache) if cache else None)
    return [(v.gate_id, v.target.name, v.kind.value, v.reasons) for v in judge_scan(report).verdicts]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    dest = tmp_path / "unsafe"
    shutil.copytree(FIXTURE, dest)
    return dest


def test_a_warm_judged_scan_takes_every_verdict_from_the_cache(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cold = _judged(tree, cache)
    assert any(kind == "unsafe" for _g, _t, kind, _r in cold)
    assert list((cache / "scan-v8" / "verdicts").iterdir())

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("judged again although nothing changed")

    monkeypatch.setattr(verdict_module, "judge_gate", refuse)
    assert _judged(tree, cache) == cold


def test_a_changed_file_is_judged_again(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = {(g, t): k for g, t, k, _r in _judged(tree, cache)}
    # The tcgen05 helper becomes portable: nothing the filter lets sm_121a into is missing any more.
    tmem = tree / "include" / "loose" / "tmem.cuh"
    tmem.write_text(tmem.read_text().replace("tcgen05.ld", "ld.shared"))
    after = {(g, t): k for g, t, k, _r in _judged(tree, cache)}
    assert after != before
    assert VerdictKind.UNSAFE.value in before.values()
    assert _judged(tree, None) == _judged(tree, cache)  # what the cache gives is what judging gives


def test_no_cache_stores_no_verdicts_and_a_damaged_entry_is_a_miss(tree: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fresh = _judged(tree, None)
    assert not cache.exists()
    _judged(tree, cache)
    for entry in (cache / "scan-v8" / "verdicts").iterdir():
        entry.write_bytes(b"\x00not marshal")
    assert _judged(tree, cache) == fresh
