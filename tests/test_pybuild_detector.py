"""The py-build detector: Python code that picks or refuses the GPU targets of a JIT/AOT build.

``tests/fixtures/pybuild/jit_build.py`` is laid out like FlashInfer's ``flashinfer/jit`` modules and
marks every line that must (``# gate: <directive>``) or must not (``# not a gate: why``) start a
gate; `test_fixture_markers` holds the detector to those marks. The other tests pin down what a
gate says for each construct (admitted targets, else kind, spans, evidence, ids) and the
near-misses around it, on small inline sources. The network tests read a real FlashInfer release.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.arch.core import Arch, ArchSet, universe
from liftgate.detect.interface import Detection
from liftgate.detect.pybuild import PY_BUILD_PREFILTER, detect_py_build
from liftgate.detect.runtime_arch import archs_for_capabilities, archs_for_majors
from liftgate.evaluate import Outcomes
from liftgate.model import Confidence, ElseKind, Gate, GateKind, Outcome, Span, SwitchKind
from liftgate.sources import Package, resolve_sources

FIXTURE = Path(__file__).parent / "fixtures" / "pybuild" / "jit_build.py"
PATH = "pkg/jit/build.py"


def sm(name: str) -> Arch:
    match = re.fullmatch(r"sm_(\d+?)(\d)([af]?)", name)
    assert match, name
    return Arch(int(match.group(1)), int(match.group(2)), match.group(3))


def archs(*names: str) -> ArchSet:
    return ArchSet(sm(n) for n in names)


def baseline_from(major: int, minor: int) -> ArchSet:
    return ArchSet(a for a in universe() if not a.variant and a.cc >= (major, minor))


def detect(source: str, path: str = PATH) -> Detection:
    return detect_py_build("pkg", "1.0", path, textwrap.dedent(source))


def gates(source: str) -> tuple[Gate, ...]:
    detection = detect(source)
    assert not detection.skips, detection.skips
    return detection.gates


def one_gate(source: str, directive: str) -> Gate:
    found = gates(source)
    assert [g.directive for g in found] == [directive], [(g.directive, g.condition) for g in found]
    return found[0]


def evidence_text(gate: Gate) -> str:
    return "\n".join(e.render() for e in gate.evidence)


# --- The fixture package -------------------------------------------------------------------------


def test_fixture_markers() -> None:
    text = FIXTURE.read_text()
    lines = text.splitlines()
    detection = detect_py_build("fixture", None, "pkg/jit_build.py", text)
    assert not detection.skips
    found = {(g.location.line, g.directive) for g in detection.gates}
    expected = {
        (number, match.group(1))
        for number, line in enumerate(lines, 1)
        if (match := re.search(r"# gate: ([A-Za-z][\w-]*)\s*$", line))
    }
    assert found == expected
    for gate in detection.gates:
        assert "# not a gate" not in lines[gate.location.line - 1], gate.condition
    assert len(expected) == 11  # the marks themselves are all read


def test_prefilter_passes_every_file_with_a_gate_and_drops_plain_python() -> None:
    assert PY_BUILD_PREFILTER.search(FIXTURE.read_bytes())
    samples = [
        b"x = ctx.get_nvcc_flags_list([9])",
        b'f = ["-gencode=arch=compute_90a,code=sm_90a"]',
        b'o = "--gpu-arch=sm_120a"',
        b'os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")',
        b'if "ENABLE_SM120" in os.environ: pass',
        b"k = os.getenv('SM100_KERNELS')",
        b"SUPPORTED_ARCHS = [90]",
        b"build(supported_archs=[90, 100])",
        b"CAPABILITIES: tuple = ((9, 0),)",
    ]
    for sample in samples:
        assert PY_BUILD_PREFILTER.search(sample), sample
    plain = (
        b"import torch\n\ndef attention(q, k, sm_scale, num_sms):\n    return q @ k.T * sm_scale  # search\n"
    )
    assert not PY_BUILD_PREFILTER.search(plain)
    assert not PY_BUILD_PREFILTER.search(b"if archs == other: pass")


# --- get_nvcc_flags_list --------------------------------------------------------------------------

COMM = """\
from . import env as jit_env
from .core import current_compilation_context, gen_jit_spec


