"""Smoke test of the two-CTA D split lab kernel (run from the repository root on the H200):
one launch at T = 1, 3, 64, 5 against its one-CTA bits (split1) and production. Call 6 ran it
with `split2` (release-arrive pushes), call 8 with `split2a` (st.async pushes), as below."""

import sys
import time

import torch

sys.path.insert(0, "packages/ds41-attention/scripts")
import gluon_profile as gp

from ds41_attention.bench import FLASH, make_problem

s1 = gp.load_variant("split1", SPLIT=1)
s2 = gp.load_variant("split2a", SPLIT=2, C1_REGS=24, XMODE=1)
for rows in (1, 3, 64, 5):
    p = make_problem(FLASH, rows, gp.CUDA, seed=rows)
    t0 = time.time()
    o2, l2 = gp.launch_lab_split(s2, *p.args())
    torch.cuda.synchronize()
    o1, l1 = gp.launch_lab(s1, *p.args())
    o0, l0 = gp.launch_gluon_sparse_attention(*p.args())
    torch.cuda.synchronize()
    d = (o1.float() - o0.float()).abs().max().item()
    print(
        f"T={rows}: split2 == split1 out {torch.equal(o2, o1)} lse {torch.equal(l2, l1)}; "
        f"split1 vs production max |d| {d:.3e}; "
        f"split2 nan {torch.isnan(o2.float()).any().item()} ({time.time() - t0:.1f} s)",
        flush=True,
    )
