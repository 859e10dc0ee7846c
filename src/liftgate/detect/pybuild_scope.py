"""Structure and names in the file the py-build detector reads: parents, scopes, and what a name stands for.

The detector walks only the parts of a syntax tree that hold a hint, so `FileScope.parents` holds
the parents of what was walked; `FileScope._index` records a whole subtree when more is needed.
Names resolve through simple assignments in the file only (`FileScope._resolve`): the code is
never imported or run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import Any

from liftgate.detect.py_binding import walk
from liftgate.detect.pybuild_syntax import NOT_LITERAL, literal_value, names_in
from liftgate.detect.pybuild_text import FileText

# Calls that copy a collection without changing which items it holds.
_COLLECTION_CALLS = frozenset({"list", "tuple", "set", "frozenset", "sorted"})
_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class FileScope(FileText):
    """A parsed file: the parents of its nodes, the scopes they sit in, and what the names in them stand for."""

    def __init__(self, package: str, version: str | None, path: str, text: str, tree: ast.Module) -> None:
        super().__init__(package, version, path, text)
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        self._locals_cache: dict[ast.AST, dict[str, list[ast.expr | None]]] = {}
        self._class_cache: dict[ast.AST, dict[str, list[ast.expr | None]]] = {}
        self.module_names = self._assignments_in(tree.body)
        self._indexed: set[ast.AST] = set()
        # The node the walk visits: nodes below it have no recorded parents yet (see `_resolve`).
        self._visiting: ast.AST | None = None

    # -- structure

    def _index(self, root: ast.AST) -> None:
        """Record the parents of a whole subtree (the walk in `run` records only the parts it visits)."""
        if root in self._indexed:
            return
        self._indexed.add(root)
        for node in walk(root):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node

    def _scope(self, node: ast.AST) -> tuple[str, ...]:
        names: list[str] = []
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, _SCOPE_NODES):
                names.append(current.name)
            current = self.parents.get(current)
        return tuple(reversed(names))

    def _enclosing(self, node: ast.AST, kinds: tuple[type[ast.AST], ...]) -> ast.AST | None:
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, _SCOPE_NODES):
                return current if isinstance(current, kinds) else None
            current = self.parents.get(current)
        return None

    def _function(self, node: ast.AST) -> ast.AST | None:
        return self._enclosing(node, _FUNCTION_NODES)

    def _ancestors(self, node: ast.AST, stop: ast.AST | None) -> Iterator[ast.AST]:
        current = self.parents.get(node)
        while current is not None and current is not stop:
            yield current
            current = self.parents.get(current)

    def _statement(self, node: ast.AST) -> ast.stmt | None:
        current: ast.AST | None = node
        while current is not None and not isinstance(current, ast.stmt):
            current = self.parents.get(current)
        return current

    # -- names and their values

    @staticmethod
    def _assignments_in(body: Iterable[ast.stmt]) -> dict[str, list[ast.expr | None]]:
        """Names bound directly in a block (None where the value is not one expression)."""
        found: dict[str, list[ast.expr | None]] = {}
        for statement in body:
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, []).append(statement.value)
                    else:
                        for name in walk(target):
                            if isinstance(name, ast.Name):
                                found.setdefault(name.id, []).append(None)
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                if statement.value is not None:
                    found.setdefault(statement.target.id, []).append(statement.value)
            elif isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
                found.setdefault(statement.target.id, []).append(None)
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.setdefault(statement.name, []).append(None)
            elif isinstance(statement, (ast.Import, ast.ImportFrom)):
                for alias in statement.names:
                    found.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
        return found

    def _locals(self, function: ast.AST) -> dict[str, list[ast.expr | None]]:
        """Names bound anywhere in a function body, outside nested functions and classes."""
        cached = self._locals_cache.get(function)
        if cached is not None:
            return cached
        assert isinstance(function, _FUNCTION_NODES)
        found: dict[str, list[ast.expr | None]] = {}
        arguments = function.args
        for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            found.setdefault(argument.arg, []).append(None)
        for extra in (arguments.vararg, arguments.kwarg):
            if extra is not None:
                found.setdefault(extra.arg, []).append(None)
        pending: list[ast.AST] = list(function.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (*_SCOPE_NODES, ast.Lambda)):
                if isinstance(node, _SCOPE_NODES):
                    found.setdefault(node.name, []).append(None)
                continue
            if isinstance(node, ast.stmt):
                for name, values in self._assignments_in([node]).items():
                    found.setdefault(name, []).extend(values)
            if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                for name in names_in(node.target):
                    found.setdefault(name, []).append(None)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for name in names_in(node.optional_vars):
                    found.setdefault(name, []).append(None)
            elif isinstance(node, ast.NamedExpr):
                found.setdefault(node.target.id, []).append(None)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                for name in node.names:
                    found.setdefault(name, []).append(None)
            pending.extend(ast.iter_child_nodes(node))
        self._locals_cache[function] = found
        return found

    def _class_names(self, cls: ast.AST) -> dict[str, list[ast.expr | None]]:
        cached = self._class_cache.get(cls)
        if cached is None:
            assert isinstance(cls, ast.ClassDef)
            cached = self._assignments_in(cls.body)
            self._class_cache[cls] = cached
        return cached

    def _resolve(self, node: ast.expr) -> tuple[ast.expr, str | None] | None:
        """The expression a name stands for, through simple assignments in this file, and its binding.

        The binding is "module", "class" or "local" (None when ``node`` is not a name). Returns None
        when the name is bound more than once, is a parameter, or is not bound in this file.
        """
        # A node below the one being visited has no recorded parents yet; it shares that node's scope.
        anchor = node if node in self.parents else (self._visiting or node)
        return self._resolve_in(node, self._function(anchor), self._enclosing_class(anchor), 0)

    def _resolve_in(
        self, node: ast.expr, function: ast.AST | None, cls: ast.ClassDef | None, depth: int
    ) -> tuple[ast.expr, str | None] | None:
        if depth > 4:
            return None
        if isinstance(node, ast.Name):
            scope = function
            while scope is not None:
                bound = self._locals(scope).get(node.id)
                if bound is not None:
                    return self._single(bound, "local", scope, depth)
                scope = self._function(scope)
            bound = self.module_names.get(node.id)
            return self._single(bound, "module", None, depth) if bound is not None else None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if cls is not None and node.value.id in ("self", "cls", cls.name):
                bound = self._class_names(cls).get(node.attr)
                return self._single(bound, "class", None, depth) if bound is not None else None
            return None
        return node, None

    def _single(
        self, bound: list[ast.expr | None], binding: str, function: ast.AST | None, depth: int
    ) -> tuple[ast.expr, str | None] | None:
        """The one value a name is bound to (a name bound twice, or by a loop or parameter, has none)."""
        if len(bound) != 1 or bound[0] is None:
            return None
        value = bound[0]
        if isinstance(value, (ast.Name, ast.Attribute)):
            # NAME = OTHER_NAME: what OTHER_NAME is, seen from where NAME is bound.
            return self._resolve_in(value, function, None, depth + 1)
        return value, binding

    def _enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, ast.ClassDef):
                return current
            current = self.parents.get(current)
        return None

    def _literal_of(self, node: ast.expr) -> tuple[Any, str | None]:
        """The literal value of an expression or of the name it is (and the name's binding)."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _COLLECTION_CALLS
            and len(node.args) == 1
            and not node.keywords
        ):
            node = node.args[0]  # list(SUPPORTED_MAJORS): the same items
        resolved = self._resolve(node)
        if resolved is None:
            return NOT_LITERAL, None
        value, binding = resolved
        return literal_value(value), binding

    def _env_key(self, node: ast.expr | None) -> str | None:
        if node is None:
            return None
        value, _ = self._literal_of(node)
        return value if isinstance(value, str) else None
