#!/usr/bin/env bash
# Twenty-seventh session, call 7 (issue 11): the persistent design's last form
# (persistent_items_s27_late_lengths.patch, ps4) against main without stamps: bits on four
# format pairs, times at T = 132..4096 in one process (lead_s17_ab.py; call 6's A/B part
# named the tree wrongly and did not run). Carry [".whl"].
# (The step patches apply after their predecessors: lab_tree.sh builds the trees this call ran.)
set -u
source scripts/device_env.sh
R=$OUT
L=packages/ds41-attention/scripts/lab
rm -rf /tmp/ab && mkdir -p /tmp/ab
bash packages/ds41-attention/scripts/lab_tree.sh /tmp/ab/ds41_attention_ps4 persistent_items_s27_late_lengths || exit 1
export AB_DIR=/tmp/ab TREES="main:ds41_attention,ps4:ds41_attention_ps4"
ROWS=132,264,1024,2112,4096 PHASE=time OUT=$R timeout -s KILL 150 \
  python3 benchmarks/results/lead_s17_ab.py > $R/s27c7_time.log 2>&1
echo "time rc=$?"; mv $R/ab17.json $R/s27c7_time.json 2>/dev/null; tail -12 $R/s27c7_time.log
PHASE=bits timeout -s KILL 150 python3 benchmarks/results/lead_s17_ab.py > $R/s27c7_bits.log 2>&1
echo "bits rc=$?"; grep -c "BITS DIFFER" $R/s27c7_bits.log; tail -1 $R/s27c7_bits.log
