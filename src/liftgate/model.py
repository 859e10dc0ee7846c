"""liftgate's shared data model: gates, findings, skips and the report of a scan.

Detectors produce `Gate`s (what the code says), `evaluate` turns a gate and a target into a
`Finding` (what that means for one arch), and a `Report` carries both with the `Skip`s that
explain what was not analysed. Everything here is a frozen value; identity never depends
on line numbers so baselines, diffs across releases and re-applied lifts match the same gate.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field

from liftgate.arch.core import Arch, ArchSet


class GateKind(str, enum.Enum):
    CUDA_PP = "cuda-pp"
    CPP_RUNTIME = "cpp-runtime"
    PY_RUNTIME = "py-runtime"
    PY_BUILD = "py-build"
    CMAKE = "cmake"
    BINARY = "binary"


GATE_ID_PREFIX = {
    GateKind.CUDA_PP: "cu",
    GateKind.CPP_RUNTIME: "cr",
    GateKind.PY_RUNTIME: "py",
    GateKind.PY_BUILD: "pb",
    GateKind.CMAKE: "cm",
    GateKind.BINARY: "bin",
}


class ElseKind(str, enum.Enum):
    NONE = "none"  # compiled out / skipped: nothing runs instead
    FALLBACK = "fallback"  # another implementation runs instead
    ERROR = "error"  # #error, static_assert, raise


class Confidence(str, enum.Enum):
    EXACT = "exact"  # derived from the code
    INFERRED = "inferred"  # from a name such as is_sm100 or a device-name substring


class Status(str, enum.Enum):
    ADMITTED = "admitted"
    EXCLUDED = "excluded"
    UNKNOWN = "unknown"


class Truth(str, enum.Enum):
    """Three-valued truth of a condition in one compilation pass or on one device."""

    TRUE = "true"
    FALSE = "false"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Span:
    """Lines ``start..end`` inclusive, 1-based, of a file."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Location:
    package: str
    version: str | None
    path: str  # POSIX path inside the package, e.g. flashinfer/data/include/flashinfer/comm/x.cuh
    span: Span

    @property
    def line(self) -> int:
        return self.span.start


@dataclass(frozen=True, slots=True)
class Evidence:
    """How part of a gate was resolved, e.g. where a derived macro was defined and under which condition."""

    text: str
    path: str | None = None
    line: int | None = None

    def render(self) -> str:
        where = (
            f" at {self.path}:{self.line}"
            if self.path and self.line
            else (f" in {self.path}" if self.path else "")
        )
        return f"{self.text}{where}"


@dataclass(frozen=True, slots=True)
class Gate:
    """An architecture gate: code whose inclusion or execution depends on the GPU architecture.

    ``admitted`` holds the targets for which the condition is definitely true, ``unknown`` those
    for which it depends on something liftgate cannot see (a macro set by the build, say);
    every other known target is excluded. ``host`` is the host compilation pass (CUDA only).
    """

    id: str
    kind: GateKind
    location: Location
    condition: str
    admitted: ArchSet
    unknown: ArchSet
    host: Truth | None
    then_span: Span | None
    else_span: Span | None
    else_kind: ElseKind
    confidence: Confidence = Confidence.EXACT
    evidence: tuple[Evidence, ...] = ()
    depends_on: tuple[str, ...] = ()  # non-arch parts of the condition, with the value assumed
    directive: str = ""  # e.g. "#if", "#elif", "#ifdef"
    enclosing: tuple[str, ...] = field(default=())  # ids of enclosing gates, outermost first

    @property
    def excluded(self) -> ArchSet:
        return ~(self.admitted | self.unknown)

    def status(self, arch: Arch) -> Status:
        if arch in self.admitted:
            return Status.ADMITTED
        if arch in self.unknown:
            return Status.UNKNOWN
        return Status.EXCLUDED


def gate_id(
    kind: GateKind,
    package: str,
    path: str,
    normalized_condition: str,
    scope: tuple[str, ...],
    occurrence: int,
) -> str:
    """A stable id from what the gate is, not where it sits: survives code moving up or down a file."""
    key = "\x1f".join([kind.value, package.lower(), path, normalized_condition, *scope, str(occurrence)])
    return f"{GATE_ID_PREFIX[kind]}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


@dataclass(frozen=True, slots=True)
class Skip:
    """A file or construct that was not analysed, and why. A result, never an exception."""

    path: str
    reason: str
    package: str | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """A gate evaluated for one target."""

    gate: Gate
    target: Arch
    status: Status
    reason: str


class VerdictKind(str, enum.Enum):
    """Whether the code behind a gate that excludes a target could run there (see `liftgate.judge`)."""

    LIFTABLE = "liftable"  # everything the region needs exists on the target
    BLOCKED = "blocked"  # the region uses a feature the target lacks
    UNKNOWN = (
        "unknown"  # something the region needs could not be seen (an opaque call, a module not followed)
    )


