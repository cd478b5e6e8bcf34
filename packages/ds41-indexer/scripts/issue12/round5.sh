#!/bin/bash
# Issue 12, fifth round: one H200 call, from the device copy's root with PYTHONPATH holding the
# four packages' src, the folder holding `ds41_indexer_old` (the package before the round) and
# packages/ds41-indexer/tests (scenario builders): GPU tests, bitwise old == new logits and the
# pipeline-depth timing (round5.py), then compare.py (before/after at the issue's sizes).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
t0=$(date +%s)
timeout ${TEST_S:-75} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_tests.log
t1=$(date +%s)
timeout ${R5_S:-50} python3 packages/ds41-indexer/scripts/issue12/round5.py --json $OUT/round5.json ${R5_ARGS} > $OUT/round5.log 2>&1
echo "round5 rc=$? $(( $(date +%s) - t1 )) s"; grep -v "^bitwise .*: ok$" $OUT/round5.log | tail -14
t2=$(date +%s)
timeout ${BENCH_S:-110} python3 packages/ds41-indexer/scripts/issue12/compare.py \
  --json $OUT/compare.json --iters ${ITERS:-7} \
  --sizes ${SIZES:-32768:1,131072:1,32768:64,131072:64,1048576:256} > $OUT/compare.log 2>&1
echo "compare rc=$? $(( $(date +%s) - t2 )) s"; tail -7 $OUT/compare.log
