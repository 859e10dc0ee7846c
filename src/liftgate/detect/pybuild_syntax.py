"""Small helpers on Python syntax trees, shared by the py-build detector's modules (`liftgate.detect.pybuild`)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from liftgate.detect.py_binding import walk
from liftgate.model import Span

# What `literal_value` returns for an expression that is no literal.
NOT_LITERAL = object()


def dotted_name(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def callee_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def literal_value(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_LITERAL


def call_keyword(call: ast.Call, name: str) -> ast.keyword | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword
    return None


def call_argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    keyword = call_keyword(call, name)
    if keyword is not None:
        return keyword.value
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return None


def node_span(node: ast.AST) -> Span:
    start = getattr(node, "lineno", 1)
    end = getattr(node, "end_lineno", None) or start
    return Span(start, end)


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in walk(node) if isinstance(n, ast.Name)}


def join_names(names: Sequence[str]) -> str:
    return ", ".join(names)
