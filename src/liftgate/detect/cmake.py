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
the toolkit's version tests in `liftgate.detect.cmake_conditions`; this module is the analysis.
Besides the evidence, a gate carries typed facts: ``builds`` (a `BuildTarget` with every source
its admitted block builds) and ``passes`` (each ``-DNAME[=VALUE]`` the block passes, a `BuildFlag`).
"""

from __future__ import annotations

import itertools
import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from liftgate.arch.core import ArchSet, arch_data
from liftgate.detect.cmake_archs import (
    SPECIAL_VALUES,
    ArchEntry,
    Style,
    admitted_by,
    capability_archs,
    compile_admitted,
    describe_entry,
    exact_admitted,
    loose_admitted,
    parse_entry,
    special_admitted,
)
from liftgate.detect.cmake_conditions import DEFAULT_CUDA_VERSION, ArchTest, Toolkit, evaluate_arch
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
    collapse,
    display,
    list_items,
    parse_condition,
    tokenize,
    unescape,
    walk,
)
from liftgate.detect.interface import Detection, GateSink, not_analysed
from liftgate.model import BuildFlag, BuildTarget, Confidence, ElseKind, Evidence, Gate, GateKind, Skip, Span

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


_CONDITION_LIMIT = 240
_SHOWN_ITEMS = 6
MAX_PROBLEMS = 100  # syntax problems listed per file

# --------------------------------------------------------------------------------------------
# Names and flags
# --------------------------------------------------------------------------------------------

_ARCH_VAR = re.compile(r"(?:^|_)(?:ARCH|ARCHS|ARCHES|ARCHITECTURES|ARCH_LIST|ARCHLIST)$", re.I)
_NOT_CUDA_PARTS = frozenset(
    {
        "HIP",
        "ROCM",
        "AMDGPU",
        "GFX",
        "OSX",
        "APPLE",
        "IOS",
        "ANDROID",
        "CPU",
        "HOST",
        "SYSTEM",
        "ISA",
        "X86",
        "ARM",
        "AARCH64",
        "PYTHON",
    }
)
_CMAKE_LISTS = frozenset({"CMAKE_CUDA_ARCHITECTURES", "CUDA_ARCHITECTURES"})
_TORCH_LISTS = frozenset({"TORCH_CUDA_ARCH_LIST"})
_INTERSECTIONS: dict[str, Style] = {
    "cuda_archs_loose_intersection": "loose",
    "cuda_archs_intersection": "exact",
}
_SOURCE_FILE = re.compile(r"\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|hip)$")
_DEFINE_FLAG = re.compile(r"^-D[A-Za-z_]\w*(?:=\S*)?$")
_VARIABLE_REF = re.compile(r"\$\{([A-Za-z0-9_.+\-/]+)\}")
_ANY_REF = re.compile(r"\$(?:ENV|CACHE)?\{([^}]*)\}|\$<")

_GENCODE = re.compile(
    r"(?<![\w-])(?:-gencode|--generate-code)(?:=|\s+)[\"']?arch=([\w${}]+)\s*,\s*code="
    r"(\[[^\]]*\]|\\?\"[^\"]*\"|'[^']*'|[\w${},]+)",
    re.I,
)
_ARCH_FLAG = re.compile(r"(?<![\w-])(?:-arch|--gpu-architecture)(?:=|\s+)([\w${}.\-]+)")
_CODE_FLAG = re.compile(r"(?<![\w-])(?:-code|--gpu-code)(?:=|\s+)(\[[^\]]*\]|[\w${},]+)")
_GPU_NAME = re.compile(r"^(?:sm|compute|lto)_", re.I)
_FLAG_HINT = re.compile(r"(?<![\w-])(?:-gencode|--generate-code|-arch|--gpu-architecture)\b")


def is_arch_variable(name: str) -> bool:
    """Whether a variable's name says it holds a CUDA arch list (``CUDA_ARCHS``, ``SM90_ARCHS``…)."""
    if name.upper() in _CMAKE_LISTS or name.upper() in _TORCH_LISTS:
        return True
    if not _ARCH_VAR.search(name):
        return False
    return not any(part in _NOT_CUDA_PARTS for part in name.upper().split("_"))


def _refs(value: str) -> list[str]:
    """Names referenced in ``value`` (``$ENV{X}`` as ``ENV{X}``, generator expressions as ``$<>``)."""
    found: list[str] = []
    for m in _ANY_REF.finditer(value):
        if m.group(0) == "$<":
            found.append("$<>")
        elif m.group(0).startswith("${"):
            found.append(m.group(1))
        else:
            found.append(m.group(0)[1:])
    return found


