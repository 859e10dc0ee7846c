#!/usr/bin/env bash
# The 16-core scaling run (issue 21), as made on the device host (no network there): the cold
# judged scan of flashinfer-python 0.6.2 + sglang 0.5.23 at 1, 2, 4, 8 and 16 jobs, each run's JSON
# kept and compared (timings aside), then --no-judge and warm at 16 jobs, and the JSON of the code
# before issue 21's work this session (BASE_SRC) at 16 jobs against this code's.
# Payload (carried, $PAYLOAD): trees.tar.xz (the two wheels' files, re-zipped here under their
# own names), wheels/ (liftgate's dependencies), base-src.tar.gz (git archive BASE src).
set -euo pipefail
PAYLOAD=${PAYLOAD:-.devpayload}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONDONTWRITEBYTECODE=1 XDG_CACHE_HOME=/tmp/xdg
python3 --version
pip install -q --no-index --find-links "$PAYLOAD/wheels" --target /tmp/deps packaging rich platformdirs pyelftools
mkdir -p /tmp/trees /tmp/base && tar xJf "$PAYLOAD/trees.tar.xz" -C /tmp/trees && tar xzf "$PAYLOAD/base-src.tar.gz" -C /tmp/base
python3 - <<'PY'
import os, zipfile
for d, name in (("fi", "flashinfer_python-0.6.2-py3-none-any.whl"), ("sg", "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl")):
    root = f"/tmp/trees/{d}"
    with zipfile.ZipFile(f"/tmp/{name}", "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                z.write(path, os.path.relpath(path, root))
PY
W="/tmp/flashinfer_python-0.6.2-py3-none-any.whl /tmp/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl"
export PYTHONPATH="$PWD/src:/tmp/deps"
# SCALING: the job counts (empty: none); EXTRA=0 skips the --no-judge, warm and before runs
# (one device command may run 10 minutes: the run is made in two commands).
SCALING=${SCALING-1,2,4,8,16}
if [ -n "$SCALING" ]; then
  # shellcheck disable=SC2086
  python3 bench/scan_bench.py $W --scaling "$SCALING" --repeat 1 --json-dir "$OUT" | tee "$OUT/scaling.md"
fi
# Wall time and the largest process's peak RSS, as bench/scan_bench.py measures them.
measure() {
  local label=$1
  shift
  python3 -c 'import resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL).returncode
print(f"{sys.argv[1]}: {time.perf_counter() - t:.1f} s, {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB (exit {rc})")' "$label" "$@"
}
if [ "${EXTRA:-1}" != 0 ]; then
  # shellcheck disable=SC2086
  {
  measure "no-judge -j16 cold" python3 -m liftgate scan $W -t sm_120 --no-cache --no-judge -j 16
  measure "judged -j16 (fills the cache)" python3 -m liftgate scan $W -t sm_120 -j 16
  measure "judged -j16 warm" python3 -m liftgate scan $W -t sm_120 -j 16
  PYTHONPATH="/tmp/base/src:/tmp/deps" measure "before (53a72d9) judged -j16 cold" \
    python3 -m liftgate scan $W -t sm_120 --no-cache -j 16 --format json -o "$OUT/base.json"
  } | tee "$OUT/more.txt"
fi
python3 - "$OUT" <<'PY' | tee "$OUT/identity.txt"
import json, sys
out = sys.argv[1]
def load(name):
    doc = json.load(open(f"{out}/{name}"))
    doc.pop("elapsed_s", None); doc.get("summary", {}).pop("elapsed_s", None)
    return json.dumps(doc, sort_keys=True)
import os
names = [n for n in ("j1.json", "j2.json", "j4.json", "j8.json", "j16.json", "base.json") if os.path.exists(f"{out}/{n}")]
if not names:
    raise SystemExit(0)
ref = load(names[0])
print("reference:", names[0])
for name in names[1:]:
    try:
        print(name, "identical" if load(name) == ref else "DIFFERS")
    except FileNotFoundError:
        print(name, "missing")
PY
