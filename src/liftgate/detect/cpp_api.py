"""What the cpp-runtime detector knows of C++ host code by name: the CUDA runtime, driver and
framework calls that read the device's capability, helpers read from their names, check and
error macros, and what a statement does (fail, return, go on) and the message it fails with.
"""

from __future__ import annotations

import re
from functools import cache

from liftgate.detect.cpp_syntax import Node, Stmt, Tok, node_text, string_value
from liftgate.detect.cpp_values import CV, CapNum, per_cc
from liftgate.detect.pyvalues import infer_from_name
from liftgate.model import Evidence

# -- names of the CUDA runtime, driver and framework APIs -------------------------------------

ATTRIBUTE_CALLS = frozenset({"cudaDeviceGetAttribute", "cuDeviceGetAttribute", "hipDeviceGetAttribute"})
PROPS_OUT_CALLS = frozenset(
    {"cudaGetDeviceProperties", "cudaGetDeviceProperties_v2", "cuDeviceGetProperties"}
)
PROPS_RETURNING = frozenset(
    {
        "getCurrentDeviceProperties",
        "getDeviceProperties",
        "getDeviceProp",
        "get_device_prop",
        "GetDeviceProperties",
    }
)
PAIR_MAKERS = frozenset({"make_pair", "make_tuple", "pair", "tuple", "tie"})
_FATAL_CALLS = frozenset(
    {
        "abort",
        "exit",
        "_Exit",
        "quick_exit",
        "terminate",
        "__builtin_unreachable",
        "__builtin_trap",
        "unreachable",
    }
)
CHECK_MACRO = re.compile(
    r"^(?:[A-Z][A-Z0-9]*_)*(?:I?CHECK|ASSERT|ENSURE|REQUIRE|VERIFY|EXPECT)"
    r"(?:_WITH_INFO|_MSG|_NOT_IMPLEMENTED|_VALUE_ERROR|_INDEX_ERROR|_TYPE_ERROR)?"
    r"(?:_(?P<cmp>EQ|NE|GE|GT|LE|LT))?$|^assert$"
)
CHECK_CMP = {"EQ": "==", "NE": "!=", "GE": ">=", "GT": ">", "LE": "<=", "LT": "<"}
_FATAL_MACRO = re.compile(
    r"^(?:[A-Z][A-Z0-9]*_)*(?:THROW|FATAL|ERROR|UNREACHABLE|UNIMPLEMENTED|PANIC|ABORT)$"
)
# Helpers known only by name: a capability number, or a (major, minor) capability.
_VERSION_NAME = re.compile(
    r"(?:sm|arch|cuda_?arch|device_?sm|gpu_?sm)_?(?:version|ver|arch)(?:_?num(?:ber)?)?$"
)
_CAPABILITY_NAME = re.compile(r"compute_?capability(?:_?version)?$|device_?capability$")


def last_name(name: str) -> str:
    """The last component of a qualified name: ``at::cuda::f`` -> ``f``."""
    return name.rsplit("::", 1)[-1]


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def infer_helper(name: str, path: str | None, line: int | None) -> CV | None:
    """The value of a helper whose definition is not in the scanned files, read from its name."""
    snake = _snake(name)
    bare = snake.removeprefix("get_").removeprefix("_")
    if not bare.startswith(("is_", "has_")):
        if _VERSION_NAME.search(bare):
            what = "capability number (major*10+minor)"
        elif _CAPABILITY_NAME.search(bare):
            what = "compute capability"
        else:
            what = ""
        if what:
            ev = Evidence(
                f"{name}() read as the device's {what}; its definition is not in the scanned files",
                path,
                line,
            )
            return per_cc(lambda cc: CapNum(cc), ev, inferred=True)
    found = infer_from_name(snake)
    if found is None:
        return None
    caps, rule = found
    ev = Evidence(f"{rule}; its definition is not in the scanned files", path, line)
    return per_cc(lambda cc: cc in caps, ev, inferred=True)


