"""The base of the CMake analysis: the file, its gates and skips, and the assumed toolkit's branches.

`GateEmitter` records gates through a `GateSink` (`GateEmitter.new_gate`: a gate carries its
evidence, the assumptions of its enclosing branches (`Frame`) and the typed facts ``builds`` and
``passes``) and skips; before anything else it empties the branches that the assumed toolkit never
takes (`GateEmitter.prune`) and words the toolkit tests it decided as assumptions. The passes
built on it: `liftgate.detect.cmake_intersections` (who defines and uses which arch list, vLLM's
intersection helper), `liftgate.detect.cmake_rules` (the gates of lists, flags and ``if()`` tests)
and the driver in `liftgate.detect.cmake`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from liftgate.arch.core import ArchSet
from liftgate.detect.cmake_conditions import Toolkit
from liftgate.detect.cmake_names import truncate
from liftgate.detect.cmake_summary import Summary, build_target, summarize_block
from liftgate.detect.cmake_syntax import Branch, Command, Cond, IfBlock, Node, Scope, parse_condition
from liftgate.detect.interface import GateSink
from liftgate.model import BuildFlag, BuildTarget, Confidence, ElseKind, Evidence, Gate, GateKind, Skip, Span


@dataclass(frozen=True, slots=True)
class Frame:
    """An enclosing block: its label, the gates whose branch it is and what it assumes."""

    label: str
    gates: tuple[str, ...]  # ids of the gates whose branch this is
    deps: tuple[str, ...]
    in_function: bool = False
    bindings: tuple[tuple[str, tuple[str, ...]], ...] = ()


class GateEmitter:
    """One file's analysis state: its identity, gates and skips, and the toolkit's branch decisions."""

    def __init__(self, package: str, version: str | None, path: str, toolkit: Toolkit | None = None) -> None:
        self.package = package
        self.version = version
        self.path = path
        self.sink = GateSink(GateKind.CMAKE, package, version, path)
        self.skips: list[Skip] = []
        self.toolkit = toolkit
        self.decided: dict[int, bool] = {}  # id(Branch) -> its condition's value under the toolkit
        self.untaken: set[int] = set()  # id(Branch) of branches the assumed toolkit never takes
        self.pruned: dict[int, list[Node]] = {}  # id(Branch) -> the body that pruning emptied

    # -- helpers -----------------------------------------------------------------------------

    def skip(self, line: int, reason: str) -> None:
        self.skips.append(Skip(f"{self.path}:{line}", reason, self.package))

    def new_gate(
        self,
        command: Command,
        frames: tuple[Frame, ...],
        admitted: ArchSet,
        unknown: ArchSet,
        *,
        evidence: list[Evidence],
        depends_on: Iterable[str] = (),
        confidence: Confidence = Confidence.EXACT,
        else_kind: ElseKind = ElseKind.NONE,
        then_span: Span | None = None,
        else_span: Span | None = None,
        builds: Iterable[BuildTarget] = (),
        passes: Iterable[BuildFlag] = (),
    ) -> Gate | None:
        """Record a gate for ``command`` unless it admits every target (then it gates nothing)."""
        unknown = unknown - admitted
        if admitted == ArchSet.all():
            return None  # lets every target through: gates nothing
        norm = command.render()
        deps = [d for f in frames for d in f.deps]
        deps.extend(depends_on)
        return self.sink.gate(
            self.sink.identify(norm, tuple(f.label for f in frames)),
            span=Span(command.line, command.end_line),
            condition=truncate(norm),
            admitted=admitted,
            unknown=unknown,
            then_span=then_span,
            else_span=else_span,
            else_kind=else_kind,
            confidence=confidence,
            evidence=evidence,
            depends_on=tuple(dict.fromkeys(deps)),
            directive=command.name,
            enclosing=tuple(dict.fromkeys(g for f in frames for g in f.gates)),
            builds=tuple(builds),
            passes=tuple(dict.fromkeys(passes)),
        )

    @staticmethod
    def bindings(frames: tuple[Frame, ...]) -> dict[str, tuple[str, ...]]:
        """The literal ``foreach`` items bound to variables in the innermost frame."""
        return dict(frames[-1].bindings) if frames else {}

    # -- pass 0: branches the assumed toolkit never takes -------------------------------------

    def prune(self, nodes: list[Node]) -> None:
        """Empty the branches that the assumed toolkit never takes: they define and gate nothing."""
        if self.toolkit is None:
            return
        for node in nodes:
            if isinstance(node, IfBlock):
                taken = False
                for branch in node.branches:
                    if taken:
                        self.untaken.add(id(branch))
                    elif branch.head.name != "else":
                        cond = parse_condition(branch.head.args)
                        value = self.toolkit.value(cond) if cond is not None else None
                        if value is not None:
                            self.decided[id(branch)] = value
                            taken = value
                            if not value:
                                self.untaken.add(id(branch))
                    if id(branch) in self.untaken:
                        self.pruned[id(branch)] = branch.body
                        branch.body = []
                    else:
                        self.prune(branch.body)
            elif isinstance(node, Scope):
                self.prune(node.body)

    def summarize_block(self, nodes: Iterable[Node], heads: Iterable[Command] = ()) -> Summary:
        """What ``nodes`` do, with every ``-D`` flag that they, or ``heads``, pass (`summarize_block`)."""
        return summarize_block(nodes, self.path, self.pruned, heads)

    def target(self, name: str | None, summary: Summary, line: int) -> BuildTarget:
        """The `BuildTarget` fact of a block: every source it names, as written."""
        return build_target(name, summary, self.path, line)

    def note(self, cond: Cond, want: bool) -> str | None:
        return self.toolkit.note(cond, want) if self.toolkit else None

    def and_parts(self, cond: Cond) -> list[str]:
        """The parts of a condition assumed true, each toolkit test worded as the assumption."""
        parts = cond.children if cond.op == "and" else [cond]
        return [self.note(part, True) or part.text for part in parts]

    def earlier(self, branch: Branch, text: str) -> str:
        """The assumption that an earlier branch of the same if() was not taken."""
        if self.decided.get(id(branch)) is False and self.toolkit is not None:
            return f"{self.toolkit.prefix}: {text} is false"
        return f"NOT ({text})"
