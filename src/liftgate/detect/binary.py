"""Binary kernel coverage: which GPU archs the kernels a package ships were compiled for.

ELF shared objects (``*.so``, ``*.so.*``), relocatable objects, ``.cubin`` and ``.fatbin`` files
carry CUDA fat binaries in ``.nv_fatbin`` (linked) or ``__nv_relfatbin`` (relocatable) sections.
The executable fat binary is what the driver loads; the relocatable one is read only where there
is none (cuobjdump's default). A fat binary is one or more containers (magic ``0xBA55ED50``, version, header size, size of the
entries), each entry a header and a payload: kind (1 PTX, 2 ELF SASS), the arch number, the PTX
ISA version, and flags — arch-specific (``a``, 0x100000), family-specific (``f``, 0x200000),
compressed (0x2000: an LZ4 block, CUDA 11/12; 0x8000: a zstd frame, CUDA 13), with the
decompressed size at byte 56 of the entry header. The layout was checked against nvcc 13 output (tests build objects for
``sm_80+compute_80``, ``sm_90a``, ``sm_120a``, ``sm_120f`` …) and against ``cuobjdump`` on a real
release. Only the section table and the entry headers are read (seek and read, never the whole
file or payload), so a 2 GB ``libtorch_cuda.so`` costs a few kilobytes of I/O.

The section table is read with pyelftools; every offset and size the file claims (section
table, section, container, entry) is checked against the file's real size before it is used, and every loop has a bound
(`MAX_SECTIONS`, `MAX_CONTAINERS`, `MAX_ENTRIES`, `MAX_GAP` bytes between containers), so
a hostile or damaged file is a `FatbinError` (a Skip) after a bounded amount of I/O and memory,
never a hang or an exception of another kind. Only regular files are opened.

Coverage for a GPU of capability (M, m), with the driver's real rules:

* ``native``: SASS for ``sm_Mk`` with k ≤ m (baseline SASS runs on later minors of its major);
  ``sm_Mma`` only on exactly (M, m); ``sm_Mkf`` on family members of minor ≥ k;
* ``ptx-jit``: PTX the driver can compile at first start — baseline ``compute_XY`` with
  (X, Y) ≤ (M, m), arch-specific PTX only on its own capability, family PTX on its family. The
  cost is a JIT compile at first use, and ``#if __CUDA_ARCH__`` inside it saw the PTX's arch;
* ``no-kernel-image``: neither ("no kernel image is available for execution on the device").
"""

from __future__ import annotations

import errno
import importlib.util
import io
import os
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from liftgate.arch.core import Arch, ArchSet, arch_data, universe
from liftgate.detect.interface import GateSink
from liftgate.model import BinaryCoverage, CompiledUnit, ElseKind, Evidence, Gate, GateKind, Skip, Span
from liftgate.sources.interface import open_regular

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of what follows
_ENTRY = struct.Struct("<HHIQ")  # kind, version, header size, payload size
_ENTRY_REST = struct.Struct(
    "<IIHHIIIQ"
)  # compressed size, ?, ptx minor, ptx major, arch, name off, name len, flags
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY = 0x200000
FLAG_COMPRESSED_LZ4 = 0x2000  # an LZ4 block (CUDA 11/12 with compression on)
FLAG_COMPRESSED_ZSTD = 0x8000  # a zstd frame (CUDA 13)
FLAG_COMPRESSED = FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD
KIND_PTX, KIND_ELF = 1, 2
MAX_ENTRIES = 100_000  # entries in one file (libtorch_cuda.so: ~20,000)
MAX_CONTAINERS = 100_000  # fat binary containers in one section (one per compiled .cu file)
MAX_SECTIONS = 1 << 20  # ELF sections (nvcc objects: ~20; -ffunction-sections objects: ~100,000)
MAX_GAP = 64 << 10  # bytes of padding tolerated between containers (the linker pads to 8 or 16)


class FatbinError(ValueError):
    """Malformed fat binary or ELF: the file is a Skip with this reason."""


@dataclass(frozen=True, slots=True)
class KernelImage:
    """One fatbin entry: SASS (``sass``) or PTX (``ptx``) for one arch."""

    kind: str  # "sass" | "ptx"
    number: int  # 90, 100, 120 …
    variant: str  # "", "a", "f"
    ptx_version: tuple[int, int] | None  # PTX ISA version of a PTX entry
    compressed: bool
    size: int
    container: int = 0  # which fat binary container (compiled unit) of the file holds it
    offset: int = -1  # the payload's file offset (-1: not known)
    unpacked: int = 0  # a compressed payload's size once decompressed
    flags: int = 0  # the entry header's flags (variant, compression)
    packed: int = 0  # a compressed payload's own length (the payload is padded; 0: not recorded)

    @property
    def cc(self) -> tuple[int, int]:
        return divmod(self.number, 10)

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.number}{self.variant}"


def parse_fatbin(data: bytes) -> list[KernelImage]:
    """Entries of every container in ``data`` (a section's bytes, or a ``.fatbin`` file)."""
    return _read_section(io.BytesIO(data), 0, len(data), len(data))


