#!/usr/bin/env bash
# Twenty-fourth session, call 3 (issue 11): the adopted tree (the validity k-step, a645048):
# the attention gpu suite, then `ds41_attention.bench` (default timing). Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
el "attention gpu suite"
timeout -s KILL 230 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-attention/tests > $R/attention_gpu_s24c3.log 2>&1; echo "attention rc=$?"
grep -E "^(FAILED|ERROR)" $R/attention_gpu_s24c3.log | head; tail -1 $R/attention_gpu_s24c3.log
el "bench"
timeout -s KILL 90 python3 -m ds41_attention.bench --rows 1,8,64,1024,4096 --skip torch --reps 20 \
  --json $R/attention_bench_s24.json > $R/attention_bench_s24.log 2>&1; echo "bench rc=$?"
tail -14 $R/attention_bench_s24.log
el "done"
