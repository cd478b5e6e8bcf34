#!/usr/bin/env bash
# Lead, eleventh session, call 7: the indexer's whole suite on CUDA (interpreter-marked tests
# included) on main c6890ef: the tile guard, the narrow-tile test, the tenth session's fixes.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s)
{
timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider -n 8 packages/ds41-indexer/tests > $R/indexer_all_tests_s11.log 2>&1
echo "rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR|SKIPPED)" $R/indexer_all_tests_s11.log | cut -c1-220 | head -12; tail -1 $R/indexer_all_tests_s11.log
} 2>&1 | tee $R/lead_s11_call7.log
