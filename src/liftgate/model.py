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
from typing import TYPE_CHECKING

from liftgate.arch.core import Arch, ArchSet

if TYPE_CHECKING:
    from liftgate.sources.workspace import Workspace


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


class Outcome(str, enum.Enum):
    """What one target gets from a gate, read in the direction of the path the gate guards
    (`liftgate.evaluate.Outcomes`): the raw condition's admitted set says where it holds, the
    outcome what that means for the target."""

    GETS = "gets"  # the target gets the gated path
    ALTERNATIVE = "alternative"  # another arch-specific branch of the same dispatch, its own or newer
    FALLBACK = "fallback"  # a portable or older path the targets the gate admits are spared
    SHUT_OUT = "shut-out"  # nothing in its place: compiled out, an error, a trap
    OFF = "off"  # a switch off by default (an environment variable, a -D) would give it the path
    UNKNOWN = "unknown"  # whether it gets the path depends on something liftgate cannot see
    UNSAFE = "unsafe"  # it gets the path, which uses a feature it lacks (read from the judge's verdict)


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
    outcome: bool = (
        False  # what happens to the targets the gate shuts out (a failure, a build flag's absence)
    )

    def render(self) -> str:
        where = (
            f" at {self.path}:{self.line}"
            if self.path and self.line
            else (f" in {self.path}" if self.path else "")
        )
        return f"{self.text}{where}"


@dataclass(frozen=True, slots=True)
class BuildTarget:
    """What a build gate's flags or arch list are built into: a JIT module, an extension, a CMake target.

    ``sources`` is the complete list of sources the build names, as written (a file name, a path or
    a glob for an f-string); ``computed`` is true when some are computed at run time and cannot be
    listed. ``name`` is the module's name as written, None when it is computed.
    """

    what: str  # "JIT module", "extension", "JIT extension", "CMake target", "build"
    name: str | None
    sources: tuple[str, ...]
    computed: bool = False
    path: str | None = None
    line: int | None = None


@dataclass(frozen=True, slots=True)
class MacroOrigin:
    """Where a macro a CUDA gate tests is ``#define``d, and the condition it is defined under
    (empty: unconditionally). A lift of such a gate edits the gates around these sites.

    For a flag the build passes only for some targets (``-DENABLE_NVFP4_SM120=1`` inside a CMake
    arch gate's block, or beside a JIT filter), ``path`` and ``line`` are the flag's, ``condition``
    the build gate's and ``build_gate`` its id."""

    macro: str
    path: str | None
    line: int | None
    condition: str = ""
    build_gate: str | None = None  # a -D the build passes: the CMake or py-build gate that passes it


@dataclass(frozen=True, slots=True)
class BuildFlag:
    """A ``-DNAME[=VALUE]`` a build gate passes to the compiler: inside the block a CMake gate
    admits, or beside a py-build gate's arch flags (`liftgate.detect.pybuild_passes`)."""

    macro: str
    value: str | None
    path: str
    line: int


class SwitchKind(str, enum.Enum):
    BUILD_FLAG = "build-flag"  # a -D nothing in the package passes
    ENVIRONMENT = "environment"  # an environment variable


@dataclass(frozen=True, slots=True)
class Switch:
    """A setting that is off unless someone sets it and that turns an arch-specific path on.

    The gate's own admitted set is read with the switch off (as it is by default); ``admitted``
    and ``unknown`` are what the gate would admit with it set, and ``setting`` how to set it
    (``-DCUTLASS_ENABLE_GDC_FOR_SM90``).
    """

    name: str
    kind: SwitchKind
    setting: str
    admitted: ArchSet
    unknown: ArchSet


class Coverage(str, enum.Enum):
    """How a binary's kernels reach one target."""

    NATIVE = "native"  # SASS compiled for the target (or a compatible one)
    PTX_JIT = "ptx-jit"  # only PTX: the driver compiles it at first start
    PARTIAL = "partial"  # some compiled units have an image the target runs, some have none
    NONE = "no-kernel-image"  # nothing the target can run


