"""The py-runtime detector: Python conditions whose truth depends on the device's compute capability.

``tests/fixtures/python/minipkg`` is laid out like an inference engine (SGLang-style probes in
``utils.py`` and ``runtime_context.py``, vLLM-style checks in ``platform.py``, layers that use the
probes through imports). Every condition in it carries a marker comment: ``# gate`` on the line
where liftgate must report a gate, ``# not a gate: why`` where it must not. `test_markers` holds
the whole package to those marks; the other tests check what a gate says (admitted capabilities,
else kinds, confidence, evidence, dependencies, ids), on the fixture and on small inline sources.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import liftgate
from liftgate.arch.core import ArchSet
from liftgate.detect.python import PySource, PythonAnalyzer, detect_py_runtime, source_from_file
from liftgate.detect.runtime_arch import archs_for_capabilities, capabilities
from liftgate.model import Confidence, ElseKind, Gate, GateKind, Skip, Status

PACKAGE = Path(__file__).parent / "fixtures" / "python" / "minipkg"
SKIPPED = {"minipkg/legacy.py", "minipkg/protos_pb2.py", "minipkg/_tables.py"}
# A Python 2 module of the package, kept here rather than in the fixture tree so that ruff can lint it.
LEGACY_PATH = "minipkg/legacy.py"
LEGACY = """\
# Python 2 helper kept for old deployments.
import torch

def report():
    major, minor = torch.cuda.get_device_capability()
    if major >= 9:
        print "hopper or newer"
"""


def fixture_paths() -> list[str]:
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py"))


@cache
def fixture_analysis() -> tuple[tuple[Gate, ...], tuple[Skip, ...]]:
    gates, skips = detect_py_runtime(fixture_sources())
    return tuple(gates), tuple(skips)


def fixture_sources() -> list[PySource]:
    sources = [source_from_file("minipkg", "0.3.1", path, str(PACKAGE / path)) for path in fixture_paths()]
    return [*sources, PySource("minipkg", "0.3.1", LEGACY_PATH, LEGACY.encode)]


def fixture_gates(path: str) -> list[Gate]:
    return [g for g in fixture_analysis()[0] if g.location.path == path]


def fixture_gate(path: str, condition: str, directive: str | None = None) -> Gate:
    found = [
        g
        for g in fixture_gates(path)
        if g.condition == condition and (directive is None or g.directive == directive)
    ]
    assert len(found) == 1, [(g.location.line, g.directive, g.condition) for g in fixture_gates(path)]
    return found[0]


def detect(files: dict[str, str]) -> tuple[list[Gate], list[Skip]]:
    sources = [
        PySource("pkg", "1.0", path, reader(textwrap.dedent(text).encode())) for path, text in files.items()
    ]
    return detect_py_runtime(sources)


def reader(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def gates_of(source: str, path: str = "pkg/mod.py") -> list[Gate]:
    gates, skips = detect({path: source})
    assert skips == []
    return gates


def one_gate(source: str) -> Gate:
    gates = gates_of(source)
    assert len(gates) == 1, [(g.location.line, g.directive, g.condition) for g in gates]
    return gates[0]


def caps(*wanted: tuple[int, int]) -> ArchSet:
    return archs_for_capabilities(wanted)


def caps_where(predicate: object) -> ArchSet:
    assert callable(predicate)
    return archs_for_capabilities(cc for cc in capabilities() if predicate(cc))


def evidence_text(gate: Gate) -> str:
    return "\n".join(step.render() for step in gate.evidence)


HOPPER = caps((9, 0))
SM100_FAMILY = caps((10, 0), (10, 3))  # every 10.x device
SM120_FAMILY = caps((12, 0), (12, 1))
BLACKWELL = caps((10, 0), (10, 3), (11, 0), (12, 0), (12, 1))


# ---------------------------------------------------------------------------
# Every fixture against its markers.

GATE_MARKER = re.compile(r"#\s*gate\b")
NOT_A_GATE_MARKER = re.compile(r"#\s*not a gate\b")


def marked_lines(path: str) -> tuple[set[int], set[int]]:
    lines = (PACKAGE / path).read_text().splitlines()
    wanted = {n for n, line in enumerate(lines, 1) if GATE_MARKER.search(line)}
    unwanted = {n for n, line in enumerate(lines, 1) if NOT_A_GATE_MARKER.search(line)}
    return wanted, unwanted


def test_every_fixture_file_has_markers_or_is_plain() -> None:
    assert "minipkg/layers.py" in fixture_paths()
    marked = [p for p in fixture_paths() if any(marked_lines(p))]
    assert set(marked) >= {
        "minipkg/dispatch.py",
        "minipkg/inferred.py",
        "minipkg/kernels.py",
        "minipkg/layers.py",
        "minipkg/near_miss.py",
        "minipkg/platform.py",
        "minipkg/utils.py",
        *(SKIPPED - {LEGACY_PATH}),
    }


@pytest.mark.parametrize("path", fixture_paths())
def test_markers(path: str) -> None:
    """The gates of each file start exactly on its ``# gate`` lines and cover no ``# not a gate`` line."""
    wanted, unwanted = marked_lines(path)
    gates = fixture_gates(path)
    assert {g.location.span.start for g in gates} == wanted
    assert len(gates) == len(wanted)  # one gate per marked line
    covering = {
        n for g in gates for n in range(g.location.span.start, g.location.span.end + 1) if n in unwanted
    }
    assert covering == set()
    for gate in gates:
        assert gate.kind is GateKind.PY_RUNTIME
        assert gate.id.startswith("py-")
        assert gate.location.package == "minipkg" and gate.location.version == "0.3.1"
        assert gate.admitted and gate.excluded  # a gate admits some capabilities, not all
        assert gate.unknown == ArchSet.none() and gate.host is None
        assert gate.evidence, gate.condition


