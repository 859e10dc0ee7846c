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
CUDA toolkit's version are evaluated for an assumed toolkit (`_Toolkit`): a branch it never takes
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
"""

from __future__ import annotations

import bisect
import itertools
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from liftgate.arch.core import Arch, ArchSet, arch_data, universe
from liftgate.arch.parse import UnknownArchError, resolve_arch
from liftgate.detect.interface import Detection
from liftgate.model import Confidence, ElseKind, Evidence, Gate, GateKind, Location, Skip, Span, gate_id

# Every construct this detector reports names an architecture through a word containing "arch":
# CUDA_ARCHITECTURES, *_ARCHS, TORCH_CUDA_ARCH_LIST, -gencode arch=…, -arch=…, cuda_archs_*().
CMAKE_PREFILTER: re.Pattern[bytes] = re.compile(rb"(?i)arch")


def is_cmake_file(path: str) -> bool:
    """``CMakeLists.txt`` in any directory, and ``*.cmake`` modules."""
    name = posixpath.basename(path.replace("\\", "/")).lower()
    return name == "cmakelists.txt" or name.endswith(".cmake")


_CONDITION_LIMIT = 240
_SHOWN_ITEMS = 6
# Bounds far above real build files (vLLM's and FlashInfer's nest blocks 5 deep, their longest
# command has a few hundred arguments, their deepest if() has 3 levels of parentheses).
MAX_NESTING = 100
MAX_CONDITION_DEPTH = 100
MAX_ARGUMENTS = 100_000
MAX_PROBLEMS = 100

# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

Quoting = Literal["unquoted", "quoted", "bracket"]

_WS = re.compile(r"[ \t\r\n\f\v]+")
_HSPACE = re.compile(r"[ \t]*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET_OPEN = re.compile(r"\[(=*)\[")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)
_UNQUOTED = re.compile(r'(?:[^ \t\r\n\f\v()#"\\]|\\.)+', re.S)
_ESCAPE = re.compile(r"\\(.)", re.S)
_REFERENCE = re.compile(r"\$(?:\{|ENV\{|CACHE\{|<)")
_PLAIN_RUN = re.compile(r'[^()"#\[\\]+')  # text with nothing that opens or closes anything
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\n": "", ";": "\\;", "0": "\0"}


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), text)


@dataclass(frozen=True, slots=True)
class Argument:
    """One argument of a command: its value after escapes, how it was quoted, and its source text."""

    value: str
    quoting: Quoting
    line: int
    raw: str

    @property
    def has_reference(self) -> bool:
        """Whether the value depends on a variable, the environment or a generator expression."""
        return self.quoting != "bracket" and _REFERENCE.search(self.value) is not None

    def is_word(self, *words: str) -> bool:
        return self.quoting == "unquoted" and self.value in words


@dataclass(frozen=True, slots=True)
class Command:
    """One command invocation ``name(args)``; ``name`` is lower-cased (CMake ignores its case)."""

    name: str
    spelled: str
    args: tuple[Argument, ...]
    line: int
    end_line: int

    def render(self) -> str:
        """The command as written, whitespace collapsed and comments left out."""
        return " ".join(f"{self.spelled}({' '.join(a.raw for a in self.args)})".split())


class _SyntaxProblem(Exception):
    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


class _TooDeep(Exception):
    """Blocks nested deeper than MAX_NESTING: the file is not analysed."""

    def __init__(self, line: int) -> None:
        super().__init__(
            f"blocks nested deeper than {MAX_NESTING} at line {line}: gates in this file are not reported"
        )


class _Lines:
    def __init__(self, text: str) -> None:
        self._newlines = [m.start() for m in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_left(self._newlines, offset) + 1

    def next_line_start(self, offset: int) -> int:
        i = bisect.bisect_left(self._newlines, offset)
        return self._newlines[i] + 1 if i < len(self._newlines) else -1


def _skip_comment(text: str, pos: int) -> int:
    """The offset after the comment starting with ``#`` at ``pos``."""
    bracket = _BRACKET_OPEN.match(text, pos + 1)
    if bracket:
        close = "]" + bracket.group(1) + "]"
        end = text.find(close, bracket.end())
        if end < 0:
            raise _SyntaxProblem(pos, "unterminated bracket comment")
        return end + len(close)
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


