"""Applying and reverting a PatchPlan: atomic writes, a journal beside the environment, recovery.

The journal lives in ``<prefix>/.liftgate/``::

    lock                        flock'ed while a liftgate process changes the environment
    lifts/<lift-id>/lift.json   the manifest: state, target, gates, per-file sha256 before/after,
                                backups, JIT-cache entries moved aside, time, liftgate version
    lifts/<lift-id>/backup/N    byte-exact copies of the files as they were
    lifts/<lift-id>/lifted/N    the files as the lift wrote them (``verify`` applies them again)
    lifts/<lift-id>/caches/N    JIT-cache entries moved aside when the lift was applied
    lifts/<lift-id>/lifted-caches/N   entries built while lifted, moved aside by revert
    lifts/<lift-id>/drifted/N   a file's bytes that a forced revert replaced
    lifts/.staging-<lift-id>-…  a lift's backups and manifest being written; renamed to
                                ``lifts/<lift-id>`` before the first file of the environment changes

The manifest is the intent record. It is written (atomically) in state ``applying`` before the
first file changes and ``applied`` after the last; ``reverting``/``reverted`` likewise. Every
file is replaced with temp file + fsync + ``os.replace`` + directory fsync, so each file is
always wholly old or wholly new; a file that is a symbolic link is written through to the file
it points to, and stays a link. A process that dies mid-way leaves a manifest in
``applying``/``reverting``; the next liftgate command that takes the lock finds it and rolls an
apply back or finishes a revert, then records the lift as ``reverted``. A write that fails
(a full disk) rolls the apply back at once and says which files are as before and which are not.

Recovery only puts a backup over a file whose bytes are the ones liftgate wrote (or, for a
forced revert, the ones it kept a copy of): a file changed since is kept as it is and reported,
its backup staying in the journal. A revert that cannot restore a file restores the others and
names each. Nothing here deletes a backup or a moved cache entry (a lift that cannot write its
journal removes only its own staging copies, before any file changed); temp files left by a
killed process are removed. A journal that cannot be read (a manifest missing,
not JSON, of the wrong shape) is an error naming the file and the way out, and nothing changes.
Every path a manifest names is checked before it is used: files inside the environment's
prefix (links resolved), backups and moved entries inside their lift's directory, JIT-cache
entries inside the caches that `liftgate.lift.caches` knows; file modes keep permission bits only.

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
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from liftgate._version import __version__
from liftgate.lift.plan import PatchPlan, resolve_inside, safe_relpath, sha256

JOURNAL_DIR = ".liftgate"
MANIFEST_VERSION = 1
_TMP_SUFFIX = ".liftgate-tmp"
_STAGING = ".staging-"
_STATES = ("applying", "applied", "reverting", "reverted")
_INTERRUPTED = ("applying", "reverting")
_SHA = re.compile(r"[0-9a-f]{64}")
_LIFT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_MAX_MANIFEST = 64 << 20
_PERMISSIONS = 0o777

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
    exclude: bool = False  # the lift shuts the target out (``lift --exclude``)

    @property
    def drifted(self) -> list[FileStatus]:
        return [f for f in self.files if f.state in ("drift", "missing")]


def prefix_for(env: str | None) -> str:
    """The environment prefix whose ``.liftgate`` journal records lifts in ``env``: the prefix
    `liftgate.sources.environment.resolve_env` finds for it (this interpreter's when None). An
    ``env`` that is no environment directory is a `LiftError` saying what to pass instead."""
    from liftgate.sources.environment import resolve_env
    from liftgate.sources.interface import SourceError

    try:
        return resolve_env(env).prefix
    except SourceError as exc:
        raise LiftError(str(exc)) from None


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
    """Replace ``path`` with ``data``: the file is wholly old or wholly new at every instant.

    ``path`` itself is replaced (a link at ``path`` is replaced, not followed: callers that mean
    to write through a link pass the resolved path). The temp file beside it is removed when
    anything fails; ``mode`` keeps permission bits only.
    """
    directory = os.path.dirname(path) or "."
    tmp = f"{path}{_TMP_SUFFIX}-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a dead process that had this pid
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            _step(f"tmp:{os.path.basename(path)}")
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode & _PERMISSIONS)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _write_json(path: str, doc: dict[str, Any]) -> None:
    _step("json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, (json.dumps(doc, indent=2) + "\n").encode())


def _write_new(path: str, data: bytes) -> None:
    with open(path, "xb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _file_sha(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return sha256(fh.read())
    except (OSError, ValueError):
        return None


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mode(f: dict[str, Any]) -> int:
    return int(f.get("mode", 0o644)) & _PERMISSIONS


class _Bad(Exception):
    """What is wrong with a manifest: where in it, and why."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where, self.why = where, why


def _check_manifest(doc: Any, entry: str, prefix: str) -> None:
    """Raise `_Bad` at the first thing in ``doc`` that a manifest of the lift in ``entry`` cannot be."""
    if not isinstance(doc, dict):
        raise _Bad("the document", f"a JSON {_kind(doc)}, not an object")

    def text(obj: dict[str, Any], key: str, where: str, *, optional: bool = False) -> None:
        if key not in obj and optional:
            return
        if not isinstance(obj.get(key), str):
            raise _Bad(f"{where}{key}", f"{_show(obj.get(key))} is not a string")

    def listed(obj: dict[str, Any], key: str, *, optional: bool = False) -> list[Any]:
        if key not in obj and optional:
            return []
        value = obj.get(key)
        if not isinstance(value, list):
            raise _Bad(key, f"{_show(value)} is not a list")
        return value

    def in_lift(value: Any, where: str) -> None:
        if not (safe_relpath(value) and resolve_inside(os.path.join(entry, value), entry)):
            raise _Bad(where, f"{_show(value)} is not a path inside the lift's directory")

    version = doc.get("manifest_version")
    if version != MANIFEST_VERSION or not _is_int(version):
        newer = isinstance(version, int) and not isinstance(version, bool) and version > MANIFEST_VERSION
        raise _Bad(
            "manifest_version",
            f"{_show(version)}: "
            + ("written by a newer liftgate" if newer else f"{MANIFEST_VERSION} expected"),
        )
    if not (isinstance(doc.get("lift_id"), str) and _LIFT_ID.fullmatch(doc["lift_id"])):
        raise _Bad("lift_id", f"{_show(doc.get('lift_id'))} is not a lift id")
    if doc.get("state") not in _STATES:
        raise _Bad("state", f"{_show(doc.get('state'))} is not one of {', '.join(_STATES)}")
    for key in ("target", "created"):
        text(doc, key, "")
    for key in ("applied", "reverted", "prefix", "liftgate_version"):
        text(doc, key, "", optional=True)
    if "sequence" in doc and not (_is_int(doc["sequence"]) and 0 <= doc["sequence"] < 2**63):
        raise _Bad("sequence", f"{_show(doc['sequence'])} is not a count")
    if "exclude" in doc and not isinstance(doc["exclude"], bool):
        raise _Bad("exclude", f"{_show(doc['exclude'])} is not true or false")
    for n, g in enumerate(listed(doc, "gates")):
        if not isinstance(g, dict):
            raise _Bad(f"gates[{n}]", f"a JSON {_kind(g)}, not an object")
        text(g, "gate_id", f"gates[{n}].")
        text(g, "package", f"gates[{n}].")
        modules = g.get("jit_modules", [])
        if not (isinstance(modules, list) and all(isinstance(m, str) for m in modules)):
            raise _Bad(f"gates[{n}].jit_modules", f"{_show(modules)} is not a list of names")
    files = listed(doc, "files")
    if not files:
        raise _Bad("files", "no file: a lift changes at least one")
    seen: set[str] = set()
    for n, f in enumerate(files):
        where = f"files[{n}]."
        if not isinstance(f, dict):
            raise _Bad(f"files[{n}]", f"a JSON {_kind(f)}, not an object")
        for key in ("package", "path", "fspath", "backup"):
            text(f, key, where)
        if f.get("version") is not None:
            text(f, "version", where)
        for key in ("sha256_before", "sha256_after", "sha256_drifted"):
            if (key in f or key != "sha256_drifted") and not (
                isinstance(f.get(key), str) and _SHA.fullmatch(f[key])
            ):
                raise _Bad(f"{where}{key}", f"{_show(f.get(key))} is not a sha256")
        if "mode" in f and not (_is_int(f["mode"]) and 0 <= f["mode"] <= 0o7777):
            raise _Bad(f"{where}mode", f"{_show(f['mode'])} is not a file mode")
        if "was_missing" in f and not isinstance(f["was_missing"], bool):
            raise _Bad(f"{where}was_missing", f"{_show(f['was_missing'])} is not true or false")
        fspath = f["fspath"]
        real = resolve_inside(fspath, prefix) if os.path.isabs(fspath) else None
        if real is None:
            shown = os.path.realpath(fspath) if os.path.isabs(fspath) and "\x00" not in fspath else fspath
            raise _Bad(f"{where}fspath", f"{_show(shown)} is outside the environment {prefix}")
        if real in seen:
            raise _Bad(f"{where}fspath", f"{_show(fspath)} is listed twice")
        seen.add(real)
        in_lift(f["backup"], f"{where}backup")
        for key in ("lifted", "drifted_copy"):
            if key in f:
                in_lift(f[key], f"{where}{key}")
        gates = f.get("gates", [])
        if not (isinstance(gates, list) and all(isinstance(g, str) for g in gates)):
            raise _Bad(f"{where}gates", f"{_show(gates)} is not a list of gate ids")
    for key in ("caches_moved", "lifted_caches_moved"):
        for n, m in enumerate(listed(doc, key, optional=True)):
            where = f"{key}[{n}]."
            if not isinstance(m, dict):
                raise _Bad(f"{key}[{n}]", f"a JSON {_kind(m)}, not an object")
            for k in ("cache", "original", "moved_to"):
                text(m, k, where)
            original = m["original"]
            if not os.path.isabs(original) or os.path.normpath(original) != original or "\x00" in original:
                raise _Bad(f"{where}original", f"{_show(original)} is not an absolute, normalised path")
            in_lift(m["moved_to"], f"{where}moved_to")


@dataclass
class _Restore:
    """What putting the backups back did, file by file (paths on disk)."""

    restored: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (file, its backup)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (file, why)

    def summary(self) -> str:
        parts = []
        if self.restored:
            n = len(self.restored)
            parts.append(f"{n} file{'' if n == 1 else 's'} restored from the backups (sha256 checked)")
        if self.already:
            parts.append(f"{len(self.already)} already as before")
        if self.kept:
            kept = ", ".join(f"{path} (its stock bytes stay in {backup})" for path, backup in self.kept)
            parts.append(f"kept as they are, changed after the lift: {kept}")
        if self.failed:
            parts.append("not restored: " + ", ".join(f"{path} ({why})" for path, why in self.failed))
        return "; ".join(parts) or "no file to restore"


class Journal:
    """The ``.liftgate`` directory of one environment. Use `Journal.locked` to change anything.

    ``caches`` (a `liftgate.lift.caches.CacheMover`) decides which JIT-cache entries a manifest may
    move back; by default the caches of this process's environment variables.
    """

    def __init__(self, prefix: str, caches: Any = None) -> None:
        self.prefix = prefix
        self.root = journal_dir(prefix)
        self.lifts = os.path.join(self.root, "lifts")
        self.caches = caches
        self.notes: list[str] = []
        # What recovery left that is not as liftgate would leave it (a kept file, an unfinished
        # rollback): `liftgate status` exits 1 when there is any.
        self.warnings: list[str] = []

    # -- locking and recovery -------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self) -> Iterator[Journal]:
        """Hold the environment's lock; recover an interrupted apply/revert first."""
        lock_path = os.path.join(self.root, "lock")
        try:
            os.makedirs(self.root, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LiftError(
                f"cannot create {lock_path}: {_why(exc)}; run liftgate as the environment's owner, or lift a "
                "copy of the environment"
            ) from exc
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
                raise LiftError(f"cannot lock {lock_path}: {_why(exc)}") from exc
            with contextlib.suppress(OSError):  # the pid only names the holder; a full disk must not stop us
                _step("lock")
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
            self.recover()
            yield self
        finally:
            os.close(fd)

    def lift_dir(self, lift_id: str) -> str:
        return os.path.join(self.lifts, lift_id)

    def _entries(self) -> list[str]:
        try:
            names = sorted(os.listdir(self.lifts))
        except OSError:
            return []
        return [
            os.path.join(self.lifts, n)
            for n in names
            if not n.startswith(".") and os.path.isdir(os.path.join(self.lifts, n))
        ]

    def _way_out(self, entry: str) -> str:
        return (
            f"liftgate changed nothing: move {entry} out of {self.lifts}, then restore the files that lift "
            f"changed from {os.path.join(entry, 'backup')} by hand or reinstall their packages"
        )

    def _load(self, entry: str) -> dict[str, Any]:
        """The manifest in ``entry``, checked; a `LiftError` naming the file when it cannot be used."""
        manifest = os.path.join(entry, "lift.json")
        if resolve_inside(entry, self.lifts) is None:
            raise LiftError(
                f"{entry} is a link to {os.path.realpath(entry)}, outside {self.lifts}: liftgate changed "
                f"nothing; move {entry} out of {self.lifts}"
            )
        try:
            with open(manifest, "rb") as fh:
                raw = fh.read(_MAX_MANIFEST + 1)
        except FileNotFoundError:
            name = os.path.basename(entry).split("~")[0]
            raise LiftError(
                f"{manifest} is missing, so liftgate cannot tell which files that lift changed and changed "
                f"nothing: its stock copies stay in {os.path.join(entry, 'backup')}; move {entry} out of "
                f"{self.lifts}, then reinstall the packages it lifted (its files carry a `liftgate: +… {name}` "
                "comment)"
            ) from None
        except OSError as exc:
            raise LiftError(f"cannot read {manifest}: {_why(exc)}; {self._way_out(entry)}") from exc
        if len(raw) > _MAX_MANIFEST:
            raise LiftError(f"{manifest} is larger than any manifest liftgate writes; {self._way_out(entry)}")
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            raise LiftError(f"{manifest} is not valid JSON ({_why(exc)}); {self._way_out(entry)}") from None
        try:
            _check_manifest(doc, entry, self.prefix)
        except _Bad as bad:
            raise LiftError(
                f"{manifest} is not a liftgate manifest ({bad.where}: {bad.why}); {self._way_out(entry)}"
            ) from None
        assert isinstance(doc, dict)
        doc["_dir"] = entry
        return doc

    def manifests(self) -> list[dict[str, Any]]:
        """Every lift's manifest, oldest first; a `LiftError` when any of them cannot be used."""
        out = [self._load(entry) for entry in self._entries()]
        out.sort(key=lambda d: (d["created"], d.get("sequence", 0)))
        return out

    def _save(self, doc: dict[str, Any], entry: str) -> None:
        _write_json(os.path.join(entry, "lift.json"), {k: v for k, v in doc.items() if k != "_dir"})

    def recover(self) -> None:
        """Finish what a dead process left: roll back an ``applying`` lift, finish a ``reverting`` one.

        Every manifest is read and checked first: a journal that cannot be used is a `LiftError`
        before anything changes.
        """
        docs = self.manifests()
        self._remove_temp_files(docs)
        try:
            names = sorted(os.listdir(self.lifts))
        except OSError:
            names = []
        for name in names:
            if name.startswith(_STAGING):
                self.notes.append(
                    f"{os.path.join(self.lifts, name)} is what an interrupted lift wrote before it changed any "
                    "file: nothing to undo; delete it when you like"
                )
        for doc in docs:
            if doc["state"] in _INTERRUPTED:
                self._finish(doc)

    def _finish(self, doc: dict[str, Any]) -> None:
        entry = doc.pop("_dir")
        lift_id, applying = doc["lift_id"], doc["state"] == "applying"
        what = f"an interrupted lift ({lift_id})" if applying else f"an interrupted revert of {lift_id}"
        self._check_caches(doc, entry, None)
        result = self._restore(doc, entry)
        if result.failed:
            self.warnings.append(
                f"{what} could not be finished: {result.summary()}; the journal keeps it as {doc['state']!r} "
                "and the next liftgate command tries again: fix the cause first"
            )
            return
        self._caches_back(doc, entry)
        doc["state"] = "reverted"
        doc["reverted"] = _now()
        if applying:
            doc["rolled_back"] = True
        for path, _backup in result.kept:
            for f in doc["files"]:
                if f["fspath"] == path:
                    f["kept"] = "changed after the lift was interrupted"
        try:
            self._save(doc, entry)
        except OSError as exc:
            self.warnings.append(
                f"{what}: {result.summary()}, but {os.path.join(entry, 'lift.json')} could not be updated "
                f"({_why(exc)}); the next liftgate command records it"
            )
            return
        message = f"{what} was {'rolled back' if applying else 'finished'}: {result.summary()}"
        (self.warnings if result.kept else self.notes).append(message)

    def _remove_temp_files(self, docs: list[dict[str, Any]]) -> None:
        """Temp files a killed process left beside the files of a lift and its manifest."""
        found: set[str] = set()
        for doc in docs:
            entry = doc["_dir"]
            found.update(glob.glob(os.path.join(glob.escape(entry), "*" + _TMP_SUFFIX + "-*")))
            for f in doc["files"]:
                for base in {f["fspath"], os.path.realpath(f["fspath"])}:
                    found.update(glob.glob(glob.escape(base) + _TMP_SUFFIX + "-*"))
        for path in sorted(found):
            parent = os.path.dirname(path)
            if resolve_inside(os.path.join(parent, "x"), self.prefix) is None:
                continue
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(path).st_mode) or os.path.islink(path):
                    os.unlink(path)

    # -- where files are --------------------------------------------------------------------------

    def _target(self, path: str) -> str:
        """The file to write for ``path``: links resolved, and inside the environment."""
        real = resolve_inside(path, self.prefix) if os.path.isabs(path) else None
        if real is None:
            shown = os.path.realpath(path) if "\x00" not in path else path
            raise LiftError(
                f"{path} resolves to {shown}, outside the environment {self.prefix}: liftgate only changes "
                "files inside the environment it lifts; nothing was changed"
            )
        return real

    def _check_caches(self, doc: dict[str, Any], entry: str, caches: Any) -> None:
        """Refuse, before anything changes, a manifest whose moved JIT-cache entries are not entries
        of a cache liftgate knows (under the current environment variables)."""
        mover = caches if caches is not None else self.caches
        if mover is None:
            from liftgate.lift.caches import CacheMover

            mover = self.caches = CacheMover(dict(os.environ))
        for key in ("caches_moved", "lifted_caches_moved"):
            for n, m in enumerate(doc.get(key, [])):
                problem = mover.entry_problem(m["cache"], m["original"])
                if problem is not None:
                    raise LiftError(
                        f"{os.path.join(entry, 'lift.json')} names a JIT-cache entry liftgate will not move "
                        f"({key}[{n}].original {_show(m['original'])}: {problem}); liftgate changed nothing: set "
                        f"the cache's variables as when the lift was applied, or move {entry} out of {self.lifts}"
                    )

    def _tally(self, doc: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
        """The files of ``doc`` by what they hold now: (lifted, as before, something else)."""
        lifted, before, other = [], [], []
        for f in doc["files"]:
            now = _file_sha(f["fspath"])
            if now == f["sha256_before"]:
                before.append(f["fspath"])
            elif now == f["sha256_after"]:
                lifted.append(f["fspath"])
            else:
                other.append(f["fspath"])
        return lifted, before, other

    # -- apply ----------------------------------------------------------------------------------

    def apply(self, plan: PatchPlan, caches: Any = None) -> dict[str, Any]:
        """Apply ``plan`` (the caller holds the lock). Returns the manifest."""
        if not plan.files:
            raise LiftError("the plan changes no file: nothing to lift")
        existing = self.manifests()
        for d in existing:
            if d["lift_id"] == plan.lift_id and d["state"] == "applied":
                raise LiftError(f"{plan.lift_id} is already applied: see `liftgate status`")
        unfinished = [d["lift_id"] for d in existing if d["state"] in _INTERRUPTED]
        if unfinished:
            raise LiftError(
                f"{', '.join(unfinished)} was interrupted and is not finished (see `liftgate status`): fix "
                "what stops it, run liftgate again, then lift"
            )
        targets = [self._target(change.fspath) for change in plan.files]
        for n, real in enumerate(targets):
            if real in targets[:n]:
                other = plan.files[targets.index(real)].fspath
                raise LiftError(
                    f"{plan.files[n].fspath} and {other} are the same file ({real}): liftgate does not lift "
                    "one file twice in a lift; nothing was changed"
                )
        self._check_writable(plan, targets)
        for change in plan.files:
            now = _file_sha(change.fspath)
            if now != change.sha_before:
                raise LiftError(
                    f"{change.fspath} changed since it was scanned (sha256 {str(now)[:12]}…, "
                    f"expected {change.sha_before[:12]}…): scan and plan again"
                )
        directory = self.lift_dir(plan.lift_id)
        staging = os.path.join(self.lifts, f"{_STAGING}{plan.lift_id}-{os.getpid()}-{time.time_ns()}")
        files: list[dict[str, Any]] = []
        try:
            for sub in ("backup", "lifted"):
                os.makedirs(os.path.join(staging, sub))
            for n, change in enumerate(plan.files):
                _write_new(os.path.join(staging, "backup", str(n)), change.before)
                _write_new(os.path.join(staging, "lifted", str(n)), change.after)
                _step(f"backup:{n}")
                try:
                    mode = os.stat(targets[n]).st_mode & _PERMISSIONS
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
            for sub in ("backup", "lifted"):
                _fsync_dir(os.path.join(staging, sub))
            doc: dict[str, Any] = {
                "manifest_version": MANIFEST_VERSION,
                "lift_id": plan.lift_id,
                "state": "applying",
                "target": plan.target.name,
                "exclude": plan.exclude,
                "prefix": self.prefix,
                "created": _now(),
                "sequence": len(existing),
                "liftgate_version": __version__,
                "gates": list(plan.to_dict()["gates"]),
                "skipped": plan.to_dict()["skipped"],
                "notes": list(plan.notes),
                "files": files,
                "caches_moved": [],
            }
            _write_json(os.path.join(staging, "lift.json"), doc)
            _fsync_dir(staging)
            if os.path.lexists(directory):
                # A reverted lift with the same id (same gates, same files): keep its record under a new name.
                os.replace(directory, f"{directory}~{datetime.datetime.now().strftime('%Y%m%d%H%M%S%f')}")
            os.rename(staging, directory)
            _fsync_dir(self.lifts)
        except OSError as exc:
            # Only liftgate's own copies of files nothing has changed yet: the environment is as it was.
            shutil.rmtree(staging, ignore_errors=True)
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            raise LiftError(
                f"cannot write the journal in {self.root}: {_why(exc)}{where}; nothing in the environment was "
                "changed: make room (or fix the permissions) and lift again"
            ) from exc
        _step("manifest")
        manifest = os.path.join(directory, "lift.json")
        current = ""
        try:
            for n, change in enumerate(plan.files):
                current = change.fspath
                _step(f"write:{n}")
                atomic_write(targets[n], change.after, files[n]["mode"])
                _step(f"written:{n}")
            current = ""
            _remove_bytecode(f["fspath"] for f in files)
            _step("bytecode")
            if caches is not None:
                current = "the JIT caches"
                for moved in caches.move_aside(plan, os.path.join(directory, "caches")):
                    doc["caches_moved"].append(moved)
                    _write_json(manifest, doc)
                    _step("cache")
            doc["state"] = "applied"
            doc["applied"] = _now()
            current = manifest
            _write_json(manifest, doc)
        except (OSError, LiftError) as exc:
            raise self._abort(doc, directory, current, exc) from exc
        _step("commit")
        return doc

    def _abort(self, doc: dict[str, Any], entry: str, current: str, exc: BaseException) -> LiftError:
        """Roll back an apply that failed in this process; the error says what is on disk now."""
        what = f"writing {current} failed ({_why(exc)})" if current else f"the lift failed ({_why(exc)})"
        result = self._restore(doc, entry)
        self._caches_back(doc, entry)
        lifted, before, other = self._tally(doc)
        manifest = os.path.join(entry, "lift.json")
        if not lifted and not other:
            doc["state"], doc["reverted"], doc["rolled_back"] = "reverted", _now(), True
            with contextlib.suppress(OSError):
                self._save(doc, entry)  # else the next command finds every file as before and records it
            return LiftError(
                f"{what}; the lift was rolled back: every file is as before (sha256 checked); make room "
                "(or fix the cause) and lift again"
            )
        parts = []
        if lifted:
            why = "; ".join(sorted({w for _p, w in result.failed})) or "see above"
            parts.append(f"rolling it back failed too ({why}): still lifted: {', '.join(lifted)}")
        if other:
            parts.append(f"changed by something else, kept as they are: {', '.join(other)}")
        rest = f"the other {len(before)} files are as before" if before else "no file is as before"
        return LiftError(
            f"{what}; {'; '.join(parts)}; {rest}; the journal keeps the lift as 'applying' ({manifest}): the "
            "next liftgate command (`liftgate status`) rolls it back once that is fixed"
        )

    def _check_writable(self, plan: PatchPlan, targets: list[str]) -> None:
        for change, real in zip(plan.files, targets, strict=True):
            directory = os.path.dirname(real)
            if not os.access(real, os.W_OK) or not os.access(directory, os.W_OK):
                raise LiftError(
                    f"cannot write {change.fspath}: permission denied; run liftgate as the environment's "
                    "owner (or with sudo), or lift a copy of the environment"
                )

    # -- status and revert ------------------------------------------------------------------------

    def status(self) -> list[LiftStatus]:
        out = []
        for doc in self.manifests():
            files = []
            for f in doc["files"]:
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
                    doc["lift_id"],
                    doc["state"],
                    doc["target"],
                    doc["created"],
                    tuple(g["gate_id"] for g in doc["gates"]),
                    tuple(files),
                    len(doc.get("caches_moved", [])),
                    doc.get("exclude") is True,
                )
            )
        return out

    def active(self) -> list[dict[str, Any]]:
        return [d for d in self.manifests() if d["state"] == "applied"]

    def unfinished(self) -> list[dict[str, Any]]:
        """Applied lifts and those whose apply or revert could not be finished: what revert undoes."""
        return [d for d in self.manifests() if d["state"] != "reverted"]

    def revert(self, lift_id: str, *, force: bool = False, caches: Any = None) -> dict[str, Any]:
        """Restore every file of ``lift_id`` byte for byte (the caller holds the lock)."""
        docs = [d for d in self.unfinished() if d["lift_id"].startswith(lift_id)]
        if not docs:
            raise LiftError(f"no active lift {lift_id!r} in {self.prefix}: see `liftgate status`")
        if len(docs) > 1:
            raise LiftError(f"lift id {lift_id!r} is ambiguous: give more characters")
        doc = docs[0]
        entry = doc.pop("_dir")
        lift_id = doc["lift_id"]
        self._check_caches(doc, entry, caches)
        drifted = []
        for f in doc["files"]:
            now = _file_sha(f["fspath"])
            ours = {f["sha256_after"], f["sha256_before"], f.get("sha256_drifted")}
            if now not in ours and not (now is None and f.get("was_missing")):
                drifted.append((f, now))
        if drifted and not force:
            later = [
                d["lift_id"] for d in self.active()
                if d["lift_id"] != lift_id and d["created"] >= doc["created"]
                and any(x["fspath"] == f["fspath"] for x in d["files"] for f, _ in drifted)
            ]  # fmt: skip
            names = ", ".join(f["fspath"] + (" (missing)" if now is None else "") for f, now in drifted)
            hint = (
                f"revert the later lift {', '.join(later)} first"
                if later
                else "they were changed after the lift (an upgrade or a hand edit); --force restores the "
                "backups anyway and keeps the changed files in the journal"
            )
            raise LiftError(f"{lift_id}: files changed since the lift: {names}; {hint}")
        # Nothing changes unless every file that needs it can be restored.
        for f in doc["files"]:
            if _file_sha(f["fspath"]) == f["sha256_before"]:
                continue
            try:
                real = self._target(f["fspath"])
                self._backup(f, entry)
            except LiftError as exc:
                raise LiftError(
                    f"{lift_id}: {exc}; nothing was restored: the {len(doc['files'])} files stay as they are; "
                    f"reinstall {f['package']} to get its stock files, or put the backup back and run "
                    f"`liftgate revert {lift_id}` again"
                ) from exc
            if not os.access(os.path.dirname(real), os.W_OK):
                raise LiftError(
                    f"cannot write {f['fspath']}: permission denied; run liftgate as the environment's owner"
                )
        try:
            for f, now in drifted:
                if now is None:
                    f["was_missing"] = True
                    continue
                keep_dir = os.path.join(entry, "drifted")
                os.makedirs(keep_dir, exist_ok=True)
                n = len(os.listdir(keep_dir))
                while os.path.lexists(os.path.join(keep_dir, str(n))):
                    n += 1
                shutil.copyfile(f["fspath"], os.path.join(keep_dir, str(n)))
                f["drifted_copy"] = f"drifted/{n}"
                f["sha256_drifted"] = now
            doc["state"] = "reverting"
            self._save(doc, entry)
        except OSError as exc:
            raise LiftError(
                f"{lift_id}: cannot write the journal in {entry} ({_why(exc)}); nothing was restored: make room "
                f"and run `liftgate revert {lift_id}` again"
            ) from exc
        _step("revert-manifest")
        result = self._restore(doc, entry)
        if result.failed or result.kept:
            _lifted, before, _other = self._tally(doc)
            as_before = ", ".join(before) or "none"
            why = ", ".join(
                [f"{p} ({w})" for p, w in result.failed]
                + [f"{p} (changed during the revert; its backup stays in {b})" for p, b in result.kept]
            )
            raise LiftError(
                f"{lift_id}: the revert is incomplete: {len(before)} of {len(doc['files'])} files are as before "
                f"({as_before}); not restored: {why}; the journal keeps the lift as 'reverting': run "
                f"`liftgate revert {lift_id}` again once that is fixed"
            )
        try:
            if caches is not None:
                doc["lifted_caches_moved"] = caches.move_aside_for_revert(
                    doc, os.path.join(entry, "lifted-caches")
                )
                self._save(doc, entry)
        except OSError as exc:
            self.warnings.append(
                f"{lift_id}: the JIT-cache entries could not all be swapped back ({_why(exc)}): those not moved "
                f"stay in {entry}"
            )
        self._caches_back(doc, entry)
        _step("revert-caches")
        doc["state"] = "reverted"
        doc["reverted"] = _now()
        try:
            self._save(doc, entry)
        except OSError as exc:
            self.warnings.append(
                f"{lift_id}: every file is as before (sha256 checked), but {os.path.join(entry, 'lift.json')} "
                f"could not be updated ({_why(exc)}); the next liftgate command records the revert"
            )
        _step("revert-commit")
        return doc

    def reapply(self, lift_id: str, *, caches: Any = None) -> dict[str, Any]:
        """Apply a reverted lift again from its recorded lifted bytes (how ``verify`` switches state).

        Every file must still be as the lift found it; JIT-cache entries swap back: the stock
        ones built since go aside again, the lifted ones kept by revert return.
        """
        docs = [d for d in self.manifests() if d["lift_id"] == lift_id and d["state"] == "reverted"]
        if not docs:
            raise LiftError(f"no reverted lift {lift_id!r} in {self.prefix} to apply again")
        doc = docs[-1]
        entry = doc.pop("_dir")
        self._check_caches(doc, entry, caches)
        datas, targets = [], []
        for f in doc["files"]:
            if _file_sha(f["fspath"]) != f["sha256_before"]:
                raise LiftError(f"{f['fspath']} changed since {lift_id} was reverted: lift it anew")
            if "lifted" not in f:
                raise LiftError(
                    f"{lift_id} was recorded by an older liftgate without lifted copies: lift it anew"
                )
            datas.append(_recorded_copy(entry, f, "lifted", "the lifted copy"))
            targets.append(self._target(f["fspath"]))
        doc["state"] = "applying"
        try:
            self._save(doc, entry)
        except OSError as exc:
            raise LiftError(
                f"cannot write the journal in {entry} ({_why(exc)}); nothing was changed"
            ) from exc
        current = ""
        try:
            for n, f in enumerate(doc["files"]):
                current = f["fspath"]
                _step(f"reapply:{n}")
                atomic_write(targets[n], datas[n], _mode(f))
            current = ""
            _remove_bytecode(f["fspath"] for f in doc["files"])
            if caches is not None:
                doc["caches_moved"] = caches.move_aside_for_revert(doc, os.path.join(entry, "caches"))
                self._save(doc, entry)
            self._caches_back(doc, entry, "lifted_caches_moved")
            doc["lifted_caches_moved"] = []
            doc["state"] = "applied"
            doc["applied"] = _now()
            self._save(doc, entry)
        except (OSError, LiftError) as exc:
            raise self._abort(doc, entry, current, exc) from exc
        return doc

    def _backup(self, f: dict[str, Any], entry: str) -> bytes:
        return _recorded_copy(entry, f, "backup", "the backup")

    def _restore(self, doc: dict[str, Any], entry: str) -> _Restore:
        """Put the backup over every file that holds what liftgate wrote there; keep any other.

        A file is liftgate's when it holds the lifted bytes, or the bytes a forced revert kept a
        copy of (``sha256_drifted``), or is missing where a forced revert found it missing.
        """
        result = _Restore()
        for n, f in enumerate(doc["files"]):
            path = f["fspath"]
            backup = os.path.join(entry, f["backup"])
            now = _file_sha(path)
            if now == f["sha256_before"]:
                result.already.append(path)
                continue
            ours = now is not None and now in (f["sha256_after"], f.get("sha256_drifted"))
            if not ours and not (now is None and f.get("was_missing")):
                result.kept.append((path, backup))
                continue
            try:
                real = self._target(path)
                data = self._backup(f, entry)
                _step(f"restore:{n}")
                atomic_write(real, data, _mode(f))
                _step(f"restored:{n}")
            except (OSError, LiftError) as exc:
                result.failed.append((path, _why(exc)))
                continue
            if _file_sha(path) != f["sha256_before"]:
                result.failed.append((path, "its sha256 does not match the backup after restoring it"))
            else:
                result.restored.append(path)
        _remove_bytecode(f["fspath"] for f in doc["files"])
        return result

    def _caches_back(self, doc: dict[str, Any], entry: str, key: str = "caches_moved") -> None:
        """Move the JIT-cache entries under ``key`` back (checked by `_check_caches` beforehand)."""
        for moved in doc.get(key, []):
            src = os.path.join(entry, moved["moved_to"])
            dest = moved["original"]
            if not os.path.lexists(src):
                continue
            if os.path.lexists(dest):
                self.notes.append(
                    f"{dest} exists again (rebuilt since): the entry moved aside stays at {src}"
                )
                continue
            try:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.move(src, dest)
            except OSError as exc:
                self.warnings.append(
                    f"{src} could not be moved back to {dest} ({_why(exc)}): it stays in the journal; move it "
                    "back by hand"
                )


def _recorded_copy(entry: str, f: dict[str, Any], key: str, what: str) -> bytes:
    """The bytes of a file's ``backup`` (sha256 before) or ``lifted`` copy (sha256 after) in the lift's
    directory, checked against the manifest: a `LiftError` naming the file when unreadable or damaged."""
    path = os.path.join(entry, f[key])
    expected = f["sha256_before"] if key == "backup" else f["sha256_after"]
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise LiftError(f"{what} of {f['fspath']} ({path}) cannot be read: {_why(exc)}") from exc
    if sha256(data) != expected:
        raise LiftError(f"{what} of {f['fspath']} ({path}) is damaged (sha256 mismatch)")
    return data


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
