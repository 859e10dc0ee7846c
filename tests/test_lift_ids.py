"""`liftgate lift` resolves the gate ids it is given before it judges anything.

A mistyped or ambiguous id fails at once (exit 2, one line naming close ids and the command that
lists them) with no gate judged; a valid id judges only the gates the plan needs: the requested
ones, a chain's members for ``--chain``, every excluded gate for ``--all-liftable``. A counting stub
on `liftgate.judge.verdict.judge_report` (the entry point the scan, the chains and lift all call)
records what was judged. The environments are the synthetic judge and chain packages installed with a
dist-info RECORD in a temporary prefix; every cache lives under the test's temporary directory.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from liftgate.arch.core import Arch
from liftgate.cli.main import main
from liftgate.judge import verdict as verdict_mod
from liftgate.lift.plan import PlanError
from liftgate.lift.workflow import EnvScan, scan_env
from liftgate.model import Gate, Status, Verdict
from liftgate.sources.interface import Observer
from liftgate.sources.workspace import Workspace

MINIJUDGE = Path(__file__).parent / "fixtures" / "judge" / "minijudge"
CHAIN = Path(__file__).parent / "fixtures" / "chain"
TARGET = Arch(12, 0)


class Judged:
    """What the judge was asked to do: one entry per `judge_report` call, the gate ids it judged."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    @property
    def gates(self) -> set[str]:
        return {gid for call in self.calls for gid in call}


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> Judged:
    record = Judged()
    real = verdict_mod.judge_report

    def counting(
        gates: Iterable[Gate],
        targets: Sequence[Arch],
        workspace: Workspace,
        only: Callable[[Gate], bool] | None = None,
        observer: Observer | None = None,
    ) -> list[Verdict]:
        out = real(gates, targets, workspace, only=only, observer=observer)
        record.calls.append([v.gate_id for v in out])
        return out

    monkeypatch.setattr(verdict_mod, "judge_report", counting)
    return record


