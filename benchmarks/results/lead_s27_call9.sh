#!/usr/bin/env bash
# Twenty-seventh session, call 9 (issue 11): the persistent design with the later items' Q
# loaded by TMA (persistent_items_s27_tma_q.patch, ps5) against main and ps4 in one process
# (lead_s17_ab.py): times at T = 132..4096, then bits of ps5 on four format pairs. Call 8's
# bound: without the later Q copies ps4 ran 5.5% under main. Carry [".whl"].
# (The step patches apply after their predecessors: lab_tree.sh builds the trees this call ran.)
set -u
source scripts/device_env.sh
R=$OUT
L=packages/ds41-attention/scripts/lab
rm -rf /tmp/ab && mkdir -p /tmp/ab
for n in ps4:persistent_items_s27_late_lengths ps5:persistent_items_s27_tma_q; do
  bash packages/ds41-attention/scripts/lab_tree.sh /tmp/ab/ds41_attention_${n%%:*} ${n#*:} || exit 1
done
export AB_DIR=/tmp/ab TREES="main:ds41_attention,ps4:ds41_attention_ps4,ps5:ds41_attention_ps5"
BITS_TREES=main,ps5 PHASE=bits timeout -s KILL 120 python3 benchmarks/results/lead_s17_ab.py > $R/attention_s27c9_bits.log 2>&1
echo "bits rc=$?"; grep -c "BITS DIFFER" $R/attention_s27c9_bits.log; tail -3 $R/attention_s27c9_bits.log
ROWS=132,1024,2112,4096 PHASE=time OUT=$R timeout -s KILL 150 \
  python3 benchmarks/results/lead_s17_ab.py > $R/attention_s27c9_time.log 2>&1
echo "time rc=$?"; mv $R/ab17.json $R/attention_s27c9_time.json 2>/dev/null; tail -10 $R/attention_s27c9_time.log
