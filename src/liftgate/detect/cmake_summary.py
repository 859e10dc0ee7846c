"""What a block of a CMake file builds: its sources, ``-D`` defines and messages (`Summary`).

`summarize` reads the commands of a block as the analysis sees them (branches the assumed toolkit
never takes are emptied); `summarize_block` adds every ``-D`` flag that the block passes as written
(`build_flags`), pruned branches included, and `build_target` is the `BuildTarget` fact of a block.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from liftgate.detect.cmake_syntax import (
    Argument,
    Command,
    IfBlock,
    Node,
    collapse,
    list_items,
    unescape,
    walk,
)
from liftgate.model import BuildFlag, BuildTarget

_SOURCE_FILE = re.compile(r"\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|hip)$")
_DEFINE_FLAG = re.compile(r"^-D[A-Za-z_]\w*(?:=\S*)?$")


@dataclass
class Summary:
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


def summarize(nodes: Iterable[Node]) -> Summary:
    summary = Summary()
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


def written_commands(nodes: Iterable[Node], pruned: dict[int, list[Node]]) -> Iterator[Command]:
    """Every command under ``nodes`` as written, block heads and pruned branches included.

    ``pruned`` maps id(Branch) to the body that pruning emptied.
    """
    for node in nodes:
        if isinstance(node, Command):
            yield node
        elif isinstance(node, IfBlock):
            for branch in node.branches:
                yield branch.head
                yield from written_commands(pruned.get(id(branch), branch.body), pruned)
        else:
            yield node.head
            yield from written_commands(node.body, pruned)


def summarize_block(
    nodes: Iterable[Node], path: str, pruned: dict[int, list[Node]], heads: Iterable[Command] = ()
) -> Summary:
    """What ``nodes`` do (`summarize`), with every ``-D`` flag that they, or ``heads``, pass.

    The flags of branches the assumed toolkit never takes count: the block passes them under
    another toolkit, and a host gate compiled under one is linked whichever toolkit is assumed.
    """
    nodes = list(nodes)
    summary = summarize(nodes)
    for command in [*heads, *written_commands(nodes, pruned)]:
        summary.flags.extend(build_flags(command, path))
    summary.flags.sort(key=lambda f: f.line)
    return summary


def build_target(name: str | None, summary: Summary, path: str, line: int) -> BuildTarget:
    """The `BuildTarget` fact of a block: every source it names, as written."""
    return BuildTarget("CMake target", name, tuple(summary.sources), False, path, line)
