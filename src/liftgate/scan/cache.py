"""The scan cache: per-file stat entries, quick-index details and whole detector results, as plain data.

Frozen slotted dataclasses unpickle slowly (dataclasses' ``__setstate__``), so the cache holds
plain tuples written with `marshal`; this keeps a warm scan of a 10k-file tree well under a
second. Every entry is keyed by the code's fingerprint (the detectors, the model, the arch
data), so an upgrade or a local edit never serves stale gates. Any damage means a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from liftgate._version import __version__
from liftgate.arch.core import ArchSet
from liftgate.collector import collector_off
from liftgate.model import (
    BinaryCoverage,
    BuildFlag,
    BuildTarget,
    Choice,
    CompiledUnit,
    Confidence,
    ElseKind,
    Evidence,
    Gate,
    GateKind,
    Location,
    MacroOrigin,
    Skip,
    Span,
    Switch,
    SwitchKind,
    TorchOp,
    Truth,
)
from liftgate.sources.interface import SourceFile
from liftgate.sources.workspace import stat_hit

CACHE_FORMAT = "scan-v8"
# path -> (size, mtime_ns, tag, stamp_ns): the tag is the content digest or ``skip:<reason>``,
# stamp_ns when the file was read (a clock reading taken before it).
StatEntry = tuple[int, int, str, int]


def fingerprinted_files() -> list[Path]:
    """The files whose bytes decide what a scan finds: the detectors, the runner, the model, the arch
    data, and how sources are read (`tests/test_scan_runner.py` checks it covers their imports)."""
    root = Path(__file__).parent.parent
    return sorted(
        [
            root / "model.py",
            root / "collector.py",  # imported by the detectors, though it decides no result
            *root.glob("scan/*.py"),
            *root.glob("detect/*.py"),
            *root.glob("arch/*.py"),
            *root.glob("data/*.json"),
            root / "sources" / "interface.py",  # the size limits
            root / "sources" / "workspace.py",  # how files are read, and the stat cache's freshness rule
        ]
    )


@cache
def code_fingerprint() -> str:
    """Results depend on the detectors' code and the arch data, not only on the version number:
    hash them, so an upgrade or a local edit never serves stale gates from the cache."""
    h = hashlib.sha256(f"{__version__}\x1f{CACHE_FORMAT}".encode())
    for path in fingerprinted_files():
        with contextlib.suppress(OSError):
            h.update(path.name.encode() + b"\x1f" + path.read_bytes())
    return h.hexdigest()


# A stats file's path -> its entries, as this scan last loaded or stored them. An entry is used only
# where `stat_hit` finds the file unchanged, so an entry older than the file can cost a re-read,
# never a wrong digest.
_STATS_MEMO: dict[Path, dict[str, StatEntry]] = {}


def forget_stats() -> None:
    """Drop the stats read so far: each scan starts afresh (`liftgate.scan.scan`), so a long-lived
    process holds one scan's stats at most (the judge of that scan reads them after it)."""
    _STATS_MEMO.clear()


