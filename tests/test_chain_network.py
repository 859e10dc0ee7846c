"""The FlashInfer all-reduce fusion chain, found from the code of sglang 0.5.23 and flashinfer-python
0.6.2 scanned together (releases from the package index, cached between runs).

SGLang's guard in ``srt/layers/flashinfer_comm_fusion.py`` admits the code its callers run once it
returns; that code creates FlashInfer's all-reduce workspace, which builds the ``trtllm_comm`` JIT
module through ``gen_trtllm_comm_module``, whose filter and whose sources' gates (the 13 in
``trtllm_allreduce.cuh``, through ``trtllm_allreduce.cu``) must all admit the GPU.
"""

from __future__ import annotations

import pytest

from liftgate.arch.core import Arch
from liftgate.chain import ChainContext, judge_members, view
from liftgate.model import Report, VerdictKind
from liftgate.scan import scan

pytestmark = pytest.mark.network

SGLANG_PY = "sglang/srt/layers/flashinfer_comm_fusion.py"
COMM_PY = "flashinfer/jit/comm.py"
HEADER = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"
SOURCE = "flashinfer/data/csrc/trtllm_allreduce.cu"
HEADER_LINES = [417, 455, 485, 533, 711, 895, 950, 991, 1053, 1207, 1265, 1335, 1444]
SM120, SM120A = Arch(12, 0), Arch(12, 0, "a")


def test_allreduce_fusion_chain_from_sglang_to_the_trtllm_allreduce_gates() -> None:
    report: Report = scan(["sglang==0.5.23", "flashinfer-python==0.6.2"], ["sm_120", "sm_120a"])
    workspace = report.workspace
    assert workspace is not None
    (guard,) = [g for g in report.gates if g.location.path == SGLANG_PY and g.location.line == 48]
    (build,) = [g for g in report.gates if g.location.path == COMM_PY and g.location.line == 61]
    header = {g.location.line: g for g in report.gates if g.location.path == HEADER}
    chain = ChainContext(report.gates, workspace).chain(guard.id)

    links = {link.gate_id: link for link in chain.links}
    assert links[build.id].relation == "builds"
    via = links[build.id].via
    assert via[0] == f"returns to resolve_flashinfer_allreduce_fusion_backend() at {SGLANG_PY}:100"
    assert any("create_allreduce_fusion_workspace() at flashinfer/comm/allreduce.py" in step for step in via)
    assert via[-1].startswith(f"calls gen_trtllm_comm_module() at {COMM_PY}:59 from get_trtllm_comm_module()")
    for line in HEADER_LINES:
        link = links[header[line].id]
        assert (link.relation, link.parent_id) == ("compiles", build.id)
        assert link.via == (f"builds {SOURCE}", f"which includes {HEADER}")

    archs = [SM120, SM120A]
    verdicts = judge_members([chain], report.gates, archs, workspace)
    index = {(v.gate_id, v.target): v for v in verdicts}
    gates = {g.id: g for g in report.gates}
    wanted = {guard.id, build.id, *(header[line].id for line in HEADER_LINES)}
    for_120 = view(chain, gates, SM120, index)
    assert set(for_120.required) == wanted  # and nothing else: the `< 800` fallbacks are not links
    assert for_120.verdict is VerdictKind.BLOCKED
    assert for_120.weakest == (build.id,) and "sm_120 lacks cvt-fp4" in for_120.reasons[0]
    # The filter lifted alone compiles the PDL calls out: lifting the chain as one covers that hazard.
    assert any(h.text.startswith("silent exclusion inside the sources") for h in for_120.covered)
    assert not for_120.hazards
    for_120a = view(chain, gates, SM120A, index)
    assert set(for_120a.required) == wanted
    assert for_120a.verdict is VerdictKind.LIFTABLE
