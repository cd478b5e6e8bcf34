"""Smoke test of a pair lab kernel (`gluon_pair.py`; run from the repository root on the
H200, `python3 lead_s16_pair_smoke.py [VARIANT]`, a `gluon_profile.PAIR_SPECS` name, default
pair): one launch at T = 1, 3, 64, 5 against production's bits, each printed before it starts
so a hang shows which launch it was. Needs `gluon_pair.py` and the `gluon_profile.py` of commit
4f6f547 (the lab copy is retired)."""

import sys
import time

import torch

sys.path.insert(0, "packages/ds41-attention/scripts")
import gluon_profile as gp

from ds41_attention.bench import FLASH, make_problem

name = sys.argv[1] if len(sys.argv) > 1 else "pair"
pair = gp.load_variant(name, gp.PAIR, **gp.PAIR_SPECS[name])
for rows in (1, 3, 64, 5):
    p = make_problem(FLASH, rows, gp.CUDA, seed=rows)
    t0 = time.time()
    print(f"{name} T={rows}: launching", flush=True)
    o2, l2 = gp.launch_pair(pair, *p.args())
    torch.cuda.synchronize()
    o0, l0 = gp.launch_gluon_sparse_attention(*p.args())
    torch.cuda.synchronize()
    d = (o2.float() - o0.float()).abs().max().item()
    dl = (l2 - l0).abs().max().item()
    bad = (o2 != o0).flatten(1).any(1).nonzero().flatten().tolist()[:8]
    print(
        f"T={rows}: pair == production out {torch.equal(o2, o0)} lse {torch.equal(l2, l0)}; "
        f"max |d| out {d:.3e} lse {dl:.3e}; rows differing {bad}; "
        f"nan {torch.isnan(o2.float()).any().item()} ({time.time() - t0:.1f} s)",
        flush=True,
    )