def _image(
    kind: int, size: int, header: bytes, at: int, container: int = 0, offset: int = -1
) -> KernelImage | None:
    """The image an entry header describes (``header[at:]`` is the part after kind/version/sizes;
    a header of 64 bytes or more has the decompressed size at byte 56)."""
    csize, _unknown, minor, major, arch, _noff, _nlen, flags = _ENTRY_REST.unpack_from(header, at)
    if kind not in (KIND_PTX, KIND_ELF) or not 10 <= arch <= 999:
        return None
    variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    ptx = kind == KIND_PTX
    unpacked = struct.unpack_from("<Q", header, 56)[0] if len(header) >= 64 else 0
    return KernelImage(
        "ptx" if ptx else "sass",
        arch,
        variant,
        (major, minor) if ptx else None,
        bool(flags & FLAG_COMPRESSED),
        size,
        container,
        offset,
        unpacked,
        flags,
        csize if flags & FLAG_COMPRESSED and csize <= size else 0,
    )


_ELF_MAGIC = b"\x7fELF"


def fatbin_sections(fh: BinaryIO, file_size: int) -> dict[str, tuple[int, int]]:
    """(file offset, size) of the fat binary sections (`FATBIN_SECTIONS`) of an ELF file.

    pyelftools reads the ELF header, the section table and the section names; before it walks
    the table, its place and entry count (at most `MAX_SECTIONS`, extended numbering included)
    are checked against the file's real size, so a hostile header costs a bounded amount of I/O.
    The offsets returned are checked by `_read_section` before anything is read there.
    """
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(fh)
        shoff, shentsize = elf.header["e_shoff"], elf.header["e_shentsize"]
        if shoff == 0:
            return {}  # no section table
        count = elf.num_sections()
        if count > MAX_SECTIONS:
            raise FatbinError(f"not a readable ELF file: {count:,} sections")
        if shoff + count * shentsize > file_size:
            raise FatbinError(f"section table at offset {shoff:#x} runs past the end of the file")
        found: dict[str, tuple[int, int]] = {}
        for section in elf.iter_sections():
            if section["sh_type"] == "SHT_NOBITS":
                continue
            if section.name in FATBIN_SECTIONS and section.name not in found:
                found[section.name] = (section["sh_offset"], section["sh_size"])
        return found
    except FatbinError:
        raise
    except (
        ELFError,
        struct.error,
        ValueError,
        OverflowError,
        OSError,
        KeyError,
        IndexError,
        AssertionError,
    ) as exc:
        raise FatbinError(f"not a readable ELF file: {exc}") from exc


def _cubin_image(header: bytes) -> KernelImage | None:
    """A bare cubin: the arch from ``e_flags`` (the variant is not recorded there)."""
    if len(header) < 52 or header[:4] != _ELF_MAGIC or header[4] != 2:
        return None
    e_machine = struct.unpack_from("<H", header, 18)[0]
    if e_machine != 190:  # EM_CUDA
        return None
    e_flags = struct.unpack_from("<I", header, 48)[0]
    number = (e_flags >> 8) & 0xFF if e_flags >> 24 else e_flags & 0xFF
    return KernelImage("sass", number, "", None, False, 0) if 10 <= number <= 999 else None