def test_fixture_skips_generated_and_python2_modules_with_reasons() -> None:
    gates, skips = fixture_analysis()
    by_path = {s.path: s for s in skips}
    assert set(by_path) == SKIPPED
    assert "syntax error at line 7" in by_path["minipkg/legacy.py"].reason
    assert "Python 2" in by_path["minipkg/legacy.py"].reason
    assert "DO NOT EDIT" in by_path["minipkg/_tables.py"].reason
    assert "generated module" in by_path["minipkg/protos_pb2.py"].reason
    assert all(s.package == "minipkg" for s in skips)
    assert not any(g.location.path in SKIPPED for g in gates)
    assert len(gates) > 40  # the rest of the scan went on


# ---------------------------------------------------------------------------
# torch.cuda's capability, in every shape code gives it.


@pytest.mark.parametrize(
    ("setup", "condition", "admitted"),
    [
        ("cap = torch.cuda.get_device_capability()", "cap >= (9, 0)", caps_where(lambda cc: cc >= (9, 0))),
        ("", "torch.cuda.get_device_capability()[0] == 10", SM100_FAMILY),
        ("major, minor = torch.cuda.get_device_capability()", "major * 10 + minor >= 90", caps_where(lambda cc: cc >= (9, 0))),
        ("major, minor = torch.cuda.get_device_capability(); sm = major * 10 + minor", "sm // 10 in [10]", SM100_FAMILY),
        ("cap = torch.cuda.get_device_capability(0)", "cap[0] * 10 + cap[1] in (90, 100)", caps((9, 0), (10, 0))),
        ("", "torch.cuda.get_device_capability() < (8, 0)", caps_where(lambda cc: cc < (8, 0))),
        ("p = torch.cuda.get_device_properties(0)", "p.major == 12 and p.minor == 0", caps((12, 0))),
        ("", "torch.cuda.get_device_properties('cuda').major >= 9", caps_where(lambda cc: cc >= (9, 0))),
        ("major, minor = torch.cuda.get_device_capability()", 'f"sm_{major}{minor}" == "sm_90"', HOPPER),
        ("major, minor = torch.cuda.get_device_capability()", 'str(major) + str(minor) == "121"', caps((12, 1))),
        ("", 'getattr(torch.cuda, "get_device_capability")()[0] == 8', caps_where(lambda cc: cc[0] == 8)),
    ],
)  # fmt: skip
def test_torch_capability_shapes(setup: str, condition: str, admitted: ArchSet) -> None:
    gate = one_gate(f"import torch\n\ndef pick():\n    {setup}\n    if {condition}:\n        return 1\n")
    assert gate.condition == condition
    assert gate.admitted == admitted
    assert gate.confidence is Confidence.EXACT
    assert gate.depends_on == ()
    assert "get_device_" in evidence_text(gate)


def test_arch_list_membership_reads_the_device_arch_and_is_inferred() -> None:
    gate = one_gate(
        """\
        import torch

        def has_fa3():
            if "sm_90a" in torch.cuda.get_arch_list():
                return True
            return False
        """
    )
    assert gate.admitted == HOPPER
    assert gate.confidence is Confidence.INFERRED
    assert "get_arch_list()" in evidence_text(gate)
    negated = one_gate(
        'import torch\nif "sm_90a" not in torch.cuda.get_arch_list():\n    raise RuntimeError("no 9.0 build")\n'
    )
    assert negated.else_kind is ElseKind.ERROR
    assert negated.admitted == HOPPER  # a guard: what follows runs where sm_90a is in the list


def test_arch_list_holding_the_devices_own_arch_is_not_a_gate() -> None:
    """Whether torch was built for the running device depends on the build, not on which device it is."""
    source = """\
    import torch

    def built_for_device():
        major, minor = torch.cuda.get_device_capability()
        if f"sm_{major}{minor}" in torch.cuda.get_arch_list():
            return True
        return False
    """
    assert gates_of(source) == []


@pytest.mark.parametrize(
    ("condition", "admitted"),
    [
        ('"H100" in name', HOPPER),
        ('"H100" in name or "H200" in name', HOPPER),
        ('any(product in name for product in ("H100", "H20"))', HOPPER),
        ('"a100" in name.lower()', caps((8, 0))),
        ('name.startswith("NVIDIA H200")', HOPPER),
        ('"RTX 5090" in name', caps((12, 0))),
    ],
)
def test_device_name_substrings_admit_the_products_capability_inferred(
    condition: str, admitted: ArchSet
) -> None:
    gate = one_gate(
        f"import torch\n\ndef f():\n    name = torch.cuda.get_device_name()\n    if {condition}:\n        return 1\n"
    )
    assert gate.admitted == admitted
    assert gate.confidence is Confidence.INFERRED


@pytest.mark.parametrize(
    "condition",
    ['"B200" in torch.cuda.get_device_properties(0).name', '"b200" in props.name.lower()'],
)
def test_device_properties_name_is_inferred_too(condition: str) -> None:
    gate = one_gate(
        f"import torch\n\ndef f():\n    props = torch.cuda.get_device_properties(0)\n    if {condition}:\n        return 1\n"
    )
    assert gate.admitted == caps((10, 0))
    assert gate.confidence is Confidence.INFERRED


