#!/usr/bin/env bash
# Eighteenth session, call 3: the persistent one-CTA kernel (invariant mode: min(T x head
# blocks, SMs) programs taking items pid, pid + P, ...; the producer decodes the next item's
# first tiles while the consumers finish the current one, and copies its Q once they have
# stored their output) against the tree before it (the L2-prefetch kernel, a copy imported as
# ds41_attention_p from .dev_lead/ab19). Bits on four format pairs, times in one process, then
# the attention `gpu` suite on the new tree. Carry [".whl", ".dev_lead/ab19"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
export AB_DIR=.dev_lead/ab19 TREES=p:ds41_attention_p,pers:ds41_attention
PHASE=bits timeout 150 python3 benchmarks/results/lead_s17_ab.py > $R/ab19_bits.log 2>&1; echo "bits rc=$?"
grep -c "BITS DIFFER" $R/ab19_bits.log; tail -2 $R/ab19_bits.log
ROWS=132,264,1024,4096 PHASE=time timeout 150 python3 benchmarks/results/lead_s17_ab.py > $R/ab19_time.log 2>&1; echo "time rc=$?"
tail -9 $R/ab19_time.log
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 4)
timeout 230 python3 -m pytest -q -x -rfE -m gpu packages/ds41-attention/tests -p no:cacheprovider "${workers[@]}" > $R/attention_gpu_s18c3.log 2>&1; echo "tests rc=$?"
grep -E "^(FAILED|ERROR)" $R/attention_gpu_s18c3.log | head; tail -1 $R/attention_gpu_s18c3.log
