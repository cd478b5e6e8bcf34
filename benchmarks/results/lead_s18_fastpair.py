"""Prepared in the seventeenth session, ran in the eighteenth (call 1): the fast path on sm_90
splits each row's keys (`plan_gluon_splits`), but since the staged output the invariant pair
kernel is faster at T = 64 (35.7 vs 40.6 us in the seventeenth session's bench). Time both,
and every forced split count, at T = 8..66 to find where the fast path should run the pair
kernel instead (any kernel may serve the fast path; only the invariant path is bound to
bits). Graph replay, default and launch-hidden timing, one process.

    python3 benchmarks/results/lead_s18_fastpair.py > fastpair.log
"""

import functools

import torch

from ds41_attention import bench as B
from ds41_attention.ops.sparse_attention.gluon_launch import (
    launch_gluon_fast,
    launch_gluon_sparse_attention,
)

CUDA = torch.device("cuda")
print("| timing | T | pair us | planned split us (S) | best forced split us (S) |")
print("|--|--:|--:|--:|--:|")
for hidden in (False, True):
    B.LAUNCH_HIDDEN = hidden
    for t in (8, 16, 24, 33, 40, 44, 48, 56, 64, 66):
        p = B.make_problem(B.FLASH, t, CUDA, seed=t)
        pair = B.time_graph(
            functools.partial(launch_gluon_sparse_attention, *p.args(), pair=True), CUDA, 100
        )
        planned = B.time_graph(functools.partial(launch_gluon_fast, *p.args()), CUDA, 100)
        s_plan = max(1, min(132 // t, 20))
        forced = {
            s: B.time_graph(functools.partial(launch_gluon_fast, *p.args(), splits=s), CUDA, 100)
            for s in range(1, min(20, 264 // t) + 1)
        }
        best = min(forced, key=lambda s: forced[s])
        print(
            f"| {'hidden' if hidden else 'default'} | {t} | {pair * 1e6:.1f} | "
            f"{planned * 1e6:.1f} ({s_plan}) | {forced[best] * 1e6:.1f} ({best}) |"
        )
        del p
        torch.cuda.empty_cache()
