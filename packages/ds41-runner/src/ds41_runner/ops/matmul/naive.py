"""Shape-independent CPU matmul: every output row is its own fixed-shape product.

A BLAS GEMM picks blocking (and on many libraries the reduction split) from the matrix shape,
so a row's bits can change with M. Here each row is computed by the same fixed-shape op,
`(w * row).sum(-1)`, whatever M is and wherever the row sits, so its result depends on that
row and the weight only. (An elementwise product and a torch reduction rather than `torch.mv`:
BLAS gemv wakes its thread pool on every call, which costs ~100x more for the small shapes of
the CPU model.)

K is cut into segments of `CPU_SEG` channels (the last one shorter when K is not a multiple):
each segment is summed on its own, `[N, S, CPU_SEG].sum(-1)` per row, and the segments are
added in ascending order to a zero fp32 total, the structure of the Triton kernel's plan.
A tensor-parallel rank that holds whole segments of K computes exactly its part of that
sum (`rowwise_partials`); the ranks' partials added in segment order (`reduce_partials`) give
the single-process bits.
"""

from __future__ import annotations

import torch

from ds41_cache.outputs import empty

CPU_SEG = 16
"""Channels of K per segment on the CPU path (a constant: the bits do not depend on N or M)."""


def rowwise_partials(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`x: [M, K]`, `w: [N, K]` (any float dtypes) -> f32 `[S, M, N]`, S = ceil(K / CPU_SEG):
    `out[s, m, n]` = the fp32 sum of `x[m, k] * w[n, k]` over segment s (bf16 x bf16 products
    are exact in fp32)."""
    m, k = x.shape
    n = w.shape[0]
    full = k // CPU_SEG
    tail = k - full * CPU_SEG
    segs = full + (1 if tail else 0)
    w32 = w.to(torch.float32)
    w_main = w32[:, : full * CPU_SEG].reshape(n, full, CPU_SEG)
    w_tail = w32[:, full * CPU_SEG :].contiguous() if tail else None
    out = empty((segs, m, n), torch.float32, x.device)
    for i in range(m):
        xi = x[i].to(torch.float32)
        if full:
            part = (w_main * xi[: full * CPU_SEG].view(full, CPU_SEG)).sum(dim=-1)
            out[:full, i] = part.T
        if w_tail is not None:
            out[full, i] = (w_tail * xi[full * CPU_SEG :]).sum(dim=-1)
    return out


def reduce_partials(parts: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """f32 `[S, M, N]` -> `[M, N]` in `out_dtype`: `((0 + p[0]) + p[1]) + ...` (elementwise
    adds in segment order, so a row's bits do not depend on M)."""
    total = torch.zeros(parts.shape[1:], dtype=torch.float32, device=parts.device)
    for s in range(parts.shape[0]):
        total = total + parts[s]
    return total.to(out_dtype)


def rowwise_matmul(x: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """`x: [M, K]`, `w: [N, K]` (any float dtypes) -> `[M, N]` in `out_dtype` (fp32 segment
    sums added in order, see the module doc)."""
    return reduce_partials(rowwise_partials(x, w), out_dtype)


def reference_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float64 reference `x @ w^T` (tests)."""
    return x.to(torch.float64) @ w.to(torch.float64).T
