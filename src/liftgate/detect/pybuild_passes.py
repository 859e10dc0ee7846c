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
* both the flag and the gate sit unconditionally in one function (statements of its body, not
  under an ``if``, a loop, a conditional expression or a comprehension), every variable the flag
  is stored in also receives the gate's flags (``flags = ["-DX"]``; ``flags += get_nvcc_flags_list(…)``),
  or the flag is an argument of a call the gate's flags go to (or of ``flags.append``/``extend``
  on such a variable), and no other arch gate of that
  function feeds the same variables or calls.

Anything else (a flag under a condition, stored where the gate's flags do not go, beside two
filters) is not recorded, and the package-wide reading then keeps the macro unknown.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from liftgate.detect.py_binding import module_name_for, resolve_relative
from liftgate.detect.pybuild_builds import BuildCalls
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
    """Which ``-D`` flags a py-build gate's arch flags are passed with (see the module's docstring)."""

    def _passed_flags(self, node: ast.AST, rivals: Sequence[ast.AST]) -> tuple[BuildFlag, ...]:
        """The flags that travel with the gate drafted at ``node``; ``rivals`` are the file's other
        flag-picking drafts."""
        found: list[tuple[str, str | None, int]] = []
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for item in node.elts:
                found.extend(_defines(item))
        function = self._function(node)
        if function is not None:
            self._index(function)
            found.extend(self._beside(node, function, rivals))
        flags = dict.fromkeys(BuildFlag(macro, value, self.path, line) for macro, value, line in found)
        return tuple(flags)

    def _beside(
        self, node: ast.AST, function: ast.AST, rivals: Sequence[ast.AST]
    ) -> list[tuple[str, str | None, int]]:
        """Flags of ``function`` that go wherever the gate at ``node`` goes (module docstring)."""
        if self._carried_to(node, function) is None:
            return []
        names = self._flowing_names(node, function)
        sinks = self._sinks(node, function, names)
        if not names and not sinks:
            return []
        for rival in rivals:
            if rival is node or self._function(rival) is not function:
                continue
            rival_names = self._flowing_names(rival, function)
            if names & rival_names or sinks & self._sinks(rival, function, rival_names):
                return []
        out: list[tuple[str, str | None, int]] = []
        for string in ast.walk(function):
            defines = _defines(string)
            if not defines or self._contains(node, string):
                continue
            carrier = self._carried_to(string, function)
            if carrier is None:
                continue
            if isinstance(carrier, ast.Call):
                if id(carrier) in sinks or self._grows(carrier, names):
                    out.extend(defines)
                continue
            stored = self._flowing_names(string, function)
            if stored and stored <= names:
                out.extend(defines)
        return out

    def _carried_to(self, node: ast.AST, function: ast.AST) -> ast.AST | None:
        """The unconditional statement of ``function``'s body that stores ``node`` (reached through
        lists and ``+``), or the call that takes it as an argument inside such a statement; None
        when a condition, a loop or any other expression stands between."""
        current = node
        call: ast.Call | None = None
        while True:
            parent = self.parents.get(current)
            if parent is None:
                return None
            if isinstance(parent, _CARRIERS) or (
                isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add)
            ):
                current = parent
                continue
            if isinstance(parent, ast.keyword):
                current = parent
                continue
            if isinstance(parent, ast.Call) and current is not parent.func and call is None:
                call = parent
                current = parent
                continue
            if isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)):
                if self.parents.get(parent) is not function or parent not in getattr(function, "body", ()):
                    return None
                if call is not None:
                    return call
                return parent if isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign)) else None
            return None

    @staticmethod
    def _grows(call: ast.Call, names: set[str]) -> bool:
        """``flags.append("-DX")`` (``extend``, ``insert``) on a variable the gate's flags are in."""
        func = call.func
        return (
            isinstance(func, ast.Attribute)
            and func.attr in _GROWING_METHODS
            and isinstance(func.value, ast.Name)
            and func.value.id in names
        )

    def _sinks(self, node: ast.AST, function: ast.AST, names: set[str]) -> set[int]:
        """The calls (by id) the gate's flags go to: the call it is an argument of, and the calls
        of ``function`` that take a variable it is stored in."""
        out: set[int] = set()
        carrier = self._carried_to(node, function)
        if isinstance(carrier, ast.Call):
            out.add(id(carrier))
        if names:
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and names & self._argument_names(call):
                    out.add(id(call))
        return out


# Spellings that name targets in a flag: a function holding one picks targets of its own, so flags
# in it are not read as travelling with an imported constant (see `imported_flag_passes`).
_DEFINE_STRING = re.compile(r"""["']-D[A-Za-z_]""")
_NEWLINE = re.compile(r"\r\n|\r|\n")  # line breaks as the parser counts them
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
        tree = ast.parse(text, filename=path)
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
    if not imported:
        return ()
    scope = FlagPasses(package, version, path, text, tree)
    scope._index(tree)
    starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]  # offset of each line
    out: dict[tuple[str, str], dict[BuildFlag, None]] = {}
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first, last = function.lineno - 1, function.end_lineno or function.lineno
        segment = text[starts[first] : starts[last] if last < len(starts) else len(text)]
        if _DEFINE_STRING.search(segment) is None or _OWN_TARGETS.search(segment):
            continue
        uses = [
            n
            for n in ast.walk(function)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in imported
            and scope._function(n) is function and _as_value(n, scope.parents.get(n))
        ]  # fmt: skip
        for use in uses:
            flags = scope._passed_flags(use, uses)
            if flags:
                out.setdefault(imported[use.id], {}).update(dict.fromkeys(flags))
    return tuple(ImportedFlags(m, n, tuple(flags)) for (m, n), flags in sorted(out.items()))


def _module_paths(module: str) -> tuple[str, str]:
    base = module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


def _constant_gate(text: str, path: str, name: str, gates: Sequence[Gate]) -> Gate | None:
    """The arch flag list gate that module-level ``name`` of a file holds: the name is bound once, at
    module level, and exactly one flag-list gate lies inside that assignment."""
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    bindings = [
        s
        for s in tree.body
        if (isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in s.targets))
        or (
            isinstance(s, (ast.AugAssign, ast.AnnAssign))
            and isinstance(s.target, ast.Name)
            and s.target.id == name
        )
    ]
    if len(bindings) != 1 or not isinstance(bindings[0], ast.Assign):
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
