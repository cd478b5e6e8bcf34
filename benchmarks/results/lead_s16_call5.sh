#!/usr/bin/env bash
# Sixteenth session, call 5: the attention gpu suite on the session's final tree (host-side
# changes after call 3: DS41_PAIR switch, cached SM count, the offset check's errors as
# PairKernelUnavailable).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 4)
timeout 260 python3 -m pytest -q -rfE -m gpu packages/ds41-attention/tests -p no:cacheprovider "${workers[@]}" > $R/attention_gpu_s16_final.log 2>&1; echo "tests rc=$?"
grep -E "^(FAILED|ERROR)" $R/attention_gpu_s16_final.log | head; tail -1 $R/attention_gpu_s16_final.log
