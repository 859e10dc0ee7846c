"""A Python call graph across the scanned packages, built lazily from the code (never imported).

`CallGraph` parses a module the first time a chain needs it and answers two questions:

* **who is called** from some lines of a function (`CallGraph.callees`): each call's callee is
  resolved through the names the code binds: imports (absolute, relative, inside functions,
  inside ``if``/``try`` at module level), re-exports in ``__init__`` modules, module-level
  aliases (``_create = comm.create_allreduce_fusion_workspace``), ``self.method`` and
  ``cls.method`` in a class and its bases, and ``Class(...)`` as its ``__init__``. A call on an
  object of unknown type (``manager.initialize()``) resolves *by name* to the methods of that
  name in the same module, and is labelled inexact.
* **who calls** a function (`CallGraph.callers`): files that mention its name (a byte search),
  parsed and resolved as above, so a caller counts only when its call resolves to the function.

Anything else (calls through registries, ``getattr`` with strings, objects returned by other
calls) is not followed; chains say so rather than guess.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from liftgate.detect.py_binding import parse_python
from liftgate.detect.python import module_name_for, resolve_relative
from liftgate.sources.workspace import Workspace, read_text

MAX_RESOLVE_DEPTH = 8  # alias / re-export hops followed for one name


@dataclass(eq=False)
class Function:
    """A ``def`` of a scanned module: ``qualname`` is ``f``, ``Class.method`` or ``outer.inner``."""

    module: Module
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: ClassInfo | None
    parent: Function | None = None
    local_imports: dict[str, list[_Import]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def first(self) -> int:
        return self.node.lineno

    @property
    def last(self) -> int:
        return self.node.end_lineno or self.node.lineno

    def render(self) -> str:
        return f"{self.qualname}() at {self.module.path}:{self.first}"


@dataclass(eq=False)
class ClassInfo:
    module: Module
    qualname: str
    node: ast.ClassDef
    methods: dict[str, Function] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Import:
    module: str  # the absolute module name
    attr: str | None  # `from module import attr`; None for `import module [as x]`


@dataclass(eq=False)
class Module:
    name: str
    package: str
    version: str | None
    path: str
    tree: ast.Module
    is_package: bool
    # name -> what binds it: _Import, ("def" | "class", qualname), or an alias expression
    symbols: dict[str, list[object]] = field(default_factory=dict)
    functions: list[Function] = field(default_factory=list)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    calls: list[tuple[int, Function, ast.Call]] = field(default_factory=list)  # by line, in functions
    calls_by_name: dict[str, list[tuple[Function, ast.Call]]] = field(default_factory=dict)

    def resolve_relative(self, level: int, module: str | None) -> str:
        return resolve_relative(self.name, self.is_package, level, module)

    def function_at(self, line: int) -> Function | None:
        """The innermost function whose lines hold ``line``."""
        best: Function | None = None
        for fn in self.functions:
            if fn.first <= line <= fn.last and (best is None or fn.first >= best.first):
                best = fn
        return best


@dataclass(frozen=True, slots=True)
class Call:
    """A resolved call: ``caller`` calls ``callee`` at ``line``; ``exact`` unless resolved by name."""

    caller: Function
    callee: Function
    line: int
    exact: bool


def _imports(module: Module, stmt: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, _Import]]:
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            if alias.asname:
                yield alias.asname, _Import(alias.name, None)
            else:
                top = alias.name.split(".")[0]
                yield top, _Import(top, None)
        return
    base = module.resolve_relative(stmt.level, stmt.module) if stmt.level else (stmt.module or "")
    for alias in stmt.names:
        if alias.name != "*":
            yield alias.asname or alias.name, _Import(base, alias.name)


def _bind_module(module: Module) -> None:
    """Module-level names (imports, defs, classes, aliases), also those bound inside ``if``/``try``."""

    def bind(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for name, imported in _imports(module, stmt):
                    module.symbols.setdefault(name, []).append(imported)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module.symbols.setdefault(stmt.name, []).append(("def", stmt.name))
            elif isinstance(stmt, ast.ClassDef):
                module.symbols.setdefault(stmt.name, []).append(("class", stmt.name))
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(
                stmt.value, (ast.Name, ast.Attribute)
            ):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        module.symbols.setdefault(target.id, []).append(stmt.value)
            elif isinstance(stmt, ast.If):
                bind(stmt.body)
                bind(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                bind(stmt.body)
                for handler in stmt.handlers:
                    bind(handler.body)
                bind(stmt.orelse)
                bind(stmt.finalbody)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                bind(stmt.body)

    bind(module.tree.body)

    def visit(node: ast.AST, prefix: str, cls: ClassInfo | None, owner: Function | None) -> None:
        """One walk: functions and classes with their qualified names, each call and each import
        inside a function recorded with the innermost function that holds it."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = Function(module, f"{prefix}{node.name}", node, cls, owner)
            module.functions.append(fn)
            if cls is not None:
                cls.methods.setdefault(node.name, fn)
            for outer in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
                if outer is not None:
                    visit(outer, prefix, None, owner)
            for stmt in node.body:
                visit(stmt, f"{fn.qualname}.", None, fn)
            return
        if isinstance(node, ast.ClassDef):
            info = ClassInfo(module, f"{prefix}{node.name}", node)
            module.classes.setdefault(info.qualname, info)
            for outer in [*node.decorator_list, *node.bases]:
                visit(outer, prefix, None, owner)
            for stmt in node.body:
                visit(stmt, f"{info.qualname}.", info, owner)
            return
        if owner is not None:
            if isinstance(node, ast.Call):
                module.calls.append((node.lineno, owner, node))
                token = _token(node.func)
                if token:
                    module.calls_by_name.setdefault(token, []).append((owner, node))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for name, imported in _imports(module, node):
                    owner.local_imports.setdefault(name, []).append(imported)
        for child in ast.iter_child_nodes(node):
            visit(child, prefix, cls, owner)

    for stmt in module.tree.body:
        visit(stmt, "", None, None)
    module.calls.sort(key=lambda c: c[0])


