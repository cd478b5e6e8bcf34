#!/usr/bin/env bash
# Twenty-eighth session, call 14 (issue 11): the attention package's whole gpu suite on the
# final tree (6610f20), then the stamped timeline tool on its new footing (timeline.py stamps
# 33216ad's one-CTA kernel, built by lab_tree.sh --base, beside production) at T = 1024.
# Carry [".whl"].
set -u
source scripts/device_env.sh
R=$OUT
timeout -s KILL 300 python3 -m pytest -q -m gpu packages/ds41-attention/tests -p no:cacheprovider -n 4 \
  > $R/attention_gpu_s28c14.log 2>&1
echo "suite rc=$?"; grep -E "passed|failed|Error" $R/attention_gpu_s28c14.log | tail -8
git rev-parse --short HEAD 2>/dev/null || echo "no git history on the device"
timeout -s KILL 120 python3 packages/ds41-attention/scripts/timeline.py --run --rows 1024 --reps 20 \
  --json $R/attention_timeline_s28c14.json > $R/attention_timeline_s28c14.log 2>&1
echo "timeline rc=$?"; head -4 $R/attention_timeline_s28c14.log; grep -E "^T =|life|turnover" $R/attention_timeline_s28c14.log
