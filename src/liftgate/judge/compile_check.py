"""``--compile-check``: ask the real toolchain whether a gate's code builds for the target once lifted.

The judge's verdict is static; this is the assembler's answer next to it. For a CUDA gate the
translation unit is the gated file when it is a ``.cu``, else the smallest ``.cu`` of the
package that includes it (else the header on its own). For a build filter (FlashInfer-style JIT
spec, CMake arch list) the translation units are the sources it guards. The package's C/C++
files are laid out in a temporary directory (symlinks, nothing in the package is touched), the
gate's directive is replaced there by the lifted one (`liftgate.edits.cuda`), include
directories are derived from how the package's own ``#include`` lines resolve, and each unit
is compiled to PTX with ``nvcc --ptx -arch=compute_XX`` and assembled with ``ptxas -arch=sm_XX``.

The result says which catalog features the PTX holds: a header whose templates no unit
instantiates yields no code, and then "it assembles" says nothing about the region, which the
notes state plainly. Includes from outside the package (``<tvm/ffi/…>``, ``<torch/…>``) are
``not-checked`` with the missing name, unless ``include_dirs`` supplies them.

Only regular files are laid out or read (never a device, a FIFO, a socket, nor anything under
``/proc``, ``/sys`` or ``/dev``), and a unit whose includes name such a file (``#include
"/dev/zero"``, a ``../`` path that leads there, or a macro defined as one) is ``not-checked``:
nvcc would block on it or read without end. nvcc and ptxas get no standard input.
"""

from __future__ import annotations

import enum
import os
import posixpath
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from liftgate.arch.core import Arch
from liftgate.detect.cuda import CUDA_EXTENSIONS, IncludeIndex
from liftgate.edits.cuda import EditError, lift_directive
from liftgate.model import Gate, GateKind, Status
from liftgate.sources.interface import is_system_path, open_regular

C_FAMILY = tuple(sorted(CUDA_EXTENSIONS | {".ipp", ".def"}))  # what a unit may include
MAX_UNITS = 4  # translation units compiled for one build filter
MAX_DIAGNOSTICS = 12
DEFAULT_TIMEOUT_S = 600.0

_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
# Every include, for the safety check: quoted, angled, or computed (``#include NAME``).
_ANY_INCLUDE = re.compile(
    rb'^[ \t]*#[ \t]*include(?:_next)?[ \t]*(?:([<"])([^>"\n]+)[>"]|([A-Za-z_]\w*))', re.M
)
_STRING_DEFINE = re.compile(
    rb'^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(?:"([^"\n]*)"|<([^>\n]*)>)', re.M
)
_SYSTEM_INCLUDE_DIRS = ("/usr/include", "/usr/local/include")
_MISSING = re.compile(
    r"fatal error: ([^:\n]+): No such file or directory|cannot open source file \"([^\"]+)\""
)
_ERROR_LINE = re.compile(r"error|Error|fatal")


class CheckStatus(str, enum.Enum):
    COMPILES = "compiles"  # every unit compiled and assembled for the target
    FAILS = "fails"  # the compiler or the assembler refused it: see diagnostics
    NOT_EMITTED = "not-emitted"  # it builds, but the PTX holds none of the region's features: not covered
    NOT_CHECKED = "not-checked"  # no toolchain, nothing to compile, or an include from outside


@dataclass(frozen=True, slots=True)
class CompileCheck:
    status: CheckStatus
    reason: str
    command: str = ""
    translation_unit: str = ""
    diagnostics: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    emitted: tuple[str, ...] = ()  # catalog features found in the PTX


