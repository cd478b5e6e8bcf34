#!/usr/bin/env bash
# Twenty-seventh session, call 6 (issue 11): the persistent design, the next lengths used an item late.
# Stamped timeline (timeline.py, per item) of persistent_items_s27_late_lengths.patch (ps4: the
# overlap patch with the next item's lengths turned into tile counts only at the item's end) at
# T = 1024 / 4096; times of main / ps3 / ps4 and bits of ps4 on four format pairs
# (lead_s17_ab.py). Carry [".whl"].
# (The step patches apply after their predecessors: lab_tree.sh builds the trees this call ran.)
set -u
source scripts/device_env.sh
R=$OUT
L=packages/ds41-attention/scripts/lab
T=packages/ds41-attention/scripts/timeline.py
for n in persistent_items_s27_late_lengths; do
  timeout -s KILL 120 python3 $T --run --rows 1024,4096 --patch $L/$n.patch \
    --json $R/timeline_s27c6_$n.json > $R/timeline_s27c6_$n.log 2>&1
  echo "timeline $n rc=$?"
done
for f in persistent_items_s27_late_lengths; do
  echo "== $f"; grep -v Warning $R/timeline_s27c6_$f.log | grep -E "^T =|life|p_start->p_q|p_q->p_first|p_first->p_loop|c0_start->c0_q|c0_q->c0_first|c0_first->c0_loop|c0_loop->c0_end|c1_loop->c1_end|k_start->c0_first|Error|error|cycle" | head -40
done
rm -rf /tmp/ab && mkdir -p /tmp/ab
for n in ps2:persistent_items_s27_qfree ps3:persistent_items_s27_late_lengths; do  # (named wrongly: ps4 missing, see call 7)
  bash packages/ds41-attention/scripts/lab_tree.sh /tmp/ab/ds41_attention_${n%%:*} ${n#*:} || exit 1
done
export AB_DIR=/tmp/ab TREES="main:ds41_attention,ps3:ds41_attention_ps3,ps4:ds41_attention_ps4"
ROWS=132,1024,4096 PHASE=time OUT=$R timeout -s KILL 150 \
  python3 benchmarks/results/lead_s17_ab.py > $R/s27c6_time.log 2>&1
echo "time rc=$?"; mv $R/ab17.json $R/s27c6_time.json 2>/dev/null; tail -8 $R/s27c6_time.log
BITS_TREES=main,ps4 PHASE=bits timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/s27c6_bits.log 2>&1
echo "bits rc=$?"; grep -c "BITS DIFFER" $R/s27c6_bits.log; tail -1 $R/s27c6_bits.log
