"""Issue 12, seventh round: Gluon logits kernel variants on one H200 (CUDA-graph medians).

Every variant writes logits and group maxima, launched as `gluon_launch.launch_gluon_logits`
does, and is compared bitwise with the Triton kernel (`same`: logits, group maxima, every span
done):
- `old`: the sixth round's kernel (`ds41_indexer_old`, the package at main 85a81ce);
- `N{c} T{t} R{r}`: this package's kernel with c consumer warpgroups, t tiles a program and r
  registers a thread at launch (C{x}: the second consumer's registers);
- `no swizzle`, `old factor`: this kernel with the swizzled key layout or the fp32-built scale
  factor taken out again (source edits), to attribute the gains;
- `pair`: the dispatched call (the Gluon kernel and the Triton pass over its flags).

    python packages/ds41-indexer/scripts/issue12/gluon7_lab.py --json out.json
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
from ds41_indexer.ops.logits.gluon_launch import paged_logits_gpu
from ds41_indexer.ops.logits.triton_kernels import TILE, paged_logits_triton

DEV = torch.device("cuda")


def load(name: str, edits: tuple[tuple[str, str], ...] = ()) -> ModuleType:
    with open(prod.__file__) as fh:
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


NO_SWIZZLE = (
    ("    return gl.SwizzledSharedLayout(4, 2, 4, [1, 0])",
     "    return gl.SwizzledSharedLayout(1, 1, 1, [1, 0])"),
    ("[2, 1, 0], [4, 2, 0], [8, 0, 0]", "[2, 0, 0], [4, 0, 0], [8, 0, 0]"),
)  # fmt: skip
OLD_FACTOR = (
    (
        "        fac = _f16x2_dup(((sc - mk[:, None]) + 142) << 23)\n",
        "        e = gl.maximum(sc - mk[:, None] + 15, -24)\n"
        "        fbits = gl.where(e >= -14, (e + 15) << 10, 1 << (e + 24))\n"
        "        fac = fbits | (fbits << 16)\n",
    ),
)

# the stage released by one asynchronous arrival per consumer thread (no barrier of the 4 warps)
ASYNC_RELEASE = (
    (
        "        gl.thread_barrier()\n        mbarrier.arrive(empty.index(s), count=1)\n",
        "        async_copy.mbarrier_arrive(empty.index(s), increment_count=False)\n",
    ),
    ("mbarrier.init(empty.index(b), count=1)", "mbarrier.init(empty.index(b), count=128)"),
)


def launch_new(gk, nc, tiles, maxnreg, cregs, stages, q, w, cache, table, req, pos, ratio, out,  # type: ignore[no-untyped-def]
               gmax):  # fmt: skip
    t, hi, _ = q.shape
    n = out.shape[1]
    spans = -(-n // (TILE[0] * TILE[1]))
    done = torch.empty((t, spans), dtype=torch.int8, device=q.device)
    gk._gluon_logits_kernel[(t, -(-n // (TILE[0] * tiles)))](
        q, w, cache.storage, table, req, pos, req, out, gmax, done,
        ratio, 0, n, q.stride(0), q.stride(1), w.stride(0),
        table.shape[0], table.shape[1], table.stride(0), cache.num_pages, cache.page_stride,
        0, 0, out.stride(0), gmax.stride(0), done.stride(0), spans,
        HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
        HAS_CAND=False, OUT_BF16=False, HAS_GMAX=True, STAGES=stages, TILES=tiles, NC=nc,
        CONSUMER_REGS=cregs, num_warps=4, maxnreg=maxnreg,
    )  # fmt: skip
    return done


def launch_old(gk, q, w, cache, table, req, pos, ratio, out, gmax):  # type: ignore[no-untyped-def]
    t, hi, _ = q.shape
    n = out.shape[1]
    spans = -(-n // (TILE[0] * TILE[1]))
    done = torch.empty((t, spans), dtype=torch.int8, device=q.device)
    gk._gluon_logits_kernel[(t, spans)](
        q, w, cache.storage, table, req, pos, req, out, gmax, done,
        ratio, 0, n, q.stride(0), q.stride(1), w.stride(0),
        table.shape[0], table.shape[1], table.stride(0), cache.num_pages, cache.page_stride,
        0, 0, out.stride(0), gmax.stride(0), done.stride(0),
        HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
        HAS_CAND=False, OUT_BF16=False, HAS_GMAX=True, STAGES=4, TILES=TILE[1],
        num_warps=4, maxnreg=64,
    )  # fmt: skip
    return done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=9)
    ap.add_argument("--sizes", default="64:131072,256:1048576,64:32768,8:131072,1:131072")
    ap.add_argument("--variants", default=None, help="comma-separated names to run (default all)")
    a = ap.parse_args()
    plan: list[tuple[str, object]] = []
    try:
        from ds41_indexer_old.ops.logits import (  # type: ignore[import-not-found]
            gluon_kernels as old_gk,
        )

        plan.append(("old", partial(launch_old, old_gk)))
    except ImportError as e:
        print("no old package:", e)
    for nc, tiles, r, c, st in [
        (1, 16, 64, 80, 4), (1, 32, 64, 80, 4), (2, 16, 64, 80, 4), (2, 32, 64, 80, 4),
        (2, 16, 56, 72, 4), (2, 32, 56, 72, 4), (1, 16, 56, 80, 4), (2, 32, 64, 80, 8),
        (1, 32, 64, 80, 6),
    ]:  # fmt: skip
        name = f"N{nc} T{tiles} R{r}" + (f" C{c}" if nc == 2 else "") + f" S{st}"
        plan.append((name, partial(launch_new, prod, nc, tiles, r, c, st)))
    for name, edits in (
        ("no swizzle", NO_SWIZZLE),
        ("old factor", OLD_FACTOR),
        ("async release", ASYNC_RELEASE),
    ):
        mod = load(name.replace(" ", "_"), edits)
        plan.append((f"{name} N1 T16 R64", partial(launch_new, mod, 1, 16, 64, 80, 4)))
    if a.variants:
        plan = [(n, fn) for n, fn in plan if n in a.variants.split(",")]
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
            print(f"{size:>12} {key:28s} {ms:9.4f} ms {gbs:6.0f} GB/s same={same}", flush=True)

        def same_as_ref(done: torch.Tensor | None, got=(out, gm), want=(ref, gm_ref)) -> bool:  # type: ignore[no-untyped-def]
            return (
                torch.equal(got[0].view(torch.int32), want[0].view(torch.int32))
                and torch.equal(got[1], want[1])
                and (done is None or bool(done.all()))
            )

        rec("triton +gmax", partial(paged_logits_triton, *args, out, gmax=gm))
        for name, fn in plan:
            try:
                out.fill_(1.0)
                gm.fill_(1)
                done = fn(*args, out, gm)  # type: ignore[operator]
                rec(name, partial(fn, *args, out, gm), same_as_ref(done))  # type: ignore[arg-type]
            except Exception as e:  # a variant that fails is reported, not fatal
                print(f"{size} {name} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        out.fill_(1.0)
        gm.fill_(1)
        paged_logits_gpu(*args, out, gmax=gm)
        rec("pair (dispatched)", partial(paged_logits_gpu, *args, out, gmax=gm), same_as_ref(None))
        del cache, table, ref, out, gm, gm_ref
        torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