class ScanCache:
    """Marshalled (plain-data) stat, index and result caches under ``<cache_dir>/scan-v4``.

    Built with ``root=None`` it stores nothing and every load misses (``--no-cache``).
    """

    def __init__(self, root: Path | None) -> None:
        self.root = root / CACHE_FORMAT if root else None

    @property
    def fingerprint(self) -> str:
        return code_fingerprint()

    def _load(self, name: str) -> object | None:
        if self.root is None:
            return None
        try:
            # Read whole: marshal.load of a file calls its readinto once per object (FlashInfer's
            # 2 MB C-family result: 0.35 s that way, 0.02 s from the bytes).
            with open(self.root / name, "rb") as fh:
                data = fh.read()
            # Rows of tuples and frozensets by the hundred thousand, none of them in a cycle: the
            # cyclic collector would rescan them many times over while they load (twice the time).
            with collector_off():
                value: object = marshal.loads(data)
            return value
        except Exception:
            return None

    def _store(self, name: str, value: object) -> None:
        if self.root is None:
            return
        try:
            target = self.root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                marshal.dump(value, fh)  # type: ignore[arg-type]
            os.replace(tmp, target)
        except (OSError, ValueError):
            pass  # a cache that cannot be written is only a slower next run

    def load_stats(self, key: str) -> dict[str, StatEntry]:
        """path -> `StatEntry`; use an entry only where `liftgate.sources.workspace.stat_hit` says it is fresh.

        Read from disk once per scan (`_STATS_MEMO`, emptied by `forget_stats` when a scan starts):
        the runner, the run-ahead check and the scan's judge each ask for the same packages' stats."""
        if self.root is None:
            return {}
        name = f"stats/{key}-{code_fingerprint()[:16]}.bin"
        found = _STATS_MEMO.get(self.root / name)
        if found is None:
            value = self._load(name)
            found = value if isinstance(value, dict) else {}
            _STATS_MEMO[self.root / name] = found
        return found

    def store_stats(self, key: str, value: dict[str, StatEntry]) -> None:
        if self.root is None:
            return
        name = f"stats/{key}-{code_fingerprint()[:16]}.bin"
        _STATS_MEMO[self.root / name] = value
        self._store(name, value)

    def load_details(self, key: str) -> dict[str, tuple[object, ...]]:
        """digest -> a file's quick index, as a plain row (`liftgate.detect.cfamily`)."""
        value = self._load(f"details/{key}-{code_fingerprint()[:16]}.bin")
        return value if isinstance(value, dict) else {}

    def store_details(self, key: str, value: dict[str, tuple[object, ...]]) -> None:
        self._store(f"details/{key}-{code_fingerprint()[:16]}.bin", value)

    def load_verdicts(self, key: str) -> list[tuple[object, ...]] | None:
        """A package's verdicts for one target, as plain rows (`liftgate.judge.cache`)."""
        value = self._load(f"verdicts/{key}.bin")
        return value if isinstance(value, list) else None

    def store_verdicts(self, key: str, rows: list[tuple[object, ...]]) -> None:
        self._store(f"verdicts/{key}.bin", rows)

    def has_result(self, key: str) -> bool:
        """Whether a result is stored under ``key`` (not whether it loads: `load_result` says that)."""
        return self.root is not None and (self.root / f"result/{key}.bin").is_file()

    def load_result(self, key: str) -> tuple[list[Gate], list[Skip], list[TorchOp]] | None:
        value = self._load(f"result/{key}.bin")
        if not (isinstance(value, tuple) and len(value) == 3):
            return None
        # Thousands of small objects at once: the cyclic GC would only slow this down.
        with collector_off():
            try:
                gate_rows, skip_rows, op_rows = value
                return (
                    [gate_from_row(row) for row in gate_rows],
                    [Skip(*row) for row in skip_rows],
                    [op_from_row(row) for row in op_rows],
                )
            except (TypeError, ValueError, KeyError):
                return None

    def store_result(
        self, key: str, gates: list[Gate], skips: list[Skip], ops: Sequence[TorchOp] = ()
    ) -> None:
        self._store(
            f"result/{key}.bin",
            (
                shared([gate_to_row(g) for g in gates]),
                [(s.path, s.reason, s.package) for s in skips],
                [op_to_row(op) for op in ops],
            ),
        )


def ops_digest(ops: Sequence[TorchOp]) -> str:
    """A digest of published facts, for the cache key of a detector that reads them."""
    if not ops:
        return ""
    return hashlib.sha256(repr([op_to_row(op) for op in ops]).encode()).hexdigest()[:32]


def op_to_row(op: TorchOp) -> tuple[object, ...]:
    return (
        op.package, op.version, op.name, op.function, op.path, op.line, op.parameter, op.position,
        op.returns_true.mask, op.returns_unknown.mask, op.registered, tuple(gate_to_row(g) for g in op.gates),
        op.namespace,
    )  # fmt: skip


def op_from_row(row: tuple[object, ...]) -> TorchOp:
    (package, version, name, function, path, line, parameter, position, true, unknown, registered,
     gates, namespace) = row  # fmt: skip
    return TorchOp(
        package, version, name, function, path, line, parameter, position,  # type: ignore[arg-type]
        ArchSet.from_mask(true), ArchSet.from_mask(unknown),  # type: ignore[arg-type]
        tuple(registered),  # type: ignore[arg-type]
        tuple(gate_from_row(g) for g in gates),  # type: ignore[attr-defined]
        namespace,  # type: ignore[arg-type]
    )  # fmt: skip


def shared(value: object, seen: dict[object, object] | None = None) -> object:
    """Equal strings and tuples made one object, so marshal writes each once (back-references):
    conditions, paths and evidence repeat across thousands of gates."""
    if seen is None:
        seen = {}
    if isinstance(value, list):
        return [shared(v, seen) for v in value]
    if isinstance(value, tuple):
        value = tuple(shared(v, seen) for v in value)
    if isinstance(value, (str, tuple)):
        return seen.setdefault(value, value)
    return value


def content_digests(files: Iterable[SourceFile], scan_cache: ScanCache) -> dict[str, str]:
    """fspath -> a digest of the file's bytes, read only for files whose stat the cache has not seen."""
    groups: dict[tuple[str, str | None, str], list[SourceFile]] = {}
    for f in files:
        root = f.fspath[: len(f.fspath) - len(f.path)] if f.fspath.endswith(f.path) else ""
        groups.setdefault((f.package, f.version, root), []).append(f)
    out: dict[str, str] = {}
    for (package, version, root), members in groups.items():
        key = "py-" + hashlib.sha256(f"{package}\x1f{version}\x1f{root}".encode()).hexdigest()[:24]
        stats = scan_cache.load_stats(key) if root else {}
        changed = False
        stamp = time.time_ns()  # before any file is read
        for f in members:
            hit = stat_hit(stats.get(f.path), f.size, f.mtime_ns)
            if hit is not None:
                out[f.fspath] = hit
                continue
            try:
                with open(f.fspath, "rb") as fh:
                    value = hashlib.blake2b(fh.read(), digest_size=16).hexdigest()
            except OSError as exc:
                value = f"unreadable:{exc.errno}"
            out[f.fspath] = value
            stats[f.path] = (f.size, f.mtime_ns, value, stamp)
            changed = True
        if changed and root:
            scan_cache.store_stats(key, stats)
    return out


