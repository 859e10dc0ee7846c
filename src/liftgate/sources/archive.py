"""Wheels and sdists as sources: unpack once into the cache, then list the unpacked tree.

An archive is unpacked into ``<cache>/unpacked/<sha256 of its bytes>/`` through a temporary
directory renamed into place, so a half-written tree is never reused and concurrent runs do
not collide; the next run with the same bytes reuses it. Members are written one by one by
this module (no ``extractall``): absolute paths, ``..`` components, links and device files are
refused and reported as `Skip`s, so an archive can never write outside its directory, as are
paths deeper than `MAX_DEPTH` directories. An sdist's top-level ``name-version/`` directory is
stripped so paths read as they do in the project. Names that are not valid UTF-8 (a tar's raw
bytes) are written as they are and listed escaped (`display_name`).

Unpacking has a budget (`UnpackBudget`), so a zip bomb cannot fill the disk: at most
`MAX_MEMBERS` members, `MAX_MEMBER_BYTES` per member, `MAX_TOTAL_BYTES` in all, and past
`RATIO_FLOOR` bytes no more than `MAX_RATIO` times the archive's own size (or, while a tar
streams, the compressed bytes read so far). Zip members are checked against it before anything
is written, tar members as their headers arrive; past it the partial tree is removed and
`UnpackLimitError` says which limit it hit and to unpack the archive by hand to scan it anyway.
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
from collections.abc import Callable
from typing import IO, Literal

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)

from liftgate.model import Skip
from liftgate.sources.interface import (
    NullObserver,
    Observer,
    Package,
    SourceError,
    display_name,
    open_regular,
)
from liftgate.sources.metadata import project_metadata, read_metadata_headers
from liftgate.sources.tree import walk_tree

ArchiveKind = Literal["wheel", "sdist"]

SDIST_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar", ".zip")
MARKER = ".liftgate-unpacked.json"  # written last into an unpacked tree: its presence means complete
_MARKER_FORMAT = 1
_CHUNK = 1 << 20

# The unpack budget. Real releases pass it with room to spare: the biggest CUDA wheels unpack to
# 3-5 GB (torch ~3.5 GB from ~0.9 GB, TensorRT's libraries ~5 GB from ~2.3 GB; their largest
# member, libtorch_cuda.so or libnvinfer_builder_resource.so, ~1.5-2.6 GB), a vLLM or flashinfer
# sdist with vendored CUTLASS a few hundred MB in 10-30 thousand files, and code and binaries
# compress 2:1 to 10:1. A zip bomb inflates 1000:1 (deflate) or more (bzip2, xz).
MAX_MEMBERS = 200_000
MAX_MEMBER_BYTES = 4 << 30
MAX_TOTAL_BYTES = 8 << 30
MAX_RATIO = 200  # unpacked bytes per archive byte, checked only past RATIO_FLOOR
RATIO_FLOOR = 256 << 20
MAX_DEPTH = 128  # directories in one member path (real packages: under 30)
MAX_HEADER_BYTES = 1 << 20  # a tar's long-name or pax header (a path, not data)
_SHOWN_NAME = 300  # characters of a member name shown in a skip

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


class UnpackLimitError(SourceError):
    """Unpacking the archive would pass the unpack budget (a zip bomb, or an archive too big to cache)."""


class _ReadFailure(Exception):
    """Internal: reading the archive failed mid-way (as opposed to writing the cache)."""


def _size_text(n: int) -> str:
    if n < 1 << 20:
        return f"{n:,} bytes"
    unit, scale = ("GiB", 1 << 30) if n >= 1 << 30 else ("MiB", 1 << 20)
    return f"{n / scale:.3g} {unit}"


def _shown(name: str) -> str:
    """A member name as a skip shows it: escaped, and cut short."""
    shown = display_name(name)
    return shown if len(shown) <= _SHOWN_NAME else shown[: _SHOWN_NAME - 1] + "…"


class UnpackBudget:
    """What one archive may unpack to; each check raises `UnpackLimitError` naming the limit."""

    def __init__(self, archive: str, archive_size: int) -> None:
        self.archive = archive
        self.archive_size = archive_size
        self.members = 0
        self.declared = 0  # sum of the members' sizes, as their headers give them
        self.written = 0  # bytes written so far

    def refuse(self, what: str) -> UnpackLimitError:
        return UnpackLimitError(
            f"cannot unpack {self.archive}: {what}, past liftgate's unpack budget (a zip bomb?); "
            "nothing of it was kept: if you trust it, unpack it yourself and pass the directory"
        )

    def _ratio_passed(self, size: int, compressed: int) -> bool:
        return size > RATIO_FLOOR and size > MAX_RATIO * max(compressed, 1)

    def member(self, name: str, size: int, compressed: int | None = None) -> None:
        """Count one member of ``size`` bytes (``compressed`` in the archive, where known) before writing it."""
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise self.refuse(f"it has more than {MAX_MEMBERS:,} members")
        if size > MAX_MEMBER_BYTES:
            raise self.refuse(f"member {_shown(name)} is bigger than {_size_text(MAX_MEMBER_BYTES)}")
        if compressed is not None and self._ratio_passed(size, compressed):
            raise self.refuse(
                f"member {_shown(name)} inflates {_size_text(compressed)} to {_size_text(size)}, "
                f"more than {MAX_RATIO}:1"
            )
        self.declared += size
        self._check_total(self.declared, self.archive_size, "its", "its members' sizes add up to")

    def wrote(self, nbytes: int, consumed: int | None = None) -> None:
        """Count ``nbytes`` written; ``consumed``: archive bytes read so far (a streamed tar)."""
        self.written += nbytes
        self._check_total(self.written, self.archive_size, "its", "written so far:")
        if consumed is not None:
            self._check_total(self.written, consumed, "the first", "written so far:")

    def _check_total(self, total: int, compressed: int, whose: str, what: str) -> None:
        if total > MAX_TOTAL_BYTES:
            raise self.refuse(f"it unpacks to more than {_size_text(MAX_TOTAL_BYTES)}")
        if self._ratio_passed(total, compressed):
            raise self.refuse(
                f"it unpacks to more than {MAX_RATIO}:1 of {whose} {_size_text(compressed)} "
                f"({what} {_size_text(total)})"
            )


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header that refuses long-name and pax headers bigger than `MAX_HEADER_BYTES`.

    tarfile reads those headers (a path, a few attributes) into memory whole: one claiming
    gigabytes would be read into memory before any member is seen.
    """

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> _BoundedTarInfo:
        info = super().frombuf(buf, encoding, errors)
        if info.type in _LONG_HEADERS and info.size > MAX_HEADER_BYTES:
            raise _HeaderTooBig(info.size)
        return info


