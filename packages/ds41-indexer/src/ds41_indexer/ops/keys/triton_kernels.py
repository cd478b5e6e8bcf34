# mypy: allow-untyped-defs, allow-incomplete-defs
"""The index-key write in one launch: RMSNorm, RoPE, quantize and paged write
(`keys.write_index_keys`), which the separate path runs as `ds41_cache.compressor.rms_norm`
then `ds41_cache.insert.insert` (two launches).

The norm is `ds41_cache.ops.norm.triton_kernels.rms_norm_tile` on the rows as that kernel
loads them (its halving fold, `rsqrt`, `(x * r) * w`) rounded to bf16 as it stores them; the
normed bf16 rows are written out (the function returns them) and taken apart into the codec's
even/odd channel tiles in registers (`tl.split`: exact), then rotated and quantized by the
insert kernel's own steps (`insert_kernel`: the rotation rounded back to bf16, then
`quantize_store` at the row's slot). Both separate kernels launch with
`enable_fp_fusion=False`, and so does this one: the same operations, rounded at the same
points, so the same bytes in the cache and the same normed rows (tested bitwise).
"""

import torch
import triton
import triton.language as tl

from ds41_cache.ops.codec.triton_jit import (
    bf16_bits_to_f32,
    f32_to_bf16_store_bits,
)
from ds41_cache.ops.codec.triton_kernels import (
    FMT_IDS,
    quantize_store,
    rows_per_program,
    tile_geometry,
)
from ds41_cache.ops.insert.triton_kernels import _slot_rows, rope_pairs
from ds41_cache.ops.launch import dependent_launch, enter_dependent
from ds41_cache.ops.norm.triton_kernels import load_f32, rms_norm_tile
from ds41_cache.paged import PagedCache


@triton.jit
def norm_insert_kernel(
    x_ptr, w_ptr, normed_ptr, slot_ptr, cos_ptr, sin_ptr, storage_ptr, N, stride_x, eps,
    num_slots, page_stride,
    PS: tl.constexpr, D: tl.constexpr, LOG2_D: tl.constexpr, R: tl.constexpr,
    DATA_BYTES: tl.constexpr, SCALE_BYTES: tl.constexpr, FMT: tl.constexpr,
    QB: tl.constexpr, NG: tl.constexpr, NGROUPS: tl.constexpr, BN: tl.constexpr,
    X_BF16: tl.constexpr, W_BF16: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    rows = tl.program_id(0).to(tl.int64) * BN + tl.arange(0, BN)
    row_ok = rows < N
    # rms_norm_kernel: the row, the fold, the bf16 rounding of the stored result
    cols = tl.arange(0, D)
    x = load_f32(x_ptr, rows[:, None] * stride_x + cols[None, :], row_ok[:, None], X_BF16)
    w = load_f32(w_ptr, cols, cols < D, W_BF16)
    bits = f32_to_bf16_store_bits(rms_norm_tile(x, w, eps, D, LOG2_D, BN))
    tl.store(normed_ptr + rows[:, None] * D + cols[None, :], bits, mask=row_ok[:, None])
    y = bf16_bits_to_f32(bits)
    # insert_kernel on the bf16 rows: channel g*QB + 2j (even) and + 1 (odd) as [BN, NG, QB/2]
    xe, xo = tl.split(tl.reshape(y, [BN, NG, QB // 2, 2]))
    slot = tl.load(slot_ptr + rows, mask=row_ok, other=-1).to(tl.int64)
    ok = row_ok & (slot >= 0) & (slot < num_slots)
    data_row, scale_row = _slot_rows(
        storage_ptr, tl.maximum(slot, 0), page_stride, PS, DATA_BYTES, SCALE_BYTES
    )
    xe, xo = rope_pairs(xe, xo, rows, ok, cos_ptr, sin_ptr, D, R, QB, NG, NGROUPS, True)
    quantize_store(xe, xo, ok, data_row, scale_row, FMT, QB, NG, NGROUPS)


def fits(cache: PagedCache, d: int) -> bool:
    """Whether `launch_norm_insert` serves width `d` into `cache`: a power of two whose
    quantization groups fill the codec's tile exactly (NG groups of QB channels)."""
    if d < 2 or d & (d - 1):
        return False
    qb, ng, groups = tile_geometry(cache.fmt, d)
    return ng == groups and ng * qb == d


def launch_norm_insert(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    cache: PagedCache,
    slots: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    normed: torch.Tensor,
) -> None:
    """`x: [N, D]` f32|bf16 (unit column stride, `fits`), `weight: [D]` f32|bf16 contiguous,
    `slots: [N]` int contiguous, `cos`, `sin`: f32 `[N, R/2]` contiguous; fills `normed: bf16
    [N, D]` (contiguous) and writes the rows' records into `cache`."""
    n, d = x.shape
    qb, ng, groups = tile_geometry(cache.fmt, d)
    bn = rows_per_program(d)
    xk = x.view(torch.int16) if x.dtype == torch.bfloat16 else x
    wk = weight.view(torch.int16) if weight.dtype == torch.bfloat16 else weight
    norm_insert_kernel[(triton.cdiv(n, bn),)](
        xk, wk, normed.view(torch.int16), slots, cos, sin, cache.storage, n, x.stride(0), eps,
        cache.num_slots, cache.page_stride,
        PS=cache.page_size, D=d, LOG2_D=d.bit_length() - 1, R=2 * cos.shape[1],
        DATA_BYTES=cache.data_bytes, SCALE_BYTES=cache.scale_bytes, FMT=FMT_IDS[cache.fmt],
        QB=qb, NG=ng, NGROUPS=groups, BN=bn,
        X_BF16=x.dtype == torch.bfloat16, W_BF16=weight.dtype == torch.bfloat16,
        enable_fp_fusion=False,
        **dependent_launch(slots.device),
    )  # fmt: skip
