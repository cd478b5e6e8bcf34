#!/usr/bin/env bash
# Eighteenth session, call 6: the one-CTA producer also prefetches into L2 the records of the
# next program's first two window tiles (beside its Q, slot rows and lengths), against main (a
# copy imported as ds41_attention_p from .dev_lead/ab19). Bits on four format pairs, then times
# in one process. Carry [".whl", ".dev_lead/ab19"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
export AB_DIR=.dev_lead/ab19 TREES=p:ds41_attention_p,rec:ds41_attention
PHASE=bits timeout 120 python3 benchmarks/results/lead_s17_ab.py > $R/ab21_bits.log 2>&1; echo "bits rc=$?"
grep -c "BITS DIFFER" $R/ab21_bits.log; tail -2 $R/ab21_bits.log
ROWS=132,264,1024,4096 PHASE=time timeout 100 python3 benchmarks/results/lead_s17_ab.py > $R/ab21_time.log 2>&1; echo "time rc=$?"
tail -9 $R/ab21_time.log
