"""Package-wide knowledge of the cpp-runtime detector: the helpers that read the device's capability.

`HelperIndex` reads a package's function definitions and finds, to a fixed point, the functions
whose result depends on the device (``get_sm_version_num()``, a wrapper of a wrapper) and the
member fields that hold the capability (``sm_ = getSMVersion();`` in a constructor).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from liftgate.detect.cpp_api import inferable, source_names
from liftgate.detect.cpp_interp import ONE_REGION, Interpreter
from liftgate.detect.cpp_syntax import FuncDef, find_functions, forget_tables, tokenize
from liftgate.detect.cpp_values import CV, UNKNOWN
from liftgate.detect.cuda import Region


@dataclass
class HelperIndex:
    """Functions of a package that read the device's capability, directly or through each other,
    and member fields that hold it (``sm_ = getSMVersion();`` in a constructor)."""

    functions: dict[str, list[FuncDef]] = field(default_factory=dict)  # every function parsed, by name
    helpers: dict[str, list[FuncDef]] = field(default_factory=dict)  # those that touch the capability
    tainted: set[str] = field(default_factory=set)  # helpers whose result depends on the device
    fields: dict[str, CV] = field(default_factory=dict)
    # Per file: the preprocessor regions its helpers' tokens refer to (see `region_lookup`).
    region_tables: dict[str, list[Region]] = field(default_factory=dict)
    # The toolkit assumed (``CUDA_VERSION`` in host code reads as it, said as an assumption).
    cuda_version: tuple[int, int] | None = None
    _done: dict[tuple[str, str, int], frozenset[str]] = field(default_factory=dict)

    def add_source(self, path: str, text: str, regions: list[Region] | None = None) -> None:
        """Read a file's function definitions, as the host pass compiles them when ``regions`` are given."""
        table, of_line = region_lookup(regions or [])
        if regions:
            self.region_tables[path] = table
        try:
            for fdef in find_functions(tokenize(text, of_line), path):
                self.functions.setdefault(fdef.name, []).append(fdef)
        finally:
            forget_tables()

    def names(self) -> set[str]:
        """Names whose use makes a function worth walking (a struct field ``.arch`` as ``arch``)."""
        return self.tainted | {name.lstrip(".") for name in self.fields}

    def needles(self) -> set[bytes]:
        """What a file must contain to use one of `names`: ``.arch``/``->arch`` for a struct field."""
        out = {n.encode() for n in self.tainted}
        for name in self.fields:
            if name.startswith("."):
                out |= {name.encode(), b"->" + name[1:].encode()}
            else:
                out.add(name.encode())
        return out

    def resolve(self) -> bool:
        """Find helpers to a fixed point; True when something new was found.

        A function is (re)evaluated whenever the set of capability names its body mentions grows,
        so the order in which definitions were read does not matter.
        """
        grew = False
        for _ in range(8):
            watch = self.names() | source_names()
            todo: list[FuncDef] = []
            for fdefs in self.functions.values():
                for fdef in fdefs:
                    key = (fdef.path, fdef.qualname, fdef.line)
                    ids = body_ids(fdef)
                    touched = (ids & watch) | {i for i in ids if i not in self.functions and inferable(i)}
                    if not touched or self._done.get(key) == touched:
                        continue
                    if key not in self._done:
                        self.helpers.setdefault(fdef.name, []).append(fdef)
                    self._done[key] = touched
                    todo.append(fdef)
            changed = False
            for fdef in todo:
                interp = Interpreter(self, fdef.path, self.region_tables.get(fdef.path, ONE_REGION))
                result, fields = interp.run(fdef, [UNKNOWN] * len(fdef.params), collect=None)
                if result.arch and fdef.name not in self.tainted:
                    self.tainted.add(fdef.name)
                    changed = True
                for name, value in fields.items():
                    if value.arch and name not in self.fields:
                        self.fields[name] = value
                        changed = True
            grew = grew or changed
            if not changed:
                break
        return grew

    def export(self) -> HelperIndex:
        """What workers need: the helpers and fields (not every function parsed)."""
        used = {f.path for fdefs in self.helpers.values() for f in fdefs}
        return HelperIndex(
            functions={name: [] for name in self.functions},  # which names are defined at all
            helpers=self.helpers,
            tainted=self.tainted,
            fields=self.fields,
            region_tables={p: t for p, t in self.region_tables.items() if p in used},
            cuda_version=self.cuda_version,
        )


_BODY_IDS: dict[tuple[str, str, int], frozenset[str]] = {}


def body_ids(fdef: FuncDef) -> frozenset[str]:
    """The identifiers a function's body and member initialisers use (memoised per definition)."""
    key = (fdef.path, fdef.qualname, fdef.line)
    ids = _BODY_IDS.get(key)
    if ids is None:
        ids = frozenset(t.text for t in fdef.body if t.kind == "id") | frozenset(
            t.text for _, toks in fdef.inits for t in toks if t.kind == "id"
        )
        if len(_BODY_IDS) > 20_000:
            _BODY_IDS.clear()
        _BODY_IDS[key] = ids
    return ids


def region_lookup(regions: list[Region]) -> tuple[list[Region], Callable[[int], int | None]]:
    """Region table (index 0: before any conditional) and a line -> region index map (None: not host code)."""
    table = [Region(0, True, ()), *regions]
    starts = [r.line for r in table]

    def of_line(line: int) -> int | None:
        k = bisect.bisect_right(starts, line) - 1
        k = max(k, 0)
        return None if table[k].host is False else k

    return table, of_line
