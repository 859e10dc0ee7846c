"""The edit that lifts a CMake arch list for users who build from source: the target joins the list.

``set(CMAKE_CUDA_ARCHITECTURES 80-real 90a)`` → ``… 90a 120``; ``cuda_archs_loose_intersection(X
"9.0a;10.0a" …)`` → ``"9.0a;10.0a;12.0a"``; ``list(APPEND TORCH_CUDA_ARCH_LIST "11.0")`` gains a
second element. The target is spelled like the list's last item (``12.0`` or ``120``, with the
target's own variant, ``-real`` kept where the list uses it, ``+PTX`` never copied since it would
admit later archs too). Tests (``if("90a" IN_LIST …)``, ``MATCHES``) and gencode flag strings are
not lists: they get no edit, and the plan says so.
"""

from __future__ import annotations

import re

from liftgate.arch.core import Arch
from liftgate.lift.text import Edit, Granularity, NoSafeEdit, TextEdit
from liftgate.model import Gate

_ITEM = re.compile(r"^(\d{2,3}|\d{1,2}\.\d)([af])?(-real|-virtual|\+PTX)?$")
_QUOTED = re.compile(r'"([^"\\$]*)"')
_LIST_COMMANDS = ("set", "list", "cuda_archs_loose_intersection", "set_target_properties", "set_property")


def _spell(like: str, arch: Arch) -> str | None:
    m = _ITEM.match(like)
    if m is None:
        return None
    body = f"{arch.major}.{arch.minor}" if "." in m.group(1) else str(arch.number)
    suffix = "-real" if m.group(3) == "-real" else ""
    return f"{body}{arch.variant}{suffix}"


def cmake_edit(text: str, gate: Gate, arch: Arch, line_starts: list[int]) -> Edit:
    """The edit adding ``arch`` to the arch list at the gate (``line_starts``: offsets of each line)."""
    if gate.directive not in _LIST_COMMANDS:
        raise NoSafeEdit(
            f"a CMake {gate.directive}() is a test or a flag string, not an arch list: edit it by hand"
        )
    start = line_starts[gate.location.span.start - 1]
    end_line = gate.location.span.end
    end = line_starts[end_line] if end_line < len(line_starts) else len(text)
    region = text[start:end]
    for m in _QUOTED.finditer(region):
        items = [i.strip() for i in m.group(1).split(";") if i.strip()]
        if items and all(_ITEM.match(i) for i in items):
            spelled = _spell(items[-1], arch)
            if spelled is None or spelled in items:
                raise NoSafeEdit(f'"{m.group(1)}" already lists {spelled}')
            at = start + m.end(1)
            return Edit(
                (TextEdit(at, at, f";{spelled}"),),
                f'added {spelled} to "{m.group(1)}"',
                Granularity.CAPABILITY,
            )
        if gate.directive == "list":
            break
    # Unquoted items: the run of arch tokens after the list's name.
    tokens = list(re.finditer(r"[^\s()\"]+", region))
    run = [t for t in tokens if _ITEM.match(t.group(0))]
    if run:
        last = run[-1]
        spelled = _spell(last.group(0), arch)
        if spelled and spelled not in (t.group(0) for t in run):
            at = start + last.end()
            return Edit(
                (TextEdit(at, at, f" {spelled}"),),
                f"added {spelled} after {last.group(0)}",
                Granularity.CAPABILITY,
            )
    if gate.directive == "list":
        m2 = re.search(r"(\"[^\"]*\")\s*\)", region)
        if m2:
            items = [m2.group(1).strip('"')]
            spelled = _spell(items[0], arch)
            if spelled:
                at = start + m2.end(1)
                return Edit(
                    (TextEdit(at, at, f' "{spelled}"'),), f'appended "{spelled}"', Granularity.CAPABILITY
                )
    raise NoSafeEdit("no literal arch list at the gate (it comes from a variable): edit it by hand")