@dataclass(frozen=True, slots=True)
class CompiledUnit:
    """One fat binary container of a binary: what one ``.cu`` file compiled to, the unit the driver
    picks a kernel image from. ``images`` names its entries (``sm_90a``, ``compute_80``); ``native``
    and ``ptx_jit`` are the targets that run it; ``kernels`` the display names of its kernels
    (demangled, shortened), read from its cubin's symbol table or its PTX; ``unread`` why they
    could not be (a compressed entry without the decompressor, a damaged cubin)."""

    images: tuple[str, ...]
    native: ArchSet
    ptx_jit: ArchSet
    kernels: tuple[str, ...] = ()
    unread: str | None = None

    def runs(self, arch: Arch) -> bool:
        return arch in self.native or arch in self.ptx_jit

    @property
    def empty(self) -> bool:
        """No kernel in it (its names were read and there are none): nothing of it is launched, so
        a GPU with no image for it loses nothing (nvcc's device-link stubs, host-only sources)."""
        return not self.kernels and self.unread is None


@dataclass(frozen=True, slots=True)
class BinaryCoverage:
    """Which archs a binary's kernels run on, decided per compiled unit as the driver does.

    ``native``: every unit has SASS the target runs; ``ptx_jit``: every unit runs, some only
    through the PTX JIT; ``partial``: some units run and some have no image (their kernels fail
    with "no kernel image is available"). Units that hold no kernel do not count for these.
    ``units`` are the compiled units themselves, every one of them."""

    native: ArchSet
    ptx_jit: ArchSet
    images: int = 0
    compressed: int = 0
    partial: ArchSet = field(default_factory=ArchSet.none)
    units: tuple[CompiledUnit, ...] = ()

    def coverage(self, arch: Arch) -> Coverage:
        if arch in self.native:
            return Coverage.NATIVE
        if arch in self.ptx_jit:
            return Coverage.PTX_JIT
        if arch in self.partial:
            return Coverage.PARTIAL
        return Coverage.NONE

    def unit_counts(self, arch: Arch) -> tuple[int, int, int]:
        """Compiled units that run ``arch`` natively, only through the PTX JIT, and not at all."""
        native = sum(1 for u in self.units if arch in u.native)
        jit = sum(1 for u in self.units if arch not in u.native and arch in u.ptx_jit)
        return native, jit, len(self.units) - native - jit

    def kernel_counts(self, arch: Arch) -> tuple[int, int, int]:
        """Kernels (of the units whose names were read) that run natively, through the JIT, not at all."""
        native = sum(len(u.kernels) for u in self.units if arch in u.native)
        jit = sum(len(u.kernels) for u in self.units if arch not in u.native and arch in u.ptx_jit)
        none = sum(len(u.kernels) for u in self.units if not u.runs(arch))
        return native, jit, none

    def missing(self, arch: Arch) -> list[CompiledUnit]:
        """The compiled units with no image ``arch`` can run."""
        return [u for u in self.units if not u.runs(arch)]


@dataclass(frozen=True, slots=True)
class Choice:
    """One implementation a call may reach when the object's class is chosen at run time
    (``quant_config.get_min_capability()``, ``for kernel in _KERNELS: kernel.is_supported()``):
    the method, where it is defined, and what the gate admits when the call reaches it."""

    # qualified name of the method, "Fp8Config.get_min_capability"; or the class, "FlashInferBackend",
    # when what is chosen is the class of a method's own ``cls``/``self`` (every lookup on it)
    implementation: str
    path: str
    line: int
    admitted: ArchSet
    unknown: ArchSet


