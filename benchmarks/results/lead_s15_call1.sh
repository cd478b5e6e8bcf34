#!/usr/bin/env bash
# Issue 12: A/B of lab_general_operand_layout.patch (applied to the working tree) against main
# 11c351a (.dev_old15) in one process; the indexer gpu suite on the patched tree; the runner gpu
# suite (not run since the general path moved into the Gluon kernel).
# Carry [".whl", ".dev_old15", ".dev_lead/s15_call1.sh"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/.dev_old15:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=packages/ds41-indexer/scripts/issue12/compare.py
S=32768:64,32768:256,131072:64,1048576:256,4096:1,131072:1,1048576:1
{
el "indexer gpu tests (patched)"
timeout 170 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s15c1.log 2>&1; echo "indexer rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_gpu_s15c1.log | head; tail -1 $R/indexer_gpu_s15c1.log
for k in 1 2; do
el "compare $k"
timeout 75 python3 $C --sizes $S --iters 15 --json $R/layout_cmp_$k.json > $R/layout_cmp_$k.log 2>&1; echo "rc=$?"
grep -A9 "^context rows |" $R/layout_cmp_$k.log
done
el "compare hidden"
timeout 40 python3 $C --sizes $S --iters 15 --launch-hidden --json $R/layout_cmp_h.json > $R/layout_cmp_h.log 2>&1; echo "rc=$?"
grep -A9 "^context rows |" $R/layout_cmp_h.log
el "runner gpu tests"
timeout 220 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s15c1.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s15c1.log | head; tail -1 $R/runner_gpu_s15c1.log
el "done"
} 2>&1 | tee $R/lead_s15_call1.log
