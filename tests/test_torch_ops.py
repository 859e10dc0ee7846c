"""Capability passed from Python into C++ through a torch custom op: ``tests/fixtures/cpp_runtime/opslib``.

The C-family detector publishes each query op the C++ registers (`TorchOp`: what the function
returns per target with its ``int`` parameter bound to the capability, and the branches on that
parameter); the Python detector resolves ``torch.ops._C.<op>(capability)`` to that result, so the
callers' conditions are gates, and reports the C++ branches with the Python calls that decide
them. Every line where a gate must start is marked ``gate: <kind> admits <capabilities>``.
"""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path

import pytest

import liftgate
from liftgate.arch.core import ArchSet
from liftgate.detect.cpp_ops import find_registrations
from liftgate.detect.runtime_arch import archs_for_capabilities
from liftgate.model import Gate, GateKind, Report

TREE = Path(__file__).parent / "fixtures" / "cpp_runtime" / "opslib"
MARK = re.compile(r"(?://|#)\s*gate:\s*(?P<kind>[\w-]+) admits (?P<caps>[\d. ]+)$")
NOT_A_GATE = re.compile(r"(?://|#)\s*not a gate\b")
SOURCES = [
    "csrc/fp4/nvfp4_entry.cu",
    "csrc/torch_bindings.cpp",
    "opslib/_custom_ops.py",
    "opslib/nvfp4_utils.py",
]


def caps(text: str) -> ArchSet:
    return archs_for_capabilities(tuple(int(x) for x in c.split(".")) for c in text.split())  # type: ignore[misc]


@cache
def report() -> Report:
    return liftgate.scan([str(TREE)], ["sm_120"], use_cache=False)


def gates_in(path: str, found: Report | None = None) -> list[Gate]:
    return [g for g in (found or report()).gates if g.location.path == path and g.kind is not GateKind.CMAKE]


def test_every_source_is_checked() -> None:
    on_disk = {p.relative_to(TREE).as_posix() for p in TREE.rglob("*") if p.suffix in (".cu", ".cpp", ".py")}
    assert on_disk - {"opslib/__init__.py"} == set(SOURCES)


@pytest.mark.parametrize("path", SOURCES)
def test_markers(path: str) -> None:
    lines = (TREE / path).read_text().splitlines()
    wanted = {n: m for n, text in enumerate(lines, 1) if (m := MARK.search(text))}
    unwanted = {n for n, text in enumerate(lines, 1) if NOT_A_GATE.search(text)}
    found = {g.location.line: g for g in gates_in(path)}
    assert sorted(found) == sorted(wanted), [
        (g.location.line, g.kind.value, g.condition) for g in found.values()
    ]
    assert not set(found) & unwanted
    for line, mark in wanted.items():
        gate = found[line]
        assert gate.kind.value == mark.group("kind"), (line, gate.kind)
        assert gate.admitted == caps(mark.group("caps")), (line, gate.admitted.render())
        assert gate.unknown == ArchSet.none(), (line, gate.unknown.render())


def test_the_cpp_branch_names_the_op_and_the_python_that_passes_the_capability() -> None:
    (branch,) = [g for g in gates_in("csrc/fp4/nvfp4_entry.cu") if g.location.line == 12]
    said = [e.render() for e in branch.evidence]
    assert any("scaled_mm_supports_fp4 is parametric" in s for s in said)
    assert (
        "scaled_mm_supports_fp4() is registered as torch op scaled_mm_supports_fp4 at csrc/torch_bindings.cpp:9"
        in said
    )
    assert "torch.ops._C.scaled_mm_supports_fp4(cap) at opslib/_custom_ops.py:7" in said
    assert "called as ops.scaled_mm_supports_fp4(capability) at opslib/nvfp4_utils.py:11" in said
    assert any("ENABLE_NVFP4_SM120 is passed by the build" in s for s in said)


def test_the_python_caller_names_the_cpp_function_it_reaches() -> None:
    (caller,) = [g for g in gates_in("opslib/nvfp4_utils.py") if g.location.line == 15]
    said = [e.render() for e in caller.evidence]
    assert (
        "torch op scaled_mm_supports_fp4 runs the C++ scaled_mm_supports_fp4() with cuda_device_capability "
        "= the capability at csrc/fp4/nvfp4_entry.cu:3"
    ) in said


