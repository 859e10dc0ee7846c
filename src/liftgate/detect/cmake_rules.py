"""The gates of a CMake file's arch lists, architecture flags and ``if()`` tests on an arch list.

`GateRules` (on the survey of `liftgate.detect.cmake_intersections`) reads what an entry admits
(`liftgate.detect.cmake_archs`) and records the gate: `GateRules.list_gate` for a ``set()``/
``list(APPEND …)``/``CUDA_ARCHITECTURES`` property with arch entries (and the intersections that
take it as SRC), `GateRules.flag_gate` for ``-gencode``/``-arch``/``-code`` flags, and
`GateRules.if_gate` for a branch whose condition tests an arch list (`GateRules.arch_atom` reads
``IN_LIST``, ``STREQUAL`` and simple ``MATCHES`` atoms), with what the branch builds and passes.
"""

from __future__ import annotations

import re

from liftgate.arch.core import ArchSet, arch_data
from liftgate.detect.cmake_archs import (
    SPECIAL_VALUES,
    ArchEntry,
    Style,
    admitted_by,
    capability_archs,
    compile_admitted,
    describe_entry,
    parse_entry,
    special_admitted,
)
from liftgate.detect.cmake_conditions import ArchTest
from liftgate.detect.cmake_gates import Frame
from liftgate.detect.cmake_intersections import IntersectionSurvey, extension_deps
from liftgate.detect.cmake_names import (
    ARCH_FLAG,
    CMAKE_LISTS,
    CODE_FLAG,
    GENCODE,
    GPU_NAME,
    SHOWN_ITEMS,
    TORCH_LISTS,
    is_arch_variable,
    references,
    shorten,
    substitute,
    truncate,
)
from liftgate.detect.cmake_summary import summarize
from liftgate.detect.cmake_syntax import Argument, Command, Cond, IfBlock, list_items
from liftgate.model import Confidence, ElseKind, Evidence, Gate, Span


