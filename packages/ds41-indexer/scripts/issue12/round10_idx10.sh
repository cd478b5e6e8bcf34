#!/bin/bash
# Issue 12, tenth session (helper idx10): one H200 call for the production kernel with the block
# factors in the producer (PFAC + LIM, no knobs). From a copy of the tree's root with the four
# packages' src on PYTHONPATH and main's kernel copied to build/gluon_kernels_main.py:
# 1. the indexer's GPU tests (-n 4) on this package;
# 2. gluon11_lab.py: main's dispatched logits (main's kernel and shapes + the Triton pass)
#    against this package's `paged_logits_gpu` and alternative program shapes, every result
#    bitwise the Triton kernel's (exit 1 otherwise).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=packages/ds41-indexer/scripts/issue12
t0=$(date +%s)
timeout ${TEST_S:-130} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests \
  -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s"; tail -2 $OUT/gpu_tests.log | cut -c1-300
t1=$(date +%s)
timeout ${LAB_S:-75} python3 $S/gluon11_lab.py --main-kernel build/gluon_kernels_main.py \
  --json $OUT/lab.json --iters ${ITERS:-7} > $OUT/lab.log 2>&1
echo "lab rc=$? $(( $(date +%s) - t1 )) s"
cat $OUT/lab.log | cut -c1-200