def test_an_op_passed_something_else_reports_nothing() -> None:
    """``fp4_tile_n(num_experts)`` is a query op with an int parameter, but its callers pass a count:
    its branch on that parameter is never a gate, and the Python caller learns nothing."""
    assert not [g for g in gates_in("csrc/fp4/nvfp4_entry.cu") if "num_experts" in g.condition]


def test_without_the_cpp_the_python_learns_nothing(tmp_path: Path) -> None:
    tree = tmp_path / "opslib"
    shutil.copytree(TREE, tree, ignore=shutil.ignore_patterns("csrc"))
    found = liftgate.scan([str(tree)], ["sm_120"], use_cache=False)
    assert not [
        g for g in found.gates if g.location.path == "opslib/nvfp4_utils.py" and g.location.line == 15
    ]


def test_a_cpp_change_reaches_the_python_gates_through_the_cache(tmp_path: Path) -> None:
    tree = tmp_path / "opslib"
    shutil.copytree(TREE, tree)
    cache_dir = str(tmp_path / "cache")
    cold = liftgate.scan([str(tree)], ["sm_120"], cache_dir=cache_dir)
    warm = liftgate.scan([str(tree)], ["sm_120"], cache_dir=cache_dir)
    assert cold.gates == warm.gates == report().gates
    entry = tree / "csrc/fp4/nvfp4_entry.cu"
    entry.write_text(
        entry.read_text().replace("cuda_device_capability < 130", "cuda_device_capability < 121")
    )
    changed = liftgate.scan([str(tree)], ["sm_120"], cache_dir=cache_dir)
    (caller,) = [g for g in gates_in("opslib/nvfp4_utils.py", changed) if g.location.line == 15]
    assert caller.admitted == caps("10.0 10.3 12.0")


def test_registrations_are_read_from_the_schema_and_the_impl() -> None:
    text = """
    TORCH_LIBRARY(_C, m) {
      m.def("supports(int cap) -> bool");
      m.impl("supports", torch::kCUDA, &ns::supports);
      m.def("tile(Tensor a, int n, int? k=None) -> int");
      m.impl("tile", TORCH_BOX(&tile_impl));
      m.def("run(Tensor a) -> ()");
      m.impl("run", &run);
      m.def("unbound(int cap) -> bool");
    }
    """
    regs = find_registrations({"b.cpp": text})
    assert [(r.op, r.function, r.int_positions()) for r in regs] == [
        ("supports", "supports", (0,)),
        ("tile", "tile_impl", (1,)),
    ]
    assert regs[0].line == 4


def test_the_cpp_branches_are_linked_to_the_python_gates_that_decide_them() -> None:
    from liftgate.chain import find_chains
    from liftgate.model import Relation

    branches = [
        g
        for g in gates_in("csrc/fp4/nvfp4_entry.cu")
        if g.kind is GateKind.CPP_RUNTIME and g.location.line in (8, 12)
    ]
    by_line = {(g.location.path, g.location.line): g.id for g in report().gates}
    deciding = {by_line[("opslib/_custom_ops.py", 7)], by_line[("opslib/nvfp4_utils.py", 11)]}
    assert branches and all(set(g.decided_at) == deciding for g in branches)
    # Chains start at the gates that shut a target out: sm_110 passes the C++ tests as written, but
    # no build for it passes the flags, so the op is false there.
    chained = find_chains(liftgate.scan([str(TREE)], ["sm_110"], use_cache=False), judge=False)
    assert chained.chains is not None
    for root in deciding:
        (chain,) = [c for c in chained.chains if c.root_id == root]
        assert {link.gate_id for link in chain.links if link.relation is Relation.OP} == {
            g.id for g in branches
        }


def test_a_helper_of_the_file_called_with_the_capability_is_a_parametric_gate() -> None:
    """``fp4_quant_sm_supported(sm)`` (vLLM's mxfp4_experts_quant_sm_supported): the helper's own
    test of its parameter is a gate, with the C++ call that passes the capability."""
    (helper,) = [g for g in gates_in("csrc/fp4/nvfp4_entry.cu") if g.condition == "cap >= 100 && cap < 120"]
    said = [e.render() for e in helper.evidence]
    assert said[0] == "called as fp4_quant_sm_supported(sm) at csrc/fp4/nvfp4_entry.cu:34"
    assert any(t.startswith("cudaDeviceGetAttribute(cudaDevAttrComputeCapabilityMajor)") for t in said)
    assert not helper.decided_at  # decided in C++, not through a torch op


