"""Wheels and sdists as sources: unpack once into the cache, then list the unpacked tree.

An archive is unpacked into ``<cache>/unpacked/<sha256 of its bytes>/`` through a temporary
directory renamed into place, so a half-written tree is never reused and concurrent runs do
not collide; the next run with the same bytes reuses it. Members are written one by one by
this module (no ``extractall``): absolute paths, ``..`` components, links and device files are
refused and reported as `Skip`s, so an archive can never write outside its directory. An sdist's
top-level ``name-version/`` directory is stripped so paths read as they do in the project.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import lzma
import os
import shutil
import stat
import tarfile
import tempfile
import time
import zipfile
import zlib
from typing import IO, Literal

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)

from liftgate.model import Skip
from liftgate.sources.interface import NullObserver, Observer, Package, SourceError
from liftgate.sources.metadata import project_metadata, read_metadata_headers
from liftgate.sources.tree import walk_tree

ArchiveKind = Literal["wheel", "sdist"]

SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar", ".zip")
MARKER = ".liftgate-unpacked.json"  # written last into an unpacked tree: its presence means complete
_MARKER_FORMAT = 1
_CHUNK = 1 << 20

# What reading a damaged archive raises, across zipfile, tarfile and the decompressors.
_READ_ERRORS = (
    zipfile.BadZipFile,
    tarfile.TarError,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
    RuntimeError,  # zipfile: encrypted member
)
# Write errors that will hit every member: the cache is unusable, so stop rather than skip.
_FATAL_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})


class CorruptArchiveError(SourceError):
    """The archive's bytes cannot be read; re-downloading may help."""


class _ReadFailure(Exception):
    """Internal: reading the archive failed mid-way (as opposed to writing the cache)."""


def archive_kind(path: str) -> ArchiveKind | None:
    """The archive's kind, "wheel" or "sdist", from the file name, None when it is not an archive liftgate unpacks."""
    lower = path.lower()
    if lower.endswith(".whl"):
        return "wheel"
    if lower.endswith(SDIST_SUFFIXES):
        return "sdist"
    return None


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _archive_digest(path: str, unpacked_dir: str) -> str:
    """sha256 of the archive, remembered per (path, size, mtime, inode): a 1 GB wheel is hashed once, not per run."""
    file_stat = os.stat(path)
    identity = f"{os.path.realpath(path)}\0{file_stat.st_size}\0{file_stat.st_mtime_ns}\0{file_stat.st_ino}"
    memo = os.path.join(unpacked_dir, ".digests", hashlib.sha256(identity.encode()).hexdigest())
    try:
        with open(memo, encoding="ascii") as stream:
            remembered = stream.read().strip()
        if len(remembered) == 64:
            return remembered
    except (OSError, ValueError):
        pass
    digest = sha256_file(path)
    try:
        os.makedirs(os.path.dirname(memo), exist_ok=True)
        partial = f"{memo}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="ascii") as stream:
            stream.write(digest)
        os.replace(partial, memo)
    except OSError:
        pass  # only a lost shortcut
    return digest


def safe_member_path(name: str) -> str | None:
    """The member's relative POSIX path, or None when it is absolute or climbs out with ``..``.

    ``""`` means the archive root itself (nothing to write).
    """
    if name.startswith(("/", "\\")) or (len(name) >= 2 and name[1] == ":" and name[0].isalpha()):
        return None
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)


def _sdist_filename_parts(filename: str) -> tuple[str, str] | None:
    try:
        parsed_name, parsed_version = parse_sdist_filename(filename)
        return str(parsed_name), str(parsed_version)
    except InvalidSdistFilename:
        pass
    lower = filename.lower()
    for suffix in SDIST_SUFFIXES:
        if lower.endswith(suffix):
            stem = filename[: -len(suffix)]
            name, sep, version = stem.rpartition("-")
            if sep and name and version[:1].isdigit():
                return name, version
            return None
    return None


def filename_name_version(path: str) -> tuple[str, str] | None:
    """(name, version) from a wheel or sdist file name, None when the name does not follow the rules."""
    filename = os.path.basename(path)
    if archive_kind(filename) == "wheel":
        try:
            name, version, _build, _tags = parse_wheel_filename(filename)
            return str(name), str(version)
        except InvalidWheelFilename:
            return None
    return _sdist_filename_parts(filename)


