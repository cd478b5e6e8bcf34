"""Two measurements behind the TP=2 decode step (flash_wide, 64 rows), under torchrun on 2 GPUs:

    torchrun --standalone --nproc-per-node=2 scripts/tp_comm_matmul.py --json OUT.json

1. all_gather (NCCL, as `TPGroup.all_gather`) of the per-rank sizes a decode step exchanges,
   each replayed 20 times in a CUDA graph (median us per gather). Run it under different
   NCCL_PROTO settings to compare protocols (the environment is recorded; unset, the launcher
   uses LL128, `parallel.dist`; `NCCL_PROTO=LL,LL128,Simple` is NCCL's own choice).
2. rank 0 only: the invariant matmul on the TP=2 shard shapes at 64 rows, one program per tile
   against the split launch (same bits, `launch_matmul(split=...)`), CUDA-graph medians.
A measurement script: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

import torch
import torch.distributed as dist


def _graph_us(fn: Any, reps: int = 20, iters: int = 10) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / reps)
    return statistics.median(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", default=None)
    p.add_argument("--no-matmul", action="store_true")
    args = p.parse_args(argv)

    from ds41_runner.ops.matmul.plan import plan_matmul
    from ds41_runner.ops.matmul.triton_kernels import launch_matmul
    from ds41_runner.parallel.dist import init_tensor_parallel, shutdown

    group = init_tensor_parallel(2, "cuda", 120.0)
    dev = group.device
    res: dict[str, Any] = {
        "nccl_proto": os.environ.get("NCCL_PROTO", "(default)"),
        "gather_us": {},
        "matmul_us": {},
    }
    sizes = {
        "wo_b/w2 half total f32 64x5120": ((64, 5120), torch.float32),
        "wo_b/w2 two segments f32 2x64x5120": ((2, 64, 5120), torch.float32),
        "lm_head logits f32 64x64640": ((64, 64640), torch.float32),
        "vocab partials f32 64x32x6": ((64, 32, 6), torch.float32),
        "embed rows bf16 64x5120": ((64, 5120), torch.bfloat16),
        "bf16 64x5120 (an all_reduce's bytes)": ((64, 5120), torch.bfloat16),
    }
    try:
        for name, (shape, dt) in sizes.items():
            buf = torch.ones(shape, dtype=dt, device=dev)
            dist.barrier()
            res["gather_us"][name] = _graph_us(lambda b=buf: group.all_gather(b))
        if group.rank == 0 and not args.no_matmul:
            torch.manual_seed(0)
            shapes = [  # (name, full (n, k, groups), shard [G, N, K])
                ("wo_a shard 4x1024x4096", (1024, 4096, 8), (4, 1024, 4096)),
                ("w1/w3 shard 6144x5120", (12288, 5120, 1), (1, 6144, 5120)),
                ("wo_b half 5120x4096", (5120, 8192, 1), (1, 5120, 4096)),
                ("w2 half 5120x6144", (5120, 12288, 1), (1, 5120, 6144)),
                ("w1/w3 full 12288x5120 (TP=1)", (12288, 5120, 1), (1, 12288, 5120)),
                ("wo_b full 5120x8192 (TP=1)", (5120, 8192, 1), (1, 5120, 8192)),
            ]
            import dataclasses

            from ds41_runner.ops.matmul.plan import BLOCK_K, BLOCK_N

            for name, full, (g, n, k) in shapes:
                fp = plan_matmul(*full)
                kt = -(-k // BLOCK_K)
                plan = dataclasses.replace(
                    fp, n=n, k=k, groups=g, n_tiles=-(-n // BLOCK_N), k_tiles=kt,
                    n_segs=-(-kt // fp.seg_tiles),
                    halves=(k == full[1]),
                )  # fmt: skip
                x = torch.randn(64, g, k, device=dev).to(torch.bfloat16)
                w = (torch.randn(g, n, k, device=dev) / k**0.5).to(torch.bfloat16)
                out = torch.empty(64, g * n, device=dev, dtype=torch.bfloat16)
                row = {"segs": plan.n_segs, "tiles": g * plan.n_tiles}
                outs = []
                for split in (False, True):
                    if split and plan.n_segs < 2:
                        continue

                    def fn(s: bool = split, a: Any = (x, w, out, plan)) -> None:
                        launch_matmul(*a, upcast=False, ieee_fp32=False, split=s)

                    row["split" if split else "one_program"] = _graph_us(fn)
                    outs.append(out.clone())
                row["same_bits"] = all(torch.equal(o, outs[0]) for o in outs)
                mb = g * n * k * 2 / 1e6
                row["weight_mb"] = mb
                res["matmul_us"][name] = row
        dist.barrier()
    finally:
        shutdown()
    if group.rank == 0:
        print(f"NCCL_PROTO={res['nccl_proto']}: all_gather us (CUDA graph, per gather)")
        for name, us in res["gather_us"].items():
            print(f"  {name:42s} {us:8.1f}")
        for name, row in res["matmul_us"].items():
            one, spl = row.get("one_program"), row.get("split")
            tb = row["weight_mb"] / 1e6 / (min(x for x in (one, spl) if x) * 1e-6)
            print(f"  matmul {name:32s} segs {row['segs']} tiles {row['tiles']:4d}: one program "
                  f"{one:7.1f} us, split {spl if spl is None else round(spl, 1)} us, best "
                  f"{tb:.2f} TB/s, same bits {row['same_bits']}")  # fmt: skip
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
