"""Which build a py-build gate guards: the JIT module or extension a construct's flags or archs go into.

A build call (FlashInfer's ``gen_jit_spec``, ``torch.utils.cpp_extension.load``, ``CUDAExtension``,
…) is described twice: as `Evidence` in words, for people, and as a typed `BuildTarget` fact kept
beside it in `BuildCalls.built`, which the gate carries as ``builds``.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from liftgate.detect.py_binding import walk
from liftgate.detect.pybuild_scope import FileScope
from liftgate.detect.pybuild_syntax import call_argument, callee_name, dotted_name, join_names, names_in
from liftgate.model import BuildTarget, Evidence

# Calls that build a JIT module or an extension: the gate's evidence names the one it guards.
_BUILD_CALLEES = {
    "gen_jit_spec": "JIT module",
    "JitSpec": "JIT module",
    "load_cuda_ops": "JIT module",
    "load_extension_with_recovery": "JIT extension",  # SGLang's wrapper of cpp_extension.load
    "CUDAExtension": "extension",
    "CppExtension": "extension",
}
_TORCH_LOADERS = frozenset({"load", "load_inline"})
_MAX_LISTED_SOURCES = 6
# Calls that look at a flag list rather than build with it.
_INSPECTING_CALLEES = frozenset(
    {"len", "print", "list", "tuple", "set", "sorted", "any", "all", "str", "repr"}
)


def _glob(node: ast.JoinedStr) -> str:
    """An f-string with its formatted parts as ``*``: ``f"{d}/x_{n}.cu"`` -> ``*/x_*.cu``."""
    return "".join(
        v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "*" for v in node.values
    )


def _source_listing(names: Sequence[str], computed: bool) -> str:
    """The sources a build names, for people: the first few, then how many more (the fact keeps them all)."""
    shown = names[:_MAX_LISTED_SOURCES]
    text = join_names(shown)
    if len(names) > len(shown):
        text += f" and {len(names) - len(shown)} more"
    if computed:
        text = f"{text} and sources computed at run time" if text else "sources computed at run time"
    return text


class BuildCalls(FileScope):
    """Finds the build calls a construct feeds and describes what they build."""

    def __init__(self, package: str, version: str | None, path: str, text: str, tree: ast.Module) -> None:
        super().__init__(package, version, path, text, tree)
        self.built: dict[Evidence, BuildTarget] = {}  # a build call's evidence -> the typed fact behind it
        self.torch_loader_names: set[str] = set()

    def _note_torch_loaders(self) -> None:
        """Record the names this file imports torch's ``cpp_extension.load``/``load_inline`` as."""
        if "cpp_extension" in self.text:
            for node in walk(self.tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"):
                    self.torch_loader_names.update(
                        alias.asname or alias.name for alias in node.names if alias.name in _TORCH_LOADERS
                    )

    def _is_build_call(self, call: ast.Call) -> str | None:
        """What a call builds ("JIT module", "extension", …), or None when it builds nothing."""
        callee = callee_name(call)
        if callee in _BUILD_CALLEES:
            return _BUILD_CALLEES[callee]
        if callee in _TORCH_LOADERS:
            dotted = dotted_name(call.func) or ""
            if dotted.endswith(f"cpp_extension.{callee}") or dotted in self.torch_loader_names:
                return "JIT extension"
        return None

    def _build_links(self, node: ast.AST) -> list[Evidence]:
        """Evidence naming the JIT module or extension that a construct's flags are built into."""
        function = self._function(node)
        if function is not None:
            # Names in the build call may lie off the walked lines; module-level ones resolve without parents.
            self._index(function)
        for ancestor in self._ancestors(node, function):
            if isinstance(ancestor, ast.Call) and self._is_build_call(ancestor):
                return [self._describe_build(ancestor)]
        if function is None:
            return []
        names = self._flowing_names(node, function)
        if not names:
            return []
        calls = [n for n in walk(function) if isinstance(n, ast.Call)]
        builds = [c for c in calls if self._is_build_call(c) and names & self._argument_names(c)]
        if builds:
            return [self._describe_build(c) for c in builds]
        handed = [
            c
            for c in calls
            if callee_name(c) not in _INSPECTING_CALLEES
            and names & self._argument_names(c)
            and not self._contains(c, node)
        ]
        return [
            Evidence(
                f"flags passed to {dotted_name(c.func) or callee_name(c) or 'a call'}()", self.path, c.lineno
            )
            for c in handed[:3]
        ]

    @staticmethod
    def _argument_names(call: ast.Call) -> set[str]:
        names: set[str] = set()
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            names |= names_in(argument)
        return names

    def _contains(self, outer: ast.AST, inner: ast.AST) -> bool:
        return any(a is outer for a in self._ancestors(inner, None))

    def _flowing_names(self, node: ast.AST, function: ast.AST) -> set[str]:
        """The variables a construct's value is stored in, and simple aliases of them (``b = a``, ``b = a + x``)."""
        statement = self._statement(node)
        names: set[str] = set()
        if isinstance(statement, ast.Assign):
            names = {t.id for t in statement.targets if isinstance(t, ast.Name)}
        elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)) and isinstance(statement.target, ast.Name):
            names = {statement.target.id}
        if not names:
            return names
        assignments = [
            n
            for n in walk(function)
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
        ]
        for _ in range(4):
            grown = set(names)
            for assignment in assignments:
                value = assignment.value
                operands = [value]
                while operands and isinstance(operands[-1], ast.BinOp):
                    last = operands.pop()
                    assert isinstance(last, ast.BinOp)
                    operands += [last.left, last.right]
                if any(isinstance(o, ast.Name) and o.id in names for o in operands):
                    target = assignment.targets[0]
                    assert isinstance(target, ast.Name)
                    grown.add(target.id)
            if grown == names:
                break
            names = grown
        return names

    def _describe_build(self, call: ast.Call) -> Evidence:
        """The evidence naming what a build call builds; the typed `BuildTarget` is kept beside it."""
        what = self._is_build_call(call) or "build"
        name_node = call_argument(call, 0, "name")
        name = self._module_name(name_node) if name_node is not None else None
        text = f"guards {what} {name}" if name else f"guards {what} built by {callee_name(call)}()"
        names: list[str] = []
        computed = False
        if callee_name(call) != "load_inline":
            sources_node = call_argument(call, 1, "sources")
            if sources_node is not None:
                computed = self._collect_sources(sources_node, names, depth=0)
                listing = _source_listing(names, computed)
                if listing:
                    text += f" built from {listing}"
        evidence = Evidence(text, self.path, call.lineno)
        self.built[evidence] = BuildTarget(
            what=what,
            name=self._literal_module_name(name_node) if name_node is not None else None,
            sources=tuple(dict.fromkeys(names)),
            computed=computed,
            path=self.path,
            line=call.lineno,
        )
        return evidence

    def _literal_module_name(self, node: ast.expr) -> str | None:
        """The module's name when it is a string (an f-string as a glob), else None."""
        resolved = self._resolve(node)
        value = resolved[0] if resolved is not None else node
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
        if isinstance(value, ast.JoinedStr):
            return _glob(value)
        return None

    def _module_name(self, node: ast.expr) -> str | None:
        resolved = self._resolve(node)
        value = resolved[0] if resolved is not None else node
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return f'"{value.value}"'
        if isinstance(value, ast.JoinedStr):
            return f'"{_glob(value)}"'
        return f"named by {self._source(node)}"

    def _collect_sources(self, node: ast.expr, names: list[str], depth: int) -> bool:
        """Append the file names a sources expression lists; True when some are computed at run time.

        A local list variable counts with what the function appends, extends or adds to it.
        """
        if depth > 4:
            return True
        if isinstance(node, (ast.List, ast.Tuple)):
            computed = False
            for element in node.elts:
                name = self._source_name(element, 0)
                if name is None:
                    computed = True
                else:
                    names.append(name)
            return computed
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            computed = self._collect_sources(node.left, names, depth + 1)
            return self._collect_sources(node.right, names, depth + 1) or computed
        if not isinstance(node, ast.Name):
            return True
        function = self._function(node)
        bound = self._locals(function).get(node.id, []) if function is not None else []
        values = [v for v in bound if v is not None]
        if function is None or not values:
            resolved = self._resolve(node)
            if resolved is None or resolved[0] is node:
                return True
            return self._collect_sources(resolved[0], names, depth + 1)
        computed = False
        for value in values:
            computed |= self._collect_sources(value, names, depth + 1)
        for grown in walk(function):
            if isinstance(grown, ast.AugAssign) and isinstance(grown.target, ast.Name):
                if grown.target.id == node.id:
                    computed |= self._collect_sources(grown.value, names, depth + 1)
                continue
            if not (isinstance(grown, ast.Call) and grown.args and isinstance(grown.func, ast.Attribute)):
                continue
            receiver = grown.func.value
            if not (isinstance(receiver, ast.Name) and receiver.id == node.id):
                continue
            if grown.func.attr == "append":
                name = self._source_name(grown.args[0], 0)
                if name is None:
                    computed = True
                else:
                    names.append(name)
            elif grown.func.attr == "extend":
                computed |= self._collect_sources(grown.args[0], names, depth + 1)
        return computed

    def _source_name(self, node: ast.expr, depth: int) -> str | None:
        """The file a sources item names: the last literal of ``DIR / "a" / "x.cu"``, an f-string as a glob."""
        if depth > 4:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.rsplit("/", 1)[-1] if node.value.startswith("/") else node.value
        if isinstance(node, ast.JoinedStr):
            return _glob(node).rsplit("/", 1)[-1]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._source_name(node.right, depth + 1)
        if isinstance(node, ast.Call) and node.args:
            callee = callee_name(node)
            if callee in ("str", "Path", "PurePath", "PosixPath") and len(node.args) == 1:
                return self._source_name(node.args[0], depth + 1)
            if callee == "join":
                return self._source_name(node.args[-1], depth + 1)
        if isinstance(node, ast.Name):
            resolved = self._resolve(node)
            if resolved is not None and resolved[0] is not node:
                return self._source_name(resolved[0], depth + 1)
        return None
