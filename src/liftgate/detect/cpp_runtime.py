"""The cpp-runtime detector: C/C++/CUDA host code that dispatches on the running device's capability.

vLLM's ``int32_t version_num = get_sm_version_num(); if (version_num >= 100 && version_num < 120)``
and FlashInfer's ``TVM_FFI_ICHECK_EQ(major, 10) << "MoE kernel requires 10.x architecture"`` are
gates that no ``#if`` shows: they run on the host and see only the device's compute capability.

Values are followed the way the Python detector follows them (`liftgate.detect.pyvalues`): as
*lanes*, one concrete value per known capability (7.0 … 12.1). Function bodies are executed
abstractly with a mask of the lanes that can reach each statement, so ``major * 10 + minor``,
local variables, early returns, ``static`` caches, ``std::pair`` results and member fields set
in one method and tested in another resolve exactly. The capability comes from the CUDA runtime
and driver (``cudaDeviceGetAttribute(…ComputeCapabilityMajor…)``, ``cudaGetDeviceProperties``,
``cuDeviceGetAttribute``, ``at::cuda::getCurrentDeviceProperties()->major``, NVML) and from the
helpers projects wrap them in, resolved across the package's files (`HelperIndex`); a helper
whose definition is not in the scanned files is read from its name, with confidence ``inferred``.

A condition (``if``, ``else if``, ``case``, ``?:``, check macros, a boolean ``return``) whose
truth differs between capabilities is a gate. Host code compiled only under build flags
(``#if defined ENABLE_SCALED_MM_SM100 && ENABLE_SCALED_MM_SM100``) is read as present, and the
gate names the condition (see `liftgate.detect.cuda.Region`).

The detector is cut along its seams: values over lanes (`liftgate.detect.cpp_values`), what is
known of APIs and statements by name (`liftgate.detect.cpp_api`), the interpreter
(`liftgate.detect.cpp_interp`), the package's capability helpers (`liftgate.detect.cpp_helpers`)
and gate emission (`liftgate.detect.cpp_gates`); this module walks one file's functions.
"""

from __future__ import annotations

from liftgate.arch.core import ArchSet
from liftgate.detect.cpp_api import failure_message, infer_helper, inferable, source_names
from liftgate.detect.cpp_gates import GateEmitter
from liftgate.detect.cpp_helpers import HelperIndex, body_ids, region_lookup
from liftgate.detect.cpp_interp import MAX_CALL_DEPTH, MAX_DEPTH, Frame, Interpreter, Lanes, StepBudget
from liftgate.detect.cpp_lex import CAPABILITY_TOKENS, mentions_capability
from liftgate.detect.cpp_syntax import ExprParser, FuncDef, TooDeep, find_functions, forget_tables, tokenize
from liftgate.detect.cpp_values import (
    CV,
    MAX_INT_BITS,
    MAX_TRAIL,
    UNK,
    UNKNOWN,
    CapNum,
    Props,
    ccs,
    const,
    lanewise,
    per_cc,
    prepend,
    truth,
)
from liftgate.detect.cuda import Region
from liftgate.detect.interface import Detection
from liftgate.detect.runtime_arch import archs_for_capabilities
from liftgate.model import Evidence, Gate, Skip

__all__ = [
    "CAPABILITY_TOKENS",
    "CV",
    "MAX_CALL_DEPTH",
    "MAX_DEPTH",
    "MAX_INT_BITS",
    "MAX_TRAIL",
    "UNK",
    "UNKNOWN",
    "CapNum",
    "HelperIndex",
    "Interpreter",
    "Lanes",
    "Props",
    "const",
    "detect_cpp_runtime",
    "failure_message",
    "infer_helper",
    "lanewise",
    "mentions_capability",
    "per_cc",
    "region_lookup",
    "truth",
    "walk_parametric",
]


def detect_cpp_runtime(
    package: str,
    version: str | None,
    path: str,
    text: str,
    regions: list[Region],
    index: HelperIndex,
) -> Detection:
    """cpp-runtime gates of one C/C++/CUDA file (its host code, as the host pass compiles it)."""
    table, of_line = region_lookup(regions)
    toks = tokenize(text, of_line)
    watch = index.names()
    sink = GateEmitter(package, version, path, table)
    skips: list[Skip] = []
    local: dict[str, list[FuncDef]] = {}
    calls: dict[tuple[str, int], tuple[FuncDef, list[CV], Evidence]] = {}
    try:
        fdefs = find_functions(toks, path)
        for fdef in fdefs:
            local.setdefault(fdef.name, []).append(fdef)
        for fdef in fdefs:
            ids = body_ids(fdef)
            if ids.isdisjoint(source_names()) and ids.isdisjoint(watch) and not any(map(inferable, ids)):
                continue
            interp = Interpreter(index, path, table)
            interp.local_functions = local
            interp.parametric_calls = calls
            _walk(interp, fdef, sink, skips, path, package)
        for fdef, args, site in calls.values():  # the file's functions called with the capability
            sink.sink.gates.extend(_instantiate(index, fdef, args, site, table, package, version, path, sink))
    finally:
        forget_tables()
    return Detection(tuple(sink.gates), tuple(skips))


