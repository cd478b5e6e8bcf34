#!/usr/bin/env bash
# Twenty-sixth session, call 3 (issue 12): the closing evidence on the tree with this session's
# logits kernel (ring indices as masks and shifts; a 4-warp producer beside two consumer
# warpgroups): the indexer `gpu` suite (bitwise selection against the torch reference, ties,
# 1..256 rows, up to 1M entries; Gluon logits == Triton logits in every program shape), then
# the before / after table (the package before issue 12, ff9f13e, staged as ds41_indexer_old /
# ds41_cache_old in .dev_old/ as scripts/issue12/README.md says; launch included, with the
# graph-replay floor), then this tree alone with the launch hidden.
# Carry [".whl", ".dev_old"].
set -u
source scripts/device_env.sh
export PYTHONPATH=$PWD/.dev_old:$PYTHONPATH
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=packages/ds41-indexer/scripts/issue12/compare.py
{
el "indexer gpu suite"
timeout 200 python3 -m pytest -q -m gpu packages/ds41-indexer/tests -n 4 -p no:cacheprovider > $R/indexer_gpu_s26c3.log 2>&1; echo "rc=$?"; tail -2 $R/indexer_gpu_s26c3.log
el "before/after, launch included"
timeout 200 python3 $C --floor --iters 9 --json $R/issue12_close_s26.json > $R/issue12_close_s26.log 2>&1; echo "rc=$?"
el "after, launch hidden"
timeout 120 python3 $C --skip-old --launch-hidden --floor --iters 9 --json $R/issue12_close_hidden_s26.json > $R/issue12_close_hidden_s26.log 2>&1; echo "rc=$?"
el "done"
grep -A20 "^context rows |" $R/issue12_close_s26.log
grep "floor" $R/issue12_close_s26.log $R/issue12_close_hidden_s26.log
grep -A20 "^context rows |" $R/issue12_close_hidden_s26.log
} 2>&1 | tee $R/lead_s26_call3.log
