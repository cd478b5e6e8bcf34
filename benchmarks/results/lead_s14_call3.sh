#!/usr/bin/env bash
# Issue 12: the program's page ids loaded once into shared memory by the producer (working
# tree) against main's head (d01b02b, copied as ds41_indexer_old / ds41_cache_old in
# .dev_old2/), one process; indexer gpu tests on the working tree; the program-shape sweep.
# Carry [".whl", ".dev_old2", ".dev_lead/s14_call3.sh"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/.dev_old2:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=packages/ds41-indexer/scripts/issue12/compare.py
S=32768:64,32768:256,131072:64,1048576:256,131072:1,4096:1
{
el "indexer gpu tests"
timeout 220 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s14c3.log 2>&1; echo "indexer rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_gpu_s14c3.log | head; tail -1 $R/indexer_gpu_s14c3.log
for k in 1 2; do
el "compare $k"
timeout 120 python3 $C --sizes $S --iters 15 --json $R/pages_cmp_$k.json > $R/pages_cmp_$k.log 2>&1; echo "rc=$?"
grep -A8 "^context rows |" $R/pages_cmp_$k.log
done
el "compare hidden"
timeout 120 python3 $C --sizes $S --iters 15 --launch-hidden --json $R/pages_cmp_h.json > $R/pages_cmp_h.log 2>&1; echo "rc=$?"
grep -A8 "^context rows |" $R/pages_cmp_h.log
el "config sweep"
timeout 150 python3 packages/ds41-indexer/scripts/issue12/config_sweep.py --iters 15 --json $R/sweep_s14c3.json > $R/sweep_s14c3.log 2>&1; echo "rc=$?"
tail -40 $R/sweep_s14c3.log
el "done"
} 2>&1 | tee $R/lead_s14_call3.log
