"""Lift never loses a user's bytes and never writes outside where it belongs.

Damaged journals (a manifest missing, not JSON, of the wrong shape, planted with paths outside
the environment), a revert that cannot finish, a full disk, a killed process, a symlinked file,
package- and series-controlled names: each is one clear error line (exit 2) that deletes nothing,
or a recovery that keeps whatever it did not write and says exactly what it did. Most scenarios
run on the synthetic ``minijudge`` package; the data-loss ones also on a real lifted
flashinfer-python 0.6.2 environment (the wheel from liftgate's download cache).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from liftgate.arch.core import Arch
from liftgate.cli.main import main
from liftgate.lift import journal as journal_mod
from liftgate.lift.journal import LiftError
from liftgate.lift.plan import FileChange, PatchPlan
from liftgate.lift.workflow import apply_plan, choose_gates, export_series, plan_env, read_series, scan_env

FIXTURE = Path(__file__).parent / "fixtures" / "judge" / "minijudge"
TARGET = Arch(12, 0)
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# -- helpers ----------------------------------------------------------------------------------------


def sha(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tree(root: Path) -> dict[str, str]:
    """Every entry under ``root``: files by sha256 and mode, links by target, directories; the
    journal's lock (its content is the last holder's pid) and bytecode caches left out."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if rel.endswith(".liftgate/lock") or "__pycache__" in p.parts:
                continue
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = f"{sha(p)} {stat.S_IMODE(p.stat().st_mode):o}"
    return out


def snapshot(site: Path) -> dict[str, str]:
    return {
        p.relative_to(site).as_posix(): sha(p)
        for p in site.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def tmp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".liftgate-tmp" in p.name]