@cache
def source_names() -> frozenset[str]:
    """Names whose use reads the device's capability directly (the runtime's, driver's, NVML's)."""
    return frozenset(
        {
            *ATTRIBUTE_CALLS,
            *PROPS_OUT_CALLS,
            *PROPS_RETURNING,
            "cudaDeviceProp",
            "cuDeviceComputeCapability",
            "nvmlDeviceGetCudaComputeCapability",
        }
    )


@cache
def inferable(name: str) -> bool:
    """Whether `infer_helper` reads a value from this name."""
    return infer_helper(name, None, None) is not None


# -- what a statement does: fail, return, go on ------------------------------------------------


def callee_name(node: Node | None) -> str:
    """The name a call (or a check macro streamed into with ``<<``) calls; empty when it is no such call."""
    while node is not None and node.kind == "bin" and node.op == "<<":
        node = node.args[0]
    if node is not None and node.kind == "call" and node.args[0].kind == "name":
        return last_name(str(node.args[0].value))
    return ""


def stream_root(node: Node) -> Node:
    """The leftmost operand of ``a << b << c``: the macro call a message is streamed into."""
    while node.kind == "bin" and node.op == "<<":
        node = node.args[0]
    return node


def is_false_literal(node: Node) -> bool:
    """``false`` or ``0``."""
    return (node.kind == "name" and node.value == "false") or (node.kind == "num" and node.value == 0)


def is_failure(stmt: Stmt, toks: tuple[Tok, ...]) -> bool:
    """Does this statement end the path with an error (throw, ``CHECK(false, …)``, abort)?"""
    if stmt.kind == "throw":
        return True
    if stmt.kind == "block":
        return bool(stmt.body) and is_failure(stmt.body[-1], toks)
    if stmt.kind != "expr" or stmt.expr is None:
        return False
    name = callee_name(stmt.expr)
    if not name:
        return False
    if name in _FATAL_CALLS or _FATAL_MACRO.match(name):
        return True
    m = CHECK_MACRO.match(name)
    if m and not m.group("cmp"):
        root = stream_root(stmt.expr)
        return len(root.args) > 1 and is_false_literal(root.args[1])
    return False


def terminates(stmt: Stmt | None) -> bool:
    """Whether the statement always leaves the enclosing block (return, throw, break, continue)."""
    if stmt is None:
        return False
    if stmt.kind in ("return", "throw", "break", "continue"):
        return True
    if stmt.kind == "block":
        return any(terminates(s) for s in stmt.body)
    if stmt.kind == "if":
        return len(stmt.body) == 2 and terminates(stmt.body[0]) and terminates(stmt.body[1])
    return False


def failure_message(stmt: Stmt, toks: tuple[Tok, ...]) -> str:
    """The text an error statement shows: its string literals, with other parts as ``<expr>``."""
    target = stmt
    while target.kind == "block" and target.body:
        target = target.body[-1]
    node = target.expr
    if target.kind == "throw":
        pieces = _literal_pieces(toks[target.start + 1 : target.end])
        return _shorten("".join(pieces))
    if node is None:
        return ""
    parts: list[Node] = []
    while node.kind == "bin" and node.op == "<<":
        parts.insert(0, node.args[1])
        node = node.args[0]
    if node.kind == "call":
        name = callee_name(node)
        m = CHECK_MACRO.match(name)
        skip = 3 if (m and m.group("cmp")) else (2 if m else 1)
        parts = node.args[skip:] + parts
    pieces = []
    for p in parts:
        if p.kind == "str":
            pieces.append(str(p.value))
        else:
            pieces.append(f"<{node_text(toks, p)}>")
    return _shorten("".join(pieces))


def _literal_pieces(toks: tuple[Tok, ...]) -> list[str]:
    pieces: list[str] = []
    gap = False
    for t in toks:
        if t.kind == "str":
            if gap and pieces:
                pieces.append("<…>")
            pieces.append(string_value(t.text))
            gap = False
        elif t.kind in ("id", "num") and pieces:
            gap = True
    return pieces


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:299] + "…"
