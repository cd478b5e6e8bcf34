# mypy: allow-untyped-defs, allow-incomplete-defs
"""In-place RoPE in one launch (the torch reference in `naive.py` takes about ten), and the
cos/sin tables in one launch (`rope.rope_cos_sin`'s torch path takes four).

bf16 pairs are read as one int32 word each and rounded back with integer ops (the codec's
`bf16_bits_to_f32` / `f32_to_bf16_store_bits`), so the kernel is exact under the CPU
interpreter as on the GPU, and it launches with `enable_fp_fusion=False`: every product is
rounded on its own, as torch rounds it, never folded into an FMA. Its bits are
`rope.apply_rope`'s (tested).
"""

import torch
import triton
import triton.language as tl

from ...outputs import empty
from ..codec.triton_jit import bf16_bits_to_f32, f32_to_bf16_store_bits
from ..launch import dependent_launch, enter_dependent


@triton.jit
def rope_inplace_kernel(
    x_ptr, cos_ptr, sin_ptr, M, stride_t, stride_m, FIRST_WORD,
    HALF_R: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr, INVERSE: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    # x as int32 words: word FIRST_WORD + k of a head holds the rotated pair k (the even
    # channel in its low half), so one coalesced 4-byte load brings both channels of a pair.
    # One program per (row, block of heads).
    t = tl.program_id(0).to(tl.int64)
    hm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    k = tl.arange(0, BLOCK_P)
    k_ok = k < HALF_R
    ok = (hm < M)[:, None] & k_ok[None, :]
    c = tl.load(cos_ptr + t * HALF_R + k, mask=k_ok, other=1.0)[None, :]
    s = tl.load(sin_ptr + t * HALF_R + k, mask=k_ok, other=0.0)[None, :]
    words = x_ptr + t * stride_t + hm[:, None].to(tl.int64) * stride_m + FIRST_WORD + k[None, :]
    w = tl.load(words, mask=ok, other=0)
    x0 = bf16_bits_to_f32(w)
    x1 = (w & -65536).to(tl.float32, bitcast=True)  # the odd channel: the high half
    # rope.rotate_pairs' products and sums, each rounded to fp32
    if INVERSE:
        y0 = x0 * c + x1 * s
        y1 = x1 * c - x0 * s
    else:
        y0 = x0 * c - x1 * s
        y1 = x0 * s + x1 * c
    lo = f32_to_bf16_store_bits(y0).to(tl.int32) & 0xFFFF
    hi = f32_to_bf16_store_bits(y1).to(tl.int32) << 16
    tl.store(words, hi | lo, mask=ok)


@triton.jit
def rope_tables_kernel(
    pos_ptr, freqs_ptr, cos_ptr, sin_ptr, N,
    HALF_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    p = tl.load(pos_ptr + rows, mask=rows < N, other=0).to(tl.float32)
    rope_table_rows(p, rows, rows < N, freqs_ptr, cos_ptr, sin_ptr, HALF_R, BLOCK_P)


@triton.jit
def rope_table_rows(p, rows, row_ok, freqs_ptr, cos_ptr, sin_ptr, HALF_R: tl.constexpr,
                    BLOCK_P: tl.constexpr):  # fmt: skip
    # The reference's operations on float32 positions `p` (rounded to nearest from the
    # integers): one fp32 product, then libdevice cos and sin (what torch's CUDA cos/sin
    # call), stored as rows `rows` of the [N, HALF_R] tables (also the runner's
    # entry_slots_kernel).
    k = tl.arange(0, BLOCK_P)
    ok = row_ok[:, None] & (k < HALF_R)[None, :]
    f = tl.load(freqs_ptr + k, mask=k < HALF_R, other=0.0)
    angle = p[:, None] * f[None, :]
    offs = rows[:, None] * HALF_R + k[None, :]
    tl.store(cos_ptr + offs, tl.math.cos(angle), mask=ok)
    tl.store(sin_ptr + offs, tl.math.sin(angle), mask=ok)


def launch_rope_tables(
    positions: torch.Tensor, freqs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`positions: [N]` int32|int64, `freqs: f32 [R/2]` contiguous -> (cos, sin) f32 `[N, R/2]`."""
    n, half_r = positions.shape[0], freqs.shape[0]
    cos = empty((n, half_r), torch.float32, positions.device)
    sin = empty((n, half_r), torch.float32, positions.device)
    if n == 0 or half_r == 0:
        return cos, sin
    block_p = triton.next_power_of_2(half_r)
    block_n = max(1, 1024 // block_p)
    rope_tables_kernel[(triton.cdiv(n, block_n),)](
        positions.contiguous(), freqs, cos, sin, n,
        HALF_R=half_r, BLOCK_N=block_n, BLOCK_P=block_p, num_warps=4,
        **dependent_launch(positions.device),
    )  # fmt: skip
    return cos, sin


def rope_words_ok(x: torch.Tensor, half_r: int) -> bool:
    """Whether `launch_rope_inplace` can address `x: bf16 [T, M, D]` as int32 words: the
    last dim contiguous, the rope part and every row / head starting on a 4-byte boundary."""
    d = x.shape[2]
    return (
        x.stride(2) == 1
        and x.storage_offset() % 2 == 0
        and x.stride(0) % 2 == 0
        and x.stride(1) % 2 == 0
        and (d - 2 * half_r) % 2 == 0
    )


def launch_rope_inplace(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool
) -> torch.Tensor:
    """`x: bf16 [T, M, D]` with `rope_words_ok`, `cos`, `sin`: f32 `[T, R/2]` contiguous."""
    t, m, d = x.shape
    half_r = cos.shape[1]
    block_p = triton.next_power_of_2(half_r)
    # ~512 words per program: several programs per row even at one row (a decode step).
    block_m = max(1, min(triton.next_power_of_2(m), 512 // block_p))
    words = x.view(torch.int32)  # [T, M, D / 2]: strides in words
    rope_inplace_kernel[(t, triton.cdiv(m, block_m))](
        words, cos, sin, m, words.stride(0), words.stride(1), (d - 2 * half_r) // 2,
        HALF_R=half_r, BLOCK_M=block_m, BLOCK_P=block_p, INVERSE=inverse,
        num_warps=4, enable_fp_fusion=False,
        **dependent_launch(cos.device),
    )  # fmt: skip
    return x
