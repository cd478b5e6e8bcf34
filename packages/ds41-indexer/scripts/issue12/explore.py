"""Issue 12 device exploration: copy bandwidth, a page-gather read ceiling of the bench's key
layout, logits tile variants and the fused call's stage split (CUDA-graph medians)."""

from __future__ import annotations

import json
import os
from functools import partial

import torch
import triton
import triton.language as tl

from ds41_indexer import bench, index_logits
from ds41_indexer.ops.logits import triton_kernels as lk

DEV = torch.device("cuda")
TILES = ((64, 16, 4, 4), (64, 8, 4, 4), (64, 16, 4, 1), (64, 16, 4, 3), (64, 16, 4, 5))
TILES += ((64, 32, 4, 4), (128, 16, 8, 4))


@triton.jit
def _read_pages(cache_ptr, bt_ptr, out_ptr, bt_stride, page_stride, PAGES: tl.constexpr):
    """Sum of the key bytes (4096 data + 256 scale bytes per 64-entry page) of PAGES pages."""
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    acc = tl.zeros((1024,), tl.int32)
    acc2 = tl.zeros((64,), tl.int32)
    for i in tl.range(PAGES):
        page = tl.load(bt_ptr + t * bt_stride + j * PAGES + i).to(tl.int64)
        base = tl.multiple_of(page * (page_stride // 4), 4)
        acc += tl.load(cache_ptr + base + tl.arange(0, 1024))
        acc2 += tl.load(cache_ptr + base + 1024 + tl.arange(0, 64))
    tl.store(out_ptr + t * 4096 + j, tl.sum(acc, 0) + tl.sum(acc2, 0))


def _copy(x: torch.Tensor, y: torch.Tensor) -> None:
    y.copy_(x)


def _read(st32, table, out, stride, pages_per, p, stages, warps) -> None:  # type: ignore[no-untyped-def]
    grid = (table.shape[0], table.shape[1] // pages_per)
    _read_pages[grid](st32, table, out, table.stride(0), stride, PAGES=p, num_stages=stages,
                      num_warps=warps)  # fmt: skip


def main() -> None:
    out_dir = os.environ.get("OUT", "/tmp")
    res: dict[str, object] = {}
    x = torch.empty(2 << 30, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    ms = bench._time(partial(_copy, x, y), DEV, 7)
    res["copy_read_plus_write_GBs"] = 2 * x.numel() / ms / 1e6
    print(f"copy: read+write {res['copy_read_plus_write_GBs']:.0f} GB/s", flush=True)
    del x, y
    gen = torch.Generator(device=DEV).manual_seed(0)
    for ctx, rows in ((131072, 256), (1048576, 64)):
        cache, table = bench.make_cache(rows, ctx, DEV, gen)
        st32 = cache.storage.view(torch.int32)
        o = torch.empty(rows, 4096, dtype=torch.int32, device=DEV)
        for p, stages, warps in ((8, 1, 4), (8, 3, 4), (16, 3, 4), (8, 3, 8)):
            fn = partial(_read, st32, table, o, cache.page_stride, p, p, stages, warps)
            ms = bench._time(fn, DEV, 7)
            gbs = rows * ctx * 68 / ms / 1e6
            res[f"read_pages_{ctx}x{rows}_P{p}S{stages}W{warps}"] = gbs
            print(f"page-gather read {ctx}x{rows} P{p} S{stages} W{warps}: {gbs:.0f} GB/s")
        q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round()
        q = q.to(torch.bfloat16)
        w = torch.randn(rows, 32, device=DEV, generator=gen)
        req = torch.arange(rows, dtype=torch.int32, device=DEV)
        pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=DEV)
        args = (q, w, cache, table, req, pos, 1)
        default = lk.TILE
        ref = index_logits(*args, validate=False)
        for tile in TILES:
            lk.TILE = tile
            try:
                ms = bench._time(partial(index_logits, *args, validate=False), DEV, 7)
                same = torch.equal(index_logits(*args, validate=False), ref)
                gbs = rows * ctx * 68 / ms / 1e6
                res[f"logits_{ctx}x{rows}_{tile}"] = [ms, gbs, same]
                print(f"logits {ctx}x{rows} tile {tile}: {ms:.3f} ms {gbs:.0f} GB/s same={same}")
            except Exception as e:  # a variant that does not compile is reported, not fatal
                print(f"logits tile {tile} failed: {type(e).__name__}: {str(e)[:300]}")
        lk.TILE = default
        f_logits, f_select = bench.fused_stages(*args, 512)
        a, b = bench._time(f_logits, DEV, 7), bench._time(f_select, DEV, 7)
        res[f"split_{ctx}x{rows}"] = [a, b]
        print(f"fused split {ctx}x{rows}: logits+gmax {a:.3f} ms, select {b:.3f} ms", flush=True)
        del cache, table, q, w, ref
        torch.cuda.empty_cache()
    with open(os.path.join(out_dir, "explore.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