class _Arguments(list[Argument]):
    """A command's arguments, kept up to MAX_ARGUMENTS; ``dropped`` counts the others."""

    dropped = 0

    def append(self, argument: Argument) -> None:
        if len(self) < MAX_ARGUMENTS:
            super().append(argument)
        else:
            self.dropped += 1


def _arguments(text: str, pos: int, start: int, lines: _Lines) -> tuple[_Arguments, int]:
    """The arguments from ``pos`` (just after ``(``) to the matching ``)``, and the offset after it.

    Past MAX_ARGUMENTS the rest are read (to find the end) but not kept: the caller drops the command.
    """
    args = _Arguments()
    depth = 0
    n = len(text)
    while True:
        space = _WS.match(text, pos)
        if space:
            pos = space.end()
        if len(args) >= MAX_ARGUMENTS and (plain := _PLAIN_RUN.match(text, pos)):
            args.dropped += 1  # past the limit: skim plain text, only to find the closing ')'
            pos = plain.end()
            continue
        if pos >= n:
            raise _SyntaxProblem(start, "the command has no closing ')'")
        ch = text[pos]
        if ch == ")":
            if depth == 0:
                return args, pos + 1
            depth -= 1
            args.append(Argument(")", "unquoted", lines.line(pos), ")"))
            pos += 1
        elif ch == "(":
            depth += 1
            args.append(Argument("(", "unquoted", lines.line(pos), "("))
            pos += 1
        elif ch == "#":
            pos = _skip_comment(text, pos)
        elif ch == '"':
            quoted = _QUOTED.match(text, pos)
            if quoted is None:
                raise _SyntaxProblem(pos, "unterminated quoted argument")
            args.append(Argument(_unescape(quoted.group(1)), "quoted", lines.line(pos), quoted.group(0)))
            pos = quoted.end()
        elif ch == "[" and (bracket := _BRACKET_OPEN.match(text, pos)):
            close = "]" + bracket.group(1) + "]"
            end = text.find(close, bracket.end())
            if end < 0:
                raise _SyntaxProblem(pos, "unterminated bracket argument")
            content = text[bracket.end() : end]
            content = content[2:] if content.startswith("\r\n") else content.removeprefix("\n")
            args.append(Argument(content, "bracket", lines.line(pos), text[pos : end + len(close)]))
            pos = end + len(close)
        else:
            begin = pos
            parts: list[str] = []
            while pos < n:
                run = _UNQUOTED.match(text, pos)
                if run:
                    parts.append(_unescape(run.group(0)))
                    pos = run.end()
                elif text[pos] == '"' and pos > begin:
                    # Legacy unquoted argument with a quoted part, e.g. -DNAME="a b": one argument.
                    quoted = _QUOTED.match(text, pos)
                    if quoted is None:
                        raise _SyntaxProblem(pos, "unterminated quoted part of an argument")
                    parts.append(quoted.group(0))
                    pos = quoted.end()
                else:
                    break
            if pos == begin:
                raise _SyntaxProblem(pos, f"unexpected {text[pos]!r} in the arguments")
            args.append(Argument("".join(parts), "unquoted", lines.line(begin), text[begin:pos]))


