#!/usr/bin/env bash
# Twenty-third session, call 6 (issue 11): the runner's gpu suite on the adopted tree (its
# window pages hold 16 tokens). Carry [".whl"]. (Ran as one command line.)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null; unset TRITON_INTERPRET; S=$PWD/packages; export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src; timeout -s KILL 150 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider packages/ds41-runner/tests > $OUT/runner_gpu_s23c6.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $OUT/runner_gpu_s23c6.log | head; tail -1 $OUT/runner_gpu_s23c6.log
