"""The detector protocol: what a detector wants, what it is given, what it returns.

A detector is a value with a ``name``, a ``wants(path)`` test (which package paths it reads),
and ``detect(batch) -> Detection``. The scan's runner (`liftgate.scan.run`) hands each
registered detector (`liftgate.detect.registry`) the files it wants, owns the one safety net
(an exception from a detector becomes a `Skip` with a reason, never a failed scan), and sorts
what comes back. Within a detector, every gate is built through a `GateSink`, the one place
that counts occurrences and makes a gate's identity, so ids mean the same for every kind.

Detectors never import a later stage (judge, chain, trace, lift, report): they publish typed
facts on the `Gate` (`BuildTarget`, `MacroOrigin`, `BuildFlag`, `BinaryCoverage`), and the
evidence sentences beside them are for people.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from liftgate.arch.core import ArchSet
from liftgate.model import (
    BinaryCoverage,
    BuildFlag,
    BuildTarget,
    Choice,
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
    TorchOp,
    Truth,
    gate_id,
)

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from liftgate.sources.interface import Observer, Package, SourceFile
    from liftgate.sources.workspace import Workspace


@dataclass(frozen=True, slots=True)
class Detection:
    gates: tuple[Gate, ...] = ()
    skips: tuple[Skip, ...] = ()
    # Facts published for the detectors that run later (`Batch.ops`), not reported themselves.
    ops: tuple[TorchOp, ...] = ()


class Scope(str, enum.Enum):
    """How much a detector sees at once."""

    PACKAGE = "package"  # one package's wanted files per call (C family, binaries)
    FILE = "file"  # one file per call (CMake)
    WORKSPACE = "workspace"  # every package's wanted files in one call (Python: predicates cross packages)


@dataclass(frozen=True, slots=True)
class Settings:
    """What every detector may depend on besides the files; part of every cache key."""

    cuda_version: tuple[int, int]
    max_file_size: int


@dataclass(frozen=True, slots=True)
class Batch:
    """What a detector is given: the files it wants (of one package, or of all), and how to read them."""

    files: tuple[SourceFile, ...]
    workspace: Workspace
    settings: Settings
    observer: Observer
    package: Package | None = None  # the package, for a PACKAGE-scoped detector
    executor: Callable[[], Executor] | None = None  # a process pool, for a detector that parallelises
    jobs: int = 1
    cache: DetectorCache | None = None  # the scan cache, for a detector that caches its own work
    ops: tuple[TorchOp, ...] = ()  # published by the detectors that ran before (part of the cache key)
    # The process ends once this detection is sent (a run-ahead process): what the detector built
    # need not be freed, and freeing millions of syntax-tree objects took seconds.
    process_ends: bool = False


class Detector(Protocol):
    """A detector: ``wants`` picks package paths, ``detect`` turns a batch of them into gates and skips.

    ``name`` keys its cache entries and its skips; ``scope`` says how many files one call sees;
    ``phase`` is the progress line of a FILE-scoped detector ("analysing CMake files");
    ``caches_itself`` false lets the runner cache the detection by the content of its files.
    ``runs_ahead``: a WORKSPACE-scoped detector the runner may start at once, in a process of its
    own, while the detectors before it run, on the assumption that they publish no facts for it;
    the runner takes that detection only when they published none (`liftgate.scan.run`).
    """

    name: str
    scope: Scope
    phase: str
    caches_itself: bool
    runs_ahead: bool

    def wants(self, path: str) -> bool: ...

    def detect(self, batch: Batch) -> Detection: ...

    def reset(self) -> None:
        """Drop per-process state (a pool worker's caches) between scans."""
        ...


@dataclass
class GateSink:
    """The gates of one file: occurrence counting and identity in one place.

    A gate's id hashes its kind, package, path, normalised condition and enclosing scope, plus
    how many gates with the same condition and scope came before it in the file: the id survives
    code moving up or down, and two identical checks in one function still differ.
    """

    kind: GateKind
    package: str
    version: str | None
    path: str
    gates: list[Gate] = field(default_factory=list)
    _occurrences: dict[tuple[str, tuple[str, ...]], int] = field(default_factory=dict)

    def identify(self, normalized: str, scope: tuple[str, ...]) -> str:
        """The next id for a gate with this normalised condition and scope (counts it)."""
        key = (normalized, scope)
        occurrence = self._occurrences.get(key, 0)
        self._occurrences[key] = occurrence + 1
        return gate_id(self.kind, self.package, self.path, normalized, scope, occurrence)

    def gate(
        self,
        id: str,
        *,
        span: Span,
        condition: str,
        admitted: ArchSet,
        unknown: ArchSet,
        host: Truth | None = None,
        then_span: Span | None = None,
        else_span: Span | None = None,
        else_kind: ElseKind = ElseKind.NONE,
        confidence: Confidence = Confidence.EXACT,
        evidence: Sequence[Evidence] = (),
        depends_on: Sequence[str] = (),
        directive: str = "",
        enclosing: Sequence[str] = (),
        builds: Sequence[BuildTarget] = (),
        macros: Sequence[MacroOrigin] = (),
        passes: Sequence[BuildFlag] = (),
        build_macros: Sequence[str] = (),
        coverage: BinaryCoverage | None = None,
        switches: Sequence[Switch] = (),
        reach: ArchSet | None = None,
        choices: Sequence[Choice] = (),
        dispatch: int | None = None,
        keep: bool = True,
    ) -> Gate:
        """A gate of this file with an id from `identify`; kept in ``gates`` unless ``keep`` is false.

        Sequences are kept as given (in order, duplicates included): a detector dedupes where it means to.
        """
        built = Gate(
            id=id,
            kind=self.kind,
            location=Location(self.package, self.version, self.path, span),
            condition=condition,
            admitted=admitted,
            unknown=unknown,
            host=host,
            then_span=then_span,
            else_span=else_span,
            else_kind=else_kind,
            confidence=confidence,
            evidence=tuple(evidence),
            depends_on=tuple(depends_on),
            directive=directive,
            enclosing=tuple(enclosing),
            builds=tuple(builds),
            macros=tuple(macros),
            passes=tuple(passes),
            build_macros=tuple(build_macros),
            coverage=coverage,
            switches=tuple(switches),
            reach=reach,
            choices=tuple(choices),
            dispatch=dispatch,
        )
        if keep:
            self.gates.append(built)
        return built


def lone_dispatch_cleared(gates: Sequence[Gate]) -> list[Gate]:
    """``gates`` with `Gate.dispatch` kept only where another gate names the same chain: a branch of
    an if/elif chain is a dispatch branch only when a sibling branch is a gate too."""
    counts = Counter(g.dispatch for g in gates if g.dispatch is not None)
    return [
        dataclasses.replace(g, dispatch=None) if g.dispatch is not None and counts[g.dispatch] < 2 else g
        for g in gates
    ]


def failure(exc: BaseException) -> str:
    """An unexpected exception for a Skip's reason: its type, and its message cut short."""
    text = str(exc)
    return type(exc).__name__ + (f": {text[:200]}{'…' if len(text) > 200 else ''}" if text else "")


def not_analysed(
    path: str,
    package: str | None,
    exc: BaseException,
    what: str = "not analysed",
    consequence: str = "gates in it are not reported",
) -> Skip:
    """The one way an exception inside a detector becomes a result: a `Skip` naming the file, what
    was not done, the exception and what the report lacks for it. The runner (`liftgate.scan.run`)
    wraps every detector call in it, and detectors that read many files per call use it per file,
    so one bad file costs only itself."""
    return Skip(path, f"{what} ({failure(exc)})" + (f"; {consequence}" if consequence else ""), package)


class DetectorCache(Protocol):
    """What a detector that caches its own work may use of the scan cache (`liftgate.scan.cache.ScanCache`)."""

    @property
    def fingerprint(self) -> str: ...

    def load_stats(self, key: str) -> dict[str, tuple[int, int, str, int]]: ...

    def store_stats(self, key: str, value: dict[str, tuple[int, int, str, int]]) -> None: ...

    def load_details(self, key: str) -> dict[str, tuple[object, ...]]: ...

    def store_details(self, key: str, value: dict[str, tuple[object, ...]]) -> None: ...

    def load_result(self, key: str) -> tuple[list[Gate], list[Skip], list[TorchOp]] | None: ...

    def store_result(
        self, key: str, gates: list[Gate], skips: list[Skip], ops: Sequence[TorchOp] = ()
    ) -> None: ...
