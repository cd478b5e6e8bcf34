#!/usr/bin/env bash
# Eighteenth session, call 4 (final tree: the L2 prefetch of the next program, the fast path's
# pair kernel at two slices): ds41_attention.bench (default timing, then launch hidden), the
# runner gpu suite, the runner's decode step.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT
timeout 180 python3 -m ds41_attention.bench --rows 1,8,48,64,128,1024,4096 --reps 30 --skip torch \
  --json $R/attention_bench_s18.json --plot $R/attention_bench_s18.png > $R/attention_bench_s18.log 2>&1; echo "bench rc=$?"
tail -12 $R/attention_bench_s18.log
timeout 100 python3 -m ds41_attention.bench --rows 1,64,1024,4096 --reps 30 --skip torch,invariant,fast_triton --launch-hidden \
  --json $R/attention_bench_s18_hidden.json > $R/attention_bench_s18_hidden.log 2>&1; echo "bench hidden rc=$?"
tail -8 $R/attention_bench_s18_hidden.log
timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s18.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s18.log | head; tail -1 $R/runner_gpu_s18.log
timeout 90 python3 -m ds41_runner.bench --batches 1,64 --contexts 4096 --iters 10 \
  --json $R/runner_bench_s18.json --markdown $R/runner_bench_s18.md > $R/runner_bench_s18.log 2>&1; echo "runner bench rc=$?"
tail -12 $R/runner_bench_s18.md
