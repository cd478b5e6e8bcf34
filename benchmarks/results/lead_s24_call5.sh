#!/usr/bin/env bash
# Twenty-fourth session, call 5 (issue 11): the spread of the T = 64 figure (call 3's bench read
# 38.3 us for the pair kernel, call 2's A/B 35.4): `ds41_attention.bench` at T = 64 three times
# in separate processes, default timing, then once with the launch hidden. Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
for i in 1 2 3; do
  timeout -s KILL 60 python3 -m ds41_attention.bench --rows 64 --skip torch,fast_triton \
    --reps 50 > $OUT/attention_bench_s24c5_t64_$i.log 2>&1; echo "run $i rc=$?"; tail -1 $OUT/attention_bench_s24c5_t64_$i.log
done
timeout -s KILL 60 python3 -m ds41_attention.bench --rows 64 --skip torch,fast_triton \
  --reps 50 --launch-hidden > $OUT/attention_bench_s24c5_t64_hidden.log 2>&1; echo "hidden rc=$?"
tail -1 $OUT/attention_bench_s24c5_t64_hidden.log
