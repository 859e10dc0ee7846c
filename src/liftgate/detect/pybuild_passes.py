"""The ``-D`` flags that travel with a py-build gate's arch flags: build flags as arch facts.

FlashInfer builds ``mamba_selective_state_update_sm90`` with ``nvcc_flags =
get_nvcc_flags_list(supported_major_versions=[9])`` and then ``nvcc_flags +=
["-DFLASHINFER_MAMBA_ENABLE_SM90"]``: the macro is passed exactly to the builds that filter keeps,
so in a build for target T it is defined when the filter admits T. The gate records such flags as
``Gate.passes`` (as a CMake gate records the ``-D`` flags of the block it admits), and the C-family
detector reads ``#ifdef FLASHINFER_MAMBA_ENABLE_SM90`` as a cuda-pp gate with the filter's
admitted set (`liftgate.detect.buildflags.arch_flags`), provided nothing else in the package
passes the macro.

A flag travels with the gate only when nothing can separate them:

* it is an item of the gate's own flag list (``["-gencode=…", "-DX"]``), or
* the gate's flags and the flag go into one argument of one call, in an unconditional statement
  of the function (``extra_cuda_cflags=flags + ["-DX"]``; never ``extra_cflags``, the host
  compiler's), with nothing but literal flags beside them, or
* the gate's flags are stored in a *plain* variable that the flag is stored in too before it is
  first read (``flags = get_nvcc_flags_list(…)``; ``flags += ["-DX"]``; ``flags.append("-DX")``):
  bound once by ``=``, grown only by ``+=``/``append``/``extend``/``insert``, every binding
  unconditional in the function's body, nothing but literal flags (strings naming no target, a
  conditional between two such strings) and the gate's own flags flowing in, no parameter or
  ``global`` of that name, every read after the gate, and no read copying it to another name or
  passing it together with anything else.

Anything else (a flag under a condition, a second filter or a parameter merged in, the variable
reused or copied, ``"-DX" + suffix``) is not recorded, and the package-wide reading then keeps the
macro unknown. For an imported arch flag list the name must be bound nowhere else in the importing
file, and in its own module once, at module level, to a list display (or ``+`` of them).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from liftgate.detect.py_binding import module_name_for, parse_python, resolve_relative, walk
from liftgate.detect.pybuild_builds import BuildCalls
from liftgate.detect.pybuild_syntax import names_in
from liftgate.model import BuildFlag, Gate, GateKind

_DEFINE_TOKEN = re.compile(r"-D([A-Za-z_]\w*)(?:=(\S*))?")
# What may stand between a -D string and the statement (or the call) that stores (or takes) it,
# for the flag to be passed whenever that statement runs.
_CARRIERS = (ast.List, ast.Tuple, ast.Set, ast.Starred)
_GROWING_METHODS = frozenset({"append", "extend", "insert"})
# Py-build gate drafts that pick targets for the flags beside them.
FLAG_GATE_DIRECTIVES = frozenset({"get_nvcc_flags_list", "gencode", "arch-flag"})


def _defines(node: ast.AST) -> list[tuple[str, str | None, int]]:
    """The ``-DNAME[=VALUE]`` tokens of a string constant, with its line."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or "-D" not in node.value:
        return []
    out: list[tuple[str, str | None, int]] = []
    for token in node.value.split():
        m = _DEFINE_TOKEN.fullmatch(token)
        if m is not None:
            out.append((m.group(1), m.group(2), node.lineno))
    return out


