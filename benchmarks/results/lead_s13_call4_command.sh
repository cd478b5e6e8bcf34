#!/usr/bin/env bash
# Lead, thirteenth session, call 4: the Gluon logits program shape by call size on main
# (a7cec62): packages/ds41-indexer/scripts/issue12/config_sweep.py (every shape bitwise the
# default's; launch included and hidden).
# carry [".whl", ".dev_lead/s13_call4.sh"], timeout_s ~240.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT; t0=$(date +%s)
{
timeout 200 python3 packages/ds41-indexer/scripts/issue12/config_sweep.py --json $R/config_sweep_s13c4.json; echo "sweep rc=$?"
echo "[$(( $(date +%s) - t0 )) s] all done"
} 2>&1 | tee $R/lead_s13_call4.log
