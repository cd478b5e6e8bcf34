#!/usr/bin/env bash
# Twenty-eighth session, call 12 (issue 11): the persistent grid in production (the working
# tree) against main before it (33216ad, a copy of its package carried as
# .dev_ab/ds41_attention_old): graph-replay times from one wave to 31 in one process, then the
# attention package's gpu suite, then bits of both trees on four format pairs.
# The tree it ran is 48f92ad with persistent_one_q_block.patch (lab_tree.sh rebuilds it);
# .dev_ab/ds41_attention_old was `lab_tree.sh .dev_ab/ds41_attention_old --base 33216ad`.
# Carry [".whl", ".dev_ab"].
set -u
source scripts/device_env.sh
R=$OUT
export AB_DIR=$PWD/.dev_ab TREES="old:ds41_attention_old,new:ds41_attention"
ROWS=67,132,133,264,1024,2112,4096 PHASE=time OUT=$R timeout -s KILL 170 \
  python3 benchmarks/results/lead_s17_ab.py > $R/attention_s28c12_time.log 2>&1
echo "time rc=$?"; mv $R/ab17.json $R/attention_s28c12_time.json 2>/dev/null; tail -16 $R/attention_s28c12_time.log
timeout -s KILL 300 python3 -m pytest -q -m gpu packages/ds41-attention/tests -p no:cacheprovider -n 4 \
  > $R/attention_gpu_s28c12.log 2>&1
echo "suite rc=$?"; grep -E "passed|failed|Error" $R/attention_gpu_s28c12.log | tail -8
PHASE=bits timeout -s KILL 110 python3 benchmarks/results/lead_s17_ab.py > $R/attention_s28c12_bits.log 2>&1
echo "bits rc=$?"; grep -c "BITS DIFFER" $R/attention_s28c12_bits.log; tail -2 $R/attention_s28c12_bits.log
