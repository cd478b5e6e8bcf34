#!/bin/bash
# Issue 12, ninth session, final call. From a copy of the tree's root, with PYTHONPATH holding
# the four packages' src and the folder holding `ds41_indexer_old` (main a09d0a3's package):
# the indexer's GPU tests, then compare.py (old and new package in one process, the bench's
# timing, fused == unfused and row-alone checks on every size).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12
(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv; uname -r) > $OUT/gpu.txt 2>&1
t0=$(date +%s)
timeout ${TEST_S:-150} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests -p no:cacheprovider \
  > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/gpu_tests.log | cut -c1-300
t1=$(date +%s)
timeout ${BENCH_S:-120} python3 $S/compare.py --floor --json $OUT/compare.json --iters ${ITERS:-7} \
  --sizes ${SIZES:-1048576:256,1048576:64,131072:256,131072:64,32768:256,32768:64,131072:1,4096:1,1048576:1} \
  > $OUT/compare.log 2>&1
echo "compare rc=$? $(( $(date +%s) - t1 )) s"
grep -E "floor|^ *[0-9]+ +[0-9]+ \|" $OUT/compare.log | cut -c1-170
