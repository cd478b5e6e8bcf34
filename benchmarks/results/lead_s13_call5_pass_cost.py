"""Lead, thirteenth session, call 5: what the Triton pass over the Gluon logits kernel's done
flags costs (logits only), launch included and hidden. (Record of what ran; the call used an
equivalent script with closures.)"""

from functools import partial

import torch

from ds41_indexer import bench
from ds41_indexer.ops.logits import gluon_launch as gl_launch
from ds41_indexer.ops.logits.triton_kernels import paged_logits_triton


def gluon(args, out, cfg):  # type: ignore[no-untyped-def]
    return gl_launch.launch_gluon_logits(*args, out, config=cfg)


def both(args, out, cfg):  # type: ignore[no-untyped-def]
    paged_logits_triton(*args, out, done=gluon(args, out, cfg))


def pass_only(args, out, done):  # type: ignore[no-untyped-def]
    paged_logits_triton(*args, out, done=done)


dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
for ctx, rows in ((32768, (32, 64)), (131072, (8, 64)), (4096, (1, 64))):
    cache, table = bench.make_cache(max(rows), ctx, dev, gen)
    for t in rows:
        q = torch.randn(t, bench.HI, bench.DI, device=dev, generator=gen).mul(2).round()
        q = q.to(torch.bfloat16)
        w = torch.randn(t, bench.HI, device=dev, generator=gen)
        req = torch.arange(t, dtype=torch.int32, device=dev)
        pos = torch.full((t,), ctx - 1, dtype=torch.int32, device=dev)
        out = torch.empty(t, ctx, device=dev)
        args = (q, w, cache, table[:t], req, pos, 1)
        for cfg in ((1, 32), (1, 64)):
            done = gluon(args, out, cfg)
            assert int(done.sum()) == done.numel()
            fns = (partial(gluon, args, out, cfg), partial(both, args, out, cfg),
                   partial(pass_only, args, out, done))  # fmt: skip
            res = []
            for hidden in (False, True):
                bench.LAUNCH_HIDDEN = hidden
                res += [bench._time(f, dev, 40) * 1e3 for f in fns]
            print(
                f"{t:4d} x {ctx:7d} T{cfg[1]:<3}  gluon {res[0]:6.1f}  gluon+pass {res[1]:6.1f}"
                f"  pass {res[2]:5.1f}   | hidden: {res[3]:6.1f} {res[4]:6.1f} {res[5]:5.1f}"
            )
    del cache, table
