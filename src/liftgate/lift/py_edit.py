"""Edits that lift Python gates: runtime capability checks (py-runtime) and build arch lists (py-build).

Every edit is planned on the module's syntax tree and applied to its text as insertions and
small replacements, so formatting, comments and line numbers stay as they were:

* **Literal widening**, where the condition compares a capability with literals:
  ``major in (9, 10)`` → ``major in (9, 10, 12)``, ``cc == 90`` → ``cc in (90, 120)``,
  ``cc < 120`` → ``cc <= 120`` (only when the target sits right at the bound; a bound that would
  let other capabilities in is never moved). The literal's own scale is kept: majors (``12``),
  ``major * 10 + minor`` numbers (``120``), ``(major, minor)`` tuples (``(12, 0)``).
* **Call-site test**, where a helper predicate decides (``get_platform().is_sm90``): the test is
  or'ed with an exact capability test built only from names the module already has
  (``torch.cuda.get_device_capability() == (12, 0)``); a guard (``if not X: raise``) gets it
  inside its negation (``not (X or T)``). A module with no capability query in scope gets no
  edit, and the plan says why.
* **Build lists**: ``supported_major_versions=[9, 10]`` → ``[9, 10, 12]``; arch strings in the
  list's own spelling (``"9.0a"`` → ``"12.0a"``, ``"sm_90"`` → ``"sm_120"``, ``"9.0;10.0"`` →
  ``"9.0;10.0;12.0"``).

Heuristic choices (which comparison is about the capability) are checked afterwards by
re-detecting the patched files (`liftgate.lift.plan`): an edit is kept only if the gate then
admits the target and nothing beyond what the plan says.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from typing import Any

from liftgate.arch.core import Arch
from liftgate.detect.py_binding import parse_python
from liftgate.detect.python import collapse, is_guard
from liftgate.lift.text import Edit, Granularity, NoSafeEdit, TextEdit
from liftgate.model import Gate

_CAPABILITY_NAME = re.compile(
    r"capab|major|minor|\bsm\b|sm_?\d|_sm\b|\barch|\bcc\b|compute|device|version_num|sm_version", re.I
)
_NOT_CAPABILITY = re.compile(r"cuda_version|torch\.version|__version__|driver|python|cudnn|nccl", re.I)
_ARCH_STRING = re.compile(r"^(sm_|compute_)?(\d{1,2})(\.)?(\d)?([af])?(\+PTX)?$", re.I)


class _Text:
    """A module's text with ast positions (1-based lines, UTF-8 byte columns) mapped to offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def line(self, lineno: int) -> str:
        start = self.starts[lineno - 1]
        end = self.starts[lineno] if lineno < len(self.starts) else len(self.text)
        return self.text[start:end]

    def offset(self, lineno: int, col_bytes: int) -> int:
        line = self.line(lineno)
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def segment(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.text[a:b]


def parse_module(text: str, path: str) -> ast.Module:
    try:
        return parse_python(text, filename=path)
    except (SyntaxError, ValueError) as exc:
        raise NoSafeEdit(f"{path} does not parse ({exc.__class__.__name__}: {exc})") from exc


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def locate_condition(tree: ast.Module, src: _Text, gate: Gate) -> tuple[ast.expr, ast.AST | None]:
    """The expression the gate was read from (same first line, same text), and its parent."""
    want = gate.condition
    start, end = gate.location.span.start, gate.location.span.end
    parents = _parents(tree)
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.expr)
            and start <= node.lineno
            and (node.end_lineno or node.lineno) == end
            and collapse(src.segment(node)) == want
        ):
            found.append(node)
    if not found:
        raise NoSafeEdit(f"the condition {want!r} is no longer at line {start}: rescan and plan again")
    node = min(found, key=lambda n: (n.lineno, n.col_offset))
    return node, parents.get(id(node))


def _admits_when_true(cond: ast.expr, parent: ast.AST | None) -> bool:
    return not (isinstance(parent, ast.If) and parent.test is cond and is_guard(parent))


