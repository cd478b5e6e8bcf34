#!/usr/bin/env bash
# Twenty-seventh session, call 2 (issue 11): two lab patches of the one-CTA kernel's start and
# end, from call 1's timeline. ed = early_denominators.patch (the sinks loaded by the producer
# at the start, the denominators handed to consumer 1 while consumer 0's last P.V runs); edt =
# output_page_touch.patch (ed and the output row's first line prefetched into L2 at the
# start). Bits of main / ed / edt on four format pairs (lead_s17_ab.py), times in one process
# (graph replay, launch hidden and default, best of three), then the stamped timelines of all
# three at T = 132 / 1024 / 4096 (timeline.py, with the epilogue's new stamps). Carry [".whl"].
# (The step patches apply after their predecessors: lab_tree.sh builds the trees this call ran.)
set -u
source scripts/device_env.sh
R=$OUT
L=packages/ds41-attention/scripts/lab
rm -rf /tmp/ab && mkdir -p /tmp/ab
for n in ed:early_denominators edt:output_page_touch; do
  bash packages/ds41-attention/scripts/lab_tree.sh /tmp/ab/ds41_attention_${n%%:*} ${n#*:} || exit 1
done
export AB_DIR=/tmp/ab TREES="main:ds41_attention,ed:ds41_attention_ed,edt:ds41_attention_edt"
PHASE=bits timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/s27c2_bits.log 2>&1
echo "bits rc=$?"; grep -c "BITS DIFFER" $R/s27c2_bits.log; tail -1 $R/s27c2_bits.log
ROWS=132,264,1024,4096 PHASE=time OUT=$R timeout -s KILL 200 \
  python3 benchmarks/results/lead_s17_ab.py > $R/s27c2_time.log 2>&1
echo "time rc=$?"; mv $R/ab17.json $R/s27c2_time.json 2>/dev/null
T=packages/ds41-attention/scripts/timeline.py
timeout -s KILL 100 python3 $T --run --json $R/timeline_s27c2_main.json > $R/timeline_s27c2_main.log 2>&1
echo "timeline main rc=$?"
for n in early_denominators output_page_touch; do
  timeout -s KILL 100 python3 $T --run --patch $L/$n.patch --json $R/timeline_s27c2_$n.json \
    > $R/timeline_s27c2_$n.log 2>&1
  echo "timeline $n rc=$?"
done
for f in main early_denominators output_page_touch; do
  echo "== $f"; grep -v Warning $R/timeline_s27c2_$f.log | grep -E "^T =|life|c0_loop|c0_denom|c0_staged|c1_|k_start->c0_first|p_start->p_q"
done
tail -12 $R/s27c2_time.log
