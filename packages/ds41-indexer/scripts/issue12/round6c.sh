#!/bin/bash
# Issue 12, sixth round, call 3: the indexer's GPU tests (the Gluon kernel's included), then
# compare.py (the package before the round, as `ds41_indexer_old`, and this one, one process).
# From the device copy's root with PYTHONPATH holding the four packages' src and the folder
# holding ds41_indexer_old.
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
t0=$(date +%s)
timeout ${TEST_S:-60} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests -p no:cacheprovider \
  > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_tests.log | cut -c1-300
t1=$(date +%s)
timeout ${BENCH_S:-85} python3 packages/ds41-indexer/scripts/issue12/compare.py --json $OUT/compare.json \
  --iters ${ITERS:-5} --sizes ${SIZES:-1048576:256,32768:64,131072:64,131072:1,4096:1,1048576:1} \
  > $OUT/compare.log 2>&1
echo "compare rc=$? $(( $(date +%s) - t1 )) s"; tail -8 $OUT/compare.log | cut -c1-200