def _int_literal(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _pair_literal(node: ast.expr) -> tuple[int, int] | None:
    if isinstance(node, ast.Tuple) and len(node.elts) == 2:
        a, b = (_int_literal(e) for e in node.elts)
        if a is not None and b is not None:
            return a, b
    return None


def _scale_value(sample: int | tuple[int, int] | float, arch: Arch) -> tuple[str, Granularity] | None:
    """The target in the scale of ``sample``, and the granularity that admits."""
    if isinstance(sample, tuple):
        return f"({arch.major}, {arch.minor})", Granularity.CAPABILITY
    if isinstance(sample, float):
        return f"{arch.major}.{arch.minor}", Granularity.CAPABILITY
    if 0 < sample <= 20:
        return str(arch.major), Granularity.MAJOR
    if 30 <= sample <= 200:
        return str(arch.number), Granularity.CAPABILITY
    return None


def _literal_of(node: ast.expr) -> int | tuple[int, int] | float | None:
    pair = _pair_literal(node)
    if pair is not None:
        return pair
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return node.value
    return None


def _target_number(sample: int | tuple[int, int] | float, arch: Arch) -> int | tuple[int, int] | float:
    if isinstance(sample, tuple):
        return (arch.major, arch.minor)
    if isinstance(sample, float):
        return arch.major + arch.minor / 10
    return arch.major if sample <= 20 else arch.number


def _is_capability_side(node: ast.expr, src: _Text) -> bool:
    text = src.segment(node)
    return bool(_CAPABILITY_NAME.search(text)) and not _NOT_CAPABILITY.search(text)


def _widen_compare(
    cmp: ast.Compare, src: _Text, arch: Arch
) -> tuple[list[TextEdit], str, Granularity] | None:
    """Edits that make one ``X op literal`` comparison also true for the target, if safe."""
    if len(cmp.ops) != 1:
        return None
    op, right, left = cmp.ops[0], cmp.comparators[0], cmp.left
    if not _is_capability_side(left, src):
        return None
    if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) and right.elts:
        values = [_literal_of(e) for e in right.elts]
        if any(v is None for v in values):
            return None
        sample = values[0]
        assert sample is not None
        scaled = _scale_value(sample, arch)
        if scaled is None or _target_number(sample, arch) in values:
            return None
        text, granularity = scaled
        _a, end = src.span(right.elts[-1])
        return [TextEdit(end, end, f", {text}")], f"added {text} to {src.segment(right)}", granularity
    literal = _literal_of(right)
    if literal is None:
        return None
    scaled = _scale_value(literal, arch)
    if scaled is None:
        return None
    text, granularity = scaled
    target = _target_number(literal, arch)
    _ls, left_end = src.span(left)
    _rs, right_end = src.span(right)
    right_text = src.segment(right)
    if isinstance(op, ast.Eq):
        if target == literal:
            return None
        return (
            [TextEdit(left_end, right_end, f" in ({right_text}, {text})")],
            f"== {right_text} became in ({right_text}, {text})",
            granularity,
        )
    if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
        return _move_bound(op, literal, target, text, right_text, left_end, right_end, granularity)
    return None


_OP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def _known_values(sample: int | tuple[int, int] | float) -> list[Any]:
    from liftgate.arch.core import universe

    return sorted({_target_number(sample, a) for a in universe()})


