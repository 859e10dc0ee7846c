"""Py-build gates: Python code that decides which GPU architectures a JIT or AOT build targets.

The detect stage runs this on Python files that `PY_BUILD_PREFILTER` lets through. It reads the
file's syntax tree (it never imports or runs the code) and reports, as `Gate`s of kind
``py-build``, the constructs that choose or refuse build targets:

- ``get_nvcc_flags_list``: FlashInfer's ``ctx.get_nvcc_flags_list(supported_major_versions=[9, 10])``
  keeps only the configured targets of those majors and raises when none remain;
- ``gencode`` / ``arch-flag``: literal nvcc flags such as ``-gencode=arch=compute_90a,code=sm_90a``
  or ``-arch=sm_100a``; the flags of one list (or one string) are one gate;
- ``TORCH_CUDA_ARCH_LIST`` (and ``FLASHINFER_CUDA_ARCH_LIST``): a literal value or default of the
  variable that picks a build's targets;
- ``arch-list``: literal arch lists handed to build helpers (``supported_archs=[90, 100]``) or kept in
  constants named like arch lists (``SUPPORTED_ARCHS = ["sm_90a", "sm_100a"]``);
- ``env-switch``: environment switches that build arch-specific kernels (``ENABLE_SM120``).

``admitted`` holds compilation targets, as for the CUDA detector: SASS for ``sm_90a`` admits
``sm_90a`` and neither ``sm_90`` nor ``sm_120``. What each spelling admits is documented at
`_code_targets`. Anything unusual in a file is a `Skip`, never an exception.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from liftgate.arch.core import Arch, ArchSet, arch_data, universe
from liftgate.arch.parse import SpellingKind, UnknownArchError, parse_arch_list_entries, resolve_arch
from liftgate.detect.interface import Detection
from liftgate.detect.runtime_arch import archs_for_capabilities, archs_for_majors
from liftgate.model import Confidence, ElseKind, Evidence, Gate, GateKind, Location, Skip, Span, gate_id

__all__ = ["PY_BUILD_PREFILTER", "detect_py_build"]

# Arch-list names: the last words of a variable or keyword (``supported_archs``, ``SM_ARCHS``,
# ``compute_capabilities``), in lower or upper case. Kept narrow on purpose: ``architectures``
# lists model classes in inference stacks and ``sms`` counts multiprocessors.
_ARCH_LIST_WORDS = (
    "archs",
    "arches",
    "arch_list",
    "arch_names",
    "ccs",
    "capabilities",
    "sm_versions",
    "sm_list",
    "sm_archs",
)
_ARCH_LIST_SPELLINGS = [spelling for word in _ARCH_LIST_WORDS for spelling in (word, word.upper())]
_ARCH_LIST_NAME = re.compile(rf"(?:^|_)(?:{'|'.join(_ARCH_LIST_SPELLINGS)})$")
# Variables holding a TORCH_CUDA_ARCH_LIST-style string ("6.0;6.1;7.0"), as DeepSpeed's op builder does.
_ARCH_STRING_NAME = re.compile(r"(?i)(?:^|_)(?:compute_caps?|compute_capabilities|cuda_arch_list)$")

# Every construct this detector reports contains a match of this pattern (an env switch read through
# a constant contains the constant's name, and the constant's definition a match). Each alternative
# starts with a literal character, which keeps Python's regex engine on its fast path.
_HINT_PATTERN = "|".join(
    [
        "get_nvcc_flags_list",
        "-arch",  # also --gpu-architecture, --gpu-arch, --offload-arch
        "-gencode",
        "-code",  # also --generate-code, --gpu-code
        "CUDA_ARCH_LIST",
        "compute_caps",  # DeepSpeed's default list, built up with `compute_caps += ";8.0"`
        "COMPUTE_CAPABILITIES",
        *(rf"{word}_?SM_?[0-9]{{2}}" for word in ("ENABLE", "DISABLE", "BUILD", "USE", "WITH")),
        r"SM_?[0-9]{2,3}[AF]?_?(?:ENABLE|DISABLE|BUILD|KERNEL)",
        # an arch-list name assigned or passed as a keyword (not compared: ==)
        *(rf"{spelling}\s*(?::[^=\n]*)?=(?!=)" for spelling in _ARCH_LIST_SPELLINGS),
    ]
)
# A file that does not match cannot hold a py-build gate.
PY_BUILD_PREFILTER: re.Pattern[bytes] = re.compile(_HINT_PATTERN.encode())
# The same, on text: the detector walks only the parts of a syntax tree whose lines match.
_HINT_RE = re.compile(_HINT_PATTERN)

# Environment variables whose value is an arch list in TORCH_CUDA_ARCH_LIST syntax.
_ARCH_LIST_ENV_VARS = frozenset({"TORCH_CUDA_ARCH_LIST", "FLASHINFER_CUDA_ARCH_LIST"})

# Environment switches that build (or skip) kernels for one arch: ENABLE_SM120, FLASHINFER_ENABLE_SM90,
# SM100_KERNELS. The number may carry an 'a'/'f' suffix (ENABLE_SM90A).
_ENV_SWITCH_PATTERNS = (
    re.compile(r"(?<![A-Z0-9])(?:ENABLE|DISABLE|BUILD|USE|WITH)_?SM_?([0-9]{2,3})([AF]?)(?![A-Z0-9])"),
    re.compile(r"(?<![A-Z0-9])SM_?([0-9]{2,3})([AF]?)_?(?:ENABLED?|DISABLED?|BUILD|KERNELS?)(?![A-Z0-9])"),
)

# Line breaks as the parser counts them (not str.splitlines(), which also breaks at \f and \x1c).
_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")

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

_CODE_RE = re.compile(r"^(sm|compute|lto)_([0-9]{2,3})([af]?)$", re.ASCII)
_GENCODE_PART_RE = re.compile(r"(arch|code)=(\[[^\]]*\]|[^,\s]+)")
# Tokens that may stand in a flag string besides flags: the compiler and the files it compiles.
_COMPILER_TOKEN_RE = re.compile(r"(?:^|/)nvcc(?:\.exe)?$")
_FILE_TOKEN_RE = re.compile(r"\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|o|obj|ptx|cubin|fatbin|so|a)$")

# Spellings an arch-list item may use; product names ("h100") are not arch lists.
_ARCH_ITEM_KINDS = frozenset(
    {SpellingKind.SM, SpellingKind.NUMBER, SpellingKind.CAPABILITY, SpellingKind.CUDA_ARCH}
)
_ARCH_SHAPED_RE = re.compile(r"^(?:(?:sm|compute)_)?[0-9]{2,3}[af]?$|^[0-9]{1,2}\.[0-9][af]?$", re.I)

# Calls that build a JIT module or an extension: the gate's evidence names the one it guards.
_BUILD_CALLEES = {
    "gen_jit_spec": "JIT module",
    "JitSpec": "JIT module",
    "load_cuda_ops": "JIT module",
    "load_extension_with_recovery": "JIT extension",  # SGLang's wrapper of cpp_extension.load
    "CUDAExtension": "extension",
    "CppExtension": "extension",
}
_TORCH_LOADERS = frozenset({"load", "load_inline"})
_MAX_LISTED_SOURCES = 6
# A group of flags (one list, one string) with more tokens is a Skip, not a gate with as many
# pieces of evidence: real builds pass a few dozen (FlashInfer's longest list has 40).
MAX_FLAG_TOKENS = 10_000
# Calls that look at a flag list rather than build with it.
_INSPECTING_CALLEES = frozenset(
    {"len", "print", "list", "tuple", "set", "sorted", "any", "all", "str", "repr"}
)

# Calls that copy a collection without changing which items it holds.
_COLLECTION_CALLS = frozenset({"list", "tuple", "set", "frozenset", "sorted"})
_FUNCTION_NODES = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_NOT_LITERAL = object()


def detect_py_build(
    package: str, version: str | None, path: str, text: str, tree: ast.Module | None = None
) -> Detection:
    """The py-build gates of one Python file (``tree`` is its parsed module, if the caller has it)."""
    if tree is None:
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError as exc:
            reason = (
                f"Python syntax error at line {exc.lineno}: {exc.msg}; py-build gates in it were not analysed"
            )
            return Detection(skips=(Skip(path, reason, package),))
        except (ValueError, RecursionError, MemoryError) as exc:
            reason = f"Python file cannot be parsed ({exc}); py-build gates in it were not analysed"
            return Detection(skips=(Skip(path, reason, package),))
    try:
        return _FileScan(package, version, path, text, tree).run()
    except Exception as exc:  # one odd file must cost that file, never the scan
        reason = f"py-build analysis failed ({type(exc).__name__}: {exc}); please report this file"
        return Detection(skips=(Skip(path, reason, package),))


# --- What a spelling admits -------------------------------------------------------------------


@cache
def _baseline_from(cc: tuple[int, int]) -> ArchSet:
    return ArchSet(a for a in universe() if not a.variant and a.cc >= cc)


@cache
def _family_from(arch: Arch) -> ArchSet:
    """The 'f' targets that family-specific code for ``arch`` runs on: its family members of equal or later capability."""
    data = arch_data()
    capability = data.capability(arch.cc)
    members = set(data.families.get(capability.family, ())) if capability and capability.family else set()
    members.add(arch.cc)
    return ArchSet(a for a in universe() if a.variant == "f" and a.cc in members and a.cc >= arch.cc)


def _code_targets(code: str) -> tuple[ArchSet, str] | None:
    """The compilation targets one nvcc code name (``sm_90a``, ``compute_90``) serves, and how, in words.

    - ``sm_XX``, ``sm_XXa``, ``lto_XX…``: SASS for exactly that target;
    - ``sm_XXf`` / ``compute_XXf``: family code, which runs on every member of the family at or above
      XX (``sm_100f`` serves ``sm_100f`` and ``sm_103f``), so the 'f' targets of those members;
    - ``compute_XX``: PTX, which the driver JIT-compiles for every later capability, so every
      baseline target from XX on;
    - ``compute_XXa``: arch-specific PTX, which runs on that capability only, so ``sm_XXa``.

    None when the name is not a code name or names an arch liftgate does not know.
    """
    match = _CODE_RE.match(code)
    if match is None:
        return None
    kind, number, variant = match.groups()
    try:
        arch = resolve_arch(f"sm_{number}{variant}").arch
    except UnknownArchError:
        return None
    if arch.variant == "f":
        targets = _family_from(arch)
        return targets, f"family code for {', '.join(targets.names())}"
    if kind == "compute" and not arch.variant:
        return _baseline_from(arch.cc), f"PTX, JIT-compiled for {arch.name} and every later baseline target"
    what = "SASS" if kind == "sm" else ("PTX" if kind == "compute" else "LTO IR")
    return ArchSet([arch]), f"{what} for {arch.name} only"


def _list_item_targets(item: object) -> ArchSet | str | None:
    """One arch-list item as targets; the spelling (a str) when it looks like an arch liftgate does not know.

    Integers and ``(major, minor)`` tuples are capabilities (every variant); strings are exact
    targets (``sm_90a``, ``9.0``, ``100f``). None when the item is not an arch at all.
    """
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        try:
            resolution = resolve_arch(str(item))
        except UnknownArchError:
            return None
        if resolution.kind not in (SpellingKind.NUMBER, SpellingKind.CUDA_ARCH):
            return None
        return archs_for_capabilities([resolution.arch.cc])
    if isinstance(item, tuple) and len(item) == 2 and all(type(x) is int for x in item):
        targets = archs_for_capabilities([(item[0], item[1])])
        return targets or None
    if isinstance(item, str):
        spelling = item.strip()
        ptx = spelling.lower().endswith("+ptx")
        if ptx:
            spelling = spelling[: -len("+ptx")]
        try:
            resolution = resolve_arch(spelling)
        except UnknownArchError:
            return spelling if _ARCH_SHAPED_RE.match(spelling) else None
        if resolution.kind not in _ARCH_ITEM_KINDS:
            return None
        arch = resolution.arch
        targets = ArchSet([arch])
        if ptx:
            ptx_targets = _code_targets(f"compute_{arch.number}{arch.variant}")
            targets |= ptx_targets[0] if ptx_targets else ArchSet.none()
        return targets
    return None


def _arch_list_targets(value: object) -> tuple[ArchSet, list[str]] | None:
    """A literal arch list (a list, tuple, set, dict keys or a ``"9.0;10.0a"`` string) as targets.

    Every item must be an arch; items that only look like one (``sm_107a``) are returned apart
    so the gate can say it left them out. None when the value is not an arch list.
    """
    if isinstance(value, str):
        items: Iterable[object] = [i for i in re.split(r"[;,\s]+", value) if i]
    elif isinstance(value, (list, tuple, set, frozenset, dict)):
        items = list(value)
    else:
        return None
    admitted = ArchSet.none()
    unknown_spellings: list[str] = []
    count = 0
    for item in items:
        count += 1
        targets = _list_item_targets(item)
        if targets is None:
            return None
        if isinstance(targets, str):
            unknown_spellings.append(targets)
        else:
            admitted |= targets
    if not count or not admitted:
        return None
    return admitted, sorted(set(unknown_spellings))


def _env_list_targets(text: str) -> tuple[ArchSet, list[str], list[str]] | None:
    """A TORCH_CUDA_ARCH_LIST value as targets, how each item was read, and the items left out.

    Torch builds SASS for each item (``8.0`` -> ``sm_80``, ``9.0a`` -> ``sm_90a``) and, for
    ``+PTX``, PTX as well, which later targets JIT-compile. Old items liftgate does not know
    (``6.0``) still carry their PTX forward.
    """
    normalized = re.sub(r"\s*\+\s*ptx\b", "+PTX", text, flags=re.IGNORECASE)
    admitted = ArchSet.none()
    readings: list[str] = []
    left_out: list[str] = []
    for item in (i for i in re.split(r"[;,\s]+", normalized) if i):
        try:
            entries = parse_arch_list_entries(item)
        except UnknownArchError:
            old = re.fullmatch(r"([0-9]{1,2})\.([0-9])\+PTX", item, re.IGNORECASE)
            if old:
                targets = _baseline_from((int(old.group(1)), int(old.group(2))))
                admitted |= targets
                readings.append(f"{item}: PTX for every baseline target")
            else:
                left_out.append(item)
            continue
        for entry in entries:
            code = f"sm_{entry.arch.number}{entry.arch.variant}"
            sass = _code_targets(code)
            if sass is not None:
                admitted |= sass[0]
            reading = f"{entry.spelling}: {code}"
            if entry.ptx:
                ptx = _code_targets(f"compute_{entry.arch.number}{entry.arch.variant}")
                if ptx is not None:
                    admitted |= ptx[0]
                    reading += f" + {ptx[1]}"
            readings.append(reading)
    if not admitted:
        return None
    return admitted, readings, left_out


# --- Flags in strings --------------------------------------------------------------------------


@dataclass
class _FlagScan:
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


def _scan_flags(elements: Sequence[tuple[list[str], int] | None]) -> _FlagScan:
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

    scan = _FlagScan()
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


# --- Small AST helpers ---------------------------------------------------------------------------


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _callee(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_environ(node: ast.expr) -> bool:
    dotted = _dotted(node)
    return dotted is not None and (dotted == "environ" or dotted.endswith(".environ"))


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _string_value(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _keyword(call: ast.Call, name: str) -> ast.keyword | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword
    return None


def _argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    keyword = _keyword(call, name)
    if keyword is not None:
        return keyword.value
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return None


def _span(node: ast.AST) -> Span:
    start = getattr(node, "lineno", 1)
    end = getattr(node, "end_lineno", None) or start
    return Span(start, end)


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _glob(node: ast.JoinedStr) -> str:
    """An f-string with its formatted parts as ``*``: ``f"{d}/x_{n}.cu"`` -> ``*/x_*.cu``."""
    return "".join(
        v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "*" for v in node.values
    )


def _join_names(names: Sequence[str]) -> str:
    return ", ".join(names)


def _covers(node: ast.AST, lines: list[int]) -> bool:
    """Whether a node spans one of the (sorted) lines; nodes without a position always do."""
    start = getattr(node, "lineno", None)
    if start is None:
        return True
    end = getattr(node, "end_lineno", None) or start
    # A decorated definition starts at its ``def`` line; its decorators sit above it.
    start = min([start, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    index = bisect.bisect_left(lines, start)
    return index < len(lines) and lines[index] <= end


def _names_env_variable(value: str | None) -> bool:
    return value is not None and (
        value in _ARCH_LIST_ENV_VARS or any(p.search(value) for p in _ENV_SWITCH_PATTERNS)
    )


# --- The scan of one file ------------------------------------------------------------------------


@dataclass
class _Draft:
    """A gate before its id: what it is, where, and what it admits."""

    node: ast.AST
    span: Span
    directive: str
    admitted: ArchSet
    else_kind: ElseKind = ElseKind.NONE
    confidence: Confidence = Confidence.EXACT
    evidence: list[Evidence] = field(default_factory=list)
    depends_on: tuple[str, ...] = ()
    unknown: ArchSet = field(default_factory=ArchSet.none)
    then_span: Span | None = None
    else_span: Span | None = None
    condition: str | None = None  # when the construct is not one node (a dict entry)
    normalized: str | None = None


class _FileScan:
    """The py-build analysis of one parsed file: walk the parts of the tree that hold a hint, draft gates."""

    def __init__(self, package: str, version: str | None, path: str, text: str, tree: ast.Module) -> None:
        self.package = package
        self.version = version
        self.path = path
        self.text = text
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        self.drafts: list[_Draft] = []
        self.skips: list[Skip] = []
        self._source_lines: list[str] | None = None
        self._encoded_lines: dict[int, bytes] = {}
        self._locals_cache: dict[ast.AST, dict[str, list[ast.expr | None]]] = {}
        self._class_cache: dict[ast.AST, dict[str, list[ast.expr | None]]] = {}
        self.module_names = self._assignments_in(tree.body)
        self.torch_loader_names: set[str] = set()
        # Where computed arch flags go, as (function, variable). A literal flag added to the same list
        # (FlashInfer's own get_nvcc_flags_list maps one target to another) picks no targets of its own.
        self.computed_flag_sinks: set[tuple[ast.AST | None, str]] = set()
        self._indexed: set[ast.AST] = set()
        self._visiting: ast.AST | None = None

    # -- driver

    def run(self) -> Detection:
        hint_lines = self._hint_lines()
        if not hint_lines:
            return Detection()
        if "cpp_extension" in self.text:
            for node in ast.walk(self.tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"):
                    self.torch_loader_names.update(
                        alias.asname or alias.name for alias in node.names if alias.name in _TORCH_LOADERS
                    )
        flag_groups: list[tuple[ast.AST, _FlagScan]] = []
        # Generated kernels run to 10,000 lines: walk only the subtrees whose lines hold a hint.
        pending: list[ast.AST] = [self.tree]
        while pending:
            node = pending.pop()
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
                if _covers(child, hint_lines):
                    pending.append(child)
            self._visiting = node
            self._visit(node, flag_groups)
        self._flag_gates(flag_groups)
        return Detection(gates=self._gates(), skips=tuple(self.skips))

    def _hint_lines(self) -> list[int]:
        """The lines that match `_HINT_RE` or name a module constant holding an env-switch or arch-list variable."""
        patterns = [_HINT_RE]
        key_names = [
            name
            for name, values in self.module_names.items()
            if len(values) == 1 and _names_env_variable(_string_value(values[0]))
        ]
        if key_names:
            patterns.append(re.compile(rf"\b(?:{'|'.join(map(re.escape, key_names))})\b"))
        breaks = [m.end() for m in _LINE_BREAK_RE.finditer(self.text)]
        lines = {bisect.bisect_right(breaks, m.start()) + 1 for p in patterns for m in p.finditer(self.text)}
        return sorted(lines)

    def _index(self, root: ast.AST) -> None:
        """Record the parents of a whole subtree (the walk in `run` records only the parts it visits)."""
        if root in self._indexed:
            return
        self._indexed.add(root)
        for node in ast.walk(root):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node

    def _visit(self, node: ast.AST, flag_groups: list[tuple[ast.AST, _FlagScan]]) -> None:
        if isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Assign):
            self._assign(node)
        elif isinstance(node, ast.AnnAssign):
            self._annotated_assign(node)
        elif isinstance(node, ast.AugAssign):
            self._augmented_assign(node)
        elif isinstance(node, ast.Dict):
            self._dict(node)
        elif isinstance(node, ast.Subscript):
            self._environ_subscript(node)
        elif isinstance(node, ast.Compare):
            self._environ_membership(node)
        elif isinstance(node, ast.Attribute):
            self._env_attribute(node)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            group = self._flag_group(node)
            if group is not None:
                flag_groups.append((node, group))
        elif isinstance(node, (ast.Constant, ast.JoinedStr)) and self._is_lone_string(node):
            tokens = _tokens_of(node)
            if tokens and not self._too_many_flags(node, len(tokens)):
                group = _scan_flags([(tokens, node.lineno)])
                if group.codes or group.computed:
                    flag_groups.append((node, group))

    def _gates(self) -> tuple[Gate, ...]:
        occurrences: dict[tuple[str, tuple[str, ...]], int] = {}
        gates: list[Gate] = []
        for draft in sorted(self.drafts, key=lambda d: (d.span.start, _position(d.node))):
            scope = self._scope(draft.node)
            normalized = draft.normalized or ast.unparse(draft.node)
            key = (normalized, scope)
            occurrence = occurrences.get(key, 0)
            occurrences[key] = occurrence + 1
            gates.append(
                Gate(
                    id=gate_id(GateKind.PY_BUILD, self.package, self.path, normalized, scope, occurrence),
                    kind=GateKind.PY_BUILD,
                    location=Location(self.package, self.version, self.path, draft.span),
                    condition=draft.condition or self._source(draft.node),
                    admitted=draft.admitted,
                    unknown=draft.unknown,
                    host=None,
                    then_span=draft.then_span,
                    else_span=draft.else_span,
                    else_kind=draft.else_kind,
                    confidence=draft.confidence,
                    evidence=tuple(dict.fromkeys(draft.evidence)),
                    depends_on=draft.depends_on,
                    directive=draft.directive,
                )
            )
        return tuple(gates)

    # -- source text and structure

    def _source(self, node: ast.AST) -> str:
        start, end = _span(node).start, _span(node).end
        col = getattr(node, "col_offset", None)
        end_col = getattr(node, "end_col_offset", None)
        if col is None or end_col is None:
            return ast.unparse(node)
        return self._segment(start, col, end, end_col) or ast.unparse(node)

    def _segment(self, start: int, col: int, end: int, end_col: int) -> str | None:
        """Source text between two AST positions (columns are UTF-8 byte offsets), whitespace collapsed."""
        lines = self._lines()
        if not (1 <= start <= end <= len(lines)):
            return None
        if start == end:
            text = self._line_bytes(start)[col:end_col].decode("utf-8", "replace")
        else:
            first = self._line_bytes(start)[col:].decode("utf-8", "replace")
            middle = "".join(lines[start : end - 1])
            last = self._line_bytes(end)[:end_col].decode("utf-8", "replace")
            text = first + middle + last
            if "#" in text:
                text = _COMMENT_RE.sub(lambda m: m.group("string") or "", text)
        return _tidy(text)

    def _lines(self) -> list[str]:
        if self._source_lines is None:
            self._source_lines = _LINE_RE.findall(self.text)
        return self._source_lines

    def _line_bytes(self, line: int) -> bytes:
        cached = self._encoded_lines.get(line)
        if cached is None:
            cached = self._lines()[line - 1].encode("utf-8", "surrogatepass")
            self._encoded_lines[line] = cached
        return cached

    def _scope(self, node: ast.AST) -> tuple[str, ...]:
        names: list[str] = []
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, _SCOPE_NODES):
                names.append(current.name)
            current = self.parents.get(current)
        return tuple(reversed(names))

    def _enclosing(self, node: ast.AST, kinds: tuple[type[ast.AST], ...]) -> ast.AST | None:
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, _SCOPE_NODES):
                return current if isinstance(current, kinds) else None
            current = self.parents.get(current)
        return None

    def _function(self, node: ast.AST) -> ast.AST | None:
        return self._enclosing(node, _FUNCTION_NODES)

    def _ancestors(self, node: ast.AST, stop: ast.AST | None) -> Iterator[ast.AST]:
        current = self.parents.get(node)
        while current is not None and current is not stop:
            yield current
            current = self.parents.get(current)

    def _statement(self, node: ast.AST) -> ast.stmt | None:
        current: ast.AST | None = node
        while current is not None and not isinstance(current, ast.stmt):
            current = self.parents.get(current)
        return current

    def _is_lone_string(self, node: ast.AST) -> bool:
        """A string that is a group of its own: not a list item, not part of an f-string, not a docstring."""
        if isinstance(node, ast.Constant) and not isinstance(node.value, str):
            return False
        parent = self.parents.get(node)
        # In a comparison a flag is looked for, not passed ("-gencode" in flags).
        return not isinstance(
            parent, (ast.List, ast.Tuple, ast.Set, ast.JoinedStr, ast.FormattedValue, ast.Expr, ast.Compare)
        )

    # -- names and their values

    @staticmethod
    def _assignments_in(body: Iterable[ast.stmt]) -> dict[str, list[ast.expr | None]]:
        """Names bound directly in a block (None where the value is not one expression)."""
        found: dict[str, list[ast.expr | None]] = {}
        for statement in body:
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, []).append(statement.value)
                    else:
                        for name in ast.walk(target):
                            if isinstance(name, ast.Name):
                                found.setdefault(name.id, []).append(None)
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                if statement.value is not None:
                    found.setdefault(statement.target.id, []).append(statement.value)
            elif isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
                found.setdefault(statement.target.id, []).append(None)
            elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.setdefault(statement.name, []).append(None)
            elif isinstance(statement, (ast.Import, ast.ImportFrom)):
                for alias in statement.names:
                    found.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
        return found

    def _locals(self, function: ast.AST) -> dict[str, list[ast.expr | None]]:
        """Names bound anywhere in a function body, outside nested functions and classes."""
        cached = self._locals_cache.get(function)
        if cached is not None:
            return cached
        assert isinstance(function, _FUNCTION_NODES)
        found: dict[str, list[ast.expr | None]] = {}
        arguments = function.args
        for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            found.setdefault(argument.arg, []).append(None)
        for extra in (arguments.vararg, arguments.kwarg):
            if extra is not None:
                found.setdefault(extra.arg, []).append(None)
        pending: list[ast.AST] = list(function.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (*_SCOPE_NODES, ast.Lambda)):
                if isinstance(node, _SCOPE_NODES):
                    found.setdefault(node.name, []).append(None)
                continue
            if isinstance(node, ast.stmt):
                for name, values in self._assignments_in([node]).items():
                    found.setdefault(name, []).extend(values)
            if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                for name in _names_in(node.target):
                    found.setdefault(name, []).append(None)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for name in _names_in(node.optional_vars):
                    found.setdefault(name, []).append(None)
            elif isinstance(node, ast.NamedExpr):
                found.setdefault(node.target.id, []).append(None)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                for name in node.names:
                    found.setdefault(name, []).append(None)
            pending.extend(ast.iter_child_nodes(node))
        self._locals_cache[function] = found
        return found

    def _class_names(self, cls: ast.AST) -> dict[str, list[ast.expr | None]]:
        cached = self._class_cache.get(cls)
        if cached is None:
            assert isinstance(cls, ast.ClassDef)
            cached = self._assignments_in(cls.body)
            self._class_cache[cls] = cached
        return cached

    def _resolve(self, node: ast.expr) -> tuple[ast.expr, str | None] | None:
        """The expression a name stands for, through simple assignments in this file, and its binding.

        The binding is "module", "class" or "local" (None when ``node`` is not a name). Returns None
        when the name is bound more than once, is a parameter, or is not bound in this file.
        """
        # A node below the one being visited has no recorded parents yet; it shares that node's scope.
        anchor = node if node in self.parents else (self._visiting or node)
        return self._resolve_in(node, self._function(anchor), self._enclosing_class(anchor), 0)

    def _resolve_in(
        self, node: ast.expr, function: ast.AST | None, cls: ast.ClassDef | None, depth: int
    ) -> tuple[ast.expr, str | None] | None:
        if depth > 4:
            return None
        if isinstance(node, ast.Name):
            scope = function
            while scope is not None:
                bound = self._locals(scope).get(node.id)
                if bound is not None:
                    return self._single(bound, "local", scope, depth)
                scope = self._function(scope)
            bound = self.module_names.get(node.id)
            return self._single(bound, "module", None, depth) if bound is not None else None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if cls is not None and node.value.id in ("self", "cls", cls.name):
                bound = self._class_names(cls).get(node.attr)
                return self._single(bound, "class", None, depth) if bound is not None else None
            return None
        return node, None

    def _single(
        self, bound: list[ast.expr | None], binding: str, function: ast.AST | None, depth: int
    ) -> tuple[ast.expr, str | None] | None:
        """The one value a name is bound to (a name bound twice, or by a loop or parameter, has none)."""
        if len(bound) != 1 or bound[0] is None:
            return None
        value = bound[0]
        if isinstance(value, (ast.Name, ast.Attribute)):
            # NAME = OTHER_NAME: what OTHER_NAME is, seen from where NAME is bound.
            return self._resolve_in(value, function, None, depth + 1)
        return value, binding

    def _enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, ast.ClassDef):
                return current
            current = self.parents.get(current)
        return None

    def _literal_of(self, node: ast.expr) -> tuple[Any, str | None]:
        """The literal value of an expression or of the name it is (and the name's binding)."""
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _COLLECTION_CALLS
            and len(node.args) == 1
            and not node.keywords
        ):
            node = node.args[0]  # list(SUPPORTED_MAJORS): the same items
        resolved = self._resolve(node)
        if resolved is None:
            return _NOT_LITERAL, None
        value, binding = resolved
        return _literal(value), binding

    def _env_key(self, node: ast.expr | None) -> str | None:
        if node is None:
            return None
        value, _ = self._literal_of(node)
        return value if isinstance(value, str) else None

    # -- get_nvcc_flags_list

    def _call(self, call: ast.Call) -> None:
        callee = _callee(call)
        if callee == "get_nvcc_flags_list":
            self._nvcc_flags_list(call)
        elif callee == "setdefault" and isinstance(call.func, ast.Attribute) and _is_environ(call.func.value):
            key = self._env_key(call.args[0] if call.args else None)
            if key in _ARCH_LIST_ENV_VARS and len(call.args) > 1:
                self._arch_list_env(call, key, call.args[1], "defaults to")
        else:
            self._env_read_call(call, callee)
        for keyword in call.keywords:
            if keyword.arg is not None and _ARCH_LIST_NAME.search(keyword.arg):
                self._arch_list_keyword(keyword)

    def _nvcc_flags_list(self, call: ast.Call) -> None:
        keyword = _keyword(call, "supported_major_versions")
        argument = keyword.value if keyword is not None else (call.args[0] if call.args else None)
        if argument is None or isinstance(argument, ast.Starred):
            return  # no restriction: every configured target is kept
        anchor: ast.keyword | ast.expr = keyword if keyword is not None else argument
        value, _ = self._literal_of(argument)
        if value is None or (isinstance(value, (list, tuple, set)) and not value):
            return  # None or empty keeps every configured target
        if not isinstance(value, (list, tuple, set)) or not all(type(v) is int for v in value):
            self.skips.append(
                Skip(
                    f"{self.path}:{anchor.lineno}",
                    f"cannot resolve the majors passed to get_nvcc_flags_list ({self._source(argument)});"
                    " the targets this build keeps are unknown",
                    self.package,
                )
            )
            return
        majors = sorted(set(value))
        evidence = [
            Evidence(
                f"get_nvcc_flags_list keeps only targets with major in {majors}; raises if none remain",
                self.path,
                call.lineno,
            )
        ]
        evidence.extend(self._build_links(call))
        self.drafts.append(
            _Draft(
                node=call,
                span=Span(anchor.lineno, _span(call).end),
                directive="get_nvcc_flags_list",
                admitted=archs_for_majors(majors),
                else_kind=ElseKind.ERROR,
                evidence=evidence,
            )
        )

    # -- which build a construct guards

    def _is_build_call(self, call: ast.Call) -> str | None:
        """What a call builds ("JIT module", "extension", …), or None when it builds nothing."""
        callee = _callee(call)
        if callee in _BUILD_CALLEES:
            return _BUILD_CALLEES[callee]
        if callee in _TORCH_LOADERS:
            dotted = _dotted(call.func) or ""
            if dotted.endswith(f"cpp_extension.{callee}") or dotted in self.torch_loader_names:
                return "JIT extension"
        return None

    def _build_links(self, node: ast.AST) -> list[Evidence]:
        """Evidence naming the JIT module or extension that a construct's flags are built into."""
        function = self._function(node)
        if function is not None:
            # Names in the build call may lie off the walked lines; module-level ones resolve without parents.
            self._index(function)
        for ancestor in self._ancestors(node, function):
            if isinstance(ancestor, ast.Call) and self._is_build_call(ancestor):
                return [self._describe_build(ancestor)]
        if function is None:
            return []
        names = self._flowing_names(node, function)
        if not names:
            return []
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
        builds = [c for c in calls if self._is_build_call(c) and names & self._argument_names(c)]
        if builds:
            return [self._describe_build(c) for c in builds]
        handed = [
            c
            for c in calls
            if _callee(c) not in _INSPECTING_CALLEES
            and names & self._argument_names(c)
            and not self._contains(c, node)
        ]
        return [
            Evidence(f"flags passed to {_dotted(c.func) or _callee(c) or 'a call'}()", self.path, c.lineno)
            for c in handed[:3]
        ]

    @staticmethod
    def _argument_names(call: ast.Call) -> set[str]:
        names: set[str] = set()
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            names |= _names_in(argument)
        return names

    def _contains(self, outer: ast.AST, inner: ast.AST) -> bool:
        return any(a is outer for a in self._ancestors(inner, None))

    def _flowing_names(self, node: ast.AST, function: ast.AST) -> set[str]:
        """The variables a construct's value is stored in, and simple aliases of them (``b = a``, ``b = a + x``)."""
        statement = self._statement(node)
        names: set[str] = set()
        if isinstance(statement, ast.Assign):
            names = {t.id for t in statement.targets if isinstance(t, ast.Name)}
        elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)) and isinstance(statement.target, ast.Name):
            names = {statement.target.id}
        if not names:
            return names
        assignments = [
            n
            for n in ast.walk(function)
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
        ]
        for _ in range(4):
            grown = set(names)
            for assignment in assignments:
                value = assignment.value
                operands = [value]
                while operands and isinstance(operands[-1], ast.BinOp):
                    last = operands.pop()
                    assert isinstance(last, ast.BinOp)
                    operands += [last.left, last.right]
                if any(isinstance(o, ast.Name) and o.id in names for o in operands):
                    target = assignment.targets[0]
                    assert isinstance(target, ast.Name)
                    grown.add(target.id)
            if grown == names:
                break
            names = grown
        return names

    def _describe_build(self, call: ast.Call) -> Evidence:
        what = self._is_build_call(call) or "build"
        name_node = _argument(call, 0, "name")
        name = self._module_name(name_node) if name_node is not None else None
        text = f"guards {what} {name}" if name else f"guards {what} built by {_callee(call)}()"
        if _callee(call) != "load_inline":
            sources_node = _argument(call, 1, "sources")
            if sources_node is not None:
                listing = self._source_listing(sources_node)
                if listing:
                    text += f" built from {listing}"
        return Evidence(text, self.path, call.lineno)

    def _module_name(self, node: ast.expr) -> str | None:
        resolved = self._resolve(node)
        value = resolved[0] if resolved is not None else node
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return f'"{value.value}"'
        if isinstance(value, ast.JoinedStr):
            return f'"{_glob(value)}"'
        return f"named by {self._source(node)}"

    def _source_listing(self, node: ast.expr) -> str:
        names: list[str] = []
        computed = self._collect_sources(node, names, depth=0)
        shown = names[:_MAX_LISTED_SOURCES]
        text = _join_names(shown)
        if len(names) > len(shown):
            text += f" and {len(names) - len(shown)} more"
        if computed:
            text = f"{text} and sources computed at run time" if text else "sources computed at run time"
        return text

    def _collect_sources(self, node: ast.expr, names: list[str], depth: int) -> bool:
        """Append the file names a sources expression lists; True when some are computed at run time.

        A local list variable counts with what the function appends, extends or adds to it.
        """
        if depth > 4:
            return True
        if isinstance(node, (ast.List, ast.Tuple)):
            computed = False
            for element in node.elts:
                name = self._source_name(element, 0)
                if name is None:
                    computed = True
                else:
                    names.append(name)
            return computed
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            computed = self._collect_sources(node.left, names, depth + 1)
            return self._collect_sources(node.right, names, depth + 1) or computed
        if not isinstance(node, ast.Name):
            return True
        function = self._function(node)
        bound = self._locals(function).get(node.id, []) if function is not None else []
        values = [v for v in bound if v is not None]
        if function is None or not values:
            resolved = self._resolve(node)
            if resolved is None or resolved[0] is node:
                return True
            return self._collect_sources(resolved[0], names, depth + 1)
        computed = False
        for value in values:
            computed |= self._collect_sources(value, names, depth + 1)
        for grown in ast.walk(function):
            if isinstance(grown, ast.AugAssign) and isinstance(grown.target, ast.Name):
                if grown.target.id == node.id:
                    computed |= self._collect_sources(grown.value, names, depth + 1)
                continue
            if not (isinstance(grown, ast.Call) and grown.args and isinstance(grown.func, ast.Attribute)):
                continue
            receiver = grown.func.value
            if not (isinstance(receiver, ast.Name) and receiver.id == node.id):
                continue
            if grown.func.attr == "append":
                name = self._source_name(grown.args[0], 0)
                if name is None:
                    computed = True
                else:
                    names.append(name)
            elif grown.func.attr == "extend":
                computed |= self._collect_sources(grown.args[0], names, depth + 1)
        return computed

    def _source_name(self, node: ast.expr, depth: int) -> str | None:
        """The file a sources item names: the last literal of ``DIR / "a" / "x.cu"``, an f-string as a glob."""
        if depth > 4:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.rsplit("/", 1)[-1] if node.value.startswith("/") else node.value
        if isinstance(node, ast.JoinedStr):
            return _glob(node).rsplit("/", 1)[-1]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._source_name(node.right, depth + 1)
        if isinstance(node, ast.Call) and node.args:
            callee = _callee(node)
            if callee in ("str", "Path", "PurePath", "PosixPath") and len(node.args) == 1:
                return self._source_name(node.args[0], depth + 1)
            if callee == "join":
                return self._source_name(node.args[-1], depth + 1)
        if isinstance(node, ast.Name):
            resolved = self._resolve(node)
            if resolved is not None and resolved[0] is not node:
                return self._source_name(resolved[0], depth + 1)
        return None

    # -- arch flags

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

    def _flag_group(self, node: ast.List | ast.Tuple | ast.Set) -> _FlagScan | None:
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

    def _flag_gates(self, groups: list[tuple[ast.AST, _FlagScan]]) -> None:
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
                targets = _code_targets(code)
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
                        f"also builds {_join_names(sorted(set(unknown_codes)))}, which liftgate does not know",
                        self.path,
                        _span(node).start,
                    )
                )
            evidence.extend(self._build_links(node))
            self.drafts.append(
                _Draft(
                    node=node,
                    span=_span(node),
                    directive="gencode" if scan.gencode else "arch-flag",
                    admitted=admitted,
                    evidence=evidence,
                )
            )

    # -- TORCH_CUDA_ARCH_LIST

    def _arch_list_env(
        self,
        construct: ast.AST,
        variable: str,
        value_node: ast.expr,
        how: str,
        *,
        span: Span | None = None,
        condition: str | None = None,
        normalized: str | None = None,
    ) -> None:
        """A literal TORCH_CUDA_ARCH_LIST value: ``how`` is "defaults to", "is set to" or "is passed as"."""
        value, _ = self._literal_of(value_node)
        if not isinstance(value, str) or not value.strip():
            return  # computed at run time, or empty (the build then targets the visible GPUs)
        parsed = _env_list_targets(value)
        if parsed is None:
            return
        admitted, readings, left_out = parsed
        span = span or _span(construct)
        evidence = [Evidence(f'{variable} {how} "{value}": {"; ".join(readings)}', self.path, span.start)]
        if left_out:
            evidence.append(
                Evidence(
                    f"{variable} items liftgate does not know: {_join_names(left_out)}", self.path, span.start
                )
            )
        default = how == "defaults to"
        self.drafts.append(
            _Draft(
                node=construct,
                span=span,
                directive=variable,
                admitted=admitted,
                evidence=evidence,
                depends_on=(f"{variable} (the default applies when it is unset)",) if default else (),
                condition=condition,
                normalized=normalized,
            )
        )

    def _assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Subscript):
                key = self._env_key(target.slice)
                if key in _ARCH_LIST_ENV_VARS:
                    self._arch_list_env(node, key, node.value, "is set to")
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if _ARCH_STRING_NAME.search(name) and isinstance(node.value, ast.Constant):
                self._arch_list_env(node, name, node.value, "is set to")
            else:
                self._arch_list_constant(node, name, node.value)

    def _augmented_assign(self, node: ast.AugAssign) -> None:
        """``compute_caps += ";8.0"``: each addition to an arch-list string is its own gate."""
        if (
            isinstance(node.op, ast.Add)
            and isinstance(node.target, ast.Name)
            and _ARCH_STRING_NAME.search(node.target.id)
            and isinstance(node.value, ast.Constant)
        ):
            self._arch_list_env(node, node.target.id, node.value, "adds")

    def _annotated_assign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and node.value is not None:
            self._arch_list_constant(node, node.target.id, node.value)

    def _dict(self, node: ast.Dict) -> None:
        """``{"TORCH_CUDA_ARCH_LIST": "9.0a"}``: an environment handed to a build (``subprocess.run(env=…)``)."""
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            if key_node is None or _string_value(key_node) not in _ARCH_LIST_ENV_VARS:
                continue
            variable = _string_value(key_node) or ""
            # The construct is the entry, which is no node of its own: its span, text and id are the pair's.
            end = _span(value_node).end
            self._arch_list_env(
                value_node,
                variable,
                value_node,
                "is passed as",
                span=Span(key_node.lineno, end),
                condition=self._segment(
                    key_node.lineno, key_node.col_offset, end, value_node.end_col_offset or 0
                ),
                normalized=f"{ast.unparse(key_node)}: {ast.unparse(value_node)}",
            )

    # -- arch lists

    def _arch_list_keyword(self, keyword: ast.keyword) -> None:
        value, binding = self._literal_of(keyword.value)
        if value is _NOT_LITERAL:
            return
        if binding in ("module", "class") and self._names_arch_list_constant(keyword.value):
            return  # the constant is reported where it is defined
        parsed = _arch_list_targets(value)
        if parsed is None:
            return
        admitted, unknown_spellings = parsed
        evidence = [self._arch_list_evidence(keyword.arg or "", value, keyword.lineno)]
        if unknown_spellings:
            evidence.append(self._unknown_items_evidence(unknown_spellings, keyword.lineno))
        evidence.extend(self._build_links(keyword))
        self.drafts.append(
            _Draft(
                node=keyword, span=_span(keyword), directive="arch-list", admitted=admitted, evidence=evidence
            )
        )

    def _names_arch_list_constant(self, node: ast.expr) -> bool:
        """Whether a name stands for a module or class constant that `_arch_list_constant` reports."""
        name = (
            node.id if isinstance(node, ast.Name) else (node.attr if isinstance(node, ast.Attribute) else "")
        )
        resolved = self._resolve(node)
        return (
            bool(_ARCH_LIST_NAME.search(name))
            and resolved is not None
            and isinstance(resolved[0], (ast.List, ast.Tuple, ast.Set, ast.Dict))
        )

    def _arch_list_constant(
        self, statement: ast.Assign | ast.AnnAssign, name: str, value_node: ast.expr
    ) -> None:
        """A constant named like an arch list and holding a literal one, at module or class level.

        In a function, such a list is a gate only when the function refuses anything outside it
        (``assert arch in supported_sm_versions``), since a local list may be anything else.
        """
        if not _ARCH_LIST_NAME.search(name) or not isinstance(
            value_node, (ast.List, ast.Tuple, ast.Set, ast.Dict)
        ):
            return
        parsed = _arch_list_targets(_literal(value_node))
        if parsed is None:
            return
        admitted, unknown_spellings = parsed
        parent = self.parents.get(statement)
        function = self._function(statement)
        in_class = isinstance(parent, ast.ClassDef)
        where: ast.AST = function or (parent if in_class and parent is not None else self.tree)
        refusal = self._refusal(name, where, class_attribute=in_class)
        if function is not None and refusal is None:
            return
        evidence = [self._arch_list_evidence(name, _literal(value_node), statement.lineno)]
        if unknown_spellings:
            evidence.append(self._unknown_items_evidence(unknown_spellings, statement.lineno))
        if refusal is not None:
            evidence.append(Evidence(f"anything outside {name} is refused", self.path, refusal))
        self.drafts.append(
            _Draft(
                node=statement,
                span=_span(statement),
                directive="arch-list",
                admitted=admitted,
                else_kind=ElseKind.ERROR if refusal is not None else ElseKind.NONE,
                evidence=evidence,
            )
        )

    def _refusal(self, name: str, where: ast.AST, class_attribute: bool) -> int | None:
        """The line of a membership test on ``name`` that raises for anything outside it, if any.

        ``if x not in NAME: raise …`` and ``assert x in NAME`` count (``self.NAME`` for a class attribute).
        """

        def names_it(test: ast.expr, operator: type[ast.cmpop]) -> bool:
            if not (
                isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], operator)
            ):
                return False
            container = test.comparators[0]
            if class_attribute:
                return (
                    isinstance(container, ast.Attribute)
                    and container.attr == name
                    and isinstance(container.value, ast.Name)
                )
            return isinstance(container, ast.Name) and container.id == name

        for node in ast.walk(where):
            if (
                isinstance(node, ast.If)
                and names_it(node.test, ast.NotIn)
                and any(isinstance(s, ast.Raise) for s in node.body)
            ) or (isinstance(node, ast.Assert) and names_it(node.test, ast.In)):
                return node.lineno
        return None

    def _arch_list_evidence(self, name: str, value: object, line: int) -> Evidence:
        if isinstance(value, (set, frozenset)):
            items: list[object] = sorted(value, key=repr)  # sets have no order of their own to show
        elif isinstance(value, (list, tuple, dict)):
            items = list(value)
        else:
            items = [value]
        shown = ", ".join(repr(i) for i in items)
        return Evidence(f"{name} lists {shown}", self.path, line)

    def _unknown_items_evidence(self, spellings: list[str], line: int) -> Evidence:
        return Evidence(f"also lists {_join_names(spellings)}, which liftgate does not know", self.path, line)

    # -- environment

    def _env_read_call(self, call: ast.Call, callee: str | None) -> None:
        if callee is None or not call.args:
            return
        func = call.func
        if callee == "get" and isinstance(func, ast.Attribute) and _is_environ(func.value):
            pass
        elif "env" not in callee.lower() or callee.lower() in ("setenv", "putenv", "unsetenv"):
            return
        key = self._env_key(call.args[0])
        if key is None:
            return
        if key in _ARCH_LIST_ENV_VARS:
            default = _argument(call, 1, "default")
            if default is not None:
                self._arch_list_env(call, key, default, "defaults to")
            return
        self._env_switch(call, key)

    def _environ_subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            key = self._env_key(node.slice)
            if key is not None:
                self._env_switch(node, key)

    def _environ_membership(self, node: ast.Compare) -> None:
        if (
            len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and _is_environ(node.comparators[0])
        ):
            key = self._env_key(node.left)
            if key is not None:
                self._env_switch(node, key)

    def _env_attribute(self, node: ast.Attribute) -> None:
        """``envs.SGLANG_ENABLE_SM100``: a switch read through a settings module."""
        if not isinstance(node.ctx, ast.Load):
            return
        receiver = _dotted(node.value)
        if receiver is not None and "env" in receiver.rsplit(".", 1)[-1].lower():
            self._env_switch(node, node.attr)

    def _env_switch(self, node: ast.AST, variable: str) -> None:
        for pattern in _ENV_SWITCH_PATTERNS:
            match = pattern.search(variable)
            if match is not None:
                break
        else:
            return
        number, variant = match.group(1), match.group(2).lower()
        try:
            arch = resolve_arch(f"sm_{number}{variant}").arch
        except UnknownArchError:
            return
        admitted = ArchSet([arch]) if variant else archs_for_capabilities([arch.cc])
        draft = _Draft(
            node=node,
            span=_span(node),
            directive="env-switch",
            admitted=admitted,
            confidence=Confidence.INFERRED,
            evidence=[
                Evidence(f"the environment switch {variable} names {arch.name}", self.path, _span(node).start)
            ],
            depends_on=(f"{variable} (environment)",),
        )
        branch = self._if_of(node)
        if branch is not None:
            draft.then_span = Span(branch.body[0].lineno, _span(branch.body[-1]).end)
            if branch.orelse:
                draft.else_span = Span(branch.orelse[0].lineno, _span(branch.orelse[-1]).end)
        self.drafts.append(draft)

    def _if_of(self, node: ast.AST) -> ast.If | None:
        """The ``if`` whose test is this switch (possibly inside ``not``, ``and``/``or`` or a comparison)."""
        current = node
        parent = self.parents.get(current)
        while isinstance(parent, (ast.BoolOp, ast.UnaryOp, ast.Compare)):
            current, parent = parent, self.parents.get(parent)
        if isinstance(parent, ast.If) and parent.test is current:
            return parent
        return None


def _tidy(text: str) -> str:
    """Collapse whitespace and drop what that leaves inside brackets: ``f( x=[ 9, 10, ] )`` -> ``f(x=[9, 10])``."""
    collapsed = " ".join(text.split())
    return _BRACKET_SPACE_RE.sub(_tidy_match, collapsed)


# Comments inside a multi-line construct; strings first, so a '#' inside one stays.
_COMMENT_RE = re.compile(r"""(?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|#[^\n]*""")
# Strings first, so brackets and spaces inside them stay as written.
_BRACKET_SPACE_RE = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')|(?P<open>[(\[{]) |(?P<comma>,?) (?P<close>[)\]}])"""
)


def _tidy_match(match: re.Match[str]) -> str:
    if match.group("string") is not None:
        return match.group("string")
    if match.group("open") is not None:
        return match.group("open")
    # A trailing comma goes before ] and }, and stays before ) where it makes a one-element tuple.
    close = match.group("close")
    return f"{match.group('comma')}{close}" if close == ")" else close
