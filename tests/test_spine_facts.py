"""Typed facts between stages: what a later stage needs is a field, never a sentence parsed back.

The acceptance case of the spine issue: a JIT module that builds eight sources, each holding one
arch gate. Its build filter's evidence lists six names ("… and 2 more"); the typed `BuildTarget`
lists all eight, so the chain holds all nine gates and ``lift --chain`` lifts all nine or none.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import sha256_snapshot
from liftgate.arch.parse import parse_target
from liftgate.chain import find_chains, view
from liftgate.cli.main import main
from liftgate.judge.verdict import judge_scan
from liftgate.model import Coverage, GateKind
from liftgate.scan import scan

FIXTURE = Path(__file__).parent / "fixtures" / "chain"
SM120 = parse_target("sm_120")
SOURCES = 8
NVCC = shutil.which("nvcc")

JIT = '''"""The JIT spec of the octo module: built for Hopper and datacenter Blackwell only."""

from kern8._compat import current_compilation_context, gen_jit_spec, jit_env


def gen_octo_module():
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10])  # filter
    return gen_jit_spec(
        "octo",
        [
{sources}
        ],
        extra_cuda_cflags=nvcc_flags,
    )
'''

CU = """__global__ void kernel_{n}(float* out) {{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200  // gate {n}
  out[threadIdx.x] = {n}.0f;
#endif
}}
"""


def _package(root: Path) -> Path:
    """``kern8``: the kernlib fixture's JIT stand-ins, one build filter, eight sources."""
    pkg = root / "kern8"
    (pkg / "jit").mkdir(parents=True)
    (pkg / "data" / "csrc").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "jit" / "__init__.py").write_text("")
    shutil.copy(FIXTURE / "kernlib" / "kernlib" / "_compat.py", pkg / "_compat.py")
    listed = "\n".join(f'            jit_env.CSRC_DIR / "a{n}.cu",' for n in range(1, SOURCES + 1))
    (pkg / "jit" / "octo.py").write_text(JIT.replace("{sources}", listed))
    for n in range(1, SOURCES + 1):
        (pkg / "data" / "csrc" / f"a{n}.cu").write_text(CU.format(n=n))
    return root


def test_the_build_fact_lists_every_source_while_the_evidence_shortens(tmp_path: Path) -> None:
    report = scan([str(_package(tmp_path / "tree"))], ["sm_120"], use_cache=False)
    (build,) = [g for g in report.gates if g.kind is GateKind.PY_BUILD]
    assert any("and 2 more" in e.text for e in build.evidence)  # what people read: six, then a count
    (target,) = build.builds
    assert target.what == "JIT module" and target.name == "octo"
    assert target.sources == tuple(f"a{n}.cu" for n in range(1, SOURCES + 1))
    assert not target.computed


def test_the_chain_holds_all_nine_gates(tmp_path: Path) -> None:
    report = scan([str(_package(tmp_path / "tree"))], ["sm_120"], use_cache=False)
    cuda = [g for g in report.gates if g.kind is GateKind.CUDA_PP]
    assert len(cuda) == SOURCES
    report = find_chains(judge_scan(report), judge=True)
    (chain,) = report.chains
    seen = view(chain, {g.id: g for g in report.gates}, SM120, report.verdict_index())
    assert len(seen.required) == SOURCES + 1
    assert {g.id for g in cuda} <= set(seen.required)


def test_the_json_chain_requires_nine_and_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import jsonschema

    from liftgate.report.json_format import load_schema

    tree = _package(tmp_path / "tree")
    assert main(["scan", str(tree), "-t", "sm_120", "--by", "chain", "-f", "json", "--no-cache", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, load_schema())
    (chain,) = doc["chains"]
    (per_target,) = chain["targets"]
    assert len(per_target["required"]) == SOURCES + 1
    (build,) = [g for g in doc["gates"] if g["kind"] == "py-build"]
    assert build["facts"]["builds"][0]["sources"] == [f"a{n}.cu" for n in range(1, SOURCES + 1)]


def test_lift_chain_lifts_all_nine_gates_or_none(
    tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    env = tmp_path / "env"
    site = fake_env(_package(tmp_path / "tree"), "kern8", "1.0", prefix=env)
    stock = sha256_snapshot(site)
    report = scan([], ["sm_120"], env=str(env))
    (build,) = [g for g in report.gates if g.kind is GateKind.PY_BUILD]
    assert main(["lift", "--chain", build.id, "--env", str(env), "-t", "sm_120", "--yes"]) == 0
    assert f"chain {build.id}: {SOURCES + 1} gate(s) shut sm_120 out" in capsys.readouterr().err
    lifted = sha256_snapshot(site)
    changed = sorted(k for k in stock if stock[k] != lifted[k])
    assert changed == sorted(
        ["kern8/jit/octo.py", *(f"kern8/data/csrc/a{n}.cu" for n in range(1, SOURCES + 1))]
    )
    again = scan([], ["sm_120"], env=str(env))
    assert all(g.status(SM120).value == "admitted" for g in again.gates if g.kind is not GateKind.BINARY)
    assert main(["revert", "--all", "--env", str(env)]) == 0
    assert sha256_snapshot(site) == stock


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_a_binary_gate_carries_its_coverage_per_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The coverage class (native / ptx-jit / no kernel image) is a field, and a JSON field."""
    import jsonschema

    from liftgate.report.json_format import load_schema

    assert NVCC is not None
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    builds = {
        "_C.so": ["-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
                  "-gencode", "arch=compute_90a,code=sm_90a"],
        "hopper.o": ["-c", "-gencode", "arch=compute_90a,code=sm_90a"],
    }  # fmt: skip
    for name, flags in builds.items():
        subprocess.run(
            [NVCC, *flags, str(tmp_path / "k.cu"), "-o", str(pkg / name)], check=True, capture_output=True
        )
    targets = ["sm_86", "sm_90", "sm_120"]
    report = scan([str(pkg)], targets, use_cache=False)
    by_path = {g.location.path: g for g in report.gates if g.kind is GateKind.BINARY}
    library, hopper = by_path["_C.so"].coverage, by_path["hopper.o"].coverage
    assert library is not None and hopper is not None
    assert [library.coverage(parse_target(t)) for t in targets] == [
        Coverage.NATIVE,
        Coverage.NATIVE,
        Coverage.PTX_JIT,
    ]
    assert hopper.coverage(SM120) is Coverage.NONE
    assert main(["scan", str(pkg), *(a for t in targets for a in ("-t", t)), "-f", "json", "--no-cache", "-q",
                 "--show", "all"]) in (0, 1)  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, load_schema())
    got = {g["path"]: g["facts"]["coverage"]["targets"] for g in doc["gates"] if g["kind"] == "binary"}
    assert got == {
        "_C.so": {"sm_86": "native", "sm_90": "native", "sm_120": "ptx-jit"},
        "hopper.o": {"sm_86": "no-kernel-image", "sm_90": "native", "sm_120": "no-kernel-image"},
    }


def test_a_report_without_its_workspace_is_refused_by_name(tmp_path: Path) -> None:
    """Judge and chains read the scanned files: a report built by hand (no workspace) is refused in one line."""
    from dataclasses import replace

    report = replace(scan([str(_package(tmp_path / "tree"))], ["sm_120"], use_cache=False), workspace=None)
    with pytest.raises(ValueError, match="the judge reads the scanned files"):
        judge_scan(report)
    with pytest.raises(ValueError, match="following chains reads the scanned files"):
        find_chains(report)
