"""The CMake detector: which CUDA compilation targets a ``CMakeLists.txt`` or ``*.cmake`` lets through.

A small but real CMake tokenizer splits a file into command invocations (unquoted, quoted and
bracket arguments, ``#`` and ``#[[ ]]`` comments, ``${VAR}`` references, arguments over several
lines), and a block builder nests them under ``if``/``elseif``/``else``, ``function``, ``macro``,
``foreach``, ``while`` and ``block``. Gates are the constructs that decide the targets CUDA code is
built for: arch lists (``CMAKE_CUDA_ARCHITECTURES``, ``TORCH_CUDA_ARCH_LIST``, ``*_ARCHS``
variables, the ``CUDA_ARCHITECTURES`` property), ``-gencode``/``-arch`` flags, vLLM's
``cuda_archs_loose_intersection`` together with the ``if(OUT)`` block that builds its sources,
and ``if()`` tests on an arch list (``"90a" IN_LIST CUDA_ARCHS``). Conditions that are not about
the architecture (the CUDA version, the GPU language) are not gates; they guard gates and are
recorded in the gate's ``depends_on``, each entry a CMake condition assumed true. Tests of the
CUDA toolkit's version are evaluated for an assumed toolkit (`Toolkit`): a branch it never takes
gates nothing and defines no arch list; one it decides is recorded as ``assumes CUDA 13.0: … is true``.

What an entry admits (compile-target semantics, the same targets the CUDA detector's lanes use):

* SASS for ``sm_XX`` admits exactly the baseline target ``sm_XX``; ``sm_XXa`` admits exactly
  ``sm_XXa``; ``sm_XXf`` admits the ``f`` targets of its family from ``XX`` up (``data/archs.json``:
  ``100f`` admits ``sm_100f`` and ``sm_103f``).
* PTX for a baseline ``compute_XX`` admits every baseline target from ``XX`` up: the driver
  JIT-compiles it on later GPUs. Arch-specific (``a``) PTX runs only on its own arch, family
  (``f``) PTX only within its family, so they admit what their SASS admits.
* CMake list entries (``CMAKE_CUDA_ARCHITECTURES``, ``CUDA_ARCHITECTURES``): ``90`` is SASS and
  PTX, ``90-real`` SASS only, ``90-virtual`` PTX only. Torch-style entries (``TORCH_CUDA_ARCH_LIST``,
  dotted ``9.0`` lists) are SASS only unless ``+PTX``. ``all`` and ``all-major`` depend on the
  toolkit (taken as the known universe), ``native`` on the build machine's GPUs and ``OFF`` on
  nvcc's default: those targets are unknown.
* vLLM's ``cuda_archs_loose_intersection(OUT SRC TGT)`` (vllm ``cmake/utils.cmake``): for every
  arch ``x`` in the build's list TGT it picks the highest ``y`` in SRC with ``y <= x`` and the same
  major (any major for ``y+PTX``); an ``X.Ya`` entry is picked only when ``X.Y`` itself is in TGT,
  an ``X.Yf`` entry also for a later arch of its family (vLLM 0.34's "family fallback"; older
  releases took ``X.Yf`` only for ``X.Y``). TGT holds the capabilities the build asks for, whatever
  variant the user spelled, so a SRC entry admits every target (all variants) of each capability
  whose build gets code that runs on it: ``9.0a`` admits capability 9.0, ``12.0f`` 12.0 and 12.1,
  ``8.0`` 8.0–8.9 (SASS is binary compatible within a major), ``9.0+PTX`` every capability from
  9.0 up. A SRC list set earlier in the file and passed as ``"${VAR}"`` is gated where it is set.

A construct that lets every known target through gates nothing and is not reported. Entries
that depend on what liftgate cannot see (``${VAR}`` set elsewhere, generator expressions, a
result that later code extends) leave the other targets *unknown* rather than excluded.

Hostile files are bounded: blocks nested deeper than `MAX_NESTING` make the file a `Skip` (the
analysis links commands across blocks, so the rest could not be read correctly either), a
condition nested deeper than `MAX_CONDITION_DEPTH` is not parsed, a command with more than
`MAX_ARGUMENTS` arguments is not read, and at most `MAX_PROBLEMS` syntax problems are listed.

The syntax (tokenizer, blocks, ``if()`` conditions) is in `liftgate.detect.cmake_syntax`, the
entries and what they admit in `liftgate.detect.cmake_archs`, the arch part of a condition and
the toolkit's version tests in `liftgate.detect.cmake_conditions`. The analysis is in passes:
`liftgate.detect.cmake_gates` records gates and skips and prunes the branches the assumed toolkit
never takes, `liftgate.detect.cmake_intersections` surveys the arch lists and vLLM's intersection
helper, `liftgate.detect.cmake_rules` holds the gates of lists, flags and ``if()`` tests, and
`liftgate.detect.cmake_summary` what a block builds; this module walks the blocks and drives them.
Besides the evidence, a gate carries typed facts: ``builds`` (a `BuildTarget` with every source
its admitted block builds) and ``passes`` (each ``-DNAME[=VALUE]`` the block passes, a `BuildFlag`).
"""

