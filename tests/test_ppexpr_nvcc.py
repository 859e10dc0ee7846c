"""The ``#if`` evaluator checked against the real compiler, pass by pass.

Each test writes one ``.cu`` file holding a block per condition::

    #if COND
    LG_T_<k>
    #else
    LG_F_<k>
    #endif

and asks both liftgate and nvcc which marker survives. liftgate answers for every lane at once
(`Walker.eval_vec`, and `PackageAnalyzer.analyze` for the gates it reports). nvcc answers one
pass per run:

* ``nvcc -E -gencode arch=compute_X,code=sm_X`` prints the device pass for ``sm_X`` (with several
  ``-gencode``s it prints only the first device pass, so each target gets its own run);
* the host pass has no ``nvcc -E`` spelling (``-E`` always preprocesses for a device), so it is
  taken from ``nvcc --dryrun -c``: the ``gcc -E`` command that carries ``-D__CUDACC__`` but no
  ``-D__CUDA_ARCH__`` is the pure host pass, and the test runs that exact command.

All runs of one batch go through a thread pool; each hypothesis example is a batch of 150
conditions, so a handful of examples covers a lot of ground in a few seconds.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from liftgate.arch.core import universe
from liftgate.detect.cpp_lex import lex_directives
from liftgate.detect.cuda import PackageAnalyzer, Walker, host_lane
from liftgate.detect.ppexpr import tokenize

NVCC = shutil.which("nvcc")

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not on PATH"),
]

# A spread over every arch generation and every variant kind that the macros tell apart.
WANTED_TARGETS = (
    "sm_75",
    "sm_90",
    "sm_90a",
    "sm_100",
    "sm_100a",
    "sm_100f",
    "sm_103a",
    "sm_110f",
    "sm_120",
    "sm_120a",
    "sm_121f",
)
HOST = "host"
MARKER = re.compile(r"\bLG_([TF])_(\d+)\b")


def run_nvcc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert NVCC is not None
    return subprocess.run([NVCC, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@cache
def cuda_version() -> tuple[int, int]:
    out = subprocess.run([str(NVCC), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release (\d+)\.(\d+)", out)
    assert match, "cannot read the release from nvcc --version"
    return int(match.group(1)), int(match.group(2))


@cache
def targets() -> tuple[str, ...]:
    """The wanted targets this nvcc accepts (``--help`` lists every allowed sm_XX[af])."""
    help_text = subprocess.run([str(NVCC), "--help"], capture_output=True, text=True, check=True).stdout
    known = set(re.findall(r"'(sm_\d+[af]?)'", help_text))
    chosen = tuple(t for t in WANTED_TARGETS if t in known)
    assert len(chosen) >= 3, f"this nvcc supports too few of {WANTED_TARGETS}"
    return chosen


@cache
def host_command() -> tuple[str, ...]:
    """The host pass's ``gcc -E`` command from ``nvcc --dryrun``, with ``{src}``/``{out}`` placeholders."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "probe.cu").write_text("int x;\n")
        first = targets()[0].removeprefix("sm_")
        dry = run_nvcc(
            "--dryrun", "-c", "-gencode", f"arch=compute_{first},code=sm_{first}", "probe.cu", "-o", "probe.o",
            cwd=Path(tmp),
        )  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        for line in (dry.stdout + dry.stderr).splitlines():
            if not line.startswith("#$ "):
                continue
            tokens = shlex.split(line[3:])
            if (
                "-E" in tokens
                and "-D__CUDACC__" in tokens
                and "probe.cu" in tokens
                and not any(t.startswith("-D__CUDA_ARCH__") for t in tokens)
            ):
                out = tokens.index("-o") + 1
                tokens[out] = "{out}"
                tokens[tokens.index("probe.cu")] = "{src}"
                return tuple(tokens)
    raise AssertionError("nvcc --dryrun shows no host preprocessing command")


