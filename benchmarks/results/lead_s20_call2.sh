#!/usr/bin/env bash
# Twentieth session, call 2: main against the NVFP4 table decode
# (packages/ds41-attention/scripts/lab/nvfp4_table_decode.patch): bits on four format pairs,
# times at T = 1..4096; if the patch is the same bits and >= 0.5% faster at T = 1024 and 4096
# (one-CTA, both timings), it is applied to this copy of the tree; then the runner gpu suite
# runs on the tree chosen. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT
L=packages/ds41-attention/scripts/lab
rm -rf /tmp/ab && mkdir -p /tmp/ab
cp -r packages/ds41-attention/src/ds41_attention /tmp/ab/ds41_attention_lut
patch -s -p5 -d /tmp/ab/ds41_attention_lut < $L/nvfp4_table_decode.patch || exit 1
export AB_DIR=/tmp/ab TREES=main:ds41_attention,lut:ds41_attention_lut
PHASE=bits timeout 150 python3 benchmarks/results/lead_s17_ab.py > $R/s20c2_bits.log 2>&1; echo "bits rc=$?"
nd=$(grep -c "BITS DIFFER" $R/s20c2_bits.log); echo "differ: $nd"; tail -1 $R/s20c2_bits.log
ROWS=1,64,132,1024,4096 PHASE=time timeout 120 python3 benchmarks/results/lead_s17_ab.py > $R/s20c2_time.log 2>&1; echo "time rc=$?"
tail -16 $R/s20c2_time.log
adopt=$(python3 - "$R/ab17.json" "$nd" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
best = {}
for r in rows:
    k = (r["hidden"], r["T"], r["tree"], r["pair"])
    best[k] = min(best.get(k, 1e9), r["us"])
ok = sys.argv[2] == "0"
ratios = [best[(h, t, "lut", False)] / best[(h, t, "main", False)]
          for h in (True, False) for t in (1024, 4096) if (h, t, "main", False) in best]
print(1 if ok and len(ratios) == 4 and max(ratios) <= 0.995 else 0)
PY
)
echo "adopt=$adopt"
if [ "$adopt" = 1 ]; then patch -s -p1 --no-backup-if-mismatch < $L/nvfp4_table_decode.patch && echo "patch applied to the tree"; fi
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 4)
timeout 220 python3 -m pytest -q -rfE -m gpu "${workers[@]}" -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s20c2.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s20c2.log | head; tail -1 $R/runner_gpu_s20c2.log
