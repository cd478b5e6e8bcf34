#!/usr/bin/env bash
# Final tree of the fourteenth session (the producer's pages loaded once, bb58450): the runner
# gpu suite, then the indexer bench with the launch included (the BENCHMARKS figures) and with
# the launch hidden. Carry [".whl", ".dev_lead/s14_call6.sh"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "indexer bench"
timeout 100 python3 -m ds41_indexer.bench --json $R/indexer_bench_s14c6.json > $R/indexer_bench_s14c6.log 2>&1; echo "bench rc=$?"
el "indexer bench, launch hidden"
timeout 100 python3 -m ds41_indexer.bench --launch-hidden --json $R/indexer_bench_hidden_s14c6.json > $R/indexer_bench_hidden_s14c6.log 2>&1; echo "bench rc=$?"
el "runner gpu tests"
timeout 250 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s14c6.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s14c6.log | head; tail -1 $R/runner_gpu_s14c6.log
el "done"
head -2 $R/indexer_bench_s14c6.log; tail -16 $R/indexer_bench_s14c6.log | cut -c1-100
head -2 $R/indexer_bench_hidden_s14c6.log; tail -16 $R/indexer_bench_hidden_s14c6.log | cut -c1-100
} 2>&1 | tee $R/lead_s14_call6.log