def gen_trtllm_comm_module():
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(
        supported_major_versions=[9, 10]
    )
    return gen_jit_spec(
        "trtllm_comm",
        [
            jit_env.FLASHINFER_CSRC_DIR / "trtllm_allreduce.cu",
            jit_env.FLASHINFER_CSRC_DIR / "trtllm_allreduce_fusion.cu",
        ],
        extra_cuda_cflags=nvcc_flags,
    )
"""


def test_get_nvcc_flags_list_keeps_the_listed_majors_and_raises_otherwise() -> None:
    gate = one_gate(COMM, "get_nvcc_flags_list")
    assert gate.kind is GateKind.PY_BUILD
    assert gate.admitted == archs_for_majors([9, 10])
    assert sm("sm_90") in gate.admitted and sm("sm_103f") in gate.admitted
    assert sm("sm_120") not in gate.admitted and sm("sm_110") not in gate.admitted
    assert gate.unknown == ArchSet.none()
    assert gate.else_kind is ElseKind.ERROR
    assert gate.confidence is Confidence.EXACT
    assert gate.host is None
    # The span starts at the argument, not at the call a line above it.
    assert gate.location.span == Span(7, 8)
    assert (
        gate.condition == "current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10])"
    )
    assert gate.id.startswith("pb-")
    text = evidence_text(gate)
    assert "get_nvcc_flags_list keeps only targets with major in [9, 10]; raises if none remain" in text
    assert (
        'guards JIT module "trtllm_comm" built from trtllm_allreduce.cu, trtllm_allreduce_fusion.cu'
        f" at {PATH}:9"
    ) in text


@pytest.mark.parametrize(
    ("call", "majors"),
    [
        ("ctx.get_nvcc_flags_list([12])", [12]),
        ("ctx.get_nvcc_flags_list(supported_major_versions=(10, 11))", [10, 11]),
        ("ctx.get_nvcc_flags_list(supported_major_versions=MAJORS)", [9, 12]),
        ("ctx.get_nvcc_flags_list(supported_major_versions=list(MAJORS))", [9, 12]),
        ("ctx.get_nvcc_flags_list(supported_major_versions=local_majors)", [8]),
    ],
)
def test_get_nvcc_flags_list_majors_from_literals_and_constants(call: str, majors: list[int]) -> None:
    source = f"""\
    MAJORS = [9, 12]

    def gen():
        local_majors = [8]
        flags = {call}
        return flags
    """
    gate = one_gate(source, "get_nvcc_flags_list")
    assert gate.admitted == archs_for_majors(majors)


@pytest.mark.parametrize(
    "call",
    [
        "ctx.get_nvcc_flags_list()",
        "ctx.get_nvcc_flags_list(supported_major_versions=None)",
        "ctx.get_nvcc_flags_list(supported_major_versions=[])",
        "ctx.get_nvcc_flags_list(NO_MAJORS)",
    ],
)
def test_get_nvcc_flags_list_without_majors_keeps_every_target(call: str) -> None:
    detection = detect(f"NO_MAJORS = None\nflags = {call}\n")
    assert detection.gates == ()
    assert detection.skips == ()


def test_get_nvcc_flags_list_with_unresolvable_majors_is_a_skip() -> None:
    detection = detect(
        """\
        def gen(majors):
            return ctx.get_nvcc_flags_list(
                supported_major_versions=majors
            )
        """
    )
    assert detection.gates == ()
    [skip] = detection.skips
    assert skip.path == f"{PATH}:3"
    assert "majors" in skip.reason and "unknown" in skip.reason
    assert skip.package == "pkg"


def test_get_nvcc_flags_list_links_to_the_build_it_feeds() -> None:
    inside = one_gate(
        """\
        def gen():
            return gen_jit_spec(
                f"xqa_{dtype}_{head_dim}",
                sources,
                extra_cuda_cflags=ctx.get_nvcc_flags_list([12]) + ["-DX"],
            )
        """,
        "get_nvcc_flags_list",
    )
    assert 'guards JIT module "xqa_*_*" built from sources computed at run time' in evidence_text(inside)

    aliased = one_gate(
        """\
        def gen():
            nvcc_flags = ["-DENABLE_BF16"]
            nvcc_flags += ctx.get_nvcc_flags_list(supported_major_versions=[10])
            sm_flags = nvcc_flags
            sources = [jit_env.DIR / "a.cu"]
            sources.append(jit_env.DIR / "b.cu")
            unrelated = gen_jit_spec("other", ["other.cu"])
            return gen_jit_spec("moe", sources, extra_cuda_cflags=sm_flags)
        """,
        "get_nvcc_flags_list",
    )
    text = evidence_text(aliased)
    assert 'guards JIT module "moe" built from a.cu, b.cu' in text
    assert "other" not in text

    handed_on = one_gate(
        """\
        def gen_sm120():
            nvcc_flags = ["-DX"]
            nvcc_flags += ctx.get_nvcc_flags_list(supported_major_versions=[12])
            print(len(nvcc_flags))
            return gen_cutlass_fused_moe_module(nvcc_flags, "120")
        """,
        "get_nvcc_flags_list",
    )
    assert [e.text for e in handed_on.evidence][1:] == ["flags passed to gen_cutlass_fused_moe_module()"]


def test_torch_extension_builds_are_linked_too() -> None:
    gate = one_gate(
        """\
        from torch.utils.cpp_extension import load

        def build():
            flags = ctx.get_nvcc_flags_list([9])
            return load(name="hopper_ext", sources=[os.path.join(HERE, "csrc", "k.cu")], extra_cuda_cflags=flags)
        """,
        "get_nvcc_flags_list",
    )
    assert 'guards JIT extension "hopper_ext" built from k.cu' in evidence_text(gate)
    # json.load is no build.
    unlinked = one_gate(
        """\
        def build():
            flags = ctx.get_nvcc_flags_list([9])
            return json.load(flags)
        """,
        "get_nvcc_flags_list",
    )
    assert "guards" not in evidence_text(unlinked)


# --- Arch flags --------------------------------------------------------------------------------


def test_a_list_of_gencode_flags_is_one_gate_of_exact_targets() -> None:
    gate = one_gate(
        """\
        nvcc_flags = [
            "-gencode=arch=compute_90a,code=sm_90a",
            "-gencode=arch=compute_100a,code=sm_100a",
            "-DNDEBUG",
        ]
        """,
        "gencode",
    )
    assert gate.admitted == archs("sm_90a", "sm_100a")
    for excluded in ("sm_90", "sm_100", "sm_103a", "sm_120", "sm_120a"):
        assert sm(excluded) not in gate.admitted, excluded
    assert gate.else_kind is ElseKind.NONE
    assert gate.location.span == Span(1, 5)
    assert gate.condition.startswith('["-gencode=arch=compute_90a,code=sm_90a", ')
    assert "sm_90a is SASS for sm_90a only" in evidence_text(gate)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # PTX for a baseline arch JIT-compiles on every later capability, not for the 'a'/'f' targets.
        ('"-gencode arch=compute_90,code=[sm_90,compute_90]"', baseline_from(9, 0)),
        ('"-gencode", "arch=compute_90a,code=sm_90a"', archs("sm_90a")),
        ('"--generate-code=arch=compute_80,code=sm_80"', archs("sm_80")),
        ('"-arch=sm_90a"', archs("sm_90a")),
        ('"-arch", "sm_100a"', archs("sm_100a")),
        ('"-arch sm_100a"', archs("sm_100a")),
        ('"-arch=sm_90"', baseline_from(9, 0)),
        ('"--gpu-architecture=compute_120"', baseline_from(12, 0)),
        ('"-arch=compute_90", "-code=sm_90"', archs("sm_90")),
        ('"--gpu-code=sm_90a,sm_100a"', archs("sm_90a", "sm_100a")),
        # Family code serves the later members of its family.
        ('"-gencode=arch=compute_100f,code=sm_100f"', archs("sm_100f", "sm_103f")),
        ('"-gencode=arch=compute_120f,code=sm_120f"', archs("sm_120f", "sm_121f")),
        ('"-gencode=arch=compute_103f,code=sm_103f"', archs("sm_103f")),
        # A former name: sm_101 is sm_110 since CUDA 13.0.
        ('"-gencode=arch=compute_101a,code=sm_101a"', archs("sm_110a")),
    ],
)
def test_arch_flag_spellings(flags: str, expected: ArchSet) -> None:
    [gate] = gates(f"flags = [{flags}]\n")
    assert gate.admitted == expected
    assert gate.directive == ("gencode" if "gen" in flags else "arch-flag")


def test_cute_dsl_options_string_is_an_exact_target() -> None:
    gate = one_gate(
        """\
        def compile_kernel(fn):
            return cute.compile(fn, options="--enable-tvm-ffi --ptxas-options=--opt-level=2 --gpu-arch=sm_103a")
        """,
        "arch-flag",
    )
    assert gate.admitted == archs("sm_103a")
    assert gate.condition == '"--enable-tvm-ffi --ptxas-options=--opt-level=2 --gpu-arch=sm_103a"'


def test_an_unknown_arch_is_left_out_and_said_so() -> None:
    gate = one_gate(
        'F = ["-gencode=arch=compute_107a,code=sm_107a", "-gencode=arch=compute_100a,code=sm_100a"]\n',
        "gencode",
    )
    assert gate.admitted == archs("sm_100a")
    assert "also builds sm_107a, which liftgate does not know" in evidence_text(gate)
    assert gates('F = ["-gencode=arch=compute_107a,code=sm_107a"]\n') == ()


def test_gencode_flags_in_a_build_call_name_the_build() -> None:
    gate = one_gate(
        """\
        def ext():
            return CUDAExtension("sm90_ext", sources=["csrc/a.cu", f"{GEN}/b_{n}.cu"], extra_compile_args={"nvcc": ["-arch=sm_90a"]})
        """,
        "arch-flag",
    )
    assert 'guards extension "sm90_ext" built from csrc/a.cu, b_*.cu' in evidence_text(gate)


@pytest.mark.parametrize(
    "source",
    [
        # FlashInfer's own flag builder: the arch is formatted in, not chosen here.
        'flags = [f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}" for major, minor in archs]\n',
        'def f(arch):\n    return ["-arch", arch]\n',
        'arch_flag = f"-arch=sm_{self.arch}"\n',
        # A literal added to the same list as computed flags stands in for a computed target.
        textwrap.dedent(
            """\
            def get_flags(archs, mapped):
                flags = []
                for major, minor in archs:
                    if mapped:
                        flags.append("-gencode=arch=compute_100f,code=sm_100f")
                    else:
                        flags.append(f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}")
                return flags
            """
        ),
        # Prose and look-ups, not flags.
        '"""Build with -arch=sm_90a for Hopper."""\n',
        'def f():\n    """Pass -gencode=arch=compute_90a,code=sm_90a to nvcc."""\n',
        'raise RuntimeError("rebuild with -arch=sm_100a for Blackwell")\n',
        'parser.add_argument("--arch", help="target, e.g. -arch=sm_90a")\n',
        'has = any(flag.startswith("-gencode=") for flag in flags)\n',
        'if "-arch=sm_90a" in flags:\n    pass\n',
        'cmd = ["-arch=native", "-O3"]\n',
        'cmd = ["-arch=all-major"]\n',
        'sm90 = has_sm("compute_90", "12.3")\n',
        # Not arch flags at all.
        'flags = ["-O3", "-DSM_SCALE=1", "--use_fast_math", "-Xptxas=-v"]\n',
        'params = {"sm_scale": 0.125, "num_sms": 132, "smem": 228 * 1024}\n',
        'if torch.version.cuda >= "12.8" and cuda_version >= (12, 8):\n    pass\n',
        '__version__ = "0.6.2"\n',
    ],
)
def test_not_arch_flag_gates(source: str) -> None:
    assert gates(source) == ()


# --- TORCH_CUDA_ARCH_LIST ------------------------------------------------------------------------


def test_torch_cuda_arch_list_default() -> None:
    gate = one_gate('os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")\n', "TORCH_CUDA_ARCH_LIST")
    assert gate.admitted == archs("sm_80", "sm_90a")
    assert gate.condition == 'os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")'
    assert gate.depends_on == ("TORCH_CUDA_ARCH_LIST (the default applies when it is unset)",)
    assert gate.else_kind is ElseKind.NONE
    assert 'TORCH_CUDA_ARCH_LIST defaults to "8.0;9.0a": 8.0: sm_80; 9.0a: sm_90a' in evidence_text(gate)


@pytest.mark.parametrize(
    ("source", "expected", "default"),
    [
        ('os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0+PTX"\n', baseline_from(9, 0), False),
        (
            'arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "7.5 8.0 8.6 9.0+PTX")\n',
            archs("sm_75", "sm_80", "sm_86") | baseline_from(9, 0),
            True,
        ),
        (
            'arch_list = os.getenv("TORCH_CUDA_ARCH_LIST", DEFAULT)\nDEFAULT = "10.0a"\n',
            archs("sm_100a"),
            True,
        ),
        ('os.environ["TORCH_CUDA_ARCH_LIST"] = "Hopper"\n', baseline_from(9, 0), False),
        # 6.0 is older than liftgate's universe; its PTX still runs on everything newer.
        ('os.environ["TORCH_CUDA_ARCH_LIST"] = "6.0+PTX"\n', baseline_from(7, 0), False),
        ('subprocess.run(cmd, env={**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0a"})\n', archs("sm_90a"), False),
    ],
)
def test_torch_cuda_arch_list_values(source: str, expected: ArchSet, default: bool) -> None:
    gate = one_gate(source, "TORCH_CUDA_ARCH_LIST")
    assert gate.admitted == expected
    assert bool(gate.depends_on) is default


def test_an_arch_list_in_an_environment_mapping_is_the_entry() -> None:
    gate = one_gate('run(env={"A": "1",\n     "TORCH_CUDA_ARCH_LIST": "9.0a"})\n', "TORCH_CUDA_ARCH_LIST")
    assert gate.condition == '"TORCH_CUDA_ARCH_LIST": "9.0a"'
    assert gate.location.span == Span(2, 2)
    assert 'TORCH_CUDA_ARCH_LIST is passed as "9.0a"' in evidence_text(gate)


def test_flashinfer_cuda_arch_list_is_read_the_same_way() -> None:
    gate = one_gate('os.environ["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a 10.0a"\n', "FLASHINFER_CUDA_ARCH_LIST")
    assert gate.admitted == archs("sm_90a", "sm_100a")


@pytest.mark.parametrize(
    "source",
    [
        'os.environ["TORCH_CUDA_ARCH_LIST"] = f"{arch}{suffix}"\n',
        'value = os.environ.get("TORCH_CUDA_ARCH_LIST")\n',
        'value = os.environ.get("TORCH_CUDA_ARCH_LIST", "")\n',
        'value = os.environ["TORCH_CUDA_ARCH_LIST"]\n',
        'print("set TORCH_CUDA_ARCH_LIST=9.0a before building")\n',
        'os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"\n',
    ],
)
def test_not_torch_cuda_arch_list_gates(source: str) -> None:
    assert gates(source) == ()


# --- Arch lists ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("build(supported_archs=[90, 100])", archs_for_capabilities([(9, 0), (10, 0)])),
        ('build(archs=["sm_90a", "100f"])', archs("sm_90a", "sm_100f")),
        ('build(arch_list=["9.0", "10.0a"])', archs("sm_90", "sm_100a")),
        ("build(cuda_archs=((9, 0), (12, 0)))", archs_for_capabilities([(9, 0), (12, 0)])),
        ('build(target_archs={"sm_120a"})', archs("sm_120a")),
        ('build(gpu_archs="90a;100a")', archs("sm_90a", "sm_100a")),
        ("build(supported_arches=[900, 1000])", archs_for_capabilities([(9, 0), (10, 0)])),
    ],
)
def test_arch_list_keywords(source: str, expected: ArchSet) -> None:
    gate = one_gate(source + "\n", "arch-list")
    assert gate.admitted == expected
    assert gate.condition == source[len("build(") : -1]
    assert gate.confidence is Confidence.EXACT
    assert gate.else_kind is ElseKind.NONE


def test_arch_list_in_a_decorator_above_its_function() -> None:
    gate = one_gate('@cute.kernel(\n    archs=["sm_100a"],\n)\ndef kernel():\n    pass\n', "arch-list")
    assert gate.admitted == archs("sm_100a")
    assert gate.location.span == Span(2, 2)


def test_arch_list_constants_and_their_uses() -> None:
    found = gates(
        """\
        SUPPORTED_ARCHS = ["sm_90a", "sm_100a", "sm_107a"]

        def build():
            return load(name="x", sources=["x.cu"], supported_archs=SUPPORTED_ARCHS)
        """
    )
    [gate] = found
    assert gate.location.line == 1 and gate.directive == "arch-list"
    assert gate.admitted == archs("sm_90a", "sm_100a")
    assert "also lists sm_107a, which liftgate does not know" in evidence_text(gate)


def test_arch_list_refused_outside_is_an_error() -> None:
    class_level = one_gate(
        """\
        class MmaOp:
            admissible_archs = ["sm_90", "sm_90a", "sm_100a", "sm_100f"]

            def __post_init__(self):
                arch = get_arch()
                if arch not in self.admissible_archs:
                    raise OpError(self, f"expects one of {self.admissible_archs}")
        """,
        "arch-list",
    )
    assert class_level.admitted == archs("sm_90", "sm_90a", "sm_100a", "sm_100f")
    assert class_level.else_kind is ElseKind.ERROR
    assert f"anything outside admissible_archs is refused at {PATH}:6" in evidence_text(class_level)

    module_dict = one_gate(
        """\
        SM_ARCHS = {(10, 0): "100a", (10, 3): "103a"}

        def load_ext():
            if torch.cuda.get_device_capability() not in SM_ARCHS:
                raise RuntimeError("needs SM100 or SM103")
        """,
        "arch-list",
    )
    assert module_dict.admitted == archs_for_capabilities([(10, 0), (10, 3)])
    assert module_dict.else_kind is ElseKind.ERROR

    local = one_gate(
        """\
        def __init__(self, sm_version):
            supported_sm_versions = ["sm_100", "sm_103"]
            assert sm_version in supported_sm_versions
        """,
        "arch-list",
    )
    assert local.admitted == archs("sm_100", "sm_103")
    assert local.else_kind is ElseKind.ERROR


@pytest.mark.parametrize(
    "source",
    [
        # A local list nothing refuses by may be anything.
        'def f():\n    fallback_archs = ["sm_80", "sm_86"]\n    return fallback_archs\n',
        # Names that are not arch lists, values that are not archs.
        'architectures = ["LlamaForCausalLM"]\n',
        "NUM_SMS = [132, 148]\n",
        "sm_counts = [120, 132]\n",
        "def f():\n    mma_sm_list = [1, 2]\n    assert x in mma_sm_list\n",
        'ARCHS = ["sm_90a", "h100"]\n',
        'SUPPORTED_ARCHS = ["sm_90a", "fast"]\n',
        "TARGET_ARCHS = []\n",
        "SUPPORTED_CAPABILITIES = [True, False]\n",
        "build(archs=archs)\n",
        "build(archs=get_archs())\n",
        'if archs == ["sm_90a"]:\n    pass\n',
        'ARCHS = "sm_90a"\n',
    ],
)
def test_not_arch_list_gates(source: str) -> None:
    assert gates(source) == ()


# --- Environment switches ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected", "variable"),
    [
        ('if os.environ.get("ENABLE_SM120"):\n    pass\n', archs_for_capabilities([(12, 0)]), "ENABLE_SM120"),
        ('if "ENABLE_SM100" in os.environ:\n    pass\n', archs_for_capabilities([(10, 0)]), "ENABLE_SM100"),
        ("if envs.SGLANG_ENABLE_SM90A.get():\n    pass\n", archs("sm_90a"), "SGLANG_ENABLE_SM90A"),
        (
            'use = get_bool_env_var("USE_SM100_KERNELS")\n',
            archs_for_capabilities([(10, 0)]),
            "USE_SM100_KERNELS",
        ),
        ('use = os.environ["SM120_KERNELS"]\n', archs_for_capabilities([(12, 0)]), "SM120_KERNELS"),
        (
            'K = "BUILD_SM89"\nif not os.environ.get(K):\n    pass\n',
            archs_for_capabilities([(8, 9)]),
            "BUILD_SM89",
        ),
    ],
)
def test_env_switches(source: str, expected: ArchSet, variable: str) -> None:
    """Off for every target until set (issue 19): the name says which kernels the switch is for,
    never whether it is set."""
    gate = one_gate(source, "env-switch")
    assert gate.admitted == ArchSet.none() and gate.unknown == ArchSet.none()
    (switch,) = gate.switches
    assert (switch.name, switch.kind, switch.setting) == (variable, SwitchKind.ENVIRONMENT, f"{variable}=1")
    assert switch.admitted == expected
    assert gate.confidence is Confidence.INFERRED
    assert gate.depends_on == (f"{variable} (environment, unset by default)",)
    assert gate.else_kind is ElseKind.NONE
    outcomes = Outcomes([gate])
    for arch in expected:
        reading = outcomes.of(gate, arch)
        assert (reading.outcome, reading.loss) == (Outcome.OFF, True)
        assert f"{variable}=1" in reading.text


@pytest.mark.parametrize(
    "source",
    [
        'if os.getenv("FLASHINFER_ENABLE_SM90", "1") == "1":\n    pass\n',
        'if "DISABLE_SM90" in os.environ:\n    pass\n',
        'if "ENABLE_SM120" not in os.environ:\n    pass\n',
    ],
)
def test_switches_on_by_default_are_no_gates(source: str) -> None:
    assert [g for g in detect_py_build("p", "1", "p/x.py", source).gates if g.directive == "env-switch"] == []


def test_env_switch_in_an_if_knows_its_branches() -> None:
    gate = one_gate(
        """\
        def enumerate_kernels(specs):
            if "ENABLE_SM120" in os.environ:
                # SM 120
                specs.append(120)
                specs.append(121)
            else:
                specs.append(0)
        """,
        "env-switch",
    )
    assert gate.condition == '"ENABLE_SM120" in os.environ'
    assert gate.location.span == Span(2, 2)
    assert gate.then_span == Span(4, 5)
    assert gate.else_span == Span(7, 7)


@pytest.mark.parametrize(
    "source",
    [
        'os.environ["ENABLE_SM100"] = "1"\n',
        'del os.environ["ENABLE_SM100"]\n',
        'scale = os.environ.get("SM_SCALE", "1.0")\n',
        'if os.environ.get("USE_SMEM_CACHE"):\n    pass\n',
        'if os.environ.get("FLASHINFER_DISABLE_EAGLE_VERIFY_FP8KV_SM90"):\n    pass\n',
        'if os.environ.get("ENABLE_SM90ALL"):\n    pass\n',
        'if os.environ.get("ENABLE_SM107"):\n    pass\n',
        'v = os.environ.get("CUDA_VERSION", "12.8")\n',
        "ENABLE_SM90 = True\nif ENABLE_SM90:\n    pass\n",
    ],
)
def test_not_env_switches(source: str) -> None:
    assert gates(source) == ()


# --- Ids, spans, robustness ------------------------------------------------------------------------


def test_ids_survive_moving_code_and_tell_repeats_apart() -> None:
    source = """\
    def a():
        f = ctx.get_nvcc_flags_list([9])
        g = ctx.get_nvcc_flags_list([9])

    def b():
        f = ctx.get_nvcc_flags_list([9])
    """
    first = gates(source)
    moved = gates("import os\n\n\n" + textwrap.dedent(source).replace("[9]", "[ 9 ]"))
    assert [g.id for g in first] == [g.id for g in moved]
    assert [g.location.line for g in moved] == [g.location.line + 3 for g in first]
    assert len({g.id for g in first}) == 3


def test_syntax_errors_are_skips() -> None:
    detection = detect('def f(:\n    return ["-arch=sm_90a"]\n')
    assert detection.gates == ()
    [skip] = detection.skips
    assert skip.path == PATH
    assert skip.reason.startswith("Python syntax error at line 1: ")
    nul = detect_py_build("pkg", None, PATH, 'x = "-arch=sm_90a"\x00\n')
    assert nul.gates == () and len(nul.skips) == 1


def test_a_parsed_tree_gives_the_same_gates() -> None:
    text = FIXTURE.read_text()
    assert detect_py_build("p", None, "f.py", text, ast.parse(text)) == detect_py_build(
        "p", None, "f.py", text
    )


def test_comments_and_odd_line_breaks_stay_out_of_conditions() -> None:
    gate = one_gate(
        'flags = [  # Hopper only\n    "-gencode=arch=compute_90a,code=sm_90a",  # the one\n    "-O3",\n]\n',
        "gencode",
    )
    assert gate.condition == '["-gencode=arch=compute_90a,code=sm_90a", "-O3"]'
    crlf = gates('x = 1\r\nflags = ["-arch=sm_90a",\r\n  "-O3"]\r\n')
    assert [(g.location.span, g.condition) for g in crlf] == [(Span(2, 3), '["-arch=sm_90a", "-O3"]')]
    wide = gates('note = "für sm"\nflags = ["-O3", "-arch=sm_90a"]  # ü\n')
    assert [g.condition for g in wide] == ['["-O3", "-arch=sm_90a"]']


FRAGMENTS = [
    "ctx.get_nvcc_flags_list(",
    "supported_major_versions=",
    "[9, 10]",
    '"-gencode=arch=compute_90a,code=sm_90a"',
    '"-arch"',
    "arch",
    'os.environ.get("ENABLE_SM120")',
    '"TORCH_CUDA_ARCH_LIST"',
    "SUPPORTED_ARCHS = ",
    "archs=",
    "(9, 0)",
    'f"-arch={x}"',
    "def f():\n    ",
    "class C:\n    ",
    "\n",
    ",",
    ")",
    "]",
    " ",
    "\x00",
    "\r",
    '"""',
    "#",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=30) | st.text(max_size=200))
