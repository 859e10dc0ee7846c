"""Methods whose class is chosen at run time (issue 18, item 4).

``quant_config.get_min_capability()`` on a config read from a checkpoint, ``kernel.is_supported()``
in ``for kernel in _KERNELS``: which implementation runs is decided at run time, and each one
admits its own set of devices. A *runtime choice* is met when a method is looked up, in a walked
function's own body, on

- a receiver that is one of several classes the interpreter knows (a loop over a list of kernel
  classes): each class is a candidate; or
- a receiver it cannot see at all (a parameter, an attribute it cannot follow; not ``super()``):
  every implementation of that method name in the scanned packages is a candidate, when at most
  `MAX_CHOICES` exist and at least half of them read the device (their text mentions the
  capability, or they return a number: ``get_min_capability``), so that a common name such as
  ``resolve`` or ``get``, with one device-aware implementation among thirty, is not taken for
  one. An abstract method (``@abstractmethod``, a body that only raises ``NotImplementedError``)
  is not an implementation.

Where the receiver's class family is known, only that family's implementations are candidates,
whatever the name (up to `MAX_FAMILY_CHOICES` of them), when at least one of them reads the device:

- ``cls.supports_head_size(...)`` / ``self._supports_current_device()`` in a walk of a method's
  own definition: ``cls`` is the class the method is defined in or any subclass, so the
  candidates are the implementation that class resolves to and every override in a subclass
  (``AttentionBackend.validate_configuration`` reads each backend's ``supports_*``);
- a parameter annotated with a class (``kernel: type[ScaledMMLinearKernel]``, ``X | None``, a
  ``TypeVar`` with a ``bound=``): the implementations in subclasses of that class.

Classes defined in test code (`is_test_code`: fakes such as ``FakeCudaPlatform``) are never
candidates.

The interpreter walks such a function once more per candidate, with the lookup fixed to that
candidate (`liftgate.detect.py_interpreter.Interpreter._walk_function`), and each condition whose
reading differs between candidates becomes a gate that lists every implementation with what it
admits (`liftgate.model.Choice`): targets all of them admit are admitted, targets some admit are
unknown ("the choice is made at run time").
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from liftgate.detect.py_binding import Module, decorator_name, runtime_prefilter, walk
from liftgate.detect.pyvalues import ClassRef, Instance

MAX_CHOICES = 64  # implementations of one method name; more is a name too common to be a choice
MAX_MODULES = 64  # modules defining a method name read to find them
# ... when the receiver's class family is known (its own ``self``/``cls``, an annotation): only the
# family's overrides are candidates, so a common name is no reason to stop looking.
MAX_FAMILY_MODULES = 256
MAX_FAMILY_CHOICES = 128  # implementations within a known family (vLLM 0.33.0 has 76 linear kernels)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One implementation a runtime choice may reach: the receiver to evaluate the call on, and
    where the attribute is defined for it."""

    receiver: ClassRef | Instance
    implementation: str
    path: str
    line: int


@dataclass(frozen=True, slots=True)
class RuntimeChoice:
    """A lookup whose receiver's class is chosen at run time, with its candidates in a stable order
    (by where they are defined). ``key`` identifies it within one function walk."""

    key: tuple[object, ...]
    label: str
    candidates: tuple[Candidate, ...]
    # Too few implementations read the device for the lookup alone to make it a choice; a call
    # passing them a device-dependent value still does (`Evaluator._settle`).
    loose: bool = False


def is_abstract(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``@abstractmethod``, or a body that only documents and raises ``NotImplementedError``
    (or is ``...``/``pass``): an interface, not an implementation."""
    if any(decorator_name(d) in ("abstractmethod", "abstractclassmethod") for d in node.decorator_list):
        return True
    body = [
        s for s in node.body
        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))
    ]  # fmt: skip
    if not body:
        return True
    if len(body) != 1:
        return False
    stmt = body[0]
    if isinstance(stmt, ast.Pass) or (
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and stmt.value.value is Ellipsis
    ):
        return True
    if isinstance(stmt, ast.Raise) and stmt.exc is not None:
        exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def class_methods(
    module: Module, name: str
) -> list[tuple[ast.ClassDef, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The module's top-level classes that define method ``name`` in their own body (implementations only)."""
    found: list[tuple[ast.ClassDef, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for stmt in module.tree.body:
        if not isinstance(stmt, ast.ClassDef):
            continue
        for item in stmt.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                if not is_abstract(item):
                    found.append((stmt, item))
                break
    return found


def is_test_code(path: str) -> bool:
    """A file of a test suite (``tests/``, ``test_*.py``, ``conftest.py``): the fakes it defines
    (``FakeCudaPlatform``, ``DummyLinearScheme``) are not what a deployment chooses at run time."""
    parts = path.split("/")
    name = parts[-1]
    return (
        any(p in ("test", "tests", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def reads_the_device(text: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """An implementation that can make a caller's reading depend on the device: its text mentions
    the capability (`runtime_prefilter`), or it returns a number (``return 89``, which callers
    compare with the capability)."""
    if runtime_prefilter(text.encode()):
        return True
    return any(
        isinstance(n, ast.Return)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, (int, float))
        and not isinstance(n.value.value, bool)
        for n in walk(node)
    )
