#!/usr/bin/env bash
# Nineteenth session, call 8: the next tile's copies issued in the middle of the decode (same
# arithmetic) against HEAD 5db6933 (imported as ds41_attention_h from .dev_lead/ab23). Bits on
# four format pairs (one-CTA and pair kernels), then times in one process.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
export AB_DIR=.dev_lead/ab23 TREES=h:ds41_attention_h,fmid:ds41_attention
PHASE=bits timeout 150 python3 benchmarks/results/lead_s17_ab.py > $R/s19c8_bits.log 2>&1; echo "bits rc=$?"
grep -c "BITS DIFFER" $R/s19c8_bits.log; grep "BITS DIFFER" $R/s19c8_bits.log | head -5; tail -2 $R/s19c8_bits.log
ROWS=1,132,1024,4096 PHASE=time timeout 150 python3 benchmarks/results/lead_s17_ab.py > $R/s19c8_time.log 2>&1; echo "time rc=$?"
tail -16 $R/s19c8_time.log
