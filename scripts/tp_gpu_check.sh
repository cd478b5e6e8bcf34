#!/usr/bin/env bash
# Two GPUs (device kind nvidia-h200-x2): the `gpu2` test (flash_mini, TP=2 == TP=1 bitwise for
# nvfp4_ds_mla and fp8_ds_mla) and the tensor-parallel benchmark (flash_wide, TP=1 vs TP=2).
#   bash scripts/tp_gpu_check.sh OUTDIR
# Run from the repository root with the ds41 packages on PYTHONPATH.
set -u
OUT=${1:-/tmp/ds41_tp}
mkdir -p "$OUT"
# NVLink multicast stays off (the lent machines' rule; it can disable the shared host's GPUs).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | tee "$OUT/gpus.txt"
t0=$(date +%s)
timeout "${TP_TEST_TIMEOUT:-75}" python3 -m pytest -q -x -m gpu2 -p no:cacheprovider \
  --basetemp="$OUT/pytest" packages/ds41-runner/tests/test_parallel_gpu.py 2>&1 \
  | tail -40 | tee "$OUT/gpu2_test.log"
echo "gpu2 test: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpu2_test.log"
find "$OUT/pytest" -name result.json -exec cp {} "$OUT/tp_check.json" \; 2>/dev/null
t0=$(date +%s)
timeout "${TP_BENCH_TIMEOUT:-80}" python3 -m torch.distributed.run --standalone \
  --nproc-per-node=2 -m ds41_runner.tp_bench --json "$OUT/tp_bench.json" ${TP_BENCH_ARGS:-} 2>&1 \
  | tail -60 | tee "$OUT/tp_bench.log"
echo "tp_bench: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/tp_bench.log"
