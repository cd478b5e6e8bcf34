"""Radix-select variant of the indexer's chunk selector (an experiment, not the production path).

`ds41_indexer.ops.topk.triton_kernels._select_chunk` finds a chunk's k-th largest key with a
32-step bitwise search. This script swaps in a radix select (four 8-bit histogram passes with
`tl.histogram`, each restricted to the keys sharing the digits chosen so far), runs it on rows
of one chunk and checks it against the torch reference; on CUDA it also times it against the
production `index_topk` on the same logits.

Measured on one H200 (2026-11-30, CUDA-graph medians, k 512, chunk 4096, fp32 logits): the radix
variant was bitwise equal to the reference (ties, -0.0/+0.0, -inf, rows with fewer than k
visible, 1..256 rows, up to 1,048,576 entries) but 1.2-1.35x slower than the bitwise search
(one row: 20.8 vs 17.3 us at 4K entries, 53.8 vs 41.7 us at 128K, 84.0 vs 62.9 us at 1M; 256
rows at 1M: 8.64 vs 6.92 ms), so production keeps the bitwise search. Results:
`benchmarks/results/indexer_compare.json` (`new_topk_c*` = radix, `old_topk` = bitwise search).

    python packages/ds41-indexer/scripts/radix_select.py  # CPU: interpreter check; GPU: + timing
"""

from __future__ import annotations

import os
import sys
from functools import partial

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton
import triton.language as tl

from ds41_cache.outputs import empty
from ds41_indexer import index_topk
from ds41_indexer.ops.topk import triton_kernels as tk

RADIX_BITS = tl.constexpr(8)
"""Digit width of the radix select: 4 passes of 256-bin histograms per 32-bit key."""
RADIX_BINS = tl.constexpr(256)
RADIX_PASSES = tl.constexpr(4)


@triton.jit
def _radix_threshold(key, valid, kk):
    """The kk-th largest valid key -> (thr uint32, need_eq int32): keys > thr are all taken and
    `need_eq` of the keys == thr (kk == 0 gives thr = 2**32 - 1, need_eq = 0: nothing taken)."""
    bins = tl.arange(0, RADIX_BINS)
    need = kk
    prefix = tl.zeros((), dtype=tl.uint32)
    for p in tl.static_range(RADIX_PASSES):
        shift = 32 - RADIX_BITS * (p + 1)
        if p == 0:
            match = valid
        else:
            # Only keys whose higher digits equal the chosen prefix can hold the threshold.
            match = valid & ((key >> (shift + RADIX_BITS)) == (prefix >> (shift + RADIX_BITS)))
        digit = ((key >> shift) & (RADIX_BINS - 1)).to(tl.int32)
        hist = tl.histogram(digit, RADIX_BINS, mask=match)
        at_or_above = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist
        # at_or_above is non-increasing; the threshold digit is the last bin where it >= need.
        b = tl.sum((at_or_above >= need).to(tl.int32), axis=0) - 1
        need = need - tl.sum(tl.where(bins > b, hist, 0), axis=0)
        prefix = prefix | (b.to(tl.uint32) << shift)
    return prefix, need


@triton.jit
def _select_chunk_radix(key, valid, k):
    """Drop-in for `triton_kernels._select_chunk` (same outputs)."""
    n_valid = tl.sum(valid.to(tl.int32), axis=0)
    kk = tl.minimum(n_valid, k)
    thr, need_eq = _radix_threshold(key, valid, kk)
    gt = valid & (key > thr)
    eq = valid & (key == thr)
    both = tl.cumsum(gt.to(tl.int32) + (eq.to(tl.int32) << 16), axis=0)
    eq_rank = both >> 16
    take = gt | (eq & (eq_rank <= need_eq))
    slot = (both & 0xFFFF) + tl.minimum(eq_rank, need_eq) - 1
    return take, slot, kk


@triton.jit
def _radix_rows_kernel(
    score_ptr, nvis_ptr, out_ptr, n_cols, k, CHUNK: tl.constexpr, K_PAD: tl.constexpr
):
    """One program per row of at most CHUNK scores -> its top-k (ascending entries, then -1)."""
    t = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    valid = (cols < n_cols) & (cols < tl.load(nvis_ptr + t))
    x = tl.load(score_ptr + t * n_cols + cols, mask=valid, other=0.0)
    take, slot, kk = _select_chunk_radix(tk._score_to_key(x), valid, k)
    tl.store(out_ptr + t * k + slot, cols, mask=take)
    fill = tl.arange(0, K_PAD)
    tl.store(
        out_ptr + t * k + fill, tl.full((K_PAD,), -1, tl.int32), mask=(fill >= kk) & (fill < k)
    )


def radix_topk(x: torch.Tensor, nv: torch.Tensor, k: int) -> torch.Tensor:
    rows, n = x.shape
    out = empty((rows, k), torch.int32, x.device)
    chunk = max(16, int(triton.next_power_of_2(n)))
    assert chunk <= 1 << 14, "one chunk of at most 16384 entries per row"
    _radix_rows_kernel[(rows,)](x, nv, out, n, k, CHUNK=chunk, K_PAD=tk.k_pad_of(k), num_warps=8)
    return out


def _time_ms(fn, iters: int = 20) -> float:  # type: ignore[no-untyped-def]
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    stop.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(stop)) / iters


def main() -> None:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sizes = [(3, 300, 7), (2, 4096, 64)]
    if dev.type == "cuda":
        sizes += [(1, 4096, 512), (256, 4096, 512), (64, 16384, 512)]
    g = torch.Generator(device=dev).manual_seed(0)
    for rows, n, k in sizes:
        x = torch.randn(rows, n, device=dev, generator=g).to(torch.bfloat16).float()  # ties
        nv = torch.full((rows,), n, dtype=torch.int32, device=dev)
        nv[0] = min(n - 3, k // 2)  # fewer than k visible
        ref = index_topk(x, nv, k, backend="torch")
        ok = torch.equal(radix_topk(x, nv, k), ref)
        line = f"rows {rows} n {n} k {k}: radix == torch reference: {ok}"
        if dev.type == "cuda":
            t_radix = _time_ms(partial(radix_topk, x, nv, k))
            t_bit = _time_ms(partial(index_topk, x, nv, k, validate=False))
            line += f"; radix {t_radix * 1e3:.1f} us, production {t_bit * 1e3:.1f} us"
        print(line)
        if not ok:
            sys.exit(1)


if __name__ == "__main__":
    main()
