"""Applying, reverting and recovering lifts in a throwaway environment (the synthetic judge package
installed with a dist-info RECORD): byte-exact restores, drift, locks, permissions, JIT caches,
and a fault injected at every step of apply and revert.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from liftgate.arch.core import Arch
from liftgate.cli.main import main
from liftgate.lift import journal as journal_mod
from liftgate.lift.caches import CacheMover, CacheSpec
from liftgate.lift.journal import Journal, LiftError, prefix_for
from liftgate.lift.workflow import apply_plan, choose_gates, plan_env, revert, scan_env

FIXTURE = Path(__file__).parent / "fixtures" / "judge" / "minijudge"
TARGET = Arch(12, 0)


def sha(path: Path | str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def snapshot(site: Path) -> dict[str, str]:
    return {
        p.relative_to(site).as_posix(): sha(p)
        for p in site.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture
def env(fake_env, tmp_path: Path):  # type: ignore[no-untyped-def]
    site = fake_env(FIXTURE, "minijudge", "0.1")
    return tmp_path / "env", site


def liftable_plan(prefix: Path):  # type: ignore[no-untyped-def]
    es = scan_env(str(prefix), TARGET, judge=True)
    ids, refused = choose_gates(es, TARGET, [], True, False)
    assert ids, "the synthetic package has liftable gates"
    return plan_env(es, TARGET, ids, refused=refused)


def test_apply_status_revert_restores_every_byte(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    record = (site / "minijudge-0.1.dist-info" / "RECORD").read_bytes()
    pycache = site / "minijudge" / "__pycache__"
    pycache.mkdir()
    (pycache / "ops.cpython-311.pyc").write_bytes(b"stale")
    plan = liftable_plan(prefix)
    assert plan.verified
    doc = apply_plan(plan, str(prefix), environ={"HOME": str(tmp_path / "home")})
    assert doc["state"] == "applied"
    after = snapshot(site)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {f.path for f in plan.files}
    for f in plan.files:
        assert sha(f.fspath) == f.sha_after
    # The journal: manifest and byte-exact backups next to the environment.
    lift_dir = prefix / ".liftgate" / "lifts" / plan.lift_id
    manifest = json.loads((lift_dir / "lift.json").read_text())
    assert manifest["target"] == "sm_120" and manifest["liftgate_version"]
    for entry in manifest["files"]:
        assert sha(lift_dir / entry["backup"]) == entry["sha256_before"]
    assert (site / "minijudge-0.1.dist-info" / "RECORD").read_bytes() == record  # left as installed
    assert not (pycache / "ops.cpython-311.pyc").exists()  # stale bytecode of a patched module
    (status,) = Journal(str(prefix)).status()
    assert status.state == "applied" and not status.drifted
    done, _notes = revert(None, str(prefix), environ={"HOME": str(tmp_path / "home")})
    assert [d["lift_id"] for d in done] == [plan.lift_id]
    assert snapshot(site) == before


def test_a_file_changed_since_the_scan_is_refused(env) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    plan = liftable_plan(prefix)
    victim = Path(plan.files[0].fspath)
    victim.write_bytes(victim.read_bytes() + b"\n// edited\n")
    before = snapshot(site)
    with pytest.raises(LiftError, match="changed since it was scanned"):
        apply_plan(plan, str(prefix), environ={})
    assert snapshot(site) == before


def test_drift_is_reported_and_revert_refuses_unless_forced(env, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    plan = liftable_plan(prefix)
    apply_plan(plan, str(prefix), environ={})
    victim = Path(plan.files[0].fspath)
    victim.write_bytes(b"// upgraded by pip\n")
    assert main(["status", "--env", str(prefix)]) == 1
    out = capsys.readouterr().out
    assert "DRIFT in 1 of" in out and str(victim) in out
    with pytest.raises(LiftError, match=f"files changed since the lift: {victim}"):
        revert(plan.lift_id, str(prefix), environ={})
    done, _ = revert(plan.lift_id, str(prefix), force=True, environ={})
    assert snapshot(site) == before
    kept = prefix / ".liftgate" / "lifts" / plan.lift_id / done[0]["files"][0]["drifted_copy"]
    assert kept.read_bytes() == b"// upgraded by pip\n"


def test_stacked_lifts_revert_newest_first(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    es = scan_env(str(prefix), TARGET)
    pdl = [g.id for g in es.report.gates if g.location.path.endswith("pdl.cuh")]
    apply_plan(plan_env(es, TARGET, pdl[:1]), str(prefix), environ={})
    es = scan_env(str(prefix), TARGET)
    second = [
        g.id
        for g in es.report.gates
        if g.location.path.endswith("pdl.cuh") and g.status(TARGET).value != "admitted"
    ]
    plan2 = plan_env(es, TARGET, second[:1])
    apply_plan(plan2, str(prefix), environ={})
    first_id = Journal(str(prefix)).active()[0]["lift_id"]
    with pytest.raises(LiftError, match=f"revert the later lift {plan2.lift_id} first"):
        revert(first_id, str(prefix), environ={})
    done, _ = revert(None, str(prefix), environ={})
    assert [d["lift_id"] for d in done] == [plan2.lift_id, first_id]
    assert snapshot(site) == before


APPLY_STEPS = ["backup:0", "manifest", "write:0", "written:0", "write:1", "written:1", "bytecode", "commit"]
REVERT_STEPS = ["revert-manifest", "restore:0", "restored:0", "restore:1", "revert-caches", "revert-commit"]


class Crash(BaseException):
    """What an injected fault raises (not an Exception: nothing may swallow it)."""


@pytest.mark.parametrize("step", APPLY_STEPS)
def test_a_crash_at_any_apply_step_leaves_whole_files_and_the_next_command_rolls_back(
    env, step, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    plan = liftable_plan(prefix)
    assert len(plan.files) >= 2

    def fault(name: str) -> None:
        if name == step:
            raise Crash(name)

    monkeypatch.setattr(journal_mod, "FAULT", fault)
    with pytest.raises(Crash):
        apply_plan(plan, str(prefix), environ={})
    monkeypatch.setattr(journal_mod, "FAULT", None)
    for f in plan.files:
        assert sha(f.fspath) in (f.sha_before, f.sha_after)  # never a mixed file
    journal = Journal(str(prefix))
    with journal.locked():
        pass
    if step == "commit":  # the manifest said "applied" before the crash: the lift stands
        assert [d["lift_id"] for d in journal.active()] == [plan.lift_id]
        revert(None, str(prefix), environ={})
    else:
        assert any("rolled back" in n for n in journal.notes) or step == "backup:0"
        assert journal.active() == []
    assert snapshot(site) == before
    assert not list(site.rglob("*.liftgate-tmp-*"))


@pytest.mark.parametrize("step", REVERT_STEPS)
def test_a_crash_at_any_revert_step_is_finished_by_the_next_command(env, step, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    plan = liftable_plan(prefix)
    apply_plan(plan, str(prefix), environ={})

    def fault(name: str) -> None:
        if name == step:
            raise Crash(name)

    monkeypatch.setattr(journal_mod, "FAULT", fault)
    with pytest.raises(Crash):
        revert(plan.lift_id, str(prefix), environ={})
    monkeypatch.setattr(journal_mod, "FAULT", None)
    for f in plan.files:
        assert sha(f.fspath) in (f.sha_before, f.sha_after)
    journal = Journal(str(prefix))
    with journal.locked():
        pass
    assert journal.active() == []
    assert snapshot(site) == before


def test_a_forced_revert_interrupted_is_finished_over_the_bytes_it_kept_and_no_others(
    env, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    plan = liftable_plan(prefix)
    apply_plan(plan, str(prefix), environ={})
    upgraded, edited = Path(plan.files[0].fspath), Path(plan.files[1].fspath)
    upgraded.write_bytes(b"// upgraded by pip\n")

    def fault(name: str) -> None:
        if name == "restore:0":
            raise Crash(name)

    monkeypatch.setattr(journal_mod, "FAULT", fault)
    with pytest.raises(Crash):
        revert(plan.lift_id, str(prefix), force=True, environ={})
    monkeypatch.setattr(journal_mod, "FAULT", None)
    # While the revert is interrupted, someone edits another lifted file.
    edited.write_bytes(b"// edited by hand\n")
    journal = Journal(str(prefix))
    with journal.locked():
        pass
    assert sha(upgraded) == plan.files[0].sha_before  # its bytes were kept in the journal: restored
    assert edited.read_bytes() == b"// edited by hand\n"  # nobody kept these: left alone, reported
    assert any(str(edited) in w and "backup/1" in w for w in journal.warnings)
    lift_dir = prefix / ".liftgate" / "lifts" / plan.lift_id
    assert (lift_dir / "drifted" / "0").read_bytes() == b"// upgraded by pip\n"
    assert sha(lift_dir / "backup" / "1") == plan.files[1].sha_before
    assert journal.active() == []
    edited.write_bytes((lift_dir / "backup" / "1").read_bytes())
    assert snapshot(site) == before


def test_a_killed_process_is_recovered_by_the_next_command(env) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    script = textwrap.dedent(
        f"""
        import os
        from liftgate.arch.core import Arch
        from liftgate.lift import journal
        from liftgate.lift.workflow import apply_plan, choose_gates, plan_env, scan_env
        es = scan_env({str(prefix)!r}, Arch(12, 0), judge=True)
        ids, _ = choose_gates(es, Arch(12, 0), [], True, False)
        plan = plan_env(es, Arch(12, 0), ids)
        journal.FAULT = lambda step: os._exit(137) if step == "written:0" else None
        apply_plan(plan, {str(prefix)!r}, environ={{}})
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 137, done.stderr
    assert snapshot(site) != before  # one file was written when it died
    assert main(["status", "--env", str(prefix)]) == 0  # the next command rolls it back
    assert snapshot(site) == before


