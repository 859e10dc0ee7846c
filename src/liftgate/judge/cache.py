"""Verdicts cached like detections (issue 21): a warm judged scan re-judges nothing that did not change.

A package's verdicts for one target are stored together under a key made of everything they can
depend on: the code of the detectors and the judge with the hardware-feature catalog
(`code_fingerprint` and the judge's own files), the target, the content digest of every file of
the package (the regions, includes and JIT sources a verdict reads are among them; the digests
come from the scan's stat cache, so a warm scan reads no file for them), and the package's gates
as the scan found them. Only a whole package's judgement is cached (not ``judge_report(only=…)``),
and only for packages the scan resolved (a workspace built from a mapping has no file list).
Rows are plain data, stored with `marshal` like every scan cache (never pickle): a cache file that
does not decode is a miss.
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from liftgate.arch.core import Arch, universe
from liftgate.model import FeatureUse, Gate, Hazard, HazardKind, Verdict, VerdictKind
from liftgate.scan.cache import ScanCache, code_fingerprint, content_digests, gate_to_row
from liftgate.sources.workspace import Workspace

_KINDS = {k.value: k for k in VerdictKind}
_HAZARDS = {h.value: h for h in HazardKind}


@cache
def judge_fingerprint() -> str:
    """The detectors', the catalog's and the judge's code: a change to any re-judges everything."""
    h = hashlib.sha256(code_fingerprint().encode())
    for path in sorted((Path(__file__).parent).glob("*.py")):
        h.update(path.name.encode() + b"\x1f" + path.read_bytes())
    return h.hexdigest()


@cache
def _archs() -> dict[str, Arch]:
    return {a.name: a for a in universe()}


class VerdictCache:
    """Per (package, target) verdict lists under the scan cache's root."""

    def __init__(self, root: str, workspace: Workspace) -> None:
        self.cache = ScanCache(Path(root))
        self.workspace = workspace
        self._digests: dict[tuple[str, str | None], str | None] = {}

    def _files_digest(self, key: tuple[str, str | None]) -> str | None:
        if key not in self._digests:
            package = next((p for p in self.workspace.packages if (p.name, p.version) == key), None)
            if package is None:
                self._digests[key] = None
            else:
                contents = content_digests(package.files, self.cache)
                h = hashlib.sha256()
                for f in sorted(package.files, key=lambda f: f.path):
                    h.update(f"{f.path}\x1f{contents.get(f.fspath, '')}\x1e".encode())
                self._digests[key] = h.hexdigest()
        return self._digests[key]

    def key(self, package: tuple[str, str | None], gates: Sequence[Gate], target: Arch) -> str | None:
        files = self._files_digest(package)
        if files is None:
            return None
        h = hashlib.sha256(
            f"{judge_fingerprint()}\x1f{package[0]}\x1f{package[1]}\x1f{target.name}\x1f{files}".encode()
        )
        rows: Any = tuple(gate_to_row(g) for g in gates)
        h.update(marshal.dumps(rows, 2))  # version 2: no back-references, so equal rows give equal bytes
        return h.hexdigest()[:40]

    def load(self, key: str) -> list[Verdict] | None:
        rows = self.cache.load_verdicts(key)
        if rows is None:
            return None
        try:
            return [verdict_from_row(row) for row in rows]
        except (KeyError, TypeError, ValueError):
            return None

    def store(self, key: str, verdicts: Sequence[Verdict]) -> None:
        self.cache.store_verdicts(key, [verdict_to_row(v) for v in verdicts])


def _use_row(u: FeatureUse) -> tuple[object, ...]:
    return (u.feature, u.path, u.line, u.text, u.via)


def verdict_to_row(v: Verdict) -> tuple[object, ...]:
    return (
        v.gate_id, v.target.name, v.kind.value, v.reasons, tuple(_use_row(u) for u in v.uses),
        tuple(_use_row(u) for u in v.missing), v.unresolved,
        tuple((h.kind.value, h.text, h.gates) for h in v.hazards), v.scope,
    )  # fmt: skip


def verdict_from_row(row: tuple[object, ...]) -> Verdict:
    gate_id, target, kind, reasons, uses, missing, unresolved, hazards, scope = row
    return Verdict(
        str(gate_id),
        _archs()[str(target)],
        _KINDS[str(kind)],
        tuple(str(r) for r in reasons),  # type: ignore[attr-defined]
        tuple(FeatureUse(*u) for u in uses),  # type: ignore[attr-defined]
        tuple(FeatureUse(*u) for u in missing),  # type: ignore[attr-defined]
        tuple(str(u) for u in unresolved),  # type: ignore[attr-defined]
        tuple(Hazard(_HAZARDS[k], t, tuple(g)) for k, t, g in hazards),  # type: ignore[attr-defined]
        str(scope),
    )
