#!/bin/bash
# Issue 12, third round: one H200 call (from the device copy's root, PYTHONPATH set to the four
# packages' src and the folder holding `ds41_indexer_old`, the package before the round):
# the indexer's GPU tests, then compare.py (launch floor, before/after at the issue's sizes).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
t0=$(date +%s)
timeout ${TEST_S:-80} python3 -m pytest -q -m gpu packages/ds41-indexer/tests -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/gpu_tests.log
t1=$(date +%s)
timeout ${BENCH_S:-110} python3 packages/ds41-indexer/scripts/issue12/compare.py --floor \
  --json $OUT/indexer_issue12d_h200.json --iters ${ITERS:-11} \
  --sizes ${SIZES:-4096:1,32768:1,131072:1,1048576:1,32768:64,1048576:256} > $OUT/compare.log 2>&1
echo "compare rc=$? $(( $(date +%s) - t1 )) s"; grep "floor" $OUT/compare.log; tail -8 $OUT/compare.log
