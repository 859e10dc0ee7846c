"""What an ``if()`` condition of a CMake file says: its arch part, and tests of the CUDA toolkit's version.

`evaluate_arch` reads the arch part of a condition tree through an atom callback (the analysis
in `liftgate.detect.cmake_rules` knows which variables are arch lists); `Toolkit` decides tests of
the toolkit's version for an assumed ``major.minor``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from liftgate.arch.core import ArchSet
from liftgate.detect.cmake_syntax import Argument, Cond, Node, walk


@dataclass
class ArchTest:
    """The arch part of a condition: targets for which it holds, and what was assumed of the rest."""

    admitted: ArchSet
    deps: list[str]
    inferred: bool
    tests: int  # arch tests proper (IN_LIST, MATCHES, STREQUAL on an arch list)


AtomFn = Callable[[Cond], "tuple[ArchSet, bool, str | None] | None"]
NoteFn = Callable[[Cond, bool], "str | None"]


def evaluate_arch(cond: Cond, atom: AtomFn, note: NoteFn | None = None) -> ArchTest | None:
    """The arch part of ``cond``, None when it has none.

    Parts that are not about the architecture take the value that lets the arch part decide:
    true under AND, false under OR; each is recorded with that assumption (``note`` words it
    when it can, e.g. for a toolkit-version test that the assumed toolkit decides).
    """
    if cond.op == "atom":
        found = atom(cond)
        if found is None:
            return None
        admitted, inferred, out = found
        return ArchTest(admitted, [], inferred, 0 if out else 1)
    if cond.op == "not":
        inner = evaluate_arch(cond.children[0], atom, note)
        if inner is None:
            return None
        inner.admitted = ~inner.admitted
        return inner
    results = [evaluate_arch(child, atom, note) for child in cond.children]
    arch_parts = [r for r in results if r is not None]
    if not arch_parts:
        return None
    admitted = arch_parts[0].admitted
    for part in arch_parts[1:]:
        admitted = admitted & part.admitted if cond.op == "and" else admitted | part.admitted
    deps: list[str] = []
    for child, result in zip(cond.children, results, strict=True):
        if result is None:
            noted = note(child, cond.op == "and") if note else None
            deps.append(noted or (child.text if cond.op == "and" else f"NOT ({child.text})"))
        else:
            deps.extend(result.deps)
    return ArchTest(
        admitted,
        deps,
        any(p.inferred for p in arch_parts),
        sum(p.tests for p in arch_parts),
    )


# --------------------------------------------------------------------------------------------
# Toolkit-version conditions
# --------------------------------------------------------------------------------------------

DEFAULT_CUDA_VERSION = (13, 0)
_TOOLKIT_VERSIONS = ("CMAKE_CUDA_COMPILER_VERSION", "CUDA_VERSION", "CUDAToolkit_VERSION")
_TOOLKIT_PARTS: dict[str, Literal["full", "major", "minor"]] = {
    **{name: "full" for name in _TOOLKIT_VERSIONS},
    **{f"{name}_MAJOR": "major" for name in _TOOLKIT_VERSIONS},
    **{f"{name}_MINOR": "minor" for name in _TOOLKIT_VERSIONS},
}
# The orderings (toolkit vs literal: -1, 0, 1) for which each comparison holds.
_ORDERINGS: dict[str, frozenset[int]] = {
    "LESS": frozenset({-1}),
    "GREATER": frozenset({1}),
    "EQUAL": frozenset({0}),
    "LESS_EQUAL": frozenset({-1, 0}),
    "GREATER_EQUAL": frozenset({0, 1}),
}
_FLIPPED = {
    "LESS": "GREATER",
    "GREATER": "LESS",
    "LESS_EQUAL": "GREATER_EQUAL",
    "GREATER_EQUAL": "LESS_EQUAL",
}
_VERSION_LITERAL = re.compile(r"^[0-9]+(?:\.[0-9]+)*$")
_NUMBER_LITERAL = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
_WHOLE_REF = re.compile(r"^\$\{(\w+)\}$")


def _sign(a: float, b: float) -> int:
    return (a > b) - (a < b)


class Toolkit:
    """Evaluates ``if()`` conditions on the CUDA toolkit version under an assumed ``major.minor``.

    Only comparisons of ``CMAKE_CUDA_COMPILER_VERSION``, ``CUDA_VERSION`` or ``CUDAToolkit_VERSION``
    (or their ``_MAJOR``/``_MINOR``) with a literal number, and ``DEFINED`` of them, are read; a
    variable the file sets itself is not. The patch level is unknown (nvcc 13.0 is 13.0.x), so
    ``VERSION_GREATER 13.0`` is not decided under 13.0 while ``VERSION_GREATER_EQUAL 13.0`` is.
    """

    def __init__(self, cuda_version: tuple[int, int], nodes: list[Node]) -> None:
        self.cuda_version = cuda_version
        self.prefix = f"assumes CUDA {cuda_version[0]}.{cuda_version[1]}"
        self.own: set[str] = set()  # toolkit variables the file sets itself: not evaluated
        for command in walk(nodes):
            if command.name in ("set", "unset", "list", "string", "math"):
                self.own.update(a.value for a in command.args[:2] if a.value in _TOOLKIT_PARTS)

    def _variable(self, arg: Argument) -> str | None:
        if arg.quoting == "bracket":
            return None
        match = _WHOLE_REF.match(arg.value)
        name = match.group(1) if match else arg.value if arg.quoting == "unquoted" else None
        return name if name in _TOOLKIT_PARTS and name not in self.own else None

    def _orderings(self, part: str, literal: str, version: bool) -> frozenset[int] | None:
        """The possible orderings of the toolkit's ``part`` against ``literal``, None if unreadable."""
        major, minor = self.cuda_version
        if part == "full":
            if not version or not _VERSION_LITERAL.match(literal):
                return None
            items = [int(x) for x in literal.split(".")]
            head = (items[0], items[1] if len(items) > 1 else 0)
            if (major, minor) != head:
                return frozenset({1 if (major, minor) > head else -1})
            # Equal up to the minor: the patch level is unknown (0 or more).
            return frozenset({0, 1}) if not any(items[2:]) else frozenset({-1, 0, 1})
        value = major if part == "major" else minor
        if version:
            if not _VERSION_LITERAL.match(literal):
                return None
            items = [int(x) for x in literal.split(".")]
            first = _sign(value, items[0])
            return frozenset({first if first or not any(items[1:]) else -1})
        if not _NUMBER_LITERAL.match(literal):
            return None
        return frozenset({_sign(value, float(literal))})

    def atom(self, cond: Cond) -> bool | None:
        args = cond.args
        if len(args) == 2 and args[0].is_word("DEFINED"):
            return True if args[1].quoting == "unquoted" and self._variable(args[1]) else None
        if len(args) != 3 or args[1].quoting != "unquoted":
            return None
        left, op, right = args[0], args[1].value, args[2]
        version = op.startswith("VERSION_")
        op = op.removeprefix("VERSION_")
        if op not in _ORDERINGS:
            return None
        name = self._variable(left)
        literal = right
        if name is None:
            name, literal, op = self._variable(right), left, _FLIPPED.get(op, op)
        if name is None or literal.has_reference:
            return None
        possible = self._orderings(_TOOLKIT_PARTS[name], literal.value, version)
        if possible is None:
            return None
        holds = _ORDERINGS[op]
        return True if possible <= holds else False if not possible & holds else None

    def value(self, cond: Cond) -> bool | None:
        """True or False when the toolkit decides ``cond``, None when it does not."""
        if cond.op == "atom":
            return self.atom(cond)
        if cond.op == "not":
            inner = self.value(cond.children[0])
            return None if inner is None else not inner
        values = [self.value(c) for c in cond.children]
        decisive = cond.op == "or"  # the value that decides an OR (True) or an AND (False)
        if decisive in values:
            return decisive
        return None if None in values else not decisive

    def note(self, cond: Cond, want: bool) -> str | None:
        """The assumption that ``cond`` has the value ``want``, when the toolkit decides it so."""
        if self.value(cond) is not want:
            return None
        return f"{self.prefix}: {cond.text} is {'true' if want else 'false'}"