@dataclass(frozen=True, slots=True)
class TorchOp:
    """A C++ function registered as a torch custom op (``m.def("name(int cap) -> bool")`` and
    ``m.impl("name", &fn)``), read with its integer parameter ``position`` bound to the device's
    capability as ``major * 10 + minor``: what it returns on each target, and the branches that
    test that parameter (parametric gates). Python that calls ``torch.ops.<ns>.<name>`` with that
    value gets ``returns_true``/``returns_unknown``, and the gates are reported with the call site.
    """

    package: str
    version: str | None
    name: str  # the op, as registered
    function: str  # the C++ function registered for it
    path: str  # where the function is defined
    line: int
    parameter: str
    position: int
    returns_true: ArchSet
    returns_unknown: ArchSet
    registered: tuple[str, int]  # the m.impl/m.def line
    gates: tuple[Gate, ...] = ()
    namespace: str | None = None  # torch.ops.<namespace>; None when the build names it (TORCH_EXTENSION_NAME)


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
    # Typed facts for later stages (evidence is rendered from them for people, never parsed back):
    builds: tuple[BuildTarget, ...] = ()  # py-build, cmake: what the guarded flags or list build
    macros: tuple[MacroOrigin, ...] = ()  # cuda-pp: where derived macros the condition tests are defined
    passes: tuple[BuildFlag, ...] = ()  # cmake, py-build: the -D flags passed with the admitted targets
    build_macros: tuple[str, ...] = ()  # cpp-runtime: build flags (-D) the host code is compiled under
    coverage: BinaryCoverage | None = None  # binary: native and PTX-JIT archs
    switches: tuple[Switch, ...] = ()  # settings off by default that would open the gate
    # cpp-runtime branches on a parameter: ids of the Python gates at the calls that pass it (torch ops)
    decided_at: tuple[str, ...] = ()
    # cpp-runtime code under build flags the package passes per target: the targets whose build
    # compiles it (or may); the admitted set stays the condition's. None: every build has it.
    reach: ArchSet | None = None
    # py-runtime: the condition calls a method of an object whose class is chosen at run time;
    # each implementation in the scan with what the gate admits through it. A target some admit
    # and others do not is unknown in the gate's own sets.
    choices: tuple[Choice, ...] = ()
    # The line of the first test of the if/elif (#if/#elif) chain this gate is a branch of, when
    # another branch of that chain is a gate too: a target one branch leaves out may take another.
    dispatch: int | None = None

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
class Reading:
    """A gate's outcome for one target (`liftgate.evaluate.Outcomes`): ``loss`` when the target
    takes a fallback or is shut out while some other target gets the path, or a switch would give
    it the path (and no enclosing gate keeps it out);
    ``via`` the id of the branch of the same dispatch the target takes instead; ``text`` the
    reason in words."""

    gate_id: str
    target: Arch
    outcome: Outcome
    loss: bool
    text: str
    via: str | None = None


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
    """Whether the code behind a gate that excludes a target could run there, or, for a target it
    admits, whether the code it lets the target into can (see `liftgate.judge`)."""

    LIFTABLE = "liftable"  # everything the region needs exists on the target
    BLOCKED = "blocked"  # the region uses a feature the target lacks
    UNKNOWN = (
        "unknown"  # something the region needs could not be seen (an opaque call, a module not followed)
    )
    # For a target the gate admits: the path it gets uses a feature it lacks (a build failure, an
    # illegal instruction). Judged only for admitted targets; never a lift candidate.
    UNSAFE = "unsafe"


@dataclass(frozen=True, slots=True)
class FeatureUse:
    """A hardware feature used by the code behind a gate, where, and through which call."""

    feature: str
    path: str
    line: int
    text: str  # what matched: a PTX mnemonic, an intrinsic, a CUTLASS name
    via: str | None = None  # the function or macro of the region that leads there


class HazardKind(str, enum.Enum):
    SILENT_EXCLUSION = "silent-exclusion"  # the gate compiles ordering out with nothing in its place
    SILENT_SOURCE = (
        "silent-exclusion-in-sources"  # another gate in the built sources does, named in ``gates``
    )
    SHARED_MEMORY = "shared-memory"  # the region asks for more shared memory than the target has
    BUILD_FLAG = "build-flag"  # the #if tests a -D only a CMake arch gate passes: that gate decides


