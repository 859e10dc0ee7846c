"""Which modules the Python detector's second round reads.

A name found arch-dependent is either a member (an attribute or a method), which another module
reads only as ``x.name`` or by a string, or a free name (a module global or function), which it
reads where it imports it, as an attribute, or bare after a star import (`ArchNames`,
`PythonAnalyzer._mentions_found`). A module that spells the name only as a local variable, a
parameter or a keyword is not read, and the gates of the modules that do read it are still found.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from liftgate.collector import collector_off
from liftgate.detect.py_scope import ArchNames
from liftgate.detect.python import (
    _IMPORTED,
    _LONG_IDENTIFIER,
    _MEMBER_IDENTIFIER,
    _STAR_IMPORT,
    PySource,
    PythonAnalyzer,
)

PACKAGE = {
    # Round one: these read the device.
    "pkg/buffers.py": """
        import torch

        class Buffer:
            def view(self, n):
                if torch.cuda.get_device_capability() >= (9, 0):
                    return "tma"
                return "plain"
        """,
    "pkg/flags.py": """
        import torch

        def fast_enabled():
            return torch.cuda.get_device_capability()[0] >= 10
        """,
    # Round two: each reads one of the names above.
    "pkg/uses_method.py": """
        from pkg.buffers import Buffer

        def pick(n):
            if Buffer().view(n) == "tma":  # gate: the method's result
                return 1
            return 0
        """,
    "pkg/uses_import.py": """
        from pkg.flags import (
            fast_enabled,
        )

        def pick():
            if fast_enabled():  # gate: the imported function
                return 1
            return 0
        """,
    "pkg/uses_star.py": """
        from pkg.flags import *

        def pick():
            if fast_enabled():  # gate: bound by the star import
                return 1
            return 0
        """,
    "pkg/uses_getattr.py": """
        from pkg.buffers import Buffer

        def pick(n):
            if getattr(Buffer(), "view")(n) == "tma":  # read by a string
                return 1
            return 0
        """,
    # Never read: the names are only locals, parameters and keywords here.
    "pkg/locals_only.py": """
        def pick(view, fast_enabled=False):
            if view and fast_enabled:
                return dict(view=1)
            return None
        """,
}


def _sources(files: dict[str, str]) -> list[PySource]:
    return [
        PySource("pkg", "1.0", path, (lambda data: lambda: data)(textwrap.dedent(text).encode()))
        for path, text in files.items()
    ]


def _analyse(files: dict[str, str]) -> tuple[list[str], list[tuple[str, int]], PythonAnalyzer]:
    analyzer = PythonAnalyzer(_sources(files))
    walked: list[str] = []
    walk = analyzer.interpreter.function_gate_walk

    def recording(module, sink):  # type: ignore[no-untyped-def]
        walked.append(module.path)
        return walk(module, sink)

    analyzer.interpreter.function_gate_walk = recording  # type: ignore[method-assign]
    with collector_off():
        gates = analyzer.analyze()
    return walked, [(g.location.path, g.location.span.start) for g in gates], analyzer


def test_second_round_reads_the_modules_that_can_read_a_found_name() -> None:
    walked, gates, analyzer = _analyse(PACKAGE)
    found = analyzer.interpreter.arch_names
    assert "view" in found and "view" not in found.free  # a method: a member
    assert "fast_enabled" in found.free  # a module-level function
    assert set(walked) == set(PACKAGE) - {"pkg/locals_only.py"}
    lines = {path: line for path, line in gates}
    for path in ("pkg/uses_method.py", "pkg/uses_import.py", "pkg/uses_star.py", "pkg/uses_getattr.py"):
        text = textwrap.dedent(PACKAGE[path]).splitlines()
        assert "if " in text[lines[path] - 1], (path, lines)
    assert "pkg/locals_only.py" not in lines


def test_a_module_that_reads_the_method_is_read_whatever_its_other_names() -> None:
    # The same spelling as a local and as an attribute: the attribute decides.
    files = dict(PACKAGE)
    files["pkg/locals_only.py"] = textwrap.dedent(PACKAGE["pkg/locals_only.py"]) + textwrap.dedent(
        """
        def other(buffer):
            view = buffer.view(4)
            return view
        """
    )
    walked, _gates, _analyzer = _analyse(files)
    assert "pkg/locals_only.py" in walked


def test_arch_names_free_wins_over_member() -> None:
    names = ArchNames()
    names.add_members(["mode"])
    assert names == {"mode"} and names.free == set()
    names.add("mode")  # also a module global somewhere: read bare too
    names.add_members(["mode"])
    assert names == {"mode"} and names.free == {"mode"}
    names.update(["a", "b"], ["c"])
    assert names.free == {"a", "b", "c", "mode"} == names
    names.add_function("view", method=True)
    names.add_function("enabled", method=False)
    assert "view" in names and "view" not in names.free and "enabled" in names.free


def _stdlib_modules() -> list[Path]:
    root = Path(ast.__file__).parent
    return sorted(root.glob("*.py"))[:200]


@pytest.mark.parametrize("path", _stdlib_modules(), ids=lambda p: p.name)
def test_member_and_import_patterns_see_every_attribute_and_import(path: Path) -> None:
    """On real code (the standard library this test runs on): every attribute the parser sees is
    a member identifier, and every name an import binds or reads is in an import statement's
    text, so the second round never misses a module for how the name was spelled."""
    data = path.read_bytes()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        pytest.skip("not parsed by this Python")
    members = set(_MEMBER_IDENTIFIER.findall(data))
    imported: set[bytes] = set()
    for text in _IMPORTED.findall(data):
        imported.update(_LONG_IDENTIFIER.findall(text))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and len(node.attr) > 3:
            assert node.attr.encode() in members, (path.name, node.lineno, node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                assert _STAR_IMPORT.search(data), (path.name, node.lineno)
            for alias in node.names:
                for part in (*alias.name.split("."), alias.asname or ""):
                    if len(part) > 3:
                        assert part.encode() in imported, (path.name, node.lineno, part)


def test_patterns_across_continuations_and_comments() -> None:
    data = textwrap.dedent(
        """
        x = (thing.
             # a comment between
             forward(1))
        y = thing \\
            .mode
        from a import b, \\
            enabled
        from c import (dddd,  # comment
                       eeee)
        """
    ).encode()
    assert {b"forward", b"mode"} <= set(_MEMBER_IDENTIFIER.findall(data))
    imported = {n for text in _IMPORTED.findall(data) for n in _LONG_IDENTIFIER.findall(text)}
    assert {b"enabled", b"dddd", b"eeee"} <= imported
