"""Prepared in the seventeenth session, ran in the eighteenth (call 2): ncu driver for issue
12's last open target (logits at 64 rows x 32K entries, 1.96-2.14 TB/s against 2.1). Builds
the bench's problem (`ds41_indexer.bench.make_cache`, 64 rows, context 32768) and runs
`index_logits` eagerly: two warm-ups, then the profiled launch (`ncu -k
regex:_gluon_logits_kernel --launch-skip 2 --launch-count 1`). Prints the Gluon program shape
the launcher picks."""

import torch

from ds41_indexer import bench as IB
from ds41_indexer.logits import index_logits
from ds41_indexer.ops.logits import gluon_launch as GL

dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
rows, ctx = 64, 32768
cache, table = IB.make_cache(rows, ctx, dev, gen)
q = torch.randn(rows, IB.HI, IB.DI, device=dev, generator=gen).mul(2).round().to(torch.bfloat16)
w = torch.randn(rows, IB.HI, device=dev, generator=gen)
req = torch.arange(rows, dtype=torch.int32, device=dev)
pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=dev)
spans = -(-ctx // (GL.TILE[0] * GL.TILE[1]))
print("gluon_config (consumer warpgroups, tiles):", GL.gluon_config(rows, spans), "spans", spans)
for _ in range(3):
    index_logits(q, w, cache, table, req, pos, IB.RATIO, validate=False)
torch.cuda.synchronize()
print("done")
