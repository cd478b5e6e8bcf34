#!/usr/bin/env bash
# Twenty-fifth session, call 3 (issue 11): the committed tree (the base-2 softmax, 4be87f4;
# SASS byte-identical offline to the patch that calls 1-2 measured and tested):
# `ds41_attention.bench` with the default timing, then with the launch hidden, then the
# default timing at T = 64 twice more (the pair kernel's spread between processes).
# Carry [".whl"].
set -u
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
R=${OUT:-/tmp/s25c3}; mkdir -p "$R"
timeout -s KILL 120 python3 -m ds41_attention.bench --rows 1,8,64,1024,4096 --skip torch --reps 20 \
  --json "$R/attention_bench_s25.json" --plot "$R/attention_bench_s25.png" \
  > "$R/attention_bench_s25.log" 2>&1; echo "bench rc=$?"
tail -14 "$R/attention_bench_s25.log"
timeout -s KILL 120 python3 -m ds41_attention.bench --rows 1,64,1024,4096 --skip torch,triton \
  --reps 20 --launch-hidden > "$R/attention_bench_s25_hidden.log" 2>&1; echo "hidden rc=$?"
tail -9 "$R/attention_bench_s25_hidden.log"
for i in 1 2; do
  timeout -s KILL 60 python3 -m ds41_attention.bench --rows 64 --skip torch,triton --reps 20 \
    > "$R/attention_bench_s25_t64_$i.log" 2>&1; echo "t64 run $i rc=$?"
  grep -E "^\| *64 " "$R/attention_bench_s25_t64_$i.log"
done
