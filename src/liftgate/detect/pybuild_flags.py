"""Arch flags in Python build code: nvcc's ``-gencode``/``-arch``/``-code`` (and clang's, CuTe DSL's) in lists and strings.

The flags of one group (one list, one string) are one gate; a group whose targets are computed at
run time is no gate, and neither is a literal flag added to the same list as computed ones.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from liftgate.arch.core import ArchSet
from liftgate.detect.pybuild_gates import Draft, GateDrafts
from liftgate.detect.pybuild_syntax import join_names, node_span
from liftgate.detect.pybuild_targets import code_targets
from liftgate.model import Evidence, Skip

# Stands for the formatted parts of an f-string: an arch flag that contains it is computed at run time.
_FORMATTED = "\x00"

# nvcc (and clang, CuTe DSL) flags that name targets, by what their value means.
_GENCODE_FLAGS = frozenset({"-gencode", "--generate-code"})
# -arch=sm_XX alone is nvcc's shorthand for arch=compute_XX,code=[sm_XX,compute_XX]; clang's flags match it.
_ARCH_FLAGS = frozenset({"-arch", "--gpu-architecture", "--offload-arch", "--cuda-gpu-arch"})
# CuTe DSL's compile option: the kernel is compiled for exactly this target.
_EXACT_ARCH_FLAGS = frozenset({"--gpu-arch"})
_CODE_FLAGS = frozenset({"-code", "--gpu-code"})
_TARGET_FLAGS = _GENCODE_FLAGS | _ARCH_FLAGS | _EXACT_ARCH_FLAGS | _CODE_FLAGS
# -arch values that name no particular target: they restrict nothing.
_GENERIC_ARCH_VALUES = frozenset({"native", "all", "all-major"})

_GENCODE_PART_RE = re.compile(r"(arch|code)=(\[[^\]]*\]|[^,\s]+)")
# Tokens that may stand in a flag string besides flags: the compiler and the files it compiles.
_COMPILER_TOKEN_RE = re.compile(r"(?:^|/)nvcc(?:\.exe)?$")
_FILE_TOKEN_RE = re.compile(r"\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|o|obj|ptx|cubin|fatbin|so|a)$")
# A group of flags (one list, one string) with more tokens is a Skip, not a gate with as many
# pieces of evidence: real builds pass a few dozen (FlashInfer's longest list has 40).
MAX_FLAG_TOKENS = 10_000


@dataclass
class FlagScan:
    """The arch flags found in one group of strings (a list of flags, or one flag string)."""

    codes: list[tuple[str, str, int]] = field(default_factory=list)  # (code name, flag text, line)
    computed: bool = False  # some flag's arch is computed at run time
    gencode: bool = False


def _tokens_of(node: ast.AST) -> list[str] | None:
    """The whitespace-separated tokens of a string or f-string (formatted parts as `_FORMATTED`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else _FORMATTED
            for v in node.values
        )
    else:
        return None
    return [token.strip("'\"") for token in text.split()]


def _is_gencode_value(token: str) -> bool:
    return token.startswith("arch=") and "code=" in token


def _flag_tokens(tokens: list[str], awaiting_value: bool) -> tuple[bool, bool]:
    """Whether a string holds command-line flags only, and whether its last flag awaits a value.

    Prose that mentions a flag ("compile with -arch=sm_90a") has words that are neither flags,
    nor a flag's value, nor the compiler or a file, and is no flag string.
    """
    for index, token in enumerate(tokens):
        if token.startswith("-") and len(token) > 1:
            awaiting_value = "=" not in token
            continue
        if not (
            awaiting_value
            or token.strip(_FORMATTED) == ""
            or _is_gencode_value(token)
            or (index == 0 and _COMPILER_TOKEN_RE.search(token))
            or _FILE_TOKEN_RE.search(token)
        ):
            return False, False
        awaiting_value = False
    return True, awaiting_value


def _scan_flags(elements: Sequence[tuple[list[str], int] | None]) -> FlagScan:
    """Find the arch flags in a group of strings, given as (tokens, line); None stands for an expression.

    Strings that are prose rather than flags are ignored. A flag whose value is the next item
    (``["-gencode", "arch=…"]``) takes it from there; one followed by an expression
    (``["-arch", arch]``) is computed at run time, as is one with a formatted arch.
    """
    stream: list[tuple[str, int] | None] = []
    awaiting_value = False
    for element in elements:
        if element is not None:
            tokens, line = element
            is_flags, awaiting_value = _flag_tokens(tokens, awaiting_value)
            if is_flags:
                stream.extend((token, line) for token in tokens)
                continue
        stream.append(None)
        awaiting_value = False

    scan = FlagScan()
    arch_values: list[tuple[str, str, int, bool]] = []  # (arch, flag text, line, exact target)
    code_values: list[tuple[str, str, int]] = []
    explicit_codes = False
    index = 0
    while index < len(stream):
        item = stream[index]
        index += 1
        if item is None:
            continue
        token, line = item
        name, equals, value = token.partition("=")
        if name not in _TARGET_FLAGS:
            if not _is_gencode_value(token):
                continue
            name, equals, value = "-gencode", "=", token
        flag_text = token
        if not equals:
            following = stream[index] if index < len(stream) else None
            if following is None:
                scan.computed = scan.computed or index < len(stream)
                continue
            if following[0].startswith("-"):
                continue  # a flag without its value (a list of flag names, say)
            value, flag_text = following[0], f"{token} {following[0]}"
            index += 1
        if _FORMATTED in value:
            scan.computed = True
        elif name in _GENCODE_FLAGS:
            scan.gencode = True
            parts = dict(_GENCODE_PART_RE.findall(value))
            codes = parts.get("code") or parts.get("arch") or ""
            code_values.extend((code, flag_text, line) for code in codes.strip("[]").split(",") if code)
        elif name in _CODE_FLAGS:
            explicit_codes = True
            code_values.extend((code, flag_text, line) for code in value.split(",") if code)
        else:
            exact = name in _EXACT_ARCH_FLAGS
            arch_values.extend((arch, flag_text, line, exact) for arch in value.split(",") if arch)

    for arch, flag_text, line, exact in arch_values:
        if arch in _GENERIC_ARCH_VALUES or explicit_codes:
            continue  # with -code given, -arch only names the virtual arch the codes come from
        scan.codes.append((arch, flag_text, line))
        if not exact and arch.startswith("sm_"):
            scan.codes.append(("compute_" + arch[len("sm_") :], flag_text, line))
    scan.codes.extend(code_values)
    return scan


