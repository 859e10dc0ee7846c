"""vLLM's arch-intersection helper in a CMake file, and who defines and uses which arch list.

``cuda_archs_loose_intersection(OUT SRC TGT)`` (and ``cuda_archs_intersection``) computes OUT
from the source list SRC; the block that builds its sources is the ``if(OUT)`` after it. The
survey (`IntersectionSurvey.survey`, the analysis' first pass) records each call (`Intersection`),
the ``if()`` that tests its OUT (what that block builds, the ``-D`` flags it passes, what happens
otherwise) and the commands that change OUT in between, and which variables are arch lists set
in this file or used as ``CMAKE_CUDA_ARCHITECTURES``/``TORCH_CUDA_ARCH_LIST``.
`IntersectionSurvey.intersection_gate` is the gate of a call whose SRC holds literal entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from liftgate.arch.core import ArchSet
from liftgate.detect.cmake_archs import Style, admitted_by, describe_entry, parse_entry
from liftgate.detect.cmake_conditions import Toolkit, evaluate_arch
from liftgate.detect.cmake_gates import Frame, GateEmitter
from liftgate.detect.cmake_names import (
    CMAKE_LISTS,
    SHOWN_ITEMS,
    TORCH_LISTS,
    VARIABLE_REF,
    defined_variable,
    references,
    shorten,
    substitute,
    truncate,
)
from liftgate.detect.cmake_summary import summarize
from liftgate.detect.cmake_syntax import (
    Argument,
    Branch,
    Command,
    Cond,
    IfBlock,
    Node,
    display,
    list_items,
    parse_condition,
    walk,
)
from liftgate.model import BuildFlag, BuildTarget, Confidence, ElseKind, Evidence, Span

_INTERSECTIONS: dict[str, Style] = {
    "cuda_archs_loose_intersection": "loose",
    "cuda_archs_intersection": "exact",
}


@dataclass
class Intersection:
    """A call of vLLM's intersection helper and the ``if(OUT)`` that uses its result."""

    command: Command
    style: Style
    out: str
    src: Argument
    branch: Branch | None = None
    negated: bool = False
    deps: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    extensions: list[Command] = field(default_factory=list)  # later commands that add entries to OUT
    else_kind: ElseKind = ElseKind.NONE
    then_span: Span | None = None
    else_span: Span | None = None
    gate: str | None = None
    builds: tuple[BuildTarget, ...] = ()  # what the block if(OUT) admits builds
    passes: tuple[BuildFlag, ...] = ()  # the -D flags that block passes


def extension_deps(info: Intersection) -> list[str]:
    """The assumptions on what the commands extending OUT add to it."""
    return [f"what {truncate(c.render())} (line {c.line}) adds to {info.out}" for c in info.extensions]


