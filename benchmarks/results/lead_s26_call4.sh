#!/usr/bin/env bash
# Twenty-sixth session, call 4 (issue 12): the runner and integration gpu suites on this
# session's logits kernel (the engine's decode steps launch it with two consumer warpgroups,
# so the 4-warp producer; bitwise invariance across batches, chunkings, graph and eager), then
# the public calls' 64 x 32K with the launch hidden in three more processes, and the bench's
# own table (default timing). Carry [".whl"].
set -u
source scripts/device_env.sh
R=$OUT
timeout -s KILL 240 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
  packages/ds41-runner/tests tests > $R/runner_gpu_s26c4.log 2>&1
echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s26c4.log | head; tail -1 $R/runner_gpu_s26c4.log
C=packages/ds41-indexer/scripts/issue12/compare.py
for k in 1 2 3; do
  timeout 60 python3 $C --skip-old --launch-hidden --iters 9 --sizes 32768:64,32768:256 \
    > $R/hidden_64x32k_s26c4_$k.log 2>&1
  grep -E "^ +32768 +(64|256) \|" $R/hidden_64x32k_s26c4_$k.log
done
timeout 150 python3 -m ds41_indexer.bench --launch-hidden --json $R/indexer_bench_s26c4.json > $R/indexer_bench_s26c4.log 2>&1; echo "bench rc=$?"
tail -25 $R/indexer_bench_s26c4.log
