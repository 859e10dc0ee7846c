"""Names and flags of the CMake analysis: which variables hold arch lists, arch flags, text helpers.

`is_arch_variable` tells an arch list by its name, `defined_variable` what a ``set()``,
``list(APPEND …)`` or ``set_*properties`` command assigns, `references` and `substitute` read the
``${VAR}`` references of a value; the ``-gencode``/``-arch`` patterns are read by the flag gates
(`liftgate.detect.cmake_rules`), and `shorten`/`truncate` keep evidence texts short.
"""

from __future__ import annotations

import itertools
import re

from liftgate.detect.cmake_syntax import Argument, Command

CONDITION_LIMIT = 240
SHOWN_ITEMS = 6

_ARCH_VAR = re.compile(r"(?:^|_)(?:ARCH|ARCHS|ARCHES|ARCHITECTURES|ARCH_LIST|ARCHLIST)$", re.I)
_NOT_CUDA_PARTS = frozenset(
    {
        "HIP",
        "ROCM",
        "AMDGPU",
        "GFX",
        "OSX",
        "APPLE",
        "IOS",
        "ANDROID",
        "CPU",
        "HOST",
        "SYSTEM",
        "ISA",
        "X86",
        "ARM",
        "AARCH64",
        "PYTHON",
    }
)
CMAKE_LISTS = frozenset({"CMAKE_CUDA_ARCHITECTURES", "CUDA_ARCHITECTURES"})
TORCH_LISTS = frozenset({"TORCH_CUDA_ARCH_LIST"})
VARIABLE_REF = re.compile(r"\$\{([A-Za-z0-9_.+\-/]+)\}")
_ANY_REF = re.compile(r"\$(?:ENV|CACHE)?\{([^}]*)\}|\$<")

GENCODE = re.compile(
    r"(?<![\w-])(?:-gencode|--generate-code)(?:=|\s+)[\"']?arch=([\w${}]+)\s*,\s*code="
    r"(\[[^\]]*\]|\\?\"[^\"]*\"|'[^']*'|[\w${},]+)",
    re.I,
)
ARCH_FLAG = re.compile(r"(?<![\w-])(?:-arch|--gpu-architecture)(?:=|\s+)([\w${}.\-]+)")
CODE_FLAG = re.compile(r"(?<![\w-])(?:-code|--gpu-code)(?:=|\s+)(\[[^\]]*\]|[\w${},]+)")
GPU_NAME = re.compile(r"^(?:sm|compute|lto)_", re.I)
FLAG_HINT = re.compile(r"(?<![\w-])(?:-gencode|--generate-code|-arch|--gpu-architecture)\b")


def is_arch_variable(name: str) -> bool:
    """Whether a variable's name says it holds a CUDA arch list (``CUDA_ARCHS``, ``SM90_ARCHS``…)."""
    if name.upper() in CMAKE_LISTS or name.upper() in TORCH_LISTS:
        return True
    if not _ARCH_VAR.search(name):
        return False
    return not any(part in _NOT_CUDA_PARTS for part in name.upper().split("_"))


def references(value: str) -> list[str]:
    """Names referenced in ``value`` (``$ENV{X}`` as ``ENV{X}``, generator expressions as ``$<>``)."""
    found: list[str] = []
    for m in _ANY_REF.finditer(value):
        if m.group(0) == "$<":
            found.append("$<>")
        elif m.group(0).startswith("${"):
            found.append(m.group(1))
        else:
            found.append(m.group(0)[1:])
    return found


def substitute(value: str, bindings: dict[str, tuple[str, ...]]) -> list[str]:
    """Every expansion of ``value`` over the literal ``foreach`` items bound to its variables."""
    names = [n for n in dict.fromkeys(VARIABLE_REF.findall(value)) if n in bindings]
    if not names:
        return [value]
    expansions: list[str] = []
    for combo in itertools.islice(itertools.product(*(bindings[n] for n in names)), 64):
        text = value
        for name, item in zip(names, combo, strict=True):
            text = text.replace("${" + name + "}", item)
        expansions.append(text)
    return expansions


def shorten(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN_ITEMS])
    return shown + (f" and {len(items) - SHOWN_ITEMS} more" if len(items) > SHOWN_ITEMS else "")


def truncate(text: str) -> str:
    return text if len(text) <= CONDITION_LIMIT else text[: CONDITION_LIMIT - 1].rstrip() + "…"


def defined_variable(command: Command) -> tuple[str, tuple[Argument, ...]] | None:
    """(variable or property, value arguments) for set/list(APPEND…)/set_*properties; else None."""
    args = command.args
    if command.name == "set" and args and not args[0].has_reference:
        values = args[1:]
        for i, arg in enumerate(values):
            if arg.is_word("CACHE", "PARENT_SCOPE"):
                values = values[:i]
                break
        return args[0].value, values
    if command.name == "list" and len(args) >= 2 and args[0].is_word("APPEND", "PREPEND", "INSERT"):
        values = args[3:] if args[0].value == "INSERT" else args[2:]
        return args[1].value, values
    if command.name == "set_target_properties":
        for i, arg in enumerate(args):
            if arg.is_word("PROPERTIES"):
                pairs = args[i + 1 :]
                for key, value in zip(pairs[::2], pairs[1::2], strict=False):
                    if key.value.upper() in CMAKE_LISTS:
                        return "CUDA_ARCHITECTURES", (value,)
    if command.name == "set_property":
        for i, arg in enumerate(args):
            if arg.is_word("PROPERTY") and i + 1 < len(args):
                if args[i + 1].value.upper() in CMAKE_LISTS:
                    return "CUDA_ARCHITECTURES", args[i + 2 :]
                return None
    return None