class FlagPasses(BuildCalls):
    """Which ``-D`` flags a py-build gate's arch flags are passed with (see the module's docstring).

    Other filters of the function need no check of their own: a variable or argument that
    anything but literal flags (and the gate's own) flows into is not read at all."""

    def __init__(self, package: str, version: str | None, path: str, text: str, tree: ast.Module) -> None:
        super().__init__(package, version, path, text, tree)
        # Per function (by id): its -D strings, and where each statement of its body stands.
        self._define_cache: dict[int, list[ast.Constant]] = {}
        self._body_cache: dict[int, dict[int, int]] = {}

    def _passed_flags(self, node: ast.AST) -> tuple[BuildFlag, ...]:
        """The flags that travel with the gate drafted at ``node``."""
        found: list[tuple[str, str | None, int]] = []
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for item in node.elts:
                found.extend(_defines(item))
        function = self._function(node)
        if function is not None and self._define_strings(function):
            self._index(function)
            found.extend(self._beside(node, function))
        flags = dict.fromkeys(BuildFlag(macro, value, self.path, line) for macro, value, line in found)
        return tuple(flags)

    def _define_strings(self, function: ast.AST) -> list[ast.Constant]:
        """The string constants of ``function`` that hold a ``-D`` token."""
        strings = self._define_cache.get(id(function))
        if strings is None:
            strings = self._define_cache[id(function)] = [
                n for n in walk(function) if isinstance(n, ast.Constant) and _defines(n)
            ]
        return strings

    def _body_index(self, statement: ast.stmt | None, function: ast.AST) -> int | None:
        """Where ``statement`` stands in ``function``'s own body; None when it is not one of its
        statements (nested under an ``if``, a loop, another function, or None)."""
        index = self._body_cache.get(id(function))
        if index is None:
            index = self._body_cache[id(function)] = {
                id(s): k for k, s in enumerate(getattr(function, "body", ()))
            }
        return None if statement is None else index.get(id(statement))

    def _beside(self, node: ast.AST, function: ast.AST) -> list[tuple[str, str | None, int]]:
        """Flags of ``function`` that go wherever the gate at ``node`` goes (module docstring)."""
        route = self._route(node, function)
        if route is None:
            return []
        out: list[tuple[str, str | None, int]] = []
        if route[0] == "arg":
            _, call, argument, _ = route
            if not self._plain(argument, node):
                return []
            for string in self._define_strings(function):
                other = self._route(string, function)
                if other is not None and other[0] == "arg" and other[1] is call and other[2] is argument:
                    out.extend(_defines(string))
            return out
        name = str(route[1])
        uses = self._variable_uses(name, function, node)
        if uses is None:
            return []
        first_use = min(uses, default=len(getattr(function, "body", ())))
        for string in self._define_strings(function):
            if self._contains(node, string):
                continue
            other = self._route(string, function)
            if other is None:
                continue
            if other[0] == "var" and other[1] == name and other[3] < first_use:
                out.extend(_defines(string))
            elif other[0] == "arg" and other[3] in uses and name in names_in(other[2]):
                out.extend(_defines(string))  # `build(extra_cuda_cflags=flags + ["-DX"])`
        return out

    def _route(self, node: ast.AST, function: ast.AST) -> tuple[str, object, ast.AST, int] | None:
        """Where ``node``'s value goes, through list displays and ``+`` of lists, from an
        unconditional statement of ``function``'s body: ("var", NAME, value, statement index) when
        it is stored in (or appended to) a plain variable, ("arg", call, argument, statement index)
        when it is an argument of a call. None when anything else stands between (a condition, a
        loop, string concatenation, a second call)."""
        current = node
        parent = self.parents.get(current)
        if isinstance(node, ast.Constant) and isinstance(parent, ast.BinOp):
            return None  # "-DX" + y: the macro's name is computed
        while True:
            parent = self.parents.get(current)
            if parent is None:
                return None
            if isinstance(parent, _CARRIERS) or (
                isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add)
            ):
                current = parent
                continue
            argument = current
            if isinstance(parent, ast.keyword):
                argument, current, parent = parent.value, parent, self.parents.get(parent)
            statement = self._statement(parent) if parent is not None else None
            index = self._body_index(statement, function)
            if statement is None or index is None:
                return None
            if isinstance(parent, ast.Call) and current is not parent.func:
                func = parent.func
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr in _GROWING_METHODS
                    and isinstance(func.value, ast.Name)
                    and isinstance(statement, ast.Expr)
                    and statement.value is parent
                ):
                    return ("var", func.value.id, argument, index)
                if self.parents.get(parent) is statement:
                    return ("arg", parent, argument, index)
                return None
            if isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and parent is statement:
                targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                if len(targets) == 1 and isinstance(targets[0], ast.Name):
                    return ("var", targets[0].id, current, index)
            return None

    def _plain(self, value: ast.AST, allowed: ast.AST) -> bool:
        """Whether only literal flags (and ``allowed``, the gate's own node) flow into ``value``:
        list displays, ``+``, strings that name no target, a conditional between two such strings."""
        pending = [value]
        while pending:
            item = pending.pop()
            if item is allowed:
                continue
            if isinstance(item, (ast.List, ast.Tuple, ast.Set)):
                pending.extend(item.elts)
            elif isinstance(item, ast.Starred):
                pending.append(item.value)
            elif isinstance(item, ast.BinOp) and isinstance(item.op, ast.Add):
                pending += [item.left, item.right]
            elif isinstance(item, ast.Constant) and isinstance(item.value, str):
                if _OWN_TARGETS.search(item.value):
                    return False
            elif isinstance(item, ast.IfExp):
                pending += [item.body, item.orelse]  # its test picks a flag, never a target
            else:
                return False
        return True

    def _variable_uses(self, name: str, function: ast.AST, node: ast.AST) -> set[int] | None:
        """The statements (indexes into ``function``'s body) that read variable ``name``, when the variable is
        plain: bound once by ``=`` and grown only by ``+=``/``append``/``extend``/``insert``, all
        unconditionally in ``function``'s body, with nothing but literal flags and the gate's own
        flags flowing in, every read after the gate and none copying it to another name. None
        otherwise."""
        gate_route = self._route(node, function)
        if gate_route is None:
            return None
        gate_index = gate_route[3]
        plain_bindings = 0
        uses: set[int] = set()
        params = getattr(function, "args", None)
        if params is not None and name in {a.arg for a in walk(params) if isinstance(a, ast.arg)}:
            return None
        for n in walk(function):
            if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
                return None
            if not (isinstance(n, ast.Name) and n.id == name):
                continue
            statement = self._statement(n)
            index = self._body_index(statement, function)
            if statement is None or index is None:
                return None
            if isinstance(n.ctx, ast.Store):
                if isinstance(statement, ast.AugAssign) and statement.target is n:
                    if not self._plain(statement.value, node):
                        return None
                    continue
                if isinstance(statement, (ast.Assign, ast.AnnAssign)) and (
                    statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                ) == [n]:
                    plain_bindings += 1
                    if statement.value is None or not self._plain(statement.value, node):
                        return None
                    continue
                return None
            if not isinstance(n.ctx, ast.Load):
                return None
            parent = self.parents.get(n)
            if isinstance(parent, ast.Attribute) and isinstance(self.parents.get(parent), ast.Call):
                call = self.parents.get(parent)
                assert isinstance(call, ast.Call)
                if parent.attr in _GROWING_METHODS and call.func is parent:
                    if not all(self._plain(a, node) for a in call.args[-1:]) or not isinstance(
                        statement, ast.Expr
                    ):
                        return None
                    continue
                return None  # flags.pop(), flags.clear() …: what stays is not read
            route = self._route(n, function)
            if route is not None and route[0] == "var":
                return None  # copied to another name: `other = flags + …`
            if route is not None and not self._plain(route[2], n):
                return None  # passed together with other flags: `flags + extra`
            if index <= gate_index:
                return None  # read before the gate's flags are in it
            uses.add(index)
        return uses if plain_bindings <= 1 else None


