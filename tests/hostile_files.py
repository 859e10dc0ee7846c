"""Builders of hostile inputs shared by test_hostile_inputs.py and test_fuzz_inputs.py.

A synthetic ELF with a ``.nv_fatbin`` section (no nvcc needed), fat binaries, tar and zip
archives written member by member (any name, type, size), and the probes the tests bound
their work with: bytes read (``/proc/self/io``), peak Python memory (tracemalloc), whether a
process is still alive.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import struct
import tarfile
import time
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TypeVar

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
FLAG_ARCH_SPECIFIC = 0x100000

T = TypeVar("T")


# --- fat binaries and ELF files -----------------------------------------------------------


def fatbin_entry(kind: int, arch: int, flags: int = 0, payload: bytes = b"\0" * 16) -> bytes:
    """One fatbin entry: a 64-byte header (kind, version, header size, payload size, ...) and its payload."""
    header = struct.pack("<HHIQ", kind, 0x0101, 64, len(payload))
    header += struct.pack(
        "<IIHHIIIQ", 0, 0, 0 if kind == KIND_ELF else 8, 0 if kind == KIND_ELF else 9, arch, 0, 0, flags
    )
    return header.ljust(64, b"\0") + payload


def fatbin(entries: Sequence[bytes]) -> bytes:
    """One fat binary container holding ``entries``."""
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


DEFAULT_FATBIN = fatbin(
    [fatbin_entry(KIND_ELF, 80), fatbin_entry(KIND_PTX, 80), fatbin_entry(KIND_ELF, 90, FLAG_ARCH_SPECIFIC)]
)  # SASS sm_80, sm_90a; PTX compute_80


@dataclass
class Elf:
    """A little-endian ELF64 relocatable object: null, ``.shstrtab`` and one fat binary section."""

    data: bytearray
    shoff: int  # file offset of the section header table
    fatbin_header: int  # file offset of the fat binary section's header (64 bytes)
    fatbin_offset: int  # file offset of the fat binary section's bytes
    fields: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (file offset, struct format)

    def set(self, name: str, value: int) -> None:
        offset, fmt = self.fields[name]
        size = struct.calcsize(fmt)
        struct.pack_into(fmt, self.data, offset, value & ((1 << (8 * size)) - 1))


def synthetic_elf(section: bytes = DEFAULT_FATBIN, name: bytes = b".nv_fatbin", machine: int = 62) -> Elf:
    shstrtab = b"\0.shstrtab\0" + name + b"\0"
    body_at = 64
    fat_at = (body_at + len(shstrtab) + 7) & ~7
    shoff = (fat_at + len(section) + 7) & ~7
    data = bytearray(shoff + 3 * 64)
    data[:16] = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    struct.pack_into("<HHIQQQIHHHHHH", data, 16, 1, machine, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 1)
    data[body_at : body_at + len(shstrtab)] = shstrtab
    data[fat_at : fat_at + len(section)] = section

    def section_header(index: int, name_at: int, kind: int, offset: int, size: int, align: int) -> None:
        struct.pack_into(
            "<IIQQQQIIQQ", data, shoff + 64 * index, name_at, kind, 0, 0, offset, size, 0, 0, align, 0
        )

    section_header(1, 1, 3, body_at, len(shstrtab), 1)  # SHT_STRTAB
    section_header(2, 11, 1, fat_at, len(section), 8)  # SHT_PROGBITS
    fields = {
        "e_shoff": (40, "<Q"),
        "e_shentsize": (58, "<H"),
        "e_shnum": (60, "<H"),
        "e_shstrndx": (62, "<H"),
        "strtab.sh_offset": (shoff + 64 + 24, "<Q"),
        "strtab.sh_size": (shoff + 64 + 32, "<Q"),
        "fatbin.sh_name": (shoff + 128, "<I"),
        "fatbin.sh_type": (shoff + 128 + 4, "<I"),
        "fatbin.sh_offset": (shoff + 128 + 24, "<Q"),
        "fatbin.sh_size": (shoff + 128 + 32, "<Q"),
        "null.sh_size": (shoff + 32, "<Q"),
        "null.sh_link": (shoff + 40, "<I"),
        "container.header_size": (fat_at + 6, "<H"),
        "container.size": (fat_at + 8, "<Q"),
        "entry.header_size": (fat_at + 16 + 4, "<I"),
        "entry.size": (fat_at + 16 + 8, "<Q"),
    }
    return Elf(data, shoff, shoff + 128, fat_at, fields)


# --- archives ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """An archive member: ``kind`` is file, dir, symlink, hardlink, fifo or chardev."""

    name: bytes
    kind: str = "file"
    data: bytes = b""


def write_tar(path: str, members: Sequence[Member], compression: str = "gz") -> None:
    mode = f"w:{compression}" if compression else "w"
    with tarfile.open(
        path, mode, format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape"
    ) as tar:  # type: ignore[call-overload]
        for member in members:
            info = tarfile.TarInfo(member.name.decode("utf-8", "surrogateescape"))
            info.mtime = 1_700_000_000
            info.type = {
                "file": tarfile.REGTYPE,
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "chardev": tarfile.CHRTYPE,
            }[member.kind]
            if member.kind in ("symlink", "hardlink"):
                info.linkname = "../../../../etc/passwd"
            info.size = len(member.data) if member.kind == "file" else 0
            tar.addfile(info, io.BytesIO(member.data) if member.kind == "file" else None)


def write_tar_stream(
    path: str, name: str, size: int, tail: bytes = b"", chunk: bytes = b"\0" * (1 << 20)
) -> None:
    """A .tar.gz holding a member of ``size`` bytes of ``chunk`` repeated (written without holding it
    in memory), then, if given, a member ``tail.bin`` holding ``tail``."""

    class Repeat(io.RawIOBase):
        def __init__(self) -> None:
            self.left = size

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
            n = min(len(buffer), self.left, len(chunk))
            buffer[:n] = chunk[:n]
            self.left -= n
            return n

    with tarfile.open(path, "w:gz", compresslevel=9) as tar:
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, io.BufferedReader(Repeat()))
        if tail:
            info = tarfile.TarInfo(name.rsplit("/", 1)[0] + "/tail.bin")
            info.size = len(tail)
            tar.addfile(info, io.BytesIO(tail))


_ZIP_MODES = {
    "file": 0o100644,
    "dir": 0o040755,
    "symlink": 0o120777,
    "hardlink": 0o100644,
    "fifo": 0o010644,
    "chardev": 0o020644,
}


def write_zip(path: str, members: Sequence[Member], *, utf8_flag: bool = False) -> None:
    """A zip of ``members``; names are written as raw bytes, flagged UTF-8 or not."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for index, member in enumerate(members):
            placeholder = f"m{index:07d}" + ("/" if member.kind == "dir" else "")
            info = zipfile.ZipInfo(placeholder, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = _ZIP_MODES[member.kind] << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(
                info, member.data if member.kind == "file" else b"/etc/passwd" * (member.kind == "symlink")
            )
    # Put the raw names in (same length needed: rewrite both headers by hand).
    raw = bytearray(open(path, "rb").read())  # noqa: SIM115
    out = bytearray()
    offsets: list[int] = []
    pos = 0
    for index, member in enumerate(members):
        placeholder = (f"m{index:07d}" + ("/" if member.kind == "dir" else "")).encode()
        assert raw[pos : pos + 4] == b"PK\x03\x04"
        flags, _method = struct.unpack_from("<HH", raw, pos + 6)
        csize = struct.unpack_from("<I", raw, pos + 18)[0]
        name_len, extra_len = struct.unpack_from("<HH", raw, pos + 26)
        assert raw[pos + 30 : pos + 30 + name_len] == placeholder
        header = bytearray(raw[pos : pos + 30])
        flags = (flags | 0x800) if utf8_flag else (flags & ~0x800)
        struct.pack_into("<H", header, 6, flags)
        struct.pack_into("<H", header, 26, len(member.name))
        offsets.append(len(out))
        out += header + member.name + raw[pos + 30 + name_len : pos + 30 + name_len + extra_len + csize]
        pos += 30 + name_len + extra_len + csize
        if flags & 0x8:  # data descriptor
            raise AssertionError("no data descriptors expected from writestr")
    central_at = len(out)
    for index, member in enumerate(members):
        assert raw[pos : pos + 4] == b"PK\x01\x02"
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", raw, pos + 28)
        header = bytearray(raw[pos : pos + 46])
        flags = struct.unpack_from("<H", header, 8)[0]
        flags = (flags | 0x800) if utf8_flag else (flags & ~0x800)
        struct.pack_into("<H", header, 8, flags)
        struct.pack_into("<H", header, 28, len(member.name))
        struct.pack_into("<I", header, 42, offsets[index])
        out += header + member.name + raw[pos + 46 + name_len : pos + 46 + name_len + extra_len + comment_len]
        pos += 46 + name_len + extra_len + comment_len
    assert raw[pos : pos + 4] == b"PK\x05\x06"
    end = bytearray(raw[pos : pos + 22])
    struct.pack_into("<I", end, 12, len(out) - central_at)
    struct.pack_into("<I", end, 16, central_at)
    out += end
    with open(path, "wb") as fh:
        fh.write(out)


def write_zip_bomb(path: str, size: int, members: int = 1) -> None:
    """A zip whose members each inflate to ``size`` zero bytes (about 1000:1), written in chunks."""
    zeros = b"\0" * (1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for index in range(members):
            with archive.open(f"bomb-1.0/zeros{index}.bin", "w", force_zip64=True) as out:
                left = size
                while left:
                    n = min(left, len(zeros))
                    out.write(zeros[:n])
                    left -= n


# --- probes ---------------------------------------------------------------------------------


def bytes_read() -> int | None:
    """Bytes this process has read through read(2) so far (``rchar``), None where /proc/self/io is missing."""
    try:
        with open("/proc/self/io", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class Cost:
    read: int | None = None  # bytes read, None where unknown
    peak: int = 0  # peak Python memory, bytes


@contextlib.contextmanager
def measured() -> Iterator[Cost]:
    """Bytes read and peak traced memory of the block."""
    cost = Cost()
    before = bytes_read()
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield cost
    finally:
        cost.peak = tracemalloc.get_traced_memory()[1]
        if not tracing:
            tracemalloc.stop()
        after = bytes_read()
        cost.read = None if before is None or after is None else after - before


class SafetyTimeout(Exception):
    """A test's safety net went off: the code under test hung (a failure, not a wall-clock bound)."""


@contextlib.contextmanager
def safety_net(seconds: float = 120.0) -> Iterator[None]:
    """Interrupt the block with `SafetyTimeout` if it runs for ``seconds``: a hang becomes a failure."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise SafetyTimeout(f"still running after {seconds:g} s: hung")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


def wait_until(condition: Callable[[], bool], tries: int = 600, step: float = 0.05) -> bool:
    """Poll ``condition`` a bounded number of times; whether it came true."""
    for _ in range(tries):
        if condition():
            return True
        time.sleep(step)
    return condition()


def _text(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def read_pid(path: str, tries: int = 600) -> int:
    """The pid a command wrote to ``path`` (polled a bounded number of times)."""
    assert wait_until(lambda: _text(path).isdigit(), tries), f"no pid in {path}"
    return int(_text(path))
