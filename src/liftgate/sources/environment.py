"""Installed environments as sources: every distribution in a site-packages is one package.

A distribution's files are the ones its installer recorded (``*.dist-info/RECORD``; legacy
``*.egg-info/installed-files.txt``), resolved against site-packages, so files that belong to no
distribution are never attributed to one. Name and version come from the ``METADATA`` headers,
read directly rather than through ``importlib.metadata`` so any interpreter's environment
(another venv, a container's prefix) can be scanned. Files listed but missing are ignored (stale
RECORDs are common); listed paths that lead out of the environment's prefix (``..`` past it, or
absolute elsewhere) are `Skip`s, never read. An editable install's code lives in its project
directory, which is listed in place of the code it does not have in site-packages, unless it is
a system directory (/proc, /sys, /dev) or the file system's root. Only regular files are
opened, so a FIFO named METADATA or RECORD cannot block the run.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import posixpath
import stat
import sysconfig
from collections.abc import Iterable
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from liftgate.model import Skip
from liftgate.sources.interface import (
    NullObserver,
    Observer,
    Package,
    SourceError,
    SourceFile,
    display_name,
    is_system_path,
    open_regular,
)
from liftgate.sources.metadata import read_metadata_headers
from liftgate.sources.tree import walk_tree

_SITE_DIR_PATTERNS = (
    "lib/python3*/site-packages",
    "lib/python3*/dist-packages",
    "lib64/python3*/site-packages",
    "local/lib/python3*/dist-packages",
    "Lib/site-packages",
)
_SITE_DIR_NAMES = ("site-packages", "dist-packages")


def _holds_distributions(directory: str) -> bool:
    try:
        with os.scandir(directory) as entries:
            return any(entry.name.endswith(".dist-info") and entry.is_dir() for entry in entries)
    except OSError:
        return False


def is_site_packages(directory: str) -> bool:
    """Whether ``directory`` is itself a site-packages: so named, or holding ``*.dist-info`` directories."""
    return os.path.basename(os.path.normpath(directory)) in _SITE_DIR_NAMES or _holds_distributions(directory)


def is_virtualenv(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, "pyvenv.cfg"))


def _unique_dirs(paths: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    unique: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if real not in seen and os.path.isdir(path):
            seen.add(real)
            unique.append(os.path.abspath(path))
    return unique


def find_site_packages(path: str) -> list[str]:
    """The site-packages directories of a virtualenv, a prefix, or ``path`` itself when it is one."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise SourceError(
            f"no such environment: {path}; pass a virtualenv, a prefix or a site-packages directory"
        )
    if is_site_packages(path):
        return [path]
    found = _unique_dirs(
        match for pattern in _SITE_DIR_PATTERNS for match in sorted(glob.glob(os.path.join(path, pattern)))
    )
    if not found:
        raise SourceError(
            f"no site-packages found in {path}; pass a virtualenv, a prefix or a site-packages directory"
        )
    return found


def current_site_packages() -> list[str]:
    """The running interpreter's site-packages (purelib and platlib)."""
    paths = sysconfig.get_paths()
    return _unique_dirs(p for p in (paths.get("purelib"), paths.get("platlib")) if p)


def _name_version_from_dirname(dirname: str) -> tuple[str, str | None]:
    stem = dirname.rsplit(".", 1)[0]
    name, sep, version = stem.partition("-")
    return name, (version.split("-")[0] or None) if sep else None


def install_prefix(site: str) -> str:
    """The prefix ``site`` was installed under: where a RECORD's ``../../../bin/tool`` may lead.

    ``PREFIX/lib/python3.X/site-packages`` (and ``lib64``, ``dist-packages``, ``local/lib``)
    and ``PREFIX/Lib/site-packages`` give PREFIX; any other directory is its own prefix.
    """
    site = os.path.normpath(os.path.abspath(site))
    parent, name = os.path.split(site)
    if name not in _SITE_DIR_NAMES:
        return site
    if os.path.basename(parent) == "Lib":
        return os.path.dirname(parent)
    lib = os.path.dirname(parent)
    if os.path.basename(parent).startswith("python") and os.path.basename(lib) in ("lib", "lib64"):
        return os.path.dirname(lib)
    return site


