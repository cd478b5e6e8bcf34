"""Shape-independent CPU matmul: every output row is its own fixed-shape product.

A BLAS GEMM picks blocking (and on many libraries the reduction split) from the matrix shape,
so a row's bits can change with M. Here each row is computed by the same fixed-shape op,
`(w * row).sum(-1)`, whatever M is and wherever the row sits, so its result depends on that
row and the weight only. (An elementwise product and a torch reduction rather than `torch.mv`:
BLAS gemv wakes its thread pool on every call, which costs ~100x more for the small shapes of
the CPU model.)

K is cut into segments of `cpu_segment_len(K)` channels (64, 32 or 16: the longest that cuts K
into an even number of segments; 16 with a shorter last segment when K is not a multiple of
16): each segment is summed on its own, `[N, S, L].sum(-1)` per row, and the segments are
added as the Triton kernel's plan adds them (`plan.half_split`: in ascending order within
two halves, each to a zero fp32 total, then the two totals).
A tensor-parallel rank that holds whole segments of K computes exactly its part of that
sum (`rowwise_partials` with the full K's segment length); the ranks' partials added in
that order (`reduce_partials`) give the single-process bits.
"""

from __future__ import annotations

import torch

from ds41_cache.outputs import empty

from .plan import half_split

CPU_SEG = 16
"""The shortest segment of the CPU path (channels)."""


def cpu_segment_len(k: int) -> int:
    """Channels per K segment of a weight with K = `k` on the CPU path (its shape alone)."""
    for seg in (64, 32):
        if k % (2 * seg) == 0:
            return seg
    return CPU_SEG


def rowwise_partials(x: torch.Tensor, w: torch.Tensor, seg: int | None = None) -> torch.Tensor:
    """`x: [M, K]`, `w: [N, K]` (any float dtypes) -> f32 `[S, M, N]` (a permuted view),
    S = ceil(K / seg), seg = `cpu_segment_len(K)` unless given (a K shard passes its full
    weight's): `out[s, m, n]` = the fp32 sum of `x[m, k] * w[n, k]` over segment s (bf16 x
    bf16 products are exact in fp32)."""
    m, k = x.shape
    n = w.shape[0]
    seg = cpu_segment_len(k) if seg is None else seg
    full = k // seg
    tail = k - full * seg
    segs = full + (1 if tail else 0)
    w32 = w.to(torch.float32)
    w_main = w32[:, : full * seg].reshape(n, full, seg)
    w_tail = w32[:, full * seg :].contiguous() if tail else None
    x32 = x.to(torch.float32)
    out = empty((m, n, segs), torch.float32, x.device)
    for i in range(m):
        if tail:
            out[i, :, :full] = (w_main * x32[i, : full * seg].view(full, seg)).sum(dim=-1)
            assert w_tail is not None
            out[i, :, full] = (w_tail * x32[i, full * seg :]).sum(dim=-1)
        elif full:
            torch.sum(w_main * x32[i].view(full, seg), dim=-1, out=out[i])
    return out.permute(2, 0, 1)


def reduce_partials(
    parts: torch.Tensor, out_dtype: torch.dtype, half: int | None = None
) -> torch.Tensor:
    """f32 `[S, M, N]` -> `[M, N]` in `out_dtype`: `((0 + p[0]) + p[1]) + ... + p[half-1]`,
    the same for `p[half:]`, then the two totals added (one chain when `half >= S`).
    `half` defaults to `half_split(S)`. Elementwise adds in a fixed order, so a row's bits do
    not depend on M."""
    s_all = parts.shape[0]
    h = half_split(s_all) if half is None else half

    def chain(lo: int, hi: int) -> torch.Tensor:
        total = torch.zeros(parts.shape[1:], dtype=torch.float32, device=parts.device)
        for s in range(lo, hi):
            total = total + parts[s]
        return total

    total = chain(0, min(h, s_all))
    if h < s_all:
        total = total + chain(h, s_all)
    return total.to(out_dtype)


def rowwise_matmul(x: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """`x: [M, K]`, `w: [N, K]` (any float dtypes) -> `[M, N]` in `out_dtype` (fp32 segment
    sums added in the plan's order, see the module doc)."""
    return reduce_partials(rowwise_partials(x, w), out_dtype)


def reference_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float64 reference `x @ w^T` (tests)."""
    return x.to(torch.float64) @ w.to(torch.float64).T