def _open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (`open_regular`); anything else is a
    `FatbinError` (a Skip with its reason), not an `OSError`."""
    try:
        return open_regular(path)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise FatbinError("not a regular file (a FIFO, socket or device)") from exc
        raise


def read_kernel_images(path: str) -> list[KernelImage]:
    """Kernel images in a shared object, object file, ``.cubin`` or ``.fatbin``; [] when it has none.

    Raises `FatbinError` for a file that is damaged, hostile or not a regular file, `OSError` when it cannot be read.
    """
    with _open_regular(path) as fh:
        file_size = os.fstat(fh.fileno()).st_size
        head = fh.read(64)
        if head[:4] == struct.pack("<I", FATBIN_MAGIC):
            return _read_section(fh, 0, file_size, file_size)
        if head[:4] != _ELF_MAGIC:
            return []
        cubin = _cubin_image(head)
        if cubin is not None:
            return [replace(cubin, offset=0, size=file_size)]
        sections = fatbin_sections(fh, file_size)
        # What the driver loads: the executable fat binary; the relocatable one (device linking)
        # only where there is no other, as cuobjdump lists them.
        for name in FATBIN_SECTIONS:
            if name in sections and sections[name][1]:
                return _read_section(fh, *sections[name], file_size)
        return []


def _read_section(fh: BinaryIO, offset: int, size: int, file_size: int) -> list[KernelImage]:
    """Walk a fatbin section by seeking over payloads: only headers (and short gaps) are read."""
    if offset < 0 or size < 0 or offset + size > file_size:
        raise FatbinError(
            f"fat binary section at offset {offset:#x} (size {size:#x}) runs past the end of the file"
        )
    images: list[KernelImage] = []
    entries = containers = 0
    pos, end = offset, offset + size
    while pos + _CONTAINER.size <= end:
        fh.seek(pos)
        raw = fh.read(_CONTAINER.size)
        if len(raw) < _CONTAINER.size:
            raise FatbinError("the fatbin section is truncated")
        magic, _version, header_size, fat_size = _CONTAINER.unpack(raw)
        if magic != FATBIN_MAGIC:
            pos = _next_container(fh, pos, end)  # padding between containers (8-byte aligned)
            continue
        containers += 1
        if containers > MAX_CONTAINERS:
            raise FatbinError(f"more than {MAX_CONTAINERS:,} fat binary containers")
        stop = pos + header_size + fat_size
        if header_size < _CONTAINER.size or stop > end:
            raise FatbinError(f"fat binary container at file offset {pos} runs past its section")
        entry = pos + header_size
        while entry + _ENTRY.size + _ENTRY_REST.size <= stop:
            fh.seek(entry)
            blob = fh.read(_ENTRY.size + _ENTRY_REST.size)
            if len(blob) < _ENTRY.size + _ENTRY_REST.size:
                raise FatbinError(f"fat binary entry at file offset {entry} is truncated")
            kind, _v, ehs, psize = _ENTRY.unpack_from(blob, 0)
            if ehs < _ENTRY.size + _ENTRY_REST.size or entry + ehs + psize > stop:
                raise FatbinError(f"fat binary entry at file offset {entry} is malformed")
            entries += 1
            if entries > MAX_ENTRIES:
                raise FatbinError(f"more than {MAX_ENTRIES:,} fat binary entries")
            if ehs >= 64 and len(blob) < 64:
                blob += fh.read(64 - len(blob))
            image = _image(kind, psize, blob, _ENTRY.size, containers - 1, entry + ehs)
            if image is not None:
                images.append(image)
            entry += ehs + psize
        pos = stop
    return images


def _next_container(fh: BinaryIO, pos: int, end: int) -> int:
    """The offset of the next container magic after ``pos`` (8-byte steps), ``end`` when the section has none.

    At most `MAX_GAP` bytes are searched, in one read: a section that is mostly not fat binary
    (a claim of gigabytes of zeros) is an error, not a walk over all of it.
    """
    fh.seek(pos)
    window = fh.read(min(MAX_GAP, end - pos))
    magic = _CONTAINER.pack(FATBIN_MAGIC, 0, 0, 0)[:4]
    at = window.find(magic, 8)
    while at != -1 and at % 8:
        at = window.find(magic, at + 1)
    if at != -1:
        return pos + at
    if pos + len(window) + _CONTAINER.size > end:
        return end  # only padding up to the end of the section
    raise FatbinError(
        f"no fat binary container in the {MAX_GAP:,} bytes after file offset {pos:#x}: not a fat binary section"
    )


# -- coverage -------------------------------------------------------------------------------


def _family_of(cc: tuple[int, int]) -> str | None:
    cap = arch_data().capability(cc)
    return cap.family if cap else None


def runs_natively(image: KernelImage, cc: tuple[int, int]) -> bool:
    if image.kind != "sass":
        return False
    major, minor = image.cc
    if image.variant == "a":
        return cc == image.cc
    if image.variant == "f":
        family = _family_of(image.cc)
        return family is not None and _family_of(cc) == family and cc[1] >= minor and cc[0] == major
    return cc[0] == major and cc[1] >= minor


def jit_compiles(image: KernelImage, cc: tuple[int, int]) -> bool:
    if image.kind != "ptx":
        return False
    if image.variant == "a":
        return cc == image.cc
    if image.variant == "f":
        family = _family_of(image.cc)
        return family is not None and _family_of(cc) == family and cc >= image.cc
    return cc >= image.cc


def coverage(images: Iterable[KernelImage], cc: tuple[int, int]) -> tuple[str, list[KernelImage]]:
    """``native`` / ``ptx-jit`` / ``no-kernel-image`` for a GPU of capability ``cc``, and the images that serve it."""
    images = list(images)
    native = [i for i in images if runs_natively(i, cc)]
    if native:
        return "native", native
    jit = [i for i in images if jit_compiles(i, cc)]
    if jit:
        return "ptx-jit", jit
    return "no-kernel-image", []


def admitted_archs(images: Iterable[KernelImage]) -> tuple[ArchSet, ArchSet]:
    """(targets whose GPU runs these kernels natively, targets that need the driver's PTX JIT)."""
    images = list(images)
    ccs = sorted({a.cc for a in universe()})
    native = {cc for cc in ccs if any(runs_natively(i, cc) for i in images)}
    jit = {cc for cc in ccs if cc not in native and any(jit_compiles(i, cc) for i in images)}
    return (
        ArchSet(a for a in universe() if a.cc in native),
        ArchSet(a for a in universe() if a.cc in jit),
    )


def is_binary_candidate(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return base.endswith((".so", ".cubin", ".fatbin", ".o")) or ".so." in base


def summarize(images: Iterable[KernelImage]) -> str:
    """``SASS sm_80, sm_90a; PTX compute_80 (ISA 9.0)`` — what a file contains, each arch once."""
    sass = sorted({i.name for i in images if i.kind == "sass"}, key=_order)
    ptx = sorted(
        {
            f"{i.name}" + (f" (ISA {i.ptx_version[0]}.{i.ptx_version[1]})" if i.ptx_version else "")
            for i in images
            if i.kind == "ptx"
        },
        key=_order,
    )
    parts = []
    if sass:
        parts.append("SASS " + ", ".join(sass))
    if ptx:
        parts.append("PTX " + ", ".join(ptx))
    return "; ".join(parts) or "no kernels"


def _order(name: str) -> tuple[int, str]:
    digits = "".join(ch for ch in name.split("_", 1)[1] if ch.isdigit())
    return (int(digits or 0), name)


# -- compiled units and their kernels ----------------------------------------------------------

MAX_NAME_BYTES = 1 << 30  # payload bytes read, plus bytes decompressed, for kernel names, per file
MAX_UNPACKED = 256 << 20  # one entry decompressed (real cubins: tens of MB)
MAX_SYMBOLS = 1 << 20  # symbols of one cubin
MAX_KERNELS = 1 << 17  # kernels named in one cubin (libtorch_cuda.so: 23,693 in the whole file)
MAX_NAME_LENGTH = 1 << 14  # bytes of one kernel's mangled name (CUTLASS's longest: a few thousand)
_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, align, entsize
_SYMBOL = struct.Struct("<IBBHQQ")
_SHT_SYMTAB = 2
_STT_FUNC = 2
_STO_CUDA_ENTRY = 0x10  # st_other of a kernel's entry symbol (a __global__ function) in a cubin
_PTX_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$%][\w$%]*)")


