"""The hardware-feature catalog: what gated GPU code uses, and which targets can assemble it.

The ``judge`` stage asks of an excluded region "does the target have what this code needs?".
This module answers the second half from ``data/features.json``: each `Feature` (``wgmma``,
``tcgen05-mma``, ``griddepcontrol``, ...) carries the evidence that code uses it and the exact
set of compile targets whose ``ptxas`` accepts it. The arch sets are not transcribed from the PTX
ISA: ``tools/probe_matrix.py`` assembles every feature's probe (a minimal PTX body placed into the
kernel template of `probe_ptx`) for every known target with the real ``ptxas`` and records which
ones assemble; ``tests/test_catalog_ptxas.py`` repeats that with the ``ptxas`` on PATH. Where the
documentation and ``ptxas`` disagree, ``ptxas`` wins and the feature's note says so. Targets the
``ptxas`` cannot compile for at all (CUDA 13 dropped ``sm_70``/``sm_72``) keep what the
documentation says for them.

Evidence and how it matches (`match_evidence` is the reference implementation):

* ``ptx``: PTX instruction prefixes as written inside string literals (inline ``asm``), matched
  at a mnemonic boundary: not preceded by a word character or ``.``, not followed by a word
  character. ``"tcgen05.mma"`` matches ``tcgen05.mma.cta_group::1.kind::f16`` but not
  ``xtcgen05.mma`` or ``tcgen05.mmax``; ``"mbarrier.arrive"`` does not match inside
  ``cp.async.mbarrier.arrive``.
* ``ptx_patterns``: regular expressions searched in the same string-literal text, for
  instructions whose telling qualifier can sit anywhere (``.multicast::cluster``,
  ``.cta_group::2``, operand types such as ``.e2m1``).
* ``identifiers``: single C++/CUDA/Python identifiers, matched as whole identifiers in code outside
  string literals; a name ending in ``_`` or ``x`` (``SM100_MMA_``, ``SM90_64x``) matches every
  identifier it starts. Qualified names are never identifiers here: ``cute::UMMA::Major`` is
  found through ``UMMA``.
* ``patterns``: regular expressions searched in code with string literals blanked, for dotted
  Python names (``cute.nvgpu.tcgen05``) and template shapes.

Intrinsics with a software fallback below the feature's architecture (``__nv_cvt_float2_to_fp4x2``,
``__pipeline_memcpy_async``, ``cute::elect_one_sync``) are deliberately not evidence: code that
calls them still runs where the instruction is missing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from liftgate.arch.core import ArchSet, universe

__all__ = [
    "SCHEMA_VERSION",
    "CatalogInfo",
    "Feature",
    "catalog_info",
    "feature",
    "identifier_matches",
    "load_catalog",
    "match_evidence",
    "parse_catalog",
    "probe_module",
    "probe_ptx",
    "ptx_regex",
]

SCHEMA_VERSION = 1
DATA_FILE = "features.json"

# Entry-scoped directives (performance tuning, cluster shape) that a probe may need. They belong
# between the kernel's parameter list and its body, so `probe_ptx` lifts them out of the probe.
ENTRY_DIRECTIVES = (
    ".maxnreg",
    ".maxntid",
    ".reqntid",
    ".minnctapersm",
    ".maxnctapersm",
    ".reqnctapercluster",
    ".explicitcluster",
    ".maxclusterrank",
    ".blocksareclusters",
)

_FEATURE_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_PTX_PREFIX = re.compile(r"[a-z][\w.:]*[\w]")
_TARGET = re.compile(r"sm_\d+[af]?")
_PTX_VERSION = re.compile(r"\d+\.\d+")
_EVIDENCE_KEYS = ("ptx", "ptx_patterns", "identifiers", "patterns")
_REQUIRED_KEYS = ("id", "description", "ptx_section", "archs", "probe", "evidence", "ordering", "note")


@dataclass(frozen=True, slots=True)
class Feature:
    """One hardware capability: how source code shows it is used, and the targets that have it.

    ``archs`` holds exact compile targets (``sm_100a`` and ``sm_100f`` are different members).
    ``ordering`` marks features that order or synchronise (a barrier, a fence, a grid dependency
    wait): compiling them out changes what other threads or grids may observe, so an exclusion
    that drops one silently is a hazard even when the rest of the region is liftable.
    """

    id: str
    description: str
    ptx_section: str
    archs: ArchSet
    ptx: tuple[str, ...]
    identifiers: tuple[str, ...]
    patterns: tuple[str, ...]
    ordering: bool
    note: str
    probe: str
    ptx_patterns: tuple[str, ...] = ()

    def supports(self, target_name: str) -> bool:
        """Whether the exact compile target (``sm_120a``) has this feature."""
        return any(arch.name == target_name for arch in self.archs)


@dataclass(frozen=True, slots=True)
class CatalogInfo:
    """Facts about the catalog as a whole: the toolchain its arch sets were proven with."""

    ptxas: str
    ptx_version: str
    notes: tuple[str, ...]
    sources: Mapping[str, str]


def _fail(where: str, message: str) -> ValueError:
    return ValueError(f"{DATA_FILE}: {where}: {message}")


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise _fail(where, "expected a list of non-empty strings")
    return tuple(value)


def _check_regexes(values: Sequence[str], where: str) -> None:
    for text in values:
        try:
            re.compile(text)
        except re.error as exc:
            raise _fail(where, f"pattern {text!r} does not compile: {exc}") from None


def _parse_feature(entry: Any, known: Mapping[str, Any]) -> Feature:
    if not isinstance(entry, dict):
        raise _fail("features", f"expected an object, got {type(entry).__name__}")
    fid = entry.get("id", "?")
    missing = [key for key in _REQUIRED_KEYS if key not in entry]
    if missing:
        raise _fail(f"feature {fid!r}", f"missing {', '.join(missing)}")
    if not isinstance(fid, str) or not _FEATURE_ID.fullmatch(fid):
        raise _fail(f"feature {fid!r}", "an id is lower-case words joined by '-'")
    where = f"feature {fid!r}"
    for key in ("description", "ptx_section", "probe"):
        if not isinstance(entry[key], str) or not entry[key].strip():
            raise _fail(where, f"{key} must be a non-empty string")
    if not isinstance(entry["note"], str):
        raise _fail(where, "note must be a string")
    if not isinstance(entry["ordering"], bool):
        raise _fail(where, "ordering must be true or false")
    names = _strings(entry["archs"], f"{where} archs") if entry["archs"] else ()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise _fail(where, f"unknown target(s) {', '.join(unknown)}")
    if len(set(names)) != len(names):
        raise _fail(where, "archs lists a target twice")
    evidence = entry["evidence"]
    if not isinstance(evidence, dict) or set(evidence) - set(_EVIDENCE_KEYS):
        raise _fail(where, f"evidence must be an object with keys from {', '.join(_EVIDENCE_KEYS)}")
    parsed = {
        key: _strings(evidence[key], f"{where} evidence.{key}") if evidence.get(key) else ()
        for key in _EVIDENCE_KEYS
    }
    if not any(parsed.values()):
        raise _fail(where, "evidence is empty: a feature nothing can detect is never judged")
    for prefix in parsed["ptx"]:
        if not _PTX_PREFIX.fullmatch(prefix):
            raise _fail(where, f"ptx evidence {prefix!r} is not an instruction prefix")
    for name in parsed["identifiers"]:
        if not _IDENTIFIER.fullmatch(name):
            raise _fail(
                where, f"identifier {name!r} is not a single identifier (use a pattern for qualified names)"
            )
    _check_regexes(parsed["ptx_patterns"], f"{where} evidence.ptx_patterns")
    _check_regexes(parsed["patterns"], f"{where} evidence.patterns")
    return Feature(
        id=fid,
        description=entry["description"].strip(),
        ptx_section=entry["ptx_section"].strip(),
        archs=ArchSet(known[name] for name in names),
        ptx=parsed["ptx"],
        identifiers=parsed["identifiers"],
        patterns=parsed["patterns"],
        ordering=entry["ordering"],
        note=entry["note"].strip(),
        probe=entry["probe"],
        ptx_patterns=parsed["ptx_patterns"],
    )


def parse_catalog(raw: Any) -> tuple[CatalogInfo, tuple[Feature, ...]]:
    """Validate a decoded ``features.json`` document.

    Raises ValueError naming the entry when the file contradicts itself (an unknown target, a
    duplicate id, empty evidence, a pattern that does not compile), so a bad edit fails at load,
    not in the middle of a judgement.
    """
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA_VERSION:
        raise _fail("schema", f"expected schema {SCHEMA_VERSION}")
    for key in ("ptxas", "ptx_version"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(key, "must be a non-empty string")
    if not _PTX_VERSION.fullmatch(raw["ptx_version"]):
        raise _fail("ptx_version", f"{raw['ptx_version']!r} is not MAJOR.MINOR")
    if not isinstance(raw.get("features"), list):
        raise _fail("features", "must be a list")
    known = {arch.name: arch for arch in universe()}
    features = tuple(_parse_feature(entry, known) for entry in raw["features"])
    seen: set[str] = set()
    for item in features:
        if item.id in seen:
            raise _fail(f"feature {item.id!r}", "listed twice")
        seen.add(item.id)
    info = CatalogInfo(
        ptxas=raw["ptxas"],
        ptx_version=raw["ptx_version"],
        notes=_strings(raw["notes"], "notes") if raw.get("notes") else (),
        sources=dict(raw.get("sources", {})),
    )
    return info, features


@cache
def _load() -> tuple[CatalogInfo, tuple[Feature, ...]]:
    text = resources.files("liftgate.data").joinpath(DATA_FILE).read_text("utf-8")
    return parse_catalog(json.loads(text))


def load_catalog() -> tuple[Feature, ...]:
    """Every feature of the packaged catalog, in file order (loaded and validated once)."""
    return _load()[1]


def catalog_info() -> CatalogInfo:
    """The ``ptxas`` release and PTX ISA version the packaged catalog was proven with."""
    return _load()[0]


@cache
def _by_id() -> dict[str, Feature]:
    return {item.id: item for item in load_catalog()}


def feature(feature_id: str) -> Feature:
    """The feature with this id; KeyError names the known ids when there is none."""
    try:
        return _by_id()[feature_id]
    except KeyError:
        known = ", ".join(sorted(_by_id()))
        raise KeyError(f"no feature {feature_id!r} in the catalog (known: {known})") from None


# --- evidence -------------------------------------------------------------------------------


@cache
def ptx_regex(prefix: str) -> re.Pattern[str]:
    """The regex that finds a ``ptx`` evidence prefix at a mnemonic boundary."""
    return re.compile(r"(?<![\w.])" + re.escape(prefix) + r"(?!\w)")


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def identifier_matches(evidence: str, identifier: str) -> bool:
    """Whether a code identifier is an instance of an ``identifiers`` evidence entry."""
    if evidence.endswith(("_", "x")) and len(evidence) > 3:
        return identifier.startswith(evidence)
    return identifier == evidence


def match_evidence(item: Feature, asm: str, code: str, idents: set[str] | None = None) -> str | None:
    """The first piece of evidence for ``item`` in one stretch of source, or None.

    ``asm`` is the text of the string literals (inline assembly), ``code`` the source with string
    literals blanked, ``idents`` the identifiers of ``code`` (computed when not given).
    """
    if asm:
        for prefix in item.ptx:
            if prefix in asm and ptx_regex(prefix).search(asm):
                return prefix
        for pattern in item.ptx_patterns:
            hit = _regex(pattern).search(asm)
            if hit:
                return hit.group(0)
    names = idents if idents is not None else set(_IDENTIFIER.findall(code))
    for evidence in item.identifiers:
        for name in names:
            if identifier_matches(evidence, name):
                return name
    for pattern in item.patterns:
        hit = _regex(pattern).search(code)
        if hit:
            return hit.group(0)
    return None


# --- probes ---------------------------------------------------------------------------------


def _split_probe(probe: str) -> tuple[list[str], list[str]]:
    directives: list[str] = []
    body: list[str] = []
    for line in probe.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        (directives if stripped.startswith(ENTRY_DIRECTIVES) else body).append(stripped)
    return directives, body


def probe_module(probe: str, target_name: str, ptx_version: str, label: str = "baseline") -> str:
    """A complete PTX module: ``probe`` (PTX statements) inside the probe kernel, for one target.

    The template is one kernel with a single pointer parameter, already converted to a global
    address in ``%probe_ptr`` so that probes can store their results (nothing is dead code that
    ``ptxas`` might drop before checking it). Entry directives in the probe (``.maxnreg 128``)
    are placed on the kernel; everything else goes into its body. An empty probe gives the
    baseline kernel, which tells whether ``ptxas`` can compile for the target at all.
    """
    if not _TARGET.fullmatch(target_name):
        raise ValueError(f"{target_name!r} is not a compile target such as sm_90a")
    if not _PTX_VERSION.fullmatch(ptx_version):
        raise ValueError(f"{ptx_version!r} is not a PTX ISA version such as 9.0")
    directives, body = _split_probe(probe)
    lines = [
        f"// liftgate feature probe: {label}",
        f".version {ptx_version}",
        f".target {target_name}",
        ".address_size 64",
        "",
        ".visible .entry probe(",
        "    .param .u64 probe_param",
        ")",
        *directives,
        "{",
        "    .reg .b64 %probe_ptr;",
        "    ld.param.u64 %probe_ptr, [probe_param];",
        "    cvta.to.global.u64 %probe_ptr, %probe_ptr;",
        *(f"    {line}" for line in body),
        "    ret;",
        "}",
        "",
    ]
    return "\n".join(lines)


def probe_ptx(item: Feature, target_name: str, ptx_version: str) -> str:
    """The PTX module that uses ``item`` and nothing newer, for one exact target (`probe_module`)."""
    return probe_module(item.probe, target_name, ptx_version, label=item.id)