class _HeaderTooBig(Exception):
    """Internal: a tar header claims more than `MAX_HEADER_BYTES` (tarfile passes it through)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size

    def refusal(self, budget: UnpackBudget) -> UnpackLimitError:
        return budget.refuse(
            f"a header claims {_size_text(self.size)} (a long name or attributes, at most "
            f"{_size_text(MAX_HEADER_BYTES)})"
        )


_LONG_HEADERS = frozenset(
    {
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
    }
)


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
    with open_regular(path) as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _archive_digest(path: str, unpacked_dir: str) -> str:
    """sha256 of the archive, remembered per (path, size, mtime, inode): a 1 GB wheel is hashed once, not per run."""
    file_stat = os.stat(path)
    identity = f"{os.path.realpath(path)}\0{file_stat.st_size}\0{file_stat.st_mtime_ns}\0{file_stat.st_ino}"
    memo = os.path.join(unpacked_dir, ".digests", hashlib.sha256(identity.encode()).hexdigest())
    try:
        with open_regular(memo) as stream:
            remembered = stream.read(128).decode("ascii").strip()
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

    def __init__(self, dest: str, observer: Observer, budget: UnpackBudget) -> None:
        self.dest = dest
        self.observer = observer
        self.budget = budget
        self.skips: list[tuple[str, str]] = []  # (member name as shown, reason)

    def skip(self, name: str, reason: str) -> None:
        self.skips.append((_shown(name), reason))

    def target(self, name: str) -> str | None:
        rel = safe_member_path(name)
        if rel is None:
            self.skip(name, "unsafe path in archive (absolute or '..'); not extracted")
            return None
        if rel.count("/") >= MAX_DEPTH:
            self.skip(name, f"path more than {MAX_DEPTH} directories deep; not extracted")
            return None
        return os.path.join(self.dest, *rel.split("/")) if rel else None

    def make_dir(self, name: str) -> None:
        target = self.target(name)
        if target is not None:
            try:
                os.makedirs(target, exist_ok=True)
            except (OSError, ValueError) as exc:
                self._write_failed(name, exc)

    def write_file(
        self, name: str, source: IO[bytes], mtime: float | None, consumed: Callable[[], int] | None = None
    ) -> None:
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
                        raise _ReadFailure(f"{_shown(name)}: {exc}") from exc
                    if not chunk:
                        break
                    self.budget.wrote(len(chunk), consumed() if consumed else None)
                    out.write(chunk)
        except (OSError, ValueError) as exc:  # ValueError: a name the file system cannot encode
            self._write_failed(name, exc)
        else:
            if mtime is not None:
                with contextlib.suppress(OSError, OverflowError, ValueError):  # a nonsense timestamp
                    os.utime(target, (mtime, mtime))
        self.observer.advance()

    def _write_failed(self, name: str, exc: OSError | ValueError) -> None:
        if isinstance(exc, OSError) and exc.errno in _FATAL_WRITE_ERRNOS:
            raise SourceError(
                f"cannot write to the cache at {self.dest}: {exc.strerror or exc}; "
                "free some space or pass another --cache-dir"
            ) from exc
        self.skip(name, f"cannot extract: {getattr(exc, 'strerror', None) or exc}")


def _zip_mtime(info: zipfile.ZipInfo) -> float | None:
    try:
        return time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return None


class _NotUtf8Error(SourceError):
    """Internal: a zip member name flagged UTF-8 is not (zipfile cannot read such an archive)."""


def _not_utf8(path: str) -> _NotUtf8Error:
    return _NotUtf8Error(
        f"cannot read {path}: a member name is marked as UTF-8 but is not valid UTF-8, which Python's "
        "zipfile cannot read; unpack it yourself (unzip, bsdtar) and pass the directory"
    )


def _open_zip(path: str, raw: IO[bytes]) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(raw)
    except UnicodeDecodeError as exc:
        raise _not_utf8(path) from exc
    except _READ_ERRORS as exc:
        raise _ReadFailure(str(exc)) from exc


def _open_tar(raw: IO[bytes], budget: UnpackBudget) -> tarfile.TarFile:
    try:
        return tarfile.open(
            fileobj=raw, mode="r:*", tarinfo=_BoundedTarInfo, encoding="utf-8", errors="surrogateescape"
        )
    except _HeaderTooBig as exc:
        raise exc.refusal(budget) from None
    except _READ_ERRORS as exc:
        raise _ReadFailure(str(exc)) from exc


def _extract_zip(path: str, raw: IO[bytes], extractor: _Extractor) -> None:
    with _open_zip(path, raw) as archive:
        members = archive.infolist()
        for info in members:  # the whole budget before a byte is written: sizes are in the central directory
            if info.is_dir():
                extractor.budget.member(info.filename, 0)
            else:
                extractor.budget.member(info.filename, info.file_size, info.compress_size)
        extractor.observer.start(f"Unpacking {os.path.basename(path)}", total=len(members))
        try:
            _extract_zip_members(path, archive, members, extractor)
        finally:
            extractor.observer.finish()


def _extract_zip_members(
    path: str, archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], extractor: _Extractor
) -> None:
    for info in members:
        mode = info.external_attr >> 16
        if info.is_dir():
            extractor.make_dir(info.filename)
        elif stat.S_ISLNK(mode):
            extractor.skip(info.filename, "symlink in archive; not followed")
        elif stat.S_IFMT(mode) and not stat.S_ISREG(mode):
            extractor.skip(info.filename, "special file in archive (device or FIFO)")
        elif info.flag_bits & 0x1:
            extractor.skip(info.filename, "encrypted member; cannot be read")
        else:
            try:
                source = archive.open(info)
            except UnicodeDecodeError as exc:
                raise _not_utf8(path) from exc
            except _READ_ERRORS as exc:
                raise _ReadFailure(f"{_shown(info.filename)}: {exc}") from exc
            with source:  # zipfile stops a member at its declared size: the budget above holds
                extractor.write_file(info.filename, source, _zip_mtime(info))


def _extract_tar(path: str, raw: IO[bytes], extractor: _Extractor) -> None:
    with _open_tar(raw, extractor.budget) as archive:
        extractor.observer.start(f"Unpacking {os.path.basename(path)}")
        try:
            _extract_tar_members(archive, raw, extractor)
        finally:
            extractor.observer.finish()


def _extract_tar_members(archive: tarfile.TarFile, raw: IO[bytes], extractor: _Extractor) -> None:
    while True:
        try:
            member = archive.next()
        except _HeaderTooBig as exc:
            raise exc.refusal(extractor.budget) from None
        except _READ_ERRORS as exc:
            raise _ReadFailure(str(exc)) from exc
        if member is None:
            break
        kept = getattr(archive, "members", None)
        if isinstance(kept, list):
            kept.clear()  # tarfile keeps every header, for links, which are never followed here
        # tarfile reads through (inflates) the data of every regular or unknown member, extracted or not.
        has_data = member.isreg() or member.type not in tarfile.SUPPORTED_TYPES
        extractor.budget.member(member.name, member.size if has_data else 0)
        if member.isdir():
            extractor.make_dir(member.name)
        elif member.issym() or member.islnk():
            kind = "symlink" if member.issym() else "hard link"
            extractor.skip(member.name, f"{kind} in archive; not followed")
        elif not member.isreg():
            extractor.skip(member.name, "special file in archive (device or FIFO)")
        else:
            try:
                source = archive.extractfile(member)
            except _READ_ERRORS as exc:
                raise _ReadFailure(f"{_shown(member.name)}: {exc}") from exc
            if source is None:
                continue
            with source:
                extractor.write_file(member.name, source, float(member.mtime), raw.tell)


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
        with open_regular(marker) as stream:
            recorded = json.loads(stream.read(64 << 20))
        if recorded.get("format") == _MARKER_FORMAT:
            return dest, [
                Skip(display_name(str(p)), display_name(str(r))) for p, r in recorded.get("skips", [])
            ]
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
        try:
            raw = open_regular(path)
        except OSError as exc:
            raise SourceError(
                f"cannot read {path}: {exc.strerror or exc}; pass a wheel or sdist file"
            ) from exc
        with raw:
            budget = UnpackBudget(path, os.fstat(raw.fileno()).st_size)
            extractor = _Extractor(extract_root, observer, budget)
            is_zip = zipfile.is_zipfile(raw)
            raw.seek(0)
            (_extract_zip if is_zip or kind == "wheel" else _extract_tar)(path, raw, extractor)
        top = _single_top_dir(extract_root) if kind == "sdist" else None
        tree = os.path.join(extract_root, top) if top else extract_root
        shown_top = display_name(top) if top else None
        skips = [(_strip_prefix(name, shown_top), reason) for name, reason in extractor.skips]
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
            f"cannot read {kind} {path}: {display_name(str(exc))}; re-download it or check the path"
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
    name = display_name(name)  # the file name may not be UTF-8 (metadata values already are escaped)

    files, walk_skips = walk_tree(tree, package=name, version=version, prune=False, ignore_at_root=(MARKER,))
    skips = [Skip(skip.path, skip.reason, name) for skip in raw_skips] + walk_skips
    return Package(name=name, version=version, origin=display_name(origin), files=tuple(files)), skips