def _move_bound(
    op: ast.cmpop,
    bound: Any,
    target: Any,
    target_text: str,
    bound_text: str,
    left_end: int,
    right_end: int,
    granularity: Granularity,
) -> tuple[list[TextEdit], str, Granularity] | None:
    """Move a comparison's bound to the target, only when no other known capability lies between
    (``major >= 10`` becomes ``major >= 9`` for 9.0; ``sm < 120`` becomes ``sm <= 120``)."""
    known = _known_values(bound)
    old = _OP_TEXT[type(op)]
    if isinstance(op, (ast.Lt, ast.LtE)):
        if target < bound or (isinstance(op, ast.LtE) and target == bound):
            return None
        strict = isinstance(op, ast.LtE)
        newly = [v for v in known if (bound < v if strict else bound <= v) and v < target]
        new = f"<= {target_text if target != bound else bound_text}"
    else:
        if target > bound or (isinstance(op, ast.GtE) and target == bound):
            return None
        strict = isinstance(op, ast.GtE)
        newly = [v for v in known if v > target and (v < bound if strict else v <= bound)]
        new = f">= {target_text if target != bound else bound_text}"
    if newly:
        return None
    return [TextEdit(left_end, right_end, f" {new}")], f"{old} {bound_text} became {new}", granularity


def _compares(node: ast.expr) -> Iterator[ast.Compare]:
    """Comparisons in ``node`` reached through and/or/not (not into calls or lambdas)."""
    if isinstance(node, ast.Compare):
        yield node
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            yield from _compares(v)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield from _compares(node.operand)


def _import_names(tree: ast.Module) -> dict[str, str]:
    """Names bound by the module's top-level (and try/if-nested) imports: local name -> dotted origin."""
    names: dict[str, str] = {}
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names.setdefault(top, top)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            for alias in stmt.names:
                names[alias.asname or alias.name] = f"{stmt.module}.{alias.name}"
        elif isinstance(stmt, (ast.Try, ast.If)):
            stack.extend(stmt.body)
            stack.extend(stmt.orelse)
            if isinstance(stmt, ast.Try):
                for handler in stmt.handlers:
                    stack.extend(handler.body)
    return names


def capability_test(tree: ast.Module, arch: Arch) -> str | None:
    """An exact test for the target's capability using only names the module imports, or None."""
    names = _import_names(tree)
    pair = f"({arch.major}, {arch.minor})"
    for local, origin in names.items():
        if origin == "torch":
            return f"{local}.cuda.get_device_capability() == {pair}"
    for local, origin in names.items():
        if origin == "torch.cuda":
            return f"{local}.get_device_capability() == {pair}"
        if origin == "torch.cuda.get_device_capability":
            return f"{local}() == {pair}"
    for local, origin in names.items():
        if origin.endswith(".current_platform") and origin.startswith("vllm"):
            return f"{local}.get_device_capability() == {pair}"
    return None


def _atomic(node: ast.expr) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Compare, ast.Constant))


def _or_test(cond: ast.expr, src: _Text, test: str, admits_when_true: bool) -> tuple[list[TextEdit], str]:
    start, end = src.span(cond)
    if admits_when_true:
        if _atomic(cond) or (isinstance(cond, ast.BoolOp) and isinstance(cond.op, ast.Or)):
            return [TextEdit(end, end, f" or {test}")], f"or'ed with {test}"
        return [TextEdit(start, start, "("), TextEdit(end, end, f") or {test}")], f"or'ed with {test}"
    # A guard: the code it admits runs where the test is false.
    if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Not):
        inner = cond.operand
        a, b = src.span(inner)
        how = f"{test} added inside the guard's negation"
        if src.text[a - 1 : a] == "(" and src.text[b : b + 1] == ")":  # not (…)
            if isinstance(inner, ast.BoolOp) and isinstance(inner.op, ast.Or):
                return [TextEdit(b, b, f" or {test}")], how  # not (A or B or T)
            return [TextEdit(a, a, "("), TextEdit(b, b, f") or {test}")], how  # not ((A and B) or T)
        return [TextEdit(a, a, "("), TextEdit(b, b, f" or {test})")], how  # not (X or T)
    if _atomic(cond):
        return [TextEdit(end, end, f" and not {test}")], f"and'ed with not {test} (a guard)"
    return [
        TextEdit(start, start, "("),
        TextEdit(end, end, f") and not {test}"),
    ], f"and'ed with not {test} (a guard)"


