"""Installed environments as sources: every distribution in a site-packages is one package.

A distribution's files are the ones its installer recorded (``*.dist-info/RECORD``; legacy
``*.egg-info/installed-files.txt``), resolved against site-packages, so files that belong to no
distribution are never attributed to one. Name and version come from the ``METADATA`` headers,
read directly rather than through ``importlib.metadata`` so any interpreter's environment
(another venv, a container's prefix) can be scanned. Files listed but missing are ignored (stale
RECORDs are common); listed paths that lead out of the environment's prefix (``..`` past it, or
absolute elsewhere) are `Skip`s, never read. An editable install's code lives in its project
directory; what it installs from there is listed in place of the code it does not have in
site-packages: the package directories its finder maps (setuptools' ``MAPPING``, read with
``ast.literal_eval``, the finder never imported or run), else those in the source roots its
``.pth`` files list, else those its ``pyproject.toml`` or ``src/`` layout names. The rest of the
checkout (tests, fixtures, examples) is not part of the installed package and is not listed,
nor is a project in a system directory (/proc, /sys, /dev) or the file system's root. Only
regular files are opened, so a FIFO named METADATA or RECORD cannot block the run.
"""

from __future__ import annotations

import ast
import csv
import glob
import io
import json
import os
import posixpath
import re
import stat
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

from liftgate.model import Skip
from liftgate.sources.interface import (
    NullObserver,
    Observer,
    Package,
    SourceError,
    SourceFile,
    display_name,
    is_system_path,
    is_within,
    open_regular,
)
from liftgate.sources.metadata import MAX_DECLARATION_BYTES, read_metadata_headers
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


def _not_a_directory(path: str) -> str:
    """Why ``path`` (which exists, but is no directory) is not an environment, and what to pass instead."""
    shown = display_name(path)
    parent = os.path.dirname(path)
    if os.path.basename(parent) in ("bin", "Scripts") and os.path.basename(path).lower().startswith("python"):
        # ``--env .venv/bin/python``: the environment is the directory above bin/.
        prefix = display_name(os.path.dirname(parent))
        return (
            f"{shown} is an interpreter, not an environment directory; pass its environment instead: {prefix}"
        )
    if os.path.isfile(path):
        what = "a file"
    elif os.path.exists(path):
        what = "a special file"
    else:
        what = "a broken symlink"
    return (
        f"{shown} is {what}, not an environment directory; pass a virtualenv, a prefix or a "
        "site-packages directory (the directory that holds bin/python, or its lib/python3.X/site-packages)"
    )


@dataclass(frozen=True, slots=True)
class EnvInfo:
    """An environment as ``--env`` names it, resolved by one rule for every command.

    ``path`` is what was given, made absolute (None: the running interpreter's environment);
    ``prefix`` the directory that holds its ``bin/python`` and ``lib/python3.X/site-packages``
    (`install_prefix`), where ``lift`` keeps its journal; ``python`` its interpreter (None when
    it has none); ``site_packages`` its site-packages directories (empty when it has none).
    """

    path: str | None
    prefix: str
    python: str | None
    site_packages: tuple[str, ...]


_INTERPRETERS = ("bin/python", "bin/python3", "Scripts/python.exe")