# Spellings that name targets in a flag: a function holding one picks targets of its own, so flags
# in it are not read as travelling with an imported constant (see `imported_flag_passes`).
_DEFINE_STRING = re.compile(r"""["']-D[A-Za-z_]""")
_OWN_TARGETS = re.compile(r"get_nvcc_flags_list|gencode|-arch\b|--gpu-arch|compute_\d|sm_\d")


@dataclass(frozen=True, slots=True)
class ImportedFlags:
    """``-D`` flags that travel with a module-level name another module defines: FlashInfer's
    ``sm90a_nvcc_flags + ["-DCOMPILE_HOPPER_TMA_GEMMS"]``, with ``sm90a_nvcc_flags`` imported from
    ``flashinfer.jit.core``. ``module`` is the absolute module name, ``name`` the name it defines."""

    module: str
    name: str
    flags: tuple[BuildFlag, ...]


def may_pass_flags(text: str) -> bool:
    """Whether a Python file can hold a py-build gate with ``-D`` flags beside it (a cheap test that
    spares parsing the rest): a ``-D`` string and a spelling that picks targets."""
    return _DEFINE_STRING.search(text) is not None and _OWN_TARGETS.search(text) is not None


def _as_value(node: ast.Name, parent: ast.AST | None) -> bool:
    """Whether a name stands for its value (flags could be in it): not a function called, an
    object whose attribute is read, an annotation or a tested condition."""
    if isinstance(parent, ast.Call) and parent.func is node:
        return False
    if isinstance(parent, (ast.Attribute, ast.arg, ast.FunctionDef, ast.AsyncFunctionDef, ast.Compare)):
        return False
    if isinstance(parent, ast.AnnAssign) and parent.annotation is node:
        return False
    return not (isinstance(parent, (ast.If, ast.IfExp, ast.While)) and parent.test is node)