@dataclass(frozen=True, slots=True)
class Unit:
    """One fat binary container: its images, its kernels' mangled names, why they were not read."""

    images: tuple[KernelImage, ...]
    kernels: tuple[str, ...] = ()
    unread: str | None = None


def read_units(path: str, names: bool = True) -> list[Unit]:
    """The compiled units (fat binary containers) of a binary, each with its images and, with
    ``names``, the mangled names of its kernels: from the symbol table of one uncompressed cubin
    of it (its ELF header, section table, symbol and string tables are read, not the code), else
    from its PTX (decompressed when ``zstandard`` is installed). At most `MAX_NAME_BYTES` are read
    for names per file; a unit past that says so. Raises like `read_kernel_images`."""
    images = read_kernel_images(path)
    by_container: dict[int, list[KernelImage]] = {}
    for image in images:
        by_container.setdefault(image.container, []).append(image)
    groups = [tuple(by_container[k]) for k in sorted(by_container)]
    if not names:
        return [Unit(g) for g in groups]
    budget = [MAX_NAME_BYTES]
    out: list[Unit] = []
    with _open_regular(path) as fh:
        file_size = os.fstat(fh.fileno()).st_size
        for group in groups:
            try:
                kernels, unread = _unit_kernels(fh, group, file_size, budget)
            except (FatbinError, struct.error, OSError, ValueError) as exc:
                kernels, unread = (), f"kernel names not read: {exc}"
            out.append(Unit(group, kernels, unread))
    return out


def _unit_kernels(
    fh: BinaryIO, group: tuple[KernelImage, ...], file_size: int, budget: list[int]
) -> tuple[tuple[str, ...], str | None]:
    """A unit's kernels from the cheapest source: the tables of its uncompressed cubins (all of
    them: code under ``#if __CUDA_ARCH__`` can give one arch's cubin kernels another lacks), else
    its PTX, else its smallest compressed cubin decompressed whole."""
    usable = [i for i in group if i.offset >= 0]
    cubins = [i for i in usable if i.kind == "sass" and not i.compressed]
    if cubins:
        names: dict[str, None] = {}
        for cubin in cubins:
            names.update(dict.fromkeys(_cubin_kernels(fh, cubin, file_size, budget)))
        return tuple(names), None
    ptxs = sorted((i for i in usable if i.kind == "ptx"), key=lambda i: (i.compressed, i.unpacked or i.size))
    packed = sorted((i for i in usable if i.kind == "sass"), key=lambda i: i.unpacked or i.size)
    for image in [*ptxs, *packed]:
        data = _payload(fh, image, file_size, budget)
        if data is None:
            continue
        if image.kind == "ptx":
            return tuple(dict.fromkeys(m.decode("ascii", "replace") for m in _PTX_ENTRY.findall(data))), None
        unpacked = replace(image, offset=0, size=len(data), compressed=False)
        return _cubin_kernels(io.BytesIO(data), unpacked, len(data), budget), None
    if usable:
        return (), (
            "kernel names not read: its entries are compressed, and the decompressor is not installed "
            "(pip install 'liftgate[kernels]': zstandard, lz4)"
        )
    return (), None