class IntersectionSurvey(GateEmitter):
    """Pass 1: the intersections and their ``if(OUT)``, and which variables are arch lists."""

    def __init__(self, package: str, version: str | None, path: str, toolkit: Toolkit | None = None) -> None:
        super().__init__(package, version, path, toolkit)
        self.intersections: dict[int, Intersection] = {}  # id(command) ->
        self.consumers: dict[int, list[Intersection]] = {}  # id(IfBlock) -> the intersections it tests
        self.src_uses: dict[str, list[Intersection]] = {}  # variable -> intersections taking it as SRC
        self.cmake_uses: set[str] = set()  # variables used as CMAKE_CUDA_ARCHITECTURES / property values
        self.torch_uses: set[str] = set()
        self.definitions: dict[str, list[Command]] = {}  # variable -> set()/list() with literal items
        self.dotted: set[str] = set()  # variables with a dotted literal entry (9.0a): torch style
        self._assigned_cache: dict[int, frozenset[str]] = {}

    # -- pass 1: who defines and who uses which arch list -----------------------------------

    def survey(self, nodes: list[Node]) -> None:
        for command in walk(nodes):
            args = command.args
            if command.name in _INTERSECTIONS and len(args) >= 2:
                info = Intersection(command, _INTERSECTIONS[command.name], args[0].value, args[1])
                self.intersections[id(command)] = info
                for name in VARIABLE_REF.findall(args[1].value):
                    self.src_uses.setdefault(name, []).append(info)
            target = defined_variable(command)
            if target is None:
                continue
            name, items = target
            if any(not a.has_reference for a in items):
                self.definitions.setdefault(name, []).append(command)
            if any(re.match(r"^[0-9]{1,2}\.[0-9]", item) for item in list_items(a.value for a in items)):
                self.dotted.add(name)
            uses = (
                self.cmake_uses
                if name.upper() in CMAKE_LISTS
                else self.torch_uses
                if name.upper() in TORCH_LISTS
                else None
            )
            if uses is not None:
                for arg in items:
                    uses.update(n for n in VARIABLE_REF.findall(arg.value) if n != name)
        self._link_consumers(nodes)

    def _link_consumers(self, nodes: list[Node], after: tuple[list[Node], ...] = ()) -> None:
        """Find, for each intersection, the ``if()`` that tests its OUT variable.

        ``after`` holds what follows each enclosing block, innermost first: the ``if(OUT)`` often
        comes after the ``endif()`` of a CUDA-version ``if``/``else`` that computes OUT either way.
        The search never leaves a function or macro.
        """
        for i, node in enumerate(nodes):
            following = (nodes[i + 1 :], *after)
            if isinstance(node, Command):
                info = self.intersections.get(id(node))
                if info is not None and not self._find_consumer(info, following):
                    self._note_uses(info, following)
            elif isinstance(node, IfBlock):
                for branch in node.branches:
                    self._link_consumers(branch.body, following)
            else:
                self._link_consumers(node.body, () if node.head.name in ("function", "macro") else following)

    def _assigned(self, node: Node) -> frozenset[str]:
        """Variables that ``node`` (or any command under it) sets, appends to or intersects into."""
        cached = self._assigned_cache.get(id(node))
        if cached is None:
            names: set[str] = set()
            for command in [node] if isinstance(node, Command) else walk([node]):
                args = command.args
                if command.name == "set" and args:
                    names.add(args[0].value)
                elif command.name in ("list", "string") and len(args) >= 2:
                    names.add(args[1].value)
                elif id(command) in self.intersections:
                    names.add(args[0].value)
            cached = self._assigned_cache[id(node)] = frozenset(names)
        return cached

    def _redefines(self, node: Command, out: str) -> bool:
        target = defined_variable(node)
        if target is not None and target[0] == out and node.name == "set":
            return not self._extends(node, out)
        other = self.intersections.get(id(node))
        return other is not None and other.out == out

    @staticmethod
    def _extends(node: Command, out: str) -> bool:
        """list(APPEND OUT …), string(APPEND OUT …), set(OUT ${OUT} …): OUT gains entries."""
        args = node.args
        if len(args) >= 2 and args[1].value == out:
            if node.name == "list" and args[0].is_word("APPEND", "PREPEND", "INSERT"):
                return True
            if node.name == "string" and args[0].is_word("APPEND", "PREPEND"):
                return True
        reference = "${" + out + "}"
        return (
            node.name == "set"
            and bool(args)
            and args[0].value == out
            and any(reference in a.value for a in args[1:])
        )

    def _changes(self, info: Intersection, node: Command) -> bool:
        """Record what ``node`` does to OUT; True when it redefines OUT (the search ends there)."""
        out = info.out
        if self._redefines(node, out):
            return True
        if self._extends(node, out):
            info.extensions.append(node)
        elif node.name == "list" and len(node.args) >= 2 and node.args[1].value == out:
            info.evidence.append(
                Evidence(f"{out} is then changed by {truncate(node.render())}", self.path, node.line)
            )
        return False

    def _find_consumer(self, info: Intersection, following: tuple[list[Node], ...]) -> bool:
        """Attach the first ``if()`` testing OUT; False when OUT is redefined or never tested."""
        out = info.out
        for nodes in following:
            for node in nodes:
                if isinstance(node, Command):
                    if out in self._assigned(node) and self._changes(info, node):
                        return False
                    continue
                if isinstance(node, IfBlock):
                    for k, branch in enumerate(node.branches):
                        if id(branch) in self.untaken:
                            continue
                        if branch.head.name != "else" and any(
                            self._tests_out(a, out) for a in branch.head.args
                        ):
                            self._attach(info, node, k)
                            return True
                elif node.head.name in ("function", "macro"):
                    continue
                if out in self._assigned(node) and any(self._changes(info, c) for c in walk([node])):
                    return False
        return False

    def _note_uses(self, info: Intersection, following: tuple[list[Node], ...]) -> None:
        """No if(OUT) follows: cite the commands that use OUT instead (set_gencode_flags_for_srcs …)."""
        reference = "${" + info.out + "}"
        uses: list[Command] = []
        for nodes in following:
            for command in walk(nodes):
                if info.out in self._assigned(command) and self._redefines(command, info.out):
                    break
                if command.name not in ("message", "if", "elseif") and any(
                    reference in a.value for a in command.args
                ):
                    uses.append(command)
            else:
                continue
            break
        for command in uses[:3]:
            info.evidence.append(Evidence(f"used by {truncate(command.render())}", self.path, command.line))
        if not uses:
            info.evidence.append(Evidence(f"no if({info.out}) or use of it follows", self.path, None))

    @staticmethod
    def _tests_out(arg: Argument, out: str) -> bool:
        return (
            arg.value == out
            if arg.quoting == "unquoted" and "$" not in arg.value
            else arg.value == "${" + out + "}"
        )

    def _attach(self, info: Intersection, block: IfBlock, k: int) -> None:
        branch = block.branches[k]
        info.branch = branch
        self.consumers.setdefault(id(block), []).append(info)
        cond = parse_condition(branch.head.args)
        marker = ArchSet.from_mask(1)  # any non-trivial set: only the polarity is read back

        def atom(c: Cond) -> tuple[ArchSet, bool, str | None] | None:
            if len(c.args) == 1 and self._tests_out(c.args[0], info.out):
                return marker, False, info.out
            return None

        test = evaluate_arch(cond, atom, self.note) if cond is not None else None
        info.negated = test is not None and test.admitted == ~marker
        if test is not None:
            info.deps.extend(test.deps)
        for earlier in block.branches[:k]:
            info.deps.append(self.earlier(earlier, display(earlier.head.args)))
        built = [branch]
        otherwise = block.branches[k + 1 :]
        if info.negated:
            built, otherwise = otherwise, [branch]
        summary = self.summarize_block((n for b in built for n in b.body), [b.head for b in built[1:]])
        what = info.src.value
        where = built[0].head.line if built else branch.head.line
        if summary.sources:
            info.evidence.append(Evidence(f"builds {shorten(summary.sources)} for {what}", self.path, where))
        if summary.defines:
            info.evidence.append(Evidence(f"adds {shorten(summary.defines)}", self.path, where))
        if summary.sources or summary.defines:
            info.builds = (self.target(what, summary, where),)
        info.passes = tuple(summary.flags)
        rest = summarize(n for b in otherwise for n in b.body)
        for mode, text, line in rest.messages:
            info.evidence.append(Evidence(f"otherwise message({mode}): {text}", self.path, line))
        info.else_kind = ElseKind.ERROR if rest.fatal else ElseKind.NONE
        if info.negated:
            # if(NOT OUT): the sources are built in the branches after this one.
            info.then_span = Span(built[0].head.end_line + 1, built[-1].last_line) if built else None
            info.else_span = Span(branch.head.line, branch.last_line)
        else:
            body_end = branch.last_line
            info.then_span = (
                Span(branch.head.end_line + 1, body_end) if body_end > branch.head.end_line else None
            )
            info.else_span = Span(otherwise[0].head.line, block.end_line) if otherwise else None

    def intersection_gate(self, info: Intersection, frames: tuple[Frame, ...]) -> None:
        src = info.src
        items = list_items(substitute(src.value, self.bindings(frames)))
        literal = [i for i in items if not references(i)]
        refs = [r for i in items for r in references(i)]
        if not literal:
            if not any(r in self.definitions for r in refs) and not any(f.in_function for f in frames):
                self.skip(
                    info.command.line,
                    f"{info.command.name}: the source arch list {src.raw} is not set in this file",
                )
            return  # the arch lists it takes are gates where they are set
        entries = [parse_entry(i, info.style) for i in literal]
        bad = [i for i, e in zip(literal, entries, strict=True) if e is None]
        good = [e for e in entries if e is not None]
        if bad:
            self.skip(
                info.command.line, f"{info.command.name}: no known CUDA architecture is named {shorten(bad)}"
            )
        if not good:
            return
        admitted = ArchSet.none()
        for entry in good:
            admitted |= admitted_by(entry, info.style)
        unknown = (
            ~admitted if any(r not in self.definitions for r in refs) or info.extensions else ArchSet.none()
        )
        helper = (
            "vLLM's cuda_archs_loose_intersection (cmake/utils.cmake): each built arch takes the highest entry "
            "not above it of the same major (any major with +PTX); X.Ya only when X.Y is built, X.Yf also "
            "for a later arch of its family"
            if info.style == "loose"
            else "cuda_archs_intersection: the entries the build also asks for"
        )
        evidence = [
            Evidence(helper, self.path, info.command.line),
            Evidence(
                "; ".join(describe_entry(e, info.style) for e in good[:SHOWN_ITEMS]),
                self.path,
                info.command.line,
            ),
            *info.evidence,
        ]
        gate = self.new_gate(
            info.command,
            frames,
            admitted,
            unknown,
            evidence=evidence,
            depends_on=[
                *info.deps,
                *(f"the contents of {r}, not set in this file" for r in refs if r not in self.definitions),
                *extension_deps(info),
            ],
            confidence=Confidence.INFERRED if unknown else Confidence.EXACT,
            else_kind=info.else_kind,
            then_span=info.then_span,
            else_span=info.else_span,
            builds=info.builds,
            passes=info.passes,
        )
        info.gate = gate.id if gate else None