def test_device_name_gate_in_an_if_else_is_a_fallback() -> None:
    gate = one_gate(
        """\
        import torch

        def block_size():
            if "H100" in torch.cuda.get_device_name(0):
                size = 256
            else:
                size = 128
            return size
        """
    )
    assert gate.admitted == HOPPER
    assert gate.confidence is Confidence.INFERRED
    assert gate.else_kind is ElseKind.FALLBACK
    assert (gate.then_span.start, gate.else_span.start) == (5, 7)  # type: ignore[union-attr]


# ---------------------------------------------------------------------------
# vLLM's platform, NVML, CuPy and Triton.


def test_vllm_platform_checks() -> None:
    path = "minipkg/platform.py"
    has = fixture_gate(path, "current_platform.has_device_capability(90)")
    assert has.admitted == caps_where(lambda cc: cc >= (9, 0))
    assert has.else_kind is ElseKind.FALLBACK
    is_cap = fixture_gate(path, "current_platform.is_device_capability(100) and current_platform.is_cuda()")
    assert is_cap.admitted == caps((10, 0))  # is_device_capability is an exact match
    assert is_cap.directive == "return"
    assert is_cap.depends_on == ("assumed: current_platform.is_cuda()",)
    family = fixture_gate(path, "not current_platform.is_device_capability_family(100)")
    assert family.admitted == SM100_FAMILY  # a guard returning a fallback: admitted where the family holds
    assert family.else_kind is ElseKind.FALLBACK
    to_int = fixture_gate(path, "capability.to_int() >= 89")
    assert to_int.admitted == caps_where(lambda cc: cc >= (8, 9))
    chained = fixture_gate(path, "current_platform.get_device_capability().to_int() < 120")
    assert chained.admitted == caps_where(lambda cc: cc < (12, 0))
    for gate in (has, is_cap, family, to_int, chained):
        assert gate.confidence is Confidence.EXACT


def test_vllm_capability_as_version_string() -> None:
    gate = one_gate(
        """\
        from vllm.platforms import current_platform

        def tma_ok():
            capability = current_platform.get_device_capability()
            return capability.as_version_str() in ("9.0", "10.0")
        """
    )
    assert gate.admitted == caps((9, 0), (10, 0))


def test_nvml_cupy_and_triton() -> None:
    path = "minipkg/kernels.py"
    nvml = fixture_gate(path, "(major, minor) >= (8, 9)")
    assert nvml.admitted == caps_where(lambda cc: cc >= (8, 9))
    assert "nvmlDeviceGetCudaComputeCapability(handle)" in evidence_text(nvml)
    cupy_int = fixture_gate(path, "int(cupy.cuda.Device().compute_capability) >= 90")
    assert cupy_int.admitted == caps_where(lambda cc: cc >= (9, 0))
    cupy_str = fixture_gate(path, 'Device().compute_capability == "90"')
    assert cupy_str.admitted == HOPPER
    triton_arch = fixture_gate(path, 'target.backend == "cuda" and target.arch >= 100')
    assert triton_arch.admitted == caps_where(lambda cc: cc >= (10, 0))
    assert triton_arch.depends_on == ()  # the backend is modelled: "cuda" on every NVIDIA device
    stages = fixture_gate(path, "target.arch < 80", "conditional expression")
    assert stages.admitted == caps_where(lambda cc: cc < (8, 0))
    assert stages.else_kind is ElseKind.FALLBACK
    loop = fixture_gate(path, "block_m > 64 and capability < 9", "while")
    assert loop.admitted == caps_where(lambda cc: cc < (9, 0))
    assert loop.depends_on == ("assumed: block_m > 64",)


# ---------------------------------------------------------------------------
# SGLang's helpers: partial + lru_cache probes, get_device_sm, the PlatformContext.


def test_module_constant_from_an_imported_partial_probe() -> None:
    gate = fixture_gate("minipkg/layers.py", "_is_sm100 and tp_size == 4")
    assert gate.admitted == SM100_FAMILY
    assert gate.else_kind is ElseKind.FALLBACK
    assert gate.confidence is Confidence.EXACT
    assert "assumed: tp_size == 4" in gate.depends_on
    assert any("torch.version.cuda" in d for d in gate.depends_on)  # the probe's CUDA-version half
    text = evidence_text(gate)
    assert "_is_sm100 = is_sm100_supported() at minipkg/layers.py:12" in text
    assert "device_capability_majors=[10]" in text and "at minipkg/utils.py:" in text
    assert "get_device_sm() returns" in text
    assert "torch.cuda.get_device_capability()" in text


def test_platform_context_getattr_and_probe_table() -> None:
    gate = fixture_gate("minipkg/layers.py", "self.use_trtllm", "elif")
    assert gate.admitted == SM100_FAMILY
    steps = [step.render() for step in gate.evidence]
    text = "\n".join(steps)
    assert "FusedMoE.use_trtllm() returns get_platform().is_sm100" in text  # the property
    assert ".is_sm100 → PlatformContext.__getattr__('is_sm100') at minipkg/runtime_context.py:" in text
    assert "_PLATFORM_PROBES['is_sm100'] → 'is_sm100_supported' at minipkg/runtime_context.py:7" in text
    assert "device_capability_majors=[10]" in text
    assert "get_device_sm" in text
    assert any("name in overrides" in d for d in gate.depends_on)  # overrides assumed absent
    # The chain reads from the use outwards: property, __getattr__, the table, the probe.
    order = [
        next(i for i, s in enumerate(steps) if marker in s)
        for marker in ("use_trtllm", "__getattr__", "_PLATFORM_PROBES", "device_capability_majors")
    ]
    assert order == sorted(order)


