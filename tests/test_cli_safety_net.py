"""The CLI's top-level safety net: an exception that escapes a command is one line, exit 2.

An unexpected exception is a bug, so the suite itself runs with ``LIFTGATE_INTERNAL_ERRORS=raise``
(conftest) and fails on one; these tests unset it to see what a user sees.
"""

from __future__ import annotations

import argparse

import pytest

from liftgate.cli import main as cli_main
from liftgate.cli import scan_cmd


def _boom(args: argparse.Namespace) -> int:
    raise RecursionError("maximum recursion depth exceeded while calling a Python object")


@pytest.fixture
def broken_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIFTGATE_INTERNAL_ERRORS", raising=False)
    monkeypatch.delenv("LIFTGATE_DEBUG", raising=False)
    monkeypatch.setattr(scan_cmd, "run", _boom)


def test_an_unexpected_exception_is_one_line_and_exit_2(
    broken_scan: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main.main(["scan", "flashinfer-python==0.6.2", "-t", "sm_120"])
    err = capsys.readouterr().err
    assert code == cli_main.EXIT_ERROR
    lines = err.splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith("liftgate: internal error in `scan` on `flashinfer-python==0.6.2 -t sm_120`")
    assert "RecursionError: maximum recursion depth exceeded" in line
    assert "please report this" in line and "--debug" in line
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--debug", "scan", "x==1", "-t", "sm_120"],
        ["scan", "x==1", "--debug", "-t", "sm_120"],
    ],
)
def test_debug_prints_the_traceback(
    broken_scan: None, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = cli_main.main(argv)
    err = capsys.readouterr().err
    assert code == cli_main.EXIT_ERROR
    assert "Traceback (most recent call last)" in err and "_boom" in err
    assert err.rstrip().splitlines()[-1].startswith("liftgate: internal error in `scan` on `x==1 -t sm_120`")


def test_the_debug_environment_variable_prints_the_traceback(
    broken_scan: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIFTGATE_DEBUG", "1")
    assert cli_main.main(["scan", "x==1"]) == cli_main.EXIT_ERROR
    assert "Traceback" in capsys.readouterr().err


def test_a_long_input_is_shortened(broken_scan: None, capsys: pytest.CaptureFixture[str]) -> None:
    cli_main.main(["scan", *(f"pkg{i}==1.0" for i in range(200))])
    (line,) = capsys.readouterr().err.splitlines()
    assert "…`" in line and len(line) < 700


def test_the_suite_sees_the_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    # What conftest sets for every other test: the net lets the bug through.
    monkeypatch.setenv("LIFTGATE_INTERNAL_ERRORS", "raise")
    monkeypatch.setattr(scan_cmd, "run", _boom)
    with pytest.raises(RecursionError):
        cli_main.main(["scan", "x==1"])


def test_user_errors_and_interrupts_are_not_internal_errors(
    broken_scan: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(scan_cmd, "run", interrupted)
    assert cli_main.main(["scan", "x==1"]) == 130
    assert capsys.readouterr().err == "liftgate: interrupted\n"