def test_never_raises(parts: list[str] | str) -> None:
    text = parts if isinstance(parts, str) else "".join(parts)
    detection = detect_py_build("pkg", None, PATH, text)
    assert isinstance(detection, Detection)
    for gate in detection.gates:
        # a gate admits something, or a switch off by default would let something in
        assert gate.admitted or any(s.admitted for s in gate.switches), gate.condition
        assert gate.location.span.start <= gate.location.span.end


# --- A real release --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flashinfer_062() -> Package:
    """FlashInfer 0.6.2 from the package index, through liftgate's own sources stage (cached between runs)."""
    packages, _ = resolve_sources(
        ["flashinfer-python==0.6.2"], env=None, cache_dir=None, observer=None, offline=False
    )
    [package] = packages
    return package


@pytest.mark.network
def test_062_trtllm_comm_is_built_for_sm90_and_sm100_only(flashinfer_062: Package) -> None:
    [comm] = [f for f in flashinfer_062.files if f.path == "flashinfer/jit/comm.py"]
    text = Path(comm.fspath).read_text()
    detection = detect_py_build(comm.package, comm.version, comm.path, text)
    assert detection.skips == ()
    [gate] = [g for g in detection.gates if g.location.line == 61]
    assert gate.directive == "get_nvcc_flags_list"
    assert gate.location.version == "0.6.2"
    assert "supported_major_versions=[9, 10]" in gate.condition
    for name in ("sm_90", "sm_90a", "sm_100a", "sm_103"):
        assert sm(name) in gate.admitted, name
    for name in ("sm_120", "sm_120a", "sm_121", "sm_110", "sm_89"):
        assert sm(name) not in gate.admitted, name
    assert gate.else_kind is ElseKind.ERROR
    text = evidence_text(gate)
    assert "trtllm_allreduce.cu" in text
    assert (
        'guards JIT module "trtllm_comm" built from trtllm_allreduce.cu, trtllm_allreduce_fusion.cu, trtllm_moe_allreduce_fusion.cu'
        in text
    )


