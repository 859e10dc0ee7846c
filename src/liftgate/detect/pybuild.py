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
`liftgate.detect.pybuild_targets.code_targets`. Anything unusual in a file is a `Skip`, never an
exception.

This module holds the entry point, the prefilter and the constructs other than arch flags; the scan
of one file (`_FileScan`) builds on the layers of its sibling modules, each a base class of the
next: `pybuild_text` (source text), `pybuild_scope` (parents, scopes, name resolution),
`pybuild_builds` (which build a construct guards), `pybuild_gates` (drafts and the gates they
become) and `pybuild_flags` (arch flags); `pybuild_targets` reads what a spelling admits.
"""

from __future__ import annotations

import ast
import bisect
import re

from liftgate.arch.core import ArchSet
from liftgate.arch.parse import UnknownArchError, resolve_arch
from liftgate.detect.interface import Detection, not_analysed
from liftgate.detect.py_binding import parse_python, walk
from liftgate.detect.pybuild_flags import FlagGroups, FlagScan
from liftgate.detect.pybuild_gates import Draft
from liftgate.detect.pybuild_syntax import (
    NOT_LITERAL,
    call_argument,
    call_keyword,
    callee_name,
    dotted_name,
    join_names,
    literal_value,
    node_span,
)
from liftgate.detect.pybuild_targets import arch_list_targets, env_list_targets
from liftgate.detect.runtime_arch import archs_for_capabilities, archs_for_majors
from liftgate.model import Confidence, ElseKind, Evidence, Skip, Span, Switch, SwitchKind

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
_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")


def detect_py_build(
    package: str, version: str | None, path: str, text: str, tree: ast.Module | None = None
) -> Detection:
    """The py-build gates of one Python file (``tree`` is its parsed module, if the caller has it)."""
    if tree is None:
        try:
            tree = parse_python(text, filename=path)
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
    except Exception as exc:  # a bug: this file's py-build gates are lost, not the scan's
        return Detection(
            skips=(not_analysed(path, package, exc, "py-build analysis failed", "please report this file"),)
        )


_TRUTHY = frozenset({"1", "true", "yes", "on", "y", "t"})


def _is_environ(node: ast.expr) -> bool:
    dotted = dotted_name(node)
    return dotted is not None and (dotted == "environ" or dotted.endswith(".environ"))


def _string_value(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


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


class _FileScan(FlagGroups):
    """The py-build analysis of one parsed file: walk the parts of the tree that hold a hint, draft gates."""

    # -- driver

    def run(self) -> Detection:
        hint_lines = self._hint_lines()
        if not hint_lines:
            return Detection()
        self._note_torch_loaders()
        flag_groups: list[tuple[ast.AST, FlagScan]] = []
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

    def _visit(self, node: ast.AST, flag_groups: list[tuple[ast.AST, FlagScan]]) -> None:
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
            group = self._string_flag_group(node)
            if group is not None:
                flag_groups.append((node, group))

    # -- get_nvcc_flags_list

    def _call(self, call: ast.Call) -> None:
        callee = callee_name(call)
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
        keyword = call_keyword(call, "supported_major_versions")
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
            Draft(
                node=call,
                span=Span(anchor.lineno, node_span(call).end),
                directive="get_nvcc_flags_list",
                admitted=archs_for_majors(majors),
                else_kind=ElseKind.ERROR,
                evidence=evidence,
            )
        )

    # -- which build a construct guards
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
        parsed = env_list_targets(value)
        if parsed is None:
            return
        admitted, readings, left_out = parsed
        span = span or node_span(construct)
        evidence = [Evidence(f'{variable} {how} "{value}": {"; ".join(readings)}', self.path, span.start)]
        if left_out:
            evidence.append(
                Evidence(
                    f"{variable} items liftgate does not know: {join_names(left_out)}", self.path, span.start
                )
            )
        default = how == "defaults to"
        self.drafts.append(
            Draft(
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
            end = node_span(value_node).end
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
        if value is NOT_LITERAL:
            return
        if binding in ("module", "class") and self._names_arch_list_constant(keyword.value):
            return  # the constant is reported where it is defined
        parsed = arch_list_targets(value)
        if parsed is None:
            return
        admitted, unknown_spellings = parsed
        evidence = [self._arch_list_evidence(keyword.arg or "", value, keyword.lineno)]
        if unknown_spellings:
            evidence.append(self._unknown_items_evidence(unknown_spellings, keyword.lineno))
        evidence.extend(self._build_links(keyword))
        self.drafts.append(
            Draft(
                node=keyword,
                span=node_span(keyword),
                directive="arch-list",
                admitted=admitted,
                evidence=evidence,
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
        parsed = arch_list_targets(literal_value(value_node))
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
        evidence = [self._arch_list_evidence(name, literal_value(value_node), statement.lineno)]
        if unknown_spellings:
            evidence.append(self._unknown_items_evidence(unknown_spellings, statement.lineno))
        if refusal is not None:
            evidence.append(Evidence(f"anything outside {name} is refused", self.path, refusal))
        self.drafts.append(
            Draft(
                node=statement,
                span=node_span(statement),
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

        for node in walk(where):
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
        return Evidence(f"also lists {join_names(spellings)}, which liftgate does not know", self.path, line)

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
        default = call_argument(call, 1, "default")
        if key in _ARCH_LIST_ENV_VARS:
            if default is not None:
                self._arch_list_env(call, key, default, "defaults to")
            return
        # os.getenv("FLASHINFER_ENABLE_SM90", "1"): on unless someone turns it off, so no gate.
        on_by_default = isinstance(default, ast.Constant) and str(default.value).strip().lower() in _TRUTHY
        self._env_switch(call, key, unless_set=on_by_default)

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
                self._env_switch(node, key, unless_set=isinstance(node.ops[0], ast.NotIn))

    def _env_attribute(self, node: ast.Attribute) -> None:
        """``envs.SGLANG_ENABLE_SM100``: a switch read through a settings module."""
        if not isinstance(node.ctx, ast.Load):
            return
        receiver = dotted_name(node.value)
        if receiver is not None and "env" in receiver.rsplit(".", 1)[-1].lower():
            self._env_switch(node, node.attr)

    def _env_switch(self, node: ast.AST, variable: str, *, unless_set: bool = False) -> None:
        """A switch read from the environment: the path behind it is off until someone sets it, for
        every target (its name only says which kernels it is for, never whether it is set). A switch
        that turns kernels off (``DISABLE_SM90``, ``"X" not in os.environ``) leaves them on by default
        and is no gate."""
        for pattern in _ENV_SWITCH_PATTERNS:
            match = pattern.search(variable)
            if match is not None:
                break
        else:
            return
        if unless_set or "DISABLE" in variable.upper():
            return
        number, variant = match.group(1), match.group(2).lower()
        try:
            arch = resolve_arch(f"sm_{number}{variant}").arch
        except UnknownArchError:
            return
        named = ArchSet([arch]) if variant else archs_for_capabilities([arch.cc])
        setting = f"{variable}=1"
        draft = Draft(
            node=node,
            span=node_span(node),
            directive="env-switch",
            admitted=ArchSet.none(),
            confidence=Confidence.INFERRED,
            evidence=[
                Evidence(
                    f"off unless the environment variable {variable} is set ({setting}); its name says it is "
                    f"for {arch.name}",
                    self.path,
                    node_span(node).start,
                )
            ],
            depends_on=(f"{variable} (environment, unset by default)",),
            switches=(Switch(variable, SwitchKind.ENVIRONMENT, setting, named, ArchSet.none()),),
        )
        branch = self._if_of(node)
        if branch is not None:
            draft.then_span = Span(branch.body[0].lineno, node_span(branch.body[-1]).end)
            if branch.orelse:
                draft.else_span = Span(branch.orelse[0].lineno, node_span(branch.orelse[-1]).end)
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
