"""Py-build gate drafts, and the gates they become once the file is read."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from liftgate.arch.core import ArchSet
from liftgate.detect.interface import GateSink
from liftgate.detect.pybuild_passes import FLAG_GATE_DIRECTIVES, FlagPasses
from liftgate.model import Confidence, ElseKind, Evidence, Gate, GateKind, Skip, Span, Switch


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


@dataclass
class Draft:
    """A gate before its id: what it is, where, and what it admits."""

    node: ast.AST
    span: Span
    directive: str
    admitted: ArchSet
    else_kind: ElseKind = ElseKind.NONE
    confidence: Confidence = Confidence.EXACT
    evidence: list[Evidence] = field(default_factory=list)
    depends_on: tuple[str, ...] = ()
    unknown: ArchSet = field(default_factory=ArchSet.none)
    then_span: Span | None = None
    else_span: Span | None = None
    condition: str | None = None  # when the construct is not one node (a dict entry)
    normalized: str | None = None
    switches: tuple[Switch, ...] = ()  # an environment switch off by default that would open it


class GateDrafts(FlagPasses):
    """The drafts and skips of one file, and the gates the drafts become (with the builds they guard)."""

    def __init__(self, package: str, version: str | None, path: str, text: str, tree: ast.Module) -> None:
        super().__init__(package, version, path, text, tree)
        self.drafts: list[Draft] = []
        self.skips: list[Skip] = []

    def _gates(self) -> tuple[Gate, ...]:
        """The drafts as gates, in source order, each with the `BuildTarget` facts behind its evidence."""
        sink = GateSink(GateKind.PY_BUILD, self.package, self.version, self.path)
        for draft in sorted(self.drafts, key=lambda d: (d.span.start, _position(d.node))):
            scope = self._scope(draft.node)
            normalized = draft.normalized or ast.unparse(draft.node)
            evidence = tuple(dict.fromkeys(draft.evidence))
            sink.gate(
                sink.identify(normalized, scope),
                span=draft.span,
                condition=draft.condition or self._source(draft.node),
                admitted=draft.admitted,
                unknown=draft.unknown,
                then_span=draft.then_span,
                else_span=draft.else_span,
                else_kind=draft.else_kind,
                confidence=draft.confidence,
                evidence=evidence,
                depends_on=draft.depends_on,
                directive=draft.directive,
                builds=tuple(dict.fromkeys(self.built[e] for e in evidence if e in self.built)),
                switches=draft.switches,
                passes=self._passed_flags(draft.node) if draft.directive in FLAG_GATE_DIRECTIVES else (),
            )
        return tuple(sink.gates)
