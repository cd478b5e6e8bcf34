#!/usr/bin/env bash
# Twenty-seventh session, call 8 (issue 11): timing-only bounds for the persistent design's
# transition traffic. Stamped timelines (timeline.py; outputs wrong on purpose, so "bits
# equal False" is expected) at T = 1024 / 4096 of the persistent ps4 without its later Q
# copies (timing_noq), without its output stores (timing_noout), without both, and of the
# production kernel without its output stores. Carry [".whl"].
set -u
source scripts/device_env.sh
R=$OUT
L=packages/ds41-attention/scripts/lab
T=packages/ds41-attention/scripts/timeline.py
for n in persistent_items_s27_timing_noq persistent_items_s27_timing_noout \
         persistent_items_s27_timing_both timing_no_output_stores; do
  timeout -s KILL 100 python3 $T --run --rows 1024,4096 --patch $L/$n.patch \
    --json $R/attention_timeline_s27c8_$n.json > $R/attention_timeline_s27c8_$n.log 2>&1
  echo "== $n rc=$?"
  grep -v Warning $R/attention_timeline_s27c8_$n.log | grep -E "^T =|life|c0_first->c0_loop|c0_loop->c0_end|c1_loop->c1_end|k_start->c0_first|Error"
done