@pytest.fixture
def env(fake_env: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """The synthetic judge package installed in a fresh prefix: (prefix, cache directory)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache = str(tmp_path / "cache")
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", cache)
    fake_env(MINIJUDGE, "minijudge", "0.1")
    return str(tmp_path / "env"), cache


def _scan(prefix: str, cache: str, target: Arch = TARGET) -> EnvScan:
    return scan_env(prefix, target, cache_dir=cache)


def _lift(prefix: str, cache: str, *args: str) -> int:
    return main(["lift", *args, "--env", prefix, "--cache-dir", cache, "-t", "sm_120", "--dry-run"])


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("liftgate: error: "), err
    return lines[0]


def test_a_mistyped_id_fails_before_any_gate_is_judged(env, judged, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, cache = env
    assert _lift(prefix, cache, "cu-zzzzzzzzzz") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"no gate 'cu-zzzzzzzzzz' in the environment {prefix}" in line
    assert f"`liftgate scan --env {prefix} -t sm_120`" in line
    assert "did you mean" not in line  # nothing is close to it
    assert judged.calls == []


def test_a_mistyped_id_names_the_close_ids(env, judged, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, cache = env
    real = next(g.id for g in _scan(prefix, cache).report.gates if g.id.startswith("py-"))
    typo = real[:-1] + ("0" if real[-1] != "0" else "1")
    assert _lift(prefix, cache, typo) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"no gate {typo!r}" in line and f"did you mean {real}" in line
    # The right number under the wrong kind is found too.
    wrong_kind = "cu-" + real.split("-", 1)[1]
    assert _lift(prefix, cache, wrong_kind) == 2
    assert f"did you mean {real}" in _one_error_line(capsys.readouterr().err)
    assert judged.calls == []


def test_every_id_is_checked_before_judging(env, judged, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, cache = env
    good = _scan(prefix, cache).report.gates[0].id
    assert _lift(prefix, cache, good, "cu-zzzzzzzzzz") == 2
    assert "no gate 'cu-zzzzzzzzzz'" in _one_error_line(capsys.readouterr().err)
    assert _lift(prefix, cache, "cu-zzzzzzzzzz", "--all-liftable") == 2
    assert "no gate 'cu-zzzzzzzzzz'" in _one_error_line(capsys.readouterr().err)
    assert _lift(prefix, cache, " ") == 2
    assert "an empty gate id" in _one_error_line(capsys.readouterr().err)
    assert judged.calls == []


def _common(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _shared_prefix(ids: Sequence[str]) -> tuple[str, list[str]]:
    """The longest prefix two ids share (not itself an id), and the ids that start with it."""
    ordered = sorted(ids)
    best = max((_common(a, b) for a, b in itertools.pairwise(ordered)), key=len)
    assert best and best not in ids
    return best, [i for i in ids if i.startswith(best)]


def test_an_ambiguous_prefix_is_reported_before_any_gate_is_judged(env, judged, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, cache = env
    ids = [g.id for g in _scan(prefix, cache).report.gates]
    shared, matching = _shared_prefix(ids)
    assert len(matching) >= 2
    assert _lift(prefix, cache, shared) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"gate id {shared!r} is ambiguous" in line and "give more characters" in line
    assert all(m in line for m in matching)
    assert _lift(prefix, cache, "--chain", shared) == 2
    assert f"gate id {shared!r} is ambiguous" in _one_error_line(capsys.readouterr().err)
    assert judged.calls == []


def test_a_valid_id_judges_only_the_requested_gates(env, judged, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, cache = env
    gates = _scan(prefix, cache).report.gates
    excluded = [g.id for g in gates if g.status(TARGET) is not Status.ADMITTED]
    assert len(excluded) > 3
    first, second = excluded[0], excluded[-1]
    assert _lift(prefix, cache, first[:8], second) in (0, 1)
    out = capsys.readouterr().out
    assert out.startswith("lift lg-")
    assert judged.gates == {first, second}
    assert len(judged.calls) == 1 and sorted(judged.calls[0]) == sorted({first, second})


def test_all_liftable_judges_every_excluded_gate(env, judged, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, cache = env
    gates = _scan(prefix, cache).report.gates
    excluded = {g.id for g in gates if g.status(TARGET) is not Status.ADMITTED}
    assert _lift(prefix, cache, "--all-liftable") == 0
    assert judged.gates == excluded


def test_judging_a_subset_gives_the_verdicts_of_the_whole_judged_scan(env) -> None:  # type: ignore[no-untyped-def]
    from liftgate.lift.workflow import judge_env

    prefix, cache = env
    for target in (TARGET, Arch(12, 0, "a")):
        whole = scan_env(prefix, target, judge=True, cache_dir=cache).report.verdicts
        es = _scan(prefix, cache, target)
        assert es.report.verdicts == ()
        assert judge_env(es, target, None).report.verdicts == whole
        by_id = {v.gate_id: v for v in whole}
        some = [v.gate_id for v in whole][::3]
        assert judge_env(es, target, some).report.verdicts == tuple(by_id[i] for i in some)


def test_resolve_gate_ids_exact_then_unique_prefix(env) -> None:  # type: ignore[no-untyped-def]
    from liftgate.lift.workflow import resolve_gate_ids

    prefix, cache = env
    es = _scan(prefix, cache)
    ids = [g.id for g in es.report.gates]
    assert resolve_gate_ids(es, TARGET, [f" {ids[0][:9]} ", ids[1], ids[0]]) == [ids[0], ids[1]]
    with pytest.raises(PlanError, match=r"no gate 'cu-zzzz'.*; gate id 'cu-' is ambiguous"):
        resolve_gate_ids(es, TARGET, ["cu-zzzz", "cu-"])


def test_lift_chain_judges_only_the_chain(
    tmp_path: Path,
    fake_env: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    judged: Judged,
    capsys: Any,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache = str(tmp_path / "cache")
    prefix = tmp_path / "env"
    fake_env(CHAIN / "app", "app", "1.0", prefix=prefix)
    fake_env(CHAIN / "kernlib", "kernlib", "2.0", prefix=prefix)
    es = _scan(str(prefix), cache)
    (guard,) = [
        g for g in es.report.gates if g.location.path == "app/fusion.py" and "# root:" in _line(prefix, g)
    ]
    assert _lift(str(prefix), cache, "--chain", "py-zzzzzzzzzz") == 2
    assert "no gate 'py-zzzzzzzzzz'" in _one_error_line(capsys.readouterr().err)
    assert judged.calls == []
    assert _lift(str(prefix), cache, "--chain", guard.id) == 0
    assert f"chain {guard.id}: 3 gate(s) shut sm_120 out" in capsys.readouterr().err
    excluded = {g.id for g in es.report.gates if g.status(TARGET) is not Status.ADMITTED}
    assert guard.id in judged.gates and judged.gates < excluded  # the chain's members, not every gate


def _line(prefix: Path, gate: Gate) -> str:
    (site,) = prefix.glob("lib/python*/site-packages")
    lines = (site / gate.location.path).read_text().splitlines()
    return "\n".join(lines[max(0, gate.location.line - 2) : gate.location.line])
