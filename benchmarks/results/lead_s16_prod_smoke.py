"""Smoke test of the production pair kernel (run from the repository root on the H200): the
invariant path forced onto the pair kernel against the one-CTA kernel at T = 1, 3, 64, 5,
each printed before it starts so a hang shows which launch it was."""

import time

import torch

from ds41_attention.bench import FLASH, make_problem
from ds41_attention.ops.sparse_attention.gluon_launch import launch_gluon_sparse_attention

CUDA = torch.device("cuda")
for rows in (1, 3, 64, 5):
    p = make_problem(FLASH, rows, CUDA, seed=rows)
    t0 = time.time()
    print(f"T={rows}: launching", flush=True)
    po, pl = launch_gluon_sparse_attention(*p.args(), pair=True)
    torch.cuda.synchronize()
    co, cl = launch_gluon_sparse_attention(*p.args(), pair=False)
    torch.cuda.synchronize()
    print(f"T={rows}: pair == one CTA out {torch.equal(po, co)} lse {torch.equal(pl, cl)} "
          f"({time.time() - t0:.1f} s)", flush=True)  # fmt: skip
