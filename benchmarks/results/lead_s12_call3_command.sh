#!/usr/bin/env bash
# Lead, twelfth session, call 3: main 29a28f5 (indexer Gluon logits kernel with programmatic
# dependent launch; 2 segments at 256 x 1M) against ebc6159 (without both): indexer bench on
# both trees, decode step graph replay on both; then the indexer's gpu tests on main.
# Stage: mkdir -p .dev_base && git archive ebc6159 | tar -x -C .dev_base
# carry [".whl", ".dev_base", ".dev_lead/s12_call3.sh"], timeout_s ~420.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); root=$PWD
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
src() { echo "/tmp/site:$1/packages/ds41-cache/src:$1/packages/ds41-indexer/src:$1/packages/ds41-attention/src:$1/packages/ds41-runner/src"; }
{
for t in base new; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  el "indexer bench $t"
  (cd $d && PYTHONPATH=$(src $d) timeout 90 python3 -m ds41_indexer.bench --json $R/indexer_bench_s12c3_$t.json > $R/indexer_bench_s12c3_$t.log 2>&1; echo "rc=$?"; tail -22 $R/indexer_bench_s12c3_$t.log)
done
for t in base new; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  el "profile_step $t"
  (cd $d && PYTHONPATH=$(src $d) timeout 100 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 > $R/profile_step_s12c3_$t.txt 2>&1)
  grep -E "^== |graph replay|_gluon_logits_kernel|Error" $R/profile_step_s12c3_$t.txt
done
el "indexer gpu tests on main"
PYTHONPATH=$(src $root) timeout 150 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s12c3.log 2>&1; echo "indexer gpu rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_gpu_s12c3.log | head; tail -1 $R/indexer_gpu_s12c3.log
el "all done"
} 2>&1 | tee $R/lead_s12_call3.log