def test_a_second_process_is_locked_out(env) -> None:  # type: ignore[no-untyped-def]
    prefix, _site = env
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys, time; from liftgate.lift.journal import Journal\n"
            f"j = Journal({str(prefix)!r})\n"
            "with j.locked():\n    print('held', flush=True)\n    time.sleep(30)\n",
        ],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with (
            pytest.raises(LiftError, match=rf"another liftgate process \(pid {holder.pid}\)"),
            Journal(str(prefix)).locked(),
        ):
            pass
    finally:
        holder.kill()
        holder.wait()


def test_read_only_site_packages_is_a_one_line_error(env, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    plan = liftable_plan(prefix)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: False if str(p).startswith(str(site)) else real_access(p, m)
    )
    with pytest.raises(LiftError, match="permission denied; run liftgate as the environment's owner"):
        apply_plan(plan, str(prefix), environ={})
    assert snapshot(site) == before
    assert Journal(str(prefix)).active() == []


def test_jit_cache_entries_built_from_patched_sources_move_aside_and_back(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    cache = tmp_path / "jitcache"
    stale = cache / "0.1" / "120a" / "cached_ops" / "pdl"
    other = cache / "0.1" / "120a" / "cached_ops" / "unrelated"
    by_source = cache / "0.1" / "120a" / "cached_ops" / "consumer"
    for d in (stale, other, by_source):
        d.mkdir(parents=True)
    (stale / "pdl.so").write_bytes(b"ELF")  # no build files: found by the JIT module's name
    (by_source / "build.ninja").write_text("build c.o: cuda_compile consumer.cu\n")
    (by_source / ".ninja_deps").write_bytes(b"\x00" + f"{site}/include/minijudge/pdl.cuh".encode() + b"\x00")
    (other / "build.ninja").write_text("build x.o: cuda_compile /elsewhere/x.cu\n")
    spec = CacheSpec(
        "minijudge", "test JIT", ("minijudge",), (("MINIJUDGE_CACHE", "${MINIJUDGE_CACHE}"),),
        "*/*/cached_ops/*", ("build.ninja", ".ninja_deps"), False, "test", "",
    )  # fmt: skip
    environ = {"MINIJUDGE_CACHE": str(cache)}
    plan = liftable_plan(prefix)
    journal = Journal(prefix_for(str(prefix)))
    with journal.locked():
        doc = journal.apply(plan, CacheMover(environ, [spec]))
    moved = {m["original"] for m in doc["caches_moved"]}
    assert str(stale) in moved and str(by_source) in moved  # by its JIT module's name; by its sources
    assert str(other) not in moved and other.exists() and not stale.exists()
    # While lifted, the tool rebuilds the entry from the patched sources.
    stale.mkdir(parents=True)
    (stale / "pdl.so").write_bytes(b"ELF lifted")
    with journal.locked():
        done = journal.revert(plan.lift_id, caches=CacheMover(environ, [spec]))
    assert (stale / "pdl.so").read_bytes() == b"ELF"  # the stock entry is back
    assert (by_source / "build.ninja").exists()
    assert any(m["original"] == str(stale) for m in done["lifted_caches_moved"])
    aside = prefix / ".liftgate" / "lifts" / plan.lift_id
    assert [p.read_bytes() for p in aside.rglob("pdl.so")] == [b"ELF lifted"]  # kept, not deleted


def test_cli_lift_dry_run_then_yes_then_revert(env, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, site = env
    before = snapshot(site)
    assert main(["lift", "--all-liftable", "-t", "sm_120", "--env", str(prefix), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("lift lg-") and "+++ b/include/minijudge/pdl.cuh" in out
    assert "re-detected: every planned gate now admits the target" in out
    assert snapshot(site) == before
    assert (
        main(["lift", "--all-liftable", "-t", "sm_120", "--env", str(prefix)]) == 2
    )  # no terminal, no --yes
    assert "pass --yes" in capsys.readouterr().err
    assert main(["lift", "--all-liftable", "-t", "sm_120", "--env", str(prefix), "--yes"]) == 0
    err = capsys.readouterr().err
    assert "liftgate: applied lg-" in err and "undo with `liftgate revert lg-" in err
    assert main(["status", "--env", str(prefix), "--format", "json"]) == 0
    (lift,) = json.loads(capsys.readouterr().out)["lifts"]
    assert {f["state"] for f in lift["files"]} == {"lifted"}
    assert main(["revert", "--all", "--env", str(prefix)]) == 0
    assert snapshot(site) == before
    assert main(["status", "--env", str(prefix)]) == 0
    assert "no active lifts" in capsys.readouterr().out


def test_cli_refuses_a_blocked_gate_unless_forced(env, capsys) -> None:  # type: ignore[no-untyped-def]
    prefix, _site = env
    es = scan_env(str(prefix), Arch(12, 0, "a"), judge=True)
    blocked = [v.gate_id for v in es.report.verdicts if v.kind.value == "blocked"]
    assert blocked
    assert main(["lift", blocked[0], "-t", "sm_120a", "--env", str(prefix), "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "judged blocked for sm_120a" in out and "--force lifts it anyway" in out
    assert main(["lift", blocked[0], "-t", "sm_120a", "--env", str(prefix), "--dry-run", "--force"]) == 0


def test_the_same_files_in_another_package_are_not_taken_from_the_cache(env, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from liftgate.scan import scan

    prefix, _site = env
    cache = str(tmp_path / "cache")
    installed = scan([], ["sm_120"], env=str(prefix), cache_dir=cache)
    tree = scan([str(FIXTURE)], ["sm_120"], cache_dir=cache)
    assert {g.location.version for g in installed.gates if g.location.package == "minijudge"} == {"0.1"}
    assert {g.location.version for g in tree.gates} == {None}


def test_apply_patches_refuses_a_changed_gate_and_lifts_the_rest(
    env, fake_env, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    prefix, _site = env
    series = tmp_path / "series"
    assert (
        main(
            [
                "lift",
                "--all-liftable",
                "-t",
                "sm_120",
                "--env",
                str(prefix),
                "--dry-run",
                "--export",
                str(series),
            ]
        )
        == 0
    )
    meta = json.loads((series / "liftgate-series.json").read_text())
    # Another release: the first PDL gate's condition changed, the rest moved down two lines.
    tree = tmp_path / "next"
    import shutil

    shutil.copytree(FIXTURE, tree)
    pdl = tree / "include" / "minijudge" / "pdl.cuh"
    text = pdl.read_text().replace(
        "(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200)",
        "(__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1000)",
        1,
    )
    pdl.write_text("// 0.2\n\n" + text)
    site2 = fake_env(tree, "minijudge", "0.2", prefix=tmp_path / "env2")
    capsys.readouterr()
    code = main(["apply-patches", str(series), "--env", str(tmp_path / "env2"), "--yes"])
    err = capsys.readouterr().err
    assert code == 1  # applied, with a gate refused
    (refused_line,) = [line for line in err.splitlines() if line.startswith("liftgate: refused")]
    assert "not in minijudge 0.2" in refused_line and "include/minijudge/pdl.cuh" in refused_line
    (active,) = Journal(str(tmp_path / "env2")).active()
    assert len(active["gates"]) == len(meta["gates"]) - 1
    assert (
        "liftgate: +sm_120" in (site2 / "include" / "minijudge" / "pdl.cuh").read_text()
    )  # the other PDL gate, at its new line


def test_installed_prebuilt_kernels_that_shadow_the_jit_are_named() -> None:
    from liftgate.lift.caches import shadowing_packages

    notes = shadowing_packages(
        [("flashinfer-jit-cache", "0.6.2"), ("sglang", "0.5.23")], ["flashinfer-python"]
    )
    assert len(notes) == 1 and notes[0].startswith(
        "flashinfer-jit-cache 0.6.2 is installed and shadows flashinfer-python's JIT"
    )
    assert shadowing_packages([("flashinfer-jit-cache", "0.6.2")], ["sglang"]) == []
