#!/usr/bin/env bash
# The H200 demonstration of docs/verify.md ("On a real GPU"): scan, judge, lift FlashInfer 0.6.2's
# SM100 selective-state-update path for sm_90, and `liftgate verify` it against the stock SM90 path.
# Expects the wheels in .whl/ (flashinfer-python 0.6.2, apache-tvm-ffi, platformdirs, pyelftools) and writes
# its reports under ${OUT:-out}. Runs from the repository root; liftgate runs from src/.
set -euo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/lgdeps \
  .whl/platformdirs-*.whl .whl/pyelftools-*.whl || exit 2
export PYTHONPATH="/tmp/lgdeps:$PWD/src"
# The environment liftgate lifts: a prefix of its own beside the image's python3 (which holds torch)
python3 -m pip install -q --no-index --no-deps --no-compile --prefix /tmp/fenv \
  .whl/flashinfer_python-0.6.2-*.whl .whl/apache_tvm_ffi-*.whl
SITE=$(echo /tmp/fenv/lib/python3*/site-packages)
nvidia-smi --query-gpu=name,compute_cap,driver_version,power.limit --format=csv | tee "$OUT/gpu.csv"

lg() { python3 -m liftgate "$@"; }
# 1. scan and judge the two gates of the SM100 path in the installed environment, for the H200
lg scan --env /tmp/fenv -t sm_90 -t sm_90a --kind py-build --kind py-runtime --show all --format json \
  -o /tmp/scan.json
lg explain py-ab4aa2493f --env /tmp/fenv -t sm_90a | tee "$OUT/explain.txt"
# 2. lift both for sm_90 (the judge says: liftable, lift both)
lg lift pb-c9468eb888 py-ab4aa2493f --env /tmp/fenv -t sm_90 --yes | tee "$OUT/lift.txt"
lift_id=$(lg status --env /tmp/fenv --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lifts"][0]["lift_id"])')
# 3. verify: stock (SM90 module) against lifted (SM100 module), 5 runs each after a warm-up that JIT-compiles
set +e
lg verify "$lift_id" --env /tmp/fenv --runs 5 --warmup 1 --compare-output ssu_out.npy --rtol 0.02 --atol 0.05 \
  --metric time_us=time_us --workdir /tmp/lgverify --format json -o "$OUT/verify.json" --plot "$OUT/verify.png" \
  -- env PYTHONPATH="$SITE" python3 examples/selective_state_update.py
code=$?
set -e
echo "verify exit code: $code"
python3 -c 'import json, sys
from liftgate.verify.report import outcome_from_json, render_markdown
print(render_markdown(outcome_from_json(json.load(open(sys.argv[1])))))' "$OUT/verify.json" > "$OUT/verify.md"
cat "$OUT/verify.md"
lg status --env /tmp/fenv --all | tee "$OUT/status.txt"
for f in /tmp/lgverify/*/output.log; do tail -5 "$f" | sed "s|^|$(basename "$(dirname "$f")"): |"; done > "$OUT/run_logs.txt" 2>/dev/null || true
