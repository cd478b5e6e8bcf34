"""Issue 12, sixth round (the Hopper Gluon logits kernel): timings for one H200 call.

CUDA-graph medians on the bench's caches (Hi 32, Di 128, MXFP4, 64-entry pages in shuffled
order, each row its own request at its last position), per size:
- `triton`: the Triton kernel alone (`paged_logits_triton`, fp32 logits, as the bench's
  `logits` column; `+gmax` with the group maxima, as the fused call's logits stage);
- `gluon pair`: the production dispatch with the Gluon kernel (`paged_logits_gpu`: Gluon
  kernel, then the Triton kernel on the spans it left, none here; in call 1 the dispatch still
  had a row threshold, which the script lowered to 1);
- `gluon alone`: the Gluon kernel's launch only;
- Gluon configurations (ring stages, register cap: 65,536 / (256 x cap) programs per SM) at
  the larger sizes.
Every Gluon result is compared bitwise with the Triton kernel's (`same`).

    python packages/ds41-indexer/scripts/issue12/gluon6.py --json out.json
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch

from ds41_indexer import bench
from ds41_indexer.ops.logits import gluon_kernels as gk
from ds41_indexer.ops.logits import gluon_launch as gla
from ds41_indexer.ops.logits.triton_kernels import paged_logits_triton

DEV = torch.device("cuda")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--sizes", default="64:32768,64:131072,8:131072,1:131072,256:1048576")
    ap.add_argument("--variants", default="4:80,4:64,6:64,8:56,3:96")
    ap.add_argument("--variant-sizes", default="64:131072,256:1048576")
    a = ap.parse_args()
    variants = [tuple(int(x) for x in v.split(":")) for v in a.variants.split(",")]
    vsizes = set(a.variant_sizes.split(","))
    res: dict[str, object] = {"device": torch.cuda.get_device_name()}
    base = (gk.GLUON_STAGES, gk.GLUON_MAXNREG)
    gen = torch.Generator(device=DEV).manual_seed(0)
    for size in a.sizes.split(","):
        rows, ctx = (int(x) for x in size.split(":"))
        cache, table = bench.make_cache(rows, ctx, DEV, gen)
        q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round().to(torch.bfloat16)
        w = torch.randn(rows, 32, device=DEV, generator=gen)
        req = torch.arange(rows, dtype=torch.int32, device=DEV)
        pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=DEV)
        args = (q, w, cache, table, req, pos, 1)
        nbytes = rows * ctx * 68
        ref = torch.empty(rows, ctx, device=DEV)
        out = torch.empty(rows, ctx, device=DEV)
        gm_ref = torch.empty(rows, ctx // 64, dtype=torch.int32, device=DEV)
        gm = torch.empty_like(gm_ref)
        paged_logits_triton(*args, ref, gmax=gm_ref)

        def rec(key: str, fn, same: object = None, nbytes: int = nbytes, size: str = size) -> None:
            ms = bench._time(fn, DEV, a.iters)
            gbs = nbytes / ms / 1e6
            res[f"{size} {key}"] = {"ms": ms, "gbs": gbs, "same": same}
            print(f"{size:>14} {key:34s} {ms:9.4f} ms {gbs:6.0f} GB/s same={same}", flush=True)

        rec("triton", partial(paged_logits_triton, *args, out))
        rec("triton +gmax", partial(paged_logits_triton, *args, out, gmax=gm))
        for st, mr in [base] + ([v for v in variants if v != base] if size in vsizes else []):
            gk.GLUON_STAGES, gk.GLUON_MAXNREG = st, mr
            out.fill_(1.0)
            gm.fill_(1)
            try:
                gla.paged_logits_gpu(*args, out, gmax=gm)
                same = torch.equal(out.view(torch.int32), ref.view(torch.int32)) and torch.equal(
                    gm, gm_ref
                )
                tag = f"S{st} R{mr}"
                rec(
                    f"gluon pair +gmax {tag}",
                    partial(gla.paged_logits_gpu, *args, out, gmax=gm),
                    same,
                )
                if (st, mr) == base:
                    rec(f"gluon pair {tag}", partial(gla.paged_logits_gpu, *args, out))
                    rec(
                        f"gluon alone +gmax {tag}",
                        partial(gla.launch_gluon_logits, *args, out, gmax=gm),
                    )
            except Exception as e:  # a configuration that fails is reported, not fatal
                print(f"{size} S{st} R{mr} failed: {type(e).__name__}: {str(e)[:400]}", flush=True)
        gk.GLUON_STAGES, gk.GLUON_MAXNREG = base
        del cache, table, ref, out, gm, gm_ref
        torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