# -- the gate codec ---------------------------------------------------------------------------

_GATE_KINDS = {k.value: k for k in GateKind}
_TRUTHS = {t.value: t for t in Truth}
_ELSE_KINDS = {e.value: e for e in ElseKind}
_CONFIDENCES = {c.value: c for c in Confidence}


def _span_row(span: Span | None) -> tuple[int, int] | None:
    return None if span is None else (span.start, span.end)


def gate_to_row(g: Gate) -> tuple[object, ...]:
    loc = g.location
    coverage = g.coverage
    return (
        g.id,
        g.kind.value,
        (loc.package, loc.version, loc.path, loc.span.start, loc.span.end),
        g.condition,
        g.admitted.mask,
        g.unknown.mask,
        None if g.host is None else g.host.value,
        _span_row(g.then_span),
        _span_row(g.else_span),
        g.else_kind.value,
        g.confidence.value,
        tuple([(e.text, e.path, e.line, e.outcome) for e in g.evidence]) if g.evidence else (),
        g.depends_on,
        g.directive,
        g.enclosing,
        tuple([(b.what, b.name, b.sources, b.computed, b.path, b.line) for b in g.builds])
        if g.builds
        else (),
        tuple([(m.macro, m.path, m.line, m.condition, m.build_gate) for m in g.macros]) if g.macros else (),
        tuple([(p.macro, p.value, p.path, p.line) for p in g.passes]) if g.passes else (),
        g.build_macros,
        None
        if coverage is None
        else (
            coverage.native.mask,
            coverage.ptx_jit.mask,
            coverage.images,
            coverage.compressed,
            coverage.partial.mask,
            tuple((u.images, u.native.mask, u.ptx_jit.mask, u.kernels, u.unread) for u in coverage.units),
        ),
        tuple([(w.name, w.kind.value, w.setting, w.admitted.mask, w.unknown.mask) for w in g.switches])
        if g.switches
        else (),
        g.decided_at,
        None if g.reach is None else g.reach.mask,
        tuple([(c.implementation, c.path, c.line, c.admitted.mask, c.unknown.mask) for c in g.choices])
        if g.choices
        else (),
        g.dispatch,
    )


def gate_from_row(row: tuple[Any, ...]) -> Gate:
    # Hot on a warm scan (every cached gate passes here): no runtime `cast`s (each built its generic
    # alias anew) and no generator for the empty tuples most gates have.
    (gid, kind, loc, condition, admitted, unknown, host, then_span, else_span, else_kind, confidence, evidence,
     depends_on, directive, enclosing, builds, macros, passes, build_macros, cov, switches,
     decided_at, reach, choices, dispatch) = row  # fmt: skip
    package, version, path, start, end = loc
    return Gate(
        gid,
        _GATE_KINDS[kind],
        Location(package, version, path, Span(start, end)),
        condition,
        ArchSet.from_mask(admitted),
        ArchSet.from_mask(unknown),
        None if host is None else _TRUTHS[host],
        None if then_span is None else Span(*then_span),
        None if else_span is None else Span(*else_span),
        _ELSE_KINDS[else_kind],
        _CONFIDENCES[confidence],
        tuple([Evidence(*e) for e in evidence]) if evidence else (),
        depends_on,
        directive,
        enclosing,
        tuple([BuildTarget(*b) for b in builds]) if builds else (),
        tuple([MacroOrigin(*m) for m in macros]) if macros else (),
        tuple([BuildFlag(*p) for p in passes]) if passes else (),
        build_macros,
        None
        if cov is None
        else BinaryCoverage(
            ArchSet.from_mask(cov[0]),
            ArchSet.from_mask(cov[1]),
            cov[2],
            cov[3],
            ArchSet.from_mask(cov[4]),
            tuple(
                CompiledUnit(images, ArchSet.from_mask(native), ArchSet.from_mask(jit), kernels, unread)
                for images, native, jit, kernels, unread in cov[5]
            ),
        ),
        tuple(
            [
                Switch(name, SwitchKind(kind), setting, ArchSet.from_mask(adm), ArchSet.from_mask(unk))
                for name, kind, setting, adm, unk in switches
            ]
        )
        if switches
        else (),
        decided_at,
        None if reach is None else ArchSet.from_mask(reach),
        tuple(
            [
                Choice(impl, path_, line, ArchSet.from_mask(adm), ArchSet.from_mask(unk))
                for impl, path_, line, adm, unk in choices
            ]
        )
        if choices
        else (),
        dispatch,
    )
