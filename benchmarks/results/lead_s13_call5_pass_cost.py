# Lead, s13 call 5: what the Triton pass over the Gluon kernel's done flags costs (logits only).
import torch
from functools import partial
from ds41_indexer import bench
from ds41_indexer.ops.logits import gluon_launch as gl_launch
from ds41_indexer.ops.logits.triton_kernels import paged_logits_triton

dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
for ctx, rows in ((32768, (32, 64)), (131072, (8, 64)), (4096, (1, 64))):
    cache, table = bench.make_cache(max(rows), ctx, dev, gen)
    for t in rows:
        q = torch.randn(t, bench.HI, bench.DI, device=dev, generator=gen).mul(2).round().to(torch.bfloat16)
        w = torch.randn(t, bench.HI, device=dev, generator=gen)
        req = torch.arange(t, dtype=torch.int32, device=dev)
        pos = torch.full((t,), ctx - 1, dtype=torch.int32, device=dev)
        out = torch.empty(t, ctx, device=dev)
        args = (q, w, cache, table[:t], req, pos, 1)
        for cfg in ((1, 32), (1, 64)):
            done = gl_launch.launch_gluon_logits(*args, out, config=cfg)
            assert int(done.sum()) == done.numel()
            def g(cfg=cfg):
                return gl_launch.launch_gluon_logits(*args, out, config=cfg)
            def both(cfg=cfg):
                d = gl_launch.launch_gluon_logits(*args, out, config=cfg)
                paged_logits_triton(*args, out, done=d)
            def pass_only():
                paged_logits_triton(*args, out, done=done)
            res = []
            for hidden in (False, True):
                bench.LAUNCH_HIDDEN = hidden
                res += [bench._time(f, dev, 40) * 1e3 for f in (g, both, pass_only)]
            print(f"{t:4d} x {ctx:7d} T{cfg[1]:<3}  gluon {res[0]:6.1f}  gluon+pass {res[1]:6.1f}  pass {res[2]:5.1f}"
                  f"   | hidden: {res[3]:6.1f} {res[4]:6.1f} {res[5]:5.1f}")
    del cache, table
