"""The package's shape, read from its source with `ast`: which module may import what.

* No module imports a private (``_name``) name from another module: what one module shares with
  another is public. A private name is visible only inside the namespace that holds it (its
  module, or the package it is a submodule of); dunder names (``__version__``) are public.
* The pipeline runs one way: arch → model → sources → detect → judge (→ edits) → lift, chain,
  trace, report → verify, cli. An earlier stage never imports a later one, not even inside a
  function or under ``TYPE_CHECKING``.
* The enums that the JSON report carries hold exactly the values its schema allows.
"""

from __future__ import annotations

import ast
import enum
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import liftgate
from liftgate.diff import ChangeKind
from liftgate.lift.text import Granularity
from liftgate.model import Confidence, ElseKind, GateKind, Relation, Status, TakenSide, VerdictKind

PACKAGE_DIR = Path(liftgate.__file__).resolve().parent
SCHEMA_DIR = PACKAGE_DIR / "data"


@dataclass(frozen=True)
class Imported:
    """One name an import statement binds: ``module`` (absolute), ``name`` (None: the module itself)."""

    importer: str  # the importing module, dotted
    path: str  # its file, relative to the package's parent
    line: int
    module: str
    name: str | None
    type_only: bool  # under ``if TYPE_CHECKING:``

    @property
    def target(self) -> str:
        """What is imported, dotted: ``liftgate.scanner._read_text_lenient``, ``liftgate.scan``."""
        return f"{self.module}.{self.name}" if self.name else self.module

    def where(self) -> str:
        what = f"from {self.module} import {self.name}" if self.name else f"import {self.module}"
        return f"{self.path}:{self.line}: {what}" + (" (TYPE_CHECKING)" if self.type_only else "")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(source: str, importer: str, path: str, is_package: bool = False) -> Iterator[Imported]:
    """Every import in ``source``, at any depth (functions, classes, ``try``, ``TYPE_CHECKING``)."""
    tree = ast.parse(source, path)
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                type_only.update(id(n) for n in ast.walk(child))
    package = importer if is_package else importer.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Imported(importer, path, node.lineno, alias.name, None, id(node) in type_only)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                if alias.name != "*":
                    yield Imported(importer, path, node.lineno, module, alias.name, id(node) in type_only)


def package_imports(root: Path = PACKAGE_DIR) -> list[Imported]:
    out: list[Imported] = []
    for file in sorted(root.rglob("*.py")):
        name = module_name(file, root.parent)
        rel = str(file.relative_to(root.parent))
        out.extend(imports_of(file.read_text(encoding="utf-8"), name, rel, file.name == "__init__.py"))
    return out


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _within(module: str, namespace: str) -> bool:
    return module == namespace or module.startswith(namespace + ".")


def private_violations(imports: list[Imported], top: str = "liftgate") -> list[str]:
    """Imports of a private name (or through a private module) from outside the namespace holding it."""
    bad = []
    for imp in imports:
        parts = imp.target.split(".")
        if parts[0] != top:
            continue
        for i, part in enumerate(parts):
            if _private(part) and not _within(imp.importer, ".".join(parts[:i])):
                bad.append(f"{imp.where()}  ({imp.importer} is outside {'.'.join(parts[:i])})")
                break
    return bad


def _names(*stages: str) -> tuple[str, ...]:
    return tuple(f"liftgate.{s}" for s in stages)


LATER_THAN_MODEL = _names(
    "sources", "detect", "judge", "edits", "lift", "chain", "trace", "report", "verify", "cli",
    "scanner", "scan", "evaluate", "diff", "doctor", "procgroup",
)  # fmt: skip
# (importer namespace, namespaces it must never import): the pipeline, written from each stage.
RULES: list[tuple[str, tuple[str, ...]]] = [
    (
        "liftgate.detect",
        _names("judge", "lift", "report", "chain", "trace", "verify", "cli", "scanner", "scan"),
    ),
    ("liftgate.judge", _names("lift", "cli", "report")),
    ("liftgate.sources", _names("detect", "judge", "lift", "report", "chain", "trace")),
    (
        "liftgate.edits",
        _names("judge", "lift", "report", "chain", "trace", "verify", "cli", "scanner", "scan"),
    ),
    ("liftgate.model", LATER_THAN_MODEL),
    ("liftgate.arch", ("liftgate.model", *LATER_THAN_MODEL)),
]