def test_platform_context_guard_and_value_facts() -> None:
    guard = fixture_gate("minipkg/layers.py", "not get_platform().is_sm90")
    assert guard.admitted == HOPPER
    assert guard.else_kind is ElseKind.ERROR
    assert guard.then_span is None and guard.else_span is not None  # the raise is the exclusion
    assert "_PLATFORM_PROBES['is_sm90']" in evidence_text(guard)
    value = fixture_gate("minipkg/layers.py", "get_platform().device_sm >= 100")
    assert value.admitted == caps_where(lambda cc: cc >= (10, 0))
    assert "_PLATFORM_VALUES['device_sm'] → 'get_device_sm'" in evidence_text(value)
    assert value.else_kind is ElseKind.FALLBACK
    none = fixture_gate("minipkg/layers.py", "get_platform().is_sm120")
    assert none.admitted == SM120_FAMILY
    assert none.else_kind is ElseKind.NONE


def test_get_device_sm_through_nvml_and_torch() -> None:
    gate = fixture_gate("minipkg/layers.py", "get_device_sm() >= 89")
    assert gate.directive == "return"  # a predicate's own definition
    assert gate.admitted == caps_where(lambda cc: cc >= (8, 9))
    text = evidence_text(gate)
    assert "get_device_sm() returns" in text
    assert "nvmlDeviceGetCudaComputeCapability" in text


def test_get_device_sm_of_a_library_outside_the_scan_is_inferred() -> None:
    gate = one_gate("from sglang.srt.utils import get_device_sm\n\nif get_device_sm() >= 100:\n    x = 1\n")
    assert gate.admitted == caps_where(lambda cc: cc >= (10, 0))
    assert gate.confidence is Confidence.INFERRED


def test_sglang_probe_defined_in_one_module_used_from_another() -> None:
    files = {
        "sgl/utils.py": """\
            from functools import lru_cache, partial

            import torch

            def is_cuda():
                return torch.cuda.is_available()

            def get_device_sm():
                major, minor = torch.cuda.get_device_capability()
                return major * 10 + minor

            def _check_cuda_device_version(device_capability_majors, cuda_version):
                if not is_cuda():
                    return False
                return (
                    get_device_sm() // 10 in device_capability_majors
                    and tuple(map(int, torch.version.cuda.split(".")[:2])) >= cuda_version
                )

            is_sm100_supported = lru_cache(maxsize=1)(
                partial(_check_cuda_device_version, device_capability_majors=[10], cuda_version=(12, 8))
            )
            """,
        "sgl/moe.py": """\
            from sgl.utils import is_sm100_supported

            _is_sm100_supported = is_sm100_supported()

            def fused(x):
                if _is_sm100_supported:
                    return x
                return -x
            """,
    }
    gates, skips = detect(files)
    assert skips == []
    [gate] = [g for g in gates if g.location.path == "sgl/moe.py"]
    assert gate.admitted == SM100_FAMILY
    assert gate.location.line == 6
    text = evidence_text(gate)
    assert "partial(_check_cuda_device_version, device_capability_majors=[10]" in text
    assert "get_device_sm() returns major * 10 + minor at sgl/utils.py:10" in text


# ---------------------------------------------------------------------------
# Values through variables, constants, classes, decorators, partials and dicts.


def test_local_variables_in_an_elif_chain_each_branch_its_own_gate() -> None:
    path = "minipkg/dispatch.py"
    first = fixture_gate(path, "major >= 10")
    second = fixture_gate(path, "major == 9")
    third = fixture_gate(path, "(major, minor) >= (8, 0)")
    assert (first.directive, second.directive, third.directive) == ("if", "elif", "elif")
    assert first.admitted == caps_where(lambda cc: cc >= (10, 0))
    assert second.admitted == HOPPER
    # Each condition is judged on its own: the branches above do not narrow it.
    assert third.admitted == caps_where(lambda cc: cc >= (8, 0))
    assert len({first.id, second.id, third.id}) == 3


def test_dict_lookup_with_a_device_dependent_key() -> None:
    by_get = fixture_gate("minipkg/layers.py", 'backend_name() == "fa3"')
    assert by_get.admitted == HOPPER
    text = evidence_text(by_get)
    assert 'backend_name() returns _BACKEND_BY_MAJOR.get(major, "triton") at minipkg/layers.py:39' in text
    assert "_BACKEND_BY_MAJOR[9] → 'fa3' at minipkg/layers.py:16" in text
    tile = fixture_gate("minipkg/dispatch.py", "tile > 64")
    assert tile.admitted == caps((9, 0), (10, 0))  # the other capabilities take the default, 64
    subscript = one_gate(
        """\
        import torch

        KERNELS = {7: "volta", 8: "ampere", 9: "hopper", 10: "blackwell", 11: "blackwell", 12: "blackwell"}

        def kernel():
            family = KERNELS[torch.cuda.get_device_capability()[0]]
            if family == "blackwell":
                return 2
            return 1
        """
    )
    assert subscript.admitted == BLACKWELL


