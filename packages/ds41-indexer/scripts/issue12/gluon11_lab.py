# mypy: disable-error-code="no-untyped-def,no-untyped-call"
"""Issue 12, tenth session (helper idx10): the package's logits before and after the producer
computes the block scale factors (PFAC + LIM made the production kernel), in one process on one
H200, CUDA-graph medians (the bench's `_time`).

- "main": a copy of main's `ops/logits/gluon_kernels.py` (`--main-kernel PATH`, e.g. from
  `git show 6a851d7:packages/ds41-indexer/src/ds41_indexer/ops/logits/gluon_kernels.py`)
  launched at main's `gluon_config` shape (`MAIN_CONFIG` below), then the package's Triton pass
  over its flags: what `paged_logits_gpu` did on main.
- "this": the package's `paged_logits_gpu` (this kernel at this `gluon_config`).
- "this @NCc Tt": this kernel at another program shape (`launch_gluon_logits(config=...)`),
  then the Triton pass: the data for `gluon_config`'s thresholds.
Every timed result is compared bitwise with the Triton kernel alone (logits and group maxima;
`same`); the script exits 1 on any mismatch.

    python packages/ds41-indexer/scripts/issue12/gluon11_lab.py --main-kernel FILE
        [--json out.json] [--sizes 64:32768,...] [--iters 7] [--launch-hidden]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from functools import partial

import torch

from ds41_indexer import bench
from ds41_indexer.ops.logits.gluon_launch import (
    gluon_config,
    launch_gluon_logits,
    paged_logits_gpu,
)
from ds41_indexer.ops.logits.triton_kernels import TILE, paged_logits_triton

DEV = torch.device("cuda")
SIZES = ("256:1048576,64:131072,64:32768,256:131072,1:1048576,8:131072,32:32768,1:131072,"
         "1:32768,1:4096")  # fmt: skip


def main_config(rows: int, spans: int) -> tuple[int, int]:
    """main's (6a851d7) `gluon_config`: two consumers up to 256 programs, then 16 / 32 / 64 /
    128 tiles from 0 / 2,048 / 4,096 / 65,536 programs."""
    p = rows * spans
    if p <= 256:
        return 2, 16
    if p >= 65536:
        return 1, 128
    if p >= 4096:
        return 1, 64
    if p >= 2048:
        return 1, 32
    return 1, 16


def load(path: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gluon_kernels_main", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main_dispatched(gk, q, w, cache, table, req, pos, ratio, out, gmax):
    """main's `paged_logits_gpu`: main's kernel at main's shape, then the Triton pass."""
    t, hi, _ = q.shape
    n = out.shape[1]
    spans = -(-n // (TILE[0] * TILE[1]))
    nc, tiles = main_config(t, spans)
    done = torch.empty((t, spans), dtype=torch.int8, device=q.device)
    gk._gluon_logits_kernel[(t, -(-n // (TILE[0] * tiles)))](
        q, w, cache.storage, table, req, pos, req, out, gmax, done,
        ratio, 0, n, q.stride(0), q.stride(1), w.stride(0),
        table.shape[0], table.shape[1], table.stride(0), cache.num_pages, cache.page_stride,
        0, 0, out.stride(0), gmax.stride(0), done.stride(0), spans,
        HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
        HAS_CAND=False, OUT_BF16=False, HAS_GMAX=True, STAGES=gk.GLUON_STAGES, TILES=tiles,
        NC=nc, CONSUMER_REGS=gk.GLUON_CONSUMER_REGS, num_warps=gk.GLUON_NUM_WARPS,
        maxnreg=gk.GLUON_MAXNREG,
    )  # fmt: skip
    paged_logits_triton(q, w, cache, table, req, pos, ratio, out, gmax=gmax, done=done)


def this_at(config, q, w, cache, table, req, pos, ratio, out, gmax):
    """This kernel at program shape `config`, then the Triton pass."""
    done = launch_gluon_logits(q, w, cache, table, req, pos, ratio, out, gmax=gmax,
                               config=config)  # fmt: skip
    paged_logits_triton(q, w, cache, table, req, pos, ratio, out, gmax=gmax, done=done)


def setup(rows: int, ctx: int, gen: torch.Generator):  # type: ignore[no-untyped-def]
    cache, table = bench.make_cache(rows, ctx, DEV, gen)
    q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round().to(torch.bfloat16)
    w = torch.randn(rows, 32, device=DEV, generator=gen)
    req = torch.arange(rows, dtype=torch.int32, device=DEV)
    pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=DEV)
    return cache, table, q, w, req, pos


def plan(gk, rows: int, spans: int):  # type: ignore[no-untyped-def]
    mc, this = main_config(rows, spans), gluon_config(rows, spans)
    p = [
        (f"main NC{mc[0]} T{mc[1]}", partial(main_dispatched, gk)),
        (f"this NC{this[0]} T{this[1]}", None),
    ]
    # up to 256 programs: one consumer instead of two; 1,024 to 2,047: main's 16-tile programs
    cfg = (1, 16)
    if rows * spans < 2048 and cfg != this:
        p.append((f"this @NC{cfg[0]} T{cfg[1]}", partial(this_at, cfg)))
    return p


def run_size(gk, size: str, gen: torch.Generator, iters: int, res: dict[str, object]) -> None:
    rows, ctx = (int(x) for x in size.split(":"))
    cache, table, q, w, req, pos = setup(rows, ctx, gen)
    args = (q, w, cache, table, req, pos, 1)
    nbytes = rows * ctx * 68
    ref = torch.empty(rows, ctx, device=DEV)
    out = torch.empty(rows, ctx, device=DEV)
    gm_ref = torch.empty(rows, ctx // 64, dtype=torch.int32, device=DEV)
    gm = torch.empty_like(gm_ref)
    paged_logits_triton(*args, ref, gmax=gm_ref)
    spans = -(-ctx // (TILE[0] * TILE[1]))
    for name, fn in plan(gk, rows, spans):
        call = (partial(paged_logits_gpu, *args, out, gmax=gm) if fn is None
                else partial(fn, *args, out, gm))  # fmt: skip
        try:
            out.fill_(1.0)
            gm.fill_(1)
            call()
            same = torch.equal(out.view(torch.int32), ref.view(torch.int32)) and torch.equal(
                gm, gm_ref
            )
            ms = bench._time(call, DEV, iters)
        except Exception as e:  # a variant that fails is reported, not fatal
            print(f"{size} {name} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            res[f"{size} {name}"] = {"failed": str(e)[:300], "same": False}
            continue
        gbs = nbytes / ms / 1e6
        res[f"{size} {name}"] = {"ms": ms, "gbs": gbs, "same": same}
        print(f"{size:>12} {name:20s} {ms:9.4f} ms {gbs:6.0f} GB/s same={same}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--main-kernel", required=True)
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--launch-hidden", action="store_true", help="bench.LAUNCH_HIDDEN timing")
    a = ap.parse_args()
    bench.LAUNCH_HIDDEN = a.launch_hidden
    gen = torch.Generator(device=DEV).manual_seed(0)
    gk = load(a.main_kernel)
    res: dict[str, object] = {"device": torch.cuda.get_device_name(), "hidden": a.launch_hidden}
    for size in a.sizes.split(","):
        run_size(gk, size, gen, a.iters, res)
        torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    bad = [k for k, v in res.items() if isinstance(v, dict) and v.get("same") is False]
    print(f"timed results not bitwise the Triton kernel's: {bad}")
    sys.exit(0 if not bad else 1)


if __name__ == "__main__":
    main()