def test_many_registrations_are_read_in_one_pass() -> None:
    """Line numbers are counted once per file, not once per match (a crafted file with a hundred
    thousand registrations would otherwise count its newlines a hundred thousand times)."""
    lines = [f'  m.def("op{k}(int cap) -> bool");\n  m.impl("op{k}", &op{k});' for k in range(50_000)]
    regs = find_registrations({"b.cpp": "TORCH_LIBRARY(_C, m) {\n" + "\n".join(lines) + "\n}\n"})
    assert len(regs) == 256  # at most MAX_OPS walked per package
    assert regs[0].op == "op0" and regs[0].line == 3 and regs[1].line == 5


def test_a_branch_found_through_the_op_and_through_a_cpp_caller_is_one_gate(tmp_path: Path) -> None:
    """The op's function is also called from C++ with the capability: both readings find the
    same branches (same ids), and the report holds each once, with the Python calls that decide it."""
    tree = tmp_path / "opslib"
    shutil.copytree(TREE, tree)
    entry = tree / "csrc/fp4/nvfp4_entry.cu"
    entry.write_text(
        entry.read_text()
        + "\nvoid fp4_gemm() {\n  int major, minor;\n"
        + "  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);\n"
        + "  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);\n"
        + '  TORCH_CHECK(scaled_mm_supports_fp4(major * 10 + minor), "no fp4");\n}\n'
    )
    found = liftgate.scan([str(tree)], ["sm_120"], use_cache=False)
    ids = [g.id for g in found.gates]
    assert len(ids) == len(set(ids))
    (branch,) = [g for g in gates_in("csrc/fp4/nvfp4_entry.cu", found) if g.location.line == 12]
    assert branch.decided_at and any(
        e.text.startswith("called as scaled_mm_supports_fp4(") for e in branch.evidence
    )


def test_ops_keep_their_namespace_and_python_prefers_its_own_package() -> None:
    from liftgate.detect.py_models import _ops_for
    from liftgate.model import TorchOp

    text = """
    TORCH_LIBRARY(_C, m) {
      m.def("supports(int cap) -> bool");
      m.impl("supports", &c_supports);
    }
    TORCH_LIBRARY(_moe_C, m) {
      m.def("supports(int cap) -> bool");
      m.impl("supports", &moe_supports);
    }
    TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
      ops.def("other(int cap) -> bool");
      ops.impl("other", &other);
    }
    """
    regs = find_registrations({"b.cpp": text})
    assert [(r.namespace, r.op, r.function) for r in regs] == [
        ("_C", "supports", "c_supports"), ("_moe_C", "supports", "moe_supports"), (None, "other", "other")
    ]  # fmt: skip

    def op(package: str, namespace: str | None) -> TorchOp:
        none = ArchSet.none()
        return TorchOp(
            package, "1", "supports", "f", "a.cu", 1, "cap", 0, none, none, ("b.cpp", 1), (), namespace
        )

    ops = [op("vllm", "_C"), op("vllm", "_moe_C"), op("other", None)]
    assert _ops_for(ops, "torch.ops._moe_C.supports", "vllm") == [ops[1]]
    assert _ops_for(ops, "torch.ops._C.supports", "other") == [ops[2]]
    assert _ops_for(ops, "torch.ops.sgl_kernel.supports", "sglang") == [ops[2]]
    assert (
        _ops_for([ops[0], op("sgl", None)], "torch.ops._C.supports", "sglang") == []
    )  # two packages: neither


def test_a_helper_called_with_the_capability_keeps_every_test_of_its_parameter(tmp_path: Path) -> None:
    """Two tests of one text in one function (the second after the parameter is reassigned) are
    two gates with their own ids."""
    (tmp_path / "a.cu").write_text(
        "#include <cuda_runtime.h>\nint get_sm() {\n  int major, minor;\n"
        "  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);\n"
        "  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);\n"
        "  return major * 10 + minor;\n}\n"
        "void f(int sm) {\n  if (sm >= 90) { return; }\n  sm = get_sm() + 1;\n  if (sm >= 90) { return; }\n}\n"
        "void g() { f(get_sm()); }\n"
    )
    found = liftgate.scan([str(tmp_path)], ["sm_90"], use_cache=False)
    assert sorted(g.location.line for g in found.gates) == [9, 11]
    assert len({g.id for g in found.gates}) == 2