def test_class_attribute_and_class_scope() -> None:
    moe = fixture_gate("minipkg/layers.py", "self.use_cutlass_by_default", "elif")
    assert moe.admitted == HOPPER
    block = fixture_gate("minipkg/layers.py", "use_cutlass_by_default", "conditional expression")
    assert block.admitted == HOPPER
    later = gates_of(
        """\
        import torch

        MAJOR = torch.cuda.get_device_capability()[0]

        class Config:
            hopper = MAJOR == 9
            block = 128 if hopper else 64

        def tile():
            return Config.block == 128
        """
    )
    assert [(g.directive, g.condition) for g in later] == [
        ("conditional expression", "hopper"),
        ("return", "Config.block == 128"),  # the class attribute reads the class's own `hopper`
    ]
    assert later[1].admitted == HOPPER


def test_self_attribute_set_in_init() -> None:
    gate = fixture_gate("minipkg/layers.py", "self.use_flashinfer", "if")
    assert gate.admitted == BLACKWELL
    assert "assumed: hidden_size % 128 == 0" in gate.depends_on
    text = evidence_text(gate)
    assert "self.use_flashinfer = is_blackwell() and hidden_size % 128 == 0 at minipkg/layers.py:" in text
    assert "device_capability_majors=[10, 11, 12]" in text


def test_properties_and_cached_properties() -> None:
    gates = gates_of(
        """\
        import functools
        import torch

        class Runner:
            @property
            def hopper(self):
                return torch.cuda.get_device_capability() == (9, 0)

            @functools.cached_property
            def blackwell(self):
                return torch.cuda.get_device_capability()[0] >= 10

            def run(self):
                if self.hopper:
                    return 1
                if self.blackwell:
                    return 2
                return 0
        """
    )
    by_condition = {g.condition: g for g in gates}
    assert by_condition["self.hopper"].admitted == HOPPER
    assert by_condition["self.blackwell"].admitted == caps_where(lambda cc: cc >= (10, 0))
    assert "Runner.hopper() returns" in evidence_text(by_condition["self.hopper"])


def test_caching_decorators_and_partials() -> None:
    cached = fixture_gate("minipkg/layers.py", "_hopper_only()", "conditional expression")  # @cache
    assert cached.admitted == HOPPER
    assert "_hopper_only() returns major == 9" in evidence_text(cached)
    lru = fixture_gate("minipkg/dispatch.py", "is_sm120()", "conditional expression")  # @lru_cache(maxsize=1)
    assert lru.admitted == caps((12, 0))  # RTX Blackwell only, not 12.1
    assert lru.depends_on == ("assumed: is_cuda()",)
    gate = one_gate(
        """\
        import functools
        import torch

        def _at_least(major):
            return torch.cuda.get_device_capability()[0] >= major

        has_tcgen05 = functools.lru_cache(maxsize=None)(functools.partial(_at_least, 10))

        @functools.lru_cache()
        def pick():
            return "tcgen05" if has_tcgen05() else "wgmma"
        """
    )
    assert gate.directive == "conditional expression"
    assert gate.admitted == caps_where(lambda cc: cc >= (10, 0))
    assert "functools.partial(_at_least, 10)" in evidence_text(gate)


def test_flag_defaults_do_not_make_branches_dead() -> None:
    """A parameter's scalar default is one value of many: the branches it would skip keep their gates."""
    gates = gates_of(
        """\
        import torch

        def pick(flag=False, mode=0, enable=(False, False)):
            es, _ = enable
            if flag:
                if torch.cuda.get_device_capability()[0] == 10:
                    return 1
            if mode == 2:
                if torch.cuda.get_device_capability()[0] == 9:
                    return 2
            if torch.cuda.get_device_capability() == (12, 0) and es:
                return 3
            return 0
        """
    )
    assert [(g.location.line, g.admitted) for g in gates] == [
        (6, SM100_FAMILY),
        (9, HOPPER),
        (11, caps((12, 0))),
    ]
    assert gates[2].depends_on == ("assumed: es",)


def test_a_list_of_names_as_default_is_what_the_function_checks() -> None:
    gate = one_gate(
        """\
        import torch

        def has_more_shared_memory(ref_gpus=("h100", "b200")):
            name = torch.cuda.get_device_name().lower()
            return any(g in name for g in ref_gpus)
        """
    )
    assert gate.admitted == caps((9, 0), (10, 0))
    assert gate.confidence is Confidence.INFERRED


def test_conditional_expression_in_a_decorator() -> None:
    """Triton autotune configs are built where the kernel is defined, in its decorator."""
    gate = one_gate(
        """\
        import torch
        import triton

        is_tf32_supported = torch.cuda.get_device_capability(0)[0] >= 8

        @triton.autotune(
            configs=[
                triton.Config({"P": p}, num_warps=w)
                for w in [2, 4]
                for p in (["tf32", "ieee"] if is_tf32_supported else ["ieee"])
            ],
            key=["H"],
        )
        @triton.jit
        def kernel(x):
            pass
        """
    )
    assert gate.directive == "conditional expression"
    assert gate.location.line == 10
    assert gate.admitted == caps_where(lambda cc: cc >= (8, 0))


# ---------------------------------------------------------------------------
# Where a condition can sit, and what happens where it fails.


