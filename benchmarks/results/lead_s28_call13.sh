#!/usr/bin/env bash
# Twenty-eighth session, call 13 (issue 11): the final tree. (1) Times of main before the
# persistent grid (old, 33216ad), call 12's production tree (merged: the next item's Q copies in
# one block) and the final one (new: two blocks, the lab's measured code) in one process;
# (2) the attention suite's persistent-grid, graph and invariance tests on the final tree;
# (3) the runner and integration gpu suites; (4) the closing table (`ds41_attention.bench`,
# the Gluon kernel beside the Triton one), default timing and launch hidden.
# .dev_ab was built with packages/ds41-attention/scripts/lab_tree.sh: ds41_attention_old
# `--base 33216ad`, ds41_attention_merged `persistent_one_q_block` (on 48f92ad, the final tree).
# Carry [".whl", ".dev_ab"].
set -u
source scripts/device_env.sh
R=$OUT
export AB_DIR=$PWD/.dev_ab TREES="old:ds41_attention_old,merged:ds41_attention_merged,new:ds41_attention"
ROWS=1024,2112,4096 PHASE=time OUT=$R timeout -s KILL 100 \
  python3 benchmarks/results/lead_s17_ab.py > $R/attention_s28c13_time.log 2>&1
echo "time rc=$?"; mv $R/ab17.json $R/attention_s28c13_time.json 2>/dev/null; tail -8 $R/attention_s28c13_time.log
timeout -s KILL 100 python3 -m pytest -q -m gpu packages/ds41-attention/tests -p no:cacheprovider -n 4 \
  -k "persistent or graph or invariance or int32" > $R/attention_gpu_s28c13.log 2>&1
echo "attention subset rc=$?"; grep -E "passed|failed" $R/attention_gpu_s28c13.log | tail -3
timeout -s KILL 200 python3 -m pytest -q -m gpu packages/ds41-runner/tests -p no:cacheprovider -n 4 \
  > $R/runner_gpu_s28c13.log 2>&1
echo "runner rc=$?"; grep -E "passed|failed" $R/runner_gpu_s28c13.log | tail -3
timeout -s KILL 100 python3 -m pytest -q -m gpu tests -p no:cacheprovider > $R/integration_gpu_s28c13.log 2>&1
echo "integration rc=$?"; grep -E "passed|failed|no tests" $R/integration_gpu_s28c13.log | tail -3
timeout -s KILL 110 python3 -m ds41_attention.bench --rows 1,8,64,1024,4096 --skip torch --reps 20 \
  --json "$R/attention_bench_s28.json" --plot "$R/attention_bench_s28.png" \
  > "$R/attention_bench_s28.log" 2>&1; echo "bench rc=$?"; cat "$R/attention_bench_s28.log" | grep "^|" 
timeout -s KILL 70 python3 -m ds41_attention.bench --rows 1,64,1024,4096 --skip torch,triton \
  --reps 20 --launch-hidden > "$R/attention_bench_s28_hidden.log" 2>&1; echo "hidden rc=$?"
grep "^|" "$R/attention_bench_s28_hidden.log"
