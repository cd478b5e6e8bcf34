#!/usr/bin/env bash
# Prepared in the thirteenth session and run as the fourteenth session's first call (all
# passed). Checks main's head on the H200 after the thirteenth session's indexer
# changes: the indexer gpu suite (the 2 bf16-output tests failed to compile on the unrolled
# consumer loop in call 6; fixed in a325710 and compiled offline only), the bench on the final
# tree, the runner gpu suite (the logits' operand order changed in a7cec62) and the decode
# step's graph replay. Copy to .dev_lead/ and run with carry [".whl", ".dev_lead/s14_call1.sh"],
# timeout_s ~560 (a cold machine: the runner suite needs ~160 s once the kernels are compiled).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "indexer gpu tests"
timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s14c1.log 2>&1; echo "indexer rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_gpu_s14c1.log | head; tail -1 $R/indexer_gpu_s14c1.log
el "indexer bench"
timeout 100 python3 -m ds41_indexer.bench --json $R/indexer_bench_s14c1.json > $R/indexer_bench_s14c1.log 2>&1; echo "bench rc=$?"
el "runner gpu tests"
timeout 240 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s14c1.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s14c1.log | head; tail -1 $R/runner_gpu_s14c1.log
el "profile_step"
timeout 100 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 > $R/profile_step_s14c1.txt 2>&1
grep -E "^== |graph replay|Error" $R/profile_step_s14c1.txt
el "all done"
tail -17 $R/indexer_bench_s14c1.log | cut -c1-112
} 2>&1 | tee $R/lead_s14_call1.log
