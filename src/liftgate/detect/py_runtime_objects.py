"""Objects whose class a Python stack picks at run time (vLLM's ``current_platform``), as data.

`liftgate/data/py_objects.json` names, for each such object, the module and name it is read
from and the class the stack instantiates on an NVIDIA GPU, with the source of that fact. The
py-runtime interpreter (`liftgate.detect.py_scope.Scopes.module_attribute`) resolves the object to
an instance of that class *from the scanned source*, so a platform method that liftgate does not
model (``support_deep_gemm``) is read from the release's own definition, never guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["RuntimeObject", "parse_objects", "runtime_object", "runtime_objects"]


@dataclass(frozen=True, slots=True)
class RuntimeObject:
    module: str
    name: str
    cls: str  # dotted: module path, then the class name
    source: str


@cache
def runtime_objects() -> dict[tuple[str, str], RuntimeObject]:
    """The data file, loaded and checked once (a bad entry fails at load, naming it)."""
    return parse_objects(
        json.loads(resources.files("liftgate.data").joinpath("py_objects.json").read_text("utf-8"))
    )


def parse_objects(raw: dict[str, Any]) -> dict[tuple[str, str], RuntimeObject]:
    """The entries of a ``py_objects.json`` document, keyed by (module, name); ValueError names a bad one."""
    if raw.get("schema_version") != 1:
        raise ValueError("py_objects.json: schema_version must be 1")
    out: dict[tuple[str, str], RuntimeObject] = {}
    for entry in raw["objects"]:
        obj = RuntimeObject(entry["module"], entry["name"], entry["class"], entry["source"])
        if "." not in obj.cls or not obj.source:
            raise ValueError(f"py_objects.json: {obj.module}.{obj.name} needs a dotted class and a source")
        if (obj.module, obj.name) in out:
            raise ValueError(f"py_objects.json: {obj.module}.{obj.name} is listed twice")
        out[(obj.module, obj.name)] = obj
    return out


def runtime_object(module: str, name: str) -> RuntimeObject | None:
    return runtime_objects().get((module, name))
