#!/usr/bin/env bash
# Twenty-seventh session, call 4 (issue 11): why the persistent design (call 3) gains nothing.
# Stamped timelines (timeline.py, per item) of persistent_items_s27.patch (ps) and of
# persistent_items_s27_qfree.patch (ps2: consumer 1's Q-free arrival before its global
# stores) at T = 1024 / 4096 beside production's; then bits of main / ps / ps2 on four format
# pairs and their times in one process (lead_s17_ab.py). Carry [".whl"].
# (The step patches apply after their predecessors: lab_tree.sh builds the trees this call ran.)
set -u
source scripts/device_env.sh
R=$OUT
L=packages/ds41-attention/scripts/lab
T=packages/ds41-attention/scripts/timeline.py
timeout -s KILL 100 python3 $T --run --rows 1024,4096 --json $R/timeline_s27c4_main.json > $R/timeline_s27c4_main.log 2>&1
echo "timeline main rc=$?"
for n in persistent_items_s27 persistent_items_s27_qfree; do
  timeout -s KILL 120 python3 $T --run --rows 1024,4096 --patch $L/$n.patch \
    --json $R/timeline_s27c4_$n.json > $R/timeline_s27c4_$n.log 2>&1
  echo "timeline $n rc=$?"
done
for f in main persistent_items_s27 persistent_items_s27_qfree; do
  echo "== $f"; grep -v Warning $R/timeline_s27c4_$f.log | grep -E "^T =|life|p_start->p_q|p_q->p_first|p_first->p_loop|c0_start->c0_q|c0_q->c0_first|c0_first->c0_loop|c0_loop->c0_end|c1_loop->c1_end|k_start->c0_first|Error|error" | head -40
done
rm -rf /tmp/ab && mkdir -p /tmp/ab
for n in ps:persistent_items_s27 ps2:persistent_items_s27_qfree; do
  bash packages/ds41-attention/scripts/lab_tree.sh /tmp/ab/ds41_attention_${n%%:*} ${n#*:} || exit 1
done
export AB_DIR=/tmp/ab TREES="main:ds41_attention,ps:ds41_attention_ps,ps2:ds41_attention_ps2"
ROWS=132,1024,4096 PHASE=time OUT=$R timeout -s KILL 150 \
  python3 benchmarks/results/lead_s17_ab.py > $R/s27c4_time.log 2>&1
echo "time rc=$?"; mv $R/ab17.json $R/s27c4_time.json 2>/dev/null; tail -8 $R/s27c4_time.log
BITS_TREES=main,ps2 PHASE=bits timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/s27c4_bits.log 2>&1
echo "bits rc=$?"; grep -c "BITS DIFFER" $R/s27c4_bits.log; tail -1 $R/s27c4_bits.log
