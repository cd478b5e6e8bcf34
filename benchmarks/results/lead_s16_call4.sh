#!/usr/bin/env bash
# Sixteenth session, call 4: the runner's gpu suite with the pair kernel dispatched, and the
# runner bench (decode step, 4K context) with DS41_PAIR=1 / 0 in one call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export PYTHONPATH=/tmp/site:$PWD/packages/ds41-cache/src:$PWD/packages/ds41-indexer/src:$PWD/packages/ds41-attention/src:$PWD/packages/ds41-runner/src
R=$OUT
timeout 240 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider packages/ds41-runner/tests > $R/runner_gpu_s16.log 2>&1; echo "runner rc=$?"; grep -E "^(FAILED|ERROR)" $R/runner_gpu_s16.log | head; tail -1 $R/runner_gpu_s16.log
for pair in 1 0; do
DS41_PAIR=$pair timeout 120 python3 -m ds41_runner.bench --batches 1,8,64 --contexts 4096 --iters 10 --json $R/runner_bench_s16_pair$pair.json --markdown $R/runner_bench_s16_pair$pair.md > $R/runner_bench_s16_pair$pair.log 2>&1; echo "bench pair=$pair rc=$?"
done
python3 - <<'PY'
import json, os
R = os.environ["OUT"]
rows = {}
for pair in (1, 0):
    try:
        d = json.load(open(f"{R}/runner_bench_s16_pair{pair}.json"))
    except Exception as e:
        print(pair, "no json", e); continue
    for p in d["points"]:
        k = (p["mode"], p["graph"], p["kv_dtype"], p["batch"])
        rows.setdefault(k, {})[pair] = round(p["step_ms_median"], 3)
for k in sorted(rows, key=str):
    print(k, rows[k])
PY
