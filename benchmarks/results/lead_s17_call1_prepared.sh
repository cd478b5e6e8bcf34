#!/usr/bin/env bash
# PREPARED in the sixteenth session, NOT RUN (its device time ran out): the attention gpu suite
# on main after 9b23d22, whose new test (the pair kernel failing its offset check falls back to
# the one-CTA kernel; a caller forcing it gets PairKernelUnavailable) has never run on a GPU.
# Copy to .dev_lead/ and run with carry [".whl", ".dev_lead/s17_call1.sh"], timeout ~300.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
workers=(); python3 -c "import xdist" 2>/dev/null && workers=(-n 4)
timeout 260 python3 -m pytest -q -rfE -m gpu packages/ds41-attention/tests -p no:cacheprovider "${workers[@]}" > $R/attention_gpu_s17c1.log 2>&1; echo "tests rc=$?"
grep -E "^(FAILED|ERROR)" $R/attention_gpu_s17c1.log | head; tail -1 $R/attention_gpu_s17c1.log
