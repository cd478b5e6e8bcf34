#!/usr/bin/env bash
# Lead, tenth session: the merged tree's check in one H200 call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); P="-p no:cacheprovider"
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
src() { echo "$1/packages/ds41-cache/src:$1/packages/ds41-indexer/src:$1/packages/ds41-attention/src:$1/packages/ds41-runner/src"; }
G="us of kernels|reduce_segments|matmul_kernel|_gluon|other |indexer "
{
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
el "indexer tests, all (gpu + interpreter-marked ones on CUDA tensors)"
timeout 200 python3 -m pytest -q -rfE $P -n 8 packages/ds41-indexer/tests > $R/indexer_tests_s10.log 2>&1
echo "rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_tests_s10.log | cut -c1-200 | head -12; tail -1 $R/indexer_tests_s10.log
el "runner gpu tests"
timeout 120 python3 -m pytest -q -m gpu packages/ds41-runner/tests $P -n 4 2>&1 | tail -3
el "serve_bench burst"
timeout 130 python3 -m ds41_runner.serve_bench --workloads burst --json $R/serve_h200_s10.json --markdown $R/serve_h200_s10.md 2>&1 | grep -E "^\||BI/fast" | head -8
el "profile_step merged"
timeout 80 python3 benchmarks/profile_step.py --batch 1,64 --sites 12 > $R/profile_step_s10.txt 2>&1
grep -E "$G" $R/profile_step_s10.txt | head -24
el "profile_step base 8d92014 (this session's start)"
PYTHONPATH=/tmp/site:$(src $PWD/.dev_lead/base10) timeout 130 python3 .dev_lead/base10/benchmarks/profile_step.py --batch 1,64 --sites 12 > $R/profile_step_s10_base.txt 2>&1
grep -E "$G" $R/profile_step_s10_base.txt | head -24
el "indexer bench"
timeout 80 python3 -m ds41_indexer.bench --json $R/indexer_bench_s10.json > $R/indexer_bench_s10.log 2>&1; tail -24 $R/indexer_bench_s10.log
el "all done"
} 2>&1 | tee $R/lead_s10_final.log
