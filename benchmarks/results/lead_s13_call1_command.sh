#!/usr/bin/env bash
# Lead, thirteenth session, call 1 (prepared in the twelfth): the gpu suites of the runner, the
# cache and the indexer on main's HEAD (the twelfth session's last commit, shared slot lookup and
# RoPE helpers, was checked offline only), packages run separately (two test_bench.py clash in
# one pytest run), then the decode step's graph replay for the record.
# carry [".whl", ".dev_lead/s13_call1.sh"], timeout_s ~420.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
for p in runner cache indexer; do
  el "$p gpu tests"
  timeout 160 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-$p/tests > $R/${p}_gpu_s13c1.log 2>&1; echo "$p rc=$?"; grep -E "^(FAILED|ERROR)" $R/${p}_gpu_s13c1.log | head; tail -1 $R/${p}_gpu_s13c1.log
done
el "profile_step"
timeout 100 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 > $R/profile_step_s13c1.txt 2>&1
grep -E "^== |graph replay|Error" $R/profile_step_s13c1.txt
el "all done"
} 2>&1 | tee $R/lead_s13_call1.log
