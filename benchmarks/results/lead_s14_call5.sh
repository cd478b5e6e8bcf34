#!/usr/bin/env bash
# Issue 12 experiment: the consumer software-pipelined (tile i's products run while the previous
# tile's epilogue runs; NC = 1 only, ptxas serializes it at NC = 2), working tree, against main
# bb58450+ (.dev_old3, as ds41_indexer_old), one process; the Gluon logits tests first (bits).
# Carry [".whl", ".dev_old3", ".dev_lead/s14_call5.sh"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/.dev_old3:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=packages/ds41-indexer/scripts/issue12/compare.py
S=32768:64,32768:256,131072:64,1048576:256,1048576:16
{
el "gluon logits tests"
timeout 150 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests/test_gluon_logits.py > $R/gluon_tests_s14c5.log 2>&1; echo "rc=$?"; grep -E "^(FAILED|ERROR)" $R/gluon_tests_s14c5.log | head; tail -1 $R/gluon_tests_s14c5.log
for k in 1 2; do
el "compare $k"
timeout 100 python3 $C --sizes $S --iters 15 --json $R/pipe_cmp_$k.json > $R/pipe_cmp_$k.log 2>&1; echo "rc=$?"
grep -A7 "^context rows |" $R/pipe_cmp_$k.log
done
el "compare hidden"
timeout 100 python3 $C --sizes $S --iters 15 --launch-hidden --json $R/pipe_cmp_h.json > $R/pipe_cmp_h.log 2>&1; echo "rc=$?"
grep -A7 "^context rows |" $R/pipe_cmp_h.log
el "done"
} 2>&1 | tee $R/lead_s14_call5.log
