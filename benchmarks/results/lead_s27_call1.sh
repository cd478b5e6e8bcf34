#!/usr/bin/env bash
# Twenty-seventh session, call 1 (issue 11): where a one-CTA attention program's time goes.
# The stamped lab copy of the production one-CTA kernel (packages/ds41-attention/scripts/
# timeline.py: %globaltimer at each partition's start, Q and tile 0 ready, loop ends, stores)
# at T = 132 (one wave), 1024 (7.76 waves) and 4096 (31 waves): bits vs production, both
# timed by graph replay with the launch hidden, then the stamps of one launch. No carry needed
# beyond [".whl"].
set -u
source scripts/device_env.sh
R=$OUT
timeout -s KILL 300 python3 packages/ds41-attention/scripts/timeline.py --run \
  --rows 132,1024,4096 --json $R/attention_timeline_s27c1.json > $R/attention_timeline_s27c1.log 2>&1
echo "timeline rc=$?"
cat $R/attention_timeline_s27c1.log | grep -v Warning | tail -70
