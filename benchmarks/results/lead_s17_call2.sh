#!/usr/bin/env bash
# (Recorded; it ran from a .dev_lead/ copy with the drivers beside it, paths shown as committed.)
# Seventeenth session, call 2: A/B old / L / LP bits (beside the attention gpu suite on LP, the
# working tree), then graph-replay times of the three in one process.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 3)
(timeout 280 python3 -m pytest -q -rfE -m gpu packages/ds41-attention/tests -p no:cacheprovider "${workers[@]}" > $R/attention_gpu_s17c2.log 2>&1; echo "tests rc=$?" >> $R/attention_gpu_s17c2.log) &
PHASE=bits timeout 280 python3 benchmarks/results/lead_s17_ab.py > $R/ab17_bits.log 2>&1; echo "bits rc=$?"
tail -5 $R/ab17_bits.log
wait
grep -E "^(FAILED|ERROR)" $R/attention_gpu_s17c2.log | head; tail -2 $R/attention_gpu_s17c2.log
PHASE=time timeout 200 python3 benchmarks/results/lead_s17_ab.py > $R/ab17_time.log 2>&1; echo "time rc=$?"
tail -16 $R/ab17_time.log
