#!/usr/bin/env bash
# Two GPUs (device kind nvidia-h200-x2): the `gpu2` test (flash_mini, TP=2 == TP=1 bitwise for
# nvfp4_ds_mla and fp8_ds_mla), then the tensor-parallel benchmark (flash_wide, TP=1 vs TP=2)
# in what is left of TP_TOTAL seconds.
#   bash scripts/tp_gpu_check.sh OUTDIR
# Run from the repository root with the ds41 packages on PYTHONPATH.
set -u
OUT=${1:-/tmp/ds41_tp}
TOTAL=${TP_TOTAL:-300}
mkdir -p "$OUT"
start=$(date +%s)
# NVLink multicast stays off (the lent machines' rule; it can disable the shared host's GPUs).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | tee "$OUT/gpus.txt"
timeout "${TP_TEST_TIMEOUT:-150}" python3 -m pytest -q -x -m gpu2 -p no:cacheprovider \
  --basetemp="$OUT/pytest" packages/ds41-runner/tests/test_parallel_gpu.py 2>&1 \
  | tail -40 | tee "$OUT/gpu2_test.log"
echo "gpu2 test: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu2_test.log"
find "$OUT/pytest" -name result.json -exec cp {} "$OUT/tp_check.json" \; 2>/dev/null
left=$(( TOTAL - ($(date +%s) - start) ))
echo "benchmark: ${left} s left" | tee "$OUT/tp_bench.log"
if [ "$left" -gt 15 ]; then
  t0=$(date +%s)
  timeout "$left" python3 -m torch.distributed.run --standalone --nproc-per-node=2 \
    -m ds41_runner.tp_bench --json "$OUT/tp_bench.json" --timeout-s "$left" \
    ${TP_BENCH_ARGS:-} 2>&1 | tail -60 | tee -a "$OUT/tp_bench.log"
  echo "tp_bench: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/tp_bench.log"
fi
