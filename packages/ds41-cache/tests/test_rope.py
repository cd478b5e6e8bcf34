"""RoPE (SPEC section 2) against float64 computations and hand-derived YaRN tables."""

from __future__ import annotations

import math

import pytest
import torch

from ds41_cache.rope import RopeConfig, apply_rope, rope_freqs, yarn_correction_range


def test_plain_freqs() -> None:
    f = rope_freqs(RopeConfig(rope_dim=64, base=10000.0))
    want = torch.tensor([10000.0 ** (-2 * i / 64) for i in range(32)], dtype=torch.float64)
    assert f.dtype == torch.float32 and f.shape == (32,)
    torch.testing.assert_close(f.double(), want, rtol=2e-7, atol=0)  # one fp32 rounding or so


def test_yarn_tiny_preset_table() -> None:
    # tiny preset: R=16, base 160000, factor 4, orig 16.
    # corr(32) = 16 ln(16 / (64 pi)) / (2 ln 160000) = -1.69 -> low = max(-2, 0) = 0
    # corr(1)  = 16 ln(16 / (2 pi)) / (2 ln 160000)  =  0.62 -> high = min(1, 15) = 1
    # ramp_i = clamp(i / 1, 0, 1): pair 0 keeps its frequency, pairs >= 1 are divided by 4.
    cfg = RopeConfig(rope_dim=16, base=160000.0, yarn_factor=4.0, yarn_orig=16)
    assert yarn_correction_range(cfg) == (0, 1)
    base = [160000.0 ** (-2 * i / 16) for i in range(8)]
    want = torch.tensor([base[0]] + [b / 4 for b in base[1:]], dtype=torch.float64)
    torch.testing.assert_close(rope_freqs(cfg).double(), want, rtol=4e-7, atol=0)


def test_yarn_flash_table() -> None:
    # V4.1-Flash compressed layers: R=64, base 160000, factor 16, orig 65536.
    # corr(32) = 64 ln(65536 / (64 pi)) / (2 ln 160000) = 15.45 -> low = 15
    # corr(1)  = 64 ln(65536 / (2 pi)) / (2 ln 160000)  = 24.71 -> high = 25
    cfg = RopeConfig(rope_dim=64, base=160000.0, yarn_factor=16.0, yarn_orig=65536)
    assert yarn_correction_range(cfg) == (15, 25)
    ramp = [min(max((i - 15) / 10, 0.0), 1.0) for i in range(32)]
    want = []
    for i in range(32):
        f = 160000.0 ** (-2 * i / 64)
        want.append(f / 16 * ramp[i] + f * (1 - ramp[i]))
    got = rope_freqs(cfg).double()
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-6, atol=0)
    assert got[:16].tolist() == rope_freqs(RopeConfig(64, 160000.0))[:16].double().tolist()
    torch.testing.assert_close(
        got[25:] * 16, rope_freqs(RopeConfig(64, 160000.0))[25:].double(), rtol=1e-6, atol=0
    )


def reference_rope(
    x: torch.Tensor, pos: torch.Tensor, freqs: torch.Tensor, inverse: bool
) -> torch.Tensor:
    """float64 rotation at the spec's fp32 angle `float32(pos) * f_i`, channel by channel."""
    n, d = x.shape[0], x.shape[-1]
    r = 2 * freqs.numel()
    angle = (pos.float()[:, None] * freqs[None, :]).double()  # the angle itself is fp32 by spec
    sign = -1.0 if inverse else 1.0
    out = x.double().clone()
    for i in range(r // 2):
        c = torch.cos(angle[:, i]).reshape((n,) + (1,) * (x.dim() - 2))
        s = sign * torch.sin(angle[:, i]).reshape((n,) + (1,) * (x.dim() - 2))
        a, b = x[..., d - r + 2 * i].double(), x[..., d - r + 2 * i + 1].double()
        out[..., d - r + 2 * i] = a * c - b * s
        out[..., d - r + 2 * i + 1] = a * s + b * c
    return out


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_apply_rope_matches_float64(dtype: torch.dtype, inverse: bool) -> None:
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(9, 3, 64, generator=g) * 4).to(dtype)
    pos = torch.tensor([0, 1, 2, 7, 100, 1000, 4095, 65535, 300_000])
    freqs = rope_freqs(RopeConfig(16, 160000.0, yarn_factor=4.0, yarn_orig=16))
    y = apply_rope(x, pos, freqs, inverse=inverse)
    assert y.dtype == dtype and y.shape == x.shape
    ref = reference_rope(x, pos, freqs, inverse)
    # non-rope channels are copied bit for bit
    assert torch.equal(y[..., :48], x[..., :48])
    if dtype == torch.float32:
        # fp32 cos/sin (<= 1 ulp each) and two rounded products + one sum: a few ulp of |x|
        tol = 4 * 2.0**-24 * x.abs().amax().item()
        torch.testing.assert_close(y.double(), ref, rtol=0, atol=tol)
    else:
        # the fp32 result is within a few fp32 ulp of ref, then rounded once to bf16: at most
        # one bf16 ulp (2^-8 relative) away, and equal to bf16(ref) almost everywhere
        torch.testing.assert_close(y.double(), ref, rtol=2.0**-8, atol=1e-6)
        assert (y == ref.to(dtype)).float().mean() > 0.99


def test_rope_position_zero_is_identity_and_inverse_undoes() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 32, generator=g)
    freqs = rope_freqs(RopeConfig(32, 10000.0))
    assert torch.equal(apply_rope(x, torch.zeros(4, dtype=torch.int64), freqs), x)
    pos = torch.tensor([3, 50, 999, 12345], dtype=torch.int32)
    y = apply_rope(x, pos, freqs)
    assert not torch.allclose(y, x)
    torch.testing.assert_close(apply_rope(y, pos, freqs, inverse=True), x, rtol=0, atol=1e-5)


def test_rope_errors() -> None:
    x = torch.randn(3, 32)
    pos = torch.arange(3)
    freqs = rope_freqs(RopeConfig(16, 10000.0))
    with pytest.raises(TypeError, match="freqs must be"):
        apply_rope(x, pos, freqs.double())
    with pytest.raises(TypeError, match="positions must be"):
        apply_rope(x, pos.float(), freqs)
    with pytest.raises(ValueError, match="N = 2"):
        apply_rope(x, pos[:2], freqs)
    with pytest.raises(ValueError, match="exceeds"):
        apply_rope(x[:, :8], pos, freqs)
    with pytest.raises(ValueError, match="even"):
        RopeConfig(15, 10000.0)
    with pytest.raises(ValueError, match="together"):
        RopeConfig(16, 10000.0, yarn_factor=4.0)
    assert math.isfinite(float(rope_freqs(RopeConfig(16, 10000.0))[-1]))
