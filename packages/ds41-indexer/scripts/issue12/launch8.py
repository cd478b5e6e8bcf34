"""Issue 12, eighth session: where the one-row 4K top-k's time goes (GPU time vs launch).

Runs against whatever `ds41_indexer` / `ds41_cache` are on PYTHONPATH (this tree, or an
exported older tree), so the same script times both in one device call. For each stage it
reports three timings, all CUDA-graph replays, medians:

- `bench`: the bench's `_time` (event, replay, event, then synchronize: the GPU is idle when
  the replay is submitted, so a short graph's figure includes the host's launch latency);
- `ahead`: the same, after a `torch.cuda._sleep` that keeps the GPU busy until the replay is
  queued (the graph's own GPU time, launch latency hidden);
- `x20`: a graph of 20 back-to-back calls, replayed after the same sleep, divided by 20.

Stages: an empty Triton kernel (the floor), the top-k of the bench's 4K one-row logits (and
of the 128K one-row logits: the split selector), the logits and the fused call at 4K. With
`--variants`, the one-chunk kernel at 4 / 16 warps and lab probes (wrong results, timing
only) beside it; every exact variant is checked equal to the production selection.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from collections.abc import Callable
from functools import partial

import torch
import triton
import triton.language as tl

import ds41_indexer
import ds41_indexer.bench as bench
from ds41_indexer.logits import index_logits
from ds41_indexer.ops.logits.naive import visible_entries
from ds41_indexer.paged import paged_index_topk
from ds41_indexer.topk import index_topk

SLEEP_CYCLES = 400_000  # ~200 us at 1.98 GHz: longer than any host-side replay latency


@triton.jit
def _empty_kernel(x_ptr):
    if tl.program_id(0) < 0:
        tl.store(x_ptr, 0)


def timings(fn: Callable[[], object], iters: int) -> dict[str, float]:
    dev = torch.device("cuda")
    out = {"bench": bench._time(fn, dev, iters)}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    many = torch.cuda.CUDAGraph()
    with torch.cuda.graph(many):
        for _ in range(20):
            fn()
    for name, g, div in (("ahead", graph, 1), ("x20", many, 20)):
        g.replay()
        torch.cuda.synchronize()
        samples = []
        for _ in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SLEEP_CYCLES)
            start.record()
            g.replay()
            stop.record()
            stop.synchronize()
            samples.append(float(start.elapsed_time(stop)) / div)
        out[name] = statistics.median(samples)
    return {k: round(v * 1e3, 2) for k, v in out.items()}  # us


def inputs(ctx: int, dev: torch.device):
    """The bench's one-row inputs at `ctx` (same generator sequence as `bench.run`)."""
    gen = torch.Generator(device=dev).manual_seed(0)
    cache, table = bench.make_cache(1, ctx, dev, gen)
    q = torch.randn(1, bench.HI, bench.DI, device=dev, generator=gen).mul(2).round()
    q = q.to(torch.bfloat16)
    w = torch.randn(1, bench.HI, device=dev, generator=gen)
    req = torch.arange(1, dtype=torch.int32, device=dev)
    pos = torch.full((1,), ctx - 1, dtype=torch.int32, device=dev)
    return (q, w, cache, table[:1], req, pos, bench.RATIO)


def warm_clocks() -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(40):
        a @ a
    torch.cuda.synchronize()


def variants(scores: torch.Tensor, n_vis: torch.Tensor, iters: int) -> dict[str, object]:
    import ds41_indexer.ops.topk.triton_kernels as tk

    k = bench.TOPK
    k_pad = tk.k_pad_of(k)
    ch = tk.default_chunk(k_pad)
    ref = index_topk(scores, n_vis, k)
    res: dict[str, object] = {}

    def launch(nw: int, out: torch.Tensor, kernel=tk._select_row_kernel) -> None:
        kernel[(1,)](
            scores,
            n_vis,
            out,
            scores.shape[1],
            scores.stride(0),
            out.stride(0),
            k,
            CHUNK=ch,
            K_PAD=k_pad,
            num_warps=nw,
        )

    for nw in (4, 8, 16):
        out = torch.full((1, k), -7, dtype=torch.int32, device="cuda")
        launch(nw, out)
        ok = bool(torch.equal(out, ref))
        res[f"select_row nw{nw}"] = {"equal": ok, **timings(partial(launch, nw, out), iters)}
    for name, kern in (("probe no search", _probe_nosearch), ("probe load+store", _probe_io)):
        out = torch.full((1, k), -7, dtype=torch.int32, device="cuda")
        res[name] = timings(partial(launch, 8, out, kern), iters)
    return res