def imported_flag_passes(
    package: str, version: str | None, path: str, text: str
) -> tuple[ImportedFlags, ...]:
    """The flags of ``path``'s functions that travel (as `FlagPasses` reads it) with a name the
    file imports with ``from M import NAME``. Whether NAME is an arch flag list is decided by the
    caller, which has M's gates. A function that spells targets itself is not read."""
    if "import" not in text or _DEFINE_STRING.search(text) is None:
        return ()
    try:
        tree = parse_python(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    importer = module_name_for(path)
    imported: dict[str, tuple[str, str]] = {}  # local name -> (module, name)
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom):
            module = resolve_relative(
                importer, path.endswith("__init__.py"), statement.level, statement.module
            )
            for alias in statement.names:
                if alias.name != "*":
                    imported[alias.asname or alias.name] = (module, alias.name)
    for name in _bound_elsewhere(tree, imported):
        del imported[name]  # shadowed somewhere in the file: which value a use reads is not known
    if not imported:
        return ()
    scope = FlagPasses(package, version, path, text, tree)
    scope._index(tree)
    lines = scope._lines()
    out: dict[tuple[str, str], dict[BuildFlag, None]] = {}
    for function in walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        segment = "".join(lines[function.lineno - 1 : function.end_lineno or function.lineno])
        if _DEFINE_STRING.search(segment) is None or _OWN_TARGETS.search(segment):
            continue
        uses = [
            n
            for n in walk(function)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in imported
            and scope._function(n) is function and _as_value(n, scope.parents.get(n))
        ]  # fmt: skip
        for use in uses:
            flags = scope._passed_flags(use)
            if flags:
                out.setdefault(imported[use.id], {}).update(dict.fromkeys(flags))
    return tuple(ImportedFlags(m, n, tuple(flags)) for (m, n), flags in sorted(out.items()))


def _bound_elsewhere(tree: ast.Module, names: Mapping[str, object]) -> set[str]:
    """Which of ``names`` the file binds anywhere but one import: an assignment, a parameter, a
    loop or ``with`` target, a ``global``, another import."""
    counts: dict[str, int] = {}
    for node in walk(tree):
        found: list[str] = []
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found = [node.id]
        elif isinstance(node, ast.arg):
            found = [node.arg]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            found = list(node.names) * 2
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found = [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found = [node.name]
        for name in found:
            if name in names:
                counts[name] = counts.get(name, 0) + 1
    return {n for n, c in counts.items() if c > 1}


def _module_paths(module: str) -> tuple[str, str]:
    base = module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


def _literal_list(value: ast.expr) -> bool:
    """A list display, or ``+`` of list displays and names (``["-gencode=…"] + common_flags``):
    no condition picks between two lists."""
    if isinstance(value, (ast.List, ast.Tuple)):
        return not any(isinstance(n, (ast.IfExp, ast.Call, ast.Compare, ast.BoolOp)) for n in walk(value))
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        return all(isinstance(v, ast.Name) or _literal_list(v) for v in (value.left, value.right))
    return False


def _constant_gate(text: str, path: str, name: str, gates: Sequence[Gate]) -> Gate | None:
    """The arch flag list gate that module-level ``name`` of a file holds: the name is bound once, at
    module level, and exactly one flag-list gate lies inside that assignment."""
    try:
        tree = parse_python(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    bindings = [
        s
        for s in tree.body
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        and s.targets[0].id == name
    ]  # fmt: skip
    if len(bindings) != 1 or _bound_elsewhere(tree, {name: None}) or not _literal_list(bindings[0].value):
        return None
    start, end = bindings[0].lineno, bindings[0].end_lineno or bindings[0].lineno
    inside = [
        g
        for g in gates
        if g.kind is GateKind.PY_BUILD and g.directive in ("gencode", "arch-flag")
        and start <= g.location.span.start <= end
    ]  # fmt: skip
    return inside[0] if len(inside) == 1 else None


def link_imported_flags(
    build_gates: Mapping[str, tuple[Gate, ...]],
    texts: Mapping[str, str],
    read: Callable[[str], str | None],
    detect: Callable[[str, str], tuple[Gate, ...]],
) -> dict[str, tuple[Gate, ...]]:
    """``build_gates`` (the build gates of a package's build files, by path, with ``texts`` the
    text of each) with the flags that travel with an imported arch flag list added to the
    ``passes`` of the gate that list is: ``sm90a_nvcc_flags + ["-DCOMPILE_HOPPER_TMA_GEMMS"]`` in
    ``jit/gemm/fp8_blockscale.py`` is passed where ``jit/core.py``'s ``sm90a_nvcc_flags`` gate
    admits the target. ``read`` gives the text of a path of the package (None when it has none),
    ``detect`` the py-build gates of a file."""
    out = dict(build_gates)
    found: dict[tuple[str, str], list[BuildFlag]] = {}
    for path in sorted(texts):
        if path.endswith(".py"):
            for use in imported_flag_passes("", None, path, texts[path]):
                found.setdefault((use.module, use.name), []).extend(use.flags)
    for (module, name), flags in sorted(found.items()):
        for candidate in _module_paths(module):
            text = texts.get(candidate)
            if text is None:
                text = read(candidate)
            if text is None:
                continue
            gates = out.get(candidate)
            if gates is None:
                gates = out[candidate] = detect(candidate, text)
            gate = _constant_gate(text, candidate, name, gates)
            if gate is not None:
                extended = replace(gate, passes=tuple(dict.fromkeys([*gate.passes, *flags])))
                out[candidate] = tuple(extended if g is gate else g for g in gates)
            break
    return out
