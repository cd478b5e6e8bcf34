#!/usr/bin/env bash
# PREPARED in the fourteenth session, NOT YET RUN (no device time was left): the first call of
# the next session. Checks main's head on the H200 after the fourteenth session's last change
# (416a8e5 and 2e55401, the shared mask-and-store helper): the general path moved into the Gluon logits
# kernel was validated on the H200 (indexer gpu tests 40 passed, call 7) before two offline-only
# steps: the Triton kernel's pass over done flags removed (HAS_DONE / DONE_SPANS: the kept path
# compiles to the same program) and names / one helper in the Gluon kernel (SASS identical,
# instruction for instruction). This call runs the indexer gpu suite on the final tree, the
# bench, the runner gpu suite (not run since the general path moved) and the decode step.
# Copy to .dev_lead/ and run with carry [".whl", ".dev_lead/s15_call1.sh"], timeout_s ~560.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "indexer gpu tests"
timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-indexer/tests > $R/indexer_gpu_s15c1.log 2>&1; echo "indexer rc=$?"; grep -E "^(FAILED|ERROR)" $R/indexer_gpu_s15c1.log | head; tail -1 $R/indexer_gpu_s15c1.log
el "indexer bench"
timeout 100 python3 -m ds41_indexer.bench --json $R/indexer_bench_s15c1.json > $R/indexer_bench_s15c1.log 2>&1; echo "bench rc=$?"
el "runner gpu tests"
timeout 240 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s15c1.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s15c1.log | head; tail -1 $R/runner_gpu_s15c1.log
el "profile_step"
timeout 100 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 > $R/profile_step_s15c1.txt 2>&1
grep -E "^== |graph replay|Error" $R/profile_step_s15c1.txt
el "all done"
tail -17 $R/indexer_bench_s15c1.log | cut -c1-112
} 2>&1 | tee $R/lead_s15_call1.log
