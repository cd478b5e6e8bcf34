"""Issue 12, fifth round (logits key bandwidth): one H200 call.

1. Bitwise: the logits of this package == those of `ds41_indexer_old` (the package before the
   round, a copy under another name) on the bench's caches and on the tests' scenarios (mixed
   requests, padding rows, fp8 keys, scale-range edges that take the general path, bf16 output,
   candidate masks), and each row alone == in the batch.
2. Timing (CUDA-graph medians): the logits of this package with other pipeline depths
   (num_stages), for the record.

    python packages/ds41-indexer/scripts/issue12/round5.py --json out.json
(PYTHONPATH: the four packages' src, the folder holding `ds41_indexer_old`, and
packages/ds41-indexer/tests for the scenario builders.)
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import ds41_indexer_old as old  # type: ignore[import-not-found]
import torch
from helpers import make_queries, make_scenario, scale_edge_scenario  # type: ignore[import-not-found]

import ds41_indexer as new
from ds41_indexer import bench
from ds41_indexer.ops.logits import triton_kernels as lk

DEV = torch.device("cuda")


def same(name: str, args: tuple, kw: dict, report: dict[str, str]) -> None:
    a = old.index_logits(*args, **kw)
    b = new.index_logits(*args, **kw)
    ok = torch.equal(
        a.view(torch.int32) if a.dtype == torch.float32 else a.view(torch.int16),
        b.view(torch.int32) if b.dtype == torch.float32 else b.view(torch.int16),
    )
    q, w, cache, table, req, pos, ratio = args
    for i in range(q.shape[0]):
        s = slice(i, i + 1)
        kws = dict(kw)
        if kw.get("candidates") is not None:
            kws["candidates"] = kw["candidates"][s]
        one = new.index_logits(q[s], w[s], cache, table, req[s], pos[s], ratio, **kws)
        ok = ok and torch.equal(one, b[s])
    report[name] = "ok" if ok else "FAIL"
    print(f"bitwise {name}: {report[name]}", flush=True)


def bitwise(report: dict[str, str]) -> None:
    gen = torch.Generator(device=DEV).manual_seed(0)
    for ctx, rows in ((32768, 64), (4096 + 77, 9)):
        cache, table = bench.make_cache(rows, ctx, DEV, gen)
        q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round().to(torch.bfloat16)
        w = torch.randn(rows, 32, device=DEV, generator=gen)
        req = torch.arange(rows, dtype=torch.int32, device=DEV)
        pos = torch.randint(0, ctx, (rows,), dtype=torch.int32, device=DEV, generator=gen)
        same(f"bench {ctx} x {rows}", (q, w, cache, table, req, pos, 1), {}, report)
        del cache, table
    for fmt in ("mxfp4", "fp8_index"):
        for seed in (1, 2, 3):
            sc = make_scenario(
                fmt, [700, 1300, 90], di=128, hi=32, page_size=64, seed=seed, device=DEV
            )
            req = torch.tensor([1] * 6 + [0, 2, -1, 0], dtype=torch.int32, device=DEV)
            pos = torch.tensor(
                [1000, 1001, 1002, 1003, 1004, 1299, 699, 89, 5, 0], dtype=torch.int32, device=DEV
            )
            q, w = make_queries(len(req), 32, 128, seed=seed + 1, device=DEV)
            args = (q, w, sc.cache, sc.block_table, req, pos, 1)
            same(f"{fmt} seed {seed}", args, {}, report)
            same(f"{fmt} seed {seed} bf16", args, {"out_dtype": torch.bfloat16}, report)
            cand = torch.rand(len(req), 1300, device=DEV) < 0.5
            same(f"{fmt} seed {seed} candidates", args, {"candidates": cand}, report)
        # page size 16: tiles span pages (the per-entry page path)
        sc = make_scenario(fmt, [500, 333], di=128, hi=32, page_size=16, seed=7, device=DEV)
        req = torch.tensor([0, 1, 0, 1], dtype=torch.int32, device=DEV)
        pos = torch.tensor([499, 332, 17, 0], dtype=torch.int32, device=DEV)
        q, w = make_queries(4, 32, 128, seed=8, device=DEV)
        same(f"{fmt} page 16", (q, w, sc.cache, sc.block_table, req, pos, 1), {}, report)
    sc, q, w, req, pos = scale_edge_scenario(DEV)
    same("scale range edges", (q, w, sc.cache, sc.block_table, req, pos, 1), {}, report)


def stages(out: dict[str, object], iters: int) -> None:
    gen = torch.Generator(device=DEV).manual_seed(0)
    base = lk.TILE
    for ctx, rows in ((131072, 64), (32768, 256)):
        cache, table = bench.make_cache(rows, ctx, DEV, gen)
        q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round().to(torch.bfloat16)
        w = torch.randn(rows, 32, device=DEV, generator=gen)
        req = torch.arange(rows, dtype=torch.int32, device=DEV)
        pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=DEV)
        args = (q, w, cache, table, req, pos, 1)
        ref = new.index_logits(*args)
        for st in (2, 3, 4, 5, 6):
            lk.TILE = (base[0], base[1], base[2], st)
            ok = torch.equal(new.index_logits(*args), ref)
            ms = bench._time(partial(new.index_logits, *args, validate=False), DEV, iters)
            gbs = rows * ctx * 68 / (ms * 1e-3) / 1e9
            out[f"{ctx}x{rows} stages {st}"] = {"ms": ms, "gbs": gbs, "same": ok}
            print(f"stages {st} {ctx} x {rows}: {ms:.4f} ms {gbs:.0f} GB/s same={ok}", flush=True)
        lk.TILE = base
        del cache, table, ref


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=11)
    ap.add_argument("--no-stages", action="store_true")
    a = ap.parse_args()
    report: dict[str, str] = {}
    out: dict[str, object] = {"device": torch.cuda.get_device_name(), "bitwise": report}
    bitwise(report)
    print("bitwise old == new:", "ALL OK" if all(v == "ok" for v in report.values()) else "FAIL")
    if not a.no_stages:
        st: dict[str, object] = {}
        out["stages"] = st
        stages(st, a.iters)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
