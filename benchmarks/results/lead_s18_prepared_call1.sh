#!/usr/bin/env bash
# PREPARED in the seventeenth session, NOT RUN (no device time left). Before the call:
#   mkdir -p .dev_lead/ab17 && rm -rf .dev_lead/ab17/ds41_attention_old &&
#   cp -r packages/ds41-attention/src/ds41_attention .dev_lead/ab17/ds41_attention_old &&
#   git apply packages/ds41-attention/scripts/lab/first_loads_before_q.patch
# then run with carry [".whl", ".dev_lead/ab17", this script]; timeout ~420.
# 1. main (old) against main + the patch (NEW: the row's lengths and first slot columns loaded
#    before Q's copies, in both kernels; bits equal by construction, compiled offline only):
#    bits on four format pairs, then graph-replay times (lead_s17_ab.py);
# 2. the fast path: the pair kernel against planned and forced split counts, T = 8..66.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
PHASE=bits timeout 200 python3 benchmarks/results/lead_s17_ab.py > $R/ab18_bits.log 2>&1; echo "bits rc=$?"
tail -3 $R/ab18_bits.log
PHASE=time timeout 200 python3 benchmarks/results/lead_s17_ab.py > $R/ab18_time.log 2>&1; echo "time rc=$?"
tail -16 $R/ab18_time.log
timeout 200 python3 benchmarks/results/lead_s18_prepared_fastpair.py > $R/fastpair18.log 2>&1; echo "fastpair rc=$?"
tail -24 $R/fastpair18.log
