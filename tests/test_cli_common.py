"""What the subcommands share (`liftgate.cli.common`): the same options spelled the same way,
``--target`` read by one function and the local-GPU fallback written once, one error line, the
exit codes of docs/exit-codes.md, and one rule for ``--env`` (`liftgate.sources.environment.resolve_env`)
behind scan's site-packages, lift's journal prefix and doctor's interpreter."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import pytest

from liftgate import doctor
from liftgate.arch import nvml
from liftgate.arch.core import Arch
from liftgate.arch.parse import parse_target as parse_arch
from liftgate.cli import main as cli_main
from liftgate.cli.common import (
    ExitCode,
    TargetError,
    error,
    local_targets,
    parse_target,
    parse_targets,
    target_or_local,
    targets_or_local,
)
from liftgate.cli.main import build_parser, main
from liftgate.diff import ChangeKind
from liftgate.doctor import CheckVerdict
from liftgate.lift.journal import LiftError, prefix_for
from liftgate.model import GateKind
from liftgate.report.interface import GroupBy, OutputFormat, Show, VerdictFilter
from liftgate.sources.environment import EnvInfo, find_site_packages, resolve_env
from liftgate.sources.interface import SourceError

DOCS = Path(__file__).resolve().parent.parent / "docs"
SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


# --- exit codes ---------------------------------------------------------------------------------


def test_exit_codes_are_those_of_the_docs() -> None:
    text = (DOCS / "exit-codes.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| (\d+) \| (.+) \|$", text, re.MULTILINE))
    assert set(table) == {"0", "1", "2"}
    assert ExitCode.OK == 0 and "nothing matching" in table["0"]
    assert ExitCode.FINDINGS == 1 and "excludes a target" in table["1"]
    assert ExitCode.ERROR == 2 and "usage or environment error" in table["2"]
    assert "3 regression" in text and ExitCode.REGRESSION == 3
    # The other meanings of 1, by command.
    assert "1 nothing to apply" in text and ExitCode.REFUSED == 1
    assert "1 drift" in text and ExitCode.DRIFT == 1
    assert "1 it failed" in text and "1 failure" in text and ExitCode.FAILED == 1
    assert ExitCode.INTERRUPTED == 130
    assert (cli_main.EXIT_OK, cli_main.EXIT_FINDINGS, cli_main.EXIT_ERROR) == (0, 1, 2)


def test_the_error_line_names_the_file_and_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert error("no such gate") == ExitCode.ERROR == 2
    assert error("Permission denied", path="/x/y.py", hint="run `liftgate status`") == 2
    assert error("drift", code=ExitCode.DRIFT) == 1
    assert capsys.readouterr().err == (
        "liftgate: error: no such gate\n"
        "liftgate: error: /x/y.py: Permission denied; run `liftgate status`\n"
        "liftgate: error: drift\n"
    )


# --- the shared options -------------------------------------------------------------------------

TARGET_COMMANDS = ("scan", "explain", "lift", "diff", "doctor")


def test_every_shared_option_is_spelled_the_same_everywhere() -> None:
    parsers = subcommands()
    for flag, strings, metavar in (
        ("--target", ["-t", "--target"], "ARCH"),
        ("--env", ["--env"], "PATH"),
        ("--cache-dir", ["--cache-dir"], "DIR"),
        ("--offline", ["--offline"], None),
        ("--sdist", ["--sdist"], None),
        ("--format", ["-f", "--format"], None),
    ):
        having = {name: option(p, flag) for name, p in parsers.items() if option(p, flag) is not None}
        assert len(having) >= 2, flag
        for name, action in having.items():
            assert action is not None and action.option_strings == strings, (name, flag)
            assert action.metavar == metavar, (name, flag)
    assert {n for n, p in parsers.items() if option(p, "--target")} == set(TARGET_COMMANDS)
    assert {n for n, p in parsers.items() if option(p, "--env")} == {
        "scan", "explain", "lift", "apply-patches", "status", "revert", "verify", "trace", "doctor",
    }  # fmt: skip


def test_choices_come_from_the_enums() -> None:
    parsers = subcommands()

    def choices(command: str, flag: str) -> list[str]:
        action = option(parsers[command], flag)
        assert action is not None and action.choices is not None
        return list(action.choices)

    assert choices("scan", "--format") == [f.value for f in OutputFormat]
    assert choices("scan", "--show") == [s.value for s in Show]
    assert choices("scan", "--by") == [g.value for g in GroupBy]
    assert choices("scan", "--verdict") == [v.value for v in VerdictFilter]
    assert choices("scan", "--kind") == choices("diff", "--kind") == [k.value for k in GateKind]
    assert choices("diff", "--format") == choices("verify", "--format") == ["table", "json", "markdown"]
    assert choices("diff", "--fail-on") == [ChangeKind.CLOSED.value]
    for command in ("explain", "lift", "apply-patches", "status", "doctor"):
        assert choices(command, "--format") == ["text", "json"], command


SPELLINGS = ("sm_120", "sm_120a", "12.0", "120", "rtx5090", " sm_90 ", "compute_90a")


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_way_of_reading_a_target_takes_the_same_spellings(spelling: str) -> None:
    arch = parse_arch(spelling)
    assert parse_target(spelling) == arch
    assert target_or_local(spelling) == arch  # lift: one target
    assert [t.arch for t in parse_targets([spelling])] == [arch]  # scan, explain, diff: a list
    assert [t.arch for t in targets_or_local([spelling])] == [arch]
    assert [t.spelling for t in parse_targets([spelling])] == [spelling.strip()]


def test_repeatable_targets_are_also_comma_separated() -> None:
    targets = parse_targets(["sm_90, sm_120", "", "12.1,"])
    assert [(t.spelling, t.arch) for t in targets] == [
        ("sm_90", Arch(9, 0)), ("sm_120", Arch(12, 0)), ("12.1", Arch(12, 1)),
    ]  # fmt: skip


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    source = tmp_path / "src"
    source.mkdir()
    return source


def _argv(command: str, source: Path, *target: str) -> list[str]:
    return {
        "scan": ["scan", "-q", str(source), *target],
        "explain": ["explain", "cu-1234", str(source), *target],
        "lift": ["lift", "cu-1234", *target],
        "diff": ["diff", str(source), str(source), *target],
        "doctor": ["doctor", *target],
    }[command]


def test_an_unknown_target_is_the_same_error_everywhere(
    no_network: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(TargetError) as caught:
        parse_target("sm_999z")
    expected = f"liftgate: error: {caught.value}\n"
    for command in TARGET_COMMANDS:
        assert _run(_argv(command, no_network, "-t", "sm_999z"), capsys) == (2, expected), command


def test_the_local_gpu_fallback_says_the_same_from_scan_explain_and_lift(
    no_network: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def no_gpu() -> list[Arch]:
        calls.append("asked")
        raise nvml.NoGpuError("no --target given and no NVIDIA GPU found (NVML: test); pass --target ARCH")

    monkeypatch.setattr(nvml, "detect_local_archs", no_gpu)
    expected = "liftgate: error: no --target given and no NVIDIA GPU found (NVML: test); pass --target ARCH\n"
    for command in ("scan", "explain", "lift"):
        assert _run(_argv(command, no_network), capsys) == (2, expected), command
    assert len(calls) == 3


def test_the_local_gpus_become_targets_named_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml, "detect_local_archs", lambda: [Arch(12, 0)])
    [target] = local_targets()
    assert (target.spelling, target.arch) == ("local GPU (sm_120)", Arch(12, 0))
    assert targets_or_local([]) == [target]
    assert target_or_local(None) == Arch(12, 0)
    assert targets_or_local(["sm_90"])[0].arch == Arch(9, 0)  # a --target wins; NVML is not asked
    monkeypatch.setattr(nvml, "detect_local_archs", lambda: [Arch(9, 0), Arch(12, 0)])
    assert [t.spelling for t in targets_or_local([])] == ["local GPU (sm_90)", "local GPU (sm_120)"]
    with pytest.raises(TargetError, match="GPUs of several capabilities are visible: pass --target"):
        target_or_local(None)  # lift admits one target


# --- one rule for --env --------------------------------------------------------------------------


def make_env(prefix: Path, *, venv: bool = True, interpreter: str = "bin/python") -> Path:
    """An environment at ``prefix``: an interpreter (a link to this one), a site-packages holding a
    distribution, and a ``pyvenv.cfg`` when ``venv``. Returns the site-packages."""
    python = prefix / interpreter
    python.parent.mkdir(parents=True, exist_ok=True)
    python.symlink_to(os.path.realpath(sys.executable))
    if venv:
        (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    site = prefix / (SITE if interpreter.startswith("bin/") else "Lib/site-packages")
    dist = site / "demo-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    (dist / "RECORD").write_text("demo-1.0.dist-info/METADATA,,\n")
    return site


def doctors_interpreter(env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str | None:
    """The interpreter ``diagnose`` asks about torch for ``env`` (None: it found none)."""
    asked: list[str] = []
    monkeypatch.setattr(doctor, "toolchain_checks", lambda target: [])
    monkeypatch.setattr(doctor, "torch_checks", lambda python: asked.append(python) or [])
    monkeypatch.setattr(doctor, "kernel_checks", lambda env, targets: [])
    doctor.diagnose(Arch(12, 0), env, environ={"HOME": str(tmp_path / "home")})
    return asked[0] if asked else None


@pytest.mark.parametrize("form", ["venv", "prefix", "site-packages", "windows", "windows site-packages"])
def test_every_form_of_env_resolves_the_same_way_for_scan_lift_and_doctor(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "env"
    windows = form.startswith("windows")
    site = make_env(root, venv=form == "venv", interpreter="Scripts/python.exe" if windows else "bin/python")
    python = str(root / ("Scripts/python.exe" if windows else "bin/python"))
    given = str(site) if form.endswith("site-packages") else str(root)
    env = resolve_env(given)
    assert env == EnvInfo(given, str(root), python, (str(site),))
    assert find_site_packages(given) == [str(site)]  # scan
    assert prefix_for(given) == str(root)  # lift, status, revert, verify: the journal's home
    assert doctors_interpreter(given, monkeypatch, tmp_path) == python  # doctor
    assert main(["status", "--env", given]) == 0
    assert capsys.readouterr().out == f"no active lifts in {root}\n"


def test_a_site_packages_outside_the_usual_layout_is_its_own_prefix(tmp_path: Path) -> None:
    odd = tmp_path / "vendored" / "site-packages"
    (odd / "demo-1.0.dist-info").mkdir(parents=True)
    env = resolve_env(str(odd))
    assert env == EnvInfo(str(odd), str(odd), None, (str(odd),))
    assert prefix_for(str(odd)) == str(odd) and find_site_packages(str(odd)) == [str(odd)]


def test_no_env_is_the_running_interpreters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for none in (None, ""):
        env = resolve_env(none)
        assert (env.path, env.prefix, env.python) == (None, sys.prefix, sys.executable)
        assert env.site_packages
        assert prefix_for(none) == sys.prefix
    assert doctors_interpreter("", monkeypatch, tmp_path) == sys.executable


@pytest.mark.parametrize("form", ["interpreter", "file", "missing"])
def test_what_is_no_environment_is_the_same_error_for_scan_lift_and_doctor(
    form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_env(tmp_path / "venv")
    given = {
        "interpreter": tmp_path / "venv" / "bin" / "python",
        "file": tmp_path / "venv" / "pyvenv.cfg",
        "missing": tmp_path / "nowhere",
    }[form]
    with pytest.raises(SourceError) as caught:
        resolve_env(str(given))
    message = str(caught.value)
    assert "\n" not in message and ("pass its environment instead" in message) == (form == "interpreter")
    with pytest.raises(SourceError, match=re.escape(message)):
        find_site_packages(str(given))
    with pytest.raises(LiftError, match=re.escape(message)):
        prefix_for(str(given))
    for argv in (["doctor", "-t", "sm_120", "--env", str(given)], ["status", "--env", str(given)],
                 ["revert", "--all", "--env", str(given)]):  # fmt: skip
        assert main(argv) == 2, argv
        assert capsys.readouterr().err == f"liftgate: error: {message}\n", argv


def test_an_environment_without_site_packages_is_still_a_prefix(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert prefix_for(str(tmp_path / "empty")) == str(tmp_path / "empty")  # status: no lifts there
    with pytest.raises(SourceError, match=r"^no site-packages found in .*empty; pass a virtualenv"):
        find_site_packages(str(tmp_path / "empty"))  # scan and doctor: nothing to read


# --- doctor's verdicts ---------------------------------------------------------------------------


def test_doctor_verdicts_are_an_enum_with_the_same_values() -> None:
    assert [v.value for v in CheckVerdict] == ["ok", "warn", "fail", "info"]
    for verdict in CheckVerdict:
        assert verdict == verdict.value and str(verdict) == verdict.value == f"{verdict}"
        assert json.dumps(verdict) == json.dumps(verdict.value)
