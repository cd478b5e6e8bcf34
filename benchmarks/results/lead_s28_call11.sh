#!/usr/bin/env bash
# Twenty-eighth session, call 11 (issue 11): main against the persistent design with Q and the
# output by TMA (ps6: persistent_items_s27_tma_qo.patch; ps7: persistent_items_s28_q3d.patch,
# Q's descriptor [T, H, 512] like the output's) in one process (lead_s17_ab.py): bits on four
# format pairs, ps7 on a non-contiguous Q, then times from one to several waves. Carry [".whl"].
set -u
source scripts/device_env.sh
R=$OUT
rm -rf /tmp/ab && mkdir -p /tmp/ab
for n in ps6:persistent_items_s27_tma_qo ps7:persistent_items_s28_q3d; do
  bash packages/ds41-attention/scripts/lab_tree.sh /tmp/ab/ds41_attention_${n%%:*} ${n#*:} || exit 1
done
export AB_DIR=/tmp/ab TREES="main:ds41_attention,ps6:ds41_attention_ps6,ps7:ds41_attention_ps7"
PHASE=bits timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/attention_s28c11_bits.log 2>&1
echo "bits rc=$?"; grep -c "BITS DIFFER" $R/attention_s28c11_bits.log; tail -3 $R/attention_s28c11_bits.log
timeout -s KILL 60 python3 - <<'PY' 2>&1 | grep -v Warning | tee $R/attention_s28c11_strided.log
import sys
sys.argv = ["x"]
sys.path.insert(0, "benchmarks/results")
import lead_s17_ab as ab
import torch
for h, rows, seed in ((64, 300, 7), (16, 333, 8), (128, 140, 9)):
    a = list(ab.problem(h, rows, "mxfp8", "nvfp4", seed))
    big = torch.randn(rows, h, 1024, device="cuda").to(torch.bfloat16)
    big[..., :512] = a[0]
    o1, l1 = ab.launch["main"](*a, pair=False)
    a[0] = big[..., :512]
    o2, l2 = ab.launch["ps7"](*a, pair=False)
    print("strided q", h, rows, "equal" if torch.equal(o1, o2) and torch.equal(l1, l2) else "DIFFER", flush=True)
PY
ROWS=67,132,133,200,264,1024,4096 PHASE=time OUT=$R timeout -s KILL 240 \
  python3 benchmarks/results/lead_s17_ab.py > $R/attention_s28c11_time.log 2>&1
echo "time rc=$?"; mv $R/ab17.json $R/attention_s28c11_time.json 2>/dev/null; tail -16 $R/attention_s28c11_time.log
