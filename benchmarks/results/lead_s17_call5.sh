#!/usr/bin/env bash
# (Recorded; it ran from a .dev_lead/ copy with the drivers beside it, paths shown as committed.)
# Seventeenth session, call 5 (final tree, output staged): runner gpu suite; ds41_attention.bench
# (default timing, then launch hidden); the runner's decode step with the attention package of
# 91dec51 (before) and of this tree (after), one process each, same machine.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
S=$PWD/packages
export PYTHONPATH=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$S/ds41-attention/src:$S/ds41-runner/src
R=$OUT
timeout 200 python3 -m ds41_attention.bench --rows 1,8,64,128,1024,4096 --reps 30 --skip torch \
  --json $R/attention_bench_s17.json --plot $R/attention_bench_s17.png > $R/attention_bench_s17.log 2>&1; echo "bench rc=$?"
tail -11 $R/attention_bench_s17.log
timeout 120 python3 -m ds41_attention.bench --rows 1,64,1024,4096 --reps 30 --skip torch,invariant,fast_triton --launch-hidden \
  --json $R/attention_bench_s17_hidden.json > $R/attention_bench_s17_hidden.log 2>&1; echo "bench hidden rc=$?"
tail -8 $R/attention_bench_s17_hidden.log
timeout 240 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s17.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s17.log | head; tail -1 $R/runner_gpu_s17.log
for tree in new old; do
  pp=$PYTHONPATH
  [ $tree = old ] && pp=/tmp/site:$S/ds41-cache/src:$S/ds41-indexer/src:$PWD/.dev_lead/old17src:$S/ds41-runner/src
  PYTHONPATH=$pp timeout 100 python3 -m ds41_runner.bench --batches 1,64 --contexts 4096 --iters 10 \
    --json $R/runner_bench_s17_$tree.json --markdown $R/runner_bench_s17_$tree.md > $R/runner_bench_s17_$tree.log 2>&1; echo "runner bench $tree rc=$?"
done
python3 - <<'PY'
import json, os
R = os.environ["OUT"]
rows = {}
for tree in ("old", "new"):
    try:
        d = json.load(open(f"{R}/runner_bench_s17_{tree}.json"))
    except Exception as e:
        print(tree, "no json", e); continue
    for p in d["points"]:
        if p["graph"] != "cuda_graph":
            continue
        k = (p["mode"], p["kv_dtype"], p["batch"])
        rows.setdefault(k, {})[tree] = round(p["step_ms_median"], 3)
for k in sorted(rows, key=str):
    print(k, rows[k])
PY
