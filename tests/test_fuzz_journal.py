"""Hypothesis: damaged manifests and series documents give a result or one `LiftError`, nothing else.

A lifted copy of the synthetic ``minijudge`` environment is built once; every example works on a
fresh copy of it, with ``lift.json`` (or ``liftgate-series.json``) damaged: wrong types at any key,
keys deleted, path traversal strings, huge numbers, other documents altogether, bytes that are not
JSON. ``status``, ``revert`` (one id, ``--all``, ``--force``) and ``apply-patches`` must return or
raise `LiftError`; no file outside the environment changes, and no backup is ever deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import install_fake
from liftgate.arch.core import Arch
from liftgate.cli.main import main
from liftgate.lift.journal import Journal, LiftError
from liftgate.lift.workflow import (
    apply_plan,
    choose_gates,
    export_series,
    plan_env,
    read_series,
    relocate_series,
    revert,
    scan_env,
)

FIXTURE = Path(__file__).parent / "fixtures" / "judge" / "minijudge"
TARGET = Arch(12, 0)
FUZZ = settings(
    derandomize=True,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Strings a planted journal or series would use to reach outside; {out} is an absolute path outside
# the environment, filled in per example. No path names a real system file, and every example runs
# with its working directory inside its own copy: even a liftgate that follows these paths (the
# code before these tests existed did) only ever writes where `Copy.check` looks.
TRAVERSALS = [
    "../../../../outside/victim.py",
    "../../../../../../../../../../../../{out}/victim.py",
    "backup/../../../../outside/victim.py",
    "caches/0/../../../../../outside/dir",
    "{out}/victim.py",
    "{out}/dir",
    "..",
    ".",
    "",
    "~",
    "~/.cache/flashinfer/0.6.2/120a/cached_ops/x",
    "backup/0\x00",
    "lg-../../x",
    "a" * 5000,
]

leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([10**300, -(10**300), 2**63, 0o7777, 0o6755, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(TRAVERSALS),
)
json_values = st.recursive(
    leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = "link" if p.is_symlink() else "dir" if p.is_dir() else sha(p)
    return out


def key_paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document: dict keys and list indexes, depth first."""
    out = [at] if at else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += key_paths(v, (*at, k))
    elif isinstance(value, list):
        for n, v in enumerate(value):
            out += key_paths(v, (*at, n))
    return out


