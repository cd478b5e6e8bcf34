# mypy: allow-untyped-defs, allow-incomplete-defs
"""The row RMSNorm in one launch (the torch reference takes ~2 log2(D) + 6 kernels).

The same operations as `naive.rms_norm`, in its order: `x * x`, the halving fold (at each
level element j adds element j + half, as the reference's `sq[:, :half] + sq[:, half:]`),
the mean as a product by 1/D (exactly the reference's division: D is a power of two), `+ eps`,
`rsqrt` (libdevice's, the instruction torch's CUDA `rsqrt` uses), then `(x * r) * w` and the
bf16 rounding torch does (integer RNE, NaN -> 0x7FC0). Launched with `enable_fp_fusion=False`
so no product folds into an add. One program per block of rows; a row's bits never depend on
the other rows.
"""

import torch
import triton
import triton.language as tl

from ..codec.triton_jit import bf16_bits_to_f32, f32_to_bf16_store_bits
from ..launch import dependent_launch, enter_dependent


@triton.jit
def load_f32(ptr, offs, mask, IS_BF16: tl.constexpr):
    if IS_BF16:  # the bf16 bits widened exactly (also under the interpreter)
        v = bf16_bits_to_f32(tl.load(ptr + offs, mask=mask, other=0))
    else:
        v = tl.load(ptr + offs, mask=mask, other=0.0)
    return v


@triton.jit
def rms_norm_tile(x, w, eps, D: tl.constexpr, LOG2_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """fp32 `x: [BLOCK_M, D]`, `w: [D]` -> fp32 `(x * rsqrt(ms + eps)) * w` per row (the caller
    rounds to bf16); the reference's halving fold. Callers launch with enable_fp_fusion=False."""
    s = x * x
    for level in tl.static_range(LOG2_D):
        # [M, 2, half]: [:, 0] holds columns j < half, [:, 1] columns j + half
        lo, hi = tl.split(tl.permute(tl.reshape(s, [BLOCK_M, 2, D >> (level + 1)]), [0, 2, 1]))
        s = lo + hi
    ms = tl.reshape(s, [BLOCK_M, 1]) * (1.0 / D)
    r = tl.math.rsqrt(ms + eps)
    return (x * r) * w[None, :]


@triton.jit
def rms_norm_kernel(
    x_ptr, w_ptr, out_ptr, T, stride_x, eps,
    D: tl.constexpr, LOG2_D: tl.constexpr, BLOCK_M: tl.constexpr,
    X_BF16: tl.constexpr, W_BF16: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, D)
    ok = (rows < T)[:, None]
    x = load_f32(x_ptr, rows[:, None] * stride_x + cols[None, :], ok, X_BF16)
    w = load_f32(w_ptr, cols, cols < D, W_BF16)
    y = rms_norm_tile(x, w, eps, D, LOG2_D, BLOCK_M)
    out = out_ptr + rows[:, None] * D + cols[None, :]
    tl.store(out, f32_to_bf16_store_bits(y), mask=ok)


def launch_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    out: torch.Tensor,
    block_m: int | None = None,
) -> torch.Tensor:
    """`x: [T, D]` f32|bf16 (unit column stride), `weight: [D]` f32|bf16 contiguous, D a power
    of two >= 2; `out: bf16 [T, D]` contiguous. `block_m`: rows per program (a power of two;
    any value gives the same bits, rows never meet)."""
    t, d = x.shape
    if block_m is None:
        block_m = max(1, min(8, 4096 // d))  # rows per program: a few KB of one row block
    # bf16 operands go in as their int16 bits (widened exactly in the kernel)
    xk = x.view(torch.int16) if x.dtype == torch.bfloat16 else x
    wk = weight.view(torch.int16) if weight.dtype == torch.bfloat16 else weight
    rms_norm_kernel[(triton.cdiv(t, block_m),)](
        xk, wk, out.view(torch.int16), t, x.stride(0), eps,
        D=d, LOG2_D=d.bit_length() - 1, BLOCK_M=block_m,
        X_BF16=x.dtype == torch.bfloat16, W_BF16=weight.dtype == torch.bfloat16,
        num_warps=4, enable_fp_fusion=False,
        **dependent_launch(x.device),
    )  # fmt: skip
    return out
