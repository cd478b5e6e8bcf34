#!/usr/bin/env bash
# Twelfth session, call 1 (helper idx12): the indexer's gpu tests on this tree, then
# overlap_lab.py (main vs overlap vs 2 segments vs both, bench-style graph timing, bitwise
# checks). Run from the tree's root with OUT set; TEST_S / LAB_S bound the two steps.
set -u
TEST_S=${TEST_S:-160}
LAB_S=${LAB_S:-150}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv | tee "$OUT/indexer_s12_call1_overlap.log"
timeout "$TEST_S" python -m pytest packages/ds41-indexer/tests -m gpu -n 4 -q -p no:cacheprovider \
  > "$OUT/indexer_s12_call1_gpu_tests.log" 2>&1
echo "gpu tests rc=$?" | tee -a "$OUT/indexer_s12_call1_gpu_tests.log"
tail -5 "$OUT/indexer_s12_call1_gpu_tests.log"
timeout "$LAB_S" python packages/ds41-indexer/scripts/issue12/overlap_lab.py \
  --json "$OUT/indexer_s12_call1_overlap.json" 2>&1 | tee -a "$OUT/indexer_s12_call1_overlap.log"
echo "lab rc=${PIPESTATUS[0]}" | tee -a "$OUT/indexer_s12_call1_overlap.log"
