"""The build-flag link: host code compiled only under a ``-D`` flag, tied to the CMake gates that pass it.

vLLM's ``if (version_num >= 100 && version_num < 120)`` sits inside ``#if defined
ENABLE_SCALED_MM_SM100``; CMake appends ``-DENABLE_SCALED_MM_SM100=1`` only inside the block of
a ``cuda_archs_loose_intersection`` gate. The host gate (its `Gate.build_macros` fact) then lists
that CMake gate (whose `Gate.passes` fact holds the flag) as an enclosing gate, with the flag's
line as evidence. A cross-detector step: it runs after every detector, over all their gates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from liftgate.model import BuildFlag, Evidence, Gate, GateKind


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
