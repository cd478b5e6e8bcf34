#!/usr/bin/env bash
# Lead, twelfth session, call 4: the merged eng12 (fewer small launches a decode step, main
# 4154bf7) against 99a6393 (before it): model-level bits (scripts/step_bits.py, both modes),
# the fused kernels' tests compiled, the runner's and indexer's gpu tests, decode step graph
# replay on both trees, serve_bench burst on main.
# Stage: mkdir -p .dev_base && git archive 99a6393 | tar -x -C .dev_base
# carry [".whl", ".dev_base", ".dev_lead/s12_call4.sh"], timeout_s ~480.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); root=$PWD
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
src() { echo "/tmp/site:$1/packages/ds41-cache/src:$1/packages/ds41-indexer/src:$1/packages/ds41-attention/src:$1/packages/ds41-runner/src"; }
{
el "step_bits base/new x bi/fast (parallel) + fused small kernel tests"
for t in base new; do for m in bi fast; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  (cd $d && PYTHONPATH=$(src $d) timeout 150 python3 $root/scripts/step_bits.py --mode $m --out /tmp/bits_${t}_$m.pt > $R/bits_${t}_$m.log 2>&1; echo "bits $t $m rc=$?") &
done; done
PYTHONPATH=$(src $root) timeout 150 python3 -m pytest -q -rfE -m "gpu or interpreter" -n 4 -p no:cacheprovider packages/ds41-runner/tests/test_fused_small_kernels.py > $R/fused_small_s12c4.log 2>&1; echo "fused small rc=$?"; grep -E "^(FAILED|ERROR)" $R/fused_small_s12c4.log | head; tail -1 $R/fused_small_s12c4.log
wait
for m in bi fast; do PYTHONPATH=$(src $root) python3 scripts/step_bits.py --compare /tmp/bits_base_$m.pt /tmp/bits_new_$m.pt 2>&1 | tail -8; echo "compare $m rc=$?"; done
el "runner + indexer gpu tests (new)"
PYTHONPATH=$(src $root) timeout 220 python3 -m pytest -q -rfE -m gpu -n 6 -p no:cacheprovider packages/ds41-runner/tests packages/ds41-indexer/tests > $R/runner_indexer_gpu_s12c4.log 2>&1; echo "gpu tests rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_indexer_gpu_s12c4.log | head; tail -1 $R/runner_indexer_gpu_s12c4.log
for t in base new; do
  d=$root; [ $t = base ] && d=$root/.dev_base
  el "profile_step $t"
  (cd $d && PYTHONPATH=$(src $d) timeout 100 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 > $R/profile_step_s12c4_$t.txt 2>&1)
  grep -E "^== |graph replay|Error" $R/profile_step_s12c4_$t.txt
done
el "serve_bench burst (new)"
PYTHONPATH=$(src $root) timeout 90 python3 -m ds41_runner.serve_bench --workloads burst --json $R/serve_h200_s12.json --markdown $R/serve_h200_s12.md > $R/serve_s12.log 2>&1; echo "serve rc=$?"; tail -12 $R/serve_h200_s12.md
el "all done"
} 2>&1 | tee $R/lead_s12_call4.log