def mutate(doc: Any, path: tuple[Any, ...], action: str, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def fill(value: Any, out: str) -> Any:
    if isinstance(value, str):
        return value.replace("{out}", out)
    if isinstance(value, list):
        return [fill(v, out) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, out) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A lifted minijudge environment (with one JIT-cache entry moved aside), its manifest, a
    series exported from the same plan, and files outside the environment to keep an eye on."""
    base = tmp_path_factory.mktemp("fuzz-template")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(base / "home"))
        mp.setenv("LIFTGATE_INTERNAL_ERRORS", "raise")
        prefix = base / "env"
        install_fake(prefix, FIXTURE, "minijudge", "0.1")
        es = scan_env(str(prefix), TARGET, judge=True)
        ids, refused = choose_gates(es, TARGET, [], True, False)
        plan = plan_env(es, TARGET, ids, refused=refused)
        export_series(plan, str(base / "series"))
        apply_plan(plan, str(prefix), environ={"HOME": str(base / "home")})
        lift_dir = prefix / ".liftgate" / "lifts" / plan.lift_id
        aside = lift_dir / "caches" / "0" / "pdl"
        aside.mkdir(parents=True)
        (aside / "pdl.so").write_bytes(b"ELF")
        doc = json.loads((lift_dir / "lift.json").read_text())
        original = base / "home" / ".cache" / "flashinfer" / "0.1" / "120a" / "cached_ops" / "pdl"
        doc["caches_moved"] = [{"cache": "flashinfer", "original": str(original), "moved_to": "caches/0/pdl"}]
        (lift_dir / "lift.json").write_text(json.dumps(doc))
        (base / "cwd" / "deep" / "er" / "still").mkdir(parents=True)  # each example's working directory
        (base / "outside" / "dir").mkdir(parents=True)
        (base / "outside" / "victim.py").write_bytes(b"precious = True\n")
        (base / "outside" / "dir" / "keep").write_bytes(b"keep")
        series = json.loads((base / "series" / "liftgate-series.json").read_text())
        yield {"base": base, "lift_id": plan.lift_id, "doc": doc, "series": series, "es": es}


class Copy:
    """A fresh copy of the template for one example; ``check`` asserts what must always hold."""

    def __init__(self, template: dict[str, Any]) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="lg-fuzz-"))
        shutil.copytree(template["base"], self.work / "w", symlinks=True)
        self.root = self.work / "w"
        self.prefix = self.root / "env"
        self.lift_dir = self.prefix / ".liftgate" / "lifts" / template["lift_id"]
        self.outside = tree(self.root / "outside")
        self.backups = tree(self.lift_dir / "backup")
        self.top = sorted(os.listdir(self.root))
        self.cwd = tree(self.root / "cwd")
        self.previous_cwd = os.getcwd()
        os.chdir(self.root / "cwd" / "deep" / "er" / "still")  # relative paths land in the copy
        old = str(template["base"])
        self.doc = json.loads(json.dumps(template["doc"]).replace(json.dumps(old)[1:-1], str(self.root)))

    def check(self) -> None:
        assert tree(self.root / "outside") == self.outside  # nothing outside the environment changed
        assert sorted(os.listdir(self.root)) == self.top  # nor was anything made beside it
        assert tree(self.root / "cwd") == self.cwd  # nor where a relative path would land
        backups = tree(self.lift_dir / "backup") if self.lift_dir.is_dir() else {}
        assert {k: v for k, v in self.backups.items() if k in backups} == self.backups  # no backup deleted
        # The lock stays usable: taking it again is a result or one clear error.
        try:
            with Journal(str(self.prefix)).locked():
                pass
        except LiftError as exc:
            assert "\n" not in str(exc)

    def close(self) -> None:
        os.chdir(self.previous_cwd)
        shutil.rmtree(self.work, ignore_errors=True)


def run_journal_command(copy: Copy, command: str, lift_id: str) -> None:
    environ = {"HOME": str(copy.root / "home")}
    try:
        if command == "status":
            journal = Journal(str(copy.prefix))
            with journal.locked():
                journal.status()
        elif command == "revert-all":
            revert(None, str(copy.prefix), environ=environ)
        elif command == "revert-id":
            revert(lift_id, str(copy.prefix), environ=environ)
        else:
            revert(None, str(copy.prefix), force=True, environ=environ)
    except LiftError as exc:
        message = str(exc)
        assert "\n" not in message and message


@pytest.fixture(autouse=True)
def _home(template: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(template["base"] / "home"))
    monkeypatch.setenv("LIFTGATE_INTERNAL_ERRORS", "raise")
    # Durability is tested elsewhere (test_lift_journal.py kills a process mid-write); here fsync
    # only makes a busy disk the bottleneck.
    monkeypatch.setattr(os, "fsync", lambda fd: None)


commands = st.sampled_from(["status", "revert-all", "revert-id", "revert-force"])
states = st.sampled_from(["applied", "applying", "reverting", "reverted"])


@FUZZ
@given(data=st.data(), command=commands, state=states)
def test_a_manifest_damaged_at_any_key_is_a_result_or_a_lift_error(
    template: dict[str, Any], data: st.DataObject, command: str, state: str
) -> None:
    copy = Copy(template)
    try:
        doc = copy.doc
        doc["state"] = state
        for _ in range(data.draw(st.integers(1, 3), label="mutations")):
            paths = key_paths(doc)
            if not paths:
                break
            path = data.draw(st.sampled_from(paths), label="where")
            action = data.draw(st.sampled_from(["set", "set", "delete"]), label="action")
            value = fill(data.draw(json_values, label="value"), str(copy.root / "outside"))
            doc = mutate(doc, path, action, value)
        (copy.lift_dir / "lift.json").write_text(json.dumps(doc))
        run_journal_command(copy, command, template["lift_id"])
        copy.check()
    finally:
        copy.close()


PATH_KEYS = [("files", 0, "fspath"), ("files", 1, "backup"), ("files", 2, "lifted"), ("files", 3, "drifted_copy"),
             ("caches_moved", 0, "moved_to"), ("caches_moved", 0, "original")]  # fmt: skip


@FUZZ
@given(
    where=st.permutations(PATH_KEYS).flatmap(lambda keys: st.integers(1, 3).map(lambda n: keys[:n])),
    value=st.sampled_from(TRAVERSALS),
    command=commands,
    state=states,
    claim=st.booleans(),
)
def test_a_planted_path_never_reaches_outside_the_environment(
    template: dict[str, Any], where: list[tuple[Any, ...]], value: str, command: str, state: str, claim: bool
) -> None:
    copy = Copy(template)
    try:
        doc = copy.doc
        doc["state"] = state
        victim = copy.root / "outside" / "victim.py"
        for path in where:
            doc = mutate(doc, path, "set", fill(value, str(copy.root / "outside")))
            if claim and path[0] == "files":
                # Claim the victim's bytes as the lift's own: recovery would then put a backup over it.
                doc["files"][path[1]]["sha256_after"] = sha(victim)
                doc["files"][path[1]]["sha256_drifted"] = sha(victim)
        (copy.lift_dir / "lift.json").write_text(json.dumps(doc))
        run_journal_command(copy, command, template["lift_id"])
        copy.check()
    finally:
        copy.close()


@FUZZ
@given(
    content=st.one_of(
        json_values.map(json.dumps),
        st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
        st.sampled_from(["", "[" * 100000, "{" * 5000, '{"manifest_version": 1e999}', "9" * 5000]),
    ),
    command=commands,
)
def test_a_manifest_that_is_some_other_document_is_a_lift_error(
    template: dict[str, Any], content: str, command: str
) -> None:
    copy = Copy(template)
    try:
        (copy.lift_dir / "lift.json").write_text(
            fill(content, str(copy.root / "outside")), encoding="latin-1"
        )
        before = tree(copy.prefix)
        with pytest.raises(LiftError, match=r"lift\.json"), Journal(str(copy.prefix)).locked():
            pass
        run_journal_command(copy, command, template["lift_id"])
        after = tree(copy.prefix)
        for t in (before, after):
            t.pop(".liftgate/lock", None)
        assert after == before  # an unreadable journal changes nothing at all
        copy.check()
    finally:
        copy.close()


@FUZZ
@given(data=st.data())
def test_a_series_damaged_at_any_key_is_a_result_or_a_lift_error(
    template: dict[str, Any], data: st.DataObject
) -> None:
    copy = Copy(template)
    try:
        series_dir = copy.root / "series"
        doc: Any = json.loads(json.dumps(template["series"]))
        if data.draw(st.booleans(), label="whole document"):
            doc = data.draw(json_values, label="document")
        else:
            for _ in range(data.draw(st.integers(1, 3), label="mutations")):
                paths = key_paths(doc)
                if not paths:
                    break
                path = data.draw(st.sampled_from(paths), label="where")
                action = data.draw(st.sampled_from(["set", "set", "delete"]), label="action")
                doc = mutate(doc, path, action, fill(data.draw(json_values, label="value"), str(copy.root)))
        (series_dir / "liftgate-series.json").write_text(json.dumps(doc))
        try:
            checked = read_series(str(series_dir))
        except LiftError as exc:
            assert "\n" not in str(exc) and "liftgate-series.json" in str(exc)
        else:
            relocate_series(checked, template["es"], TARGET)
        copy.check()
    finally:
        copy.close()


@settings(FUZZ, max_examples=25)
@given(
    doc=st.fixed_dictionaries(
        {"series_version": st.just(1), "lift_id": st.text(max_size=8), "target": st.sampled_from(["sm_120", "sm_90a", "zz", ""])},
        optional={"packages": json_values, "gates": json_values},
    )
)  # fmt: skip
def test_apply_patches_with_a_damaged_series_exits_cleanly(
    template: dict[str, Any], doc: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    copy = Copy(template)
    try:
        (copy.root / "series" / "liftgate-series.json").write_text(json.dumps(doc))
        capsys.readouterr()
        code = main(["apply-patches", str(copy.root / "series"), "--env", str(copy.prefix), "--dry-run"])
        err = capsys.readouterr().err
        assert code in (0, 1, 2)
        if code == 2:
            assert len([line for line in err.splitlines() if "error" in line]) == 1, err
        copy.check()
    finally:
        copy.close()