def _within(directory: str, path: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _stat_files(
    site: str,
    paths: Iterable[str],
    name: str,
    version: str | None,
    skips: list[Skip],
    listing: str,
) -> list[SourceFile]:
    """The regular files of ``paths`` (as ``listing``, a RECORD, lists them) that exist inside the prefix."""
    files: list[SourceFile] = []
    prefix = os.path.join(site, "")  # plain concatenation below: this loop runs once per installed file
    root = install_prefix(site)
    for rel in dict.fromkeys(paths):  # RECORDs occasionally list a file twice
        fspath = prefix + rel
        if ".." in rel or os.path.isabs(rel):
            fspath = os.path.normpath(os.path.join(site, rel))
            if not _within(root, fspath):
                reason = f"listed in {listing} but outside the environment ({root}); not read"
                skips.append(Skip(display_name(rel), reason, name))
                continue
        try:
            file_stat = os.stat(fspath)
        except FileNotFoundError:
            continue  # recorded but gone: common, not worth a word
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
            skips.append(
                Skip(display_name(rel), f"cannot stat: {getattr(exc, 'strerror', None) or exc}", name)
            )
            continue
        if stat.S_ISREG(file_stat.st_mode):
            shown = display_name(rel)
            files.append(SourceFile(name, version, shown, fspath, file_stat.st_size, file_stat.st_mtime_ns))
    return files


def _read_lines(path: str) -> io.TextIOWrapper:
    """A text stream over a regular file (names that are not UTF-8 kept as surrogates, for ``os``)."""
    return io.TextIOWrapper(open_regular(path), encoding="utf-8", errors="surrogateescape", newline="")


def _record_paths(record: str) -> list[str]:
    with _read_lines(record) as stream:
        return [row[0] for row in csv.reader(stream) if row and row[0]]


def _editable_project(dist_info: str) -> str | None:
    """The project directory of an editable install (PEP 660 ``direct_url.json``), else None."""
    try:
        with open_regular(os.path.join(dist_info, "direct_url.json")) as stream:
            direct_url = json.loads(stream.read(1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(direct_url, dict):
        return None
    dir_info = direct_url.get("dir_info")
    url = direct_url.get("url")
    if not (isinstance(dir_info, dict) and dir_info.get("editable") and isinstance(url, str)):
        return None
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    return url2pathname(unquote(parsed.path))


def _dist_info_package(
    site: str, dirname: str, origin: str, observer: Observer, skips: list[Skip]
) -> Package | None:
    dist_info = os.path.join(site, dirname)
    headers = read_metadata_headers(os.path.join(dist_info, "METADATA"))
    fallback_name, fallback_version = _name_version_from_dirname(display_name(dirname))
    name = headers.get("name") or fallback_name
    version = headers.get("version") or fallback_version
    try:
        recorded = _record_paths(os.path.join(dist_info, "RECORD"))
    except FileNotFoundError:
        skips.append(Skip(dirname, "no RECORD file: which files it installed is unknown", name))
        return None
    except (OSError, csv.Error) as exc:
        skips.append(Skip(f"{dirname}/RECORD", f"cannot read RECORD: {exc}", name))
        return None
    files = _stat_files(site, recorded, name, version, skips, f"{dirname}/RECORD")

    project = _editable_project(dist_info)
    if project is not None:
        real = os.path.realpath(project)
        if is_system_path(real) or os.path.dirname(real) == real:
            observer.note(f"{name} is an editable install whose source is {project}: not listed")
            reason = "editable install's source is a system directory (/proc, /sys, /dev or /); not listed"
            skips.append(Skip(display_name(project), reason, name))
        elif os.path.isdir(project):
            observer.note(f"{name} is an editable install; scanning its source at {project}")
            project_files, project_skips = walk_tree(project, package=name, version=version)
            files.extend(project_files)
            skips.extend(project_skips)
        else:
            observer.note(f"{name} is an editable install whose source {project} is missing")
            skips.append(Skip(project, "editable install's source directory not found", name))
    return Package(name=name, version=version, origin=origin, files=tuple(files))


def _egg_info_package(site: str, dirname: str, origin: str, skips: list[Skip]) -> Package | None:
    egg_info = os.path.join(site, dirname)
    headers = read_metadata_headers(os.path.join(egg_info, "PKG-INFO"))
    fallback_name, fallback_version = _name_version_from_dirname(display_name(dirname))
    name = headers.get("name") or fallback_name
    version = headers.get("version") or fallback_version
    try:
        with _read_lines(os.path.join(egg_info, "installed-files.txt")) as stream:
            listed = [line.strip() for line in stream if line.strip()]
    except OSError:
        skips.append(
            Skip(dirname, "egg-info without installed-files.txt: which files it installed is unknown", name)
        )
        return None
    paths = [posixpath.normpath(f"{dirname}/{line}") for line in listed]
    files = _stat_files(site, paths, name, version, skips, f"{dirname}/installed-files.txt")
    return Package(name=name, version=version, origin=origin, files=tuple(files))


def resolve_site_packages(site: str, *, observer: Observer | None = None) -> tuple[list[Package], list[Skip]]:
    """One `Package` per distribution installed in ``site``."""
    observer = observer or NullObserver()
    origin = f"env:{display_name(site)}"
    try:
        with os.scandir(site) as entries:
            dist_dirs = sorted(
                entry.name
                for entry in entries
                if entry.name.endswith((".dist-info", ".egg-info")) and entry.is_dir()
            )
    except OSError as exc:
        raise SourceError(
            f"cannot list {site}: {exc.strerror or exc}; check the path and its permissions"
        ) from exc

    packages: list[Package] = []
    skips: list[Skip] = []
    observer.start(f"Reading {site}", total=len(dist_dirs))
    try:
        for dirname in dist_dirs:
            if dirname.endswith(".dist-info"):
                package = _dist_info_package(site, dirname, origin, observer, skips)
            else:
                package = _egg_info_package(site, dirname, origin, skips)
            if package is not None:
                packages.append(package)
            observer.advance()
    finally:
        observer.finish()
    return packages, skips


def resolve_environment(
    path: str | None, *, observer: Observer | None = None
) -> tuple[list[Package], list[Skip]]:
    """Every distribution of the environment at ``path`` (the running interpreter's when None or "")."""
    sites = find_site_packages(path) if path else current_site_packages()
    packages: list[Package] = []
    skips: list[Skip] = []
    for site in sites:
        found, skipped = resolve_site_packages(site, observer=observer)
        packages.extend(found)
        skips.extend(skipped)
    return packages, skips