class FlagGroups(GateDrafts):
    """Finds the groups of arch flags in a file and drafts a gate for each that picks targets."""

    def __init__(self, package: str, version: str | None, path: str, text: str, tree: ast.Module) -> None:
        super().__init__(package, version, path, text, tree)
        # Where computed arch flags go, as (function, variable). A literal flag added to the same list
        # (FlashInfer's own get_nvcc_flags_list maps one target to another) picks no targets of its own.
        self.computed_flag_sinks: set[tuple[ast.AST | None, str]] = set()

    def _is_lone_string(self, node: ast.AST) -> bool:
        """A string that is a group of its own: not a list item, not part of an f-string, not a docstring."""
        if isinstance(node, ast.Constant) and not isinstance(node.value, str):
            return False
        parent = self.parents.get(node)
        # In a comparison a flag is looked for, not passed ("-gencode" in flags).
        return not isinstance(
            parent, (ast.List, ast.Tuple, ast.Set, ast.JoinedStr, ast.FormattedValue, ast.Expr, ast.Compare)
        )

    def _string_flag_group(self, node: ast.Constant | ast.JoinedStr) -> FlagScan | None:
        """The arch flags of a lone flag string (see `_is_lone_string`), if it holds any."""
        tokens = _tokens_of(node)
        if not tokens or self._too_many_flags(node, len(tokens)):
            return None
        group = _scan_flags([(tokens, node.lineno)])
        return group if group.codes or group.computed else None

    def _too_many_flags(self, node: ast.AST, count: int) -> bool:
        """A flag group past MAX_FLAG_TOKENS is recorded as a Skip (True) and not read."""
        if count <= MAX_FLAG_TOKENS:
            return False
        line = getattr(node, "lineno", 0)
        self.skips.append(
            Skip(
                f"{self.path}:{line}",
                f"{count:,} flags at line {line}, more than {MAX_FLAG_TOKENS:,}: not read",
                self.package,
            )
        )
        return True

    def _flag_group(self, node: ast.List | ast.Tuple | ast.Set) -> FlagScan | None:
        elements: list[tuple[list[str], int] | None] = []
        any_string = False
        count = 0
        for element in node.elts:
            tokens = _tokens_of(element)
            if tokens is None:
                elements.append(None)
            else:
                any_string = True
                count += len(tokens)
                elements.append((tokens, element.lineno))
        if not any_string or self._too_many_flags(node, count):
            return None
        scan = _scan_flags(elements)
        return scan if scan.codes or scan.computed else None

    def _flag_sink(self, node: ast.AST) -> tuple[ast.AST | None, str] | None:
        """The list variable a flag group is added to (``flags.append(…)``, ``flags = […]``), if any."""
        current = node
        for parent in self._ancestors(node, None):
            if isinstance(parent, ast.Call):
                func = parent.func
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr in ("append", "extend", "insert")
                    and isinstance(func.value, ast.Name)
                    and current is not func
                ):
                    return self._function(node), func.value.id
                return None
            if isinstance(parent, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                return (self._function(node), names[0]) if names else None
            if isinstance(parent, ast.stmt):
                return None
            current = parent
        return None

    def _flag_gates(self, groups: list[tuple[ast.AST, FlagScan]]) -> None:
        for node, scan in groups:
            sink = self._flag_sink(node) if scan.computed else None
            if sink is not None:
                self.computed_flag_sinks.add(sink)
        for node, scan in groups:
            if scan.computed or not scan.codes:
                continue  # the targets are computed at run time: a generic flag builder, not a gate
            if self._flag_sink(node) in self.computed_flag_sinks:
                continue
            admitted = ArchSet.none()
            evidence: list[Evidence] = []
            unknown_codes: list[str] = []
            for code, flag_text, line in scan.codes:
                targets = code_targets(code)
                if targets is None:
                    unknown_codes.append(code)
                    continue
                admitted |= targets[0]
                evidence.append(Evidence(f"{flag_text}: {code} is {targets[1]}", self.path, line))
            if not admitted:
                continue  # only archs liftgate does not know (or not arch names at all)
            if unknown_codes:
                evidence.append(
                    Evidence(
                        f"also builds {join_names(sorted(set(unknown_codes)))}, which liftgate does not know",
                        self.path,
                        node_span(node).start,
                    )
                )
            evidence.extend(self._build_links(node))
            self.drafts.append(
                Draft(
                    node=node,
                    span=node_span(node),
                    directive="gencode" if scan.gencode else "arch-flag",
                    admitted=admitted,
                    evidence=evidence,
                )
            )
