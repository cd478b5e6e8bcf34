#!/usr/bin/env bash
# Nineteenth session, call 3: a stage-drop profile of the production one-CTA kernel (timing
# only; lab copies from .dev_lead/ab21): nodec = the producer copies the records but neither
# decodes nor stores K; cons = consumers alone (no copies, no decode); noqk = no Q.K^T in
# consumer 0 (S = 0). Then the fast-path test with the pair kernel allowed and with DS41_PAIR=0.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
export AB_DIR=.dev_lead/ab21 TREES=main:ds41_attention,nodec:ds41_attention_nodec,cons:ds41_attention_cons,noqk:ds41_attention_noqk
ROWS=132,1024,4096 PHASE=time timeout 200 python3 benchmarks/results/lead_s17_ab.py > $R/s19c3_drop.log 2>&1; echo "drop rc=$?"
tail -8 $R/s19c3_drop.log
T=packages/ds41-attention/tests/test_gpu.py::test_gluon_fast_path_takes_the_pair_kernel_for_two_slices
timeout 120 python3 -m pytest -q -p no:cacheprovider $T > $R/s19c3_test.log 2>&1; echo "test rc=$?"
DS41_PAIR=0 timeout 120 python3 -m pytest -q -p no:cacheprovider $T >> $R/s19c3_test.log 2>&1; echo "test DS41_PAIR=0 rc=$?"
grep -E "passed|failed" $R/s19c3_test.log
