# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False, check-untyped-defs=False
"""Batch-invariant Triton matmul `out[:, g*N:(g+1)*N] = x[:, g] @ w[g]^T` (groups g).

Tiles and the K segmentation come from `plan.MatmulPlan` (the weight's shape), never from M;
segment and tile counts are constexprs (one compile per weight shape; loops over a runtime
bound fail under the CPU interpreter). `SPLIT=False`: one program runs all segments of its
tile, adding each segment's chain to its total as the segment ends; `SPLIT=True`: program z
runs segment z and stores its fp32 chain, and `reduce_segments_kernel` adds the chains in
the plan's order (ascending within two halves, then the two totals: `plan.half_split`). Same
operations in the same order, so the same bits.
"""

import torch
import triton
import triton.language as tl

from ds41_cache.ops.launch import dependent_launch, enter_dependent
from ds41_cache.outputs import empty

from .plan import BLOCK_K, DECODE_TILE, LaunchTile, MatmulPlan

REDUCE_BLOCK = 1024


# M is never specialized (Triton would otherwise compile a separate kernel for M == 1 or
# M % 16 == 0): one compiled kernel serves every row count.
@triton.jit(do_not_specialize=["M"])
def matmul_kernel(
    x_ptr, w_ptr, out_ptr, ws_ptr, M, N, K, N_TILES, NCOLS,
    stride_xm, stride_xg, stride_xk, stride_wg, stride_wn, stride_wk, stride_om, stride_on,
    stride_ws,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SEG_TILES: tl.constexpr, N_ITER: tl.constexpr, SPLIT: tl.constexpr, HALF_ITER: tl.constexpr,
    UPCAST: tl.constexpr, IEEE_FP32: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    g = pid_n // N_TILES
    # int64 rows: M * stride overflows int32 for long prefills against a wide weight.
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid_n % N_TILES) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    xg = x_ptr + g * stride_xg
    wg = w_ptr + g * stride_wg
    cols = g * N + rn
    mask = m_ok[:, None] & n_ok[None, :]
    # SPLIT: this program runs segment program_id(2) (N_ITER = SEG_TILES); else the grid's
    # third dimension is 1 and the program runs every segment from tile 0.
    first = tl.program_id(2) * SEG_TILES
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # HALF_ITER > 0 (one program, two halves): the first half's total is set aside at tile
    # HALF_ITER and the second half restarts from zero; the two are added at the end.
    first_half = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # One flat loop (a loop per segment would restart the software pipeline every segment);
    # the accumulator is folded into the total and restarted from zero at segment ends, the
    # pattern Triton's persistent matmuls use, which it keeps pipelined.
    for i in range(0, N_ITER):
        k0 = (first + i) * BLOCK_K
        k_ok = (k0 + rk) < K
        a = tl.load(
            xg + rm[:, None] * stride_xm + (k0 + rk)[None, :] * stride_xk,
            mask=m_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        b = tl.load(
            wg + rn[None, :] * stride_wn + (k0 + rk)[:, None] * stride_wk,
            mask=n_ok[None, :] & k_ok[:, None],
            other=0.0,
        )
        if UPCAST:
            # Interpreter only. Its bf16 dot is unreliable (fp32 of bf16 values is exact), and
            # its fp32 dot is numpy's BLAS, which on some CPUs rounds a row differently
            # depending on where it sits in the tile; an explicit product and sum over K
            # treats every row alike, as the GPU's dot does.
            prod = a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :]
            acc += tl.sum(prod, axis=1)
        elif IEEE_FP32:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        if i % SEG_TILES == SEG_TILES - 1:
            total += acc
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            if i == HALF_ITER - 1:  # never true when HALF_ITER == 0
                first_half = total
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if HALF_ITER > 0:
        total = first_half + total
    if SPLIT:
        # The workspace is [segments, M, NCOLS] fp32, contiguous.
        tl.store(
            ws_ptr + tl.program_id(2) * stride_ws + rm[:, None] * NCOLS + cols[None, :],
            total,
            mask=mask,
        )
    else:
        tl.store(
            out_ptr + rm[:, None] * stride_om + cols[None, :] * stride_on,
            total.to(out_ptr.dtype.element_ty),
            mask=mask,
        )


