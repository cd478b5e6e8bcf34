"""Issue 12, sixth round: Gluon logits kernel variants on one H200 (CUDA-graph medians).

Variants (each launched like `gluon_launch.launch_gluon_logits`, group maxima on, compared
bitwise with the Triton kernel where they should match):
- `serial`: the production kernel (`ops/logits/gluon_kernels.py`: one tile at a time);
- `production`, as call 2 named it: `lab_gluon_pipe2.py`, the software-pipelined kernel (two
  tiles per loop step, tile 2p's products overlapping tile 2p + 1's decode, tile 2p + 1's
  overlapping tile 2p's epilogue; the stage released by one asynchronous arrival per thread);
- `pipe2 1-thread release`: the pipelined kernel with the stage released by one thread after a
  barrier of the consumer's 4 warps;
- `no decode`: the pipelined kernel with the MXFP4 decode replaced by register moves (wrong
  values: what the decode costs);
at ring stages / register caps `S:R` (65,536 / (256 R) programs per SM). Call 2 of the round
ran this with the pipelined kernel as the production one; the names are kept so the results
(`benchmarks/results/indexer_issue12g_call2_lab.json`) read the same.

    python packages/ds41-indexer/scripts/issue12/gluon6_lab.py --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from functools import partial
from types import ModuleType

import torch

from ds41_indexer import bench
from ds41_indexer.ops.logits import gluon_kernels as prod
from ds41_indexer.ops.logits.triton_kernels import TILE, paged_logits_triton

DEV = torch.device("cuda")
HERE = os.path.dirname(os.path.abspath(__file__))


def load(name: str, path: str | None = None, edits: tuple[tuple[str, str], ...] = ()) -> ModuleType:
    with open(path or prod.__file__) as fh:
        src = fh.read()
    for old, new in edits:
        assert old in src, (name, old[:60])
        src = src.replace(old, new)
    f = os.path.join(tempfile.mkdtemp(), f"lab_{name}.py")
    with open(f, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(f"lab_{name}", f)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = mod  # type: ignore[union-attr]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


ONE_THREAD = (
    (
        "    # every thread releases the stage once its reads are consumed (the decode used them)\n"
        "    async_copy.mbarrier_arrive(empty.index(st), increment_count=False)\n",
        "",
    ),
    (
        "    sc = sc.load(gl.SliceLayout(2, rl)).to(gl.int32)\n",
        "    sc = sc.load(gl.SliceLayout(2, rl)).to(gl.int32)\n"
        "    gl.thread_barrier()\n    mbarrier.arrive(empty.index(st), count=1)\n",
    ),
    ("mbarrier.init(empty.index(b), count=128)", "mbarrier.init(empty.index(b), count=1)"),
)
NO_DECODE = (
    (
        "        cvt.rn.f16x2.e4m3x2 $0, l0;\n        cvt.rn.f16x2.e4m3x2 $1, l1;\n"
        "        cvt.rn.f16x2.e4m3x2 $2, h0;\n        cvt.rn.f16x2.e4m3x2 $3, h1;\n"
        "        mul.rn.f16x2 $0, $0, $5;\n        mul.rn.f16x2 $1, $1, $6;\n"
        "        mul.rn.f16x2 $2, $2, $5;\n        mul.rn.f16x2 $3, $3, $6;\n",
        "        mov.b32 $0, $4;\n        mov.b32 $1, $5;\n        mov.b32 $2, $6;\n"
        "        mov.b32 $3, $4;\n",
    ),
)


def launch(
    gk: ModuleType, stages: int, maxnreg: int, q, w, cache, table, req, pos, ratio, out, gmax
):  # type: ignore[no-untyped-def]
    t, hi, _ = q.shape
    n = out.shape[1]
    span = TILE[0] * TILE[1]
    spans = -(-n // span)
    done = torch.empty((t, spans), dtype=torch.int8, device=q.device)
    gk._gluon_logits_kernel[(t, spans)](
        q, w, cache.storage, table, req, pos, req, out, gmax, done,
        ratio, 0, n, q.stride(0), q.stride(1), w.stride(0),
        table.shape[0], table.shape[1], table.stride(0), cache.num_pages, cache.page_stride,
        0, 0, out.stride(0), gmax.stride(0), done.stride(0),
        HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
        HAS_CAND=False, OUT_BF16=False, HAS_GMAX=True, STAGES=stages, TILES=TILE[1],
        num_warps=4, maxnreg=maxnreg,
    )  # fmt: skip
    return done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--sizes", default="64:131072,256:1048576")
    a = ap.parse_args()
    pipe2 = os.path.join(HERE, "lab_gluon_pipe2.py")
    plan = [
        ("serial", prod, [(4, 64)], True),
        ("pipe2 1-thread release", load("onethread", pipe2, ONE_THREAD), [(4, 72)], True),
        ("production", load("pipe2", pipe2), [(4, 72), (4, 80), (4, 64), (6, 72)], True),
        ("no decode", load("nodecode", pipe2, NO_DECODE), [(4, 72)], False),
    ]
    res: dict[str, object] = {"device": torch.cuda.get_device_name()}
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

        def rec(key: str, fn, same: object = None, size: str = size, nbytes: int = nbytes) -> None:  # type: ignore[no-untyped-def]
            ms = bench._time(fn, DEV, a.iters)
            gbs = nbytes / ms / 1e6
            res[f"{size} {key}"] = {"ms": ms, "gbs": gbs, "same": same}
            print(f"{size:>12} {key:40s} {ms:9.4f} ms {gbs:6.0f} GB/s same={same}", flush=True)

        rec("triton +gmax", partial(paged_logits_triton, *args, out, gmax=gm))
        for name, mod, configs, check in plan:
            for st, mr in configs:
                try:
                    out.fill_(1.0)
                    gm.fill_(1)
                    done = launch(mod, st, mr, *args, out, gm)
                    same: object = None
                    if check:
                        same = (
                            torch.equal(out.view(torch.int32), ref.view(torch.int32))
                            and torch.equal(gm, gm_ref)
                            and bool(done.all())
                        )
                    rec(f"{name} S{st} R{mr}", partial(launch, mod, st, mr, *args, out, gm), same)
                except Exception as e:  # a variant that fails is reported, not fatal
                    print(f"{size} {name} S{st} R{mr} failed: {type(e).__name__}: {str(e)[:300]}")
        del cache, table, ref, out, gm, gm_ref
        torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