def tokenize(text: str) -> tuple[list[Command], list[tuple[int, str]]]:
    """The commands of a CMake file and the syntax problems met, as ``(line, reason)``.

    Text that is not a command is reported and skipped up to the next line; an unterminated
    argument or command ends the file there (what came before is kept).
    """
    lines = _Lines(text)
    commands: list[Command] = []
    problems: list[tuple[int, str]] = []
    pos, n = 0, len(text)
    while pos < n:
        space = _WS.match(text, pos)
        if space:
            pos = space.end()
            continue
        try:
            if text[pos] == "#":
                pos = _skip_comment(text, pos)
                continue
            ident = _IDENT.match(text, pos)
            if ident:
                paren = _HSPACE.match(text, ident.end())
                after = paren.end() if paren else ident.end()
                if after < n and text[after] == "(":
                    args, end = _arguments(text, after + 1, pos, lines)
                    name = ident.group(0)
                    if args.dropped:
                        problems.append(
                            (
                                lines.line(pos),
                                f"{name}() has more than {MAX_ARGUMENTS:,} arguments: not read",
                            )
                        )
                    else:
                        commands.append(
                            Command(name.lower(), name, tuple(args), lines.line(pos), lines.line(end - 1))
                        )
                    pos = end
                    continue
                problems.append((lines.line(pos), f"{ident.group(0)!r} is not followed by '('"))
            else:
                problems.append((lines.line(pos), f"unexpected {text[pos]!r} outside a command"))
        except _SyntaxProblem as problem:
            problems.append((lines.line(problem.offset), problem.message))
            break
        resume = lines.next_line_start(pos)
        if resume < 0:
            break
        pos = resume
    return commands, problems


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Branch:
    """One branch of an ``if``: its head (``if``/``elseif``/``else``) and the commands under it."""

    head: Command
    body: list[Node] = field(default_factory=list)
    last_line: int = 0  # the last line of its body


@dataclass(eq=False)
class IfBlock:
    branches: list[Branch]
    end: Command | None = None

    @property
    def end_line(self) -> int:
        return self.end.line if self.end else self.branches[-1].last_line


@dataclass(eq=False)
class Scope:
    """``function``/``macro``/``foreach``/``while``/``block`` and the commands under it."""

    head: Command
    body: list[Node] = field(default_factory=list)
    end: Command | None = None


Node = Command | IfBlock | Scope

_SCOPE_ENDS = {
    "function": "endfunction",
    "macro": "endmacro",
    "foreach": "endforeach",
    "while": "endwhile",
    "block": "endblock",
}
_ENDS = frozenset(_SCOPE_ENDS.values()) | {"endif"}


def build_blocks(commands: list[Command], last_line: int) -> tuple[list[Node], list[tuple[int, str]]]:
    """Nest commands into blocks; unbalanced block commands are reported and repaired."""
    root: list[Node] = []
    stack: list[IfBlock | Scope] = []
    problems: list[tuple[int, str]] = []

    def body() -> list[Node]:
        if not stack:
            return root
        top = stack[-1]
        return top.branches[-1].body if isinstance(top, IfBlock) else top.body

    def close(block: IfBlock | Scope, end: Command | None) -> None:
        block.end = end
        if isinstance(block, IfBlock):
            stop = end.line if end else last_line + 1
            for branch, following in zip(block.branches, [*block.branches[1:], None], strict=True):
                branch.last_line = (following.head.line if following else stop) - 1

    for command in commands:
        name = command.name
        if (name == "if" or name in _SCOPE_ENDS) and len(stack) >= MAX_NESTING:
            raise _TooDeep(command.line)
        if name == "if":
            block = IfBlock([Branch(command)])
            body().append(block)
            stack.append(block)
        elif name in ("elseif", "else"):
            top = stack[-1] if stack else None
            if isinstance(top, IfBlock) and top.branches[-1].head.name != "else":
                top.branches.append(Branch(command))
            else:
                problems.append((command.line, f"{name}() without a matching if()"))
        elif name in _SCOPE_ENDS:
            scope = Scope(command)
            body().append(scope)
            stack.append(scope)
        elif name in _ENDS:
            opener = "if" if name == "endif" else name[3:]
            match = next((i for i in range(len(stack) - 1, -1, -1) if _opener(stack[i]) == opener), None)
            if match is None:
                problems.append((command.line, f"{name}() without a matching {opener}()"))
                continue
            for unclosed in stack[match + 1 :]:
                problems.append((_head(unclosed).line, f"{_opener(unclosed)}() is closed by {name}()"))
            while len(stack) > match + 1:
                close(stack.pop(), None)
            close(stack.pop(), command)
        else:
            body().append(command)
    while stack:
        unclosed = stack.pop()
        problems.append((_head(unclosed).line, f"{_opener(unclosed)}() is never closed"))
        close(unclosed, None)
    return root, problems


