"""`collector_off` pauses the cyclic collector and gives back the state it found, on an error too."""

from __future__ import annotations

import ast
import gc
from collections.abc import Callable
from pathlib import Path

import pytest

from liftgate.collector import collector_off
from liftgate.detect.py_binding import Module
from liftgate.detect.python import PythonAnalyzer
from liftgate.judge.region import RegionAnalyzer
from liftgate.judge.verdict import judge_scan
from liftgate.scan import scan
from test_python_detector import fixture_sources

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_inside_and_as_it_was_after(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with collector_off():
            assert not gc.isenabled()
            with collector_off():  # nested, as the detector's analysis inside its phase
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), collector_off():
            raise RuntimeError("a failure inside")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def _cyclic_garbage_after(work: Callable[[], object]) -> list[object]:
    """What the cyclic collector alone would free after ``work`` runs with it paused (as the
    detectors run): the objects that reference counts could not free."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        work()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()


def test_a_python_analysis_closed_leaves_its_syntax_trees_to_reference_counts() -> None:
    # A closure that called itself (`collect_bindings`' visitor) held each module, and the analyser
    # and its interpreter refer to each other: millions of tree objects then waited for the
    # collector's first pass after the phase, about 13 s on FlashInfer and SGLang.
    def analyse() -> None:
        analyzer = PythonAnalyzer(fixture_sources())
        assert analyzer.analyze()
        analyzer.close()

    leftover = _cyclic_garbage_after(analyse)
    assert not [o for o in leftover if isinstance(o, (ast.AST, Module))]


def test_a_scan_leaves_no_syntax_tree_to_the_cyclic_collector() -> None:
    def run() -> None:
        report = scan(
            [str(FIXTURES / "python"), str(FIXTURES / "pybuild")], ["sm_120"], jobs=1, use_cache=False
        )
        assert report.gates

    leftover = _cyclic_garbage_after(run)
    assert not [o for o in leftover if isinstance(o, (ast.AST, Module))]


def test_judging_leaves_no_region_analyser_to_the_cyclic_collector() -> None:
    # `branch_calls`' walk was a closure that called itself and held the analyser's resolver.
    report = scan([str(FIXTURES / "python"), str(FIXTURES / "cuda")], ["sm_120"], jobs=1, use_cache=False)
    leftover = _cyclic_garbage_after(lambda: judge_scan(report, jobs=1))
    assert not [o for o in leftover if isinstance(o, RegionAnalyzer)]
