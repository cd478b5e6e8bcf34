#!/usr/bin/env bash
# Lead, thirteenth session, call 6: the Gluon logits consumer loop unrolled by the ring's 4
# stages (stage addresses constant; 228 -> 212 instructions a tile): indexer gpu tests on the
# new tree, bench base (c2d9688, .dev_base) vs new, then 256 x 1M and 64 x 32K twice more in
# alternating order.
# carry [".whl", ".dev_base", ".dev_lead/s13_call6.sh"], timeout_s ~420.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); root=$PWD
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
src() { echo "/tmp/site:$1/packages/ds41-cache/src:$1/packages/ds41-indexer/src:$1/packages/ds41-attention/src:$1/packages/ds41-runner/src"; }
{
el "indexer gpu tests (new)"
PYTHONPATH=$(src $root) timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s13c6.log 2>&1; echo "indexer gpu rc=$?"; grep -E "^(FAILED|ERROR)|Error" $R/indexer_gpu_s13c6.log | head; tail -1 $R/indexer_gpu_s13c6.log
for t in base new; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  el "indexer bench $t"
  (cd $d && PYTHONPATH=$(src $d) timeout 100 python3 -m ds41_indexer.bench --json $R/indexer_bench_s13c6_$t.json > $R/indexer_bench_s13c6_$t.log 2>&1; echo "rc=$?")
done
for t in new base new base; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  (cd $d && PYTHONPATH=$(src $d) timeout 60 python3 -m ds41_indexer.bench --contexts 32768,1048576 --rows 64,256 2>&1 | grep -E "^ +(32768 +64|1048576 +256) " | sed "s/^/$t /")
done > $R/indexer_bench_s13c6_repeats.log
el "all done"
for t in base new; do echo "== bench $t"; tail -17 $R/indexer_bench_s13c6_$t.log | cut -c1-112; done
echo "== repeats"; cat $R/indexer_bench_s13c6_repeats.log | cut -c1-100
} 2>&1 | tee $R/lead_s13_call6.log