def _substitute(value: str, bindings: dict[str, tuple[str, ...]]) -> list[str]:
    """Every expansion of ``value`` over the literal ``foreach`` items bound to its variables."""
    names = [n for n in dict.fromkeys(_VARIABLE_REF.findall(value)) if n in bindings]
    if not names:
        return [value]
    expansions: list[str] = []
    for combo in itertools.islice(itertools.product(*(bindings[n] for n in names)), 64):
        text = value
        for name, item in zip(names, combo, strict=True):
            text = text.replace("${" + name + "}", item)
        expansions.append(text)
    return expansions


def _shorten(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN_ITEMS])
    return shown + (f" and {len(items) - _SHOWN_ITEMS} more" if len(items) > _SHOWN_ITEMS else "")


def _truncate(text: str) -> str:
    return text if len(text) <= _CONDITION_LIMIT else text[: _CONDITION_LIMIT - 1].rstrip() + "…"


# --------------------------------------------------------------------------------------------
# The analysis
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Frame:
    label: str
    gates: tuple[str, ...]  # ids of the gates whose branch this is
    deps: tuple[str, ...]
    in_function: bool = False
    bindings: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class _Summary:
    """What a branch does: sources it builds, defines it adds, messages it prints.

    ``defines`` are the ``-D`` list items, for the evidence; ``flags`` every ``-D`` the block's
    commands pass, with its line (messages and block heads included, several in one string too).
    """

    sources: list[str] = field(default_factory=list)
    defines: list[str] = field(default_factory=list)
    messages: list[tuple[str, str, int]] = field(default_factory=list)  # (mode, text, line)
    flags: list[BuildFlag] = field(default_factory=list)

    @property
    def fatal(self) -> bool:
        return any(mode in ("FATAL_ERROR", "SEND_ERROR") for mode, _, _ in self.messages)


_MESSAGE_MODES = frozenset(
    {
        "FATAL_ERROR",
        "SEND_ERROR",
        "WARNING",
        "AUTHOR_WARNING",
        "DEPRECATION",
        "NOTICE",
        "STATUS",
        "VERBOSE",
        "DEBUG",
        "TRACE",
        "CHECK_START",
        "CHECK_PASS",
        "CHECK_FAIL",
    }
)


# -DNAME or -DNAME=VALUE in an argument's text (also -D NAME, which compilers take); a value ends
# at whitespace or a list separator, and may hold quoted parts and escapes.
_VALUE = r'(?:=((?:\\.|"(?:[^"\\]|\\.)*"|[^\s;"\\])*))?'
_BUILD_FLAG = re.compile(r"-D\s*([A-Za-z_]\w*)" + _VALUE)
_BARE_D = re.compile(r"-D\s*$")  # "-D" alone: the name is the next argument
_FLAG_NAME = re.compile(r"\s*([A-Za-z_]\w*)" + _VALUE)


def _text(arg: Argument) -> tuple[str, int]:
    """An argument's text as written, inside its quotes or brackets, and where it starts in ``raw``."""
    if arg.quoting == "quoted":
        return arg.raw[1:-1], 1
    if arg.quoting == "bracket":  # [==[ content ]==], a newline right after the opener dropped
        start = arg.raw.index("[", 1) + 1
        start += 2 if arg.raw.startswith("\r\n", start) else 1 if arg.raw.startswith("\n", start) else 0
        return arg.value, start
    return arg.raw, 0


def build_flags(command: Command, path: str) -> list[BuildFlag]:
    """Every ``-DNAME[=VALUE]`` in a command's arguments, with its line, in order.

    Several flags in one argument (``"-DA=1 -DB"``) are each found, and ``-D NAME`` over two
    arguments too. The value is as CMake reads it (escapes resolved), None without ``=``.
    """
    flags: list[BuildFlag] = []

    def flag(arg: Argument, m: re.Match[str], line: int) -> BuildFlag:
        value = m.group(2)
        if value is not None and arg.quoting != "bracket":
            value = unescape(value)
        return BuildFlag(m.group(1), value, path, line)

    args = command.args
    for k, arg in enumerate(args):
        text, base = _text(arg)
        for m in _BUILD_FLAG.finditer(text):
            flags.append(flag(arg, m, arg.line + arg.raw.count("\n", 0, base + m.start())))
        bare = _BARE_D.search(text)
        if bare is not None and k + 1 < len(args):
            name = _FLAG_NAME.match(_text(args[k + 1])[0])
            if name is not None:
                flags.append(flag(args[k + 1], name, arg.line + arg.raw.count("\n", 0, base + bare.start())))
    return flags


