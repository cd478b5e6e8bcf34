"""The SwiGLU gate of the dense MLP: `bf16(f32(silu(f64(a))) * f32(b))`, elementwise."""

from __future__ import annotations

import torch

from ds41_cache.backend import resolve_backend
from ds41_cache.outputs import empty

from .elementwise.naive import swiglu_gate_torch


def swiglu_gate(a: torch.Tensor, b: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """`a = w1 x`, `b = w3 x`: bf16 `[M, F]` each (any row stride) -> bf16 `[M, F]`, the
    input of `w2`.

    silu in float64 rounded to fp32 (`elementwise.naive.swiglu_gate_torch` says why), times
    `b` in fp32, rounded to bf16. One Triton launch on the Triton backend, six torch ops
    otherwise; the same bits either way (tested)."""
    if a.shape != b.shape or a.dim() != 2:
        raise ValueError(
            f"a and b must be [M, F] of one shape, got {list(a.shape)}, {list(b.shape)}"
        )
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
        raise TypeError(f"a and b must be bf16, got {a.dtype}, {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"b is on {b.device}, a on {a.device}")
    if resolve_backend(backend, a.device) == "torch" or a.numel() == 0:
        return swiglu_gate_torch(a, b)
    from .elementwise.triton_kernels import launch_swiglu_gate

    out = empty(tuple(a.shape), torch.bfloat16, a.device)
    # Row strides are the kernel's (the MLP passes the two halves of its fused `w13` output
    # in place); only a non-unit column stride needs a copy.
    a = a if a.stride(1) == 1 else a.contiguous()
    b = b if b.stride(1) == 1 else b.contiguous()
    return launch_swiglu_gate(a, b, out)