@pytest.mark.network
def test_062_every_python_file_is_read_without_skips(flashinfer_062: Package) -> None:
    found: list[Gate] = []
    for source in flashinfer_062.files:
        if not source.path.endswith(".py"):
            continue
        data = Path(source.fspath).read_bytes()
        if not PY_BUILD_PREFILTER.search(data):
            continue
        detection = detect_py_build(
            source.package, source.version, source.path, data.decode("utf-8", "replace")
        )
        assert detection.skips == (), detection.skips
        found.extend(detection.gates)
    by_directive = {d: sum(g.directive == d for g in found) for d in {g.directive for g in found}}
    assert by_directive["get_nvcc_flags_list"] == 18
    assert by_directive["env-switch"] == 8
    core = {g.location.line: g for g in found if g.location.path == "flashinfer/jit/core.py"}
    assert core[133].admitted == archs("sm_120a")  # sm120a_nvcc_flags
    assert core[131].admitted == archs("sm_100f", "sm_103f")  # sm100f_nvcc_flags
    assert len({g.id for g in found}) == len(found)


def test_deepspeed_style_compute_capability_string_and_additions() -> None:
    source = (
        'DEFAULT_COMPUTE_CAPABILITIES = "6.0;6.1;7.0"\n'
        "def get_default_compute_capabilities(cuda):\n"
        "    compute_caps = DEFAULT_COMPUTE_CAPABILITIES\n"
        "    if cuda >= 12:\n"
        '        compute_caps += ";8.0;8.6;9.0"\n'
        '    compute_caps += ""\n'
        "    return compute_caps\n"
    )
    from liftgate.detect.pybuild import detect_py_build

    gates = {g.location.line: g for g in detect_py_build("ds", None, "op_builder/builder.py", source).gates}
    assert sorted(gates) == [1, 5]
    assert gates[1].admitted.names() == ["sm_70"]
    assert gates[5].admitted.names() == ["sm_80", "sm_86", "sm_90"]
    assert "adds" in gates[5].evidence[0].text
