"""Torch paths of the elementwise ops (the reference the Triton kernels reproduce bitwise)."""

from __future__ import annotations

import torch

from ds41_cache.rope import rotate_pairs


def rope_torch_(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool
) -> torch.Tensor:
    """Rotate the last R = 2 * cos.shape[-1] channels of `x: [T, ..., D]` in place (fp32
    `rotate_pairs`, cast back to x.dtype) and return `x`; `cos`, `sin`: f32 `[T, R/2]`."""
    r = 2 * cos.shape[-1]
    d = x.shape[-1]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (r // 2,)
    c, s = cos.reshape(shape), sin.reshape(shape)
    pairs = x[..., d - r :].to(torch.float32).reshape(*x.shape[:-1], r // 2, 2)
    y0, y1 = rotate_pairs(pairs[..., 0], pairs[..., 1], c, s, inverse)
    x[..., d - r :] = torch.stack((y0, y1), dim=-1).flatten(-2).to(x.dtype)
    return x


def swiglu_gate_torch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`bf16(f32(silu(f64(a))) * f32(b))`: `a`, `b` `[M, F]` -> bf16 `[M, F]`.

    silu runs in float64 and rounds to fp32: CPU torch evaluates transcendentals with a
    vectorized body and a scalar tail that can differ in the last fp32 bit, and which elements
    land in the tail depends on the tensor size (so on the batch); in float64 the two agree
    after rounding to fp32 (barring a 2^-29-rare double-rounding straddle).
    """
    gate = torch.nn.functional.silu(a.to(torch.float64)).to(torch.float32)
    return (gate * b.to(torch.float32)).to(torch.bfloat16)