class GateRules(IntersectionSurvey):
    """The gates of arch lists, architecture flags and ``if()`` tests on an arch list."""

    def if_gate(
        self,
        block: IfBlock,
        k: int,
        admitted: ArchSet,
        test: ArchTest,
        deps: list[str],
        frames: tuple[Frame, ...],
    ) -> Gate | None:
        branch = block.branches[k]
        summary = self.summarize_block(branch.body)
        rest = summarize(n for b in block.branches[k + 1 :] for n in b.body)
        evidence: list[Evidence] = []
        only_errors = not summary.sources and not summary.defines and summary.fatal
        if only_errors:
            # if(NOT "90a" IN_LIST ARCHS) message(FATAL_ERROR …): the build goes on where it is false.
            admitted = ~admitted
            for mode, text, line in summary.messages:
                evidence.append(Evidence(f"message({mode}): {text}", self.path, line))
            else_kind = ElseKind.ERROR
        else:
            if summary.sources:
                evidence.append(Evidence(f"builds {shorten(summary.sources)}", self.path, branch.head.line))
            if summary.defines:
                evidence.append(Evidence(f"adds {shorten(summary.defines)}", self.path, branch.head.line))
            for mode, text, line in rest.messages:
                evidence.append(Evidence(f"otherwise message({mode}): {text}", self.path, line))
            else_kind = ElseKind.ERROR if rest.fatal else ElseKind.NONE
        body_end = branch.last_line
        then_span = Span(branch.head.end_line + 1, body_end) if body_end > branch.head.end_line else None
        later = block.branches[k + 1 :]
        else_span = Span(later[0].head.line, block.end_line) if later else None
        builds = (self.target(None, summary, branch.head.line),) if summary.sources or summary.defines else ()
        return self.new_gate(
            branch.head,
            frames,
            admitted,
            ArchSet.none(),
            evidence=evidence,
            depends_on=[*deps, *test.deps],
            confidence=Confidence.INFERRED if test.inferred else Confidence.EXACT,
            else_kind=else_kind,
            then_span=then_span,
            else_span=else_span,
            builds=builds,
            passes=summary.flags,
        )

    def arch_atom(self, cond: Cond) -> tuple[ArchSet, bool, str | None] | None:
        """What an atom of an if() admits when it tests an arch list, else None."""
        args = cond.args
        if len(args) != 3 or args[1].quoting != "unquoted":
            return None
        left, op, right = args[0], args[1].value, args[2]
        if op == "IN_LIST":
            if right.has_reference or not self._is_arch_list(right.value) or left.has_reference:
                return None
            entries = [parse_entry(item, "exact") for item in list_items([left.value])]
            archs = [e.arch for e in entries if e is not None and e.arch is not None]
            return (ArchSet(archs), False, None) if archs and len(archs) == len(entries) else None
        if op == "STREQUAL":
            variable, literal = (left, right) if self._names_arch_list(left) else (right, left)
            if not self._names_arch_list(variable) or literal.has_reference:
                return None
            entries = [parse_entry(item, "exact") for item in list_items([literal.value])]
            archs = [e.arch for e in entries if e is not None and e.arch is not None]
            return (ArchSet(archs), False, None) if archs and len(archs) == len(entries) else None
        if op == "MATCHES":
            if not (self._names_arch_list(left) or self._names_flags(left)) or right.has_reference:
                return None
            admitted = self._regex_archs(right.value, self._names_flags(left))
            if admitted is None:
                if re.search(r"[0-9]", right.value) and "gfx" not in right.value.lower():
                    self.skip(
                        cond.args[0].line, f"cannot tell which architectures the regex {right.raw} matches"
                    )
                return None
            return admitted, True, None
        return None

    def _is_arch_list(self, name: str) -> bool:
        return (
            is_arch_variable(name)
            or name in self.src_uses
            or any(i.out == name for i in self.intersections.values())
        )

    def _names_arch_list(self, arg: Argument) -> bool:
        if arg.quoting == "unquoted" and not arg.has_reference:
            return self._is_arch_list(arg.value)
        match = re.fullmatch(r"\$\{(\w+)\}", arg.value)
        return match is not None and self._is_arch_list(match.group(1))

    @staticmethod
    def _names_flags(arg: Argument) -> bool:
        match = re.fullmatch(r"\$\{(\w+)\}|(\w+)", arg.value)
        name = (match.group(1) or match.group(2)) if match else ""
        return name.upper().endswith(("FLAGS", "OPTIONS"))

    @staticmethod
    def _regex_archs(regex: str, flags_only: bool) -> ArchSet | None:
        """Targets whose spelling a simple regex (alternatives of arch names) finds in a list."""
        if re.search(r"[\[*+?{]", regex.replace("\\.", "")):
            return None
        admitted = ArchSet.none()
        for alternative in regex.strip("^$").split("|"):
            text = alternative.strip("()^$").replace("\\.", ".").replace("\\", "")
            if flags_only and not GPU_NAME.match(text):
                return None
            entry = parse_entry(re.sub(r"^(?:code|arch)=", "", text), "exact")
            if entry is None or entry.arch is None:
                return None
            arch = entry.arch
            # A spelling without a variant suffix also finds the suffixed ones ("10.0" in "10.0a").
            admitted |= ArchSet([arch]) if arch.variant else capability_archs(arch.cc)
        return admitted

    def style_of(self, name: str) -> tuple[Style, str | None, bool]:
        """(style, why, inferred) of the entries assigned to variable or property ``name``."""
        upper = name.upper()
        if upper in CMAKE_LISTS:
            return "cmake", None, False
        if upper in TORCH_LISTS:
            return "torch", None, False
        if name in self.src_uses:
            return self.src_uses[name][0].style, None, False
        if name in self.cmake_uses:
            return "cmake", f"{name} is used as CMAKE_CUDA_ARCHITECTURES", False
        if name in self.torch_uses:
            return "torch", f"{name} is used as TORCH_CUDA_ARCH_LIST", False
        if name in self.dotted:
            return (
                "torch",
                "read as a TORCH_CUDA_ARCH_LIST-style list (dotted entries: SASS unless +PTX)",
                True,
            )
        return "cmake", "read as a CUDA_ARCHITECTURES-style list (SASS and PTX unless -real/-virtual)", True

    def list_gate(
        self, command: Command, name: str, values: tuple[Argument, ...], frames: tuple[Frame, ...]
    ) -> None:
        consumers = self.src_uses.get(name, [])
        if not (is_arch_variable(name) or consumers or name in self.cmake_uses or name in self.torch_uses):
            return
        bindings = self.bindings(frames)
        literal: list[str] = []
        unresolved: list[str] = []
        known: list[str] = []
        for arg in values:
            if arg.quoting != "bracket" and "$<" in arg.value:
                # $<$<CONFIG:Debug>:80-real>: entries under a generator-time condition.
                if "$<>" not in unresolved:
                    unresolved.append("$<>")
                continue
            for value in substitute(arg.value, bindings) if arg.quoting != "bracket" else [arg.value]:
                for item in list_items([value]):
                    refs = references(item) if arg.quoting != "bracket" else []
                    if not refs:
                        literal.append(item)
                        continue
                    for ref in refs:
                        if ref == name:
                            continue  # set(X ${X} 90a): appends to itself
                        bucket = known if ref in self.definitions else unresolved
                        if ref not in bucket:
                            bucket.append(ref)
        if not literal:
            return
        upper = name.upper()
        style, why, inferred = self.style_of(name)
        if style == "torch":
            named = {k.lower(): v for k, v in arch_data().torch_named_arches.items()}
            literal = [
                part
                for item in literal
                for part in (named[item.lower()].split(";") if item.lower() in named else [item])
            ]
        entries: list[ArchEntry] = []
        special: list[str] = []
        bad: list[str] = []
        for item in literal:
            if (upper in CMAKE_LISTS or style == "cmake") and item.lower() in SPECIAL_VALUES:
                special.append(item.lower())
                continue
            entry = parse_entry(item, style)
            if entry is None:
                bad.append(item)
            else:
                entries.append(entry)
        if not entries and not special:
            return  # nothing here names a CUDA architecture (gfx90a, x86_64, ON …): not an arch list
        if bad:
            self.skip(
                command.line,
                f"{name}: no known CUDA architecture is named {shorten(bad)}; left out of the gate",
            )
        admitted = ArchSet.none()
        for entry in entries:
            admitted |= admitted_by(entry, style)
        unknown = ArchSet.none()
        depends: list[str] = []
        evidence: list[Evidence] = []
        if entries:
            described = [describe_entry(e, style) for e in entries]
            evidence.append(
                Evidence(
                    "; ".join(described[:SHOWN_ITEMS]) + (" …" if len(described) > SHOWN_ITEMS else ""),
                    self.path,
                    command.line,
                )
            )
        if why:
            evidence.append(Evidence(why, self.path, command.line))
        for value in special:
            more, unsure, assumption = special_admitted(value)
            admitted |= more
            unknown |= unsure
            depends.append(assumption)
        for ref in unresolved:
            unknown = ~admitted
            depends.append(
                f"the contents of {ref}, not set in this file" if ref != "$<>" else "a generator expression"
            )
        for ref in known:
            evidence.append(
                Evidence(
                    f"also takes {ref}, an arch list set in this file (its own gate)", self.path, command.line
                )
            )
        for consumer in consumers:
            if consumer.extensions:
                unknown = ~admitted
                inferred = True
                depends.extend(extension_deps(consumer))
            src = consumer.command
            evidence.append(
                Evidence(f"{name} is the source list of {truncate(src.render())}", self.path, src.line)
            )
            evidence.extend(consumer.evidence)
            depends.extend(consumer.deps)
        else_kind = next((c.else_kind for c in consumers if c.else_kind is ElseKind.ERROR), ElseKind.NONE)
        self.new_gate(
            command,
            frames,
            admitted,
            unknown,
            evidence=evidence,
            depends_on=depends,
            confidence=Confidence.INFERRED if inferred or unresolved else Confidence.EXACT,
            else_kind=else_kind,
            # What the if(OUT) blocks of the intersections taking this list build (their -D flags
            # stay with the block: this gate admits no block of its own).
            builds=dict.fromkeys(b for c in consumers for b in c.builds),
        )

    def flag_gate(self, command: Command, frames: tuple[Frame, ...]) -> None:
        bindings = self.bindings(frames)
        texts: list[str] = []
        for arg in command.args:
            texts.extend(substitute(arg.value, bindings))
        text = " ".join(t.replace(";", " ") for t in texts)
        entries: list[ArchEntry] = []
        unresolved: list[str] = []
        special: list[str] = []

        def code_entries(arch: str, codes: str) -> None:
            for code in re.split(r"[\s,]+", codes.strip("[]\"'\\ ")):
                if not code:
                    continue
                if "$" in code or "$" in arch:
                    unresolved.append(f"arch={arch},code={code}")
                    continue
                entry = parse_entry(code, "torch")  # sm_/lto_ name SASS, compute_ PTX
                if entry is not None and GPU_NAME.match(code):
                    entries.append(entry)

        for m in GENCODE.finditer(text):
            code_entries(m.group(1), m.group(2))
        codes = [m.group(1) for m in CODE_FLAG.finditer(text)]
        for m in ARCH_FLAG.finditer(text):
            value = m.group(1)
            if value.lower() in SPECIAL_VALUES:
                special.append(value.lower())
            elif "$" in value:
                unresolved.append(value)
            elif GPU_NAME.match(value):
                if codes:
                    for code in codes:
                        code_entries(value, code)
                    continue
                # -arch=sm_90a alone is -arch=compute_90a -code=sm_90a,compute_90a; -arch=compute_90 is PTX.
                entry = parse_entry(value, "torch")
                if entry is not None:
                    entries.append(ArchEntry(value, entry.arch, entry.cc, entry.sass, True, entry.note))
        if unresolved and not entries and not special:
            if not any(f.in_function for f in frames):
                self.skip(command.line, f"architecture flag built from variables: {shorten(unresolved)}")
            return
        if not entries and not special:
            return
        admitted = ArchSet.none()
        for entry in entries:
            admitted |= compile_admitted(entry)
        unknown = ArchSet.none()
        depends: list[str] = []
        for value in special:
            more, unsure, assumption = special_admitted(value)
            admitted |= more
            unknown |= unsure
            depends.append(f"-arch={assumption}")
        if unresolved:
            unknown = ~admitted
            depends.append(f"flags built from variables: {shorten(unresolved)}")
        described = [describe_entry(e, "cmake") for e in entries]
        evidence = (
            [
                Evidence(
                    "; ".join(described[:SHOWN_ITEMS]) + (" …" if len(described) > SHOWN_ITEMS else ""),
                    self.path,
                    command.line,
                )
            ]
            if entries
            else []
        )
        self.new_gate(
            command,
            frames,
            admitted,
            unknown,
            evidence=evidence,
            depends_on=depends,
            confidence=Confidence.INFERRED if unresolved else Confidence.EXACT,
        )