# Allowed exceptions, each for a reason: the report's value names the workspace's type (a type-only
# import: no run-time dependence), and `Report.findings` evaluates gates (`liftgate.evaluate` is the
# model's own arithmetic over arch sets, imported inside the method).
ALLOWED = {
    ("liftgate.model", "liftgate.sources.workspace.Workspace", True),
    ("liftgate.model", "liftgate.evaluate.evaluate", False),
}


def pipeline_violations(imports: list[Imported], stage: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{imp.where()}  ({stage} must not import {imp.target})"
        for imp in imports
        if _within(imp.importer, stage)
        and any(_within(imp.target, f) for f in forbidden)
        and (imp.importer, imp.target, imp.type_only) not in ALLOWED
    ]


@pytest.fixture(scope="module")
def imports() -> list[Imported]:
    return package_imports()


def test_the_walker_sees_every_kind_of_import() -> None:
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from liftgate._version import __version__\n"
        "from . import _helpers\n"
        "from ..scanner import _read_text_lenient\n"
        "if TYPE_CHECKING:\n"
        "    from liftgate.lift.plan import PatchPlan\n"
        "def f():\n"
        "    import liftgate.report._hidden\n"
        "    from liftgate import scan\n"
    )
    found = list(imports_of(source, "liftgate.detect.fake", "liftgate/detect/fake.py"))
    targets = {(i.target, i.type_only) for i in found}
    assert ("liftgate.detect._helpers", False) in targets  # relative, resolved
    assert ("liftgate.scanner._read_text_lenient", False) in targets
    assert ("liftgate.lift.plan.PatchPlan", True) in targets
    assert ("liftgate.report._hidden", False) in targets  # inside a function
    private = private_violations(found)
    assert [v.split(":")[1] for v in private] == ["5", "9"]  # __version__ and the own package's _helpers pass
    piped = pipeline_violations(found, *RULES[0])
    assert sorted(v.split(":")[1] for v in piped) == ["10", "5", "7", "9"]


def test_no_module_imports_a_private_name_from_another(imports: list[Imported]) -> None:
    bad = private_violations(imports)
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


@pytest.mark.parametrize(("stage", "forbidden"), RULES, ids=[r[0] for r in RULES])
def test_the_pipeline_runs_one_way(imports: list[Imported], stage: str, forbidden: tuple[str, ...]) -> None:
    assert any(_within(i.importer, stage) for i in imports), f"no module under {stage}"
    bad = pipeline_violations(imports, stage, forbidden)
    assert not bad, f"{stage} imports a later stage:\n" + "\n".join(bad)


def _schema_enum(schema_file: str, *path: str) -> list[Any]:
    node: Any = json.loads((SCHEMA_DIR / schema_file).read_text(encoding="utf-8"))
    for key in path:
        node = node[key]
    return [v for v in node["enum"] if v is not None]


# (enum, schema file, path to the node holding its "enum"); None: no JSON schema covers it.
SCHEMA_ENUMS: list[tuple[type[enum.Enum], str | None, tuple[str, ...]]] = [
    (
        Relation,
        "report.schema.json",
        ("$defs", "chain", "properties", "links", "items", "properties", "relation"),
    ),
    (TakenSide, "report.schema.json", ("$defs", "gate_trace", "properties", "took")),
    (GateKind, "report.schema.json", ("$defs", "kind")),
    (ElseKind, "report.schema.json", ("$defs", "gate", "properties", "else_kind")),
    (Confidence, "report.schema.json", ("$defs", "gate", "properties", "confidence")),
    (Status, "report.schema.json", ("$defs", "gate", "properties", "status", "additionalProperties")),
    (VerdictKind, "report.schema.json", ("$defs", "verdict", "properties", "verdict")),
    (Granularity, None, ()),  # the lift plan's JSON has no schema
    (ChangeKind, None, ()),  # nor has `liftgate diff --format json`
]


@pytest.mark.parametrize(
    ("kind", "schema_file", "path"), SCHEMA_ENUMS, ids=[e[0].__name__ for e in SCHEMA_ENUMS]
)
def test_enum_values_are_what_the_schema_allows(
    kind: type[enum.Enum], schema_file: str | None, path: tuple[str, ...]
) -> None:
    values = [member.value for member in kind]
    assert all(isinstance(v, str) for v in values) and issubclass(kind, str)
    assert len(set(values)) == len(values)
    for member in kind:  # a str subclass: it compares, hashes and serialises as its value
        assert member == member.value and json.dumps(member) == json.dumps(member.value)
    if schema_file is not None:
        assert sorted(values) == sorted(_schema_enum(schema_file, *path))
