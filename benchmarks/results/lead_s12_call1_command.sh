#!/usr/bin/env bash
# Lead, twelfth session, call 1 (prepared in the eleventh): branch fuse11 (fused projections)
# against main: decode step graph replay on both trees, then the runner's gpu tests on fuse11.
# Stage first: mkdir -p .dev_fuse11 && git -C /work/wt/fuse11 archive fuse11 | tar -x -C .dev_fuse11
# carry [".whl", ".dev_fuse11", ".dev_lead/s12_call1.sh"], timeout_s ~420.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
R=$OUT; t0=$(date +%s); root=$PWD
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
src() { echo "/tmp/site:$1/packages/ds41-cache/src:$1/packages/ds41-indexer/src:$1/packages/ds41-attention/src:$1/packages/ds41-runner/src"; }
{
for t in main fuse11; do
  d=$root; [ $t = fuse11 ] && d=$root/.dev_fuse11
  el "profile_step $t"
  (cd $d && PYTHONPATH=$(src $d) timeout 110 python3 benchmarks/profile_step.py --batch 1,64 --graph-replays 100 > $R/profile_step_s12_$t.txt 2>&1)
  grep -E "us of kernels|graph replay|matmul_kernel|reduce_segments|Error" $R/profile_step_s12_$t.txt
done
el "runner gpu tests on fuse11"
(cd $root/.dev_fuse11 && PYTHONPATH=$(src $root/.dev_fuse11) timeout 150 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_fuse11.log 2>&1; echo "rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_fuse11.log | head; tail -1 $R/runner_gpu_fuse11.log)
el "matmul_bench on fuse11 (rows 1,64)"
(cd $root/.dev_fuse11 && PYTHONPATH=$(src $root/.dev_fuse11) timeout 100 python3 -m ds41_runner.matmul_bench --rows 1,64 --markdown $R/matmul_bench_s12_fuse11.md > $R/matmul_bench_s12_fuse11.log 2>&1; echo "rc=$?"; tail -20 $R/matmul_bench_s12_fuse11.log)
el "all done"
} 2>&1 | tee $R/lead_s12_call1.log
