"""Rotary position embedding on the last R channels, interleaved pairs (SPEC section 2).

Pair `i` of the rope part is channels `(D - R + 2i, D - R + 2i + 1)`; it rotates by the fp32
angle `float32(pos) * f_i`. The rotation is written out as real fp32 products and sums
(`y0 = x0*c - x1*s`, `y1 = x0*s + x1*c`) so the fused Triton insert kernel, which receives the
same `cos`/`sin` table from `rope_cos_sin`, reproduces it bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .backend import resolve_backend


@dataclass(frozen=True)
class RopeConfig:
    """RoPE geometry: `rope_dim` channels (even), `base` (theta); YaRN when `yarn_factor` is set."""

    rope_dim: int
    base: float
    yarn_factor: float | None = None
    yarn_orig: int | None = None
    beta_fast: float = 32
    beta_slow: float = 1

    def __post_init__(self) -> None:
        if self.rope_dim <= 0 or self.rope_dim % 2:
            raise ValueError(f"rope_dim must be a positive even number, got {self.rope_dim}")
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")
        if (self.yarn_factor is None) != (self.yarn_orig is None):
            raise ValueError(
                "yarn_factor and yarn_orig must be given together (YaRN) or not at all"
            )
        if self.yarn_factor is not None and self.yarn_factor <= 0:
            raise ValueError(f"yarn_factor must be positive, got {self.yarn_factor}")
        if self.yarn_orig is not None and self.yarn_orig <= 0:
            raise ValueError(f"yarn_orig must be positive, got {self.yarn_orig}")


def yarn_correction_range(cfg: RopeConfig) -> tuple[int, int]:
    """(low, high) pair indices of the YaRN ramp (SPEC section 2)."""
    assert cfg.yarn_orig is not None
    r, base, orig = cfg.rope_dim, cfg.base, cfg.yarn_orig

    def corr(rotations: float) -> float:
        return r * math.log(orig / (2 * math.pi * rotations)) / (2 * math.log(base))

    low = max(math.floor(corr(cfg.beta_fast)), 0)
    high = min(math.ceil(corr(cfg.beta_slow)), r - 1)
    return low, high


def rope_freqs(cfg: RopeConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """Per-pair frequencies f32 [R/2]: `base^(-2i/R)`, YaRN-blended when configured."""
    r = cfg.rope_dim
    freqs = 1.0 / (cfg.base ** (torch.arange(0, r, 2, dtype=torch.float32) / r))
    if cfg.yarn_factor is not None:
        low, high = yarn_correction_range(cfg)
        i = torch.arange(r // 2, dtype=torch.float32)
        ramp = ((i - low) / max(high - low, 1e-3)).clamp(0, 1)
        freqs = freqs / cfg.yarn_factor * ramp + freqs * (1 - ramp)
    return freqs.to(device)


def _check(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor) -> None:
    if freqs.dtype != torch.float32 or freqs.dim() != 1 or freqs.numel() == 0:
        raise TypeError(
            f"freqs must be a non-empty 1-D float32 [R/2] tensor, got {freqs.dtype} "
            f"{list(freqs.shape)}"
        )
    if positions.dtype not in (torch.int32, torch.int64) or positions.dim() != 1:
        raise TypeError(
            f"positions must be 1-D int32/int64 [N], got {positions.dtype} {list(positions.shape)}"
        )
    if x.dim() < 2 or x.shape[0] != positions.shape[0]:
        raise ValueError(
            f"x must be [N, ..., D] with N = {positions.shape[0]} (positions), got {list(x.shape)}"
        )
    if not x.dtype.is_floating_point:
        raise TypeError(f"x must be a floating tensor, got {x.dtype}")
    if 2 * freqs.numel() > x.shape[-1]:
        raise ValueError(
            f"rope dim R = {2 * freqs.numel()} (from freqs) exceeds x's last dim {x.shape[-1]}"
        )
    if positions.device != x.device or freqs.device != x.device:
        raise ValueError(
            f"x, positions and freqs must share a device, got {x.device}, {positions.device}, "
            f"{freqs.device}"
        )


def check_rope_tables(
    tables: object, n: int, half_r: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """A caller's `rope_tables` argument: a `(cos, sin)` tuple, each float32 `[n, half_r]` on
    `device` (the shape `rope_cos_sin` gives for n positions and half_r frequencies); returns
    it. TypeError for anything but a pair, ValueError naming the table otherwise."""
    if not isinstance(tables, tuple) or len(tables) != 2:
        raise TypeError("rope_tables must be a (cos, sin) tuple of two tensors")
    want = [n, half_r]
    for name, t in zip(("cos", "sin"), tables, strict=True):
        if (
            not isinstance(t, torch.Tensor)
            or t.dtype != torch.float32
            or list(t.shape) != want
            or t.device != device
        ):
            got = f"{t.dtype} {list(t.shape)} on {t.device}" if isinstance(t, torch.Tensor) else t
            raise ValueError(f"rope_tables {name} must be float32 {want} on {device}, got {got}")
    return tables[0], tables[1]


def rope_cos_sin(
    positions: torch.Tensor, freqs: torch.Tensor, *, backend: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the fp32 angles `float32(pos) * f_i`: two f32 [N, R/2] tensors.

    positions: int32|int64 `[N]`; freqs: f32 `[R/2]` on the same device. `backend`: "auto"
    (Triton on CUDA tensors), "triton" or "torch". The Triton kernel (`ops/rope/`, one launch)
    computes the torch path's operations with libdevice cos/sin, the functions torch's CUDA
    kernels call: the same bits on the GPU (tested there). Under the CPU interpreter numpy's
    cos/sin stand in and may differ from torch's CPU ones in the last bit.
    """
    if (
        resolve_backend(backend, positions.device) == "triton"
        and positions.dim() == 1
        and positions.dtype in (torch.int32, torch.int64)
        and freqs.dim() == 1
        and freqs.dtype == torch.float32
        and freqs.device == positions.device
    ):
        from .ops.rope import triton_kernels

        return triton_kernels.launch_rope_tables(positions, freqs.contiguous())
    angle = positions.to(torch.float32)[:, None] * freqs[None, :]
    return torch.cos(angle), torch.sin(angle)