@dataclass(frozen=True, slots=True)
class FeatureUse:
    """A hardware feature used by the code behind a gate, where, and through which call."""

    feature: str
    path: str
    line: int
    text: str  # what matched: a PTX mnemonic, an intrinsic, a CUTLASS name
    via: str | None = None  # the function or macro of the region that leads there


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one gate for one target it excludes."""

    gate_id: str
    target: Arch
    kind: VerdictKind
    reasons: tuple[str, ...]
    uses: tuple[FeatureUse, ...] = ()
    missing: tuple[FeatureUse, ...] = ()  # uses whose feature the target lacks
    unresolved: tuple[str, ...] = ()  # what could not be followed, as "name (path:line)"
    hazards: tuple[str, ...] = ()
    scope: str = ""  # what was analysed: the region's lines, the JIT sources, or "best effort"


@dataclass(frozen=True, slots=True)
class Target:
    """What the user asked for (``rtx5090``) and the arch it resolved to (``sm_120``)."""

    spelling: str
    arch: Arch


@dataclass(frozen=True, slots=True)
class PackageSummary:
    name: str
    version: str | None
    origin: str
    files: int


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One gate of a chain and how it was reached from its parent (`liftgate.chain`).

    ``relation``: ``root``; ``calls`` (a guard at the top of a function the parent's code calls);
    ``builds`` (a JIT build filter in a function it calls); ``compiles`` (a CUDA gate in the sources
    a build filter or arch list compiles); ``flag`` (host code compiled under a flag a CMake gate
    passes). ``via`` lists the steps; ``exact`` is false when a step was resolved by a name alone.
    """

    gate_id: str
    parent_id: str | None
    relation: str
    via: tuple[str, ...]
    exact: bool


@dataclass(frozen=True, slots=True)
class Chain:
    """The gates that stand together between the feature a root gate guards and a target."""

    root_id: str
    links: tuple[ChainLink, ...]  # the root first, then in the order found
    notes: tuple[str, ...] = ()

    @property
    def gate_ids(self) -> tuple[str, ...]:
        return tuple(link.gate_id for link in self.links)


@dataclass(frozen=True, slots=True)
class TracedFrame:
    """A place in a traced program: the package file it maps to (None: not a scanned file)."""

    path: str  # the absolute path the traced process ran
    line: int
    function: str
    package: str | None = None
    package_path: str | None = None

    def render(self) -> str:
        where = self.package_path or self.path
        return f"{self.function}() at {where}:{self.line}"


@dataclass(frozen=True, slots=True)
class GateTrace:
    """What a traced run did at one gate (`liftgate.trace.match`).

    ``outcomes`` counts what followed the condition: ``then``/``else`` (the block that ran),
    ``past`` (neither: an ``if`` without ``else`` skipped, a guard passed), ``evaluated`` (a
    condition without blocks), ``returned``/``raised``; ``took`` reads them as the gate's
    ``admitted`` / ``excluded`` side, or ``mixed``/``unknown``. ``queries`` are the capability
    queries made while the condition ran (or that fed it), as ``api → answer``; ``synthetic``:
    answered under --as.
    """

    gate_id: str
    evaluations: int  # times a probe saw the condition run (0 without probes, or when it never ran)
    outcomes: tuple[tuple[str, int], ...]
    took: str
    queries: tuple[str, ...] = ()
    queried: int = 0  # capability queries made for it (calls)
    limited: bool = False  # the probe stopped at the probe limit: the counts are lower bounds
    synthetic: bool = False
    agreement: str | None = None  # how the run compares with the static evaluation


@dataclass(frozen=True, slots=True)
class UntracedQuery:
    """A capability query made where the static scan found no gate: a recall check."""

    api: str
    answer: str
    count: int
    site: TracedFrame  # the innermost frame outside the API
    reason: str  # "not in the scanned files" or "in a scanned file, but no gate there"
    caller: TracedFrame | None = None


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """A trace mapped onto a scan (``liftgate scan --trace``)."""

    source: str
    command: tuple[str, ...]
    as_arch: str | None  # the arch answered under --as
    capabilities: tuple[tuple[int, int], ...]  # what the run's queries answered
    queries: int  # capability queries made (calls)
    distinct_queries: int
    matched_queries: int  # distinct queries evaluated by a scanned gate
    gates: tuple[GateTrace, ...]
    untraced: tuple[UntracedQuery, ...]
    notes: tuple[str, ...] = ()
    probed: bool = False  # the run probed gates (their conditions' outcomes are known)

    def for_gate(self, gate_id: str) -> GateTrace | None:
        for g in self.gates:
            if g.gate_id == gate_id:
                return g
        return None


@dataclass(frozen=True, slots=True)
class Report:
    """The result of a scan: gates, their evaluation for each target, and what was skipped."""

    targets: tuple[Target, ...]
    packages: tuple[PackageSummary, ...]
    gates: tuple[Gate, ...]
    skips: tuple[Skip, ...]
    files_scanned: int
    elapsed_s: float
    cuda_version: tuple[int, int]
    notes: tuple[str, ...] = ()
    verdicts: tuple[Verdict, ...] = ()  # for gates that exclude a target, when the scan was asked to judge
    trace: TraceSummary | None = None  # a run's trace mapped onto these gates (scan --trace)
    chains: tuple[Chain, ...] = ()  # gate chains worth showing (scan --by chain), `liftgate.chain`

    def verdict_index(self) -> dict[tuple[str, Arch], Verdict]:
        """Verdicts by (gate id, target); build it once per rendering, not per gate."""
        return {(v.gate_id, v.target): v for v in self.verdicts}

    def findings(self, target: Arch) -> list[Finding]:
        from liftgate.evaluate import evaluate

        return [evaluate(gate, target) for gate in self.gates]

    def excluding(self, target: Arch) -> list[Gate]:
        return [g for g in self.gates if g.status(target) is Status.EXCLUDED]