def nvcc_pass(source: Path, target: str) -> str:
    """The preprocessed text of one pass (a device target, or HOST)."""
    if target == HOST:
        out = source.with_suffix(f".{HOST}.ii")
        command = [t.replace("{src}", str(source)).replace("{out}", str(out)) for t in host_command()]
        result = subprocess.run(command, cwd=source.parent, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"host pass failed: {result.stderr}"
        return out.read_text()
    number = target.removeprefix("sm_")
    result = run_nvcc(
        "-E", "-gencode", f"arch=compute_{number},code=sm_{number}", source.name, cwd=source.parent
    )
    assert result.returncode == 0, f"nvcc -E for {target} failed: {result.stderr}"
    return result.stdout


def block_file(conditions: Sequence[str]) -> tuple[str, list[int]]:
    """The test file and the line of each block's ``#if``."""
    lines = ["// generated by tests/test_ppexpr_nvcc.py"]
    if_lines: list[int] = []
    for k, cond in enumerate(conditions):
        if_lines.append(len(lines) + 1)
        lines += [f"#if {cond}", f"LG_T_{k}", "#else", f"LG_F_{k}", "#endif"]
    return "\n".join(lines) + "\n", if_lines


def nvcc_truths(text: str, count: int) -> dict[str, list[bool]]:
    """For each pass, which branch of each block nvcc kept."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "conds.cu")
        source.write_text(text)
        passes = (*targets(), HOST)
        with ThreadPoolExecutor(max_workers=min(12, len(passes))) as pool:
            outputs = dict(zip(passes, pool.map(lambda t: nvcc_pass(source, t), passes), strict=True))
    truths: dict[str, list[bool]] = {}
    for name, output in outputs.items():
        kept: dict[int, bool] = {}
        for branch, index in MARKER.findall(output):
            assert int(index) not in kept, f"{name}: both branches of block {index} survived"
            kept[int(index)] = branch == "T"
        assert sorted(kept) == list(range(count)), f"{name}: blocks lost in the output"
        truths[name] = [kept[k] for k in range(count)]
    return truths


def lane_of(target: str) -> int:
    if target == HOST:
        return host_lane()
    return [a.name for a in universe()].index(target)


def liftgate_truths(conditions: Sequence[str], errors: list[str]) -> list[tuple[bool | None, ...]]:
    """Each condition's value in every lane (device lanes in universe order, then the host).

    A condition liftgate calls malformed is recorded in ``errors`` (nvcc accepted all of them).
    """
    walker = Walker(
        "conds.cu",
        lex_directives(""),
        cuda_version=cuda_version(),
        resolve_include=lambda *_: None,
        header_export=lambda _: {},
        collect_gates=False,
    )
    out: list[tuple[bool | None, ...]] = []
    for cond in conditions:
        vec, _, error = walker.eval_vec(tokenize(cond))
        if error is not None:
            errors.append(f"liftgate cannot evaluate #if {cond}: {error}")
        out.append(vec)
    return out


def mentions_arch_list(cond: str) -> bool:
    return "__CUDA_ARCH_LIST__" in cond


def compare(conditions: Sequence[str]) -> None:
    """Fail with every (condition, pass) where liftgate and nvcc disagree."""
    text, if_lines = block_file(conditions)
    expected = nvcc_truths(text, len(conditions))
    problems: list[str] = []
    got = liftgate_truths(conditions, problems)
    for k, cond in enumerate(conditions):
        for name, values in expected.items():
            mine = got[k][lane_of(name)]
            if mine is None and name == HOST and mentions_arch_list(cond):
                continue  # the host pass sees the build's arch list, which liftgate leaves unknown
            if mine is not values[k]:
                problems.append(f"{name}: nvcc {values[k]}, liftgate {mine}: #if {cond}")
    # The detector must report a gate exactly where the device passes disagree, admitting the true ones.
    analysis = PackageAnalyzer("lgtest", None, lambda _: None, ["conds.cu"], cuda_version()).analyze(
        "conds.cu", text
    )
    by_line = {g.location.line: g for g in analysis.gates}
    names = [a.name for a in universe()]
    for k, cond in enumerate(conditions):
        device = got[k][:-1]
        gate = by_line.get(if_lines[k])
        if all(v is device[0] for v in device):
            if gate is not None:
                problems.append(f"gate reported for a device-uniform condition: #if {cond}")
            continue
        if gate is None:
            problems.append(f"no gate for a device-dependent condition: #if {cond}")
            continue
        admitted = [n for n, v in zip(names, device, strict=True) if v is True]
        if gate.admitted.names() != admitted:
            problems.append(f"gate admits {gate.admitted.names()}, lanes say {admitted}: #if {cond}")
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:60])


# ---------------------------------------------------------------------------
# Hand-written conditions: the idioms of real code and the corners of the arithmetic.

TRICKY = [
    # TensorRT-LLM: Hopper up to, but not including, the consumer Blackwells.
    "(defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))",
    # sm_120 satisfies ">= 1000" although it has none of sm_100's features.
    "defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000",
    "defined(__CUDA_ARCH_FEAT_SM100_ALL)",
    "defined(__CUDA_ARCH_FEAT_SM90_ALL)",
    "defined __CUDA_ARCH_FEAT_SM120_ALL",
    "__CUDA_ARCH_HAS_FEATURE__(SM90_ALL)",
    "__CUDA_ARCH_HAS_FEATURE__(SM100_ALL) || __CUDA_ARCH_HAS_FEATURE__(SM120_ALL)",
    "__CUDA_ARCH_SPECIFIC__ == 1200",
    "(__CUDA_ARCH_FAMILY_SPECIFIC__ == 1000)",
    "defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000",
    "defined(__CUDA_ARCH_SPECIFIC__) || defined(__CUDA_ARCH_FAMILY_SPECIFIC__)",
    "!defined(__CUDA_ARCH__)",
    "__CUDA_ARCH__",
    "__CUDA_ARCH__ / 100 == 12",
    "__CUDA_ARCH__ % 100 == 10",
    "__CUDA_ARCH_LIST__ >= 900",
    "defined(__CUDA_ARCH__) && __CUDA_ARCH_LIST__ == __CUDA_ARCH__",
    # Ternaries, nested and unsigned.
    "(__CUDA_ARCH__ >= 900 ? __CUDA_ARCH__ : 0) >= 1000",
    "__CUDA_ARCH__ >= 1000 ? defined(__CUDA_ARCH_FEAT_SM100_ALL) : __CUDA_ARCH__ >= 800",
    "(1 ? -1 : 0u) > 0",
    "(0 ? 1u : -1) > 0",
    "(__CUDA_ARCH__ ? -1 : 0u) > 0",
    "__CUDA_ARCH__ >= 900 ? __CUDA_ARCH__ >= 1000 ? 2 : 1 : 0",
    # Unsigned mixing and wrap-around.
    "-1 < 0u",
    "-1 > 0u",
    "0u - 1 == 18446744073709551615",
    "0xFFFFFFFFFFFFFFFF == -1",
    "18446744073709551615 > 0",
    "9223372036854775807 + 1 < 0",
    "-__CUDA_ARCH__ < 0u",
    "(__CUDA_ARCH__ - 1000u) < 200",
    "~0u == 0xffffffffffffffff",
    "~0 == -1",
    "-1 / 2 == 0",
    "-7 % 3 == -1",
    "-7 / 2u > 0",
    "-16 >> 2 == -4",
    "(-16 >> 2u) < 0",
    "(-16 >> 2u) == -4",
    "1u << 63 > 0",
    "(1 << 63) < 0",
    "(1 << 63u) < 0",
    "0x7fffffffffffffff * 2 == -2",
    # Literals: bases, suffixes, separators.
    "0x384 == 900 && 01604 == 900 && 0b1110000100 == 900",
    "900u == 900LL && 900ull == 900Ul && 900LLU == 900l",
    "1'000 == 1000",
    "'A' == 65 && '\\n' == 10",
    "true && !false",
    # Operators that are skipped must not be evaluated: no division by zero there.
    "defined(__CUDA_ARCH__) && 1000 / __CUDA_ARCH__ == 1",
    "!defined(__CUDA_ARCH__) || 120000 % __CUDA_ARCH__ == 0",
    "__CUDA_ARCH__ ? 90000 / __CUDA_ARCH__ : 0",
    "__CUDA_ARCH__ == 0 ? 1 : 1 / __CUDA_ARCH__",
    # The comma operator: value and type of the right operand.
    "(0, __CUDA_ARCH__ >= 900)",
    "(1u, -1) < 0",
    "(-1, 1u) > 0",
    # C++ alternative tokens.
    "defined(__CUDA_ARCH__) and not (__CUDA_ARCH__ < 900)",
    "__CUDA_ARCH__ bitand 0x400 xor 0",
]


def test_tricky_conditions_match_nvcc() -> None:
    compare(TRICKY)


def test_the_trtllm_gate_admits_hopper_and_datacenter_blackwell() -> None:
    """A known answer, so that the comparison cannot pass by both sides being wrong the same way."""
    errors: list[str] = []
    (vec,) = liftgate_truths([TRICKY[0]], errors)
    assert errors == []
    admitted = {a.name for a, v in zip(universe(), vec, strict=False) if v}
    assert admitted == {a.name for a in universe() if 900 <= a.cuda_arch < 1200}
    assert vec[host_lane()] is False


# ---------------------------------------------------------------------------
# Random conditions.

ARCH_VALUES = (
    "__CUDA_ARCH__",
    "__CUDA_ARCH_SPECIFIC__",
    "__CUDA_ARCH_FAMILY_SPECIFIC__",
    "__CUDA_ARCH_FEAT_SM90_ALL",
    "__CUDA_ARCH_FEAT_SM100_ALL",
    "__CUDA_ARCH_FEAT_SM120_ALL",
    "__CUDA_ARCH_LIST__",
)
FEATURES = ("SM90_ALL", "SM100_ALL", "SM120_ALL")
INTERESTING = (
    0,
    1,
    2,
    7,
    63,
    64,
    100,
    750,
    800,
    900,
    1000,
    1030,
    1100,
    1200,
    1210,
    2**31,
    2**63 - 1,
    2**63,
    2**64 - 1,
)
SUFFIXES = ("", "", "", "u", "U", "l", "L", "ul", "UL", "ll", "LL", "ull", "LLU", "uLL")
BINARY_OPS = ("*", "+", "-", "<", "<=", ">", ">=", "==", "!=", "&", "^", "|", "&&", "||")


@st.composite
def literal(draw: st.DrawFn) -> str:
    value = draw(st.one_of(st.sampled_from(INTERESTING), st.integers(0, 2000), st.integers(0, 2**64 - 1)))
    base = draw(st.sampled_from(("dec", "dec", "hex", "oct", "bin")))
    if base == "hex":
        digits = draw(st.sampled_from(("0x{:x}", "0X{:X}"))).format(value)
    elif base == "oct":
        digits = f"0{value:o}" if value else "0"
    elif base == "bin":
        digits = f"0b{value:b}"
    else:
        digits = str(value)
    suffix = draw(st.sampled_from(SUFFIXES))
    if base == "dec" and value > 2**63 - 1 and "u" not in suffix.lower():
        suffix += "u"  # gcc accepts it too ("so large that it is unsigned"), but warns on every pass
    return digits + suffix


ARCH_NUMBERS = ("0", "1", "750", "800", "900", "1000", "1030", "1100", "1200", "1210")
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


def atom() -> st.SearchStrategy[str]:
    return st.one_of(
        literal(),
        literal().map(lambda v: f"-{v}"),  # negative values, where signedness shows
        # The shape of most real gates: an arch macro against a capability number.
        st.tuples(
            st.sampled_from(ARCH_VALUES), st.sampled_from(COMPARISONS), st.sampled_from(ARCH_NUMBERS)
        ).map(" ".join),
        st.sampled_from(ARCH_VALUES),
        st.sampled_from(ARCH_VALUES).map(lambda m: f"defined({m})"),
        st.sampled_from(ARCH_VALUES).map(lambda m: f"defined {m}"),
        st.sampled_from(FEATURES).map(lambda f: f"__CUDA_ARCH_HAS_FEATURE__({f})"),
    )


def compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # Divisors and shift counts are built so that they are never zero, negative or >= 64 where
    # they are evaluated: those are errors or undefined, not something to compare. (Such an
    # operation is parenthesised whole, or an operand after it could extend the count: in
    # ``a << (n & 63) + b`` the count is ``(n & 63) + b``.) The masks
    # are signed or unsigned at random, since the count's type must not leak into a shift's result.
    mask_suffix = st.sampled_from(("", "u"))
    divide = st.sampled_from(("/", "%"))
    return st.one_of(
        st.tuples(st.sampled_from(("!", "~", "-", "+")), children).map(lambda t: f"{t[0]} {t[1]}"),
        st.tuples(children, st.sampled_from(BINARY_OPS), children).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
        st.tuples(children, divide, children, mask_suffix).map(
            lambda t: f"({t[0]} {t[1]} ((({t[2]}) & 1023{t[3]}) + 1))"
        ),
        st.tuples(
            st.one_of(children, literal().map(lambda v: f"-{v}")),
            st.sampled_from(("<<", ">>")),
            st.one_of(children, st.integers(1, 63).map(str)),
            mask_suffix,
            st.sampled_from(("", "", " < 0", " > 1000")),
        ).map(lambda t: f"(({t[0]} {t[1]} (({t[2]}) & 63{t[3]})){t[4]})"),
        # Division by a value that may be zero, where only the operator's guard keeps it unevaluated.
        st.tuples(children, divide, children, children)
        .map(
            lambda t: st.sampled_from(
                (
                    f"(({t[2]}) ? ({t[0]}) {t[1]} ({t[2]}) : {t[3]})",
                    f"(({t[2]}) && ({t[0]}) {t[1]} ({t[2]}))",
                    f"(!({t[2]}) || ({t[0]}) {t[1]} ({t[2]}))",
                    f"(({t[2]}) == 0 ? {t[3]} : ({t[0]}) {t[1]} ({t[2]}))",
                )
            )
        )
        .flatmap(lambda s: s),
        st.tuples(children, children, children).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
        st.tuples(children, children).map(lambda t: f"({t[0]}, {t[1]})"),  # gcc takes the comma operator
        children.map(lambda c: f"({c})"),
        # Truth hides most of a value; these show its sign and size (signed vs unsigned).
        st.tuples(children, st.sampled_from(("< 0", ">= 0", "> 1000", "< -1000", "% 7 == 3"))).map(
            lambda t: f"({t[0]}) {t[1]}"
        ),
    )


condition = st.recursive(atom(), compound, max_leaves=10)


@settings(
    max_examples=3,
    deadline=None,
    # One example is a batch of 150 conditions checked on a dozen passes; a failure message
    # lists every disagreeing condition already, so shrinking (an nvcc batch per step) is skipped.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example),
)
@given(st.lists(condition, min_size=150, max_size=150))
def test_random_conditions_match_nvcc(conditions: list[str]) -> None:
    compare(conditions)