def rotate_pairs(
    x0: torch.Tensor, x1: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 complex multiply of (x0 + i x1) by (cos + i sin), or by its conjugate."""
    if inverse:
        return x0 * cos + x1 * sin, x1 * cos - x0 * sin
    return x0 * cos - x1 * sin, x0 * sin + x1 * cos


def rotate_last(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False
) -> torch.Tensor:
    """The last R = 2 * cos.shape[-1] channels of `x: [N, ..., D]` rotated (fp32
    `rotate_pairs` on the `cos`, `sin`: f32 [N, R/2] tables of `rope_cos_sin`), cast back to
    x.dtype: a new `[N, ..., R]` tensor. `apply_rope` and the in-place reference
    (`ops/rope/naive.py`) both rotate through this, so they agree bit for bit."""
    r = 2 * cos.shape[-1]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (r // 2,)
    c, s = cos.reshape(shape), sin.reshape(shape)
    pairs = x[..., x.shape[-1] - r :].to(torch.float32).reshape(*x.shape[:-1], r // 2, 2)
    y0, y1 = rotate_pairs(pairs[..., 0], pairs[..., 1], c, s, inverse)
    return torch.stack((y0, y1), dim=-1).flatten(-2).to(x.dtype)


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    freqs: torch.Tensor,
    *,
    inverse: bool = False,
) -> torch.Tensor:
    """Rotate the last R = 2*len(freqs) channels of x: [N, ..., D] at positions: [N] int.

    freqs: f32 [R/2] from `rope_freqs`. fp32 math, result in x.dtype (a new tensor; the first
    D - R channels are copied unchanged). `inverse=True` applies the conjugate phasor.
    """
    _check(x, positions, freqs)
    r = 2 * freqs.numel()
    cos, sin = rope_cos_sin(positions, freqs, backend="torch")  # the reference's own tables
    rotated = rotate_last(x, cos, sin, inverse)
    return torch.cat((x[..., : x.shape[-1] - r], rotated), dim=-1)


def rope_inplace(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    inverse: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """Rotate the last R = 2 * cos.shape[-1] channels of `x: [N, ..., D]` in place and return
    `x`; `cos`, `sin`: f32 `[N, R/2]`, the tables `rope_cos_sin(positions, freqs)` (a model
    step computes them once for all its layers). Bitwise `apply_rope(x, positions, freqs,
    inverse=inverse)`, without its copy of the whole tensor.

    `backend`: "auto" (Triton on CUDA tensors), "triton" or "torch". The Triton kernel
    (`ops/rope/triton_kernels.py`, one launch) serves bf16 `x` of 2 or 3 dims that it can read
    as 4-byte words (each row and head, and the rope part, starting on a 4-byte boundary, the
    last dim contiguous); everything else takes the torch path (`ops/rope/naive.py`).
    """
    r = 2 * cos.shape[-1]
    d = x.shape[-1]
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[0] != x.shape[0] or r > d:
        raise ValueError(
            f"cos and sin must be [{x.shape[0]}, R/2] with R <= {d}, got {list(cos.shape)} "
            f"and {list(sin.shape)}"
        )
    if cos.dtype != torch.float32 or sin.dtype != torch.float32:
        raise TypeError(f"cos and sin must be float32, got {cos.dtype} and {sin.dtype}")
    if cos.device != x.device or sin.device != x.device:
        raise ValueError(f"cos and sin must be on x's device {x.device}, got {cos.device}")
    from .ops.rope import naive

    if (
        resolve_backend(backend, x.device) != "triton"
        or x.dtype != torch.bfloat16
        or x.dim() not in (2, 3)
        or x.numel() == 0
    ):
        return naive.rope_inplace(x, cos, sin, inverse)
    from .ops.rope import triton_kernels

    x3 = x if x.dim() == 3 else x.unsqueeze(1)
    if not triton_kernels.rope_words_ok(x3, r // 2):
        return naive.rope_inplace(x, cos, sin, inverse)
    triton_kernels.launch_rope_inplace(x3, cos.contiguous(), sin.contiguous(), inverse)
    return x