def _token(func: ast.expr) -> str | None:
    """The name a call is made by: ``f`` for ``f()`` and ``a.b.f()``."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


_Value = tuple[str, object]  # ("module", name) | ("function", Function) | ("class", ClassInfo)


class CallGraph:
    """Calls and callers across the Python files of the scanned packages (parsed on demand)."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._paths: dict[
            str, tuple[str, str | None, str, str]
        ] = {}  # module name -> (pkg, ver, path, fspath)
        self._by_path: dict[tuple[str, str], str] = {}
        for (package, version), paths in workspace.items():
            for path, fspath in paths.items():
                if path.endswith(".py"):
                    name = module_name_for(path)
                    self._paths.setdefault(name, (package, version, path, fspath))
                    self._by_path[(package, path)] = name
        self._suffix: dict[str, str] | None = None
        self._modules: dict[str, Module | None] = {}
        self._texts: dict[str, str | None] = {}
        self._callees: dict[tuple[int, int, int], list[Call]] = {}
        self._callers: dict[int, list[Call]] = {}
        self._resolved: dict[int, list[tuple[Function, bool]]] = {}
        self.parse_failures: list[str] = []

    # -- modules ------------------------------------------------------------------------------

    def _canonical(self, name: str) -> str | None:
        if name in self._paths:
            return name
        if self._suffix is None:
            # A source tree names modules with its own prefix (python/sglang/...): match by suffix.
            self._suffix = {}
            for full in self._paths:
                parts = full.split(".")
                for i in range(1, len(parts)):
                    self._suffix.setdefault(".".join(parts[i:]), full)
        return self._suffix.get(name)

    def text(self, module_name: str) -> str | None:
        if module_name not in self._texts:
            entry = self._paths.get(module_name)
            self._texts[module_name] = None if entry is None else read_text(entry[3])
        return self._texts[module_name]

    def module(self, name: str) -> Module | None:
        canonical = self._canonical(name)
        if canonical is None:
            return None
        if canonical in self._modules:
            return self._modules[canonical]
        package, version, path, _fspath = self._paths[canonical]
        text = self.text(canonical)
        module = None
        if text is not None:
            try:
                tree = parse_python(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self.parse_failures.append(path)
            else:
                module = Module(canonical, package, version, path, tree, path.endswith("__init__.py"))
                try:
                    _bind_module(module)
                except RecursionError:  # expressions nested too deeply to walk
                    self.parse_failures.append(path)
                    module = None
        self._modules[canonical] = module
        return module

    def module_at(self, package: str, path: str) -> Module | None:
        name = self._by_path.get((package, path))
        return None if name is None else self.module(name)

    def function_at(self, package: str, path: str, line: int) -> Function | None:
        module = self.module_at(package, path)
        return None if module is None else module.function_at(line)

    # -- names ---------------------------------------------------------------------------------

    def _symbol_values(self, module: Module, name: str, depth: int) -> list[_Value]:
        out: list[_Value] = []
        for symbol in module.symbols.get(name, ()):
            out.extend(self._symbol_value(module, symbol, depth))
        if not out and module.is_package:
            sub = self._canonical(f"{module.name}.{name}")
            if sub is not None:
                out.append(("module", sub))
        return out

    def _symbol_value(self, module: Module, symbol: object, depth: int) -> list[_Value]:
        if depth > MAX_RESOLVE_DEPTH:
            return []
        if isinstance(symbol, _Import):
            if symbol.attr is None:
                canonical = self._canonical(symbol.module)
                return [("module", canonical)] if canonical else []
            sub = self._canonical(f"{symbol.module}.{symbol.attr}")
            if sub is not None:
                return [("module", sub)]
            target = self.module(symbol.module)
            return [] if target is None else self._symbol_values(target, symbol.attr, depth + 1)
        if isinstance(symbol, tuple):
            kind, qualname = symbol
            if kind == "def":
                fn = next((f for f in module.functions if f.qualname == qualname), None)
                return [("function", fn)] if fn else []
            info = module.classes.get(str(qualname))
            return [("class", info)] if info else []
        if isinstance(symbol, ast.expr):
            return self._expr_values(module, None, symbol, depth + 1)
        return []

    def _attribute(self, value: _Value, attr: str, depth: int) -> list[_Value]:
        kind, obj = value
        if kind == "module":
            module = self.module(str(obj))
            if module is None:
                return []
            return self._symbol_values(module, attr, depth + 1)
        if kind == "class":
            assert isinstance(obj, ClassInfo)
            method = self.method(obj, attr)
            return [("function", method)] if method else []
        return []

    def _expr_values(
        self, module: Module, function: Function | None, expr: ast.expr, depth: int
    ) -> list[_Value]:
        parts = _dotted(expr)
        if not parts:
            return []
        values = self._name_values(module, function, parts[0], depth)
        for attr in parts[1:]:
            values = [v for value in values for v in self._attribute(value, attr, depth)]
            if not values:
                return []
        return values

    def _name_values(self, module: Module, function: Function | None, name: str, depth: int) -> list[_Value]:
        if function is not None:
            if name in ("self", "cls") and function.cls is not None:
                return [("class", function.cls)]
            scope: Function | None = function
            while scope is not None:  # imports of the function, then of the functions around it
                found = scope.local_imports.get(name)
                if found:
                    return [v for t in found for v in self._symbol_value(module, t, depth)]
                scope = scope.parent
        return self._symbol_values(module, name, depth)

    def method(self, cls: ClassInfo, name: str, depth: int = 0) -> Function | None:
        """``name`` looked up in ``cls`` and then its bases (those in the scanned code)."""
        if name in cls.methods:
            return cls.methods[name]
        if depth > 4:
            return None
        for base in cls.node.bases:
            for kind, obj in self._expr_values(cls.module, None, base, 0):
                if kind == "class" and isinstance(obj, ClassInfo):
                    found = self.method(obj, name, depth + 1)
                    if found is not None:
                        return found
        return None

    # -- calls ---------------------------------------------------------------------------------

    def resolve(self, function: Function, call: ast.Call) -> list[tuple[Function, bool]]:
        """The functions ``call`` (inside ``function``) may run, each with whether it is exact."""
        module = function.module
        out: list[tuple[Function, bool]] = []
        for kind, obj in self._expr_values(module, function, call.func, 0):
            if kind == "function" and isinstance(obj, Function):
                out.append((obj, True))
            elif kind == "class" and isinstance(obj, ClassInfo):
                for special in ("__init__", "__post_init__"):
                    method = self.method(obj, special)
                    if method is not None:
                        out.append((method, True))
        if out or not isinstance(call.func, ast.Attribute):
            return out
        # `manager.initialize()`: an object of unknown type; the methods of that name in the module.
        attr = call.func.attr
        base = _dotted(call.func.value)
        if base and base[0] in ("self", "cls"):
            return out
        return [(m, False) for info in module.classes.values() if (m := info.methods.get(attr)) is not None]

    def _resolved_call(self, owner: Function, call: ast.Call) -> list[tuple[Function, bool]]:
        key = id(call)
        if key not in self._resolved:
            self._resolved[key] = self.resolve(owner, call)
        return self._resolved[key]

    def callees(self, function: Function, first: int | None = None, last: int | None = None) -> list[Call]:
        """The resolved calls made between lines ``first`` and ``last`` of ``function`` (its whole
        body by default, functions defined inside it included: a closure runs when it is called)."""
        lo = function.first if first is None else first
        hi = function.last if last is None else last
        key = (id(function), lo, hi)
        if key in self._callees:
            return self._callees[key]
        calls: list[Call] = []
        seen: set[tuple[int, int]] = set()
        table = function.module.calls
        start = bisect.bisect_left(table, lo, key=lambda c: c[0])
        for line, owner, node in table[start:]:
            if line > hi:
                break
            for callee, exact in self._resolved_call(owner, node):
                if (id(callee), line) not in seen:
                    seen.add((id(callee), line))
                    calls.append(Call(function, callee, line, exact))
        calls.sort(key=lambda c: (c.line, not c.exact))
        self._callees[key] = calls
        return calls

    def callers(self, function: Function) -> list[Call]:
        """The functions of the scanned code whose calls resolve to ``function``.

        Files are picked by their text first: they mention the name, and are the
        defining module or mention it by its own name (how they import it), or by the name of a
        package whose ``__init__`` re-exports it. A method is called through ``self``, through an
        object its own module resolves by the method's name, or by a module that names its class;
        a class's ``__init__`` is called by the class's name. A module-level alias of the function
        (``fast = impl.helper``) is followed to its calls.
        """
        key = id(function)
        if key in self._callers:
            return self._callers[key]
        name = function.name
        if name == "__init__" and function.cls is not None:
            name = function.cls.node.name
        needle = re.compile(rf"\b{re.escape(name)}\s*\(")
        home = function.module.name
        if function.cls is not None:
            hints = {function.cls.node.name}
        else:
            hints = {home.rsplit(".", 1)[-1]}
            parts = home.split(".")
            for i in range(len(parts) - 1, 0, -1):
                package = self.module(".".join(parts[:i]))
                if package is None or name not in package.symbols:
                    break
                hints.add(parts[i - 1])  # `from package import name` works through this re-export
        found: list[Call] = []
        for module_name in self._paths:
            text = self.text(module_name)
            if text is None or name not in text:
                continue
            if module_name != home and not any(h in text for h in hints):
                continue
            module = self.module(module_name)
            if module is None:
                continue
            # Calls by the name, and by a module-level alias of it (``fast = impl.helper``).
            tokens = [name] if needle.search(text) else []
            tokens += [
                alias
                for alias, symbols in module.symbols.items()
                if alias != name
                and any(isinstance(sym, ast.expr) and (_dotted(sym) or [""])[-1] == name for sym in symbols)
            ]
            for owner, node in (entry for token in tokens for entry in module.calls_by_name.get(token, ())):
                resolved = self._resolved_call(owner, node)
                exact = next((e for c, e in resolved if c is function), None)
                if exact is not None and not any(c.caller is owner and c.line == node.lineno for c in found):
                    found.append(Call(owner, function, node.lineno, exact))
        self._callers[key] = found
        return found

    def modules_parsed(self) -> Iterable[Module]:
        return (m for m in self._modules.values() if m is not None)
