#!/usr/bin/env bash
# The two-GPU verify run (issue "Multi-GPU verify run on a 2-GPU machine"), for nvidia-h200-x2:
# `liftgate verify` around a two-process torchrun workload (examples/tp_allreduce.py: a
# tensor-parallel MLP step ending in an NCCL all-reduce), with a real lift applied in the same
# environment: FlashInfer 0.6.2's trtllm_comm chain (its JIT filter and the 13 trtllm_allreduce.cuh
# gates) lifted for sm_120a. On SM90 that lift is a no-op by construction (the filter already
# admits 9.x; the lifted header preprocesses for sm_90a exactly as stock, see
# tests/test_lift_acceptance.py) and the workload does not call FlashInfer: the A/B should find no
# difference, and says so. Expects the wheels in .whl/ (flashinfer-python 0.6.2, apache-tvm-ffi,
# platformdirs, pyelftools); writes under ${OUT:-out}. NPROC=1 rehearses it on one GPU.
set -uo pipefail
# NVLink multicast stays off, in this shell and in every child (torchrun, its ranks, liftgate's runs)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/lgdeps \
  .whl/platformdirs-*.whl .whl/pyelftools-*.whl || exit 2
python3 -m pip install -q --no-index --no-deps --no-compile --prefix /tmp/fenv \
  .whl/flashinfer_python-0.6.2-*.whl .whl/apache_tvm_ffi-*.whl || exit 2
export PYTHONPATH="/tmp/lgdeps:$PWD/src"
lg() { python3 -m liftgate "$@"; }
{
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version,power.limit --format=csv
  nvidia-smi topo -m
} 2>&1 | tee "$OUT/gpus.txt"
python3 -c 'import torch; print("torch", torch.__version__, "GPUs:", torch.cuda.device_count())' | tee -a "$OUT/gpus.txt"
lg lift --chain pb-0e30929539 --env /tmp/fenv -t sm_120a --yes 2>&1 | tail -8 | tee "$OUT/lift.txt"
lift_id=$(lg status --env /tmp/fenv --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lifts"][0]["lift_id"])')
lg verify "$lift_id" --env /tmp/fenv --runs 3 --warmup 1 --metric tokens_per_s=tokens_per_s \
  --metric allreduce_busbw_gb_s=allreduce_busbw_gb_s --workdir /tmp/lgverify --format json -o "$OUT/verify.json" \
  --plot "$OUT/verify.png" -- python3 -m torch.distributed.run --nproc_per_node "${NPROC:-2}" \
  "$PWD/examples/tp_allreduce.py"
echo "verify exit code: $?" | tee -a "$OUT/lift.txt"
python3 -c 'import json, sys
from liftgate.verify.report import outcome_from_json, render_markdown
print(render_markdown(outcome_from_json(json.load(open(sys.argv[1])))))' "$OUT/verify.json" > "$OUT/verify.md"
cat "$OUT/verify.md"
lg status --env /tmp/fenv --all 2>&1 | tee -a "$OUT/lift.txt"