from __future__ import annotations

import posixpath
import re

from liftgate.arch.core import ArchSet
from liftgate.detect.cmake_archs import (
    ArchEntry,
    compile_admitted,
    exact_admitted,
    loose_admitted,
    parse_entry,
    special_admitted,
)
from liftgate.detect.cmake_conditions import DEFAULT_CUDA_VERSION, Toolkit, evaluate_arch
from liftgate.detect.cmake_gates import Frame
from liftgate.detect.cmake_names import FLAG_HINT, defined_variable, is_arch_variable, truncate
from liftgate.detect.cmake_rules import GateRules
from liftgate.detect.cmake_summary import build_flags
from liftgate.detect.cmake_syntax import (
    MAX_ARGUMENTS,
    MAX_CONDITION_DEPTH,
    MAX_NESTING,
    Argument,
    Branch,
    Command,
    Cond,
    IfBlock,
    Node,
    Scope,
    TooDeep,
    build_blocks,
    display,
    list_items,
    parse_condition,
    tokenize,
)
from liftgate.detect.interface import Detection, not_analysed
from liftgate.model import Skip

__all__ = [
    "CMAKE_PREFILTER",
    "DEFAULT_CUDA_VERSION",
    "MAX_ARGUMENTS",
    "MAX_CONDITION_DEPTH",
    "MAX_NESTING",
    "MAX_PROBLEMS",
    "ArchEntry",
    "Argument",
    "Branch",
    "Command",
    "Cond",
    "IfBlock",
    "Node",
    "Scope",
    "build_blocks",
    "build_flags",
    "compile_admitted",
    "detect_cmake",
    "exact_admitted",
    "is_arch_variable",
    "is_cmake_file",
    "loose_admitted",
    "parse_condition",
    "parse_entry",
    "special_admitted",
    "tokenize",
]

# The condition text of a parsed condition, under its former private name (tests build conditions with it).
_display = display


# Every construct this detector reports names an architecture through a word containing "arch":
# CUDA_ARCHITECTURES, *_ARCHS, TORCH_CUDA_ARCH_LIST, -gencode arch=…, -arch=…, cuda_archs_*().
CMAKE_PREFILTER: re.Pattern[bytes] = re.compile(rb"(?i)arch")


def is_cmake_file(path: str) -> bool:
    """``CMakeLists.txt`` in any directory, and ``*.cmake`` modules."""
    name = posixpath.basename(path.replace("\\", "/")).lower()
    return name == "cmakelists.txt" or name.endswith(".cmake")


MAX_PROBLEMS = 100  # syntax problems listed per file


# --------------------------------------------------------------------------------------------
# The analysis: pass 2 walks the blocks
# --------------------------------------------------------------------------------------------