def test_every_kind_of_place() -> None:
    directives = {g.directive for g in fixture_analysis()[0]}
    assert directives == {
        "if",
        "elif",
        "while",
        "conditional expression",
        "assert",
        "return",
        "comprehension if",
        "and/or statement",
    }


def test_assert_is_else_error() -> None:
    gate = fixture_gate("minipkg/dispatch.py", "_is_sm100", "assert")
    assert gate.admitted == SM100_FAMILY
    assert gate.else_kind is ElseKind.ERROR
    assert gate.location.span.start == 33


def test_boolean_return_is_a_predicate_definition() -> None:
    gate = fixture_gate("minipkg/dispatch.py", "torch.cuda.get_device_capability() in ((10, 0), (10, 3))")
    assert gate.directive == "return"
    assert gate.admitted == SM100_FAMILY
    assert gate.else_kind is ElseKind.NONE


def test_comprehension_filter_and_and_statement() -> None:
    comp = fixture_gate("minipkg/dispatch.py", "capability >= minimum")
    assert comp.directive == "comprehension if"
    assert comp.admitted == caps_where(lambda cc: cc >= (8, 0))  # the fa2 entry's filter holds there
    statement = fixture_gate("minipkg/dispatch.py", "_is_sm100", "and/or statement")
    assert statement.admitted == SM100_FAMILY
    assert statement.else_kind is ElseKind.NONE


def test_guard_raise_is_else_error_admitting_the_condition() -> None:
    gate = one_gate(
        """\
        import torch

        def load():
            major, minor = torch.cuda.get_device_capability()
            if not (major, minor) >= (9, 0):
                raise RuntimeError("needs Hopper or newer")
            return 1
        """
    )
    assert gate.admitted == caps_where(lambda cc: cc >= (9, 0))
    assert gate.else_kind is ElseKind.ERROR
    assert gate.then_span is None
    assert (gate.else_span.start, gate.else_span.end) == (6, 6)  # type: ignore[union-attr]
    too_old = one_gate(
        """\
        import torch

        if torch.cuda.get_device_capability() < (8, 0):
            logger.error("too old")
            raise RuntimeError("needs Ampere")
        """
    )
    assert too_old.admitted == caps_where(lambda cc: cc >= (8, 0))
    assert too_old.else_kind is ElseKind.ERROR


@pytest.mark.parametrize(
    ("body", "else_kind", "admitted"),
    [
        ("    if IS_SM90:\n        fast()\n    else:\n        slow()\n", ElseKind.FALLBACK, HOPPER),
        ("    if IS_SM90:\n        fast()\n", ElseKind.NONE, HOPPER),
        ("    if IS_SM90:\n        fast()\n    else:\n        pass\n", ElseKind.NONE, HOPPER),
        ("    if not IS_SM90:\n        return slow()\n    return fast()\n", ElseKind.FALLBACK, HOPPER),
        ("    if IS_SM90:\n        return fast()\n    return slow()\n", ElseKind.FALLBACK, HOPPER),
        (
            "    if IS_SM90:\n        fast()\n    else:\n        raise ValueError('no')\n",
            ElseKind.ERROR,
            HOPPER,
        ),
        ("    if not IS_SM90:\n        raise ValueError('no')\n    fast()\n", ElseKind.ERROR, HOPPER),
    ],
)
def test_else_kinds(body: str, else_kind: ElseKind, admitted: ArchSet) -> None:
    gate = one_gate(
        f"import torch\n\nIS_SM90 = torch.cuda.get_device_capability() == (9, 0)\n\ndef f():\n{body}"
    )
    assert gate.else_kind is else_kind
    assert gate.admitted == admitted
    assert gate.location.line == 6


def test_early_return_fallback_in_the_fixture() -> None:
    gate = fixture_gate("minipkg/layers.py", "not is_sm100_supported()")
    assert gate.admitted == SM100_FAMILY  # the fast path below it runs on 10.x
    assert gate.else_kind is ElseKind.FALLBACK


def test_mixed_condition_depends_on_the_non_arch_part() -> None:
    gate = one_gate(
        """\
        from sgl.utils import is_sm100

        def choose(tp_size):
            if is_sm100 and tp_size == 4:
                return "trtllm"
            return "triton"
        """
    )
    assert gate.admitted == SM100_FAMILY
    assert gate.depends_on == ("assumed: tp_size == 4",)
    assert gate.confidence is Confidence.INFERRED


# ---------------------------------------------------------------------------
# Names read when no definition can be seen.


@pytest.mark.parametrize(
    ("condition", "admitted"),
    [
        ("is_sm90()", HOPPER),
        ("is_hopper()", HOPPER),
        ("is_blackwell()", BLACKWELL),
        ("has_sm120()", SM120_FAMILY),
        ("_is_sm120", SM120_FAMILY),
        ("is_sm90", HOPPER),
    ],
)
def test_fixture_names_without_definitions_are_inferred(condition: str, admitted: ArchSet) -> None:
    gate = fixture_gate("minipkg/inferred.py", condition)
    assert gate.admitted == admitted
    assert gate.confidence is Confidence.INFERRED
    assert "its definition is not in the scanned files" in evidence_text(gate)


