"""Applying and reverting a PatchPlan: atomic writes, a journal beside the environment, recovery.

The journal lives in ``<prefix>/.liftgate/``::

    lock                        flock'ed while a liftgate process changes the environment
    lifts/<lift-id>/lift.json   the manifest: state, target, gates, per-file sha256 before/after,
                                backups, JIT-cache entries moved aside, time, liftgate version
    lifts/<lift-id>/backup/N    byte-exact copies of the files as they were
    lifts/<lift-id>/caches/N    JIT-cache entries moved aside when the lift was applied
    lifts/<lift-id>/lifted-caches/N   entries built while lifted, moved aside by revert
    lifts/<lift-id>/drifted/N   a file's bytes that a forced revert replaced

The manifest is the intent record. It is written (atomically) in state ``applying`` before the
first file changes and ``applied`` after the last; ``reverting``/``reverted`` likewise. Every
file is replaced with temp file + fsync + ``os.replace`` + directory fsync, so each file is
always wholly old or wholly new. A process that dies mid-way leaves a manifest in
``applying``/``reverting``; the next liftgate command that takes the lock finds it and rolls an
apply back (every file to its backup) or finishes a revert. Nothing here deletes a user's data:
backups and moved caches stay in the journal until the user removes it.

RECORD hashes in ``*.dist-info`` are left as installed: they keep describing what the wheel
shipped, so integrity tools flag the patched files (which is true), and pip still uninstalls
and upgrades them normally. An upgrade that replaces a patched file shows as drift in ``status``.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fnmatch
import glob
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from liftgate import __version__
from liftgate.lift.plan import PatchPlan, sha256

JOURNAL_DIR = ".liftgate"
MANIFEST_VERSION = 1
_TMP_SUFFIX = ".liftgate-tmp"

# Tests set this to a callable that raises (or exits) at a named step, to prove recovery.
FAULT: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if FAULT is not None:
        FAULT(name)


class LiftError(Exception):
    """A user-facing failure: one line saying what happened, to which file, and what to do."""


@dataclass(frozen=True, slots=True)
class FileStatus:
    path: str  # on disk
    package: str
    package_path: str
    state: str  # "lifted", "reverted", "drift", "missing"
    sha_now: str | None


@dataclass(frozen=True, slots=True)
class LiftStatus:
    lift_id: str
    state: str
    target: str
    created: str
    gates: tuple[str, ...]
    files: tuple[FileStatus, ...]
    caches_moved: int

    @property
    def drifted(self) -> list[FileStatus]:
        return [f for f in self.files if f.state in ("drift", "missing")]


def prefix_for(env: str | None) -> str:
    """The environment prefix whose ``.liftgate`` journal records lifts in ``env``."""
    if not env:
        return sys.prefix
    path = os.path.abspath(os.path.expanduser(env))
    parts = path.split(os.sep)
    for name in ("site-packages", "dist-packages"):
        if parts and parts[-1] == name:
            # <prefix>/lib/pythonX.Y/site-packages, <prefix>/Lib/site-packages
            up = 3 if len(parts) >= 3 and parts[-2].startswith("python") else 2
            return os.sep.join(parts[:-up]) or os.sep
    return path


def journal_dir(prefix: str) -> str:
    return os.path.join(prefix, JOURNAL_DIR)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data``: the file is wholly old or wholly new at every instant."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}{_TMP_SUFFIX}-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _write_json(path: str, doc: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, (json.dumps(doc, indent=2) + "\n").encode())


def _read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _file_sha(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return sha256(fh.read())
    except OSError:
        return None


class Journal:
    """The ``.liftgate`` directory of one environment. Use `Journal.locked` to change anything."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.root = journal_dir(prefix)
        self.notes: list[str] = []

    # -- locking and recovery -------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[Journal]:
        """Hold the environment's lock; recover an interrupted apply/revert first."""
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise LiftError(
                f"cannot create {self.root}: {exc.strerror or exc}; run liftgate as the environment's "
                "owner, or lift a copy of the environment"
            ) from exc
        lock_path = os.path.join(self.root, "lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except ImportError:  # pragma: no cover - not POSIX
                pass
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
                    raise LiftError(
                        f"another liftgate process (pid {holder}) is changing {self.prefix}: wait for it "
                        "to finish, then run this again"
                    ) from exc
                raise
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
            self.recover()
            yield self
        finally:
            os.close(fd)

    def lift_dir(self, lift_id: str) -> str:
        return os.path.join(self.root, "lifts", lift_id)

    def manifests(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(glob.glob(os.path.join(self.root, "lifts", "*", "lift.json"))):
            doc = _read_json(path)
            if doc is not None:
                doc["_dir"] = os.path.dirname(path)
                out.append(doc)
        out.sort(key=lambda d: (str(d.get("created", "")), int(d.get("sequence", 0))))
        return out

    def recover(self) -> None:
        """Finish what a dead process left: roll back an ``applying`` lift, finish a ``reverting`` one."""
        lifts = os.path.join(self.root, "lifts")
        for entry in sorted(glob.glob(os.path.join(lifts, "*"))):
            manifest = os.path.join(entry, "lift.json")
            doc = _read_json(manifest)
            if doc is None:
                if os.path.isdir(entry) and not os.path.exists(manifest):
                    # Died while writing backups, before the manifest: nothing was changed yet.
                    shutil.rmtree(entry, ignore_errors=True)
                continue
            state = doc.get("state")
            if state == "applying":
                self._restore_files(doc, entry, force=True)
                self._caches_back(doc, entry)
                shutil.rmtree(entry, ignore_errors=True)
                self.notes.append(
                    f"an interrupted lift ({doc.get('lift_id')}) was rolled back: every file it had "
                    "changed is as before"
                )
            elif state == "reverting":
                self._restore_files(doc, entry, force=True)
                self._caches_back(doc, entry)
                doc["state"] = "reverted"
                doc["reverted"] = _now()
                doc.pop("_dir", None)
                _write_json(manifest, doc)
                self.notes.append(f"an interrupted revert of {doc.get('lift_id')} was finished")
        for doc in self.manifests():
            for f in doc.get("files", []):
                for stale in glob.glob(glob.escape(str(f.get("fspath", ""))) + _TMP_SUFFIX + "-*"):
                    with contextlib.suppress(OSError):
                        os.unlink(stale)

    # -- apply ----------------------------------------------------------------------------------

    def apply(self, plan: PatchPlan, caches: Any = None) -> dict[str, Any]:
        """Apply ``plan`` (the caller holds the lock). Returns the manifest."""
        if not plan.files:
            raise LiftError("the plan changes no file: nothing to lift")
        for existing in self.manifests():
            if existing.get("lift_id") == plan.lift_id and existing.get("state") == "applied":
                raise LiftError(f"{plan.lift_id} is already applied: see `liftgate status`")
        self._check_writable(plan)
        for change in plan.files:
            now = _file_sha(change.fspath)
            if now != change.sha_before:
                raise LiftError(
                    f"{change.fspath} changed since it was scanned (sha256 {str(now)[:12]}…, "
                    f"expected {change.sha_before[:12]}…): scan and plan again"
                )
        directory = self.lift_dir(plan.lift_id)
        if os.path.exists(directory):
            # A reverted lift with the same id (same gates, same files): keep its record under a new name.
            os.replace(directory, f"{directory}~{datetime.datetime.now().strftime('%Y%m%d%H%M%S%f')}")
        backup_dir = os.path.join(directory, "backup")
        os.makedirs(backup_dir)
        files: list[dict[str, Any]] = []
        lifted_dir = os.path.join(directory, "lifted")
        os.makedirs(lifted_dir)
        for n, change in enumerate(plan.files):
            for where, data in ((backup_dir, change.before), (lifted_dir, change.after)):
                with open(os.path.join(where, str(n)), "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            _step(f"backup:{n}")
            try:
                mode = os.stat(change.fspath).st_mode & 0o7777
            except OSError:
                mode = 0o644
            files.append(
                {
                    "package": change.package,
                    "version": change.version,
                    "path": change.path,
                    "fspath": change.fspath,
                    "sha256_before": change.sha_before,
                    "sha256_after": change.sha_after,
                    "mode": mode,
                    "backup": f"backup/{n}",
                    "lifted": f"lifted/{n}",
                    "gates": list(change.gate_ids),
                }
            )
        _fsync_dir(backup_dir)
        _fsync_dir(lifted_dir)
        doc: dict[str, Any] = {
            "manifest_version": MANIFEST_VERSION,
            "lift_id": plan.lift_id,
            "state": "applying",
            "target": plan.target.name,
            "prefix": self.prefix,
            "created": _now(),
            "sequence": len(self.manifests()),
            "liftgate_version": __version__,
            "gates": [g for g in plan.to_dict()["gates"]],
            "skipped": plan.to_dict()["skipped"],
            "notes": list(plan.notes),
            "files": files,
            "caches_moved": [],
        }
        manifest = os.path.join(directory, "lift.json")
        _write_json(manifest, doc)
        _step("manifest")
        for n, change in enumerate(plan.files):
            _step(f"write:{n}")
            atomic_write(change.fspath, change.after, files[n]["mode"])
            _step(f"written:{n}")
        _remove_bytecode(f["fspath"] for f in files)
        _step("bytecode")
        if caches is not None:
            for moved in caches.move_aside(plan, os.path.join(directory, "caches")):
                doc["caches_moved"].append(moved)
                _write_json(manifest, doc)
                _step("cache")
        doc["state"] = "applied"
        doc["applied"] = _now()
        _write_json(manifest, doc)
        _step("commit")
        return doc

    def _check_writable(self, plan: PatchPlan) -> None:
        for change in plan.files:
            directory = os.path.dirname(change.fspath)
            if not os.access(change.fspath, os.W_OK) or not os.access(directory, os.W_OK):
                raise LiftError(
                    f"cannot write {change.fspath}: permission denied; run liftgate as the environment's "
                    "owner (or with sudo), or lift a copy of the environment"
                )

    # -- status and revert ------------------------------------------------------------------------

    def status(self) -> list[LiftStatus]:
        out = []
        for doc in self.manifests():
            files = []
            for f in doc.get("files", []):
                now = _file_sha(f["fspath"])
                if now is None:
                    state = "missing"
                elif now == f["sha256_after"]:
                    state = "lifted"
                elif now == f["sha256_before"]:
                    state = "reverted"
                else:
                    state = "drift"
                files.append(FileStatus(f["fspath"], f["package"], f["path"], state, now))
            out.append(
                LiftStatus(
                    str(doc.get("lift_id")),
                    str(doc.get("state")),
                    str(doc.get("target")),
                    str(doc.get("created")),
                    tuple(g["gate_id"] for g in doc.get("gates", [])),
                    tuple(files),
                    len(doc.get("caches_moved", [])),
                )
            )
        return out

    def active(self) -> list[dict[str, Any]]:
        return [d for d in self.manifests() if d.get("state") == "applied"]

    def revert(self, lift_id: str, *, force: bool = False, caches: Any = None) -> dict[str, Any]:
        """Restore every file of ``lift_id`` byte for byte (the caller holds the lock)."""
        docs = [d for d in self.active() if str(d.get("lift_id", "")).startswith(lift_id)]
        if not docs:
            raise LiftError(f"no active lift {lift_id!r} in {self.prefix}: see `liftgate status`")
        if len(docs) > 1:
            raise LiftError(f"lift id {lift_id!r} is ambiguous: give more characters")
        doc = docs[0]
        entry = doc.pop("_dir")
        drifted = []
        for f in doc["files"]:
            now = _file_sha(f["fspath"])
            if now != f["sha256_after"] and now != f["sha256_before"]:
                drifted.append((f, now))
        if drifted and not force:
            later = [
                d["lift_id"] for d in self.active()
                if d["lift_id"] != doc["lift_id"] and str(d.get("created")) >= str(doc.get("created"))
                and any(x["fspath"] == f["fspath"] for x in d["files"] for f, _ in drifted)
            ]  # fmt: skip
            names = ", ".join(f["fspath"] + (" (missing)" if now is None else "") for f, now in drifted)
            hint = (
                f"revert the later lift {', '.join(later)} first"
                if later
                else "they were changed after the lift (an upgrade or a hand edit); --force restores the "
                "backups anyway and keeps the changed files in the journal"
            )
            raise LiftError(f"{doc['lift_id']}: files changed since the lift: {names}; {hint}")
        for f in doc["files"]:
            directory = os.path.dirname(f["fspath"])
            if not os.access(directory, os.W_OK):
                raise LiftError(
                    f"cannot write {f['fspath']}: permission denied; run liftgate as the environment's owner"
                )
        for n, (f, now) in enumerate(drifted):
            if now is not None:
                keep = os.path.join(entry, "drifted", str(n))
                os.makedirs(os.path.dirname(keep), exist_ok=True)
                shutil.copyfile(f["fspath"], keep)
                f["drifted_copy"] = f"drifted/{n}"
        doc["state"] = "reverting"
        manifest = os.path.join(entry, "lift.json")
        _write_json(manifest, doc)
        _step("revert-manifest")
        self._restore_files(doc, entry, force=True)
        if caches is not None:
            doc["lifted_caches_moved"] = caches.move_aside_for_revert(
                doc, os.path.join(entry, "lifted-caches")
            )
            _write_json(manifest, doc)
        self._caches_back(doc, entry)
        _step("revert-caches")
        doc["state"] = "reverted"
        doc["reverted"] = _now()
        _write_json(manifest, doc)
        _step("revert-commit")
        return doc

    def reapply(self, lift_id: str, *, caches: Any = None) -> dict[str, Any]:
        """Apply a reverted lift again from its recorded lifted bytes (how ``verify`` switches state).

        Every file must still be as the lift found it; JIT-cache entries swap back: the stock
        ones built since go aside again, the lifted ones kept by revert return.
        """
        docs = [d for d in self.manifests() if d.get("lift_id") == lift_id and d.get("state") == "reverted"]
        if not docs:
            raise LiftError(f"no reverted lift {lift_id!r} in {self.prefix} to apply again")
        doc = docs[-1]
        entry = doc.pop("_dir")
        for f in doc["files"]:
            if _file_sha(f["fspath"]) != f["sha256_before"]:
                raise LiftError(f"{f['fspath']} changed since {lift_id} was reverted: lift it anew")
            if "lifted" not in f:
                raise LiftError(
                    f"{lift_id} was recorded by an older liftgate without lifted copies: lift it anew"
                )
        doc["state"] = "applying"
        manifest = os.path.join(entry, "lift.json")
        _write_json(manifest, doc)
        for n, f in enumerate(doc["files"]):
            with open(os.path.join(entry, f["lifted"]), "rb") as fh:
                data = fh.read()
            if sha256(data) != f["sha256_after"]:
                raise LiftError(f"the lifted copy of {f['fspath']} in {entry} is damaged (sha256 mismatch)")
            _step(f"reapply:{n}")
            atomic_write(f["fspath"], data, f.get("mode"))
        _remove_bytecode(f["fspath"] for f in doc["files"])
        if caches is not None:
            doc["caches_moved"] = caches.move_aside_for_revert(doc, os.path.join(entry, "caches"))
            _write_json(manifest, doc)
        self._caches_back(doc, entry, "lifted_caches_moved")
        doc["lifted_caches_moved"] = []
        doc["state"] = "applied"
        doc["applied"] = _now()
        _write_json(manifest, doc)
        return doc

    def _restore_files(self, doc: dict[str, Any], entry: str, *, force: bool) -> None:
        for n, f in enumerate(doc.get("files", [])):
            now = _file_sha(f["fspath"])
            if now == f["sha256_before"]:
                continue
            if now != f["sha256_after"] and not force:
                continue
            try:
                with open(os.path.join(entry, f["backup"]), "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                raise LiftError(f"the backup of {f['fspath']} is missing from {entry}: {exc}") from exc
            if sha256(data) != f["sha256_before"]:
                raise LiftError(f"the backup of {f['fspath']} in {entry} is damaged (sha256 mismatch)")
            _step(f"restore:{n}")
            atomic_write(f["fspath"], data, f.get("mode"))
            _step(f"restored:{n}")
            if _file_sha(f["fspath"]) != f["sha256_before"]:
                raise LiftError(f"{f['fspath']} does not match its recorded sha256 after restoring it")
        _remove_bytecode(f["fspath"] for f in doc.get("files", []))

    def _caches_back(self, doc: dict[str, Any], entry: str, key: str = "caches_moved") -> None:
        for moved in doc.get(key, []):
            src = os.path.join(entry, moved["moved_to"])
            dest = moved["original"]
            if not os.path.exists(src):
                continue
            if os.path.exists(dest):
                self.notes.append(
                    f"{dest} exists again (rebuilt since): the entry moved aside stays at {src}"
                )
                continue
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.move(src, dest)


def _remove_bytecode(paths: Iterator[str] | list[str] | Any) -> None:
    """Delete the ``__pycache__`` bytecode of patched ``.py`` files (Python recompiles it)."""
    for path in paths:
        if not str(path).endswith(".py"):
            continue
        directory, name = os.path.split(path)
        cache = os.path.join(directory, "__pycache__")
        stem = name[:-3]
        try:
            entries = os.listdir(cache)
        except OSError:
            continue
        for item in entries:
            if fnmatch.fnmatch(item, f"{glob.escape(stem)}.*.pyc"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(cache, item))
