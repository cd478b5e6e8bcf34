#!/usr/bin/env bash
# Lead, ninth session: the merged tree's check in one H200 call. .dev_lead/base = a09d0a3
# (the session's starting main) for the decode-step profile A/B.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
src() { echo "$1/packages/ds41-cache/src:$1/packages/ds41-indexer/src:$1/packages/ds41-attention/src:$1/packages/ds41-runner/src"; }
export PYTHONPATH=/tmp/site:$(src $PWD) PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); P="-p no:cacheprovider"
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
el "cache tests (all, on the GPU)"
python3 -m pytest -q packages/ds41-cache/tests $P -n 4 2>&1 | tail -4
el "compress_bench"
python3 packages/ds41-cache/scripts/compress_bench.py --json $R/compress_bench_s9.json 2>&1 | tail -14
el "runner gpu"; python3 -m pytest -q -m gpu packages/ds41-runner/tests $P -n 4 2>&1 | tail -4
el "indexer candidate tests + fused gpu test"
python3 -m pytest -q $P -n 4 packages/ds41-indexer/tests/test_candidates.py "packages/ds41-indexer/tests/test_gpu.py::test_gpu_fused_unfused_and_row_invariance" 2>&1 | tail -4
el "profile_step base a09d0a3"
PYTHONPATH=/tmp/site:$(src $PWD/.dev_lead/base) python3 .dev_lead/base/benchmarks/profile_step.py --batch 1,64 --sites 12 > $R/profile_step_s9_base.txt 2>&1
grep -E "us of kernels|reduce_segments|matmul_kernel|attn|other " $R/profile_step_s9_base.txt | head -24
el "profile_step merged"
python3 benchmarks/profile_step.py --batch 1,64 --sites 12 > $R/profile_step_s9.txt 2>&1
grep -E "us of kernels|reduce_segments|matmul_kernel|attn|other " $R/profile_step_s9.txt | head -24
el "serve_bench burst"
timeout 150 python3 -m ds41_runner.serve_bench --workloads burst --json $R/serve_h200_s9.json --markdown $R/serve_h200_s9.md 2>&1 | grep -E "^\|" | head -8
el "all done"
} 2>&1 | tee $R/lead_s9_final.log
