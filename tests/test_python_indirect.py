"""Indirect py-runtime gates: capability that reaches a condition through locals stored in ``self.``
attributes, a platform object chosen at run time, parameters filled by callers, module flags,
globals a function rebinds, and the control flow (issue 18).

``tests/fixtures/python/indirect`` is a vLLM-shaped tree; every condition in it carries a marker:
``# gate: 9.0 10.0`` where a gate admitting exactly those capabilities must start, ``# not a
gate: why`` where none may. `test_markers` holds each file to its marks; the other tests check
what the gates say (evidence naming the call site, the attribute, the chosen class).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from liftgate.detect.py_runtime_objects import parse_objects, runtime_objects
from liftgate.detect.python import detect_py_runtime, source_from_file
from liftgate.detect.runtime_arch import archs_for_capabilities
from liftgate.model import Confidence, Gate

TREE = Path(__file__).parent / "fixtures" / "python" / "indirect"
_GATE = re.compile(r"#\s*gate:\s*([\d. ]+)$")
_NOT = re.compile(r"#\s*not a gate\b")


def paths() -> list[str]:
    return sorted(p.relative_to(TREE).as_posix() for p in TREE.rglob("*.py"))


@cache
def analysis(exclude: tuple[str, ...] = ()) -> tuple[Gate, ...]:
    sources = [
        source_from_file("vllm", "0.0.1", path, str(TREE / path)) for path in paths() if path not in exclude
    ]
    gates, skips = detect_py_runtime(sources)
    assert skips == []
    return tuple(gates)


def gates_in(path: str, exclude: tuple[str, ...] = ()) -> list[Gate]:
    return [g for g in analysis(exclude) if g.location.path == path]


def marks(path: str) -> tuple[dict[int, frozenset[tuple[int, int]]], set[int]]:
    wanted: dict[int, frozenset[tuple[int, int]]] = {}
    unwanted: set[int] = set()
    for number, line in enumerate((TREE / path).read_text().splitlines(), start=1):
        if (m := _GATE.search(line)) is not None:
            caps = frozenset(tuple(int(x) for x in cc.split(".")) for cc in m.group(1).split())
            wanted[number] = caps  # type: ignore[assignment]
        elif _NOT.search(line):
            unwanted.add(number)
    return wanted, unwanted


def admitted_caps(gate: Gate) -> frozenset[tuple[int, int]]:
    return frozenset(a.cc for a in gate.admitted if a.variant == "")


@pytest.mark.parametrize("path", paths())
def test_markers(path: str) -> None:
    wanted, unwanted = marks(path)
    gates = gates_in(path)
    found = {g.location.span.start: admitted_caps(g) for g in gates}
    assert found == wanted
    assert len(gates) == len(wanted)
    assert not {n for g in gates for n in range(g.location.span.start, g.location.span.end + 1)} & unwanted
    for gate in gates:
        assert gate.confidence is Confidence.EXACT, (gate.location.line, gate.evidence)
        assert gate.admitted == archs_for_capabilities(sorted(admitted_caps(gate)))


def evidence(gate: Gate) -> str:
    return "\n".join(f"{e.text} at {e.path}:{e.line}" for e in gate.evidence)


def gate_at(path: str, line: int, exclude: tuple[str, ...] = ()) -> Gate:
    (gate,) = [g for g in gates_in(path, exclude) if g.location.span.start == line]
    return gate


def line_of(path: str, text: str) -> int:
    lines = (TREE / path).read_text().splitlines()
    (number,) = [i for i, line in enumerate(lines, start=1) if text in line]
    return number


def test_attribute_gate_follows_the_local_it_was_set_from() -> None:
    """vLLM #49921: `self.allow_bf16x3_router_gemm` read in forward() comes from the local
    `is_blackwell` of __init__, not from the word "blackwell" (which would admit 11.x/12.x)."""
    path = "vllm/layers/router.py"
    gate = gate_at(path, line_of(path, "if self.allow_bf16x3_router_gemm and x.dtype"))
    assert admitted_caps(gate) == {(10, 0), (10, 3)}
    text = evidence(gate)
    assert "self.allow_bf16x3_router_gemm = not bias and self.weight.dtype == torch.float32" in text
    assert "is_device_capability_family(100)" in text
    assert "reads as" not in text  # no name was read


def test_platform_method_is_read_from_the_chosen_class() -> None:
    """vLLM #54125: `current_platform.support_deep_gemm()` is CudaPlatformBase's own definition
    (the ROCm override and the interface's default are not what an NVIDIA GPU runs)."""
    path = "vllm/deep_gemm.py"
    gate = gate_at(path, line_of(path, "if not is_deep_gemm_supported():"))
    text = evidence(gate)
    assert "current_platform is vllm.platforms.cuda.CudaPlatform on an NVIDIA GPU" in text
    assert "support_deep_gemm" in text
    assert "is_deep_gemm_supported() returns" in text


def test_without_the_platform_source_the_method_is_unknown_not_guessed() -> None:
    """Scanned without vLLM's platform modules, `support_deep_gemm()` is unknown: no gate appears
    from its name, and the modelled capability calls still work."""
    exclude = ("vllm/platforms/cuda.py", "vllm/platforms/__init__.py")
    assert gates_in("vllm/deep_gemm.py", exclude) == []
    path = "vllm/layers/router.py"
    kept = gate_at(path, line_of(path, "if self.allow_bf16x3_router_gemm and x.dtype"), exclude)
    assert admitted_caps(kept) == {(10, 0), (10, 3)}


def test_parameter_gate_names_the_call_site_that_decides_it() -> None:
    """PR #43814: the op wrapper's branch on its parameter is a gate, read with the capability its
    caller computed (`capability_tuple.to_int()`), and the caller's `return` is one too."""
    path = "vllm/_custom_ops.py"
    gate = gate_at(path, line_of(path, "if outside:"))
    text = evidence(gate)
    assert "called as ops.cutlass_group_gemm_supported(capability) at vllm/w8a8_utils.py:" in text
    assert "get_device_capability()" in text
    caller = gate_at("vllm/w8a8_utils.py", line_of("vllm/w8a8_utils.py", "return ops.cutlass_group_gemm"))
    assert admitted_caps(caller) == {(9, 0), (10, 0), (10, 3)}


def test_parameter_followed_two_frames_down() -> None:
    path = "vllm/_custom_ops.py"
    gate = gate_at(path, line_of(path, "if cuda_device_capability == 90:"))
    assert "called as tile_for(cuda_device_capability, k) at vllm/_custom_ops.py:" in evidence(gate)


def test_gates_are_the_same_whatever_the_file_order() -> None:
    forward = analysis()
    sources = [source_from_file("vllm", "0.0.1", p, str(TREE / p)) for p in reversed(paths())]
    backward, _ = detect_py_runtime(sources)
    assert [(g.id, g.admitted, g.evidence) for g in forward] == [
        (g.id, g.admitted, g.evidence) for g in backward
    ]


def test_runtime_object_data_is_checked() -> None:
    shipped = runtime_objects()
    assert shipped[("vllm.platforms", "current_platform")].cls == "vllm.platforms.cuda.CudaPlatform"
    assert all(obj.source for obj in shipped.values())
    entry = {"module": "m", "name": "o", "class": "m.C", "source": "m.py"}
    with pytest.raises(ValueError, match="listed twice"):
        parse_objects({"schema_version": 1, "objects": [entry, entry]})
    with pytest.raises(ValueError, match="dotted class"):
        parse_objects({"schema_version": 1, "objects": [{**entry, "class": "C"}]})
    with pytest.raises(ValueError, match="schema_version"):
        parse_objects({"schema_version": 2, "objects": []})


def caps_of(archs: object) -> frozenset[tuple[int, int]]:
    return frozenset(a.cc for a in archs if a.variant == "")  # type: ignore[attr-defined]


def test_runtime_choice_on_an_unknown_receiver_lists_every_implementation() -> None:
    """Issue 18 item 4: `quant_config.get_min_capability()` on a config read at run time. Every
    implementation in the scan is a candidate (the abstract one is not); the gate admits what all
    of them admit, leaves unknown what only some do, and lists each with its own admitted set."""
    path = "vllm/choice/verify.py"
    gate = gate_at(path, line_of(path, "if capability < quant_config.get_min_capability():"))
    assert [(c.implementation, c.path) for c in gate.choices] == [
        ("Fp8Config.get_min_capability", "vllm/choice/quant.py"),
        ("AWQConfig.get_min_capability", "vllm/choice/quant.py"),
        ("NvFp4Config.get_min_capability", "vllm/choice/quant.py"),
    ]
    by_name = {c.implementation.split(".")[0]: caps_of(c.admitted) for c in gate.choices}
    assert min(by_name["Fp8Config"]) == (8, 9) and (8, 6) not in by_name["Fp8Config"]
    assert min(by_name["AWQConfig"]) == (7, 5)
    assert min(by_name["NvFp4Config"]) == (10, 0)
    assert caps_of(gate.unknown) == {(7, 5), (8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0)}
    assert {(7, 0), (7, 2)}.isdisjoint(caps_of(gate.admitted) | caps_of(gate.unknown))
    text = evidence(gate)
    assert "quant_config.get_min_capability: the class is chosen at run time; 3 implementations" in text
    assert "NvFp4Config.get_min_capability: admits sm_100" in text
    assert [c.line for c in gate.choices] == [
        line_of("vllm/choice/quant.py", "return 89") - 1,
        line_of("vllm/choice/quant.py", "return 75") - 1,
        line_of("vllm/choice/quant.py", "return 100") - 1,
    ]


def test_runtime_choice_survives_an_assignment_and_a_tuple_unpacking() -> None:
    """The choice is fixed for the whole walk of the function: `needed = x.get_min_capability()`
    read two lines later, and `ok, _ = kernel.is_supported()`, are split the same way."""
    path = "vllm/choice/verify.py"
    assigned = gate_at(path, line_of(path, ">= needed"))
    assert len(assigned.choices) == 3
    unpacked = gate_at(path, line_of(path, "return ok"))
    assert [c.implementation for c in unpacked.choices] == [
        "CutlassFp4Kernel.is_supported", "MarlinFp4Kernel.is_supported",
    ]  # fmt: skip
    assert caps_of(unpacked.unknown) == {(8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0)}


def test_loop_over_a_list_of_classes_is_a_runtime_choice() -> None:
    """`for kernel in _FP4_KERNELS: kernel.is_supported()`: each class in the list is a candidate;
    where the candidates agree (both Hopper kernels admit 9.0+), the gate is plain, with no choices."""
    path = "vllm/choice/kernels.py"
    split = gate_at(path, line_of(path, "if not supported:"))
    assert [c.implementation for c in split.choices] == [
        "CutlassFp4Kernel.is_supported", "MarlinFp4Kernel.is_supported",
    ]  # fmt: skip
    assert caps_of(split.choices[1].admitted) >= {(8, 0), (9, 0), (12, 1)}
    agreed = gate_at(path, line_of(path, "if kernel.is_usable():"))
    assert agreed.choices == ()
    assert agreed.unknown.names() == []


def test_runtime_choice_in_json_facts() -> None:
    from liftgate.model import Report
    from liftgate.report.json_format import facts_to_dict

    path = "vllm/choice/verify.py"
    gate = gate_at(path, line_of(path, "if capability < quant_config.get_min_capability():"))
    report = Report(
        targets=(), packages=(), gates=(gate,), skips=(), files_scanned=0, elapsed_s=0.0, cuda_version=(13, 0)
    )
    facts = facts_to_dict(gate, report)
    assert [c["implementation"] for c in facts["choices"]] == [c.implementation for c in gate.choices]
    assert "sm_100" in facts["choices"][2]["admitted"] and "sm_90" not in facts["choices"][2]["admitted"]


def test_implementations_called_with_the_capability_are_a_choice() -> None:
    """`backend_cfg.supported(arch)`: no implementation's own text mentions the device, so the
    lookup alone is not a choice; the call passing the capability makes it one, and each
    implementation's branch on its parameter is a parametric gate naming that call."""
    path = "vllm/choice/backends.py"
    gate = gate_at(path, line_of(path, "if not backend_cfg.supported(arch):"))
    assert [c.implementation for c in gate.choices] == [
        "TrtllmMoeConfig.supported", "CutlassMoeConfig.supported", "TritonMoeConfig.supported",
    ]  # fmt: skip
    assert caps_of(gate.choices[2].admitted) == caps_of(gate.admitted | gate.unknown)
    parametric = gate_at(path, line_of(path, "return arch in (100, 103)"))
    assert "called as backend_cfg.supported(arch) at vllm/choice/backends.py:" in evidence(parametric)


def test_choices_survive_the_scan_cache_and_explain_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A warm scan (from the cache) gives the same choices as the cold one, and `explain` says,
    per target, which implementations admit it and which exclude it."""
    from liftgate.cli.main import main
    from liftgate.scan import scan

    cache_dir = str(tmp_path / "cache")
    cold = scan([str(TREE)], ["sm_75", "sm_121"], cache_dir=cache_dir)
    warm = scan([str(TREE)], ["sm_75", "sm_121"], cache_dir=cache_dir)
    pick = [g for g in cold.gates if g.location.path == "vllm/choice/verify.py" and g.choices]
    assert pick and [(g.id, g.choices) for g in pick] == [
        (g.id, g.choices) for g in warm.gates if g.location.path == "vllm/choice/verify.py" and g.choices
    ]
    gate = min(pick, key=lambda g: g.location.line)
    assert main(["explain", gate.id, str(TREE), "-t", "sm_75", "-t", "sm_121", "--cache-dir", cache_dir]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "sm_75: UNKNOWN" in out
    assert "chosen at run time: 1 implementation admits it: AWQConfig.get_min_capability" in out
    assert (
        "chosen at run time: 2 implementations exclude it: Fp8Config.get_min_capability, "
        "NvFp4Config.get_min_capability" in out
    )
    assert "chosen at run time: 3 implementations admit it" in out  # sm_121


def test_a_methods_own_cls_is_the_class_or_any_subclass() -> None:
    """vLLM's `AttentionBackend.validate_configuration`: `cls.supports_head_size(...)` in the
    classmethod's own walk may reach any subclass's override. The candidates are the class itself
    (its default) and each subclass overriding a method the function looks up on `cls`; a class
    outside the family with a method of the same name (`OtherFamily`) is not one."""
    path = "vllm/choice/family.py"
    gate = gate_at(path, line_of(path, "if not cls.supports_head_size(head_size):"))
    assert [c.implementation for c in gate.choices] == ["AttentionBackend", "FlashAttentionBackend"]
    assert caps_of(gate.choices[0].admitted) == caps_of(gate.admitted | gate.unknown)
    assert min(caps_of(gate.unknown)) == (7, 0) and max(caps_of(gate.unknown)) == (8, 9)
    assert (
        "cls (AttentionBackend or a subclass): the class is chosen at run time; 2 implementations"
        in evidence(gate)
    )


def test_self_of_an_abstract_method_chooses_among_the_overrides() -> None:
    """`self.supports_current_device()` where the base only declares it: the overrides are the
    candidates, the abstract base is not one."""
    path = "vllm/choice/family.py"
    gate = gate_at(path, line_of(path, "if not self.supports_current_device():"))
    assert [c.implementation for c in gate.choices] == ["CutlassExperts", "TritonExperts"]
    assert caps_of(gate.admitted) == {(10, 0), (10, 3)}
    assert (12, 1) in caps_of(gate.unknown)


def test_a_parameter_annotated_with_a_class_chooses_within_its_family() -> None:
    """`kernel: type[_KernelT]` with `_KernelT = TypeVar(..., bound=LinearKernel)`, whose
    subclasses derive from `LinearKernel[int]`: only they are candidates (not `UnrelatedKernel`),
    and the abstract declaration is not one."""
    path = "vllm/choice/family.py"
    gate = gate_at(path, line_of(path, "if not kernel.is_available():"))
    assert [c.implementation for c in gate.choices] == [
        "MarlinKernel.is_available",
        "MacheteKernel.is_available",
    ]
    assert caps_of(gate.admitted) == {(10, 0), (10, 3), (11, 0), (12, 0), (12, 1)}
    assert caps_of(gate.unknown) == {(9, 0)}


def test_a_parameter_is_read_with_the_first_call_sites_in_the_code_not_the_first_walked() -> None:
    """At most eight call sites are kept per parameter: the first eight by place in the code, not
    the first eight the walk met. A module's top level is walked before its functions, so here the
    call in ``early`` (line 6) is met after the eight at the top level below it; it is the first in
    the code, so it is kept and named first (the first eight met were kept before)."""
    from liftgate.detect.python import PySource

    callers = (
        "import torch\nfrom pkg.core import pick\n\n\ndef early():\n"
        "    return pick(torch.cuda.get_device_capability()[0] * 10 + 1)\n\n\n"
        "CAP = torch.cuda.get_device_capability()\n"
        + "".join(f"X{k} = pick(CAP[0] * 10 + {k})\n" for k in range(1, 9))
    )
    files = {
        "pkg/core.py": "# a capability from torch.cuda.get_device_capability()\n"
        "def pick(cap):\n    if cap >= 100:\n        return 1\n    return 0\n",
        "pkg/callers.py": callers,
    }
    sources = [PySource("pkg", "1.0", path, text.encode) for path, text in files.items()]
    gates, skips = detect_py_runtime(sources)
    assert skips == []
    (gate,) = [g for g in gates if g.location.path == "pkg/core.py" and g.condition == "cap >= 100"]
    sites = [e.line for e in gate.evidence if e.text.startswith("called as pick(")]
    assert sites == [6, 10, 11]
