#!/usr/bin/env bash
# Twenty-fifth session, call 5 (issue 11): where T = 1024 loses against T = 4096, by the
# bench with the launch hidden at whole and partial waves of 132 programs: T = 924 (7 waves),
# 1024 (7.76), 1056 (8), 2112 (16), 4096 (31.03). Carry [".whl"].
set -u
cd "$(dirname "$0")/../.."
source scripts/device_env.sh
R=${OUT:-/tmp/s25c5}; mkdir -p "$R"
timeout -s KILL 150 python3 -m ds41_attention.bench --rows 924,1024,1056,2112,4096 \
  --skip torch,triton --reps 20 --launch-hidden --json "$R/attention_bench_s25_waves.json" \
  > "$R/attention_bench_s25_waves.log" 2>&1; echo "bench rc=$?"
tail -7 "$R/attention_bench_s25_waves.log"
