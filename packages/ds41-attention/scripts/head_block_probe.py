"""One GPU probe (issue 11, eighth session): would a smaller head block keep a head's bits?

The Gluon kernel runs one program per (row, block of 64 heads); a head's row of the wgmma
tiles sits at M position h % 64. A 32-head block would put heads at M positions 0..31 of a
64-row wgmma (wgmma's M is 64 per warpgroup; the other rows masked). This probe runs the
production kernel on a subset of the heads as its own problem (H = 32 or 16: those heads at M
positions 0.., the rest of the 64 rows masked to zero q) and compares each head's out and lse
bitwise with the same head inside the 64-head block (M positions 32.., 48..). It also times
the kernel at H = 32 and H = 64 (graph replay): a 32-head program still gathers and decodes
every key of its row, so the time of one program is what decides whether the idea could pay.

    PYTHONPATH=packages/ds41-cache/src:packages/ds41-attention/src \
        python3 packages/ds41-attention/scripts/head_block_probe.py
"""

from __future__ import annotations

import dataclasses
import functools
import json

import torch

from ds41_attention.bench import FLASH, make_problem, time_graph
from ds41_attention.ops.sparse_attention.gluon_launch import launch_gluon_sparse_attention

CUDA = torch.device("cuda")


def _sub(args: tuple, heads: slice) -> tuple:
    a = list(args)
    a[0] = a[0][:, heads].contiguous()
    a[7] = a[7][heads].contiguous()
    return tuple(a)


def main() -> None:
    ok = True
    for rows, seed in ((8, 1), (300, 2)):
        p = make_problem(FLASH, rows, CUDA, seed=seed)
        args = p.args()
        # random lengths per row, so rows differ in tile counts
        g = torch.Generator(device=CUDA).manual_seed(seed)
        args[3].copy_(torch.randint(1, 129, args[3].shape, generator=g, device=CUDA))
        args[6].copy_(torch.randint(0, 513, args[6].shape, generator=g, device=CUDA))
        o64, l64 = launch_gluon_sparse_attention(*args)
        for lo, hi in ((0, 32), (32, 64), (48, 64), (16, 48), (8, 40)):
            o, lse = launch_gluon_sparse_attention(*_sub(args, slice(lo, hi)))
            torch.cuda.synchronize()
            same_o = torch.equal(o, o64[:, lo:hi])
            same_l = torch.equal(lse, l64[:, lo:hi])
            nd = int((o != o64[:, lo:hi]).any(-1).sum())
            ok &= same_o and same_l
            print(f"T={rows} heads [{lo},{hi}) as H={hi - lo} vs in the 64-head block: "
                  f"out equal {same_o} lse equal {same_l} (heads x rows differing: {nd})",
                  flush=True)  # fmt: skip
    print("HEADBLOCK BITS", "SAME" if ok else "DIFFER", flush=True)
    res = []
    for rows in (1, 64, 128):
        row: dict = {"T": rows}
        for h in (64, 32):
            p = make_problem(dataclasses.replace(FLASH, heads=h), rows, CUDA, seed=rows)
            gt = time_graph(functools.partial(launch_gluon_sparse_attention, *p.args()), CUDA, 30)
            assert gt is not None
            row[f"h{h}_us"] = round(gt * 1e6, 2)
        res.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