def _spend(budget: list[int], size: int) -> None:
    if size > budget[0]:
        raise FatbinError(
            f"more than {MAX_NAME_BYTES >> 20:,} MB read or decompressed for kernel names in this file"
        )
    budget[0] -= size


def _read_at(fh: BinaryIO, offset: int, size: int, limit: int, budget: list[int]) -> bytes:
    if offset < 0 or size < 0 or offset + size > limit:
        raise FatbinError(f"a table at offset {offset:#x} (size {size:#x}) runs past its cubin")
    _spend(budget, size)
    fh.seek(offset)
    data = fh.read(size)
    if len(data) < size:
        raise FatbinError("a cubin is truncated")
    return data


def _cubin_kernels(fh: BinaryIO, image: KernelImage, file_size: int, budget: list[int]) -> tuple[str, ...]:
    """Mangled names of a cubin's kernels: ``STT_FUNC`` symbols marked as CUDA entries."""
    end = min(image.offset + image.size, file_size)
    head = _read_at(fh, image.offset, min(16 + _ELF_HEADER.size, end - image.offset), end, budget)
    at = head.find(_ELF_MAGIC)
    if at < 0 or at > 15:
        raise FatbinError("a SASS entry is not an ELF cubin")
    base = image.offset + at
    if len(head) < at + _ELF_HEADER.size or head[at + 4] != 2 or head[at + 5] != 1:
        raise FatbinError("a cubin is not a 64-bit little-endian ELF file")
    fields = _ELF_HEADER.unpack_from(head, at)
    shoff, shentsize, shnum = fields[6], fields[11], fields[12]
    if shentsize != _SECTION.size or not 0 < shnum <= MAX_SECTIONS:
        raise FatbinError("a cubin's section table is malformed")
    table = _read_at(fh, base + shoff, shnum * _SECTION.size, end, budget)
    sections = [_SECTION.unpack_from(table, n * _SECTION.size) for n in range(shnum)]
    names: dict[str, None] = {}
    for sec in sections:
        if sec[1] != _SHT_SYMTAB or not 0 <= sec[6] < shnum:
            continue
        count = sec[5] // _SYMBOL.size
        if count > MAX_SYMBOLS:
            raise FatbinError(f"a cubin has more than {MAX_SYMBOLS:,} symbols")
        symbols = _read_at(fh, base + sec[4], count * _SYMBOL.size, end, budget)
        strtab = sections[sec[6]]
        strings = _read_at(fh, base + strtab[4], strtab[5], end, budget)
        for n in range(count):
            st_name, st_info, st_other, _shndx, _value, _size = _SYMBOL.unpack_from(symbols, n * _SYMBOL.size)
            if st_info & 0xF == _STT_FUNC and st_other & _STO_CUDA_ENTRY and st_name < len(strings):
                stop = strings.find(b"\0", st_name, st_name + MAX_NAME_LENGTH + 1)
                if stop < 0:
                    continue  # no end within the limit: not a name liftgate shows
                name = strings[st_name:stop].decode("ascii", "replace")
                if name not in names:
                    _spend(budget, len(name))
                    names[name] = None
                    if len(names) > MAX_KERNELS:
                        raise FatbinError(f"a cubin names more than {MAX_KERNELS:,} kernels")
    return tuple(names)


def _payload(fh: BinaryIO, image: KernelImage, file_size: int, budget: list[int]) -> bytes | None:
    """An entry's payload, decompressed; None when it is compressed and the decompressor for its
    format is not installed. Its decompressed size counts against the budget too."""
    if image.compressed:
        module = "zstandard" if image.flags & FLAG_COMPRESSED_ZSTD else "lz4"
        if importlib.util.find_spec(module) is None:
            return None
    data = _read_at(fh, image.offset, image.size, file_size, budget)
    if not image.compressed:
        return data
    size = image.unpacked
    if not 0 < size <= MAX_UNPACKED:
        raise FatbinError(f"a compressed entry claims {size:,} bytes once decompressed")
    _spend(budget, size)
    try:
        if image.flags & FLAG_COMPRESSED_ZSTD:
            import zstandard

            # Streamed with a bound: a frame's own content size is not believed (a bomb claims little
            # in the entry header and a lot in the frame).
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
                out: bytes = reader.read(size + 1)
            if len(out) != size:
                raise FatbinError(f"decompresses to more or less than the {size:,} bytes its header gives")
        else:
            out = _lz4_block(data, image.packed, size)
    except Exception as exc:  # each library raises its own error types for a damaged frame
        raise FatbinError(f"a compressed {image.name} entry does not decompress: {exc}") from exc
    return out


def _lz4_block(data: bytes, packed: int, size: int) -> bytes:
    """An LZ4 block padded with zeros to the entry's size: its own length is the header's (when
    recorded), else found by trying the few lengths the padding allows (at most 8 bytes)."""
    import lz4.block

    # The payload is padded to 8 bytes: the block's own length is within the last 8 (trailing zero
    # literals of the block make stripping zeros wrong).
    lengths = ([packed] if packed else []) + list(range(len(data), max(len(data) - 8, 0), -1))
    problem: Exception | None = None
    for n in dict.fromkeys(lengths):
        try:
            out: bytes = lz4.block.decompress(data[:n], uncompressed_size=size)
        except Exception as exc:  # lz4.block.LZ4BlockError: not a block of this length
            problem = exc
            continue
        if len(out) == size:
            return out
    raise FatbinError(f"not an LZ4 block of the length its header gives ({problem})")


