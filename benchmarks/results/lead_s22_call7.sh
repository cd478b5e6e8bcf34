#!/usr/bin/env bash
# Twenty-second session, call 7 (issue 12): the lab scripts after the review moved their shared
# timing protocol (time_variants, lab_shape) into timeline.py and timeline.py itself onto
# launch_lab_copy: pace_lab (with stamps), prefetch_lab, timeline.py (its own program shape
# too), each once at a small setting.
# Carry [".whl"].
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
L=packages/ds41-indexer/scripts/issue12
timeout 150 python3 $L/pace_lab.py --run --stamps --sizes 64x32768 --variants d:-1/0/0,b:15/2/1000 --iters 10 2>&1 | grep -v '^{"rows' | cut -c1-200; echo "pace rc=${PIPESTATUS[0]}"
timeout 100 python3 $L/prefetch_lab.py --run --sizes 64x32768 --variants 7/0,3/4 --iters 10 2>&1 | grep -v '^{"rows'; echo "prefetch rc=${PIPESTATUS[0]}"
timeout 100 python3 $L/timeline.py --run --sizes 64x32768,64x32768:1x32 --iters 10 2>&1 | grep -v '^{"rows' | head -24; echo "timeline rc=${PIPESTATUS[0]}"
