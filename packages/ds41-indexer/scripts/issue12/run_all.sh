#!/bin/bash
# usage (device machine, repo root = .dev_idx2): bash dev/run_all.sh [explore]
export PYTHONPATH=packages/ds41-cache/src:packages/ds41-indexer/src:packages/ds41-attention/src:packages/ds41-runner/src:dev PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/gpu.txt 2>&1
t0=$(date +%s)
timeout 100 python -m pytest -q -m gpu packages/ds41-indexer/tests -n 4 > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -4 $OUT/gpu_tests.log
if [ "$1" == "explore" ]; then
  timeout 120 python dev/explore.py > $OUT/explore.log 2>&1; echo "explore rc=$?"; cat $OUT/explore.log | tail -40
fi
t1=$(date +%s)
timeout ${BENCH_S:-200} python dev/compare.py --json $OUT/indexer_issue12.json ${COMPARE_ARGS} > $OUT/compare.log 2>&1
echo "compare rc=$? $(( $(date +%s) - t1 )) s"; tail -22 $OUT/compare.log