# The demangler runs in a child process with a memory limit: a crafted name of a few hundred bytes
# can demangle (through back-references) to gigabytes, and __cxa_demangle then fails cleanly inside
# the limit instead of exhausting this process. One child per binary, for all of its kernels.
_DEMANGLE_CHILD = r"""
import ctypes, ctypes.util, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
fn = None
for name in (ctypes.util.find_library("stdc++"), "libstdc++.so.6", ctypes.util.find_library("c++")):
    if not name:
        continue
    try:
        fn = ctypes.CDLL(name).__cxa_demangle
        break
    except (OSError, AttributeError):
        continue
names = sys.stdin.buffer.read().split(b"\0")
out = []
if fn is not None:
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = ctypes.CDLL(None).free
    free.argtypes = [ctypes.c_void_p]
total = 0
for name in names:
    text = b""
    if fn is not None and name.startswith(b"_Z") and total < TOTAL:
        status = ctypes.c_int()
        ptr = fn(name, None, None, ctypes.byref(status))
        if ptr:
            if status.value == 0:
                text = ctypes.string_at(ptr)[: MAX]
            free(ptr)
    total += len(text)
    out.append(text)
sys.stdout.buffer.write(b"\0".join(out))
"""
MAX_DEMANGLED = 1 << 16  # characters of one demangled name kept (the rest is never shown)
MAX_DEMANGLED_TOTAL = 64 << 20  # demangled bytes per binary (libtorch_cuda.so: about 7 MB)
DEMANGLE_MEMORY = 1 << 30  # address space of the demangling child
DEMANGLE_SECONDS = 60


def demangle_all(names: Sequence[str]) -> list[str]:
    """Each of ``names`` demangled (``_ZN6marlin6MarlinILi4EEEvPf`` as ``void
    marlin::Marlin<4>(float*)``), or itself when it is not mangled, the demangler refuses it or
    cannot finish it within the child's limits, or the platform has no C++ runtime to ask."""
    import subprocess
    import sys

    todo = [n for n in dict.fromkeys(names) if n.startswith("_Z") and "\0" not in n]
    found: dict[str, str] = {}
    if todo:
        code = _DEMANGLE_CHILD.replace("[: MAX]", f"[:{MAX_DEMANGLED}]").replace(
            "< TOTAL", f"< {MAX_DEMANGLED_TOTAL}"
        )
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", "-c", code, str(DEMANGLE_MEMORY)],
                input="\0".join(todo).encode("utf-8", "replace"),
                capture_output=True,
                timeout=DEMANGLE_SECONDS,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0:
            answers = done.stdout.split(b"\0")
            if len(answers) == len(todo):
                for name, text in zip(todo, answers, strict=True):
                    if text:
                        found[name] = text.decode("utf-8", "replace")
    return [found.get(n, n) for n in names]


def demangle(name: str) -> str:
    """One name, as `demangle_all` does it."""
    return demangle_all([name])[0]


def kernel_display(mangled: str, limit: int = 120, demangled: str | None = None) -> str:
    """A kernel's name for people: demangled (``demangled``, when `demangle_all` gave it already),
    without return type and parameters, long template arguments elided from the inside out
    (``cutlass::device_kernel<flash::FlashAttnFwdCombine<…>>``, then ``marlin::Marlin<…>``)."""
    plain = (demangle(mangled) if demangled is None else demangled)[:MAX_DEMANGLED]
    text = (
        _from_mangled(mangled) if plain == mangled and mangled.startswith("_Z") else _strip_signature(plain)
    )
    for depth in (2, 1):
        if len(text) > limit:
            text = _elide_templates(text, depth)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _from_mangled(name: str) -> str:
    """A mangled name the demangler refuses (CUDA 13 emits some libstdc++ cannot read), shown by
    its identifiers: ``cutlass::device_kernel<enable_sm100f_only<…>>``."""
    head: list[str] = []
    inner: list[str] = []
    template = False
    i, n = 2, len(name)
    while i < n and len(inner) < 1:
        ch = name[i]
        if ch.isdigit():
            j = i
            while j < n and name[j].isdigit():
                j += 1
            if j - i > 6:  # no identifier is that long: not a length
                i = j
                continue
            size = int(name[i:j])
            ident = name[j : j + size]
            if size and _IDENT.fullmatch(ident):
                (inner if template else head).append(ident)
                i = j + size
                continue
            i = j
            continue
        if ch == "I" and head:
            template = True
        i += 1
    text = "::".join(head) or name[:60]
    return f"{text}<{inner[0]}<…>>" if inner else text


_IDENT = re.compile(r"[A-Za-z_]\w*")


