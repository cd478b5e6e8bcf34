#!/usr/bin/env bash
# Issue 12: the Gluon kernel scores the general-path spans itself (no Triton pass after it):
# the indexer gpu suite (bitwise Gluon == Triton on general spans: edges, bad pages, every
# program shape), then logits / fused against main 0ae45b6 (.dev_old3) in one process.
# Carry [".whl", ".dev_old3", ".dev_lead/s14_call7.sh"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/.dev_old3:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=packages/ds41-indexer/scripts/issue12/compare.py
S=32768:64,32768:256,131072:64,1048576:256,4096:1,131072:1,1048576:1
{
el "indexer gpu tests"
timeout 170 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s14c7.log 2>&1; echo "indexer rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_gpu_s14c7.log | head; tail -1 $R/indexer_gpu_s14c7.log
for k in 1 2; do
el "compare $k"
timeout 75 python3 $C --sizes $S --iters 15 --json $R/gen_cmp_$k.json > $R/gen_cmp_$k.log 2>&1; echo "rc=$?"
grep -A9 "^context rows |" $R/gen_cmp_$k.log
done
el "compare hidden"
timeout 40 python3 $C --sizes $S --iters 15 --launch-hidden --json $R/gen_cmp_h.json > $R/gen_cmp_h.log 2>&1; echo "rc=$?"
grep -A9 "^context rows |" $R/gen_cmp_h.log
el "done"
} 2>&1 | tee $R/lead_s14_call7.log
