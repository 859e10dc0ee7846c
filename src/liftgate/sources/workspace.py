"""The workspace: the packages a scan read, and one way to read any of their files.

Every stage after detection (judge, chain, trace, lift, the CLI's source views) reads package
files through a `Workspace` instead of threading ``(files, read)`` pairs: ``read(package,
version, path)`` gives the text (or None for an unreadable, binary or oversized file), and
``fspath`` where it lives on disk. Reads are lenient (undecodable bytes are replaced) and
bounded by `DEFAULT_MAX_FILE_SIZE`; nothing here follows a path outside the package's files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from liftgate.sources.interface import DEFAULT_MAX_FILE_SIZE, Package, open_regular

BINARY_SNIFF = 8192  # a NUL byte in the first 8 KiB marks a binary file


def read_text(fspath: str, limit: int = DEFAULT_MAX_FILE_SIZE) -> str | None:
    """A file's text, decoded leniently; None when it is unreadable, not a regular file, binary or over ``limit``."""
    try:
        with open_regular(fspath) as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    if len(data) > limit or b"\x00" in data[:BINARY_SNIFF]:
        return None
    return data.decode("utf-8", "replace")


# The stat caches trust a file's size and mtime only when the mtime is older than the moment its
# entry was computed, minus this margin (file-system clocks are coarse): git's "racy git" rule.
# A file changed in place since (same size, mtime put back) is read again.
RACY_MARGIN_NS = 2_000_000_000


def stat_hit(entry: object, size: int, mtime_ns: int) -> str | None:
    """The cached tag of a file whose size and mtime match ``entry`` (``(size, mtime_ns, tag,
    stamp_ns)``), unless the entry is racy.

    Racy: the file's mtime is not clearly older than the moment the entry was computed, so the
    file may have changed since without its size or mtime showing it. It is read again.
    """
    if not (isinstance(entry, tuple) and len(entry) == 4):
        return None
    cached_size, cached_mtime, tag, stamp = entry
    if cached_size != size or cached_mtime != mtime_ns or not isinstance(tag, str):
        return None
    if not isinstance(stamp, int) or not stat_trusted(mtime_ns, stamp):
        return None
    return tag


def stat_trusted(mtime_ns: int, stamp_ns: int) -> bool:
    """Whether a file's size and mtime can stand for its bytes as seen at ``stamp_ns``: its mtime is
    clearly older than that moment (`RACY_MARGIN_NS`), so a later change would show in them."""
    return mtime_ns < stamp_ns - RACY_MARGIN_NS


@dataclass(frozen=True)
class Workspace:
    """The packages of a scan, by (name, version), each with its files (package path -> filesystem path)."""

    packages: tuple[Package, ...] = ()
    _files: dict[tuple[str, str | None], dict[str, str]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not self._files:
            for p in self.packages:
                self._files[(p.name, p.version)] = {f.path: f.fspath for f in p.files}

    @classmethod
    def from_files(cls, files: Mapping[tuple[str, str | None], Mapping[str, str]]) -> Workspace:
        """A workspace from a ``(name, version) -> {package path: filesystem path}`` mapping (tests, old callers)."""
        return cls((), {key: dict(paths) for key, paths in files.items()})

    def package_keys(self) -> Iterator[tuple[str, str | None]]:
        return iter(self._files)

    def files(self, package: str, version: str | None) -> Mapping[str, str]:
        """A package's files: package path -> filesystem path (empty for a package not in the scan)."""
        return self._files.get((package, version), {})

    def items(self) -> Iterable[tuple[tuple[str, str | None], Mapping[str, str]]]:
        return self._files.items()

    def as_mapping(self) -> Mapping[tuple[str, str | None], Mapping[str, str]]:
        return self._files

    def fspath(self, package: str, version: str | None, path: str) -> str | None:
        return self._files.get((package, version), {}).get(path)

    def read(self, package: str, version: str | None, path: str) -> str | None:
        """A package file's text (lenient), or None when it is not in the scan or cannot be read as text."""
        fspath = self.fspath(package, version, path)
        return read_text(fspath) if fspath is not None else None
