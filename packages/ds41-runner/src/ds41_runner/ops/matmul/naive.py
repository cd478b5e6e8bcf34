"""Shape-independent CPU matmul: every output row is its own fixed-shape product.

A BLAS GEMM picks blocking (and on many libraries the reduction split) from the matrix shape,
so a row's bits can change with M. Here each row is computed by the same fixed-shape op,
`(w * row).sum(-1)` over `[N, K]`, whatever M is and wherever the row sits, so its result
depends on that row and the weight only. (An elementwise product and a torch reduction rather
than `torch.mv`: BLAS gemv wakes its thread pool on every call, which costs ~100x more for the
small shapes of the CPU model.)
"""

from __future__ import annotations

import torch

from ds41_cache.outputs import empty


def rowwise_matmul(x: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """`x: [M, K]`, `w: [N, K]` (any float dtypes) -> `[M, N]` in `out_dtype`.

    Products and sums in fp32 (bf16 x bf16 products are exact in fp32).
    """
    m, n = x.shape[0], w.shape[0]
    w32 = w.to(torch.float32).contiguous()
    out = empty((m, n), out_dtype, x.device)
    for i in range(m):
        out[i] = (w32 * x[i].to(torch.float32)).sum(dim=-1).to(out_dtype)
    return out


def reference_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float64 reference `x @ w^T` (tests)."""
    return x.to(torch.float64) @ w.to(torch.float64).T