class _Extractor:
    """Writes an archive's members under ``dest``, collecting what it refuses as skips."""

    def __init__(self, dest: str, observer: Observer) -> None:
        self.dest = dest
        self.observer = observer
        self.skips: list[tuple[str, str]] = []  # (member name, reason)

    def target(self, name: str) -> str | None:
        rel = safe_member_path(name)
        if rel is None:
            self.skips.append((name, "unsafe path in archive (absolute or '..'); not extracted"))
            return None
        return os.path.join(self.dest, *rel.split("/")) if rel else None

    def make_dir(self, name: str) -> None:
        target = self.target(name)
        if target is not None:
            try:
                os.makedirs(target, exist_ok=True)
            except OSError as exc:
                self._write_failed(name, exc)

    def write_file(self, name: str, source: IO[bytes], mtime: float | None) -> None:
        target = self.target(name)
        if target is None:
            return
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as out:
                while True:
                    try:
                        chunk = source.read(_CHUNK)
                    except _READ_ERRORS as exc:
                        raise _ReadFailure(f"{name}: {exc}") from exc
                    if not chunk:
                        break
                    out.write(chunk)
        except OSError as exc:
            self._write_failed(name, exc)
        else:
            if mtime is not None:
                with contextlib.suppress(OSError, OverflowError, ValueError):  # a nonsense timestamp
                    os.utime(target, (mtime, mtime))
        self.observer.advance()

    def _write_failed(self, name: str, exc: OSError) -> None:
        if exc.errno in _FATAL_WRITE_ERRNOS:
            raise SourceError(
                f"cannot write to the cache at {self.dest}: {exc.strerror or exc}; "
                "free some space or pass another --cache-dir"
            ) from exc
        self.skips.append((name, f"cannot extract: {exc.strerror or exc}"))


def _zip_mtime(info: zipfile.ZipInfo) -> float | None:
    try:
        return time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


def _open_zip(path: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except _READ_ERRORS as exc:
        raise _ReadFailure(str(exc)) from exc


def _open_tar(path: str) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except _READ_ERRORS as exc:
        raise _ReadFailure(str(exc)) from exc


def _extract_zip(path: str, extractor: _Extractor) -> None:
    with _open_zip(path) as archive:
        members = archive.infolist()
        extractor.observer.start(f"Unpacking {os.path.basename(path)}", total=len(members))
        try:
            _extract_zip_members(archive, members, extractor)
        finally:
            extractor.observer.finish()


def _extract_zip_members(
    archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], extractor: _Extractor
) -> None:
    for info in members:
        mode = info.external_attr >> 16
        if info.is_dir():
            extractor.make_dir(info.filename)
        elif stat.S_ISLNK(mode):
            extractor.skips.append((info.filename, "symlink in archive; not followed"))
        elif stat.S_IFMT(mode) and not stat.S_ISREG(mode):
            extractor.skips.append((info.filename, "special file in archive (device or FIFO)"))
        elif info.flag_bits & 0x1:
            extractor.skips.append((info.filename, "encrypted member; cannot be read"))
        else:
            try:
                source = archive.open(info)
            except _READ_ERRORS as exc:
                raise _ReadFailure(f"{info.filename}: {exc}") from exc
            with source:
                extractor.write_file(info.filename, source, _zip_mtime(info))


def _extract_tar(path: str, extractor: _Extractor) -> None:
    with _open_tar(path) as archive:
        extractor.observer.start(f"Unpacking {os.path.basename(path)}")
        try:
            _extract_tar_members(archive, extractor)
        finally:
            extractor.observer.finish()


def _extract_tar_members(archive: tarfile.TarFile, extractor: _Extractor) -> None:
    while True:
        try:
            member = archive.next()
        except _READ_ERRORS as exc:
            raise _ReadFailure(str(exc)) from exc
        if member is None:
            break
        if member.isdir():
            extractor.make_dir(member.name)
        elif member.issym() or member.islnk():
            kind = "symlink" if member.issym() else "hard link"
            extractor.skips.append((member.name, f"{kind} in archive; not followed"))
        elif not member.isreg():
            extractor.skips.append((member.name, "special file in archive (device or FIFO)"))
        else:
            try:
                source = archive.extractfile(member)
            except _READ_ERRORS as exc:
                raise _ReadFailure(f"{member.name}: {exc}") from exc
            if source is None:
                continue
            with source:
                extractor.write_file(member.name, source, float(member.mtime))


def _single_top_dir(directory: str) -> str | None:
    entries = os.listdir(directory)
    if len(entries) == 1:
        only = os.path.join(directory, entries[0])
        if os.path.isdir(only) and not os.path.islink(only):
            return entries[0]
    return None