def _interpreter(prefix: str) -> str | None:
    for name in _INTERPRETERS:
        candidate = os.path.join(prefix, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def resolve_env(path: str | None) -> EnvInfo:
    """What ``--env PATH`` means, for every command that takes it.

    PATH is a virtualenv or a prefix (the directory that holds ``bin/python``), or one of its
    site-packages directories (so named, or holding ``*.dist-info`` directories): each resolves
    to the same prefix, interpreter and site-packages. A file (``.venv/bin/python``), a broken
    link or a path that does not exist is a `SourceError` saying what to pass instead. None or
    "" is the running interpreter's environment.
    """
    if not path:
        return EnvInfo(None, sys.prefix, sys.executable or None, tuple(current_site_packages()))
    path = os.path.abspath(os.path.expanduser(path))
    if os.path.lexists(path) and not os.path.isdir(path):
        raise SourceError(_not_a_directory(path))
    if not os.path.isdir(path):
        raise SourceError(
            f"no such environment: {path}; pass a virtualenv, a prefix or a site-packages directory"
        )
    if is_site_packages(path):
        sites = [path]
    else:
        sites = _unique_dirs(
            match
            for pattern in _SITE_DIR_PATTERNS
            for match in sorted(glob.glob(os.path.join(path, pattern)))
        )
    prefix = install_prefix(path)
    return EnvInfo(path, prefix, _interpreter(prefix), tuple(sites))


def find_site_packages(path: str) -> list[str]:
    """The site-packages directories of a virtualenv, a prefix, or ``path`` itself when it is one."""
    env = resolve_env(path)
    if not env.site_packages:
        raise SourceError(
            f"no site-packages found in {env.path}; pass a virtualenv, a prefix or a site-packages directory"
        )
    return list(env.site_packages)


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
            if not is_within(root, fspath):
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
    from urllib.request import url2pathname  # urllib.request imports http and email: only here

    return url2pathname(unquote(parsed.path))


# -- editable installs: what the distribution installs, not its whole project directory --------

# setuptools' finder module (``__editable___<name>_<version>_finder.py``) and the one hatchling
# writes through ``editables`` (``_editable_impl_<name>.py``); .pth files list source roots.
_SETUPTOOLS_FINDER = re.compile(r"__editable___.*_finder\.py")
_EDITABLES_FINDER = re.compile(r"_editable_impl_.*\.py")
# One line each (``[ \t]``, never ``\s``, so no pattern runs across lines): linear in the file's size.
_MAPPING_LINE = re.compile(r"^MAPPING[ \t]*(?::[^=\n]*)?=(.+)$", re.MULTILINE)
_MAP_MODULE_LINE = re.compile(r"^[ \t]*\w+\.map_module\((.+)\)[ \t]*$", re.MULTILINE)
# Directories at a project's root that are no package it installs (a tests/ with __init__.py is common).
_NOT_INSTALLED = frozenset(
    {"tests", "test", "testing", "docs", "doc", "examples", "example", "benchmarks", "benchmark",
     "scripts", "tools", "build", "dist", "fixtures", "site-packages"}
)  # fmt: skip
_MODULE_SUFFIXES = (".py", ".so", ".pyd")


def _small_text(path: str) -> str | None:
    """The text of a small regular file (a .pth, a finder module); None when unreadable or too big."""
    try:
        with open_regular(path) as stream:
            data = stream.read(MAX_DECLARATION_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_DECLARATION_BYTES:
        return None
    return data.decode("utf-8", "surrogateescape")


def _literal(text: str) -> object:
    """``ast.literal_eval`` of ``text``: a value, never code run; None when it is not a literal."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _finder_mapping(text: str, setuptools: bool) -> list[str]:
    """The package directories an editable finder maps, read without importing or running it:
    setuptools' ``MAPPING = {...}`` line, or ``editables``' ``F.map_module('name', 'path')`` lines,
    each value through `ast.literal_eval` only."""
    paths: list[str] = []
    if setuptools:
        for match in _MAPPING_LINE.finditer(text):
            mapping = _literal(match.group(1).strip())
            if isinstance(mapping, dict):
                paths.extend(v for k, v in mapping.items() if isinstance(k, str) and isinstance(v, str))
    else:
        for match in _MAP_MODULE_LINE.finditer(text):
            args = _literal(f"({match.group(1)},)")
            if isinstance(args, tuple) and len(args) == 2 and all(isinstance(a, str) for a in args):
                paths.append(args[1])
    return paths


def _pth_roots(site: str, text: str) -> list[str]:
    """The directories a .pth file adds to ``sys.path`` (its ``import`` lines are code: skipped)."""
    roots = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith(("import ", "import\t")):
            continue
        roots.append(os.path.normpath(os.path.join(site, line)))
    return roots


def _pyproject_tool(project: str) -> dict[str, object] | None:
    """The ``[tool]`` table of the project's pyproject.toml (None on Python 3.10, which has no TOML reader)."""
    text = _small_text(os.path.join(project, "pyproject.toml"))
    if text is None:
        return None
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            tool = tomllib.loads(text).get("tool")
        except (tomllib.TOMLDecodeError, UnicodeError):
            return None
        return tool if isinstance(tool, dict) else None
    return None  # the layout decides


def _pyproject_packages(project: str) -> tuple[list[str], list[str]] | None:
    """(package directories, source roots) the project's build configuration names: hatchling's
    ``[tool.hatch.build.targets.wheel] packages``, setuptools' ``[tool.setuptools] packages`` (a
    list with ``package-dir``, or ``find`` with ``where``). None when it names neither."""
    tool = _pyproject_tool(project)
    if tool is None:
        return None

    def table(value: object, *keys: str) -> object:
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def strings(value: object) -> list[str]:
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    hatch = strings(table(tool, "hatch", "build", "targets", "wheel", "packages")) or strings(
        table(tool, "hatch", "build", "packages")
    )
    if hatch:
        return [os.path.normpath(os.path.join(project, p)) for p in hatch], []
    setuptools = table(tool, "setuptools")
    package_dir = table(setuptools, "package-dir")
    dirs = (
        {k: v for k, v in package_dir.items() if isinstance(v, str)} if isinstance(package_dir, dict) else {}
    )
    packages = table(setuptools, "packages")
    if isinstance(packages, list):
        found = []
        for package in strings(packages):
            top = package.split(".")[0]
            location = dirs.get(top) or os.path.join(dirs.get("", ""), top)
            found.append(os.path.normpath(os.path.join(project, location)))
        return (found, []) if found else None
    where = strings(table(packages, "find", "where"))
    if where:
        return [], [os.path.normpath(os.path.join(project, w)) for w in where]
    return None


def _packages_in(root: str, project: str, name: str) -> list[str]:
    """The top-level packages and modules in the source root ``root``. At the project's root itself
    only real packages (with ``__init__.py``) count, never tests/, docs/ and the like, and only the
    module named after the distribution: the rest of a checkout is not installed."""
    at_project_root = os.path.realpath(root) == os.path.realpath(project)
    own_module = re.sub(r"[-_.]+", "_", name).lower()
    found = []
    try:
        with os.scandir(root) as entries:
            listed = sorted(entries, key=lambda e: e.name)
    except OSError:
        return []
    for entry in listed:
        stem, dot, _suffix = entry.name.partition(".")
        try:
            is_dir = entry.is_dir()
            is_file = not is_dir and entry.is_file()
        except OSError:
            continue
        if is_dir and entry.name.isidentifier():
            if at_project_root and (
                entry.name.lower() in _NOT_INSTALLED
                or not os.path.isfile(os.path.join(entry.path, "__init__.py"))
            ):
                continue
            found.append(entry.path)
        elif is_file and dot and stem.isidentifier() and entry.name.endswith(_MODULE_SUFFIXES):
            if at_project_root and stem.lower() != own_module:
                continue
            found.append(entry.path)
    return found


def _editable_tops(site: str, hooks: Sequence[str], project: str, name: str) -> tuple[list[str], str]:
    """The package directories and modules an editable install makes importable, and how that
    was found: its finder's mapping, the source roots its .pth files list (narrowed to what the
    build configuration names, else to the packages in them), or the project's configuration or
    ``src/`` layout when it has neither. ``hooks``: the files it installed at the top of ``site``."""
    mapped: list[str] = []
    roots: list[str] = []
    for hook in hooks:
        base = os.path.basename(hook)
        setuptools = bool(_SETUPTOOLS_FINDER.fullmatch(base))
        if not (base.endswith(".pth") or setuptools or _EDITABLES_FINDER.fullmatch(base)):
            continue
        text = _small_text(hook)
        if text is None:
            continue
        if base.endswith(".pth"):
            roots.extend(_pth_roots(site, text))
        else:
            mapped.extend(_finder_mapping(text, setuptools))
    if mapped:
        return mapped, "its finder's mapping"
    configured = _pyproject_packages(project)
    if roots:
        tops: list[str] = []
        for root in dict.fromkeys(roots):
            if not os.path.isdir(root):
                continue
            named = [p for p in configured[0] if is_within(root, p)] if configured else []
            tops.extend(named or _packages_in(root, project, name))
        return tops, "the source roots its .pth file lists"
    if configured is not None:
        packages, where = configured
        tops = list(packages)
        for root in where:
            tops.extend(_packages_in(root, project, name))
        return tops, "its pyproject.toml"
    src = os.path.join(project, "src")
    if os.path.isdir(src):
        return _packages_in(src, project, name), "its src/ layout"
    return _packages_in(project, project, name), "the packages at its root"


def _add_editable_files(
    site: str,
    project: str,
    name: str,
    version: str | None,
    files: list[SourceFile],
    observer: Observer,
    skips: list[Skip],
) -> None:
    """Add the files an editable install makes importable from ``project`` to ``files``: its
    package directories only, never the rest of the checkout (tests, fixtures, examples)."""
    real_project = os.path.realpath(project)
    if is_system_path(real_project) or os.path.dirname(real_project) == real_project:
        observer.note(f"{name} is an editable install whose source is {project}: not listed")
        reason = "editable install's source is a system directory (/proc, /sys, /dev or /); not listed"
        skips.append(Skip(display_name(project), reason, name))
        return
    if not os.path.isdir(project):
        observer.note(f"{name} is an editable install whose source {project} is missing")
        skips.append(Skip(project, "editable install's source directory not found", name))
        return
    prefix = os.path.join(site, "")
    hooks = [f.fspath for f in files if f.fspath.startswith(prefix) and os.sep not in f.fspath[len(prefix) :]]
    tops, how = _editable_tops(site, hooks, project, name)
    listed: list[str] = []
    seen: list[str] = []
    for top in tops:
        if not os.path.lexists(top) and os.path.isfile(top + ".py"):
            top += ".py"  # a finder maps a top-level module by its name
        real = os.path.realpath(top)
        if any(is_within(done, real) for done in seen) or not os.path.exists(top):
            continue
        if not is_within(real_project, real):
            # As RECORD entries outside the prefix: what the install's files name is not read blindly.
            reason = f"editable install maps a package outside its project ({project}); not listed: scan it on its own"
            skips.append(Skip(display_name(top), reason, name))
            continue
        seen.append(real)
        shown = display_name(os.path.relpath(real, real_project).replace(os.sep, "/"))
        listed.append(shown)
        if os.path.isdir(top):
            found, skipped = walk_tree(top, package=name, version=version)
            lead = "" if shown == "." else f"{shown}/"  # a package mapped to the project directory itself
            files.extend(
                SourceFile(f.package, f.version, lead + f.path, f.fspath, f.size, f.mtime_ns) for f in found
            )
            skips.extend(
                Skip(lead + s.path if s.path != "." else shown, s.reason, s.package) for s in skipped
            )
        else:
            try:
                file_stat = os.stat(top)
            except OSError:
                continue
            if stat.S_ISREG(file_stat.st_mode):
                files.append(SourceFile(name, version, shown, top, file_stat.st_size, file_stat.st_mtime_ns))
    if listed:
        more = f" and {len(listed) - 3} more" if len(listed) > 3 else ""
        observer.note(
            f"{name} is an editable install of {project}; scanning what it installs ({', '.join(listed[:3])}{more}, "
            f"from {how}), not the rest of the project"
        )
    else:
        observer.note(
            f"{name} is an editable install of {project}, but which of its directories it installs is unclear "
            f"(nothing found from {how}); scan the package directory itself to include it"
        )


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
        _add_editable_files(site, project, name, version, files, observer, skips)
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