def runtime_edit(text: str, gate: Gate, arch: Arch, tree: ast.Module | None = None) -> Edit:
    """The edit that makes a py-runtime gate also admit ``arch``'s capability."""
    tree = tree or parse_module(text, gate.location.path)
    src = _Text(text)
    cond, parent = locate_condition(tree, src, gate)
    edits: list[TextEdit] = []
    hows: list[str] = []
    granularity = Granularity.CAPABILITY
    for cmp in _compares(cond):
        widened = _widen_compare(cmp, src, arch)
        if widened is not None:
            e, how, gran = widened
            edits.extend(e)
            hows.append(how)
            if gran is Granularity.MAJOR:
                granularity = Granularity.MAJOR
    if edits:
        if not _admits_when_true(cond, parent):
            raise NoSafeEdit(
                "a guard that compares capability literals: widening them would shut the target out; "
                "edit it by hand"
            )
        return Edit(tuple(edits), "; ".join(hows), granularity)
    test = capability_test(tree, arch)
    if test is None:
        raise NoSafeEdit(
            f"{gate.location.path} imports no capability query (torch, torch.cuda, vLLM's current_platform) "
            "to test the target with, and liftgate never adds an import: lift the helper's definition "
            "with --at definition"
        )
    e, how = _or_test(cond, src, test, _admits_when_true(cond, parent))
    return Edit(tuple(e), how, Granularity.CAPABILITY)


def _disjuncts(cond: ast.expr) -> list[ast.expr]:
    """``cond`` itself, or the operands of a top-level ``or``: making one true makes it true."""
    if isinstance(cond, ast.BoolOp) and isinstance(cond.op, ast.Or):
        return list(cond.values)
    return [cond]


def narrow_runtime_edit(text: str, gate: Gate, arch: Arch, tree: ast.Module | None = None) -> Edit:
    """The edit that shuts ``arch``'s capability out of the path a py-runtime gate admits.

    A guard (the path runs where it is false: ``if sm_version == 120: return False``) is made to
    fire for the target: a comparison of it, or of one of its ``or``-ed parts, gains the target
    (``sm_version in (120, 121)``), else ``or <exact test>``. A plain branch gets ``and not
    <exact test>``. The exact test is `capability_test`, from names the module already imports.
    """
    tree = tree or parse_module(text, gate.location.path)
    src = _Text(text)
    cond, parent = locate_condition(tree, src, gate)
    admits_when_true = _admits_when_true(cond, parent)
    if not admits_when_true:
        for part in _disjuncts(cond):
            if isinstance(part, ast.Compare):
                widened = _widen_compare(part, src, arch)
                if widened is not None:
                    edits, how, granularity = widened
                    return Edit(tuple(edits), f"{how} (the guard now shuts {arch.name} out)", granularity)
    test = capability_test(tree, arch)
    if test is None:
        raise NoSafeEdit(
            f"{gate.location.path} imports no capability query (torch, torch.cuda, vLLM's current_platform) "
            f"to test {arch.name} with, and liftgate never adds an import: edit it by hand"
        )
    # The lift's edit of the other polarity: a plain branch is edited as a guard would be to admit
    # the target (false for it), a guard as a plain branch would be (true for it).
    edits, _how = _or_test(cond, src, test, not admits_when_true)
    how = (
        f"or'ed with {test} (the guard now shuts {arch.name} out)"
        if not admits_when_true
        else (f"and'ed with not {test}")
    )
    return Edit(tuple(edits), how, Granularity.CAPABILITY)