def _opener(block: IfBlock | Scope) -> str:
    return "if" if isinstance(block, IfBlock) else block.head.name


def _head(block: IfBlock | Scope) -> Command:
    return block.branches[0].head if isinstance(block, IfBlock) else block.head


def _walk(nodes: Iterable[Node]) -> Iterator[Command]:
    """Every command under ``nodes``, block heads included, in file order."""
    for node in nodes:
        if isinstance(node, Command):
            yield node
        elif isinstance(node, IfBlock):
            for branch in node.branches:
                yield branch.head
                yield from _walk(branch.body)
        else:
            yield node.head
            yield from _walk(node.body)


# --------------------------------------------------------------------------------------------
# Arch entries and what they admit
# --------------------------------------------------------------------------------------------

Style = Literal["cmake", "torch", "loose", "exact"]

_ENTRY = re.compile(r"^(?:(sm|compute|lto)_?)?(?:([0-9]{1,2})\.([0-9])|([0-9]{2,3}))([afAF]?)$")
# Compute capabilities older than the known universe: their SASS admits nothing liftgate knows,
# their PTX every baseline target.
_OLD_CAPABILITIES = frozenset(
    {(3, 0), (3, 2), (3, 5), (3, 7), (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2)}
)
_SPECIAL_VALUES = frozenset({"all", "all-major", "native", "off"})


@dataclass(frozen=True, slots=True)
class ArchEntry:
    """One entry of an arch list or gencode flag: the target and whether SASS and/or PTX is built."""

    spelling: str
    arch: Arch | None  # None: a capability older than liftgate's universe
    cc: tuple[int, int]
    sass: bool
    ptx: bool
    note: str | None = None