def _elide_templates(text: str, depth: int) -> str:
    """``text`` with template arguments nested ``depth`` deep or more replaced by ``…``."""
    level, out = 0, []
    for ch in text:
        if ch == "<":
            level += 1
            if level == depth:
                out.append("<…")
            elif level < depth:
                out.append(ch)
            continue
        if ch == ">":
            level -= 1
            if level < depth:
                out.append(">")
            continue
        if level < depth:
            out.append(ch)
    return "".join(out)


def _strip_signature(text: str) -> str:
    """``void ns::k<int>(float*)`` -> ``ns::k<int>``: the parameter list and return type dropped."""
    depth = 0
    cut = len(text)
    for i in range(len(text) - 1, -1, -1):  # the last top-level '(' opens the parameters
        ch = text[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    head = text[:cut]
    depth = 0
    for i, ch in enumerate(head):  # a return type ends at the first top-level space
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif (
            ch == " "
            and depth == 0
            and not head[:i].endswith(("operator", "unsigned", "signed", "long", "short"))
        ):
            return head[i + 1 :]
    return head


def kernel_group(display: str) -> str:
    """What a kernel is grouped under in a report: its top namespace (``marlin`` for
    ``marlin::Marlin<…>``), the kernel type inside CUTLASS's launch wrappers
    (``cutlass::device_kernel<flash::FlashAttnFwdCombine<…>>`` is ``flash``), ``cub`` for CUB's,
    or its own name."""
    text = display
    for wrapper in ("cutlass::device_kernel<", "cutlass::Kernel<", "cutlass::Kernel2<"):
        if text.startswith(wrapper):
            inner = text[len(wrapper) :].lstrip()
            if (inner and inner[0].isalpha()) or inner.startswith("_"):
                text = inner
            break
    if text.startswith("cub::"):
        return "cub"
    head = re.split(r"[<(\s]", text, maxsplit=1)[0]
    parts = [p for p in head.split("::") if p and p != "(anonymous namespace)"]
    if not parts:
        return display
    if len(parts) >= 3:
        return "::".join(parts[:2])
    if len(parts) == 2 and parts[0] in _BROAD_NAMESPACES:
        return "::".join(parts)  # the project's own namespace says nothing: the kernel does
    return parts[0]


# Namespaces that hold a whole project's kernels: a kernel directly in one is its own group.
_BROAD_NAMESPACES = frozenset({"vllm", "at", "c10", "sglang", "flashinfer", "tensorrt_llm", "tllm", "native"})


def unit_coverage(units: Iterable[Unit]) -> BinaryCoverage:
    """The coverage the units give, over the known targets: every unit runs natively (``native``),
    every unit runs but some only through the JIT (``ptx_jit``), some run and some do not
    (``partial``); the units as typed facts, and the counts of images and compressed ones."""
    every = list(universe())
    units = [u for u in units if u.images]
    mangled = [k for u in units for k in u.kernels]
    shown = dict(
        zip(
            mangled,
            (kernel_display(k, demangled=d) for k, d in zip(mangled, demangle_all(mangled), strict=True)),
            strict=True,
        )
    )
    compiled: list[CompiledUnit] = []
    for unit in units:
        native, jit = admitted_archs(unit.images)
        compiled.append(
            CompiledUnit(
                tuple(sorted({i.name for i in unit.images}, key=_order)),
                native,
                jit,
                tuple(shown[k] for k in unit.kernels),
                unit.unread,
            )
        )
    images = sum(len(u.images) for u in units)
    compressed = sum(1 for u in units for i in u.images if i.compressed)
    if not compiled:
        return BinaryCoverage(ArchSet.none(), ArchSet.none())
    # A unit that holds no kernel is never launched: it decides nothing (unless all are such).
    deciding = [u for u in compiled if not u.empty] or compiled
    all_native = ArchSet(a for a in every if all(a in u.native for u in deciding))
    all_run = ArchSet(a for a in every if all(u.runs(a) for u in deciding))
    some = ArchSet(a for a in every if any(u.runs(a) for u in deciding))
    return BinaryCoverage(
        all_native, all_run - all_native, images, compressed, some - all_run, tuple(compiled)
    )


__all__ = [
    "Arch",
    "FatbinError",
    "KernelImage",
    "coverage",
    "parse_fatbin",
    "read_kernel_images",
    "read_units",
]


def unit_files(files: Iterable[Any], names: bool = True) -> Iterator[tuple[Any, list[Unit], str | None]]:
    """Each binary candidate of ``files`` (objects with ``path`` and ``fspath``): its compiled units
    (and their kernel names, with ``names``), or ``[]`` and the reason it could not be read. Files
    without kernels come with ``[]`` and None."""
    for f in files:
        if not is_binary_candidate(f.path):
            continue
        try:
            yield f, read_units(f.fspath, names), None
        except FatbinError as exc:
            yield f, [], f"binary not read: {exc}"
        except OSError as exc:
            yield f, [], f"cannot read: {exc.strerror or exc}"


def detect_binaries(
    package: str, version: str | None, files: Iterable[Any]
) -> tuple[list[Gate], list[Skip], int]:
    """``binary`` gates of one package: each shared object, cubin or fatbin with CUDA kernels, and the
    archs they run on, per compiled unit as the driver picks images (natively, through the driver's
    PTX JIT, or partly: some units with no image), as a typed `BinaryCoverage`.

    Returns the gates, the skips and how many candidate files were examined.
    """
    gates: list[Gate] = []
    skips: list[Skip] = []
    seen = 0
    for f, units, problem in unit_files(files):
        seen += 1
        if problem:
            skips.append(Skip(f.path, problem, package))
            continue
        images = [i for u in units for i in u.images]
        if not images:
            continue
        cov = unit_coverage(units)
        native, jit, partial, compiled = cov.native, cov.ptx_jit, cov.partial, cov.units
        kernels = sum(len(u.kernels) for u in compiled)
        evidence = [
            Evidence(f"contains {summarize(images)}", f.path, None),
            Evidence(
                f"{len(compiled)} compiled unit{'s' if len(compiled) != 1 else ''} (fat binary containers, one per "
                f"compiled source: the driver picks an image in each), {kernels:,} kernels named"
            ),
        ]
        if jit:
            evidence.append(
                Evidence(
                    f"runs through the driver's PTX JIT on {jit.render()}: compiled at first start, "
                    "and #if __CUDA_ARCH__ inside saw the PTX's arch, not the GPU's"
                )
            )
        if partial:
            evidence.append(
                Evidence(
                    f"partly runs on {partial.render()}: some compiled units have no kernel image there, and "
                    'their kernels fail with "no kernel image is available for execution on the device"'
                )
            )
        unread = [u for u in compiled if u.unread]
        if unread:
            evidence.append(
                Evidence(f"kernel names of {len(unread)} compiled units not read: {unread[0].unread}")
            )
        if cov.compressed:
            evidence.append(Evidence(f"{cov.compressed} of {cov.images} entries compressed"))
        sink = GateSink(GateKind.BINARY, package, version, f.path)
        gates.append(
            sink.gate(
                sink.identify("kernel images", ()),
                span=Span(1, 1),
                condition=summarize(images),
                admitted=native | jit,
                unknown=ArchSet.none(),
                else_kind=ElseKind.ERROR,
                evidence=evidence,
                directive="fatbin",
                coverage=cov,
            )
        )
    return gates, skips, seen


# -- what a binary's coverage means for one target, in words ----------------------------------------


def missing_groups(cov: BinaryCoverage, arch: Arch) -> list[tuple[str, int]]:
    """The kernels of the compiled units with no image ``arch`` runs, by `kernel_group`: the
    groups with the most kernels first."""
    counts: dict[str, int] = {}
    for unit in cov.missing(arch):
        for kernel in unit.kernels:
            group = kernel_group(kernel)
            counts[group] = counts.get(group, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def needs_jit(cov: BinaryCoverage, arch: Arch) -> bool:
    """Whether some compiled unit runs on ``arch`` only through the driver's PTX JIT."""
    if cov.units:
        return any(arch not in u.native and arch in u.ptx_jit and not u.empty for u in cov.units)
    return arch in cov.ptx_jit


def coverage_text(cov: BinaryCoverage, arch: Arch, groups: int = 3) -> str:
    """``partial: 21 of 105 compiled units runnable (all through the PTX JIT), 84 with no kernel
    image (marlin: 555 kernels, vllm: 442, selective_scan_fwd_kernel: 200, …)``."""
    state = cov.coverage(arch).value
    total = len(cov.units)
    if not total:
        return state
    native, jit, none = cov.unit_counts(arch)
    runnable = native + jit
    if jit == 0:
        how = "all natively"
    elif native == 0:
        how = "all through the PTX JIT"
    else:
        how = f"{native} natively, {jit} through the PTX JIT"
    if none == 0:
        return f"{state}: all {total} compiled units run ({how})"
    if all(u.empty for u in cov.missing(arch)):
        return (
            f"{state}: {runnable} of {total} compiled units runnable ({how}); the {none} with no kernel image "
            "hold no kernel"
        )
    text = f"{state}: {runnable} of {total} compiled units runnable" + (f" ({how})" if runnable else "")
    text += f", {none} with no kernel image"
    notes = []
    empty = sum(1 for u in cov.missing(arch) if u.empty)
    if empty:
        notes.append(f"{empty} of them hold no kernel")
    top = missing_groups(cov, arch)
    if top:
        shown = [
            f"{name}: {n:,} kernel{'s' if n != 1 else ''}" if i == 0 else f"{name}: {n:,}"
            for i, (name, n) in enumerate(top[:groups])
        ]
        notes.append(", ".join(shown) + (", …" if len(top) > groups else ""))
    if notes:
        text += " (" + "; ".join(notes) + ")"
    unread = sum(1 for u in cov.missing(arch) if u.unread)
    if unread:
        text += f"; the kernel names of {unread} of them were not read"
    return text