@pytest.mark.parametrize(
    "source",
    [
        "if is_sm90():\n    x = 1\n",  # no binding at all
        "from deep_gemm import is_sm90\nif is_sm90():\n    x = 1\n",
        "import deep_gemm\nif deep_gemm.utils.is_sm90():\n    x = 1\n",
        "from kernels_ext import *\nif is_sm90:\n    x = 1\n",
        "def f(is_sm90):\n    if is_sm90:\n        return 1\n",  # a parameter
        "def f(plat):\n    if plat.is_hopper:\n        return 1\n",
    ],
)
def test_names_without_definitions_are_never_exact(source: str) -> None:
    gate = one_gate(source)
    assert gate.admitted == HOPPER
    assert gate.confidence is Confidence.INFERRED


def test_a_visible_definition_is_exact_not_inferred() -> None:
    gates = gates_of(
        """\
        import torch

        def is_sm90():
            return torch.cuda.get_device_capability()[0] >= 9

        def f():
            if is_sm90():
                return 1
            return 0
        """
    )
    by_directive = {g.directive: g for g in gates}
    assert set(by_directive) == {"return", "if"}
    use = by_directive["if"]
    assert use.admitted == caps_where(lambda cc: cc >= (9, 0))  # the code, not the name ("9.0 only")
    assert use.confidence is Confidence.EXACT


# ---------------------------------------------------------------------------
# Near-misses.


def test_fixture_near_misses_module_has_no_gate() -> None:
    assert fixture_gates("minipkg/near_miss.py") == []


@pytest.mark.parametrize(
    "source",
    [
        "def attn(q, sm_scale=None):\n    if sm_scale is None:\n        sm_scale = 0.125\n    return q * sm_scale\n",
        "import torch\nnum_sms = torch.cuda.get_device_properties(0).multi_processor_count\nif num_sms >= 132:\n    x = 1\n",
        'import torch\nif torch.version.cuda >= "12.8":\n    x = 1\n',
        'import torch\nif tuple(map(int, torch.version.cuda.split("."))) >= (12, 8):\n    x = 1\n',
        "from sgl.utils import is_cuda, is_hip\nif is_cuda():\n    x = 1\nelif is_hip():\n    x = 2\n",
        "import torch\ncap = torch.cuda.get_device_capability()\nprint(cap)\nrecord = {'capability': cap}\n",
        'def f():\n    """Runs on sm_90 and sm_100 (is_sm90 etc.)."""\n    return 1\n',
        "import torch\nif torch.cuda.is_available():\n    major, minor = torch.cuda.get_device_capability()\n",
        "import torch\nmajor, minor = torch.cuda.get_device_capability()\nif major >= 7:\n    x = 1\n",  # true on every known capability
        "import torch\nif torch.cuda.get_device_capability() is not None:\n    x = 1\n",
        "import torch\nprops = torch.cuda.get_device_properties(0)\nif props.total_memory > 80e9:\n    x = 1\n",
        "import torch\ncap = torch.cuda.get_device_capability()\nassert isinstance(cap, tuple)\n",
    ],
)
def test_near_misses_are_not_gates(source: str) -> None:
    assert gates_of(source) == []


# ---------------------------------------------------------------------------
# Skips: a bad file is a value with a reason, and the scan goes on.

GOOD = "import torch\nif torch.cuda.get_device_capability()[0] == 9:\n    x = 1\n"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"import torch\nprint 'capability', torch.cuda.get_device_capability()\n", "syntax error at line 2"),
        (b"# DO NOT EDIT: generated\nimport torch\nif torch.cuda.get_device_capability()[0] == 9:\n    x = 1\n", "DO NOT EDIT"),
        (b"\x7fELF\x00\x00\x01capability", "binary content"),
        (b"# capability\nname = '\xff\xfe sm_90'\n", "not valid UTF-8 (byte"),
    ],
)  # fmt: skip
def test_bad_files_are_skips_and_the_scan_goes_on(data: bytes, reason: str) -> None:
    sources = [
        PySource("pkg", "1.0", "pkg/bad.py", lambda: data),
        PySource("pkg", "1.0", "pkg/good.py", lambda: GOOD.encode()),
    ]
    gates, skips = detect_py_runtime(sources)
    [skip] = skips
    assert skip.path == "pkg/bad.py" and skip.package == "pkg"
    assert reason in skip.reason
    assert [g.location.path for g in gates] == ["pkg/good.py"]


def test_unreadable_file_is_a_skip() -> None:
    sources = [
        PySource("pkg", "1.0", "pkg/gone.py", lambda: None),
        PySource("pkg", "1.0", "pkg/good.py", lambda: GOOD.encode()),
    ]
    analyzer = PythonAnalyzer(sources)
    gates = analyzer.analyze()
    assert [g.location.path for g in gates] == ["pkg/good.py"]
    assert [(s.path, s.reason) for s in analyzer.skips] == [("pkg/gone.py", "cannot read")]


def test_file_over_the_size_limit_is_a_skip() -> None:
    big = GOOD + "#" * 2000 + "\n"
    analyzer = PythonAnalyzer([PySource("pkg", None, "pkg/big.py", lambda: big.encode())], max_file_size=1000)
    assert analyzer.analyze() == []
    [skip] = analyzer.skips
    assert "limit for Python files" in skip.reason


# ---------------------------------------------------------------------------
# Identity.


STABLE = """\
import torch

def pick(x):
    if torch.cuda.get_device_capability() >= (9, 0):
        return x
    return -x
"""


