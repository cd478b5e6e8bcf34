#!/usr/bin/env bash
# Nineteenth session, call 9 (final tree: both halves loaded first, the next copies issued
# between the halves' decodes): the attention gpu suite, ds41_attention.bench (default timing,
# then launch hidden), the runner gpu suite.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 4)
timeout 220 python3 -m pytest -q -rfE -m gpu packages/ds41-attention/tests -p no:cacheprovider "${workers[@]}" > $R/attention_gpu_s19f.log 2>&1; echo "attention tests rc=$?"
grep -E "^(FAILED|ERROR)" $R/attention_gpu_s19f.log | head; tail -1 $R/attention_gpu_s19f.log
timeout 120 python3 -m ds41_attention.bench --rows 1,8,48,64,128,1024,4096 --reps 30 --skip torch \
  --json $R/attention_bench_s19f.json --plot $R/attention_bench_s19f.png > $R/attention_bench_s19f.log 2>&1; echo "bench rc=$?"
tail -9 $R/attention_bench_s19f.log
timeout 60 python3 -m ds41_attention.bench --rows 1,64,1024,4096 --reps 30 --skip torch,invariant,fast_triton --launch-hidden \
  --json $R/attention_bench_s19f_hidden.json > $R/attention_bench_s19f_hidden.log 2>&1; echo "bench hidden rc=$?"
tail -6 $R/attention_bench_s19f_hidden.log
timeout 110 python3 -m pytest -q -rfE -m gpu "${workers[@]}" -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s19f.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s19f.log | head; tail -1 $R/runner_gpu_s19f.log