@triton.jit
def _probe_nosearch(
    score_ptr,
    nvis_ptr,
    out_ptr,
    n_cols,
    score_stride_t,
    out_stride_t,
    k,
    CHUNK: tl.constexpr,
    K_PAD: tl.constexpr,
):
    """Timing probe: the one-chunk kernel without the k-th-key search (thr = max key)."""
    t = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    x = tl.load(score_ptr + t * score_stride_t + cols, mask=cols < n_cols, other=0.0)
    n_vis = tl.minimum(tl.maximum(tl.load(nvis_ptr + t), 0), n_cols)
    valid = cols < n_vis
    key = tl.where(valid, x.to(tl.float32).to(tl.uint32, bitcast=True), 0)
    thr = tl.max(key, axis=0)
    take = valid & (key >= thr)
    slot = tl.cumsum(take.to(tl.int32), axis=0) - 1
    tl.store(out_ptr + t * out_stride_t + slot, cols, mask=take)
    fill = tl.arange(0, K_PAD)
    tl.store(
        out_ptr + t * out_stride_t + fill,
        tl.full((K_PAD,), -1, tl.int32),
        mask=(fill >= 1) & (fill < k),
    )


@triton.jit
def _probe_io(
    score_ptr,
    nvis_ptr,
    out_ptr,
    n_cols,
    score_stride_t,
    out_stride_t,
    k,
    CHUNK: tl.constexpr,
    K_PAD: tl.constexpr,
):
    """Timing probe: load the row and n_visible, store k entries (no selection)."""
    t = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    x = tl.load(score_ptr + t * score_stride_t + cols, mask=cols < n_cols, other=0.0)
    n_vis = tl.load(nvis_ptr + t)
    fill = tl.arange(0, K_PAD)
    v = tl.reshape(x.to(tl.int32, bitcast=True), (CHUNK // K_PAD, K_PAD)).to(tl.int32)
    tl.store(out_ptr + t * out_stride_t + fill, tl.max(v, axis=0) + n_vis, mask=fill < k)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="tree")
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=31)
    ap.add_argument("--variants", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda")
    info = {
        "label": a.label,
        "package": os.path.dirname(ds41_indexer.__file__),
        "kernel": platform.release(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "gpu": torch.cuda.get_device_name(),
    }
    print(info, flush=True)
    res: dict[str, object] = {"info": info}
    x = torch.zeros(1, device=dev)
    warm_clocks()
    res["empty kernel"] = timings(lambda: _empty_kernel[(1,)](x), a.iters)
    for ctx in (4096, 131072):
        args = inputs(ctx, dev)
        scores = index_logits(*args)
        n_vis = visible_entries(args[4], args[5], bench.RATIO)
        warm_clocks()
        res[f"top-k {ctx}"] = timings(
            partial(index_topk, scores, n_vis, bench.TOPK, validate=False), a.iters
        )
        if ctx == 4096:
            res["logits 4096"] = timings(partial(index_logits, *args, validate=False), a.iters)
            res["fused 4096"] = timings(
                partial(paged_index_topk, *args, bench.TOPK, validate=False), a.iters
            )
            if a.variants:
                res["variants 4096"] = variants(scores, n_vis, a.iters)
    res["empty kernel (again)"] = timings(lambda: _empty_kernel[(1,)](x), a.iters)
    for key, v in res.items():
        if key == "info":
            continue
        if key.startswith("variants"):
            for name, t in v.items():  # type: ignore[union-attr]
                print(f"[{a.label}] {key} {name}: {t}", flush=True)
        else:
            print(f"[{a.label}] {key}: {v}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