def _instantiate(
    index: HelperIndex,
    fdef: FuncDef,
    args: list[CV],
    site: Evidence,
    regions: list[Region],
    package: str,
    version: str | None,
    path: str,
    walked: GateEmitter,
) -> list[Gate]:
    """A function of the file that a caller passes a device-dependent value: its branches on that
    parameter, with the call site that decides them (a parametric gate). Conditions the plain walk
    already reported are not repeated."""
    bound = [CV(a.lanes, prepend(site, a.trail), a.inferred) if a.arch else UNKNOWN for a in args]
    interp = Interpreter(index, path, regions)
    sink = GateEmitter(package, version, path, regions)
    sink.seen = set(walked.seen)
    # One occurrence count with the file's walk: ids stay unique within the file.
    sink.sink = walked.sink
    start = len(walked.sink.gates)
    env = {name: (bound[k] if k < len(bound) else UNKNOWN) for k, name in enumerate(fdef.params) if name}
    if _run_bound(interp, sink, fdef, env, regions) is None:
        del walked.sink.gates[start:]
        return []
    emitted = walked.sink.gates[start:]
    del walked.sink.gates[start:]
    return [g for g in emitted if site in g.evidence]


def _run_bound(
    interp: Interpreter, sink: GateEmitter, fdef: FuncDef, env: dict[str, CV], regions: list[Region]
) -> Frame | None:
    """Execute ``fdef``'s body with its parameters bound as ``env``, gates going to ``sink``: the
    frame it ends in, or None when it cannot be followed (budget, depth, recursion)."""
    frame = Frame(fdef, fdef.body, env, regions)
    sink.frame = frame
    interp.sink = sink
    try:
        interp.exec_block(interp.body(fdef).body, interp.all_lanes, frame, 0)
    except (StepBudget, TooDeep, RecursionError):
        return None
    finally:
        interp.sink = None
        sink.frame = None
    return frame


def walk_parametric(
    index: HelperIndex,
    fdef: FuncDef,
    position: int,
    regions: list[Region],
    package: str,
    version: str | None,
    path: str,
) -> tuple[ArchSet, ArchSet, tuple[Gate, ...]] | None:
    """Run ``fdef`` with its parameter ``position`` bound to the device's capability as
    ``major * 10 + minor`` (how a caller that passes ``capability.to_int()`` calls it): the targets
    it returns true for, those it may, and the branches that test the parameter (parametric
    gates, each naming the parameter). None when the function cannot be followed."""
    param = fdef.params[position] if position < len(fdef.params) else ""
    if not param:
        return None
    bound = Evidence(
        f"{param}: the capability the caller passes, as major * 10 + minor ({fdef.qualname} is "
        "parametric: which branch runs is decided at its call sites)",
        path,
        fdef.line,
    )
    value = per_cc(lambda cc: cc[0] * 10 + cc[1], bound)
    interp = Interpreter(index, path, regions)
    sink = GateEmitter(package, version, path, regions)
    env = {name: (value if k == position else UNKNOWN) for k, name in enumerate(fdef.params) if name}
    try:
        frame = _run_bound(interp, sink, fdef, env, regions)
    finally:
        forget_tables()
    if frame is None:
        return None
    result = interp.return_value(frame)
    true: list[tuple[int, int]] = []
    unknown: list[tuple[int, int]] = []
    for cc, v in zip(ccs(), result.lanes, strict=True):
        t = truth(v)
        if t is UNK:
            unknown.append(cc)
        elif t:
            true.append(cc)
    gates = tuple(g for g in sink.gates if bound in g.evidence)
    return archs_for_capabilities(true), archs_for_capabilities(unknown), gates


def _walk(
    interp: Interpreter, fdef: FuncDef, sink: GateEmitter, skips: list[Skip], path: str, package: str
) -> None:
    """Run one function with unknown arguments, reporting its gates."""
    env = {name: UNKNOWN for name in fdef.params if name}
    frame = Frame(fdef, fdef.body, env, interp.regions)
    for name, toks in fdef.inits:
        frame.fields[name] = interp.eval(
            ExprParser(toks, 0, len(toks)).parse(), Frame(fdef, toks, env), interp.all_lanes
        )
    sink.frame = frame
    interp.sink = sink
    interp.steps = 0
    sink.enclosing = []
    try:
        interp.exec_block(interp.body(fdef).body, interp.all_lanes, frame, 0)
    except StepBudget:
        skips.append(Skip(f"{path}:{fdef.line}", f"{fdef.qualname}: too large to follow completely", package))
    except TooDeep as exc:
        skips.append(Skip(f"{path}:{fdef.line}", f"{fdef.qualname}: {exc}; not followed", package))
    except RecursionError:  # a last resort: the bounds above keep the walk well inside the limit
        skips.append(Skip(f"{path}:{fdef.line}", f"{fdef.qualname}: nested too deeply to follow", package))
    finally:
        interp.sink = None
        interp.nesting = 0
        sink.frame = None
