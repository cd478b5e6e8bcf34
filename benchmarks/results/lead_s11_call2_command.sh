#!/usr/bin/env bash
# Lead, eleventh session, call 2: the attention lab10 per-warp lazy rescale (recipe in the
# attention README), then the runner's linear tests compiled (interpreter_only skips).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); P="-p no:cacheprovider"
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
el "attention lab10 per-warp"
OLD_TREE=$PWD OUT=$R/attn VARIANTS=old,lab10,lab10_t16,lab10_w,lab10_wt16 CHECK=lab10_wt16 QUICK=lab10_w \
 BITS=lab10_w:lab10,lab10_wt16:lab10_t16 SWEEP=gluon,lab10_t16,lab10_wt16 TESTS=0 BENCH=0 T_PROFILE=${T_ATT:-240} \
 bash packages/ds41-attention/scripts/ab_main.sh > $R/attn_lab10w.log 2>&1; echo "rc=$?"
grep -iE "bits|differ|fail|error|mismatch" $R/attn_lab10w.log | head -10; tail -40 $R/attn_lab10w.log
el "runner test_ops_linear compiled"
timeout 90 python3 -m pytest -q -rfEs $P -n 4 packages/ds41-runner/tests/test_ops_linear.py 2>&1 | tail -8
el "all done"
} 2>&1 | tee $R/lead_s11_call2.log
