"""Torch custom ops: the C++ functions Python reaches through ``torch.ops.<namespace>.<name>``.

vLLM's Python asks its C++ extension what the GPU supports by passing the capability across:
``torch.ops._C.cutlass_scaled_mm_supports_fp4(capability.to_int())`` runs
``bool cutlass_scaled_mm_supports_fp4(int64_t cuda_device_capability)``, registered with
``ops.def("cutlass_scaled_mm_supports_fp4(int cuda_device_capability) -> bool")`` and
``ops.impl("cutlass_scaled_mm_supports_fp4", TORCH_BOX(&cutlass_scaled_mm_supports_fp4))``.

`find_registrations` reads those registrations (an op whose schema returns ``bool`` or ``int``
and takes ``int`` parameters: a query a caller may pass the capability to); `read_ops` walks each
registered function with one ``int`` parameter bound to the capability as ``major * 10 + minor``
(`liftgate.detect.cpp_runtime.walk_parametric`) and publishes a `TorchOp`: what it returns on
each target and the branches that test the parameter. Nothing here is reported by itself: the
Python detector resolves a call with that value to the op's result and reports the branches with
the call site that decides them (a caller that passes something else learns nothing).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from liftgate.detect.buildflags import ArchFlag, lines_of
from liftgate.detect.cpp_helpers import HelperIndex, region_lookup
from liftgate.detect.cpp_runtime import walk_parametric
from liftgate.detect.cpp_syntax import find_functions, forget_tables, tokenize
from liftgate.detect.cuda import host_regions
from liftgate.model import TorchOp

# m.def("name(int cap, Tensor x) -> bool"): the schema as one literal (the common form).
_SCHEMA = re.compile(
    r'\.def\(\s*"(?P<op>[A-Za-z_]\w*)(?:\.\w+)?\s*\((?P<params>[^"()]*)\)\s*->\s*(?P<ret>\w+)\s*"'
)
# m.impl("name", [dispatch key,] [WRAPPER(]&function): the function registered for it.
_IMPL = re.compile(
    r'\.impl\(\s*"(?P<op>[A-Za-z_]\w*)"\s*,\s*(?:[\w:]+\s*,\s*)?(?:[A-Za-z_]\w*\(\s*)?&?\s*(?P<fn>[A-Za-z_][\w:]*)'
)
_QUERY_RETURNS = frozenset({"bool", "int"})
# TORCH_LIBRARY(_C, m), TORCH_LIBRARY_FRAGMENT(…), TORCH_LIBRARY_IMPL(_C, CUDA, m), …_EXPAND(NAME, m)
_LIBRARY = re.compile(r"\bTORCH_LIBRARY(?:_FRAGMENT|_IMPL|_EXPAND|_IMPL_EXPAND)?\s*\(\s*([A-Za-z_]\w*)")


def _namespace(name: str) -> str | None:
    """A library's namespace as Python names it (``torch.ops._C``); None for a macro the build sets."""
    macro = name.isupper() and not name.startswith("_") and len(name) > 3  # TORCH_EXTENSION_NAME
    return None if macro else name


def _library_at(libraries: list[tuple[int, str | None]], offset: int) -> str | None:
    """The namespace of the last TORCH_LIBRARY block opened before ``offset`` (None: unknown)."""
    found: str | None = None
    for start, namespace in libraries:
        if start > offset:
            break
        found = namespace
    return found


_ADJACENT = re.compile(r'"\s*"')  # the end of one string literal and the start of the next
MAX_OPS = 256  # op functions walked per package (vLLM registers about 200 ops, a handful are queries)


@dataclass(frozen=True, slots=True)
class Registration:
    """An op whose schema returns bool/int and takes int parameters, and the function it runs."""

    op: str
    function: str  # the last component of the registered name
    params: tuple[tuple[str, str], ...]  # (type, name) of each schema parameter
    path: str  # where it is registered (the m.impl line)
    line: int
    namespace: str | None = None  # TORCH_LIBRARY(ns, m); None when a macro names it (TORCH_EXTENSION_NAME)

    def int_positions(self) -> tuple[int, ...]:
        return tuple(k for k, (kind, _) in enumerate(self.params) if kind == "int")


