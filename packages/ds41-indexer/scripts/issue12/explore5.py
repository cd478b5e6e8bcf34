"""Issue 12, fifth round: where the logits' time goes (one H200 call, CUDA-graph medians).

After the round's change (int16 key loads: 7.5% fewer SASS per tile, 107 instead of 131
registers) the logits' key bandwidth moved by 1-3%, so the loop is not bound by instruction
issue alone. This script times, at 64 rows x 128K entries (the bench's layout: 64-entry pages
in shuffled order):
- a plain page-gather read of the same bytes (`_read_pages`: no decode, no product), on the
  bench's shuffled block table and on a contiguous one;
- the logits kernel on both tables;
- the kernel with the MXFP4 decode replaced by register moves (wrong values: the cost of the
  decode alone), built from a copy of the module;
- other tile shapes (`TILE`): 32 and 8 tiles per program, 128-entry tiles with 8 warps (on a
  128-entry page cache).
Bits are reported (`same`) where the variant should give the production logits.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from functools import partial

import torch
import triton
import triton.language as tl

from ds41_indexer import bench, index_logits
from ds41_indexer.ops.logits import triton_kernels as lk

DEV = torch.device("cuda")


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


def variant(name: str, old: str, new: str):  # type: ignore[no-untyped-def]
    with open(lk.__file__) as f:
        src = f.read()
    assert old in src, name
    path = os.path.join(tempfile.mkdtemp(), f"_var_{name}.py")
    with open(path, "w") as f:
        f.write(src.replace(old, new))
    spec = importlib.util.spec_from_file_location(f"ds41_indexer.ops.logits._var_{name}", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = mod  # type: ignore[union-attr]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def main() -> None:
    out_dir = os.environ.get("OUT", "/tmp")
    res: dict[str, object] = {}

    def rec(key: str, ms: float, nbytes: float, extra: object = None) -> None:
        gbs = nbytes / ms / 1e6
        res[key] = {"ms": ms, "gbs": gbs, "same": extra}
        print(f"{key:48s} {ms:8.4f} ms {gbs:6.0f} GB/s same={extra}", flush=True)

    x = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    y = torch.empty_like(x)
    rec("copy 1 GiB (read + write bytes)", bench._time(partial(y.copy_, x), DEV, 7), 2 * x.numel())
    del x, y
    gen = torch.Generator(device=DEV).manual_seed(0)
    ctx, rows = 131072, 64
    nbytes = rows * ctx * 68
    cache, table = bench.make_cache(rows, ctx, DEV, gen)
    contig = torch.arange(table.numel(), dtype=torch.int32, device=DEV).view_as(table)
    st32 = cache.storage.view(torch.int32)
    o = torch.empty(rows, 4096, dtype=torch.int32, device=DEV)
    for tname, tab in (("shuffled", table), ("contiguous", contig)):
        for p, stages, warps in ((8, 3, 4), (16, 4, 4)):
            grid = (rows, tab.shape[1] // p)
            fn = partial(
                _read_pages[grid], st32, tab, o, tab.stride(0), cache.page_stride, PAGES=p,
                num_stages=stages, num_warps=warps,
            )  # fmt: skip
            rec(
                f"page-gather read {tname} P{p} S{stages} W{warps}", bench._time(fn, DEV, 7), nbytes
            )
    q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round().to(torch.bfloat16)
    w = torch.randn(rows, 32, device=DEV, generator=gen)
    req = torch.arange(rows, dtype=torch.int32, device=DEV)
    pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=DEV)
    ref = index_logits(q, w, cache, table, req, pos, 1)
    for tname, tab in (("shuffled", table), ("contiguous", contig)):
        fn = partial(index_logits, q, w, cache, tab, req, pos, 1, validate=False)
        rec(f"logits {tname}", bench._time(fn, DEV, 9), nbytes)
    out = torch.empty(rows, ctx, device=DEV)
    nodec = variant(
        "nodecode",
        "cvt.rn.f16x2.e4m3x2 $0, l0;\n        cvt.rn.f16x2.e4m3x2 $1, l1;\n        "
        "cvt.rn.f16x2.e4m3x2 $2, h0;\n        cvt.rn.f16x2.e4m3x2 $3, h1;\n        "
        "mul.rn.f16x2 $0, $0, $5;\n        mul.rn.f16x2 $1, $1, $6;\n        "
        "mul.rn.f16x2 $2, $2, $5;\n        mul.rn.f16x2 $3, $3, $6;",
        "mov.b32 $0, $4;\n        mov.b32 $1, $5;\n        mov.b32 $2, $6;\n        "
        "mov.b32 $3, $4;",
    )
    for mname, mod in (("production", lk), ("no decode (wrong values)", nodec)):
        fn = partial(mod.paged_logits_triton, q, w, cache, table, req, pos, 1, out)
        try:
            rec(f"kernel {mname}", bench._time(fn, DEV, 9), nbytes)
        except Exception as e:  # a variant that fails is reported, not fatal
            print(f"kernel {mname} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    base = lk.TILE
    for tile in ((64, 32, 4, 4), (64, 8, 4, 4), (64, 16, 4, 3)):
        lk.TILE = tile
        got = index_logits(q, w, cache, table, req, pos, 1)
        fn = partial(index_logits, q, w, cache, table, req, pos, 1, validate=False)
        rec(f"logits tile {tile}", bench._time(fn, DEV, 9), nbytes, torch.equal(got, ref))
    lk.TILE = base
    del cache, table, contig, ref, out
    torch.cuda.empty_cache()
    bench.PAGE_SIZE = 128
    cache, table = bench.make_cache(rows, ctx, DEV, gen)
    ref = index_logits(q, w, cache, table, req, pos, 1)
    for tile in (base, (128, 8, 8, 4)):
        lk.TILE = tile
        got = index_logits(q, w, cache, table, req, pos, 1)
        fn = partial(index_logits, q, w, cache, table, req, pos, 1, validate=False)
        rec(f"page 128 logits tile {tile}", bench._time(fn, DEV, 9), nbytes, torch.equal(got, ref))
    lk.TILE = base
    with open(os.path.join(out_dir, "explore5.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