@dataclass(frozen=True, slots=True)
class Hazard:
    """What could go wrong beyond the verdict; ``gates`` are the other gates it names (lifting them too covers it)."""

    kind: HazardKind
    text: str
    gates: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one gate for one target it excludes (liftable, blocked, unknown), or for one
    it admits into code that uses what the target lacks (unsafe)."""

    gate_id: str
    target: Arch
    kind: VerdictKind
    reasons: tuple[str, ...]
    uses: tuple[FeatureUse, ...] = ()
    missing: tuple[FeatureUse, ...] = ()  # uses whose feature the target lacks
    unresolved: tuple[str, ...] = ()  # what could not be followed, as "name (path:line)"
    hazards: tuple[Hazard, ...] = ()
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


class Relation(str, enum.Enum):
    """How a chain's gate was reached from its parent (`ChainLink.relation`)."""

    ROOT = "root"
    CALLS = "calls"  # a guard at the top of a function the parent's code calls
    BUILDS = "builds"  # a JIT build filter in a function it calls
    COMPILES = "compiles"  # a CUDA gate in the sources a build filter or arch list compiles
    FLAG = "flag"  # host code compiled under a flag a CMake gate passes
    OP = "op"  # a C++ branch that decides what a torch op the parent calls returns


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One gate of a chain and how it was reached from its parent (`liftgate.chain`).

    ``relation``: ``root``; ``calls`` (a guard at the top of a function the parent's code calls);
    ``builds`` (a JIT build filter in a function it calls); ``compiles`` (a CUDA gate in the sources
    a build filter or arch list compiles); ``flag`` (host code compiled under a flag a CMake gate
    passes); ``op`` (a C++ branch that decides what a torch op the parent calls returns). ``via`` lists the steps; ``exact`` is false when a step was resolved by a name alone.
    """

    gate_id: str
    parent_id: str | None
    relation: Relation
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


class TakenSide(str, enum.Enum):
    """Which side of a gate a traced run took (`GateTrace.took`)."""

    ADMITTED = "admitted"
    EXCLUDED = "excluded"
    MIXED = "mixed"  # both, in different evaluations
    UNKNOWN = "unknown"  # neither can be read from the outcomes


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
    took: TakenSide
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
    # The scanned packages' files, for the stages that read source after the scan (judge, chain,
    # trace, lift, explain); not part of the report's value.
    workspace: Workspace | None = field(default=None, compare=False, repr=False)
    # Where the scan cached its results (None: --no-cache); the judge caches its verdicts there.
    cache_root: str | None = field(default=None, compare=False, repr=False)
    # The CUDA gates' verdicts under way since the C-family detector ended, when the scan was asked
    # to judge ahead (a `liftgate.judge.verdict.JudgeAhead`; `judge_scan` takes them, or stops it).
    judge_ahead: object | None = field(default=None, compare=False, repr=False)

    def target_archs(self) -> list[Arch]:
        """The distinct archs of the targets, in the order asked."""
        return list(dict.fromkeys(t.arch for t in self.targets))

    def files(self, stage: str) -> Workspace:
        """The workspace a later stage (``stage``, for the error) reads the scanned files through."""
        if self.workspace is None:
            raise ValueError(
                f"the report has no workspace: {stage} reads the scanned files (scan with liftgate.scan)"
            )
        return self.workspace

    def verdict_index(self) -> dict[tuple[str, Arch], Verdict]:
        """Verdicts by (gate id, target); build it once per rendering, not per gate."""
        return {(v.gate_id, v.target): v for v in self.verdicts}

    def findings(self, target: Arch) -> list[Finding]:
        from liftgate.evaluate import evaluate

        return [evaluate(gate, target) for gate in self.gates]

    def excluding(self, target: Arch) -> list[Gate]:
        return [g for g in self.gates if g.status(target) is Status.EXCLUDED]