def find_registrations(texts: Mapping[str, str]) -> list[Registration]:
    """The query ops registered in ``texts`` (path -> text), in path and line order."""
    schemas: dict[tuple[str | None, str], tuple[tuple[tuple[str, str], ...], str]] = {}
    impls: dict[tuple[str | None, str], tuple[str, str, int]] = {}
    for path in sorted(texts):
        text = texts[path]
        if ".def(" not in text and ".impl(" not in text:
            continue
        libraries = [(m.start(), _namespace(m.group(1))) for m in _LIBRARY.finditer(text)]
        # Adjacent literals are one string: "name(int cap) -> "  "bool" (same length, so offsets hold).
        joined = _ADJACENT.sub(lambda m: " " * len(m.group(0)), text)
        for m in _SCHEMA.finditer(joined):
            params: list[tuple[str, str]] = []
            for part in m.group("params").split(","):
                words = part.split("=")[0].split()
                if len(words) >= 2:
                    params.append((words[0], words[-1]))
                elif words:
                    params.append((words[0], ""))
            key = (_library_at(libraries, m.start()), m.group("op"))
            schemas.setdefault(key, (tuple(params), m.group("ret")))
        matches = list(_IMPL.finditer(text))
        for m, line in zip(matches, lines_of(text, (m.start() for m in matches)), strict=True):
            key = (_library_at(libraries, m.start()), m.group("op"))
            impls.setdefault(key, (m.group("fn").rsplit("::", 1)[-1], path, line))
    out: list[Registration] = []
    for key in sorted(impls, key=lambda k: (k[0] or "", k[1])):
        namespace, op = key
        # The schema is in the same library block, or (TORCH_LIBRARY_IMPL) a block of the same name.
        schema = schemas.get(key) or schemas.get((None, op))
        if schema is None or schema[1] not in _QUERY_RETURNS:
            continue
        fn, path, line = impls[key]
        reg = Registration(op, fn, schema[0], path, line, namespace)
        if reg.int_positions():
            out.append(reg)
    out.sort(key=lambda r: (r.path, r.line, r.op))
    return out[:MAX_OPS]


def read_ops(
    package: str,
    version: str | None,
    texts: Mapping[str, str],
    cuda_version: tuple[int, int],
    flags: Sequence[ArchFlag],
    helpers: HelperIndex | None,
) -> tuple[TorchOp, ...]:
    """The `TorchOp` of each query op registered in the package: ``texts`` are the C-family files
    that register ops or may define their functions."""
    registrations = find_registrations(texts)
    if not registrations:
        return ()
    wanted = {r.function for r in registrations}
    index = helpers if helpers is not None else HelperIndex(cuda_version=cuda_version)
    found: dict[str, list[tuple[str, object]]] = {}  # function -> (path, FuncDef) of its definitions
    for path in sorted(texts):
        text = texts[path]
        names = [n for n in wanted if n in text]
        if not names:
            continue
        regions = host_regions(path, text, cuda_version, flags) or []
        table, of_line = region_lookup(regions)
        try:
            with contextlib.suppress(Exception):  # a file the reader cannot follow defines nothing
                for fdef in find_functions(tokenize(text, of_line), path):
                    if fdef.name in wanted:
                        found.setdefault(fdef.name, []).append((path, (fdef, table)))
        finally:
            forget_tables()
    ops: list[TorchOp] = []
    for reg in registrations:
        for path, entry in found.get(reg.function, []):
            fdef, table = entry  # type: ignore[misc]
            if len(fdef.params) != len(reg.params):
                continue  # an overload of another arity
            for position in reg.int_positions():
                param = fdef.params[position] or reg.params[position][1]
                walked = walk_parametric(index, fdef, position, table, package, version, path)
                if walked is None:
                    continue
                true, unknown, gates = walked
                false = ~(true | unknown)
                if not gates and sum(map(bool, (true, unknown, false))) < 2:
                    continue  # nothing about it depends on the capability: nothing to tell Python
                ops.append(
                    TorchOp(
                        package, version, reg.op, reg.function, path, fdef.line, param, position,
                        true, unknown, (reg.path, reg.line), gates, reg.namespace,
                    )
                )  # fmt: skip
            break  # one definition per op
    return tuple(ops)
