#!/usr/bin/env bash
# Eighteenth session, call 2: the attention `gpu` suite on the adopted tree (the one-CTA
# producer's L2 prefetch of the next program; the fast path's pair kernel at two slices),
# then the prepared Nsight Compute profile of the indexer's logits kernel at 64 x 32K.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 4)
timeout 260 python3 -m pytest -q -rfE -m gpu packages/ds41-attention/tests -p no:cacheprovider "${workers[@]}" > $R/attention_gpu_s18c2.log 2>&1; echo "tests rc=$?"
grep -E "^(FAILED|ERROR)" $R/attention_gpu_s18c2.log | head; tail -1 $R/attention_gpu_s18c2.log
bash benchmarks/results/lead_s18_call2_ncu.sh
