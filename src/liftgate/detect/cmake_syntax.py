"""CMake syntax: the tokenizer, the block builder and ``if()`` conditions, for `liftgate.detect.cmake`.

A small but real CMake tokenizer splits a file into command invocations (unquoted, quoted and
bracket arguments, ``#`` and ``#[[ ]]`` comments, ``${VAR}`` references, arguments over several
lines), and a block builder nests them under ``if``/``elseif``/``else``, ``function``, ``macro``,
``foreach``, ``while`` and ``block``. ``if()`` arguments parse into a condition tree (`Cond`).

Hostile files are bounded: blocks nested deeper than `MAX_NESTING` raise `TooDeep`, a condition
nested deeper than `MAX_CONDITION_DEPTH` is not parsed, and a command with more than
`MAX_ARGUMENTS` arguments is not read (each reported as a problem).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

# Bounds far above real build files (vLLM's and FlashInfer's nest blocks 5 deep, their longest
# command has a few hundred arguments, their deepest if() has 3 levels of parentheses).
MAX_NESTING = 100
MAX_CONDITION_DEPTH = 100
MAX_ARGUMENTS = 100_000

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


def unescape(text: str) -> str:
    """An unquoted or quoted argument's text with CMake's escapes resolved."""
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


class TooDeep(Exception):
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
            args.append(Argument(unescape(quoted.group(1)), "quoted", lines.line(pos), quoted.group(0)))
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
                    parts.append(unescape(run.group(0)))
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
            raise TooDeep(command.line)
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


def walk(nodes: Iterable[Node]) -> Iterator[Command]:
    """Every command under ``nodes``, block heads included, in file order."""
    for node in nodes:
        if isinstance(node, Command):
            yield node
        elif isinstance(node, IfBlock):
            for branch in node.branches:
                yield branch.head
                yield from walk(branch.body)
        else:
            yield node.head
            yield from walk(node.body)


def list_items(values: Iterable[str]) -> list[str]:
    """The items of CMake lists (``;``-separated), split at whitespace and commas too."""
    items: list[str] = []
    for value in values:
        items.extend(item for item in re.split(r"(?<!\\);|[\s,]+", value) if item)
    return items


def collapse(text: str) -> str:
    """``text`` with every run of whitespace made one space."""
    return " ".join(text.split())


# --------------------------------------------------------------------------------------------
# Conditions
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Cond:
    """A parsed ``if()`` condition: an atom (its arguments), or NOT/AND/OR of children."""

    op: Literal["atom", "not", "and", "or"]
    text: str
    children: list[Cond] = field(default_factory=list)
    args: tuple[Argument, ...] = ()


def display(args: Iterable[Argument]) -> str:
    """Arguments as written, whitespace collapsed: the text of a condition."""
    return collapse(" ".join(a.raw for a in args)).replace("( ", "(").replace(" )", ")")


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
        return Cond("atom", display(args[start:pos]), args=args[start:pos])

    def nested() -> Cond | None:
        nonlocal pos
        if is_op(pos, "NOT"):
            start = pos
            pos += 1
            child = unary()
            if child is None:
                return None
            return Cond("not", display(args[start:pos]), [child])
        start = pos
        pos += 1
        inner = expression()
        if inner is None or not is_op(pos, ")"):
            return None
        pos += 1
        inner.text = display(args[start + 1 : pos - 1])
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
                    chain.text = display(args[start:end])
                children = left.children if left.op == op else [left]
                chain = left = Cond(op, "", [*children, right])
            end = pos
        if chain is not None:
            chain.text = display(args[start:end])
        return left

    tree = expression()
    if tree is None or pos != len(args):
        return None
    return tree