def narrow_list_edit(text: str, start: int, end: int, arch: Arch, tree: ast.Module | None = None) -> Edit:
    """Remove ``arch`` from the first literal arch list on lines ``start..end`` (a major version
    removes every minor of it: the granularity says so); raises `NoSafeEdit` when there is none,
    when the target is not listed in the list's own spelling, or when it is the only entry."""
    tree = tree or parse_module(text, "<module>")
    src = _Text(text)
    for value in _candidate_lists(tree, start, end):
        items = _list_items(value)
        if items is None:
            continue
        ints = [_int_literal(e) for e in items]
        strs = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None for e in items]
        granularity = Granularity.CAPABILITY
        if all(i is not None for i in ints):
            sample = ints[0]
            assert sample is not None
            wanted = arch.major if sample <= 20 else arch.number
            if sample <= 20:
                granularity = Granularity.MAJOR
            hits = [n for n, i in enumerate(ints) if i == wanted]
            spelled = str(wanted)
        elif all(v is not None for v in strs):
            first = strs[0]
            assert first is not None
            spelled_item = _string_item(first, arch)
            if spelled_item is None:
                continue
            hits = [n for n, v in enumerate(strs) if v is not None and v.strip() == spelled_item]
            spelled = repr(spelled_item)
        else:
            continue
        if not hits:
            raise NoSafeEdit(
                f"{src.segment(value)} does not list {spelled} itself (it admits {arch.name} some other way): "
                "edit it by hand"
            )
        if len(items) == len(hits):
            raise NoSafeEdit(f"{spelled} is all that {src.segment(value)} lists: removing it leaves nothing")
        if len(hits) > 1:
            raise NoSafeEdit(f"{src.segment(value)} lists {spelled} {len(hits)} times: edit it by hand")
        (n,) = hits
        if n + 1 < len(items):  # the item and the separator after it
            a, b = src.span(items[n])[0], src.span(items[n + 1])[0]
        else:  # the last item and the separator before it
            a, b = src.span(items[n - 1])[1], src.span(items[n])[1]
        edits = [TextEdit(a, b, "")]
        last_end = src.span(items[-1])[1]
        if (
            isinstance(value, ast.Tuple)
            and len(items) == 2
            and not src.text[last_end:].lstrip().startswith(",")  # (100, 121) -> (100,): still a tuple
        ):
            edits = [TextEdit(a, b, ",")] if n == 1 else [*edits, TextEdit(last_end, last_end, ",")]
        return Edit(tuple(edits), f"removed {spelled} from {src.segment(value)}", granularity)
    raise NoSafeEdit(
        "no literal arch list at the gate (the archs come from a variable or a call): edit it by hand"
    )