def _strip_prefix(name: str, top: str | None) -> str:
    if top is None:
        return name
    rel = safe_member_path(name)
    if rel is not None and rel.startswith(top + "/"):
        return rel[len(top) + 1 :]
    return name


def _unpack(path: str, kind: ArchiveKind, unpacked_dir: str, observer: Observer) -> tuple[str, list[Skip]]:
    """Unpack ``path`` into ``unpacked_dir/<sha256>`` unless already there; the tree and its skips."""
    try:
        digest = _archive_digest(path, unpacked_dir)
    except OSError as exc:
        raise SourceError(
            f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions"
        ) from exc
    dest = os.path.join(unpacked_dir, digest)
    marker = os.path.join(dest, MARKER)
    try:
        with open(marker, encoding="utf-8") as stream:
            recorded = json.load(stream)
        if recorded.get("format") == _MARKER_FORMAT:
            return dest, [Skip(str(p), str(r)) for p, r in recorded.get("skips", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        pass  # not unpacked yet, or by an older liftgate: unpack again

    try:
        os.makedirs(unpacked_dir, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".{digest[:16]}-", dir=unpacked_dir)
    except OSError as exc:
        raise SourceError(
            f"cannot write to the cache at {unpacked_dir}: {exc.strerror or exc}; pass another --cache-dir"
        ) from exc
    try:
        extract_root = os.path.join(work, "root")
        os.mkdir(extract_root)
        extractor = _Extractor(extract_root, observer)
        (_extract_zip if zipfile.is_zipfile(path) or kind == "wheel" else _extract_tar)(path, extractor)
        top = _single_top_dir(extract_root) if kind == "sdist" else None
        tree = os.path.join(extract_root, top) if top else extract_root
        skips = [(_strip_prefix(name, top), reason) for name, reason in extractor.skips]
        with open(os.path.join(tree, MARKER), "w", encoding="utf-8") as stream:
            json.dump({"format": _MARKER_FORMAT, "source": os.path.basename(path), "skips": skips}, stream)
        if os.path.lexists(dest) and not os.path.exists(marker):
            shutil.rmtree(dest, ignore_errors=True)  # an incomplete tree left by an interrupted run
        try:
            os.rename(tree, dest)
        except OSError as exc:
            if not os.path.exists(marker):  # another run did not finish it for us
                raise SourceError(
                    f"cannot write to the cache at {dest}: {exc.strerror or exc}; pass another --cache-dir"
                ) from exc
    except _ReadFailure as exc:
        raise CorruptArchiveError(
            f"cannot read {kind} {path}: {exc}; re-download it or check the path"
        ) from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest, [Skip(name, reason) for name, reason in skips]


def _wheel_metadata(tree: str, filename_parts: tuple[str, str] | None) -> tuple[str | None, str | None]:
    try:
        dist_infos = sorted(entry for entry in os.listdir(tree) if entry.endswith(".dist-info"))
    except OSError:
        dist_infos = []
    if filename_parts and len(dist_infos) > 1:
        wanted = filename_parts[0].replace("-", "_").lower()
        dist_infos = [d for d in dist_infos if d.lower().startswith(wanted + "-")] or dist_infos
    for dist_info in dist_infos:
        headers = read_metadata_headers(os.path.join(tree, dist_info, "METADATA"))
        if headers.get("name"):
            return headers["name"], headers.get("version") or None
    return None, None


def open_archive(
    path: str, *, origin: str, cache_root: str, observer: Observer | None = None
) -> tuple[Package, list[Skip]]:
    """The package inside wheel or sdist ``path``, unpacked into (or reused from) the cache.

    Raises `CorruptArchiveError` when the bytes cannot be read, `SourceError` when the cache cannot be written.
    """
    observer = observer or NullObserver()
    kind = archive_kind(path) or "sdist"
    tree, raw_skips = _unpack(path, kind, os.path.join(cache_root, "unpacked"), observer)

    from_filename = filename_name_version(path)
    if kind == "wheel":
        name, version = _wheel_metadata(tree, from_filename)
    else:
        name, version = project_metadata(tree, order=("pkg-info", "pyproject", "setup.cfg"))
    if from_filename:
        name = name or from_filename[0]
        version = version or from_filename[1]
    if not name:
        stem = os.path.basename(path)
        for suffix in (".whl", *SDIST_SUFFIXES):
            if stem.lower().endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        name = stem

    files, walk_skips = walk_tree(tree, package=name, version=version, prune=False, ignore_at_root=(MARKER,))
    skips = [Skip(skip.path, skip.reason, name) for skip in raw_skips] + walk_skips
    return Package(name=name, version=version, origin=origin, files=tuple(files)), skips