@triton.jit(do_not_specialize=["M"])
def reduce_segments_kernel(
    ws_ptr, out_ptr, M, NCOLS, stride_ws, stride_om, stride_on,
    N_SEGS: tl.constexpr, HALF: tl.constexpr, BLOCK: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    """`out[m, c] = ((0 + ws[0, m, c]) + ws[1, m, c]) + ... + ws[HALF - 1, m, c]`, plus the
    same chain over segments HALF..N_SEGS-1 when HALF < N_SEGS."""
    enter_dependent(GDC)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < M * NCOLS
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for seg in range(0, HALF):
        total += tl.load(ws_ptr + seg * stride_ws + offs, mask=ok, other=0.0)
    if HALF < N_SEGS:
        second = tl.zeros((BLOCK,), dtype=tl.float32)
        for seg in range(HALF, N_SEGS):
            second += tl.load(ws_ptr + seg * stride_ws + offs, mask=ok, other=0.0)
        total = total + second
    m = offs // NCOLS
    c = offs % NCOLS
    tl.store(out_ptr + m * stride_om + c * stride_on, total.to(out_ptr.dtype.element_ty), mask=ok)


def launch_matmul(
    x: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    plan: MatmulPlan,
    *,
    upcast: bool,
    ieee_fp32: bool,
    split: bool | None = None,
    tile: LaunchTile | None = None,
) -> torch.Tensor:
    """`x: [M, G, K]` (any strides), `w: [G, N, K]`, `out: [M, G * N]` (written in place).

    `split=None` lets `plan.split(M)` choose, `tile=None` lets `plan.tile` choose; the bits
    are the same either way.
    """
    m = x.shape[0]
    g, n, k = w.shape
    do_split = plan.split(m) if split is None else (split and plan.n_segs > 1)
    t = plan.tile(m, do_split) if tile is None else tile
    n_tiles = -(-n // t.block_n)
    ncols = g * n
    ws = empty((plan.n_segs, m, ncols), torch.float32, x.device) if do_split else out
    grid = (triton.cdiv(m, t.block_m), g * n_tiles, plan.n_segs if do_split else 1)
    matmul_kernel[grid](
        x, w, out, ws, m, n, k, n_tiles, ncols,
        x.stride(0), x.stride(1), x.stride(2), w.stride(0), w.stride(1), w.stride(2),
        out.stride(0), out.stride(1), m * ncols,
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=BLOCK_K,
        SEG_TILES=plan.seg_tiles, N_ITER=plan.seg_tiles * (1 if do_split else plan.n_segs),
        SPLIT=do_split,
        HALF_ITER=0 if do_split or plan.half >= plan.n_segs else plan.half * plan.seg_tiles,
        UPCAST=upcast, IEEE_FP32=ieee_fp32, num_warps=t.num_warps, num_stages=t.num_stages,
        **dependent_launch(x.device),
    )  # fmt: skip
    if do_split:
        reduce_segments_kernel[(triton.cdiv(m * ncols, REDUCE_BLOCK),)](
            ws, out, m, ncols, m * ncols, out.stride(0), out.stride(1),
            N_SEGS=plan.n_segs, HALF=plan.half, BLOCK=REDUCE_BLOCK, num_warps=4,
            **dependent_launch(out.device),
        )  # fmt: skip
    return out


def launch_partials(
    x: torch.Tensor,
    w: torch.Tensor,
    plan: MatmulPlan,
    *,
    upcast: bool,
    ieee_fp32: bool,
) -> torch.Tensor:
    """Per-segment fp32 chains of a K shard: `x: [M, G, Ks]`, `w: [G, N, Ks]` -> f32
    `[Ks / seg, M, G * N]` (seg = `plan.seg_tiles * BLOCK_K`).

    `plan` is the FULL weight's plan; the shard starts on one of its segment boundaries, so
    shard segment j is the full weight's segment (first + j) and its chain is the one the
    single-process launch computes (the split launch's workspace rows). A tensor-parallel
    row-parallel product gathers these and adds them with `launch_reduce`.
    """
    m = x.shape[0]
    g, n, k = w.shape
    seg = plan.seg_tiles * BLOCK_K
    n_segs = -(-k // seg)
    t = DECODE_TILE
    n_tiles = -(-n // t.block_n)
    ncols = g * n
    ws = empty((n_segs, m, ncols), torch.float32, x.device)
    if m == 0 or n_segs == 0 or ncols == 0:
        return ws
    grid = (triton.cdiv(m, t.block_m), g * n_tiles, n_segs)
    matmul_kernel[grid](
        x, w, ws, ws, m, n, k, n_tiles, ncols,
        x.stride(0), x.stride(1), x.stride(2), w.stride(0), w.stride(1), w.stride(2),
        ws.stride(1), ws.stride(2), m * ncols,
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=BLOCK_K,
        SEG_TILES=plan.seg_tiles, N_ITER=plan.seg_tiles, SPLIT=True, HALF_ITER=0,
        UPCAST=upcast, IEEE_FP32=ieee_fp32, num_warps=t.num_warps, num_stages=t.num_stages,
        **dependent_launch(x.device),
    )  # fmt: skip
    return ws


def launch_reduce(ws: torch.Tensor, out: torch.Tensor, half: int) -> torch.Tensor:
    """`ws: f32 [S, M, C]` (contiguous) -> `out: [M, C]`, the segments added as the split
    launch's reduction adds them: in order within `[0, half)` and `[half, S)`, then the two
    totals (`half >= S`: one chain)."""
    s, m, ncols = ws.shape
    if m * ncols == 0:
        return out
    if s == 0:
        return out.zero_()
    reduce_segments_kernel[(triton.cdiv(m * ncols, REDUCE_BLOCK),)](
        ws, out, m, ncols, m * ncols, out.stride(0), out.stride(1),
        N_SEGS=s, HALF=min(half, s), BLOCK=REDUCE_BLOCK, num_warps=4,
        **dependent_launch(out.device),
    )  # fmt: skip
    return out
