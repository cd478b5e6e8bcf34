# mypy: allow-untyped-defs, allow-incomplete-defs
"""In-place RoPE in one launch (the torch reference in `naive.py` takes about ten).

bf16 pairs are read as one int32 word each and rounded back with integer ops (the codec's
`bf16_bits_to_f32` / `f32_to_bf16_store_bits`), so the kernel is exact under the CPU
interpreter as on the GPU, and it launches with `enable_fp_fusion=False`: every product is
rounded on its own, as torch rounds it, never folded into an FMA. Its bits are
`rope.apply_rope`'s (tested).
"""

import torch
import triton
import triton.language as tl

from ..codec.triton_jit import bf16_bits_to_f32, f32_to_bf16_store_bits


@triton.jit
def rope_inplace_kernel(
    x_ptr, cos_ptr, sin_ptr, M, stride_t, stride_m, FIRST_WORD,
    HALF_R: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr, INVERSE: tl.constexpr,
):  # fmt: skip
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
    )  # fmt: skip
    return x