def _summarize(nodes: Iterable[Node]) -> _Summary:
    summary = _Summary()
    for command in walk(nodes):
        if command.name == "message":
            args = command.args
            has_mode = bool(args) and args[0].is_word(*_MESSAGE_MODES)
            mode = args[0].value if has_mode else "NOTICE"
            text = "".join(a.value for a in args[1 if has_mode else 0 :])
            summary.messages.append((mode, collapse(text), command.line))
            continue
        if command.name in ("if", "elseif", "else", "while", "function", "macro"):
            continue
        for arg in command.args:
            for item in list_items([arg.value]):
                if _SOURCE_FILE.search(item) and item not in summary.sources:
                    summary.sources.append(item)
                elif _DEFINE_FLAG.match(item) and item not in summary.defines:
                    summary.defines.append(item)
    return summary


@dataclass
class _Intersection:
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


def _extension_deps(info: _Intersection) -> list[str]:
    return [f"what {_truncate(c.render())} (line {c.line}) adds to {info.out}" for c in info.extensions]


class _Analyzer:
    def __init__(self, package: str, version: str | None, path: str, toolkit: Toolkit | None = None) -> None:
        self.package = package
        self.version = version
        self.path = path
        self.sink = GateSink(GateKind.CMAKE, package, version, path)
        self.skips: list[Skip] = []
        self.intersections: dict[int, _Intersection] = {}  # id(command) ->
        self.consumers: dict[int, list[_Intersection]] = {}  # id(IfBlock) -> the intersections it tests
        self.src_uses: dict[str, list[_Intersection]] = {}  # variable -> intersections taking it as SRC
        self.cmake_uses: set[str] = set()  # variables used as CMAKE_CUDA_ARCHITECTURES / property values
        self.torch_uses: set[str] = set()
        self.definitions: dict[str, list[Command]] = {}  # variable -> set()/list() with literal items
        self.dotted: set[str] = set()  # variables with a dotted literal entry (9.0a): torch style
        self._assigned_cache: dict[int, frozenset[str]] = {}
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
        frames: tuple[_Frame, ...],
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
            condition=_truncate(norm),
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

    def _commands(self, nodes: Iterable[Node]) -> Iterator[Command]:
        """Every command under ``nodes`` as written, block heads and pruned branches included."""
        for node in nodes:
            if isinstance(node, Command):
                yield node
            elif isinstance(node, IfBlock):
                for branch in node.branches:
                    yield branch.head
                    yield from self._commands(self.pruned.get(id(branch), branch.body))
            else:
                yield node.head
                yield from self._commands(node.body)

    def _summarize_block(self, nodes: Iterable[Node], heads: Iterable[Command] = ()) -> _Summary:
        """What ``nodes`` do (`_summarize`), with every ``-D`` flag that they, or ``heads``, pass.

        The flags of branches the assumed toolkit never takes count: the block passes them under
        another toolkit, and a host gate compiled under one is linked whichever toolkit is assumed.
        """
        nodes = list(nodes)
        summary = _summarize(nodes)
        for command in [*heads, *self._commands(nodes)]:
            summary.flags.extend(build_flags(command, self.path))
        summary.flags.sort(key=lambda f: f.line)
        return summary

    def _target(self, name: str | None, summary: _Summary, line: int) -> BuildTarget:
        """The `BuildTarget` fact of a block: every source it names, as written."""
        return BuildTarget("CMake target", name, tuple(summary.sources), False, self.path, line)

    def _note(self, cond: Cond, want: bool) -> str | None:
        return self.toolkit.note(cond, want) if self.toolkit else None

    def _and_parts(self, cond: Cond) -> list[str]:
        """The parts of a condition assumed true, each toolkit test worded as the assumption."""
        parts = cond.children if cond.op == "and" else [cond]
        return [self._note(part, True) or part.text for part in parts]

    def _earlier(self, branch: Branch, text: str) -> str:
        """The assumption that an earlier branch of the same if() was not taken."""
        if self.decided.get(id(branch)) is False and self.toolkit is not None:
            return f"{self.toolkit.prefix}: {text} is false"
        return f"NOT ({text})"

    # -- pass 1: who defines and who uses which arch list -----------------------------------

    def survey(self, nodes: list[Node]) -> None:
        for command in walk(nodes):
            args = command.args
            if command.name in _INTERSECTIONS and len(args) >= 2:
                info = _Intersection(command, _INTERSECTIONS[command.name], args[0].value, args[1])
                self.intersections[id(command)] = info
                for name in _VARIABLE_REF.findall(args[1].value):
                    self.src_uses.setdefault(name, []).append(info)
            target = self._defined_variable(command)
            if target is None:
                continue
            name, items = target
            if any(not a.has_reference for a in items):
                self.definitions.setdefault(name, []).append(command)
            if any(re.match(r"^[0-9]{1,2}\.[0-9]", item) for item in list_items(a.value for a in items)):
                self.dotted.add(name)
            uses = (
                self.cmake_uses
                if name.upper() in _CMAKE_LISTS
                else self.torch_uses
                if name.upper() in _TORCH_LISTS
                else None
            )
            if uses is not None:
                for arg in items:
                    uses.update(n for n in _VARIABLE_REF.findall(arg.value) if n != name)
        self._link_consumers(nodes)

    @staticmethod
    def _defined_variable(command: Command) -> tuple[str, tuple[Argument, ...]] | None:
        """(variable or property, value arguments) for set/list(APPEND…)/set_*properties; else None."""
        args = command.args
        if command.name == "set" and args and not args[0].has_reference:
            values = args[1:]
            for i, arg in enumerate(values):
                if arg.is_word("CACHE", "PARENT_SCOPE"):
                    values = values[:i]
                    break
            return args[0].value, values
        if command.name == "list" and len(args) >= 2 and args[0].is_word("APPEND", "PREPEND", "INSERT"):
            values = args[3:] if args[0].value == "INSERT" else args[2:]
            return args[1].value, values
        if command.name == "set_target_properties":
            for i, arg in enumerate(args):
                if arg.is_word("PROPERTIES"):
                    pairs = args[i + 1 :]
                    for key, value in zip(pairs[::2], pairs[1::2], strict=False):
                        if key.value.upper() in _CMAKE_LISTS:
                            return "CUDA_ARCHITECTURES", (value,)
        if command.name == "set_property":
            for i, arg in enumerate(args):
                if arg.is_word("PROPERTY") and i + 1 < len(args):
                    if args[i + 1].value.upper() in _CMAKE_LISTS:
                        return "CUDA_ARCHITECTURES", args[i + 2 :]
                    return None
        return None

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
        target = self._defined_variable(node)
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

    def _changes(self, info: _Intersection, node: Command) -> bool:
        """Record what ``node`` does to OUT; True when it redefines OUT (the search ends there)."""
        out = info.out
        if self._redefines(node, out):
            return True
        if self._extends(node, out):
            info.extensions.append(node)
        elif node.name == "list" and len(node.args) >= 2 and node.args[1].value == out:
            info.evidence.append(
                Evidence(f"{out} is then changed by {_truncate(node.render())}", self.path, node.line)
            )
        return False

    def _find_consumer(self, info: _Intersection, following: tuple[list[Node], ...]) -> bool:
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

    def _note_uses(self, info: _Intersection, following: tuple[list[Node], ...]) -> None:
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
            info.evidence.append(Evidence(f"used by {_truncate(command.render())}", self.path, command.line))
        if not uses:
            info.evidence.append(Evidence(f"no if({info.out}) or use of it follows", self.path, None))

    @staticmethod
    def _tests_out(arg: Argument, out: str) -> bool:
        return (
            arg.value == out
            if arg.quoting == "unquoted" and "$" not in arg.value
            else arg.value == "${" + out + "}"
        )

    def _attach(self, info: _Intersection, block: IfBlock, k: int) -> None:
        branch = block.branches[k]
        info.branch = branch
        self.consumers.setdefault(id(block), []).append(info)
        cond = parse_condition(branch.head.args)
        marker = ArchSet.from_mask(1)  # any non-trivial set: only the polarity is read back

        def atom(c: Cond) -> tuple[ArchSet, bool, str | None] | None:
            if len(c.args) == 1 and self._tests_out(c.args[0], info.out):
                return marker, False, info.out
            return None

        test = evaluate_arch(cond, atom, self._note) if cond is not None else None
        info.negated = test is not None and test.admitted == ~marker
        if test is not None:
            info.deps.extend(test.deps)
        for earlier in block.branches[:k]:
            info.deps.append(self._earlier(earlier, display(earlier.head.args)))
        built = [branch]
        otherwise = block.branches[k + 1 :]
        if info.negated:
            built, otherwise = otherwise, [branch]
        summary = self._summarize_block((n for b in built for n in b.body), [b.head for b in built[1:]])
        what = info.src.value
        where = built[0].head.line if built else branch.head.line
        if summary.sources:
            info.evidence.append(Evidence(f"builds {_shorten(summary.sources)} for {what}", self.path, where))
        if summary.defines:
            info.evidence.append(Evidence(f"adds {_shorten(summary.defines)}", self.path, where))
        if summary.sources or summary.defines:
            info.builds = (self._target(what, summary, where),)
        info.passes = tuple(summary.flags)
        rest = _summarize(n for b in otherwise for n in b.body)
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

    # -- pass 2: gates -----------------------------------------------------------------------

    def visit(self, nodes: list[Node], frames: tuple[_Frame, ...]) -> None:
        for node in nodes:
            if isinstance(node, Command):
                self.command(node, frames)
            elif isinstance(node, IfBlock):
                self.if_block(node, frames)
            else:
                self.visit(node.body, (*frames, self.scope_frame(node, frames)))

    def scope_frame(self, scope: Scope, frames: tuple[_Frame, ...]) -> _Frame:
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
        return _Frame(label, (), (), in_function, tuple(bindings.items()))

    def if_block(self, block: IfBlock, frames: tuple[_Frame, ...]) -> None:
        consumers = self.consumers.get(id(block), [])
        parent = frames[-1] if frames else _Frame("", (), ())
        earlier: list[str] = []  # the assumptions that the earlier branches were not taken
        earlier_arch = ArchSet.none()
        for k, branch in enumerate(block.branches):
            if id(branch) in self.untaken:
                # Never taken under the assumed toolkit: no gate, nothing under it is visited.
                if id(branch) in self.decided:
                    earlier.append(self._earlier(branch, display(branch.head.args)))
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
                deps.append(self._note(cond, True) or cond.text)
            elif tested:
                # if(CUDA_VERSION … AND OUT): the intersection(s) above are the gate of this branch.
                gate_refs = tuple(c.gate for c in tested if c.gate)
                deps = list(tested[0].deps)
            else:
                if cond is None:
                    if any(self._mentions_arch(a) for a in head.args):
                        self.skip(head.line, f"cannot parse the condition of {_truncate(head.render())}")
                    earlier.append(f"NOT ({display(head.args)})")
                    deps.append(display(head.args))
                else:
                    test = evaluate_arch(cond, self.arch_atom, self._note)
                    if test is None or test.tests == 0:
                        earlier.append(f"NOT ({cond.text})")
                        deps.extend(self._and_parts(cond))
                    else:
                        admitted = test.admitted - earlier_arch
                        earlier_arch |= test.admitted
                        gate = self.if_gate(block, k, admitted, test, deps, frames)
                        gate_refs = (gate.id,) if gate else ()
                        deps = [*deps, *test.deps]
            frame = _Frame(label, gate_refs, tuple(deps), parent.in_function, parent.bindings)
            self.visit(branch.body, (*frames, frame))

    def if_gate(
        self,
        block: IfBlock,
        k: int,
        admitted: ArchSet,
        test: ArchTest,
        deps: list[str],
        frames: tuple[_Frame, ...],
    ) -> Gate | None:
        branch = block.branches[k]
        summary = self._summarize_block(branch.body)
        rest = _summarize(n for b in block.branches[k + 1 :] for n in b.body)
        evidence: list[Evidence] = []
        only_errors = not summary.sources and not summary.defines and summary.fatal
        if only_errors:
            # if(NOT "90a" IN_LIST ARCHS) message(FATAL_ERROR …): the build goes on where it is false.
            admitted = ~admitted
            for mode, text, line in summary.messages:
                evidence.append(Evidence(f"message({mode}): {text}", self.path, line))
            else_kind = ElseKind.ERROR
        else:
            if summary.sources:
                evidence.append(Evidence(f"builds {_shorten(summary.sources)}", self.path, branch.head.line))
            if summary.defines:
                evidence.append(Evidence(f"adds {_shorten(summary.defines)}", self.path, branch.head.line))
            for mode, text, line in rest.messages:
                evidence.append(Evidence(f"otherwise message({mode}): {text}", self.path, line))
            else_kind = ElseKind.ERROR if rest.fatal else ElseKind.NONE
        body_end = branch.last_line
        then_span = Span(branch.head.end_line + 1, body_end) if body_end > branch.head.end_line else None
        later = block.branches[k + 1 :]
        else_span = Span(later[0].head.line, block.end_line) if later else None
        builds = (
            (self._target(None, summary, branch.head.line),) if summary.sources or summary.defines else ()
        )
        return self.new_gate(
            branch.head,
            frames,
            admitted,
            ArchSet.none(),
            evidence=evidence,
            depends_on=[*deps, *test.deps],
            confidence=Confidence.INFERRED if test.inferred else Confidence.EXACT,
            else_kind=else_kind,
            then_span=then_span,
            else_span=else_span,
            builds=builds,
            passes=summary.flags,
        )

    @staticmethod
    def _mentions_arch(arg: Argument) -> bool:
        return "arch" in arg.value.lower()

    def arch_atom(self, cond: Cond) -> tuple[ArchSet, bool, str | None] | None:
        """What an atom of an if() admits when it tests an arch list, else None."""
        args = cond.args
        if len(args) != 3 or args[1].quoting != "unquoted":
            return None
        left, op, right = args[0], args[1].value, args[2]
        if op == "IN_LIST":
            if right.has_reference or not self._is_arch_list(right.value) or left.has_reference:
                return None
            entries = [parse_entry(item, "exact") for item in list_items([left.value])]
            archs = [e.arch for e in entries if e is not None and e.arch is not None]
            return (ArchSet(archs), False, None) if archs and len(archs) == len(entries) else None
        if op == "STREQUAL":
            variable, literal = (left, right) if self._names_arch_list(left) else (right, left)
            if not self._names_arch_list(variable) or literal.has_reference:
                return None
            entries = [parse_entry(item, "exact") for item in list_items([literal.value])]
            archs = [e.arch for e in entries if e is not None and e.arch is not None]
            return (ArchSet(archs), False, None) if archs and len(archs) == len(entries) else None
        if op == "MATCHES":
            if not (self._names_arch_list(left) or self._names_flags(left)) or right.has_reference:
                return None
            admitted = self._regex_archs(right.value, self._names_flags(left))
            if admitted is None:
                if re.search(r"[0-9]", right.value) and "gfx" not in right.value.lower():
                    self.skip(
                        cond.args[0].line, f"cannot tell which architectures the regex {right.raw} matches"
                    )
                return None
            return admitted, True, None
        return None

    def _is_arch_list(self, name: str) -> bool:
        return (
            is_arch_variable(name)
            or name in self.src_uses
            or any(i.out == name for i in self.intersections.values())
        )

    def _names_arch_list(self, arg: Argument) -> bool:
        if arg.quoting == "unquoted" and not arg.has_reference:
            return self._is_arch_list(arg.value)
        match = re.fullmatch(r"\$\{(\w+)\}", arg.value)
        return match is not None and self._is_arch_list(match.group(1))

    @staticmethod
    def _names_flags(arg: Argument) -> bool:
        match = re.fullmatch(r"\$\{(\w+)\}|(\w+)", arg.value)
        name = (match.group(1) or match.group(2)) if match else ""
        return name.upper().endswith(("FLAGS", "OPTIONS"))

    @staticmethod
    def _regex_archs(regex: str, flags_only: bool) -> ArchSet | None:
        """Targets whose spelling a simple regex (alternatives of arch names) finds in a list."""
        if re.search(r"[\[*+?{]", regex.replace("\\.", "")):
            return None
        admitted = ArchSet.none()
        for alternative in regex.strip("^$").split("|"):
            text = alternative.strip("()^$").replace("\\.", ".").replace("\\", "")
            if flags_only and not _GPU_NAME.match(text):
                return None
            entry = parse_entry(re.sub(r"^(?:code|arch)=", "", text), "exact")
            if entry is None or entry.arch is None:
                return None
            arch = entry.arch
            # A spelling without a variant suffix also finds the suffixed ones ("10.0" in "10.0a").
            admitted |= ArchSet([arch]) if arch.variant else capability_archs(arch.cc)
        return admitted

    def command(self, command: Command, frames: tuple[_Frame, ...]) -> None:
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
        if any(_FLAG_HINT.search(a.value) for a in command.args):
            self.flag_gate(command, frames)
            return
        target = self._defined_variable(command)
        if target is not None:
            self.list_gate(command, target[0], target[1], frames)

    def _bindings(self, frames: tuple[_Frame, ...]) -> dict[str, tuple[str, ...]]:
        return dict(frames[-1].bindings) if frames else {}

    def _style_of(self, name: str) -> tuple[Style, str | None, bool]:
        """(style, why, inferred) of the entries assigned to variable or property ``name``."""
        upper = name.upper()
        if upper in _CMAKE_LISTS:
            return "cmake", None, False
        if upper in _TORCH_LISTS:
            return "torch", None, False
        if name in self.src_uses:
            return self.src_uses[name][0].style, None, False
        if name in self.cmake_uses:
            return "cmake", f"{name} is used as CMAKE_CUDA_ARCHITECTURES", False
        if name in self.torch_uses:
            return "torch", f"{name} is used as TORCH_CUDA_ARCH_LIST", False
        if name in self.dotted:
            return (
                "torch",
                "read as a TORCH_CUDA_ARCH_LIST-style list (dotted entries: SASS unless +PTX)",
                True,
            )
        return "cmake", "read as a CUDA_ARCHITECTURES-style list (SASS and PTX unless -real/-virtual)", True

    def list_gate(
        self, command: Command, name: str, values: tuple[Argument, ...], frames: tuple[_Frame, ...]
    ) -> None:
        consumers = self.src_uses.get(name, [])
        if not (is_arch_variable(name) or consumers or name in self.cmake_uses or name in self.torch_uses):
            return
        bindings = self._bindings(frames)
        literal: list[str] = []
        unresolved: list[str] = []
        known: list[str] = []
        for arg in values:
            if arg.quoting != "bracket" and "$<" in arg.value:
                # $<$<CONFIG:Debug>:80-real>: entries under a generator-time condition.
                if "$<>" not in unresolved:
                    unresolved.append("$<>")
                continue
            for value in _substitute(arg.value, bindings) if arg.quoting != "bracket" else [arg.value]:
                for item in list_items([value]):
                    refs = _refs(item) if arg.quoting != "bracket" else []
                    if not refs:
                        literal.append(item)
                        continue
                    for ref in refs:
                        if ref == name:
                            continue  # set(X ${X} 90a): appends to itself
                        bucket = known if ref in self.definitions else unresolved
                        if ref not in bucket:
                            bucket.append(ref)
        if not literal:
            return
        upper = name.upper()
        style, why, inferred = self._style_of(name)
        if style == "torch":
            named = {k.lower(): v for k, v in arch_data().torch_named_arches.items()}
            literal = [
                part
                for item in literal
                for part in (named[item.lower()].split(";") if item.lower() in named else [item])
            ]
        entries: list[ArchEntry] = []
        special: list[str] = []
        bad: list[str] = []
        for item in literal:
            if (upper in _CMAKE_LISTS or style == "cmake") and item.lower() in SPECIAL_VALUES:
                special.append(item.lower())
                continue
            entry = parse_entry(item, style)
            if entry is None:
                bad.append(item)
            else:
                entries.append(entry)
        if not entries and not special:
            return  # nothing here names a CUDA architecture (gfx90a, x86_64, ON …): not an arch list
        if bad:
            self.skip(
                command.line,
                f"{name}: no known CUDA architecture is named {_shorten(bad)}; left out of the gate",
            )
        admitted = ArchSet.none()
        for entry in entries:
            admitted |= admitted_by(entry, style)
        unknown = ArchSet.none()
        depends: list[str] = []
        evidence: list[Evidence] = []
        if entries:
            described = [describe_entry(e, style) for e in entries]
            evidence.append(
                Evidence(
                    "; ".join(described[:_SHOWN_ITEMS]) + (" …" if len(described) > _SHOWN_ITEMS else ""),
                    self.path,
                    command.line,
                )
            )
        if why:
            evidence.append(Evidence(why, self.path, command.line))
        for value in special:
            more, unsure, assumption = special_admitted(value)
            admitted |= more
            unknown |= unsure
            depends.append(assumption)
        for ref in unresolved:
            unknown = ~admitted
            depends.append(
                f"the contents of {ref}, not set in this file" if ref != "$<>" else "a generator expression"
            )
        for ref in known:
            evidence.append(
                Evidence(
                    f"also takes {ref}, an arch list set in this file (its own gate)", self.path, command.line
                )
            )
        for consumer in consumers:
            if consumer.extensions:
                unknown = ~admitted
                inferred = True
                depends.extend(_extension_deps(consumer))
            src = consumer.command
            evidence.append(
                Evidence(f"{name} is the source list of {_truncate(src.render())}", self.path, src.line)
            )
            evidence.extend(consumer.evidence)
            depends.extend(consumer.deps)
        else_kind = next((c.else_kind for c in consumers if c.else_kind is ElseKind.ERROR), ElseKind.NONE)
        self.new_gate(
            command,
            frames,
            admitted,
            unknown,
            evidence=evidence,
            depends_on=depends,
            confidence=Confidence.INFERRED if inferred or unresolved else Confidence.EXACT,
            else_kind=else_kind,
            # What the if(OUT) blocks of the intersections taking this list build (their -D flags
            # stay with the block: this gate admits no block of its own).
            builds=dict.fromkeys(b for c in consumers for b in c.builds),
        )

    def intersection_gate(self, info: _Intersection, frames: tuple[_Frame, ...]) -> None:
        src = info.src
        items = list_items(_substitute(src.value, self._bindings(frames)))
        literal = [i for i in items if not _refs(i)]
        refs = [r for i in items for r in _refs(i)]
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
                info.command.line, f"{info.command.name}: no known CUDA architecture is named {_shorten(bad)}"
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
                "; ".join(describe_entry(e, info.style) for e in good[:_SHOWN_ITEMS]),
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
                *_extension_deps(info),
            ],
            confidence=Confidence.INFERRED if unknown else Confidence.EXACT,
            else_kind=info.else_kind,
            then_span=info.then_span,
            else_span=info.else_span,
            builds=info.builds,
            passes=info.passes,
        )
        info.gate = gate.id if gate else None

    def flag_gate(self, command: Command, frames: tuple[_Frame, ...]) -> None:
        bindings = self._bindings(frames)
        texts: list[str] = []
        for arg in command.args:
            texts.extend(_substitute(arg.value, bindings))
        text = " ".join(t.replace(";", " ") for t in texts)
        entries: list[ArchEntry] = []
        unresolved: list[str] = []
        special: list[str] = []

        def code_entries(arch: str, codes: str) -> None:
            for code in re.split(r"[\s,]+", codes.strip("[]\"'\\ ")):
                if not code:
                    continue
                if "$" in code or "$" in arch:
                    unresolved.append(f"arch={arch},code={code}")
                    continue
                entry = parse_entry(code, "torch")  # sm_/lto_ name SASS, compute_ PTX
                if entry is not None and _GPU_NAME.match(code):
                    entries.append(entry)

        for m in _GENCODE.finditer(text):
            code_entries(m.group(1), m.group(2))
        codes = [m.group(1) for m in _CODE_FLAG.finditer(text)]
        for m in _ARCH_FLAG.finditer(text):
            value = m.group(1)
            if value.lower() in SPECIAL_VALUES:
                special.append(value.lower())
            elif "$" in value:
                unresolved.append(value)
            elif _GPU_NAME.match(value):
                if codes:
                    for code in codes:
                        code_entries(value, code)
                    continue
                # -arch=sm_90a alone is -arch=compute_90a -code=sm_90a,compute_90a; -arch=compute_90 is PTX.
                entry = parse_entry(value, "torch")
                if entry is not None:
                    entries.append(ArchEntry(value, entry.arch, entry.cc, entry.sass, True, entry.note))
        if unresolved and not entries and not special:
            if not any(f.in_function for f in frames):
                self.skip(command.line, f"architecture flag built from variables: {_shorten(unresolved)}")
            return
        if not entries and not special:
            return
        admitted = ArchSet.none()
        for entry in entries:
            admitted |= compile_admitted(entry)
        unknown = ArchSet.none()
        depends: list[str] = []
        for value in special:
            more, unsure, assumption = special_admitted(value)
            admitted |= more
            unknown |= unsure
            depends.append(f"-arch={assumption}")
        if unresolved:
            unknown = ~admitted
            depends.append(f"flags built from variables: {_shorten(unresolved)}")
        described = [describe_entry(e, "cmake") for e in entries]
        evidence = (
            [
                Evidence(
                    "; ".join(described[:_SHOWN_ITEMS]) + (" …" if len(described) > _SHOWN_ITEMS else ""),
                    self.path,
                    command.line,
                )
            ]
            if entries
            else []
        )
        self.new_gate(
            command,
            frames,
            admitted,
            unknown,
            evidence=evidence,
            depends_on=depends,
            confidence=Confidence.INFERRED if unresolved else Confidence.EXACT,
        )


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
