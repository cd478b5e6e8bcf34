# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False, check-untyped-defs=False
"""Fixed-tile Triton matmul `out = x @ w^T` with no split-K.

Tile sizes are constants of the module, never chosen from M (the K-tile count is a
constexpr: one compile per weight width, and loops over a runtime bound fail under the CPU
interpreter), so each output element is the
same sequence of BLOCK_K-wide dot steps whatever the row count or the row's position.
"""

import torch
import triton
import triton.language as tl

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 64
NUM_WARPS = 4
NUM_STAGES = 3


# M is never specialized (Triton would otherwise compile a separate kernel for M == 1 or
# M % 16 == 0): one compiled kernel serves every row count.
@triton.jit(do_not_specialize=["M"])
def matmul_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE_FP32: tl.constexpr,
    K_TILES: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, K_TILES):
        k0 = kt * BLOCK_K
        k_ok = (k0 + rk) < K
        a = tl.load(
            x_ptr + rm[:, None] * stride_xm + (k0 + rk)[None, :] * stride_xk,
            mask=m_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        b = tl.load(
            w_ptr + rn[None, :] * stride_wn + (k0 + rk)[:, None] * stride_wk,
            mask=n_ok[None, :] & k_ok[:, None],
            other=0.0,
        )
        if UPCAST:
            # The interpreter's bf16 dot is unreliable; fp32 of bf16 values is exact.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE_FP32:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    out = acc.to(out_ptr.dtype.element_ty)
    tl.store(
        out_ptr + rm[:, None] * stride_om + rn[None, :] * stride_on,
        out,
        mask=m_ok[:, None] & n_ok[None, :],
    )


def launch_matmul(
    x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, upcast: bool, ieee_fp32: bool
) -> torch.Tensor:
    m, k = x.shape
    n = w.shape[0]
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
    matmul_kernel[grid](
        x,
        w,
        out,
        m,
        n,
        k,
        x.stride(0),
        x.stride(1),
        w.stride(0),
        w.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
        UPCAST=upcast,
        K_TILES=triton.cdiv(k, BLOCK_K),
        IEEE_FP32=ieee_fp32,
        num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )
    return out
