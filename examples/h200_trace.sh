#!/usr/bin/env bash
# The H200 demonstration of docs/trace.md: `liftgate trace` on the real APIs and on FlashInfer.
# 1. examples/trace_demo/apis.py calls torch.cuda, Triton's target, CuPy and NVML, real and --as sm_120.
# 2. examples/selective_state_update.py (FlashInfer 0.6.2's Mamba decode step), real and --as sm_120.
# Each trace is mapped onto a static scan with `liftgate scan --trace`. Expects the wheels in .whl/
# (flashinfer-python 0.6.2, apache-tvm-ffi, platformdirs, pyelftools) and writes under ${OUT:-out}.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=/tmp/fiws
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/lgdeps \
  .whl/platformdirs-*.whl .whl/pyelftools-*.whl || exit 2
python3 -m pip install -q --no-index --no-deps --no-compile --prefix /tmp/fenv \
  .whl/flashinfer_python-0.6.2-*.whl .whl/apache_tvm_ffi-*.whl || exit 2
SITE=$(echo /tmp/fenv/lib/python3*/site-packages)
# liftgate from src/, FlashInfer from its prefix: the traced processes inherit this PYTHONPATH
export PYTHONPATH="$SITE:/tmp/lgdeps:$PWD/src"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv | tee "$OUT/gpu.csv"
lg() { python3 -m liftgate "$@"; }
report="$OUT/report.txt"
: > "$report"
for as in "" sm_120; do
  name=apis${as:+_as_$as}
  echo "== trace examples/trace_demo/apis.py ${as:+--as $as}" | tee -a "$report"
  lg trace --source examples/trace_demo ${as:+--as $as} -o "$OUT/$name.json" -- python3 examples/trace_demo/apis.py \
    2>&1 | tee -a "$report"
  lg scan examples/trace_demo -t "${as:-sm_90}" --trace "$OUT/$name.json" --show traced --no-judge 2>&1 | tee -a "$report"
done
# FlashInfer's Mamba decode step: untraced twice (the first builds the JIT module), traced with probes twice
# (the first also scans the environment for them), with queries only, and as sm_120 (which builds the
# SM100 module for sm_120a: no kernel image on an H200)
TIMEFORMAT=%R
cd /tmp
for mode in plain plain probes probes queries; do
  case $mode in
    plain) secs=$( { time OUT_NPY=/tmp/ssu.npy python3 "$OLDPWD/examples/selective_state_update.py" >/dev/null 2>&1; } 2>&1 ) ;;
    probes) secs=$( { time OUT_NPY=/tmp/ssu.npy python3 -m liftgate trace -q --env /tmp/fenv -o "$OUT/ssu.json" \
              -- python3 "$OLDPWD/examples/selective_state_update.py" >/dev/null 2>&1; } 2>&1 ) ;;
    queries) secs=$( { time OUT_NPY=/tmp/ssu.npy python3 -m liftgate trace -q --no-probes -o /tmp/ssu_q.json \
              -- python3 "$OLDPWD/examples/selective_state_update.py" >/dev/null 2>&1; } 2>&1 ) ;;
  esac
  echo "wall seconds, selective_state_update.py, $mode: $secs" | tee -a "$report"
done
cd "$OLDPWD"
echo "== trace examples/selective_state_update.py --as sm_120" | tee -a "$report"
( cd /tmp && OUT_NPY=/tmp/ssu.npy lg trace --env /tmp/fenv --as sm_120 -o "$OUT/ssu_as_sm_120.json" \
    -- python3 "$OLDPWD/examples/selective_state_update.py" ) 2>&1 | tail -12 | tee -a "$report"
for name in ssu:sm_90 ssu_as_sm_120:sm_120; do
  echo "== scan --trace $OUT/${name%%:*}.json" | tee -a "$report"
  lg scan --env /tmp/fenv -t "${name##*:}" --trace "$OUT/${name%%:*}.json" --show traced --no-judge --kind py-runtime \
    --kind py-build 2>&1 | tee -a "$report"
done
