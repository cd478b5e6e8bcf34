#!/usr/bin/env bash
# One GPU call: the working tree's attention package against itself with a lab patch applied
# (PATCH, a file under scripts/lab/, with the patches it is a step on: lab_tree.sh; NAME, the
# patched tree's label, default "lab"), with
# benchmarks/results/lead_s17_ab.py: bits on four format pairs, then times at ROWS (default
# 1,64,132,1024,4096) in one process, launch hidden and default, best of three. If the bits
# are equal and the patch is at most GAIN (default 0.995) of the tree's time at T = 1024 and
# 4096 under both timings, it is applied to this copy of the tree and the attention gpu suite
# runs on it (SUITE=0: never), then the runner and integration gpu suites (RUNNER=1).
# BITS=new: the patch changes the bits on purpose (e.g. another rounding of the softmax), so
# the bits phase is skipped and adoption rests on the times; the gpu suite then checks the
# patched kernels against float64 and their invariance (pair == one-CTA, a row alone == in
# batches, graph == eager). Logs and JSON under $OUT (default /tmp/ab_patch), prefixed with
# TAG (default NAME). Run from the device copy of the repository; carry [".whl"].
set -u
cd "$(dirname "$0")/../../.."
: "${PATCH:?PATCH=packages/ds41-attention/scripts/lab/<name>.patch}"
name=${NAME:-lab}; tag=${TAG:-$name}; R=${OUT:-/tmp/ab_patch}
mkdir -p "$R"
source scripts/device_env.sh
rm -rf /tmp/ab && mkdir -p /tmp/ab
LT=packages/ds41-attention/scripts/lab_tree.sh
pname=$(basename "$PATCH" .patch)  # a step patch brings the patches it applies after
bash $LT "/tmp/ab/ds41_attention_$name" "$pname" || exit 1
export AB_DIR=/tmp/ab TREES="main:ds41_attention,$name:ds41_attention_$name"
if [ "${BITS:-same}" = new ]; then
  nd=0; echo "bits phase skipped (BITS=new: the patch changes the bits)"
else
  PHASE=bits timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > "$R/${tag}_bits.log" 2>&1
  echo "bits rc=$?"
  nd=$(grep -c "BITS DIFFER" "$R/${tag}_bits.log"); echo "differ: $nd"; tail -1 "$R/${tag}_bits.log"
fi
ROWS=${ROWS:-1,64,132,1024,4096} PHASE=time OUT=$R timeout -s KILL 150 \
  python3 benchmarks/results/lead_s17_ab.py > "$R/${tag}_time.log" 2>&1
echo "time rc=$?"
mv "$R/ab17.json" "$R/${tag}_time.json" 2>/dev/null
tail -16 "$R/${tag}_time.log"
adopt=$(python3 - "$R/${tag}_time.json" "$nd" "$name" "${GAIN:-0.995}" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
best = {}
for r in rows:
    k = (r["hidden"], r["T"], r["tree"], r["pair"])
    best[k] = min(best.get(k, 1e9), r["us"])
ratios = [best[(h, t, sys.argv[3], False)] / best[(h, t, "main", False)]
          for h in (True, False) for t in (1024, 4096) if (h, t, "main", False) in best]
print(1 if sys.argv[2] == "0" and len(ratios) == 4 and max(ratios) <= float(sys.argv[4]) else 0)
PY
)
echo "adopt=$adopt"
if [ "$adopt" = 1 ] && [ "${SUITE:-1}" = 1 ]; then
  for p in $(bash $LT --list "$pname"); do
    patch -s -p1 --no-backup-if-mismatch < "packages/ds41-attention/scripts/lab/$p.patch"
  done && echo "patch applied to the tree"
  timeout -s KILL 230 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    packages/ds41-attention/tests > "$R/${tag}_gpu.log" 2>&1
  echo "attention rc=$?"
  grep -E "^(FAILED|ERROR)" "$R/${tag}_gpu.log" | head; tail -1 "$R/${tag}_gpu.log"
  if [ "${RUNNER:-0}" = 1 ]; then
    timeout -s KILL 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
      packages/ds41-runner/tests tests > "$R/${tag}_runner_gpu.log" 2>&1
    echo "runner rc=$?"
    grep -E "^(FAILED|ERROR)" "$R/${tag}_runner_gpu.log" | head; tail -1 "$R/${tag}_runner_gpu.log"
  fi
fi
