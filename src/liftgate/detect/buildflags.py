"""Build flags as arch facts: ``-D`` flags a package's build passes only for some targets.

Two uses. `arch_flags` reads, before the C-family files are analysed, which macros the package's
CMake files pass only inside the block of an arch gate (``list(APPEND VLLM_GPU_FLAGS
"-DENABLE_NVFP4_SM120=1")`` under ``if(FP4_SM120_ARCHS)``): such a macro is defined exactly for
the targets that gate admits (in a build for that target), so the preprocessor detector reads
``#if defined ENABLE_NVFP4_SM120 && ENABLE_NVFP4_SM120`` as a cuda-pp gate with that admitted set.

`link_build_flags`, the build-flag link: host code compiled only under a ``-D`` flag, tied to the
CMake gates that pass it.

vLLM's ``if (version_num >= 100 && version_num < 120)`` sits inside ``#if defined
ENABLE_SCALED_MM_SM100``; CMake appends ``-DENABLE_SCALED_MM_SM100=1`` only inside the block of
a ``cuda_archs_loose_intersection`` gate. The host gate (its `Gate.build_macros` fact) then lists
that CMake gate (whose `Gate.passes` fact holds the flag) as an enclosing gate, with the flag's
line as evidence. A cross-detector step: it runs after every detector, over all their gates.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from liftgate.arch.core import ArchSet
from liftgate.model import BuildFlag, Evidence, Gate, GateKind


@dataclass(frozen=True, slots=True)
class FlagSetter:
    """One place a build passes a flag: the gate whose admitted block (a CMake gate) or whose arch
    flags (a py-build gate: a JIT filter, an arch flag list) it is passed with, and the flag."""

    gate: str  # the gate's id
    condition: str  # the gate's condition
    flag: BuildFlag
    kind: GateKind = GateKind.CMAKE

    @property
    def described(self) -> str:
        """The gate for people: "CMake gate cm-…" or "py-build gate pb-…"."""
        return (
            f"{self.kind.value} gate {self.gate}"
            if self.kind is not GateKind.CMAKE
            else f"CMake gate {self.gate}"
        )


@dataclass(frozen=True, slots=True)
class ArchFlag:
    """A ``-D`` flag the package's build passes only where some build gate admits the target.

    In a build for target T the macro is defined (to ``value``) when T is in ``admitted``, may or
    may not be when T is in ``unknown``, and is undefined otherwise. ``setters`` are every place
    that passes it, each inside the admitted block of an arch gate.
    """

    macro: str
    value: str
    admitted: ArchSet
    unknown: ArchSet
    setters: tuple[FlagSetter, ...]


def lines_of(text: str, offsets: Iterable[int]) -> list[int]:
    """The 1-based lines of increasing ``offsets`` in ``text``, in one pass (a file with a hundred
    thousand matches must not count its newlines again for each)."""
    out: list[int] = []
    line, at = 1, 0
    for offset in offsets:
        line += text.count("\n", at, offset)
        at = offset
        out.append(line)
    return out


_DASH_D = re.compile(r"-D[ \t]*([A-Za-z_]\w*)")
_DEFINITIONS = re.compile(r"(?:compile_definitions\s*\(|define_macros\s*=)[^)\]]*")
_WORD = re.compile(r"[A-Za-z_]\w*")
# CMake block commands, for the conditions a line sits under (`_conditions_at`).
_BLOCK = re.compile(r"(?im)^[ \t]*(if|elseif|else|endif)[ \t]*\(")
_INTERSECTION = re.compile(r"cuda_archs_loose_intersection\s*\(\s*([A-Za-z_]\w*)")
# What may stand beside the gate's variable in the if() that passes the flag: AND and the
# toolkit's version test the CMake detector decides (vLLM's `${CMAKE_CUDA_COMPILER_VERSION}
# VERSION_GREATER_EQUAL 12.8 AND FP4_SM120_ARCHS`).
_ALLOWED_BESIDE = frozenset(
    {"AND", "CMAKE_CUDA_COMPILER_VERSION", "CUDA_VERSION", "CUDAToolkit_VERSION", "VERSION_GREATER_EQUAL",
     "VERSION_GREATER", "VERSION_LESS", "VERSION_LESS_EQUAL", "VERSION_EQUAL"}
)  # fmt: skip


def _conditions_at(text: str, offsets: Sequence[int]) -> list[list[tuple[str, str]]]:
    """For each of the increasing ``offsets``: the CMake blocks open there, outermost first, as
    (command, condition) — ``else`` with an empty condition. One pass over the text."""
    events: list[tuple[int, str, str]] = []
    for m in _BLOCK.finditer(text):
        depth, k = 1, m.end()
        while k < len(text) and depth:
            c = text[k]
            depth += c == "("
            depth -= c == ")"
            k += 1
        events.append((m.start(), m.group(1).lower(), text[m.end() : k - 1]))
    out: list[list[tuple[str, str]]] = []
    stack: list[tuple[str, str]] = []
    e = 0
    for offset in offsets:
        while e < len(events) and events[e][0] < offset:
            _, command, condition = events[e]
            e += 1
            if command == "if":
                stack.append(("if", condition))
            elif command in ("elseif", "else") and stack:
                stack[-1] = (command, condition)
            elif command == "endif" and stack:
                stack.pop()
        out.append(list(stack))
    return out


def _variable(gate: Gate) -> str:
    """The arch list a CMake gate computes (``FP4_SM120_ARCHS``), or "" when it is not an intersection."""
    m = _INTERSECTION.match(gate.condition)
    return m.group(1) if m is not None else ""


def _only_its_gate(variable: str, blocks: list[tuple[str, str]], outs: frozenset[str]) -> bool:
    """Whether the blocks a ``-D`` sits in make it depend on the one gate's variable alone: the
    innermost is ``if(<toolkit test> AND VARIABLE)``, and no block tests another arch list (a
    flag in ``if(SM90_ARCHS)`` and ``if(SM100_ARCHS)`` at once is defined for neither alone)."""
    if not variable or not blocks or blocks[-1][0] != "if":
        return False
    words = _WORD.findall(blocks[-1][1])
    if variable not in words or any(w not in _ALLOWED_BESIDE and w != variable for w in words):
        return False
    return not any(w in outs for _, condition in blocks[:-1] for w in _WORD.findall(condition))


def arch_flags(
    cmake_gates: Mapping[str, Sequence[Gate]],
    build_texts: Mapping[str, str],
    source_defines: Iterable[str],
    *,
    python_computes_names: bool = False,
) -> tuple[ArchFlag, ...]:
    """The macros a package's build passes only for some targets.

    ``cmake_gates`` are the build gates of each build file of the package (by path): CMake gates,
    and py-build gates whose ``passes`` list the ``-D`` flags that travel with their arch flags
    (`liftgate.detect.pybuild_passes`); ``build_texts`` is the text of every build file that may
    pass a ``-D`` (CMake, ``setup.py``, JIT builders …, by path); ``source_defines`` are the macros
    the package's C-family files ``#define`` themselves; ``python_computes_names`` says that some
    Python build file computes the name of a ``-D`` (``f"-D{name}"``), so no flag that only
    py-build gates account for qualifies (that file may pass it anywhere). A macro passed twice on
    one line does not qualify either (lines, not columns, are compared).

    A macro qualifies only when every place any build file passes it is a ``-DNAME`` a gate
    accounts for: inside the admitted block of a CMake arch gate, in an ``if()`` on that gate's
    variable alone (with the toolkit's version beside it at most, and no other arch list around
    it), or beside a py-build gate's arch flags with nothing that can separate them: one more ``-DNAME``
    (unconditional, in another build file, a comment), a ``compile_definitions``/``define_macros``
    naming it, or a ``#define`` of it in the sources, and it stays what it was: set by the build
    for every target, unknown. Each text is read once.
    """
    setters: dict[str, dict[tuple[str, int], FlagSetter]] = {}
    for path in sorted(cmake_gates):
        for g in cmake_gates[path]:
            if g.kind not in (GateKind.CMAKE, GateKind.PY_BUILD):
                continue
            for flag in g.passes:
                setters.setdefault(flag.macro, {}).setdefault(
                    (flag.path, flag.line), FlagSetter(g.id, g.condition, flag, g.kind)
                )
    if not setters:
        return ()
    by_id = {g.id: g for gs in cmake_gates.values() for g in gs}
    # Every -D of every build text, by macro and line, with the blocks around it; and the macros
    # named in compile_definitions/define_macros. One pass each.
    passed_at: dict[str, dict[str, set[int]]] = {}
    twice: set[str] = set()  # macros passed twice on one line
    blocks_at: dict[tuple[str, int], list[tuple[str, str]]] = {}
    listed: set[str] = set()
    outs: dict[str, frozenset[str]] = {}
    for path in sorted(build_texts):
        text = build_texts[path]
        matches = list(_DASH_D.finditer(text))
        lines = lines_of(text, (m.start() for m in matches))
        for m, line in zip(matches, lines, strict=True):
            seen = passed_at.setdefault(m.group(1), {}).setdefault(path, set())
            if line in seen:
                twice.add(m.group(1))
            seen.add(line)
        if path in cmake_gates:
            outs[path] = frozenset(_INTERSECTION.findall(text))
            for line, blocks in zip(lines, _conditions_at(text, [m.start() for m in matches]), strict=True):
                blocks_at.setdefault((path, line), blocks)
        for m in _DEFINITIONS.finditer(text):
            listed.update(_WORD.findall(m.group(0)))
    defined_in_sources = set(source_defines)
    out: list[ArchFlag] = []
    for macro in sorted(setters):
        if macro in defined_in_sources or macro in listed or macro in twice:
            continue
        found = setters[macro]
        if python_computes_names and any(s.kind is GateKind.PY_BUILD for s in found.values()):
            continue
        where = passed_at.get(macro, {})
        gated: dict[str, set[int]] = {}
        for p, line in found:
            gated.setdefault(p, set()).add(line)
        if where != gated:  # a -D the gates do not account for
            continue
        if not all(
            s.kind is GateKind.PY_BUILD  # the py-build detector checked what may separate them
            or _only_its_gate(_variable(by_id[s.gate]), blocks_at.get(key, []), outs.get(key[0], frozenset()))
            for key, s in found.items()
        ):
            continue
        admitted = ArchSet.none()
        unknown = ArchSet.none()
        values = {s.flag.value for s in found.values()}
        for s in found.values():
            g = by_id[s.gate]
            admitted = admitted | g.admitted
            unknown = unknown | g.unknown
        if len(values) != 1:
            continue  # passed with different values: which one a target gets is not read
        (value,) = values
        out.append(
            ArchFlag(
                macro,
                value if value is not None else "1",
                admitted,
                unknown - admitted,
                tuple(found[k] for k in sorted(found)),
            )
        )
    return tuple(out)


def link_build_flags(gates: Sequence[Gate]) -> list[Gate]:
    """``gates`` with each cpp-runtime gate compiled under a flag some CMake gate passes linked to it."""
    wanted: dict[tuple[str, str], list[int]] = {}
    for k, g in enumerate(gates):
        if g.kind is GateKind.CPP_RUNTIME:
            for macro in g.build_macros:
                wanted.setdefault((g.location.package, macro), []).append(k)
    out = list(gates)
    if not wanted:
        return out
    setters: dict[tuple[str, str], list[tuple[Gate, BuildFlag]]] = {}
    for cg in gates:
        if cg.kind is not GateKind.CMAKE:
            continue
        for flag in cg.passes:
            key = (cg.location.package, flag.macro)
            if key in wanted and (cg, flag) not in setters.get(key, []):
                setters.setdefault(key, []).append((cg, flag))
    for key, indexes in wanted.items():
        found = sorted(
            setters.get(key, ()), key=lambda s: (s[0].location.path, s[0].location.span.start, s[1].line)
        )
        if not found:
            continue
        for k in indexes:
            g = out[k]
            evidence = [
                Evidence(
                    f"{key[1]} is passed by the build (-D{key[1]}) only where CMake gate {cg.id} "
                    f"admits the target: {cg.condition}",
                    flag.path,
                    flag.line,
                    outcome=True,
                )
                for cg, flag in found
            ]
            enclosing = tuple(dict.fromkeys([*(cg.id for cg, _ in found), *g.enclosing]))
            out[k] = replace(g, evidence=tuple(dict.fromkeys([*g.evidence, *evidence])), enclosing=enclosing)
    return out
