"""List the files of a directory tree, fast and safely: the walker behind directory, archive and editable sources.

One ``os.scandir`` per directory and one ``stat`` per file, so tens of thousands of files list
in a blink. Symlinked directories are followed only after the real tree has been listed, and
never twice: a link back to an ancestor is a symlink loop, a link to a directory already listed
is a duplicate; both become `Skip`s, as do broken symlinks, unreadable directories and
special files (a FIFO would hang the scanner).

Only regular files and directories are listed, and never through a symlink that leads out of
the tree (a checkout's ``leak.cu -> ~/.ssh/id_rsa`` would put that file's lines in a report)
nor into /proc, /sys or /dev. Names that are not valid UTF-8, or hold control characters, are
listed under an escaped path (`display_name`) and read through their real one.
"""

from __future__ import annotations

import errno
import operator
import os
import stat
from collections import deque
from collections.abc import Collection

from liftgate.model import Skip
from liftgate.sources.interface import (
    NullObserver,
    Observer,
    SourceFile,
    display_name,
    is_system_path,
    is_within,
)

# Directories that hold no part of the project: version control, caches, dependencies.
PRUNED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".venv",
        ".tox",
        ".nox",
        ".eggs",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)

_DirKey = tuple[int, int]
_entry_name = operator.attrgetter("name")


def _is_within(ancestor: str, rel: str) -> bool:
    """Whether relative path ``rel`` lies at or below ``ancestor`` ("" is the root)."""
    return not ancestor or rel == ancestor or rel.startswith(ancestor + "/")


_SYSTEM_DIR = "system directory (/proc, /sys or /dev); not listed"


def _link_problem(real_root: str, link: str) -> str | None:
    """Why the symlink at ``link`` is not followed (out of the tree, into a system directory), or None."""
    real = os.path.realpath(link)
    if is_system_path(real):
        return f"symlink into a system directory ({real}); not followed"
    if not is_within(real_root, real):
        return f"symlink out of the tree (to {display_name(real)}); not followed: scan its target on its own"
    return None


def _stat_problem(exc: OSError, is_link: bool) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if is_link and exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "broken symlink"
    return f"cannot stat: {exc.strerror or exc}"


def walk_tree(
    root: str,
    *,
    package: str,
    version: str | None,
    prune: bool = True,
    ignore_at_root: Collection[str] = (),
    observer: Observer | None = None,
) -> tuple[list[SourceFile], list[Skip]]:
    """Every regular file under ``root`` as a `SourceFile` with a POSIX path relative to ``root``.

    ``prune`` drops version-control, cache and dependency directories and nested virtual
    environments (a source tree's noise); archives are listed whole with ``prune=False``.
    ``ignore_at_root`` names entries of ``root`` itself to leave out (bookkeeping files).
    """
    observer = observer or NullObserver()
    files: list[SourceFile] = []
    skips: list[Skip] = []
    real_root = os.path.realpath(root)
    if is_system_path(real_root):
        return [], [Skip(".", _SYSTEM_DIR, package)]
    escaped: list[int] = []  # indexes in files of paths display_name changed, checked for collisions
    root_stat = os.stat(root)
    visited: dict[_DirKey, str] = {(root_stat.st_dev, root_stat.st_ino): ""}
    # (directory on disk, its path relative to root, whether that path is escaped)
    pending: list[tuple[str, str, bool]] = [(root, "", False)]
    linked: deque[tuple[str, str, bool, _DirKey]] = deque()  # symlinked directories, followed last

    while pending or linked:
        if not pending:
            fsdir, rel, rel_escaped, key = linked.popleft()
            first = visited.get(key)
            if first is not None:
                reason = (
                    "symlink loop"
                    if _is_within(first, rel)
                    else f"symlink to a directory already listed as {first or '.'}"
                )
                skips.append(Skip(rel, reason, package))
                continue
            visited[key] = rel
            pending.append((fsdir, rel, rel_escaped))
            continue

        fsdir, rel, rel_escaped = pending.pop()
        try:
            with os.scandir(fsdir) as iterator:
                entries = sorted(iterator, key=_entry_name)
        except OSError as exc:
            skips.append(Skip(rel or ".", f"cannot list directory: {exc.strerror or exc}", package))
            continue

        subdirs: list[tuple[str, str, bool]] = []
        listed = 0
        for entry in entries:
            name = entry.name
            if not rel and name in ignore_at_root:
                continue
            shown = display_name(name)
            relpath = f"{rel}/{shown}" if rel else shown
            is_escaped = rel_escaped or shown != name
            is_link = False
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir()
                is_target = is_link and (is_dir or entry.is_file())
            except OSError as exc:
                skips.append(Skip(relpath, _stat_problem(exc, is_link), package))
                continue
            if is_target:
                problem = _link_problem(real_root, entry.path)
                if problem is not None:
                    skips.append(Skip(relpath, problem, package))
                    continue

            if is_dir:
                if prune and (name in PRUNED_DIRS or os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))):
                    if name not in PRUNED_DIRS:
                        skips.append(Skip(relpath, "virtual environment; scan it with env:PATH", package))
                    continue
                if not rel and real_root == "/" and is_system_path("/" + name):
                    skips.append(Skip(relpath, _SYSTEM_DIR, package))
                    continue
                try:
                    dir_stat = entry.stat()
                except OSError as exc:
                    skips.append(Skip(relpath, _stat_problem(exc, is_link), package))
                    continue
                key = (dir_stat.st_dev, dir_stat.st_ino)
                if is_link:
                    linked.append((entry.path, relpath, is_escaped, key))
                else:
                    visited.setdefault(key, relpath)
                    subdirs.append((entry.path, relpath, is_escaped))
                continue

            try:
                file_stat = entry.stat()
            except OSError as exc:
                skips.append(Skip(relpath, _stat_problem(exc, is_link), package))
                continue
            if not stat.S_ISREG(file_stat.st_mode):
                skips.append(Skip(relpath, "not a regular file (FIFO, socket or device)", package))
                continue
            if is_escaped:
                escaped.append(len(files))
            files.append(
                SourceFile(package, version, relpath, entry.path, file_stat.st_size, file_stat.st_mtime_ns)
            )
            listed += 1

        pending.extend(reversed(subdirs))  # pop() then visits them in name order
        if listed:
            observer.advance(listed)
    return _drop_collisions(files, escaped, skips, package), skips


def _drop_collisions(
    files: list[SourceFile], escaped: list[int], skips: list[Skip], package: str
) -> list[SourceFile]:
    """Files whose escaped path is another file's path (real or escaped) are left out, as a skip each."""
    if not escaped:
        return files
    changed = set(escaped)
    taken = {f.path for i, f in enumerate(files) if i not in changed}
    dropped = set()
    for i in escaped:
        if files[i].path in taken:
            dropped.add(i)
            reason = (
                "name not valid UTF-8 or holding control characters, and escaped it is the same name "
                "as another file's; not listed"
            )
            skips.append(Skip(files[i].path, reason, package))
        taken.add(files[i].path)
    return [f for i, f in enumerate(files) if i not in dropped] if dropped else files
