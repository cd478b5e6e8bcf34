#!/bin/bash
# Issue 12, sixth round (Gluon logits), call 1: from the device copy's root with PYTHONPATH
# holding the four packages' src: the Gluon kernel's bitwise tests, then gluon6.py (timings of
# the Triton kernel, the Gluon kernel and its configurations, each compared bitwise).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
t0=$(date +%s)
timeout ${TEST_S:-70} python3 -m pytest -q -m gpu -n 4 packages/ds41-indexer/tests/test_gluon_logits.py \
  -p no:cacheprovider > $OUT/gluon_tests.log 2>&1
echo "gluon tests rc=$? $(( $(date +%s) - t0 )) s"; tail -15 $OUT/gluon_tests.log | cut -c1-300
t1=$(date +%s)
timeout ${G6_S:-110} python3 packages/ds41-indexer/scripts/issue12/gluon6.py --json $OUT/gluon6.json \
  ${G6_ARGS} > $OUT/gluon6.log 2>&1
echo "gluon6 rc=$? $(( $(date +%s) - t1 )) s"; cut -c1-200 $OUT/gluon6.log | tail -40
