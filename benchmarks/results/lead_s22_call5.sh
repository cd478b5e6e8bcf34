#!/usr/bin/env bash
# Twenty-second session, call 5 (issue 12): the closing evidence on main's tree (indexer kernels
# unchanged since 11c351a): the indexer `gpu` suite (bitwise selection against the torch
# reference, ties, 1..256 rows, up to 1M entries; Gluon logits == Triton logits), then the
# before / after table (the package before issue 12, ff9f13e, staged as ds41_indexer_old /
# ds41_cache_old in .dev_old/ as scripts/issue12/README.md says; launch included, with the
# graph-replay floor), then main alone with the launch hidden. Carry [".whl", ".dev_old"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$PWD/.dev_old:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=packages/ds41-indexer/scripts/issue12/compare.py
{
el "indexer gpu suite"
timeout 200 python3 -m pytest -q -m gpu packages/ds41-indexer/tests -n 4 -p no:cacheprovider > $R/indexer_gpu_s22c5.log 2>&1; echo "rc=$?"; tail -2 $R/indexer_gpu_s22c5.log
el "before/after, launch included"
timeout 200 python3 $C --floor --iters 9 --json $R/issue12_close_s22.json > $R/issue12_close_s22.log 2>&1; echo "rc=$?"
el "after, launch hidden"
timeout 120 python3 $C --skip-old --launch-hidden --floor --iters 9 --json $R/issue12_close_hidden_s22.json > $R/issue12_close_hidden_s22.log 2>&1; echo "rc=$?"
el "done"
grep -A20 "^context rows |" $R/issue12_close_s22.log
grep "floor" $R/issue12_close_s22.log $R/issue12_close_hidden_s22.log
grep -A20 "^context rows |" $R/issue12_close_hidden_s22.log
} 2>&1 | tee $R/lead_s22_call5.log
