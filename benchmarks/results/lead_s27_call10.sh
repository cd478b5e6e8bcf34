#!/usr/bin/env bash
# Twenty-seventh session, call 10 (issue 11), PREPARED, NOT RUN (the device time ran out): the
# persistent design with Q and the output by TMA (persistent_items_s27_tma_qo.patch, ps6)
# against main: bits on three problems (H 64 / 16 / 128, 333 / 33 / 20 rows, mxfp8 + nvfp4 and
# bf16 + nvfp4), then T = 1024 / 4096 with the launch hidden, best of three. Carry [".whl"].
# (The step patches apply after their predecessors: lab_tree.sh builds the trees this call ran.)
set -u
source scripts/device_env.sh
R=$OUT
rm -rf /tmp/ab && mkdir -p /tmp/ab
bash packages/ds41-attention/scripts/lab_tree.sh /tmp/ab/ds41_attention_ps6 persistent_items_s27_tma_qo || exit 1
AB_DIR=/tmp/ab TREES="main:ds41_attention,ps6:ds41_attention_ps6" timeout -s KILL 95 python3 - <<'PY' 2>&1 | grep -v Warning | tee $R/attention_s27c10.log
import functools, sys
sys.argv = ["x"]
sys.path.insert(0, "benchmarks/results")
import lead_s17_ab as ab
import torch
from ds41_attention import bench as B
for args in ((64, 333, "mxfp8", "nvfp4", 6), (16, 33, "mxfp8", "nvfp4", 3), (128, 20, "bf16", "nvfp4", 4)):
    a = ab.problem(*args)
    o1, l1 = ab.launch["main"](*a, pair=False)
    o2, l2 = ab.launch["ps6"](*a, pair=False)
    print("bits", args, "equal" if torch.equal(o1, o2) and torch.equal(l1, l2) else "DIFFER", flush=True)
B.LAUNCH_HIDDEN = True
for T in (1024, 4096):
    p = B.make_problem(B.FLASH, T, ab.CUDA, seed=T)
    best = {}
    for rnd in range(3):
        for n, f in ab.launch.items():
            us = B.time_graph(functools.partial(f, *p.args(), pair=False), ab.CUDA, 20) * 1e6
            best[n] = min(best.get(n, 1e9), us)
    tf = B.FLASH.flop_per_row * T / (best["ps6"] * 1e-6) / 1e12
    print(f"T = {T}: main {best['main']:.1f} us, ps6 {best['ps6']:.1f} us ({best['ps6'] / best['main']:.3f}), {tf:.1f} TFLOP/s", flush=True)
PY
