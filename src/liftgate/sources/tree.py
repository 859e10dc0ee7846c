"""List the files of a directory tree, fast and safely: the walker behind directory, archive and editable sources.

One ``os.scandir`` per directory and one ``stat`` per file, so tens of thousands of files list
in a blink. Symlinked directories are followed only after the real tree has been listed, and
never twice: a link back to an ancestor is a symlink loop, a link to a directory already listed
is a duplicate; both become `Skip`s, as do broken symlinks, unreadable directories and
special files (a FIFO would hang the scanner).
"""

from __future__ import annotations

import errno
import operator
import os
import stat
from collections import deque
from collections.abc import Collection

from liftgate.model import Skip
from liftgate.sources.interface import NullObserver, Observer, SourceFile

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
    root_stat = os.stat(root)
    visited: dict[_DirKey, str] = {(root_stat.st_dev, root_stat.st_ino): ""}
    pending: list[tuple[str, str]] = [(root, "")]  # (directory on disk, its path relative to root)
    linked: deque[tuple[str, str, _DirKey]] = deque()  # symlinked directories, followed last

    while pending or linked:
        if not pending:
            fsdir, rel, key = linked.popleft()
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
            pending.append((fsdir, rel))
            continue

        fsdir, rel = pending.pop()
        try:
            with os.scandir(fsdir) as iterator:
                entries = sorted(iterator, key=_entry_name)
        except OSError as exc:
            skips.append(Skip(rel or ".", f"cannot list directory: {exc.strerror or exc}", package))
            continue

        subdirs: list[tuple[str, str]] = []
        listed = 0
        for entry in entries:
            name = entry.name
            if not rel and name in ignore_at_root:
                continue
            relpath = f"{rel}/{name}" if rel else name
            is_link = False
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir()
            except OSError as exc:
                skips.append(Skip(relpath, _stat_problem(exc, is_link), package))
                continue

            if is_dir:
                if prune and (name in PRUNED_DIRS or os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))):
                    if name not in PRUNED_DIRS:
                        skips.append(Skip(relpath, "virtual environment; scan it with env:PATH", package))
                    continue
                try:
                    dir_stat = entry.stat()
                except OSError as exc:
                    skips.append(Skip(relpath, _stat_problem(exc, is_link), package))
                    continue
                key = (dir_stat.st_dev, dir_stat.st_ino)
                if is_link:
                    linked.append((entry.path, relpath, key))
                else:
                    visited.setdefault(key, relpath)
                    subdirs.append((entry.path, relpath))
                continue

            try:
                file_stat = entry.stat()
            except OSError as exc:
                skips.append(Skip(relpath, _stat_problem(exc, is_link), package))
                continue
            if not stat.S_ISREG(file_stat.st_mode):
                skips.append(Skip(relpath, "not a regular file (FIFO, socket or device)", package))
                continue
            files.append(
                SourceFile(package, version, relpath, entry.path, file_stat.st_size, file_stat.st_mtime_ns)
            )
            listed += 1

        pending.extend(reversed(subdirs))  # pop() then visits them in name order
        if listed:
            observer.advance(listed)
    return files, skips