def test_gate_id_survives_code_moving_down() -> None:
    before = one_gate(STABLE)
    moved = one_gate(STABLE.replace("import torch\n", "import torch\n\n# a comment\nTHRESHOLD = 3\n\n"))
    assert moved.location.line == before.location.line + 4
    assert moved.id == before.id
    renamed = one_gate(STABLE.replace("def pick", "def choose"))
    assert renamed.id != before.id  # the enclosing function is part of what the gate is


def test_repeated_condition_in_one_scope_gets_distinct_ids() -> None:
    gates = gates_of(
        STABLE.replace(
            "    return -x\n",
            "    if torch.cuda.get_device_capability() >= (9, 0):\n        return 2 * x\n    return -x\n",
        )
    )
    assert len(gates) == 2
    assert len({g.id for g in gates}) == 2


def test_gate_id_is_the_same_on_a_second_analysis() -> None:
    first = fixture_analysis()[0]
    second, _ = detect_py_runtime(fixture_sources())
    assert [g.id for g in first] == [g.id for g in second]
    assert len({g.id for g in first}) == len(first)


# ---------------------------------------------------------------------------
# Never raises.

SNIPPETS = [
    "import torch\n",
    "from functools import lru_cache, partial\n",
    "major, minor = torch.cuda.get_device_capability()\n",
    "cap = torch.cuda.get_device_capability()\n",
    "sm = major * 10 + minor\n",
    "if cap >= (9, 0):\n    x = 1\n",
    "if sm // 10 in [10, 12]:\n    pass\nelse:\n    raise RuntimeError\n",
    "def f(a, *b, c=1, **d):\n    return a if sm > 90 else c\n",
    "class C:\n    x = is_sm90()\n    def __getattr__(self, n):\n        return getattr(self, n)\n",
    "while sm < 90:\n    sm += 10\n",
    "y = [i for i in range(sm) if i > 3]\n",
    "assert cap[0] >= 8, 'old'\n",
    "g = lru_cache(maxsize=1)(partial(f, 1, c=[10]))\n",
    "d = {9: 'a', 10: 'b'}\nz = d.get(major, d[sm])\n",
    "name = torch.cuda.get_device_name()\nflag = 'H100' in name and f(name)\n",
    "t = triton.runtime.driver.active.get_current_target()\nq = t.arch ** 70\n",
    "p = current_platform.get_device_capability().to_int() // 0\n",
    "s = f'{major}{minor:>3}' * 1000\n",
    "lambda: (yield)\n",
    "x = x.y.z(*a, **k)[1:2:3]\n",
    "try:\n    pass\nexcept* ValueError:\n    pass\n",
    "match sm:\n    case 90:\n        pass\n",
    "async def g():\n    async with a as b:\n        await b\n",
    "def r():\n    return r()\nr()\n",
    "x = (" * 30 + ")" * 30 + "\n",
    "is_sm100 = not is_sm100\n",
    "getattr(torch.cuda, name)()\n",
    "if (m := torch.cuda.get_device_capability()[0]) > 9:\n    pass\n",
    "for a, *b in cap:\n    pass\n",
    "print 'py2'\n",
    "\x00",
    "    ",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(SNIPPETS), max_size=12).map("".join)
    | st.text(max_size=300)
    | st.text(alphabet="()[]{}:=<>!.,*+-/%ifelswhnotadrumj 0123456789_\n\t'\"#", max_size=200)
)
def test_never_raises_on_arbitrary_text(text: str) -> None:
    other = "import torch\ndef get_device_sm():\n    return torch.cuda.get_device_capability()[0]\n"
    sources = [
        PySource("pkg", None, "pkg/fuzz.py", lambda: text.encode("utf-8", "surrogatepass")),
        PySource("pkg", None, "pkg/other.py", lambda: other.encode()),
        PySource("pkg", None, "pkg/raw.py", lambda: ("# capability\n" + text).encode("utf-8", "replace")),
    ]
    gates, skips = detect_py_runtime(sources)
    for gate in gates:
        assert gate.admitted and gate.excluded, gate.condition
        assert gate.location.span.start <= gate.location.span.end
    assert all(isinstance(s, Skip) for s in skips)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    gates, skips = detect_py_runtime([PySource("pkg", None, "pkg/b.py", lambda: b"# capability\n" + data)])
    assert all(g.kind is GateKind.PY_RUNTIME for g in gates)
    assert all(isinstance(s, Skip) for s in skips)


# ---------------------------------------------------------------------------
# The scanner's wiring.


def test_scan_reports_python_gates_for_a_target(tmp_path: Path) -> None:
    tree = tmp_path / "minipkg"
    shutil.copytree(PACKAGE, tree)
    (tree / LEGACY_PATH).write_text(LEGACY)
    report = liftgate.scan(
        [str(tree)], ["sm_120"], cuda_version=(13, 0), offline=True, cache_dir=str(tmp_path / "cache")
    )
    target = report.targets[0].arch
    py_gates = {(g.location.path, g.condition): g for g in report.gates if g.kind is GateKind.PY_RUNTIME}
    assert py_gates[("minipkg/layers.py", "get_platform().is_sm120")].status(target) is Status.ADMITTED
    assert py_gates[("minipkg/layers.py", "not get_platform().is_sm90")].status(target) is Status.EXCLUDED
    assert {s.path for s in report.skips} >= SKIPPED
    # The same ids as the detector alone gives: the version is not part of a gate's identity.
    ids = sorted(g.id for g in report.gates if g.kind is GateKind.PY_RUNTIME)
    assert ids == sorted(g.id for g in fixture_analysis()[0])
