"""Index queries and head weights (SPEC section 6), from already-projected tensors.

The runner owns the batch-invariant matmuls (`wq_b_idx(qr)`, `weights_proj(x)`); these helpers
take their outputs and do the rest row by row with elementwise work only.
"""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.codec import quantize_dequantize, require_encodable, require_finite
from ds41_cache.rope import check_rope_tables, rope_cos_sin, rope_inplace

from ._checks import check_positive_int, check_tensor

QUERY_FORMAT = "mxfp4"
"""Index queries are MXFP4 quantize-dequantized after RoPE."""


def prepare_index_queries(
    q_proj: torch.Tensor,
    positions: torch.Tensor,
    freqs: torch.Tensor,
    n_heads: int,
    *,
    rope_tables: tuple[torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> torch.Tensor:
    """q_proj: [T, Hi*Di] bf16|f32 (= wq_b_idx(qr)); positions: int [T]; freqs: f32 [R/2].

    Returns bf16 [T, Hi, Di]: RoPE at `positions` on the last R channels of each head (stored
    as bf16), then MXFP4 quantize-dequantize per 32-channel block. `validate=False` skips the
    codec's finiteness check (a host sync), so the call can be captured in a CUDA graph.

    The RoPE rotates a bf16 copy of `q_proj` (`q_proj` itself is never written), bitwise
    `apply_rope(q, positions, freqs)`. On the Triton backend the cast, RoPE and MXFP4 round
    trip are one launch (`ops/queries`) with the bits of the separate steps
    (`_index_queries_separate`: a copy, `ds41_cache.rope.rope_inplace`, `encode`, `decode`:
    four launches). `rope_tables`: `rope_cos_sin(positions, freqs)` when the caller already
    holds them (a model step computes them once for all its layers); they must be exactly
    those tables.
    """
    cos, sin, head_dim = _checked_tables(q_proj, positions, freqs, n_heads, rope_tables)
    if _one_launch(q_proj, cos, head_dim, backend):
        return _index_queries_fused(q_proj, cos, sin, n_heads, validate, None, 1.0)[0]
    return _index_queries_separate(q_proj, cos, sin, n_heads, backend, validate)


def _checked_tables(
    q_proj: torch.Tensor,
    positions: torch.Tensor,
    freqs: torch.Tensor,
    n_heads: int,
    rope_tables: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """`prepare_index_queries`'s argument checks; (cos, sin, head dim)."""
    check_tensor(q_proj, "q_proj", dtypes=(torch.bfloat16, torch.float32), ndim=2)
    check_positive_int(n_heads, "n_heads")
    t, width = q_proj.shape
    if width % n_heads:
        raise ValueError(f"q_proj width {width} must be a multiple of n_heads = {n_heads}")
    head_dim = width // n_heads
    if head_dim % 32:
        raise ValueError(f"index head dim must be a multiple of 32, got {head_dim}")
    check_tensor(positions, "positions", dtypes=(torch.int32, torch.int64), ndim=1)
    if positions.shape[0] != t:
        raise ValueError(f"positions must have shape {[t]}, got {list(positions.shape)}")
    if rope_tables is None:
        cos, sin = rope_cos_sin(positions, freqs)
    else:
        cos, sin = check_rope_tables(rope_tables, t, freqs.numel(), q_proj.device)
    return cos, sin, head_dim


def _one_launch(q_proj: torch.Tensor, cos: torch.Tensor, head_dim: int, backend: str) -> bool:
    """Whether the index queries take the one-launch kernel (`ops/queries`)."""
    return (
        resolve_backend(backend, q_proj.device) == "triton"
        and q_proj.stride(1) == 1
        and (head_dim - 2 * cos.shape[1]) % 2 == 0
        and 2 * cos.shape[1] <= head_dim
    )


def _index_queries_fused(
    q_proj: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    n_heads: int,
    validate: bool,
    w_proj: torch.Tensor | None,
    w_scale: float,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One launch (`ops/queries`): the bits of the cast, `rope_inplace`, `encode` and `decode`
    of `_index_queries_separate` (and of `head_weights` with `w_proj`); with `validate` the
    rotated queries come back for the same checks."""
    from .ops.queries.triton_kernels import launch_index_queries

    out, rot, w = launch_index_queries(
        q_proj, cos.contiguous(), sin.contiguous(), n_heads, validate, w_proj, w_scale
    )
    if rot is not None:
        rows = rot.view(-1, rot.shape[-1])
        require_finite(rows)
        require_encodable(QUERY_FORMAT, rows)
    return out, w


def _index_queries_separate(
    q_proj: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    n_heads: int,
    backend: str,
    validate: bool,
) -> torch.Tensor:
    """`prepare_index_queries` as separate steps (the torch path, and the reference of the
    fused Triton kernel): a bf16 copy, `rope_inplace`, MXFP4 quantize-dequantize."""
    t, width = q_proj.shape
    q = q_proj.to(torch.bfloat16, copy=True).view(t, n_heads, width // n_heads)
    rope_inplace(q, cos, sin, backend=backend)
    return quantize_dequantize(QUERY_FORMAT, q, backend=backend, check_finite=validate)


index_queries = prepare_index_queries
"""Alias under the name DESIGN.md lists."""


def head_weights(w_proj: torch.Tensor, head_dim: int) -> torch.Tensor:
    """w_proj: [T, Hi] (= weights_proj(x)) -> f32 [T, Hi] scaled by Di^-0.5 * Hi^-0.5."""
    check_tensor(w_proj, "w_proj", dtypes=(torch.bfloat16, torch.float32), ndim=2)
    check_positive_int(head_dim, "head_dim")
    out: torch.Tensor = w_proj.to(torch.float32) * _weight_scale(w_proj, head_dim)
    return out


def _weight_scale(w_proj: torch.Tensor, head_dim: int) -> float:
    # One constant (rounded once): 2**-6 exactly for V4.1-Flash (Di=128, Hi=32).
    scale: float = float(head_dim * w_proj.shape[1]) ** -0.5
    return scale


def index_queries_and_weights(
    q_proj: torch.Tensor,
    w_proj: torch.Tensor,
    positions: torch.Tensor,
    freqs: torch.Tensor,
    n_heads: int,
    *,
    rope_tables: tuple[torch.Tensor, torch.Tensor] | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(prepare_index_queries(q_proj, positions, freqs, n_heads, ...), head_weights(w_proj,
    Di))` with `Di = q_proj.shape[1] // n_heads`: the same tensors, in one launch on the
    Triton backend (the weights' product rides on the queries' kernel) when `w_proj` is a
    contiguous `[T, Hi]`."""
    cos, sin, head_dim = _checked_tables(q_proj, positions, freqs, n_heads, rope_tables)
    check_tensor(w_proj, "w_proj", dtypes=(torch.bfloat16, torch.float32), ndim=2)
    if (
        _one_launch(q_proj, cos, head_dim, backend)
        and w_proj.shape[0] == q_proj.shape[0]
        and w_proj.is_contiguous()
        and w_proj.device == q_proj.device
    ):
        scale = _weight_scale(w_proj, head_dim)
        qi, w = _index_queries_fused(q_proj, cos, sin, n_heads, validate, w_proj, scale)
        assert w is not None
        return qi, w
    qi = _index_queries_separate(q_proj, cos, sin, n_heads, backend, validate)
    return qi, head_weights(w_proj, head_dim)