@pytest.fixture(autouse=True)
def _raise_internal_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A traceback must fail the test, not become the CLI's "internal error" line.
    monkeypatch.setenv("LIFTGATE_INTERNAL_ERRORS", "raise")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # JIT caches looked up here, never the real ones
    monkeypatch.setattr(journal_mod, "FAULT", None)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, *needles: str) -> str:
    # `lift --all-liftable` first says how many losses it planned; the error is the one line after.
    lines = [ln for ln in err.strip().splitlines() if "liftable losses for" not in ln]
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith("liftgate: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def faults(*prefixes: str, exc: BaseException = ENOSPC) -> Callable[[str], None]:
    """A FAULT that raises ``exc`` at every step whose name starts with one of ``prefixes``."""

    def fault(name: str) -> None:
        if name.startswith(prefixes):
            raise exc

    return fault


def disk_full_from(step: str, *also: str) -> Callable[[str], None]:
    """The disk fills at ``step`` and stays full: from then on every step named by ``also`` fails too."""
    full = False

    def fault(name: str) -> None:
        nonlocal full
        full = full or name == step
        if full and (name == step or name.startswith(also)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return fault


@dataclasses.dataclass
class Lifted:
    prefix: Path
    site: Path
    plan: PatchPlan
    stock: dict[str, str]

    @property
    def lift_dir(self) -> Path:
        return self.prefix / ".liftgate" / "lifts" / self.plan.lift_id

    @property
    def manifest(self) -> Path:
        return self.lift_dir / "lift.json"

    def doc(self) -> dict[str, Any]:
        return dict(json.loads(self.manifest.read_text()))

    def write_doc(self, doc: Any) -> None:
        self.manifest.write_text(json.dumps(doc, indent=2))


def liftable_plan(prefix: Path) -> PatchPlan:
    es = scan_env(str(prefix), TARGET, judge=True)
    ids, refused = choose_gates(es, TARGET, [], True, False)
    return plan_env(es, TARGET, ids, refused=refused)


@pytest.fixture
def synthetic(fake_env: Callable[..., Path], tmp_path: Path) -> Lifted:
    """The minijudge package installed in a throwaway prefix, not lifted yet."""
    site = fake_env(FIXTURE, "minijudge", "0.1")
    prefix = tmp_path / "env"
    return Lifted(prefix, site, liftable_plan(prefix), snapshot(site))


@pytest.fixture
def lifted(synthetic: Lifted, tmp_path: Path) -> Lifted:
    """The same, with every liftable gate lifted (4 files)."""
    apply_plan(synthetic.plan, str(synthetic.prefix), environ={"HOME": str(tmp_path / "home")})
    assert len(synthetic.plan.files) == 4
    return synthetic


# -- a real flashinfer-python 0.6.2 environment ------------------------------------------------------


def _venv(dest: Path, wheels: list[str]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(dest / "bin" / "python"), "install", "-q",
         "--no-deps", "--no-compile", *wheels],
        check=True,
    )  # fmt: skip
    (site,) = (dest / "lib").glob("python3*/site-packages")
    return site


@dataclasses.dataclass(frozen=True)
class Pristine:
    prefix: Path
    plan: PatchPlan


@pytest.fixture(scope="module")
def flashinfer_pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    """flashinfer-python 0.6.2 installed once, and a plan lifting one gate in each of 13 of its files
    (planned without re-detection: these tests are about the journal, not the edits)."""
    from conftest import fetch_release
    from liftgate.lift.plan import plan_lift
    from liftgate.model import Status

    prefix = tmp_path_factory.mktemp("flashinfer") / "env"
    _venv(prefix, [fetch_release("flashinfer-python==0.6.2")])
    es = scan_env(str(prefix), TARGET)
    seen: dict[str, str] = {}
    for g in es.report.gates:
        path = g.location.path
        if (
            g.kind.value in ("cuda-pp", "py-runtime", "py-build")
            and g.status(TARGET) is not Status.ADMITTED
            and (path.startswith("flashinfer/data/include/flashinfer/") or path.count("/") == 1)
            and path not in seen
        ):
            seen[path] = g.id
    plan = plan_lift(es.report, list(seen.values()), TARGET, es.workspace)
    files = plan.files[:13]
    assert len(files) == 13, [f.path for f in plan.files]
    ids = {i for f in files for i in f.gate_ids}
    plan = dataclasses.replace(plan, files=files, planned=tuple(p for p in plan.planned if p.gate_id in ids))
    return Pristine(prefix, plan)


@pytest.fixture
def flashinfer(flashinfer_pristine: Pristine, tmp_path: Path) -> Lifted:
    """A private copy of the flashinfer environment and the plan re-pointed at it (not applied)."""
    prefix = tmp_path / "fi-env"
    shutil.copytree(flashinfer_pristine.prefix, prefix, symlinks=True)
    old = str(flashinfer_pristine.prefix)
    files = tuple(
        dataclasses.replace(f, fspath=str(prefix) + f.fspath[len(old) :])
        for f in flashinfer_pristine.plan.files
    )
    plan = dataclasses.replace(flashinfer_pristine.plan, files=files)
    (site,) = (prefix / "lib").glob("python3*/site-packages")
    return Lifted(prefix, site, plan, snapshot(site))


def _kill_during_apply(lifted: Lifted, tmp_path: Path, step: str) -> None:
    """Apply in a child process that dies (os._exit, as kill -9 would) at ``step``."""
    plan_file = tmp_path / "plan.pickle"
    plan_file.write_bytes(pickle.dumps(lifted.plan))
    script = textwrap.dedent(
        f"""
        import os, pickle
        from liftgate.lift import journal
        from liftgate.lift.workflow import apply_plan
        plan = pickle.loads(open({str(plan_file)!r}, "rb").read())
        journal.FAULT = lambda name: os._exit(137) if name == {step!r} else None
        apply_plan(plan, {str(lifted.prefix)!r}, environ={{"HOME": {str(tmp_path / "home")!r}}})
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 137, done.stderr


# -- a missing or unreadable manifest is an error, never "no active lifts" ---------------------------


def _assert_every_command_refuses(
    capsys: pytest.CaptureFixture[str], lifted: Lifted, *needles: str, root: Path | None = None
) -> None:
    """status, status --all --format json, revert ID, revert --all (--force): each exits 2 with one
    line containing ``needles``, and nothing under ``root`` (default: the environment) changes."""
    root = root or lifted.prefix
    before = tree(root)
    for argv in (
        ["status", "--env", str(lifted.prefix)],
        ["status", "--env", str(lifted.prefix), "--all", "--format", "json"],
        ["revert", lifted.plan.lift_id, "--env", str(lifted.prefix)],
        ["revert", "--all", "--env", str(lifted.prefix)],
        ["revert", "--all", "--force", "--env", str(lifted.prefix)],
    ):
        code, out, err = cli(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert "no active lifts" not in out + err
        one_error_line(err, *needles, "move ")  # what happened, to which file, and the way out
        assert tree(root) == before, argv  # nothing deleted, moved or written


def test_a_missing_manifest_is_an_error_that_deletes_no_backup(lifted: Lifted, capsys) -> None:  # type: ignore[no-untyped-def]
    lifted.manifest.unlink()
    _assert_every_command_refuses(capsys, lifted, str(lifted.manifest))
    assert (lifted.lift_dir / "backup" / "0").exists() and (lifted.lift_dir / "lifted" / "0").exists()


@pytest.mark.network
def test_a_missing_manifest_on_a_lifted_flashinfer_keeps_its_backups(flashinfer: Lifted, capsys) -> None:  # type: ignore[no-untyped-def]
    apply_plan(flashinfer.plan, str(flashinfer.prefix), environ={})
    backups = {p.name: sha(p) for p in (flashinfer.lift_dir / "backup").iterdir()}
    assert len(backups) == 13
    flashinfer.manifest.unlink()
    _assert_every_command_refuses(capsys, flashinfer, str(flashinfer.manifest))
    assert {p.name: sha(p) for p in (flashinfer.lift_dir / "backup").iterdir()} == backups
    for f in flashinfer.plan.files:
        assert sha(f.fspath) == f.sha_after  # still lifted: nothing pretended otherwise


def test_a_manifest_that_is_not_json_is_an_error(lifted: Lifted, capsys) -> None:  # type: ignore[no-untyped-def]
    lifted.manifest.write_text(lifted.manifest.read_text()[:-40])
    _assert_every_command_refuses(capsys, lifted, str(lifted.manifest))


def _shapes() -> dict[str, Callable[[dict[str, Any]], None]]:
    def files_object(d: dict[str, Any]) -> None:
        d["files"] = {str(n): f for n, f in enumerate(d["files"])}

    def files_string(d: dict[str, Any]) -> None:
        d["files"] = "minijudge/ops.py"

    def files_ints(d: dict[str, Any]) -> None:
        d["files"] = [1, 2, 3]

    def gates_bad(d: dict[str, Any]) -> None:
        d["gates"] = [{"gate_id": 7}, "cu-1"]

    def created_strings(d: dict[str, Any]) -> None:
        d["created"] = ["2025", "01"]

    def sequence_string(d: dict[str, Any]) -> None:
        d["sequence"] = "first"

    def caches_bad(d: dict[str, Any]) -> None:
        d["caches_moved"] = [{"cache": "flashinfer"}, "x"]

    def file_sha_int(d: dict[str, Any]) -> None:
        d["files"][1]["sha256_after"] = 12

    def top_level_list(d: dict[str, Any]) -> None:
        d.clear()
        d["__list__"] = True

    return {f.__name__: f for f in (files_object, files_string, files_ints, gates_bad, created_strings,
                                    sequence_string, caches_bad, file_sha_int, top_level_list)}  # fmt: skip


@pytest.mark.parametrize("shape", sorted(_shapes()))
def test_a_manifest_of_the_wrong_shape_is_an_error(lifted: Lifted, shape: str, capsys) -> None:  # type: ignore[no-untyped-def]
    doc = lifted.doc()
    _shapes()[shape](doc)
    lifted.write_doc([] if "__list__" in doc else doc)
    _assert_every_command_refuses(capsys, lifted, str(lifted.manifest))


# -- recovery keeps what it did not write ---------------------------------------------------------


@pytest.mark.network
def test_a_file_edited_after_a_kill_is_kept_by_the_rollback(
    flashinfer: Lifted, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    _kill_during_apply(flashinfer, tmp_path, "written:2")
    files = flashinfer.plan.files
    assert [sha(f.fspath) == f.sha_after for f in files[:4]] == [True, True, True, False]
    edited = Path(files[1].fspath)
    mine = edited.read_bytes() + b"\n// my fix, written while the lift was interrupted\n"
    edited.write_bytes(mine)
    code, _out, err = cli(capsys, "status", "--env", str(flashinfer.prefix))
    assert edited.read_bytes() == mine  # not overwritten
    for f in files:
        if f.fspath != str(edited):
            assert sha(f.fspath) == f.sha_before, f.path  # what the lift wrote is rolled back
    backup = flashinfer.lift_dir / "backup" / "1"
    assert sha(backup) == files[1].sha_before  # the stock bytes stay in the journal
    assert "rolled back" in err and str(edited) in err and str(backup) in err
    assert code == 1  # the environment is not as the lift found it: say so in the exit code too
    assert not tmp_files(flashinfer.prefix)
    # The rollback is recorded: the next command has nothing to do and still keeps the edit.
    code, _out, err = cli(capsys, "status", "--env", str(flashinfer.prefix))
    assert code == 0 and edited.read_bytes() == mine and "rolled back" not in err


def test_a_file_edited_after_a_crash_is_kept_on_a_synthetic_env(
    synthetic: Lifted, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(journal_mod, "FAULT", faults("write:3", exc=KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        apply_plan(synthetic.plan, str(synthetic.prefix), environ={})
    monkeypatch.setattr(journal_mod, "FAULT", None)
    edited = Path(synthetic.plan.files[0].fspath)
    edited.write_bytes(b"// my own version\n")
    assert main(["revert", "--all", "--env", str(synthetic.prefix)]) == 0
    assert edited.read_bytes() == b"// my own version\n"
    assert str(edited) in capsys.readouterr().err


# -- a revert that cannot finish ---------------------------------------------------------------------


def test_a_missing_backup_refuses_the_revert_before_any_file_changes(lifted: Lifted, capsys) -> None:  # type: ignore[no-untyped-def]
    (lifted.lift_dir / "backup" / "2").unlink()
    site_before = snapshot(lifted.site)
    code, _out, err = cli(capsys, "revert", lifted.plan.lift_id, "--env", str(lifted.prefix))
    assert code == 2
    line = one_error_line(err, str(lifted.lift_dir / "backup" / "2"), lifted.plan.files[2].fspath)
    assert "nothing was restored" in line
    assert snapshot(lifted.site) == site_before
    # The lock stays usable and the lift is still shown as it is.
    code, out, err = cli(capsys, "status", "--env", str(lifted.prefix))
    assert code == 0 and lifted.plan.lift_id in out and "intact" in out


def test_a_revert_that_fails_midway_says_which_files_and_the_lock_stays_usable(
    lifted: Lifted, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    files = lifted.plan.files
    monkeypatch.setattr(journal_mod, "FAULT", faults("restore:2"))
    code, _out, err = cli(capsys, "revert", lifted.plan.lift_id, "--env", str(lifted.prefix))
    assert code == 2
    line = one_error_line(err)
    # The one file that failed is named; the others were restored (a failure does not stop the rest).
    assert [sha(f.fspath) == f.sha_before for f in files] == [True, True, False, True]
    restored, _, rest = line.partition("not restored")
    assert all(files[n].fspath in restored for n in (0, 1, 3)) and "3 of 4 files are as before" in restored
    assert files[2].fspath in rest and not any(files[n].fspath in rest for n in (0, 1, 3))
    # Still failing: every later command still works and says what is left.
    code, out, err = cli(capsys, "status", "--env", str(lifted.prefix))
    assert code == 1 and "reverting" in out and files[2].fspath in err
    code, _out, err = cli(capsys, "revert", "--all", "--env", str(lifted.prefix))
    assert code == 2 and "not restored" in err
    # Once the cause is gone, the next command finishes the revert.
    monkeypatch.setattr(journal_mod, "FAULT", None)
    code, out, err = cli(capsys, "status", "--env", str(lifted.prefix))
    assert code == 0 and "no active lifts" in out and "finished" in err
    assert snapshot(lifted.site) == lifted.stock


# -- a full disk ---------------------------------------------------------------------------------------


@pytest.mark.network
def test_enospc_mid_apply_is_rolled_back_and_says_so(flashinfer: Lifted, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(journal_mod, "FAULT", faults("write:2"))
    with pytest.raises(LiftError) as info:
        apply_plan(flashinfer.plan, str(flashinfer.prefix), environ={})
    message = str(info.value)
    assert "\n" not in message and "No space left on device" in message
    assert "rolled back" in message and flashinfer.plan.files[2].fspath in message
    assert snapshot(flashinfer.site) == flashinfer.stock  # true: every file is as before
    assert not tmp_files(flashinfer.prefix)
    monkeypatch.setattr(journal_mod, "FAULT", None)
    code, out, _err = cli(capsys, "status", "--env", str(flashinfer.prefix))
    assert code == 0 and "no active lifts" in out


@pytest.mark.network
def test_enospc_that_stays_names_the_lifted_files_and_status_still_works(
    flashinfer: Lifted, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    files = flashinfer.plan.files
    # The disk fills while the third file is written, and stays full: every later write fails.
    full = disk_full_from("write:2", "tmp:", "restore:", "json", "lock")
    monkeypatch.setattr(journal_mod, "FAULT", full)
    with pytest.raises(LiftError) as info:
        apply_plan(flashinfer.plan, str(flashinfer.prefix), environ={})
    message = str(info.value)
    assert "nothing was left half-applied" not in message
    lifted_now = [f.fspath for f in files if sha(f.fspath) == f.sha_after]
    assert lifted_now == [files[0].fspath, files[1].fspath]
    still, _, _ = message.partition("as before")
    assert all(p in message for p in lifted_now) and "still lifted" in message
    assert files[5].fspath not in still
    assert not tmp_files(flashinfer.prefix)
    # status on the still-full disk: no traceback, the truth, exit 1.
    code, out, err = cli(capsys, "status", "--env", str(flashinfer.prefix))
    assert code == 1, err
    assert "applying" in out and out.count(" lifted ") == 2
    assert "could not be finished" in err
    assert not tmp_files(flashinfer.prefix)
    # Space again: the next command rolls it back.
    monkeypatch.setattr(journal_mod, "FAULT", None)
    code, out, err = cli(capsys, "status", "--env", str(flashinfer.prefix))
    assert code == 0 and "rolled back" in err and "no active lifts" in out
    assert snapshot(flashinfer.site) == flashinfer.stock


def test_enospc_through_the_cli_message_is_true(synthetic: Lifted, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(journal_mod, "FAULT", disk_full_from("write:2", "tmp:", "restore:"))
    code, _out, err = cli(
        capsys, "lift", "--all-liftable", "-t", "sm_120", "--env", str(synthetic.prefix), "--yes"
    )
    assert code == 2
    line = one_error_line(err)
    assert "nothing was left half-applied" not in line
    files = synthetic.plan.files
    assert files[0].fspath in line and files[1].fspath in line and "still lifted" in line
    monkeypatch.setattr(journal_mod, "FAULT", None)
    assert main(["status", "--env", str(synthetic.prefix)]) == 0
    assert snapshot(synthetic.site) == synthetic.stock


# -- temp files -----------------------------------------------------------------------------------------


def test_a_temp_file_left_by_a_kill_is_removed_by_the_next_command(synthetic: Lifted, tmp_path: Path) -> None:
    name = os.path.basename(synthetic.plan.files[1].fspath)
    _kill_during_apply(synthetic, tmp_path, f"tmp:{name}")
    assert tmp_files(synthetic.site)  # the kill left one in site-packages
    assert main(["status", "--env", str(synthetic.prefix)]) == 0
    assert not tmp_files(synthetic.prefix)
    assert snapshot(synthetic.site) == synthetic.stock


def test_a_temp_file_is_removed_when_a_write_fails(synthetic: Lifted, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    name = os.path.basename(synthetic.plan.files[1].fspath)
    monkeypatch.setattr(journal_mod, "FAULT", faults(f"tmp:{name}"))
    with pytest.raises(LiftError):
        apply_plan(synthetic.plan, str(synthetic.prefix), environ={})
    assert not tmp_files(synthetic.prefix)
    assert snapshot(synthetic.site) == synthetic.stock


# -- symlinks ---------------------------------------------------------------------------------------------


def test_a_symlinked_file_stays_a_link_through_lift_and_revert(fake_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = fake_env(FIXTURE, "minijudge", "0.1")
    prefix = tmp_path / "env"
    link = site / "minijudge" / "ops.py"
    real = prefix / "share" / "minijudge" / "ops.py"
    real.parent.mkdir(parents=True)
    shutil.move(link, real)
    link.symlink_to(os.path.relpath(real, link.parent))
    stock = real.read_bytes()
    plan = liftable_plan(prefix)
    assert str(link) in [f.fspath for f in plan.files]
    apply_plan(plan, str(prefix), environ={})
    assert link.is_symlink() and real.read_bytes() != stock and b"liftgate: +sm_120" in real.read_bytes()
    assert main(["revert", "--all", "--env", str(prefix)]) == 0
    assert link.is_symlink() and real.read_bytes() == stock


def test_a_link_to_outside_the_environment_is_not_lifted(fake_env, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    site = fake_env(FIXTURE, "minijudge", "0.1")
    prefix = tmp_path / "env"
    link = site / "minijudge" / "ops.py"
    outside = tmp_path / "shared" / "ops.py"
    outside.parent.mkdir()
    shutil.move(link, outside)
    link.symlink_to(outside)
    stock = outside.read_bytes()
    code, out, err = cli(capsys, "lift", "--all-liftable", "-t", "sm_120", "--env", str(prefix), "--yes")
    assert outside.read_bytes() == stock and link.is_symlink()
    assert "outside the environment" in out + err
    # The journal refuses it too when handed such a plan directly.
    es = scan_env(str(prefix), TARGET)
    gate = next(g for g in es.report.gates if g.location.path == "minijudge/ops.py")
    from liftgate.lift.plan import plan_lift

    plan = plan_lift(es.report, [gate.id], TARGET, es.workspace)
    assert plan.files and plan.files[0].fspath == str(link)
    with pytest.raises(LiftError, match="outside the environment"):
        apply_plan(plan, str(prefix), environ={})
    assert outside.read_bytes() == stock
    del code


# -- writes outside where they belong -------------------------------------------------------------------


def test_export_keeps_every_patch_inside_the_directory(synthetic: Lifted, tmp_path: Path) -> None:
    first, *rest = synthetic.plan.files
    evil = (
        dataclasses.replace(first, package="../../escaped", version="0.1"),
        *(dataclasses.replace(f, package="ok", version="0.1/../../../v") for f in rest),
    )
    plan = dataclasses.replace(synthetic.plan, files=evil)
    out = tmp_path / "deep" / "series"
    out.parent.mkdir()
    before = {p for p in tmp_path.rglob("*") if out not in p.parents}
    written = export_series(plan, str(out))
    for path in written:
        assert Path(os.path.realpath(path)).parent == out.resolve(), path
    assert {p for p in tmp_path.rglob("*") if out not in p.parents and p != out} <= before
    doc = read_series(str(out))
    assert all("/" not in p["patch"] and ".." not in p["patch"] for p in doc["packages"])


def test_a_record_entry_outside_the_environment_is_never_patched(fake_env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    site = fake_env(FIXTURE, "minijudge", "0.1")
    prefix = tmp_path / "env"
    victim = tmp_path / "victim" / "pdl.cuh"
    victim.parent.mkdir()
    shutil.copyfile(FIXTURE / "include" / "minijudge" / "pdl.cuh", victim)
    record = site / "minijudge-0.1.dist-info" / "RECORD"
    rel = os.path.relpath(victim, site)
    assert rel.startswith("../")
    record.write_text(record.read_text() + f"{rel},,\n")
    stock = victim.read_bytes()
    main(["lift", "--all-liftable", "-t", "sm_120", "--env", str(prefix), "--yes"])
    assert victim.read_bytes() == stock
    # And the journal refuses such a file in a plan it is handed, before changing anything.
    change = FileChange("minijudge", "0.1", rel, str(site / rel), stock, stock + b"// x\n", ("cu-x",))
    plan = PatchPlan("lg-0000beef", TARGET, (), (), (change,))
    before = tree(prefix)
    with pytest.raises(LiftError, match="outside the environment"):
        apply_plan(plan, str(prefix), environ={})
    assert victim.read_bytes() == stock and tree(prefix) == before


def _plant(lifted: Lifted, state: str, change: Callable[[dict[str, Any]], None]) -> None:
    doc = lifted.doc()
    doc["state"] = state
    change(doc)
    lifted.write_doc(doc)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    victim = tmp_path / "outside" / "victim.py"
    victim.parent.mkdir()
    victim.write_bytes(b"precious = True\n")
    (tmp_path / "outside" / "dir").mkdir()
    (tmp_path / "outside" / "dir" / "keep").write_bytes(b"keep")
    return tmp_path / "outside"


def test_a_planted_fspath_outside_the_environment_is_refused(lifted: Lifted, outside: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    victim = outside / "victim.py"

    def plant(doc: dict[str, Any]) -> None:
        f = doc["files"][0]
        f["fspath"] = str(lifted.site / ".." / ".." / ".." / ".." / "outside" / "victim.py")
        f["sha256_after"] = sha(victim)  # "the lift wrote it": recovery would put the backup there
        f["mode"] = 0o4755

    _plant(lifted, "applying", plant)
    _assert_every_command_refuses(
        capsys, lifted, str(lifted.manifest), "outside the environment", root=outside.parent
    )
    assert victim.read_bytes() == b"precious = True\n"


@pytest.mark.parametrize("key", ["backup", "lifted"])
def test_a_planted_backup_path_with_dotdot_is_refused(
    lifted: Lifted, outside: Path, key: str, capsys
) -> None:  # type: ignore[no-untyped-def]
    payload = outside / "payload"
    payload.write_bytes(b"import os; os.system('evil')\n")

    def plant(doc: dict[str, Any]) -> None:
        doc["files"][0][key] = "../../../../outside/payload"
        if key == "backup":
            doc["files"][0]["sha256_before"] = sha(payload)

    _plant(lifted, "applying", plant)
    _assert_every_command_refuses(capsys, lifted, str(lifted.manifest), root=outside.parent)


def test_a_planted_cache_entry_outside_the_known_caches_is_refused(
    lifted: Lifted, outside: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    aside = lifted.lift_dir / "caches" / "0" / "entry"
    aside.mkdir(parents=True)
    (aside / "payload.so").write_bytes(b"ELF")

    def plant(doc: dict[str, Any]) -> None:
        doc["caches_moved"] = [
            {"cache": "flashinfer", "original": str(outside / "planted"), "moved_to": "caches/0/entry"}
        ]

    _plant(lifted, "applying", plant)
    _assert_every_command_refuses(
        capsys, lifted, str(lifted.manifest), str(outside / "planted"), root=outside.parent
    )


def test_a_planted_moved_to_outside_the_lift_is_refused(
    lifted: Lifted, outside: Path, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    original = tmp_path / "home" / ".cache" / "flashinfer" / "0.6.2" / "120a" / "cached_ops" / "x"

    def plant(doc: dict[str, Any]) -> None:
        doc["caches_moved"] = [
            {"cache": "flashinfer", "original": str(original), "moved_to": "../../../../outside/dir"}
        ]

    _plant(lifted, "applying", plant)
    _assert_every_command_refuses(capsys, lifted, str(lifted.manifest), root=outside.parent)
    assert not original.exists()


def test_a_legitimate_cache_entry_comes_back_on_recovery(lifted: Lifted, tmp_path: Path) -> None:
    original = tmp_path / "home" / ".cache" / "flashinfer" / "0.6.2" / "120a" / "cached_ops" / "pdl"
    aside = lifted.lift_dir / "caches" / "0" / "pdl"
    aside.mkdir(parents=True)
    (aside / "pdl.so").write_bytes(b"ELF")

    def plant(doc: dict[str, Any]) -> None:
        doc["caches_moved"] = [{"cache": "flashinfer", "original": str(original), "moved_to": "caches/0/pdl"}]

    _plant(lifted, "applying", plant)
    assert main(["status", "--env", str(lifted.prefix)]) == 0
    assert (original / "pdl.so").read_bytes() == b"ELF"
    assert snapshot(lifted.site) == lifted.stock


def test_the_mode_from_a_journal_is_masked(lifted: Lifted) -> None:
    _plant(lifted, "applied", lambda doc: [f.__setitem__("mode", 0o6755) for f in doc["files"]])
    assert main(["revert", "--all", "--env", str(lifted.prefix)]) == 0
    for f in lifted.plan.files:
        assert stat.S_IMODE(os.stat(f.fspath).st_mode) & 0o7000 == 0
    assert snapshot(lifted.site) == lifted.stock


def test_apply_records_only_permission_bits(synthetic: Lifted) -> None:
    target = Path(synthetic.plan.files[0].fspath)
    os.chmod(target, 0o2755)
    apply_plan(synthetic.plan, str(synthetic.prefix), environ={})
    doc = json.loads(
        (synthetic.prefix / ".liftgate" / "lifts" / synthetic.plan.lift_id / "lift.json").read_text()
    )
    assert doc["files"][0]["mode"] == 0o755
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


# -- apply-patches with a damaged series ------------------------------------------------------------------


@pytest.fixture
def series(synthetic: Lifted, tmp_path: Path) -> Path:
    out = tmp_path / "series"
    export_series(synthetic.plan, str(out))
    return out


def _series_variants() -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {
        "not-json": lambda d: "{ this is not json",
        "top-level-list": lambda d: [d],
        "gates-string": lambda d: {**d, "gates": "cu-1234"},
        "packages-ints": lambda d: {**d, "packages": [1, 2]},
        "gate-entry-int": lambda d: {**d, "gates": [*d["gates"][:1], 3]},
        "target-int": lambda d: {**d, "target": 120},
        "missing-target": lambda d: {k: v for k, v in d.items() if k != "target"},
        "missing-gate-id": lambda d: {**d, "gates": [{k: v for k, v in g.items() if k != "gate_id"} for g in d["gates"]]},
        "patch-dotdot": lambda d: {**d, "packages": [{**p, "patch": "../../evil.patch"} for p in d["packages"]]},
        "gate-path-dotdot": lambda d: {**d, "gates": [{**g, "path": "../../../etc/passwd"} for g in d["gates"]]},
    }  # fmt: skip


@pytest.mark.parametrize("variant", sorted(_series_variants()))
def test_apply_patches_with_a_damaged_series_is_one_line(
    synthetic: Lifted, series: Path, variant: str, capsys
) -> None:  # type: ignore[no-untyped-def]
    path = series / "liftgate-series.json"
    damaged = _series_variants()[variant](json.loads(path.read_text()))
    path.write_text(damaged if isinstance(damaged, str) else json.dumps(damaged))
    before = tree(synthetic.prefix)
    code, _out, err = cli(capsys, "apply-patches", str(series), "--env", str(synthetic.prefix), "--yes")
    assert code == 2
    one_error_line(err, str(path), "liftgate lift --export")
    assert tree(synthetic.prefix) == before