def find_nvcc() -> str | None:
    """nvcc on PATH, else under ``$CUDA_HOME``/``$CUDA_PATH``, else /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            candidate = os.path.join(root, "bin", "nvcc")
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def regular_file(fspath: str) -> str | None:
    """The real path of ``fspath`` if it is a regular file outside /proc, /sys and /dev, else None."""
    try:
        real = os.path.realpath(fspath)
        if is_system_path(real):
            return None
        return real if stat.S_ISREG(os.stat(real).st_mode) else None
    except (OSError, ValueError):
        return None


def _read(fspath: str) -> bytes | None:
    """The first 8 MB of a regular file; None for anything else (opened without blocking: a FIFO
    swapped in after the check is seen for what it is, never read)."""
    real = regular_file(fspath)
    if real is None:
        return None
    try:
        with open_regular(real) as fh:
            return fh.read(8 << 20)
    except OSError:
        return None


def _unsafe_include(name: str, including_dir: str, include_dirs: Sequence[str]) -> str | None:
    """Why nvcc must not be given an include of ``name``: it reaches something not a regular file."""
    if name.startswith("/"):
        candidates = [name]
    elif ".." in name.replace("\\", "/").split("/"):
        candidates = [os.path.join(d, name) for d in (including_dir, *include_dirs, *_SYSTEM_INCLUDE_DIRS)]
    else:
        return None  # found inside an include directory: the layout holds regular files only
    for candidate in candidates:
        path = os.path.normpath(candidate)
        if is_system_path(path) or (os.path.lexists(path) and regular_file(path) is None):
            return f"includes {name}, which is not a regular file (a device, a pipe, or under /proc, /sys or /dev)"
    return None


def _closure(root: str, files: Mapping[str, str], index: IncludeIndex) -> tuple[list[str], set[str]]:
    """The package files ``root`` includes (transitively), and the include directories that find them."""
    order, seen, dirs = [root], {root}, set()
    k = 0
    while k < len(order) and len(order) < 20000:
        path = order[k]
        k += 1
        data = _read(files[path]) if path in files else None
        if data is None:
            continue
        for m in _INCLUDE.finditer(data):
            name = m.group(2).decode("utf-8", "replace").strip()
            angle = m.group(1) == b"<"
            resolved = index.resolve(path, name, angle)
            if resolved is None:
                continue
            norm = posixpath.normpath(name)
            if resolved.endswith("/" + norm) and (
                angle or resolved != posixpath.normpath(posixpath.join(posixpath.dirname(path), name))
            ):
                dirs.add(resolved[: -len(norm) - 1])
            if resolved not in seen:
                seen.add(resolved)
                order.append(resolved)
    return order, dirs


def _units_for(gate: Gate, files: Mapping[str, str], index: IncludeIndex) -> tuple[list[str], str | None]:
    """Translation units to compile, and a note on how they were chosen."""
    path = gate.location.path
    if gate.kind in (GateKind.PY_BUILD, GateKind.CMAKE):
        from liftgate.judge.verdict import jit_sources

        sources = [s for s in jit_sources(gate, list(files)) if s.endswith((".cu", ".cpp", ".cc"))]
        if len(sources) > MAX_UNITS:
            return sources[:MAX_UNITS], f"compiled the first {MAX_UNITS} of {len(sources)} sources"
        return sources, None
    if path.endswith(".cu"):
        return [path], None
    base = posixpath.basename(path).encode()
    candidates = []
    for p, fs in files.items():
        if p.endswith(".cu"):
            data = _read(fs)
            if data is not None and base in data:
                candidates.append((len(data), p))
    for _size, p in sorted(candidates):
        if path in _closure(p, files, index)[0]:
            return [p], f"{p} is the smallest translation unit of the package that includes {path}"
    return [path], f"no .cu of the package includes {path}: compiled the header on its own"


def _nvcc_arch(arch: Arch) -> tuple[str, str]:
    """(virtual arch for ``--ptx``, real arch for ``ptxas``)."""
    return f"compute_{arch.number}{arch.variant}", f"sm_{arch.number}{arch.variant}"


def _lifted_text(gate: Gate, data: bytes, arch: Arch) -> bytes:
    text = data.decode("utf-8", "surrogateescape")
    lines = text.splitlines(keepends=True)
    span = gate.location.span
    edit = lift_directive(lines[span.start - 1 : span.end], f"liftgate compile-check: +{arch.name}", arch)
    lines[span.start - 1 : span.end] = edit.after
    return "".join(lines).encode("utf-8", "surrogateescape")


def _layout(tmp: str, files: Mapping[str, str]) -> None:
    """The package's C/C++ files under ``tmp``: links to regular files only (nothing else is laid out)."""
    for p, fs in files.items():
        if not p.endswith(C_FAMILY):
            continue
        real = regular_file(fs)
        if real is None:
            continue
        dest = os.path.join(tmp, *p.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            os.symlink(real, dest)
        except OSError:
            shutil.copyfile(real, dest)


def _unsafe_closure(
    closure: Sequence[str], files: Mapping[str, str], tmp: str, include_dirs: Sequence[str]
) -> str | None:
    """Why the unit whose included package files are ``closure`` must not reach nvcc, if it must not."""
    sources = [(path, _read(files[path]) if path in files else None) for path in closure]
    defines: dict[str, str] = {}
    for _path, data in sources:
        for m in _STRING_DEFINE.finditer(data or b""):
            value = m.group(2) if m.group(2) is not None else m.group(3)
            defines.setdefault(m.group(1).decode(), value.decode("utf-8", "replace"))
    for path, data in sources:
        including_dir = os.path.join(tmp, *posixpath.dirname(path).split("/")) if "/" in path else tmp
        for m in _ANY_INCLUDE.finditer(data or b""):
            if m.group(3) is not None:  # #include NAME: what a simple #define NAME "…" says
                name = defines.get(m.group(3).decode())
                if name is None:
                    continue
            else:
                name = m.group(2).decode("utf-8", "replace").strip()
            why = _unsafe_include(name, including_dir, include_dirs)
            if why is not None:
                return f"{path} {why}: not compiled"
    return None


def _diagnostics(stderr: str, tmp: str) -> tuple[str, ...]:
    lines = [ln.replace(tmp + os.sep, "").strip() for ln in stderr.splitlines()]
    errors = [ln for ln in lines if ln and _ERROR_LINE.search(ln)]
    return tuple((errors or [ln for ln in lines if ln])[:MAX_DIAGNOSTICS])


def compile_check(
    gate: Gate,
    arch: Arch,
    files: Mapping[str, str],
    *,
    include_dirs: Sequence[str] = (),
    nvcc: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    expect: Sequence[str] = (),
    unit: str | None = None,
) -> CompileCheck:
    """Compile the gate's translation unit(s) for ``arch`` with the gate lifted.

    ``files`` maps the package's paths to files on disk (as `liftgate.scan` reports them).
    ``expect`` names the catalog features the judge found in the region: a unit that builds
    but whose PTX holds none of them is ``not-emitted`` (the answer does not cover the region).
    ``unit`` is a translation unit of the user's (a small driver that calls the gated code, for
    header-only code no unit of the package instantiates); it is compiled instead, with the
    package's headers.
    """
    if gate.kind not in (GateKind.CUDA_PP, GateKind.PY_BUILD, GateKind.CMAKE):
        return CompileCheck(
            CheckStatus.NOT_CHECKED,
            f"a {gate.kind.value} gate is decided at run time: there is nothing to compile",
        )
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        return CompileCheck(
            CheckStatus.NOT_CHECKED, "nvcc not found: install the CUDA toolkit or set CUDA_HOME"
        )
    ptxas = os.path.join(os.path.dirname(nvcc), "ptxas")
    if not os.access(ptxas, os.X_OK):
        ptxas = shutil.which("ptxas") or ptxas
    if unit is not None:
        if not os.path.isfile(unit):
            return CompileCheck(CheckStatus.NOT_CHECKED, f"no such file: {unit}")
        if regular_file(unit) is None:
            return CompileCheck(CheckStatus.NOT_CHECKED, f"{unit} is not a regular file: not compiled")
        driver = f"liftgate-driver/{os.path.basename(unit)}"
        files = {**files, driver: os.path.abspath(unit)}
    index = IncludeIndex(files)
    how: str | None
    if unit is not None:
        units, how = [driver], f"compiled the given unit {unit} with the package's headers"
    else:
        units, how = _units_for(gate, files, index)
    if not units:
        return CompileCheck(
            CheckStatus.NOT_CHECKED, "the build filter names no C++/CUDA source of the package"
        )
    notes = [how] if how else []
    dest = ""
    with tempfile.TemporaryDirectory(prefix="liftgate-cc-") as tmp:
        _layout(tmp, files)
        admitted = gate.status(arch) is Status.ADMITTED
        if admitted:
            notes.append(f"the gate already admits {arch.name}: compiled as shipped")
        if gate.kind is GateKind.CUDA_PP and not admitted:
            data = _read(files[gate.location.path]) if gate.location.path in files else None
            if data is None:
                return CompileCheck(CheckStatus.NOT_CHECKED, f"cannot read {gate.location.path}")
            try:
                lifted = _lifted_text(gate, data, arch)
            except EditError as exc:
                return CompileCheck(
                    CheckStatus.NOT_CHECKED, f"{gate.location.path}:{gate.location.line}: {exc}"
                )
            dest = os.path.join(tmp, *gate.location.path.split("/"))
            if os.path.lexists(dest):
                os.unlink(dest)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as fh:
                fh.write(lifted)
            notes.append(
                f"{gate.location.path}:{gate.location.line} lifted for {arch.name} in a temporary copy"
            )
        outcome = _build(units, files, index, tmp, nvcc, ptxas, arch, include_dirs, timeout_s)
        if outcome.status is CheckStatus.FAILS and dest:
            # Does the unit build for the target without the lift? If not, the failure is not the gate's.
            os.unlink(dest)
            os.symlink(os.path.abspath(files[gate.location.path]), dest)
            stock = _build(units, files, index, tmp, nvcc, ptxas, arch, include_dirs, timeout_s)
            if stock.status is not CheckStatus.COMPILES:
                return CompileCheck(
                    CheckStatus.NOT_CHECKED,
                    f"{stock.translation_unit} does not build for {arch.name} without the lift either, "
                    "so the failure says nothing about this gate",
                    outcome.command, stock.translation_unit, stock.diagnostics, tuple(notes),
                )  # fmt: skip
            notes.append("the same unit builds for the target without the lift")
        if outcome.status is CheckStatus.COMPILES and expect and not set(expect) & set(outcome.emitted):
            return CompileCheck(
                CheckStatus.NOT_EMITTED,
                f"it builds for {arch.name}, but the PTX holds none of {', '.join(dict.fromkeys(expect))} "
                "that the region uses: this unit does not instantiate that code, so the assembler's "
                "answer does not cover it",
                outcome.command, outcome.translation_unit, (), (*notes, *outcome.notes),
            )  # fmt: skip
        return CompileCheck(
            outcome.status, outcome.reason, outcome.command, outcome.translation_unit,
            outcome.diagnostics, (*notes, *outcome.notes),
        )  # fmt: skip


def _build(
    units: Sequence[str],
    files: Mapping[str, str],
    index: IncludeIndex,
    tmp: str,
    nvcc: str,
    ptxas: str,
    arch: Arch,
    include_dirs: Sequence[str],
    timeout_s: float,
) -> CompileCheck:
    """Compile each unit (laid out under ``tmp``) to PTX for ``arch`` and assemble it."""
    from liftgate.judge.region import feature_matcher

    matcher = feature_matcher()
    virtual, real = _nvcc_arch(arch)
    commands: list[str] = []
    emitted: dict[str, None] = {}
    for unit in units:
        closure, dirs = _closure(unit, files, index)
        unit_fs = os.path.join(tmp, *unit.split("/"))
        incs = [os.path.join(tmp, *d.split("/")) for d in sorted(dirs)]
        incs += [os.path.abspath(d) for d in include_dirs]
        unsafe = _unsafe_closure(closure, files, tmp, incs)
        if unsafe is not None:
            return CompileCheck(CheckStatus.NOT_CHECKED, unsafe, "; ".join(commands), unit)
        ptx = os.path.join(tmp, "unit.ptx")
        cmd = [
            nvcc, "--ptx", f"-arch={virtual}", "-std=c++17", "--expt-relaxed-constexpr",
            "--expt-extended-lambda", "-w", *(f"-I{d}" for d in incs), "-x", "cu", unit_fs, "-o", ptx,
        ]  # fmt: skip
        commands.append(
            shlex.join([os.path.basename(nvcc), "--ptx", f"-arch={virtual}", unit])
            + f" && ptxas -arch={real}"
        )
        shown = "; ".join(commands)
        try:
            done = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, cwd=tmp
            )
        except subprocess.TimeoutExpired:
            return CompileCheck(
                CheckStatus.NOT_CHECKED, f"nvcc took over {timeout_s:.0f} s on {unit}", shown, unit
            )
        except OSError as exc:
            return CompileCheck(CheckStatus.NOT_CHECKED, f"cannot run {nvcc}: {exc}", shown, unit)
        if done.returncode != 0:
            missing = next((m.group(1) or m.group(2) for m in _MISSING.finditer(done.stderr)), None)
            diags = tuple(d.replace("unit.ptx", f"{unit} (PTX)") for d in _diagnostics(done.stderr, tmp))
            if missing:
                return CompileCheck(
                    CheckStatus.NOT_CHECKED,
                    f"{unit} includes {missing.strip()}, which is not part of the package: "
                    "pass its directory with --include-dir",
                    shown, unit, diags,
                )  # fmt: skip
            who = "ptxas" if any("ptxas" in d for d in diags) else "nvcc"
            return CompileCheck(CheckStatus.FAILS, f"{who} refused {unit} for {virtual}", shown, unit, diags)
        try:
            with open(ptx, encoding="utf-8", errors="replace") as fh:
                ptx_text = fh.read()
        except OSError:
            ptx_text = ""
        emitted.update(dict.fromkeys(fid for fid, _text, _at in matcher.asm_hits(ptx_text)))
        try:
            asm = subprocess.run(
                [ptxas, f"-arch={real}", ptx, "-o", os.path.join(tmp, "unit.cubin")],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, cwd=tmp,
            )  # fmt: skip
        except (subprocess.TimeoutExpired, OSError) as exc:
            return CompileCheck(CheckStatus.NOT_CHECKED, f"ptxas could not run on {unit}: {exc}", shown, unit)
        if asm.returncode != 0:
            diags = tuple(d.replace(ptx, f"{unit} (PTX)") for d in _diagnostics(asm.stderr, tmp))
            return CompileCheck(
                CheckStatus.FAILS, f"ptxas refused {unit} for {real}", shown, unit, diags,
                (_emitted_note(emitted),),
            )  # fmt: skip
    return CompileCheck(
        CheckStatus.COMPILES, f"{len(units)} translation unit(s) compiled and assembled for {real}",
        "; ".join(commands), ", ".join(units), (), (_emitted_note(emitted),), tuple(emitted),
    )  # fmt: skip


def _emitted_note(emitted: Mapping[str, None]) -> str:
    if emitted:
        return "the PTX holds " + ", ".join(emitted)
    return (
        "the PTX holds no catalog feature: code the unit does not instantiate (templates, "
        "unused inline functions) is not checked by this answer"
    )