class _Analyzer(GateRules):
    """The analysis of one file: prune (pass 0), survey (pass 1), then visit the blocks for gates."""

    # -- pass 2: gates -----------------------------------------------------------------------

    def visit(self, nodes: list[Node], frames: tuple[Frame, ...]) -> None:
        for node in nodes:
            if isinstance(node, Command):
                self.command(node, frames)
            elif isinstance(node, IfBlock):
                self.if_block(node, frames)
            else:
                self.visit(node.body, (*frames, self.scope_frame(node, frames)))

    def scope_frame(self, scope: Scope, frames: tuple[Frame, ...]) -> Frame:
        head = scope.head
        in_function = any(f.in_function for f in frames) or head.name in ("function", "macro")
        bindings = dict(frames[-1].bindings) if frames else {}
        if head.name == "foreach" and len(head.args) > 1 and not head.args[1].is_word("RANGE"):
            # foreach(ARCH 80 90) / foreach(ARCH IN ITEMS 80 90): ${ARCH} in the body takes each item.
            items = head.args[1:]
            if items[0].is_word("IN"):
                items = items[2:] if len(items) > 1 and items[1].is_word("ITEMS") else ()
            if items and not any(a.has_reference for a in items):
                bindings[head.args[0].value] = tuple(list_items(a.value for a in items))
        if head.name in ("function", "macro"):
            label = f"{head.name} {head.args[0].value if head.args else ''}"
        else:
            label = head.render()
        return Frame(label, (), (), in_function, tuple(bindings.items()))

    def if_block(self, block: IfBlock, frames: tuple[Frame, ...]) -> None:
        consumers = self.consumers.get(id(block), [])
        parent = frames[-1] if frames else Frame("", (), ())
        earlier: list[str] = []  # the assumptions that the earlier branches were not taken
        earlier_arch = ArchSet.none()
        for k, branch in enumerate(block.branches):
            if id(branch) in self.untaken:
                # Never taken under the assumed toolkit: no gate, nothing under it is visited.
                if id(branch) in self.decided:
                    earlier.append(self.earlier(branch, display(branch.head.args)))
                continue
            head = branch.head
            label = head.render() if head.name != "else" else f"else() of {block.branches[0].head.render()}"
            deps = list(earlier)
            gate_refs: tuple[str, ...] = ()
            tested = [c for c in consumers if c.branch is branch]
            cond = parse_condition(head.args) if head.name != "else" else None
            if head.name == "else":
                pass
            elif id(branch) in self.decided and cond is not None:
                # Taken under the assumed toolkit (an untaken one was skipped above): not a gate.
                deps.append(self.note(cond, True) or cond.text)
            elif tested:
                # if(CUDA_VERSION … AND OUT): the intersection(s) above are the gate of this branch.
                gate_refs = tuple(c.gate for c in tested if c.gate)
                deps = list(tested[0].deps)
            else:
                if cond is None:
                    if any(self._mentions_arch(a) for a in head.args):
                        self.skip(head.line, f"cannot parse the condition of {truncate(head.render())}")
                    earlier.append(f"NOT ({display(head.args)})")
                    deps.append(display(head.args))
                else:
                    test = evaluate_arch(cond, self.arch_atom, self.note)
                    if test is None or test.tests == 0:
                        earlier.append(f"NOT ({cond.text})")
                        deps.extend(self.and_parts(cond))
                    else:
                        admitted = test.admitted - earlier_arch
                        earlier_arch |= test.admitted
                        gate = self.if_gate(block, k, admitted, test, deps, frames)
                        gate_refs = (gate.id,) if gate else ()
                        deps = [*deps, *test.deps]
            frame = Frame(label, gate_refs, tuple(deps), parent.in_function, parent.bindings)
            self.visit(branch.body, (*frames, frame))

    @staticmethod
    def _mentions_arch(arg: Argument) -> bool:
        return "arch" in arg.value.lower()

    def command(self, command: Command, frames: tuple[Frame, ...]) -> None:
        intersection = self.intersections.get(id(command))
        if intersection is not None:
            self.intersection_gate(intersection, frames)
            return
        if command.name in ("message", "if", "elseif", "else", "while", "function", "macro"):
            return
        if command.name == "string" and not (
            command.args and command.args[0].is_word("APPEND", "PREPEND", "CONCAT", "JOIN")
        ):
            return
        if any(FLAG_HINT.search(a.value) for a in command.args):
            self.flag_gate(command, frames)
            return
        target = defined_variable(command)
        if target is not None:
            self.list_gate(command, target[0], target[1], frames)


def detect_cmake(
    package: str,
    version: str | None,
    path: str,
    text: str,
    cuda_version: tuple[int, int] | None = DEFAULT_CUDA_VERSION,
) -> Detection:
    """The CMake gates of one file, and the constructs that could not be read. Never raises.

    ``cuda_version`` is the toolkit assumed for conditions on its version (None: not evaluated).
    """
    try:
        commands, problems = tokenize(text)
        try:
            nodes, block_problems = build_blocks(commands, text.count("\n") + 1)
        except TooDeep as exc:
            return Detection((), (Skip(path, str(exc), package),))
        toolkit = Toolkit(cuda_version, nodes) if cuda_version is not None else None
        analyzer = _Analyzer(package, version, path, toolkit)
        problems = [*problems, *block_problems]
        for line, reason in problems[:MAX_PROBLEMS]:
            analyzer.skip(line, f"CMake syntax: {reason}")
        if len(problems) > MAX_PROBLEMS:
            analyzer.skip(
                problems[MAX_PROBLEMS][0], f"CMake syntax: {len(problems) - MAX_PROBLEMS:,} more problems"
            )
        analyzer.prune(nodes)
        analyzer.survey(nodes)
        analyzer.visit(nodes, ())
        return Detection(tuple(analyzer.sink.gates), tuple(analyzer.skips))
    except Exception as exc:  # a bug: this file's gates are lost, not the scan's
        return Detection((), (not_analysed(path, package, exc, "the CMake detector failed on this file"),))
