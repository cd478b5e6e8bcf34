#!/usr/bin/env bash
# Lead, twelfth session, call 2: the Gluon attention kernel with programmatic dependent launch
# (main 9bdafed) against a3217eb (without): decode step graph replay, both trees, twice in
# opposite orders; then the runner's PDL bits test and the attention package's gpu tests.
# Stage: mkdir -p .dev_base && git archive a3217eb | tar -x -C .dev_base
# carry [".whl", ".dev_base", ".dev_lead/s12_call2.sh"], timeout_s ~480.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); root=$PWD
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
src() { echo "/tmp/site:$1/packages/ds41-cache/src:$1/packages/ds41-indexer/src:$1/packages/ds41-attention/src:$1/packages/ds41-runner/src"; }
{
for t in base new new base; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  el "profile_step $t"
  (cd $d && PYTHONPATH=$(src $d) timeout 110 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 >> $R/profile_step_s12c2_$t.txt 2>&1)
  grep -E "^== |graph replay|_gluon_sparse_attn_kernel|Error" $R/profile_step_s12c2_$t.txt | tail -12
done
el "runner PDL bits test + attention gpu tests (new)"
PYTHONPATH=$(src $root) timeout 100 python3 -m pytest -q -rfE -p no:cacheprovider packages/ds41-runner/tests/test_model_invariance.py -k dependent_launch > $R/runner_pdl_s12c2.log 2>&1; echo "runner pdl rc=$?"; tail -1 $R/runner_pdl_s12c2.log
PYTHONPATH=$(src $root) timeout 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-attention/tests > $R/attention_gpu_s12c2.log 2>&1; echo "attention gpu rc=$?"; grep -E "^(FAILED|ERROR)" $R/attention_gpu_s12c2.log | head; tail -1 $R/attention_gpu_s12c2.log
el "all done"
} 2>&1 | tee $R/lead_s12_call2.log
