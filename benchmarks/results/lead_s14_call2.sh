#!/usr/bin/env bash
# Issue 12's closing table: the package before issue 12 (ff9f13e, indexer and its cache package
# copied under the names ds41_indexer_old / ds41_cache_old into .dev_old/) and main's head, one
# process, bench grid, default timing (launch included, with the graph replay floor), then main
# alone with the launch hidden (GPU time). Carry [".whl", ".dev_old", ".dev_lead/s14_call2.sh"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/.dev_old:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=packages/ds41-indexer/scripts/issue12/compare.py
{
el "before/after, launch included"
timeout 260 python3 $C --floor --iters 9 --json $R/issue12_close_s14.json > $R/issue12_close_s14.log 2>&1; echo "rc=$?"
el "after, launch hidden"
timeout 150 python3 $C --skip-old --launch-hidden --floor --iters 9 --json $R/issue12_close_hidden_s14.json > $R/issue12_close_hidden_s14.log 2>&1; echo "rc=$?"
el "done"
grep -A20 "^context rows |" $R/issue12_close_s14.log
grep "floor" $R/issue12_close_s14.log $R/issue12_close_hidden_s14.log
grep -A20 "^context rows |" $R/issue12_close_hidden_s14.log
} 2>&1 | tee $R/lead_s14_call2.log
