"""Torch path of the SwiGLU gate (the reference the Triton kernel reproduces bitwise)."""

from __future__ import annotations

import torch


def swiglu_gate_torch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`bf16(f32(silu(f64(a))) * f32(b))`: `a`, `b` `[M, F]` -> bf16 `[M, F]`.

    silu runs in float64 and rounds to fp32: CPU torch evaluates transcendentals with a
    vectorized body and a scalar tail that can differ in the last fp32 bit, and which elements
    land in the tail depends on the tensor size (so on the batch); in float64 the two agree
    after rounding to fp32 (barring a 2^-29-rare double-rounding straddle).
    """
    gate = torch.nn.functional.silu(a.to(torch.float64)).to(torch.float32)
    return (gate * b.to(torch.float32)).to(torch.bfloat16)
