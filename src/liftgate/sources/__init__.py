"""The sources stage: turn what the user names into packages of files on disk.

`resolve_sources` accepts, per spec: a directory (a source tree, or a site-packages or
virtualenv, read as an environment), a wheel or sdist (unpacked once into the cache), a lone
file, ``env:PATH`` (an installed environment), or a requirement such as ``name==version``
(its wheel fetched with pip into the cache, never installed; its sdist, downloaded from the
index without building it, with ``sdist=True`` or when no wheel fits). ``name @ url`` is the
file the URL names: a ``file://`` URL is read as the path it points at, an ``http(s)://`` URL
is downloaded into the cache first, and a version-control URL is refused, since nothing is ever
cloned or built. With no spec and no ``env`` it reads the running interpreter's environment.
Problems with single files are `Skip`s; a spec that cannot be resolved at all raises
`SourceError` with a one-line message saying what to do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from packaging.requirements import InvalidRequirement, Requirement

from liftgate.model import Skip
from liftgate.sources.archive import SDIST_SUFFIXES, CorruptArchiveError, archive_kind, open_archive
from liftgate.sources.cache import cache_root as _cache_root
from liftgate.sources.environment import is_site_packages, is_virtualenv, resolve_environment
from liftgate.sources.index import FetchRequest, fetch, local_url_path
from liftgate.sources.interface import (
    NullObserver,
    Observer,
    Package,
    SourceError,
    SourceFile,
    display_name,
)
from liftgate.sources.metadata import project_metadata
from liftgate.sources.tree import walk_tree

__all__ = [
    "NullObserver",
    "Observer",
    "Package",
    "SourceError",
    "SourceFile",
    "resolve_sources",
]

ENV_PREFIX = "env:"
# Suffixes of files liftgate scans that no package on the index is named after.
_FILE_SUFFIXES = (
    ".cu",
    ".cuh",
    ".h",
    ".hpp",
    ".cpp",
    ".cc",
    ".cxx",
    ".c",
    ".so",
    ".cubin",
    ".ptx",
    ".fatbin",
)


def _looks_like_path(spec: str) -> bool:
    """Whether a spec that names nothing on disk was meant as a path rather than a package."""
    return (
        "/" in spec
        or os.sep in spec
        or spec.startswith((".", "~"))
        or spec.lower().endswith((".whl", *SDIST_SUFFIXES, *_FILE_SUFFIXES))
    )


def _directory_package(path: str, origin: str, observer: Observer) -> tuple[Package, list[Skip]]:
    name, version = project_metadata(path)
    name = name or display_name(os.path.basename(os.path.normpath(path)) or path)
    origin = display_name(origin)
    observer.start(f"Listing {origin}")
    try:
        files, skips = walk_tree(path, package=name, version=version, observer=observer)
    finally:
        observer.finish()
    return Package(name=name, version=version, origin=origin, files=tuple(files)), skips


def _single_file_package(path: str, origin: str) -> Package:
    file_stat = os.stat(path)
    filename = os.path.basename(path)
    name = display_name(os.path.splitext(filename)[0] or filename)
    source = SourceFile(name, None, display_name(filename), path, file_stat.st_size, file_stat.st_mtime_ns)
    return Package(name=name, version=None, origin=display_name(origin), files=(source,))


class _Resolver:
    def __init__(self, cache_dir: str | None, observer: Observer, offline: bool, sdist: bool = False) -> None:
        self._cache_dir = cache_dir
        self._cache: str | None = None
        self.observer = observer
        self.offline = offline
        self.sdist = sdist

    @property
    def cache(self) -> str:
        if self._cache is None:
            self._cache = _cache_root(self._cache_dir)
        return self._cache

    def resolve(self, spec: str) -> tuple[list[Package], list[Skip]]:
        if spec.startswith(ENV_PREFIX):
            return resolve_environment(spec[len(ENV_PREFIX) :], observer=self.observer)
        path = os.path.abspath(os.path.expanduser(spec)) if spec else ""
        if path and os.path.lexists(path):
            return self._resolve_path(spec, path)
        try:
            requirement: Requirement | None = Requirement(spec) if spec.strip() else None
        except InvalidRequirement:
            requirement = None
        if requirement is None or (not requirement.url and _looks_like_path(spec)):
            raise SourceError(f"no such file, directory or package: {spec}")
        return self._resolve_requirement(spec, requirement)

    def _resolve_path(self, spec: str, path: str) -> tuple[list[Package], list[Skip]]:
        if os.path.isdir(path):
            if is_site_packages(path) or is_virtualenv(path):
                return resolve_environment(path, observer=self.observer)
            package, skips = _directory_package(path, spec, self.observer)
            return [package], skips
        if not os.path.exists(path):
            raise SourceError(f"{spec} is a broken symlink; point it at a file or directory")
        if not os.path.isfile(path):
            raise SourceError(f"{spec} is not a regular file or directory; pass a file, directory or archive")
        if archive_kind(path) is not None:
            package, skips = open_archive(path, origin=spec, cache_root=self.cache, observer=self.observer)
            return [package], skips
        try:
            return [_single_file_package(path, spec)], []
        except OSError as exc:
            raise SourceError(f"cannot read {spec}: {exc.strerror or exc}; check its permissions") from exc

    def _resolve_requirement(self, spec: str, requirement: Requirement) -> tuple[list[Package], list[Skip]]:
        request = FetchRequest.parse(spec, requirement)
        if requirement.url:
            # One file or directory, never pip's to fetch (it would build it): read it as a path spec.
            local = local_url_path(request)
            if local is not None:
                if not os.path.lexists(local):
                    raise SourceError(f"no such file or directory: {local} (named by {spec}); check the URL")
                self._note_sdist_does_not_apply(spec, local)
                return self._resolve_path(spec, local)
        archive, reused = fetch(
            request, cache_root=self.cache, observer=self.observer, offline=self.offline, sdist=self.sdist
        )
        try:
            package, skips = open_archive(archive, origin=spec, cache_root=self.cache, observer=self.observer)
        except CorruptArchiveError:
            if not reused or self.offline:
                raise
            # A damaged file in our own cache (an interrupted copy, a full disk): fetch it afresh once.
            self.observer.note(f"{os.path.basename(archive)} in the cache is damaged; fetching it again")
            try:
                os.remove(archive)
            except OSError as exc:
                raise SourceError(
                    f"{archive} in the cache is damaged and cannot be removed ({exc.strerror or exc}); delete it by hand"
                ) from exc
            archive, _ = fetch(
                request, cache_root=self.cache, observer=self.observer, reuse=False, sdist=self.sdist
            )
            package, skips = open_archive(archive, origin=spec, cache_root=self.cache, observer=self.observer)
        if requirement.url:
            self._note_sdist_does_not_apply(spec, archive)
        return [package], skips

    def _note_sdist_does_not_apply(self, spec: str, path: str) -> None:
        if self.sdist and archive_kind(path) == "wheel":
            self.observer.note(
                f"{spec} names a wheel, so --sdist does not apply to it: it is scanned as it is"
            )


def resolve_sources(
    specs: Sequence[str],
    *,
    env: str | None = None,
    cache_dir: str | None = None,
    observer: Observer | None = None,
    offline: bool = False,
    sdist: bool = False,
) -> tuple[list[Package], list[Skip]]:
    """The packages named by ``specs`` (and the environment ``env``), and what could not be listed.

    ``sdist=True`` fetches the sdist of each requirement spec (the sources wheels leave out) from
    the package index without building it; paths and environments are read as they are.
    Raises `SourceError` when a spec cannot be resolved at all.
    """
    if isinstance(specs, str):
        specs = [specs]  # a lone string is one spec, not a sequence of one-letter specs
    resolver = _Resolver(cache_dir, observer or NullObserver(), offline, sdist)
    packages: list[Package] = []
    skips: list[Skip] = []
    if env is not None:
        found, skipped = resolve_environment(env, observer=resolver.observer)
        packages.extend(found)
        skips.extend(skipped)
    for spec in specs:
        found, skipped = resolver.resolve(spec)
        packages.extend(found)
        skips.extend(skipped)
    if not specs and env is None:
        found, skipped = resolve_environment(None, observer=resolver.observer)
        packages.extend(found)
        skips.extend(skipped)
    return packages, skips