def _candidate_lists(tree: ast.Module, start: int, end: int) -> list[ast.expr]:
    """Keyword values, assigned values and call arguments on lines ``start..end``, in tree order."""
    candidates: list[ast.expr] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.keyword)
            and node.value.lineno >= start
            and (node.value.end_lineno or 0) <= end
        ):
            candidates.append(node.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            if node.lineno >= start and (node.value.end_lineno or 0) <= end:
                candidates.append(node.value)
        elif isinstance(node, ast.Call) and node.lineno >= start and (node.end_lineno or 0) <= end:
            candidates.extend(node.args)
    return candidates


def _string_item(spelling: str, arch: Arch) -> str | None:
    """The target spelled like ``spelling`` (one arch string: "9.0a", "90", "sm_90a", "8.6+PTX")."""
    m = _ARCH_STRING.match(spelling.strip())
    if m is None:
        return None
    prefix, major, dot, minor, _variant, ptx = m.groups()
    if dot:
        body = f"{arch.major}.{arch.minor}"
    elif minor is None and len(major) <= 2 and not prefix and int(major) < 20:
        body = str(arch.major)
    else:
        body = str(arch.number)
    return f"{prefix or ''}{body}{arch.variant}{ptx or ''}"


def _list_items(node: ast.expr) -> list[ast.expr] | None:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and node.elts:
        return list(node.elts)
    return None


def build_edit(text: str, gate: Gate, arch: Arch, tree: ast.Module | None = None) -> Edit:
    """The edit that adds ``arch`` to a py-build gate's arch list (a literal list or arch string)."""
    span = gate.location.span
    return list_edit(text, span.start, span.end, arch, tree or parse_module(text, gate.location.path))


def list_edit(text: str, start: int, end: int, arch: Arch, tree: ast.Module | None = None) -> Edit:
    """Add ``arch`` to the first literal arch list (keyword, assignment or call argument) on lines
    ``start..end``; raises `NoSafeEdit` when there is none."""
    tree = tree or parse_module(text, "<module>")
    src = _Text(text)
    for value in _candidate_lists(tree, start, end):
        items = _list_items(value)
        if items is not None:
            ints = [_int_literal(e) for e in items]
            if all(i is not None for i in ints):
                sample = ints[0]
                assert sample is not None
                new = str(arch.major) if sample <= 20 else str(arch.number)
                if int(new) in ints:
                    raise NoSafeEdit(f"{src.segment(value)} already lists {new}")
                how = f"added {new} to {src.segment(value)}"
                granularity = Granularity.MAJOR if sample <= 20 else Granularity.CAPABILITY
                values = [i for i in ints if i is not None]
                if values == sorted(values) and int(new) < values[-1]:
                    # Keep a sorted list sorted: insert before the first larger element.
                    before = next(e for e, i in zip(items, values, strict=True) if i > int(new))
                    at, _b = src.span(before)
                    return Edit((TextEdit(at, at, f"{new}, "),), how, granularity)
                _a, last = src.span(items[-1])
                return Edit((TextEdit(last, last, f", {new}"),), how, granularity)
            strs = [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(strs) == len(items):
                spelled = _string_item(strs[0], arch)
                if spelled is None:
                    continue
                if spelled in strs:
                    raise NoSafeEdit(f"{src.segment(value)} already lists {spelled!r}")
                quote = src.segment(items[-1])[0]
                _a, last = src.span(items[-1])
                how = f"added {spelled!r} to {src.segment(value)}"
                return Edit(
                    (TextEdit(last, last, f", {quote}{spelled}{quote}"),), how, Granularity.CAPABILITY
                )
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            edit = _arch_string_edit(value, src, arch)
            if edit is not None:
                return edit
    raise NoSafeEdit(
        "no literal arch list at the gate (the archs come from a variable or a call): edit it by hand"
    )


def _arch_string_edit(node: ast.Constant, src: _Text, arch: Arch) -> Edit | None:
    """``"9.0;10.0"`` / ``"9.0 10.0"`` / ``"90,100"`` gains the target in the same spelling."""
    assert isinstance(node.value, str)
    value = node.value
    for sep in (";", ",", " "):
        parts = [p for p in value.split(sep) if p]
        if len(parts) >= 1 and all(_ARCH_STRING.match(p.strip()) for p in parts):
            spelled = _string_item(parts[-1], arch)
            if spelled is None or spelled in (p.strip() for p in parts):
                return None
            seg = src.segment(node)
            if seg[-1:] not in "'\"" or seg.startswith(("f", "F", "b", "B")) or "\\" in seg:
                return None
            _a, b = src.span(node)
            return Edit(
                (TextEdit(b - 1, b - 1, f"{sep}{spelled}"),),
                f"added {spelled!r} to {seg}",
                Granularity.CAPABILITY,
            )
    return None


def marker_position(text: str, offset: int) -> int:
    """Where a trailing ``# liftgate …`` comment can go for an edit at ``offset``: the end of the
    logical line's code (before the newline), never inside a string or after a continuation."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        tokens = []
    src = _Text(text)
    line_of_offset = next(i for i in range(len(src.starts), 0, -1) if src.starts[i - 1] <= offset)
    for tok in tokens:
        if tok.type in (tokenize.NEWLINE, tokenize.NL) and tok.start[0] >= line_of_offset:
            if tok.type == tokenize.NL and _inside_brackets(tokens, tok):
                continue
            row, col = tok.start
            return src.starts[row - 1] + col
    line = src.line(line_of_offset)
    return src.starts[line_of_offset - 1] + len(line.rstrip("\r\n"))


def _inside_brackets(tokens: list[tokenize.TokenInfo], at: tokenize.TokenInfo) -> bool:
    depth = 0
    for tok in tokens:
        if tok is at:
            return depth > 0
        if tok.type == tokenize.OP:
            depth += tok.string in "([{"
            depth -= tok.string in ")]}"
    return False