def parse_entry(spelling: str, style: Style) -> ArchEntry | None:
    """One arch-list entry in the given style, or None when it names no CUDA architecture."""
    text = spelling.strip()
    sass, ptx = True, style == "cmake"
    lower = text.lower()
    if lower.endswith("+ptx"):
        text, sass, ptx = text[:-4].rstrip(), True, True
    elif lower.endswith("-real"):
        text, sass, ptx = text[:-5], True, False
    elif lower.endswith("-virtual"):
        text, sass, ptx = text[:-8], False, True
    match = _ENTRY.match(text)
    if match is None:
        return None
    prefix, major, minor, number, variant = match.groups()
    if prefix and prefix.lower() == "compute":
        sass, ptx = False, True
    cc = (int(number) // 10, int(number) % 10) if number is not None else (int(major), int(minor))
    variant = variant.lower()
    resolved = _resolve(cc, variant)
    if resolved is None:
        if cc in _OLD_CAPABILITIES and not variant:
            return ArchEntry(spelling, None, cc, sass, ptx)
        return None
    arch, note = resolved
    return ArchEntry(spelling, arch, arch.cc, sass, ptx, note)


@cache
def _resolve(cc: tuple[int, int], variant: str) -> tuple[Arch, str | None] | None:
    """The known target for a capability and variant (former names renamed), None when unknown.

    Memoised: an unknown spelling costs resolve_arch a search for suggestions every time.
    """
    try:
        resolution = resolve_arch(f"{cc[0]}.{cc[1]}{variant}")
    except UnknownArchError:
        return None
    return resolution.arch, resolution.note


def _where(predicate: Callable[[Arch], bool]) -> ArchSet:
    return ArchSet(a for a in universe() if predicate(a))


def _capability(cc: tuple[int, int]) -> ArchSet:
    """Every target (all variants) of one compute capability."""
    return _where(lambda a: a.cc == cc)


@cache
def _family_members(cc: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    cap = arch_data().capability(cc)
    if cap is None or cap.family is None:
        return (cc,)
    return arch_data().families.get(cap.family, (cc,))


def compile_admitted(entry: ArchEntry) -> ArchSet:
    """The targets that code built for ``entry`` runs on (see the module docstring)."""
    arch = entry.arch
    if arch is None:
        return _where(lambda a: a.variant == "") if entry.ptx else ArchSet.none()
    if arch.variant == "a":
        return ArchSet([arch])
    if arch.variant == "f":
        members = {m for m in _family_members(arch.cc) if m >= arch.cc}
        return _where(lambda a: a.variant == "f" and a.cc in members)
    admitted = ArchSet([arch]) if entry.sass else ArchSet.none()
    if entry.ptx:
        admitted |= _where(lambda a: a.variant == "" and a.cc >= arch.cc)
    return admitted


def loose_admitted(entry: ArchEntry) -> ArchSet:
    """What a SRC entry of vLLM's ``cuda_archs_loose_intersection`` admits (module docstring)."""
    arch = entry.arch
    if arch is None:
        return ArchSet.all() if entry.ptx else ArchSet.none()
    if arch.variant == "a":
        return _capability(arch.cc)
    if arch.variant == "f":
        members = {m for m in _family_members(arch.cc) if m >= arch.cc}
        return _where(lambda a: a.cc in members)
    if entry.ptx:
        return _where(lambda a: a.cc >= arch.cc)
    return _where(lambda a: a.major == arch.major and a.cc >= arch.cc)


def exact_admitted(entry: ArchEntry) -> ArchSet:
    """What an entry of a plain (not loose) intersection admits: its capability, any variant."""
    arch = entry.arch
    if arch is None:
        return ArchSet.all() if entry.ptx else ArchSet.none()
    if entry.ptx and not arch.variant:
        return _where(lambda a: a.cc >= arch.cc)
    return _where(lambda a: a.cc == arch.cc)


def special_admitted(value: str) -> tuple[ArchSet, ArchSet, str]:
    """(admitted, unknown, assumption) of CMake's/nvcc's ``all``, ``all-major``, ``native`` and ``OFF``."""
    if value in ("native", "off"):
        why = (
            "the GPUs of the machine that runs the build"
            if value == "native"
            else "nvcc's default architecture (CMake passes none)"
        )
        return ArchSet.none(), ArchSet.all(), f"{value}: {why}"
    baseline = [a for a in universe() if not a.variant]
    newest_major = max(a.major for a in baseline)
    # all: SASS for every arch and PTX for the newest; all-major: SASS for X.0 and PTX for the newest major.
    admitted = ArchSet(a for a in baseline if value == "all" or a.minor == 0 or a.major == newest_major)
    return (
        admitted,
        ArchSet.none(),
        f"{value}: the architectures the CUDA toolkit supports (taken as those liftgate knows)",
    )


def _admitted(entry: ArchEntry, style: Style) -> ArchSet:
    if style == "loose":
        return loose_admitted(entry)
    if style == "exact":
        return exact_admitted(entry)
    return compile_admitted(entry)


def _describe(entry: ArchEntry, style: Style) -> str:
    """One entry and what it builds, for evidence: ``90: SASS sm_90 + PTX compute_90 (JIT on later GPUs)``."""
    cc = f"{entry.cc[0]}.{entry.cc[1]}"
    arch = entry.arch
    if style in ("loose", "exact"):
        if arch is not None and arch.variant == "f" and style == "loose":
            text = f"{entry.spelling}: built when {cc} or (vLLM 0.34+) a later arch of its family is built"
        elif arch is not None and arch.variant:
            text = f"{entry.spelling}: built as {arch.name} when {cc} is built"
        elif entry.ptx:
            text = f"{entry.spelling}: SASS and PTX, taken for every built arch from {cc} up"
        elif style == "loose":
            text = f"{entry.spelling}: SASS, taken for every built {entry.cc[0]}.x from {cc} up"
        else:
            text = f"{entry.spelling}: SASS, taken when {cc} is built"
    elif arch is None:
        text = f"{entry.spelling}: compute capability {cc}, older than every known target" + (
            ", as PTX (JIT on every later GPU)" if entry.ptx else ""
        )
    else:
        built = [f"SASS {arch.name}"] if entry.sass else []
        if entry.ptx:
            later = " (JIT on later GPUs)" if not arch.variant else ""
            built.append(f"PTX compute_{arch.number}{arch.variant}{later}")
        text = f"{entry.spelling}: {' + '.join(built)}"
    return f"{text} ({entry.note})" if entry.note else text


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


def _list_items(values: Iterable[str]) -> list[str]:
    items: list[str] = []
    for value in values:
        items.extend(item for item in re.split(r"(?<!\\);|[\s,]+", value) if item)
    return items


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


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _truncate(text: str) -> str:
    return text if len(text) <= _CONDITION_LIMIT else text[: _CONDITION_LIMIT - 1].rstrip() + "…"


# --------------------------------------------------------------------------------------------
# Conditions
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Cond:
    op: Literal["atom", "not", "and", "or"]
    text: str
    children: list[Cond] = field(default_factory=list)
    args: tuple[Argument, ...] = ()


def _display(args: Iterable[Argument]) -> str:
    return _collapse(" ".join(a.raw for a in args)).replace("( ", "(").replace(" )", ")")


def parse_condition(args: tuple[Argument, ...]) -> Cond | None:
    """An ``if()`` condition as a tree; CMake gives AND and OR one precedence, left to right.

    None when it cannot be parsed, or nests NOT and parentheses deeper than MAX_CONDITION_DEPTH.
    """
    pos = 0
    depth = 0

    def is_op(i: int, *words: str) -> bool:
        return i < len(args) and args[i].is_word(*words)

    def unary() -> Cond | None:
        nonlocal pos, depth
        if is_op(pos, "NOT", "("):
            if depth >= MAX_CONDITION_DEPTH:
                return None
            depth += 1
            try:
                return nested()
            finally:
                depth -= 1
        start = pos
        while pos < len(args) and not is_op(pos, "AND", "OR", ")") and not (pos > start and is_op(pos, "(")):
            pos += 1
        if pos == start:
            return None
        return Cond("atom", _display(args[start:pos]), args=args[start:pos])

    def nested() -> Cond | None:
        nonlocal pos
        if is_op(pos, "NOT"):
            start = pos
            pos += 1
            child = unary()
            if child is None:
                return None
            return Cond("not", _display(args[start:pos]), [child])
        start = pos
        pos += 1
        inner = expression()
        if inner is None or not is_op(pos, ")"):
            return None
        pos += 1
        inner.text = _display(args[start + 1 : pos - 1])
        return inner

    def expression() -> Cond | None:
        nonlocal pos
        start = pos
        left = unary()
        # A chain of one operator grows one node in place; its text is made when it is complete
        # (once, not at every operand: a 100,000-operand AND chain stays linear).
        chain: Cond | None = None
        end = pos
        while left is not None and is_op(pos, "AND", "OR"):
            op: Literal["and", "or"] = "and" if args[pos].value == "AND" else "or"
            pos += 1
            right = unary()
            if right is None:
                return None
            if chain is not None and chain.op == op:
                chain.children.append(right)
            else:
                if chain is not None:
                    chain.text = _display(args[start:end])
                children = left.children if left.op == op else [left]
                chain = left = Cond(op, "", [*children, right])
            end = pos
        if chain is not None:
            chain.text = _display(args[start:end])
        return left

    tree = expression()
    if tree is None or pos != len(args):
        return None
    return tree


@dataclass
class _ArchTest:
    """The arch part of a condition: targets for which it holds, and what was assumed of the rest."""

    admitted: ArchSet
    deps: list[str]
    inferred: bool
    tests: int  # arch tests proper (IN_LIST, MATCHES, STREQUAL on an arch list)


AtomFn = Callable[[Cond], "tuple[ArchSet, bool, str | None] | None"]
NoteFn = Callable[[Cond, bool], "str | None"]


def _evaluate(cond: Cond, atom: AtomFn, note: NoteFn | None = None) -> _ArchTest | None:
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
        return _ArchTest(admitted, [], inferred, 0 if out else 1)
    if cond.op == "not":
        inner = _evaluate(cond.children[0], atom, note)
        if inner is None:
            return None
        inner.admitted = ~inner.admitted
        return inner
    results = [_evaluate(child, atom, note) for child in cond.children]
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
    return _ArchTest(
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


class _Toolkit:
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
        for command in _walk(nodes):
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
    """What a branch does: sources it builds, defines it adds, messages it prints."""

    sources: list[str] = field(default_factory=list)
    defines: list[str] = field(default_factory=list)
    messages: list[tuple[str, str, int]] = field(default_factory=list)  # (mode, text, line)

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


def _summarize(nodes: Iterable[Node]) -> _Summary:
    summary = _Summary()
    for command in _walk(nodes):
        if command.name == "message":
            args = command.args
            has_mode = bool(args) and args[0].is_word(*_MESSAGE_MODES)
            mode = args[0].value if has_mode else "NOTICE"
            text = "".join(a.value for a in args[1 if has_mode else 0 :])
            summary.messages.append((mode, _collapse(text), command.line))
            continue
        if command.name in ("if", "elseif", "else", "while", "function", "macro"):
            continue
        for arg in command.args:
            for item in _list_items([arg.value]):
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


def _extension_deps(info: _Intersection) -> list[str]:
    return [f"what {_truncate(c.render())} (line {c.line}) adds to {info.out}" for c in info.extensions]


class _Analyzer:
    def __init__(self, package: str, version: str | None, path: str, toolkit: _Toolkit | None = None) -> None:
        self.package = package
        self.version = version
        self.path = path
        self.gates: list[Gate] = []
        self.skips: list[Skip] = []
        self.occurrences: dict[tuple[str, tuple[str, ...]], int] = {}
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
    ) -> Gate | None:
        """Record a gate for ``command`` unless it admits every target (then it gates nothing)."""
        unknown = unknown - admitted
        if admitted == ArchSet.all():
            return None  # lets every target through: gates nothing
        norm = command.render()
        scope = tuple(f.label for f in frames)
        key = (norm, scope)
        occurrence = self.occurrences.get(key, 0)
        self.occurrences[key] = occurrence + 1
        deps = [d for f in frames for d in f.deps]
        deps.extend(depends_on)
        gate = Gate(
            id=gate_id(GateKind.CMAKE, self.package, self.path, norm, scope, occurrence),
            kind=GateKind.CMAKE,
            location=Location(self.package, self.version, self.path, Span(command.line, command.end_line)),
            condition=_truncate(norm),
            admitted=admitted,
            unknown=unknown,
            host=None,
            then_span=then_span,
            else_span=else_span,
            else_kind=else_kind,
            confidence=confidence,
            evidence=tuple(evidence),
            depends_on=tuple(dict.fromkeys(deps)),
            directive=command.name,
            enclosing=tuple(dict.fromkeys(g for f in frames for g in f.gates)),
        )
        self.gates.append(gate)
        return gate

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
                        branch.body = []
                    else:
                        self.prune(branch.body)
            elif isinstance(node, Scope):
                self.prune(node.body)

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
        for command in _walk(nodes):
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
            if any(re.match(r"^[0-9]{1,2}\.[0-9]", item) for item in _list_items(a.value for a in items)):
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
            for command in [node] if isinstance(node, Command) else _walk([node]):
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
                if out in self._assigned(node) and any(self._changes(info, c) for c in _walk([node])):
                    return False
        return False

    def _note_uses(self, info: _Intersection, following: tuple[list[Node], ...]) -> None:
        """No if(OUT) follows: cite the commands that use OUT instead (set_gencode_flags_for_srcs …)."""
        reference = "${" + info.out + "}"
        uses: list[Command] = []
        for nodes in following:
            for command in _walk(nodes):
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

        test = _evaluate(cond, atom, self._note) if cond is not None else None
        info.negated = test is not None and test.admitted == ~marker
        if test is not None:
            info.deps.extend(test.deps)
        for earlier in block.branches[:k]:
            info.deps.append(self._earlier(earlier, _display(earlier.head.args)))
        built = [branch]
        otherwise = block.branches[k + 1 :]
        if info.negated:
            built, otherwise = otherwise, [branch]
        summary = _summarize(n for b in built for n in b.body)
        what = info.src.value
        where = built[0].head.line if built else branch.head.line
        if summary.sources:
            info.evidence.append(Evidence(f"builds {_shorten(summary.sources)} for {what}", self.path, where))
        if summary.defines:
            info.evidence.append(Evidence(f"adds {_shorten(summary.defines)}", self.path, where))
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
                bindings[head.args[0].value] = tuple(_list_items(a.value for a in items))
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
                    earlier.append(self._earlier(branch, _display(branch.head.args)))
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
                    earlier.append(f"NOT ({_display(head.args)})")
                    deps.append(_display(head.args))
                else:
                    test = _evaluate(cond, self.arch_atom, self._note)
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
        test: _ArchTest,
        deps: list[str],
        frames: tuple[_Frame, ...],
    ) -> Gate | None:
        branch = block.branches[k]
        summary = _summarize(branch.body)
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
            entries = [parse_entry(item, "exact") for item in _list_items([left.value])]
            archs = [e.arch for e in entries if e is not None and e.arch is not None]
            return (ArchSet(archs), False, None) if archs and len(archs) == len(entries) else None
        if op == "STREQUAL":
            variable, literal = (left, right) if self._names_arch_list(left) else (right, left)
            if not self._names_arch_list(variable) or literal.has_reference:
                return None
            entries = [parse_entry(item, "exact") for item in _list_items([literal.value])]
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
            admitted |= ArchSet([arch]) if arch.variant else _capability(arch.cc)
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
                for item in _list_items([value]):
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
            if (upper in _CMAKE_LISTS or style == "cmake") and item.lower() in _SPECIAL_VALUES:
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
            admitted |= _admitted(entry, style)
        unknown = ArchSet.none()
        depends: list[str] = []
        evidence: list[Evidence] = []
        if entries:
            described = [_describe(e, style) for e in entries]
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
        )

    def intersection_gate(self, info: _Intersection, frames: tuple[_Frame, ...]) -> None:
        src = info.src
        items = _list_items(_substitute(src.value, self._bindings(frames)))
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
            admitted |= _admitted(entry, info.style)
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
                "; ".join(_describe(e, info.style) for e in good[:_SHOWN_ITEMS]), self.path, info.command.line
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
            if value.lower() in _SPECIAL_VALUES:
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
        described = [_describe(e, "cmake") for e in entries]
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
        except _TooDeep as exc:
            return Detection((), (Skip(path, str(exc), package),))
        toolkit = _Toolkit(cuda_version, nodes) if cuda_version is not None else None
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
        return Detection(tuple(analyzer.gates), tuple(analyzer.skips))
    except Exception as exc:  # a safety net: one odd file must never stop a scan
        return Detection(
            (), (Skip(path, f"the CMake detector failed on this file: {type(exc).__name__}: {exc}", package),)
        )
