#!/usr/bin/env bash
# Twelfth session, call 1 (helper idx12): overlap_lab.py (main vs overlap vs 2 segments vs
# both, bench-style graph timing, bitwise checks), then the indexer's gpu tests on this tree.
# Run from the tree's root with OUT set; LAB_S / TEST_S bound the two steps.
set -u
LAB_S=${LAB_S:-80}
TEST_S=${TEST_S:-150}
TESTS=${TESTS:-packages/ds41-indexer/tests}
KSEL=${KSEL:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv | tee "$OUT/indexer_s12_call1_overlap.log"
timeout "$LAB_S" python packages/ds41-indexer/scripts/issue12/overlap_lab.py --iters 11 \
  --json "$OUT/indexer_s12_call1_overlap.json" 2>&1 | tee -a "$OUT/indexer_s12_call1_overlap.log"
echo "lab rc=${PIPESTATUS[0]}" | tee -a "$OUT/indexer_s12_call1_overlap.log"
timeout "$TEST_S" python -m pytest $TESTS -m gpu -n 4 ${KSEL:+-k "$KSEL"} -q -p no:cacheprovider \
  > "$OUT/indexer_s12_call1_gpu_tests.log" 2>&1
echo "gpu tests rc=$?" | tee -a "$OUT/indexer_s12_call1_gpu_tests.log"
tail -8 "$OUT/indexer_s12_call1_gpu_tests.log"
