"""Fuzzing the sources and the ELF reader with hostile inputs, one family at a time.

Each family is a seeded sample (``derandomize=True``): the same examples on every run, a few
seconds on two cores. Whatever the input, the answer is a result, a `Skip`, or a one-line
`SourceError` / `FatbinError`, after bounded work: the bytes read (``/proc/self/io``) and the
peak Python memory (tracemalloc) are checked, never the time taken. A hang trips the safety net.

* archives: tar (plain, gz, bz2, xz) and zip with names that climb out, are absolute, not
  UTF-8, hold control characters, are hundreds deep or thousands long; links, devices, FIFOs;
  sizes and ratios around a shrunken unpack budget; and damaged bytes;
* trees: odd names, FIFOs, symlinks in and out of the tree, loops, into /proc;
* ELF: a synthetic object with a ``.nv_fatbin`` section, its header fields set to extreme
  values, bytes flipped, cut short, or sparsely stretched to gigabytes.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from hostile_files import (
    DEFAULT_FATBIN,
    Member,
    measured,
    safety_net,
    synthetic_elf,
    write_tar,
    write_zip,
)
from liftgate.detect.binary import FatbinError, read_kernel_images
from liftgate.sources import SourceError, resolve_sources
from liftgate.sources import archive as archive_module
from liftgate.sources.archive import open_archive
from liftgate.sources.tree import walk_tree

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FIFOs and /proc as Linux has them")

FUZZ = settings(
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MEMORY_BOUND = 48 << 20  # peak Python memory of one call
READ_BOUND = 4 << 20  # bytes one ELF read may read


# --- archives -------------------------------------------------------------------------------

COMPONENTS = st.one_of(
    st.sampled_from([b"..", b".", b"", b"a", b"caf\xe9", b"\xff\xfe", b"\x1b[2J", b"x" * 300, b"PKG-INFO"]),
    st.binary(min_size=1, max_size=8).map(lambda b: b.replace(b"/", b"_").replace(b"\0", b"_")),
)


@st.composite
def member_names(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(COMPONENTS, min_size=1, max_size=5))
    depth = draw(st.sampled_from([0, 0, 0, 3, 130, 700]))
    name = b"pkg-1.0/" + b"d/" * depth + b"/".join(parts)
    return draw(st.sampled_from([b"", b"", b"/", b"../"])) + name


SIZES = st.sampled_from([0, 1, 100, 70_000, 300_000, 1_100_000])


@st.composite
def members(draw: st.DrawFn) -> Member:
    kind = draw(st.sampled_from(["file", "file", "file", "dir", "symlink", "hardlink", "fifo", "chardev"]))
    data = b""
    if kind == "file":
        size = draw(SIZES)
        data = b"\0" * size if draw(st.booleans()) else os.urandom(min(size, 4096)) * (size // 4096 + 1)
        data = data[:size]
    return Member(draw(member_names()), kind, data)


@contextlib.contextmanager
def small_budget() -> Iterator[None]:
    """The unpack budget shrunk so that a few examples pass each of its limits."""
    limits = {
        "MAX_MEMBERS": 12,
        "MAX_MEMBER_BYTES": 1 << 20,
        "MAX_TOTAL_BYTES": 3 << 20,
        "RATIO_FLOOR": 256 << 10,
    }
    saved = {name: getattr(archive_module, name) for name in limits}
    for name, value in limits.items():
        setattr(archive_module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(archive_module, name, value)


def check_unpacked(cache: str, result: object) -> None:
    unpacked = os.path.join(cache, "unpacked")
    leftovers = (
        [n for n in os.listdir(unpacked) if n != ".digests" and len(n) != 64]
        if os.path.isdir(unpacked)
        else []
    )
    assert leftovers == [], leftovers  # no half-written tree left behind, whatever happened
    if result is None:
        return
    package, skips = result  # type: ignore[misc]
    real_cache = os.path.realpath(unpacked)
    for f in package.files:
        f.path.encode("utf-8")  # every listed path can be written to a report
        assert os.path.realpath(f.fspath).startswith(real_cache + os.sep)
    for skip in skips:
        skip.path.encode("utf-8")
        skip.reason.encode("utf-8")
        assert len(skip.path) <= 400
    for root, dirs, names in os.walk(unpacked):
        for name in dirs + names:
            mode = os.lstat(os.path.join(root, name)).st_mode
            assert stat.S_ISREG(mode) or stat.S_ISDIR(mode), (root, name)


def open_hostile(path: str, cache: str) -> object:
    with safety_net(120), measured() as cost:
        try:
            result: object = open_archive(path, origin=path, cache_root=cache)
            event("unpacked")
        except SourceError as exc:
            assert "\n" not in str(exc)
            event(f"refused: {type(exc).__name__}")
            result = None
    assert cost.peak < MEMORY_BOUND
    return result


@FUZZ
@given(
    entries=st.lists(members(), min_size=1, max_size=14),
    container=st.sampled_from(["tar", "tar.gz", "tar.bz2", "tar.xz", "zip"]),
)
def test_hostile_archives_unpack_within_the_budget_or_are_refused(
    entries: list[Member], container: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp, small_budget():
        path = os.path.join(tmp, f"pkg-1.0.{container}")
        if container == "zip":
            write_zip(path, [m for m in entries if m.kind != "hardlink"] or [Member(b"pkg-1.0/x")])
        else:
            write_tar(path, entries, "" if container == "tar" else container.split(".")[1])
        cache = os.path.join(tmp, "cache")
        check_unpacked(cache, open_hostile(path, cache))


@FUZZ
@given(
    container=st.sampled_from(["tar.gz", "zip", "tar"]),
    cut=st.integers(min_value=0, max_value=3000),
    flips=st.lists(st.tuples(st.integers(0, 2999), st.integers(0, 255)), max_size=6),
)
def test_damaged_archives_are_read_or_a_source_error(
    container: str, cut: int, flips: list[tuple[int, int]]
) -> None:
    entries = [
        Member(b"pkg-1.0/PKG-INFO", data=b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n\n"),
        Member(b"pkg-1.0/k.cu", data=b"#if __CUDA_ARCH__ >= 900\n#endif\n" * 20),
        Member(b"pkg-1.0/sub", "dir"),
        Member(b"pkg-1.0/sub/caf\xe9.py", data=b"x = 1\n"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"pkg-1.0.{container}")
        (write_zip if container == "zip" else write_tar)(
            path, entries, *([] if container == "zip" else [container[4:]])
        )
        data = bytearray(Path(path).read_bytes())
        for at, value in flips:
            if at < len(data):
                data[at] = value
        Path(path).write_bytes(bytes(data[: cut or len(data)]))
        cache = os.path.join(tmp, "cache")
        check_unpacked(cache, open_hostile(path, cache))


# --- trees ----------------------------------------------------------------------------------

TREE_NAMES = st.sampled_from(
    [
        b"a",
        b"b",
        b"caf\xe9",
        b"\xff",
        b"\x1b[31m",
        b"new\nline",
        b"caf\\xe9",
        b"pyproject.toml",
        b"setup.cfg",
        b"k.so",
    ]
)
LINK_TARGETS = st.sampled_from(
    [".", "..", "/", "/proc", "/dev", "/etc", "../..", "a", "nowhere", "a/b", "/proc/self"]
)


@st.composite
def tree_entries(draw: st.DrawFn) -> list[tuple[bytes, str, str]]:
    out = []
    for _ in range(draw(st.integers(1, 12))):
        path = b"/".join(draw(st.lists(TREE_NAMES, min_size=1, max_size=3)))
        kind = draw(st.sampled_from(["file", "file", "dir", "fifo", "socket", "symlink"]))
        out.append((path, kind, draw(LINK_TARGETS) if kind == "symlink" else ""))
    return out


def _make_parents(root: bytes, rel: bytes) -> bool:
    """Create the directories of ``rel`` under ``root``, never through a symlink; whether they are there."""
    current = root
    for part in rel.split(b"/")[:-1]:
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            os.mkdir(current)
            continue
        if not stat.S_ISDIR(mode):  # a symlink (maybe to /etc), a FIFO, a file: build nothing under it
            return False
    return True


def build_tree(root: bytes, entries: list[tuple[bytes, str, str]]) -> None:
    """Lay out ``entries`` under ``root`` without ever writing outside it (links are only created)."""
    import socket

    for rel, kind, target in entries:
        path = os.path.join(root, rel)
        with contextlib.suppress(OSError):
            if not _make_parents(root, rel) or os.path.lexists(path):
                continue
            if kind == "file":
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(b"#if __CUDA_ARCH__ >= 900\n#endif\n")
            elif kind == "dir":
                os.mkdir(path)
            elif kind == "fifo":
                os.mkfifo(path)
            elif kind == "socket":
                if len(path) < 100:
                    with socket.socket(socket.AF_UNIX) as sock:
                        sock.bind(path)
            else:
                os.symlink(target, path)


@FUZZ
@given(entries=tree_entries())
def test_hostile_trees_list_only_regular_files_inside_the_tree(entries: list[tuple[bytes, str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "tree")
        os.mkdir(root)
        build_tree(os.fsencode(root), entries)
        real_root = os.path.realpath(root)
        with safety_net(120), measured() as cost:
            files, skips = walk_tree(root, package="t", version=None)
            [package], _ = resolve_sources([root])  # metadata files that are FIFOs are not opened
        assert cost.peak < MEMORY_BOUND
        event(f"{min(len(files), 3)}+ files, {min(len(skips), 3)}+ skips")
        assert len({f.path for f in files}) == len(files)
        assert {f.path for f in package.files} == {f.path for f in files}
        for f in files:
            f.path.encode("utf-8")
            assert not any(ord(c) < 0x20 for c in f.path)
            assert stat.S_ISREG(os.stat(f.fspath).st_mode)
            assert os.path.realpath(f.fspath).startswith(real_root + os.sep)
        for skip in skips:
            skip.path.encode("utf-8")


# --- ELF and fat binaries -------------------------------------------------------------------

FIELDS = sorted(synthetic_elf().fields)
VALUES = st.one_of(
    st.sampled_from(
        [0, 1, 7, 8, 16, 0x40, 0xFFFF, 0xFFFFFFFF, 1 << 31, 1 << 32, 1 << 40, 1 << 63, (1 << 64) - 1]
    ),
    st.integers(min_value=0, max_value=(1 << 64) - 1),
    st.integers(min_value=0, max_value=4096),
)


@FUZZ
@example(changes=[("fatbin.sh_offset", 1 << 63)], flips=[], cut=None, stretch=0, name=b".nv_fatbin")
@example(changes=[("fatbin.sh_size", 8 << 30)], flips=[], cut=None, stretch=1 << 33, name=b".nv_fatbin")
@example(
    changes=[("e_shnum", 0), ("null.sh_size", 1 << 40)], flips=[], cut=None, stretch=0, name=b".nv_fatbin"
)
@given(
    changes=st.lists(st.tuples(st.sampled_from(FIELDS), VALUES), max_size=4),
    flips=st.lists(st.tuples(st.integers(0, 1023), st.integers(0, 255)), max_size=6),
    cut=st.one_of(st.none(), st.integers(0, 1023)),
    stretch=st.sampled_from([0, 0, 0, 1 << 20, 1 << 33]),
    name=st.sampled_from([b".nv_fatbin", b"__nv_relfatbin", b".nv_fatbi", b".nv_fatbinX"]),
)
def test_mutated_elf_files_are_read_or_a_fatbin_error_after_bounded_reads(
    changes: list[tuple[str, int]], flips: list[tuple[int, int]], cut: int | None, stretch: int, name: bytes
) -> None:
    elf = synthetic_elf(DEFAULT_FATBIN * 2, name=name)
    for field, value in changes:
        elf.set(field, value)
    data = elf.data
    for at, value in flips:
        if at < len(data):
            data[at] = value
    if cut is not None:
        data = data[:cut]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.so")
        with open(path, "wb") as fh:
            fh.write(data)
            if stretch:
                fh.truncate(len(data) + stretch)  # sparse: as long as claimed, nothing on disk
        with safety_net(120), measured() as cost:
            try:
                images = read_kernel_images(path)
                event(f"read: {len(images)} images")
            except FatbinError as exc:
                assert "\n" not in str(exc)
                event(f"error: {str(exc)[:25]}")
                images = []
        assert all(10 <= i.number <= 999 for i in images)
        assert cost.read is None or cost.read < READ_BOUND
        assert cost.peak < 8 << 20


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, 600), st.integers(0, 255)), max_size=8),
    gap=st.sampled_from([0, 8, 4096, 200_000]),
    stretch=st.sampled_from([0, 1 << 30]),
)
def test_mutated_fatbin_files_are_read_or_a_fatbin_error(
    flips: list[tuple[int, int]], gap: int, stretch: int
) -> None:
    data = bytearray(DEFAULT_FATBIN + b"\0" * gap + DEFAULT_FATBIN)
    for at, value in flips:
        if at < len(data):
            data[at] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.fatbin")
        with open(path, "wb") as fh:
            fh.write(data)
            if stretch:
                fh.truncate(len(data) + stretch)
        with safety_net(120), measured() as cost:
            try:
                images = read_kernel_images(path)
                event(f"read: {len(images)} images")
            except FatbinError as exc:
                event(f"error: {str(exc)[:25]}")
                images = []
        assert all(10 <= i.number <= 999 for i in images)
        assert cost.read is None or cost.read < READ_BOUND
