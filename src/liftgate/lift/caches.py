"""JIT caches: where compiled artefacts built from a package's sources live, and moving them aside.

The locations are data (`liftgate/data/jit_caches.json`: each tool's default directory, the
environment variables that move it, what one entry is, which files inside an entry name the
sources it was built from, and where in the tool's code that is decided). After a lift changes
a package's CUDA/C++ sources or its build filters, the entries built from that package are
*moved* into the lift's journal directory (never deleted), so a stale kernel built from the
unpatched sources cannot be loaded; revert moves the lifted-state entries aside and puts the
stock ones back. An entry is affected when its build files mention the package's installed
directory; an entry with no build files is affected when its cache compiles that package.
Prebuilt kernel packages that shadow the JIT path (``flashinfer-jit-cache``) are reported.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from liftgate.detect.cuda import CUDA_EXTENSIONS
from liftgate.lift.plan import PatchPlan, resolve_inside

_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
_C_SUFFIXES = tuple(sorted(CUDA_EXTENSIONS))


@dataclass(frozen=True, slots=True)
class CacheSpec:
    id: str
    tool: str
    packages: tuple[str, ...]
    locations: tuple[tuple[str | None, str], ...]
    entry_glob: str
    build_files: tuple[str, ...]
    keyed_by_source_hash: bool
    source: str
    notes: str


@dataclass(frozen=True, slots=True)
class Prebuilt:
    package: str
    shadows: str
    what: str
    source: str


@cache
def _data() -> dict[str, Any]:
    text = resources.files("liftgate.data").joinpath("jit_caches.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("schema_version") != 1:
        raise ValueError("liftgate/data/jit_caches.json: schema_version 1 expected")
    return doc


def load_caches() -> list[CacheSpec]:
    out = []
    for c in _data()["caches"]:
        out.append(
            CacheSpec(
                c["id"],
                c["tool"],
                tuple(c["packages"]),
                tuple((loc.get("env"), loc["path"]) for loc in c["locations"]),
                c["entry_glob"],
                tuple(c.get("build_files", ())),
                bool(c.get("keyed_by_source_hash")),
                c["source"],
                c.get("notes", ""),
            )
        )
    return out


def load_prebuilt() -> list[Prebuilt]:
    return [Prebuilt(p["package"], p["shadows"], p["what"], p["source"]) for p in _data().get("prebuilt", [])]


def expand(path: str, environ: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        value = environ.get(m.group(1))
        if value:
            return value
        if m.group(2) is not None:
            return m.group(2)
        if m.group(1) == "USER":
            import getpass

            try:
                return getpass.getuser()
            except (KeyError, OSError):
                return "unknown"
        return ""

    expanded = _VAR.sub(sub, path)
    if expanded.startswith("~"):
        home = environ.get("HOME") or os.path.expanduser("~")
        expanded = home + expanded[1:]
    return expanded


def cache_root(spec: CacheSpec, environ: Mapping[str, str]) -> str:
    """The directory the tool uses now: the first location whose variable is set, else the default."""
    for env, path in spec.locations:
        if env is None or environ.get(env):
            return expand(path, environ)
    return expand(spec.locations[-1][1], environ)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _mentions(entry: str, names: tuple[str, ...], needles: Iterable[str]) -> bool:
    wanted = [n.encode() for n in needles]
    for name in names:
        for found in glob.glob(os.path.join(glob.escape(entry), "**", name), recursive=True):
            try:
                with open(found, "rb") as fh:
                    data = fh.read(16 << 20)
            except OSError:
                continue
            if any(w in data for w in wanted):
                return True
    return False


@dataclass
class CacheMover:
    """Finds and moves the JIT-cache entries a lift affects (``environ`` decides the locations)."""

    environ: Mapping[str, str]
    specs: list[CacheSpec] | None = None

    def __post_init__(self) -> None:
        if self.specs is None:
            self.specs = load_caches()

    def affected(
        self, files: Iterable[tuple[str, str, str]], modules: Mapping[str, Iterable[str]] | None = None
    ) -> list[tuple[CacheSpec, str]]:
        """Entries built from what a lift changed.

        ``files`` are the patched (package, path, fspath) triples: an entry whose build files
        name a patched C/C++/CUDA file is affected. ``modules`` names, per package, the JIT
        modules whose build filter a lift edited (their entries are affected by name). A cache
        whose entries record no build files is affected whole for a package with patched sources.
        """
        sources = [f for f in files if f[1].endswith(_C_SUFFIXES)]
        by_module = {_norm(p): set(names) for p, names in (modules or {}).items()}
        patched = {_norm(f[0]) for f in sources} | set(by_module)
        out: list[tuple[CacheSpec, str]] = []
        assert self.specs is not None
        for spec in self.specs:
            relevant = {_norm(p) for p in spec.packages} & patched
            if not relevant:
                continue
            root = cache_root(spec, self.environ)
            if not os.path.isdir(root):
                continue
            needles = [fs for pkg, _path, fs in sources if _norm(pkg) in relevant]
            needles += [path for pkg, path, _fs in sources if _norm(pkg) in relevant]
            names = set().union(*(by_module.get(p, set()) for p in relevant))
            for entry in sorted(glob.glob(os.path.join(glob.escape(root), spec.entry_glob))):
                if os.path.basename(entry) in names:
                    out.append((spec, entry))
                elif needles and spec.build_files and os.path.isdir(entry):
                    if _mentions(entry, spec.build_files, needles):
                        out.append((spec, entry))
                elif needles and not spec.build_files and not spec.keyed_by_source_hash:
                    out.append((spec, entry))
        return out

    def roots(self, spec: CacheSpec) -> list[str]:
        """Every directory ``spec``'s tool may use under ``environ``: each location whose variable is set,
        and the default."""
        out = []
        for env, path in spec.locations:
            if env is None or self.environ.get(env):
                root = expand(path, self.environ)
                if os.path.isabs(root) and root not in out:
                    out.append(root)
        return out

    def entry_problem(self, cache_id: str, original: str) -> str | None:
        """Why ``original`` is not an entry of the JIT cache ``cache_id`` (None when it is one).

        A journal records where it moved entries from; before one is moved back, the place must be
        an entry (``entry_glob`` deep) inside a directory the tool uses, links resolved.
        """
        assert self.specs is not None
        spec = next((s for s in self.specs if s.id == cache_id), None)
        if spec is None:
            return f"no JIT cache {cache_id[:40]!r} is known to liftgate"
        if not os.path.isabs(original) or os.path.normpath(original) != original or "\x00" in original:
            return "not an absolute, normalised path"
        roots = self.roots(spec)
        pattern = spec.entry_glob.split("/")
        for root in roots:
            real = resolve_inside(original, root)
            if real is None:
                continue
            rel = os.path.relpath(real, os.path.realpath(root)).split(os.sep)
            if len(rel) == len(pattern) and all(
                fnmatch.fnmatchcase(p, g) for p, g in zip(rel, pattern, strict=True)
            ):
                return None
        where = ", ".join(roots) or "no location: its variables are not set"
        return f"not an entry of the {spec.tool} cache ({where})"

    def move_aside(self, plan: PatchPlan, into: str) -> list[dict[str, str]]:
        triples = [(c.package, c.path, c.fspath) for c in plan.files]
        return self._move(self.affected(triples, plan.jit_modules()), into)

    def move_aside_for_revert(self, doc: Mapping[str, Any], into: str) -> list[dict[str, str]]:
        triples = [(f["package"], f["path"], f["fspath"]) for f in doc.get("files", [])]
        modules: dict[str, set[str]] = {}
        for g in doc.get("gates", []):
            modules.setdefault(g["package"], set()).update(g.get("jit_modules", ()))
        return self._move(self.affected(triples, modules), into, relative_to=os.path.dirname(into))

    def _move(
        self, entries: list[tuple[CacheSpec, str]], into: str, relative_to: str | None = None
    ) -> list[dict[str, str]]:
        moved = []
        base = relative_to or os.path.dirname(into)
        start = len(os.listdir(into)) if os.path.isdir(into) else 0
        for n, (spec, entry) in enumerate(entries, start):
            dest = os.path.join(into, str(n), os.path.basename(entry))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.move(entry, dest)
            moved.append({"cache": spec.id, "original": entry, "moved_to": os.path.relpath(dest, base)})
        return moved


def shadowing_packages(installed: Iterable[tuple[str, str | None]], patched: Iterable[str]) -> list[str]:
    """Notes on installed prebuilt-kernel packages that shadow the JIT of a patched package."""
    have = {_norm(n): v for n, v in installed}
    patched_norm = {_norm(p) for p in patched}
    notes = []
    for pre in load_prebuilt():
        if _norm(pre.package) in have and _norm(pre.shadows) in patched_norm:
            version = have[_norm(pre.package)]
            first = pre.what.split(". ")[0].rstrip(".")
            note = (
                f"{pre.package} {version or ''} is installed and shadows {pre.shadows}'s JIT ({first}): "
                "kernels it prebuilt ignore the lifted sources; uninstall it for the lift to take effect"
            )
            notes.append(note.replace("  ", " "))
    return notes
