#!/usr/bin/env bash
# Prepared in the twenty-third session for the next one (issue 11): main (b026bce or later)
# against scripts/lab/validity_kstep.patch (the keys' validity as a 17th k-step of Q.K^T):
# bits on four format pairs, times at T = 1..4096 in one process (lead_s17_ab.py); if the bits
# are equal and the patch is >= 0.5% faster at T = 1024 and 4096 under both timings, the
# patch is applied to this copy of the tree and the attention gpu suite runs on it.
# Carry [".whl"]. About 5 minutes with the suite.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT
L=packages/ds41-attention/scripts/lab
rm -rf /tmp/ab && mkdir -p /tmp/ab
cp -r packages/ds41-attention/src/ds41_attention /tmp/ab/ds41_attention_vk
patch -s -p5 -d /tmp/ab/ds41_attention_vk < $L/validity_kstep.patch || exit 1
export AB_DIR=/tmp/ab TREES=main:ds41_attention,vk:ds41_attention_vk
PHASE=bits timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/s24p_bits.log 2>&1; echo "bits rc=$?"
nd=$(grep -c "BITS DIFFER" $R/s24p_bits.log); echo "differ: $nd"; tail -1 $R/s24p_bits.log
ROWS=1,64,132,1024,4096 PHASE=time timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/s24p_time.log 2>&1; echo "time rc=$?"
cp $R/ab17.json $R/s24p_time.json 2>/dev/null
tail -16 $R/s24p_time.log
adopt=$(python3 - "$R/ab17.json" "$nd" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
best = {}
for r in rows:
    k = (r["hidden"], r["T"], r["tree"], r["pair"])
    best[k] = min(best.get(k, 1e9), r["us"])
ratios = [best[(h, t, "vk", False)] / best[(h, t, "main", False)]
          for h in (True, False) for t in (1024, 4096) if (h, t, "main", False) in best]
print(1 if sys.argv[2] == "0" and len(ratios) == 4 and max(ratios) <= 0.995 else 0)
PY
)
echo "adopt=$adopt"
if [ "$adopt" = 1 ]; then
  patch -s -p1 --no-backup-if-mismatch < $L/validity_kstep.patch && echo "patch applied to the tree"
  timeout -s KILL 230 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-attention/tests > $R/attention_gpu_s24p.log 2>&1; echo "attention rc=$?"
  grep -E "^(FAILED|ERROR)" $R/attention_gpu_s24p.log | head; tail -1 $R/attention_gpu_s24p.log
fi
