#!/usr/bin/env bash
# Twenty-fourth session, call 2 (issue 11): the validity k-step patch with the score multiply
# as mul.rn.f32 (call 1 found the FMA contraction that changed its bits), by ab_patch.sh; if
# adopted (bits equal, <= 0.995 of main's time), the runner gpu suite on the patched tree too.
# Carry [".whl"]. The patch it ran is commit a645048 before the renaming of its shared buffers
# (SASS identical); the file left scripts/lab when adopted.
set -u
cd "$(dirname "$0")/../.."
PATCH=packages/ds41-attention/scripts/lab/validity_kstep.patch NAME=vk TAG=s24c2 \
  bash packages/ds41-attention/scripts/ab_patch.sh | tee /tmp/ab_out.txt
if grep -q "patch applied" /tmp/ab_out.txt; then
  S=$PWD/packages
  export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
  timeout -s KILL 200 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider \
    packages/ds41-runner/tests tests > "${OUT:-/tmp/ab_patch}/s24c2_runner_gpu.log" 2>&1
  echo "runner rc=$?"; tail -1 "${OUT:-/tmp/ab_patch}/s24c2_runner_gpu.log"
fi
