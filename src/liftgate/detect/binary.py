"""Binary kernel coverage: which GPU archs the kernels a package ships were compiled for.

ELF shared objects (``*.so``, ``*.so.*``), relocatable objects, ``.cubin`` and ``.fatbin`` files
carry CUDA fat binaries in ``.nv_fatbin`` (linked) or ``__nv_relfatbin`` (relocatable) sections.
The executable fat binary is what the driver loads; the relocatable one is read only where there
is none (cuobjdump's default). A fat binary is one or more containers (magic ``0xBA55ED50``, version, header size, size of the
entries), each entry a header and a payload: kind (1 PTX, 2 ELF SASS), the arch number, the PTX
ISA version, and flags — arch-specific (``a``, 0x100000), family-specific (``f``, 0x200000),
compressed (0x8000). The layout was checked against nvcc 13 output (tests build objects for
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
import io
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from liftgate.arch.core import Arch, ArchSet, arch_data, universe
from liftgate.detect.interface import GateSink
from liftgate.model import BinaryCoverage, ElseKind, Evidence, Gate, GateKind, Skip, Span
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
FLAG_COMPRESSED = 0x8000
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

    @property
    def cc(self) -> tuple[int, int]:
        return divmod(self.number, 10)

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.number}{self.variant}"


def parse_fatbin(data: bytes) -> list[KernelImage]:
    """Entries of every container in ``data`` (a section's bytes, or a ``.fatbin`` file)."""
    return _read_section(io.BytesIO(data), 0, len(data), len(data))


def _image(kind: int, size: int, header: bytes, at: int) -> KernelImage | None:
    """The image an entry header describes (``header[at:]`` is the part after kind/version/sizes)."""
    _csize, _unknown, minor, major, arch, _noff, _nlen, flags = _ENTRY_REST.unpack_from(header, at)
    if kind not in (KIND_PTX, KIND_ELF) or not 10 <= arch <= 999:
        return None
    variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    ptx = kind == KIND_PTX
    return KernelImage(
        "ptx" if ptx else "sass",
        arch,
        variant,
        (major, minor) if ptx else None,
        bool(flags & FLAG_COMPRESSED),
        size,
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
            return [cubin]
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
            image = _image(kind, psize, blob, _ENTRY.size)
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


def kernel_files(files: Iterable[Any]) -> Iterator[tuple[Any, list[KernelImage], str | None]]:
    """Each binary candidate of ``files`` (objects with ``path`` and ``fspath``): its kernel images,
    or ``[]`` and the reason it could not be read. Files without kernels come with ``[]`` and None."""
    for f in files:
        if not is_binary_candidate(f.path):
            continue
        try:
            yield f, read_kernel_images(f.fspath), None
        except FatbinError as exc:
            yield f, [], f"binary not read: {exc}"
        except OSError as exc:
            yield f, [], f"cannot read: {exc.strerror or exc}"


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


__all__ = ["Arch", "FatbinError", "KernelImage", "coverage", "parse_fatbin", "read_kernel_images"]


def detect_binaries(
    package: str, version: str | None, files: Iterable[Any]
) -> tuple[list[Gate], list[Skip], int]:
    """``binary`` gates of one package: each shared object, cubin or fatbin with CUDA kernels, and the
    archs they run on (natively, or through the driver's PTX JIT) as a typed `BinaryCoverage`.

    Returns the gates, the skips and how many candidate files were examined.
    """
    gates: list[Gate] = []
    skips: list[Skip] = []
    seen = 0
    for f, images, problem in kernel_files(files):
        seen += 1
        if problem:
            skips.append(Skip(f.path, problem, package))
            continue
        if not images:
            continue
        native, jit = admitted_archs(images)
        evidence = [Evidence(f"contains {summarize(images)}", f.path, None)]
        if jit:
            evidence.append(
                Evidence(
                    f"runs through the driver's PTX JIT on {jit.render()}: compiled at first start, "
                    "and #if __CUDA_ARCH__ inside saw the PTX's arch, not the GPU's"
                )
            )
        compressed = sum(1 for i in images if i.compressed)
        if compressed:
            evidence.append(Evidence(f"{compressed} of {len(images)} entries compressed"))
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
                coverage=BinaryCoverage(native, jit, len(images), compressed),
            )
        )
    return gates, skips, seen
