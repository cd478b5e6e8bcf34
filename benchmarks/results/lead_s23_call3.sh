#!/usr/bin/env bash
# Twenty-third session, call 3 (issue 11; its first run deadlocked pvlag on bf16 records, KS = 2, whose stage ring cannot release one tile late; pvlag now keeps the synchronous wait there): four trees: main, c1 (call 1: consumer 1 decodes half 1), c1p (the working tree: c1 + consumer 1 loads P into registers, no proxy fence), pvlag (c1p + consumer 0 waits for P.V one tile late) (branch
# s23-c1decode) against main's kernel (80dbdd3, staged as .dev_ab/ds41_attention_main).
# 1. smoke: one small problem on the new kernel (a deadlock in the new barrier protocol stops
#    here, killed); 2. bits on four format pairs (lead_s17_ab.py, both trees); 3. times in one
#    process, T = 1..4096, launch hidden and default, best of three; 4. the attention gpu
#    suite on the new tree if the bits are equal. Carry [".whl", ".dev_ab"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export AB_DIR=$PWD/.dev_ab TREES=main:ds41_attention_main,c1:ds41_attention_c1,pvlag:ds41_attention_pvlag,c1p:ds41_attention
el "smoke"
timeout -s KILL 90 python3 - <<'PY' > $R/s23c3_smoke.log 2>&1
import sys, torch
sys.argv = ["x"]
sys.path.insert(0, "benchmarks/results")
import lead_s17_ab as A
for rows, wf, cf in ((1, "mxfp8", "nvfp4"), (5, "mxfp8", "nvfp4"), (3, "bf16", "nvfp4"), (2, "mxfp8", None)):
    a = A.problem(64, rows, wf, cf, 1)
    o1, l1 = A.launch["main"](*a, pair=False)
    o2, l2 = A.launch["pvlag"](*a, pair=False)
    torch.cuda.synchronize()
    print(rows, wf, cf, "equal" if torch.equal(o1, o2) and torch.equal(l1, l2) else "DIFFER", flush=True)
PY
echo "smoke rc=$?"; cat $R/s23c3_smoke.log | tail -5
grep -q "DIFFER\|Error\|error" $R/s23c3_smoke.log && exit 1
grep -c equal $R/s23c3_smoke.log | grep -q 4 || exit 1
el "bits"
PHASE=bits timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/s23c3_bits.log 2>&1; echo "bits rc=$?"
nd=$(grep -c "BITS DIFFER" $R/s23c3_bits.log); echo "differ: $nd"; tail -1 $R/s23c3_bits.log
el "times"
ROWS=1,64,132,1024,4096 PHASE=time timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/s23c3_time.log 2>&1; echo "time rc=$?"
cp $R/ab17.json $R/s23c3_time.json 2>/dev/null
tail -16 $R/s23c3_time.log
if [ "$nd" = 0 ]; then
  el "attention gpu suite"
  timeout -s KILL 220 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-attention/tests > $R/attention_gpu_s23c3.log 2>&1; echo "attention rc=$?"
  grep -E "^(FAILED|ERROR)" $R/attention_gpu_s23c3.log | head; tail -1 $R/attention_gpu_s23c1.log
fi
el "done"
