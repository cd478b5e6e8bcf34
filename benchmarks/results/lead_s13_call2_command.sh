#!/usr/bin/env bash
# Lead, thirteenth session, call 2: the Gluon logits kernel without conversion instructions
# (fp16 placement + prmt instead of e4m3 -> f16 cvt) and with the group maxima as float maxima
# (keys once a block): indexer gpu tests on the new tree, bench base (HEAD 8b426b6, .dev_base)
# vs new, a second short pair in the other order, then the runner gpu suite (call 1's timed out
# at 160 s on a cold machine).
# carry [".whl", ".dev_base", ".dev_lead/s13_call2.sh"], timeout_s ~600.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); root=$PWD
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
src() { echo "/tmp/site:$1/packages/ds41-cache/src:$1/packages/ds41-indexer/src:$1/packages/ds41-attention/src:$1/packages/ds41-runner/src"; }
{
el "indexer gpu tests (new)"
PYTHONPATH=$(src $root) timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s13c2.log 2>&1; echo "indexer gpu rc=$?"; grep -E "^(FAILED|ERROR)|Error" $R/indexer_gpu_s13c2.log | head; tail -1 $R/indexer_gpu_s13c2.log
for t in base new; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  el "indexer bench $t"
  (cd $d && PYTHONPATH=$(src $d) timeout 100 python3 -m ds41_indexer.bench --json $R/indexer_bench_s13c2_$t.json > $R/indexer_bench_s13c2_$t.log 2>&1; echo "rc=$?")
done
for t in new base; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  el "indexer bench short $t"
  (cd $d && PYTHONPATH=$(src $d) timeout 60 python3 -m ds41_indexer.bench --contexts 32768,131072,1048576 --rows 1,64,256 > $R/indexer_bench_s13c2_short_$t.log 2>&1; echo "rc=$?")
done
el "runner gpu tests (new)"
PYTHONPATH=$(src $root) timeout 280 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s13c2.log 2>&1; echo "runner gpu rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s13c2.log | head; tail -1 $R/runner_gpu_s13c2.log
el "all done"
for t in base new; do echo "== bench $t"; tail -17 $R/indexer_bench_s13c2_$t.log | cut -c1-112; done
for t in new base; do echo "== short $t"; tail -9 $R/indexer_bench_s13c2_short_$t.log | cut -c1-112; done
} 2>&1 | tee $R/lead_s13_call2.log
