# mypy: allow-untyped-defs, allow-incomplete-defs
"""Fused Triton kernels: RoPE + quantize + paged write (insert), paged read + decode (gather).

One program handles `BN` token rows; each row's record goes to (or comes from) its slot's page:
data row at `page*page_stride + off*DATA_BYTES`, scale row at
`page*page_stride + PS*DATA_BYTES + off*SCALE_BYTES` (DESIGN.md, `PagedCache`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...paged import PagedCache
from ..codec.triton_jit import bf16_round_f32
from ..codec.triton_kernels import (
    FMT_IDS,
    load_decode,
    load_pairs,
    pair_channels,
    quantize_store,
    rows_per_program,
    store_bf16_pairs,
    tile_geometry,
)
from ..launch import dependent_launch, enter_dependent


@triton.jit
def _slot_rows(
    storage_ptr,
    slot,
    page_stride,
    PS: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
):
    page = slot // PS
    off = slot % PS
    base = storage_ptr + page * page_stride
    return base + off * DATA_BYTES, base + PS * DATA_BYTES + off * SCALE_BYTES


@triton.jit
def rope_pairs(xe, xo, rows, ok, cos_ptr, sin_ptr, D: tl.constexpr, R: tl.constexpr,
               QB: tl.constexpr, NG: tl.constexpr, NGROUPS: tl.constexpr,
               ROUND_BF16: tl.constexpr):  # fmt: skip
    """RoPE of the last R channels of rows' (even, odd) channel pairs [BN, NG, QB/2] from the
    per-row tables cos / sin f32 [N, R/2]: the same products and sums as rope.rotate_pairs
    (launch without FMA contraction), rounded to bf16 where the reference rounds the rotated
    row back to a bf16 input (a NaN stays NaN: the integer rounding would turn some NaN
    patterns into -0). Other channels and rows outside `ok` pass through."""
    ce, g = pair_channels(QB, NG)
    k = (ce >> 1) - (D - R) // 2  # pair index inside the rope part
    is_rope = (k >= 0) & ok[:, None, None] & (g < NGROUPS)
    tab = rows[:, None, None] * (R // 2) + k
    c = tl.load(cos_ptr + tab, mask=is_rope, other=1.0)
    s = tl.load(sin_ptr + tab, mask=is_rope, other=0.0)
    ye = xe * c - xo * s
    yo = xe * s + xo * c
    if ROUND_BF16:
        ye = tl.where(ye != ye, ye, bf16_round_f32(ye))
        yo = tl.where(yo != yo, yo, bf16_round_f32(yo))
    return tl.where(is_rope, ye, xe), tl.where(is_rope, yo, xo)


@triton.jit
def insert_kernel(
    x_ptr,
    slot_ptr,
    cos_ptr,
    sin_ptr,
    storage_ptr,
    N,
    num_slots,
    page_stride,
    PS: tl.constexpr,
    D: tl.constexpr,
    R: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    FMT: tl.constexpr,
    QB: tl.constexpr,
    NG: tl.constexpr,
    NGROUPS: tl.constexpr,
    BN: tl.constexpr,
    X_BF16: tl.constexpr,
    ROPE: tl.constexpr,
    GDC: tl.constexpr = False,
):
    enter_dependent(GDC)
    rows = tl.program_id(0).to(tl.int64) * BN + tl.arange(0, BN)
    row_ok = rows < N
    slot = tl.load(slot_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
    # unvalidated calls may pass any slot: only [0, num_slots) is ever written
    ok = row_ok & (slot >= 0) & (slot < num_slots)
    data_row, scale_row = _slot_rows(
        storage_ptr, tl.maximum(slot, 0), page_stride, PS, DATA_BYTES, SCALE_BYTES
    )
    xe, xo = load_pairs(x_ptr, rows, ok, D, QB, NG, NGROUPS, X_BF16)
    if ROPE:
        xe, xo = rope_pairs(xe, xo, rows, ok, cos_ptr, sin_ptr, D, R, QB, NG, NGROUPS, X_BF16)
    quantize_store(xe, xo, ok, data_row, scale_row, FMT, QB, NG, NGROUPS)


@triton.jit
def gather_kernel(
    storage_ptr,
    slot_ptr,
    out_ptr,
    N,
    num_slots,
    page_stride,
    PS: tl.constexpr,
    D: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    FMT: tl.constexpr,
    QB: tl.constexpr,
    NG: tl.constexpr,
    NGROUPS: tl.constexpr,
    BN: tl.constexpr,
    GDC: tl.constexpr = False,
):
    enter_dependent(GDC)
    rows = tl.program_id(0).to(tl.int64) * BN + tl.arange(0, BN)
    row_ok = rows < N
    slot = tl.load(slot_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
    valid = row_ok & (slot >= 0) & (slot < num_slots)  # others read as zeros, never loaded
    data_row, scale_row = _slot_rows(
        storage_ptr, tl.maximum(slot, 0), page_stride, PS, DATA_BYTES, SCALE_BYTES
    )
    ve, vo = load_decode(data_row, scale_row, valid, FMT, QB, NG, NGROUPS)
    store_bf16_pairs(out_ptr, rows, row_ok, valid, ve, vo, D, QB, NG, NGROUPS)


def launch_insert(
    cache: PagedCache,
    x: torch.Tensor,
    slots: torch.Tensor,
    cos: torch.Tensor | None,
    sin: torch.Tensor | None,
) -> None:
    """x: [N, D] fp32|bf16 contiguous, slots: [N] int, cos/sin: f32 [N, R/2] or None."""
    n, d = x.shape
    qb, ng, groups = tile_geometry(cache.fmt, d)
    bn = rows_per_program(d)
    x_bf16 = x.dtype == torch.bfloat16
    rope = cos is not None and sin is not None
    rope_dim = 2 * cos.shape[1] if cos is not None else 0
    insert_kernel[(triton.cdiv(n, bn),)](
        x.view(torch.int16) if x_bf16 else x,
        slots,
        cos if rope else x,
        sin if rope else x,
        cache.storage,
        n,
        cache.num_slots,
        cache.page_stride,
        PS=cache.page_size,
        D=d,
        R=rope_dim,
        DATA_BYTES=cache.data_bytes,
        SCALE_BYTES=cache.scale_bytes,
        FMT=FMT_IDS[cache.fmt],
        QB=qb,
        NG=ng,
        NGROUPS=groups,
        BN=bn,
        X_BF16=x_bf16,
        ROPE=rope,
        # x0*c - x1*s must round each product like the torch reference, not fuse into an FMA
        enable_fp_fusion=False,
        **dependent_launch(slots.device),
    )


def launch_gather(cache: PagedCache, slots: torch.Tensor, out: torch.Tensor) -> None:
    """slots: [N] int -> fills out bf16 [N, D]."""
    n, d = out.shape
    qb, ng, groups = tile_geometry(cache.fmt, d)
    bn = rows_per_program(d)
    gather_kernel[(triton.cdiv(n, bn),)](
        cache.storage,
        slots,
        out.view(torch.int16),
        n,
        cache.num_slots,
        cache.page_stride,
        PS=cache.page_size,
        D=d,
        DATA_BYTES=cache.data_bytes,
        SCALE_BYTES=cache.scale_bytes,
        FMT=FMT_IDS[cache.fmt],
        QB=qb,
        NG=ng,
        NGROUPS=groups,
        BN=bn,
        **dependent_launch(slots.device),
    )
