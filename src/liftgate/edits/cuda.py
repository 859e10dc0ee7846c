"""The edit that lifts a CUDA preprocessor gate: ``#if COND`` becomes ``#if (COND) || EXACT``;
the one that shuts a target out of it (``lift --exclude``): ``#if (COND) && !EXACT``.

``EXACT`` is `liftgate.arch.core.cuda_exact_test`: true in exactly the device passes that compile
for the target and never in the host pass, so host code and every other target see the file as
before. ``#ifdef X``/``#ifndef X`` become ``#if defined(X) || …``/``#if !defined(X) || …``;
``#elif`` keeps its place in the chain, so earlier branches still win where they are taken.
A directive continued over several lines keeps its lines: ``(`` opens after the keyword and
``) || EXACT`` closes on the last line, before a trailing comment. Pure text in, text out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from liftgate.arch.core import Arch, cuda_exact_test

_DIRECTIVE = re.compile(r"^([ \t]*#[ \t]*)(if|elif|ifdef|ifndef)\b([ \t]*)")
_TRAILING_COMMENT = re.compile(r"[ \t]*(?://.*|/\*(?:(?!\*/).)*\*/[ \t]*)$")


class EditError(ValueError):
    """The lines at a gate's place are not the directive the gate was read from."""


@dataclass(frozen=True, slots=True)
class DirectiveEdit:
    before: list[str]  # the directive's physical lines, newline included
    after: list[str]  # as many lines, lifted


def _line_end(line: str) -> str:
    return line[len(line.rstrip("\r\n")) :]


def _split_comment(code: str) -> tuple[str, str]:
    """``code`` without a trailing ``//``/``/* */`` comment, and that comment (with its spacing)."""
    m = _TRAILING_COMMENT.search(code)
    if m is None or code[: m.start()].count('"') % 2:
        return code, ""
    return code[: m.start()], code[m.start() :]


def lift_directive(lines: list[str], marker: str | None, arch: Arch, exclude: bool = False) -> DirectiveEdit:
    """Lift the directive in ``lines`` (its physical lines, continuations included) for ``arch``;
    with ``exclude``, make it false in ``arch``'s passes instead (every other pass sees it as before).

    ``marker``, when given, is appended as a ``/* … */`` comment on the last line. Raises `EditError` when
    the first line is not an ``#if``-family directive.
    """
    if not lines:
        raise EditError("no directive lines")
    first = lines[0]
    m = _DIRECTIVE.match(first)
    if m is None:
        raise EditError(f"expected #if/#elif/#ifdef/#ifndef, found {first.strip()[:60]!r}")
    test = cuda_exact_test(arch)
    join = f"&& !{test}" if exclude else f"|| {test}"
    note = f"  /* {marker} */" if marker else ""
    lead, keyword, space = m.group(1), m.group(2), m.group(3) or " "
    if keyword in ("ifdef", "ifndef"):
        if len(lines) != 1:
            raise EditError(f"#{keyword} continued over several lines")
        code, comment = _split_comment(first.rstrip("\r\n")[m.end() :])
        name = code.strip()
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise EditError(f"#{keyword} of {name!r} is not a macro name")
        neg = "!" if keyword == "ifndef" else ""
        return DirectiveEdit(
            list(lines), [f"{lead}if {neg}defined({name}) {join}{note}{comment}{_line_end(first)}"]
        )
    head = f"{lead}{keyword}{space}"
    if len(lines) == 1:
        code, comment = _split_comment(first.rstrip("\r\n")[m.end() :])
        cond = code.strip()
        if not cond:
            raise EditError(f"#{keyword} without a condition")
        wrapped = cond if _parenthesised(cond) else f"({cond})"
        return DirectiveEdit(list(lines), [f"{head}{wrapped} {join}{note}{comment}{_line_end(first)}"])
    # Continued: '(' after the keyword, ') || test' (or ') && !test') at the end of the last line's code.
    after = [f"{head}({first[m.end() :]}", *lines[1:]]
    last = after[-1]
    code, comment = _split_comment(last.rstrip("\r\n"))
    if code.rstrip().endswith("\\"):
        raise EditError("the directive's last line ends in a continuation")
    after[-1] = f"{code.rstrip()}) {join}{note}{comment}{_line_end(last)}"
    return DirectiveEdit(list(lines), after)


def _parenthesised(text: str) -> bool:
    """Whether ``text`` is one parenthesised group: ``(a && b)`` but not ``(a) && (b)``."""
    if not (text.startswith("(") and text.endswith(")")):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and i < len(text) - 1:
            return False
    return True
