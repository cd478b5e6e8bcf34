"""`rope.rope_inplace` is bitwise `rope.apply_rope`: on the torch path (`ops/rope/naive.py`)
and in its Triton kernel (`ops/rope/triton_kernels.py`, under the interpreter on the CPU)."""

import pytest
import torch

from ds41_cache.rope import RopeConfig, apply_rope, rope_cos_sin, rope_freqs, rope_inplace


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("yarn", [False, True])
@pytest.mark.parametrize("inverse", [False, True])
def test_in_place_rope_is_apply_rope(dtype, yarn, inverse):
    g = torch.Generator().manual_seed(3)
    cfg = RopeConfig(16, 10000.0, yarn_factor=4.0 if yarn else None, yarn_orig=16 if yarn else None)
    freqs = rope_freqs(cfg)
    pos = torch.randint(0, 60000, (7,), generator=g, dtype=torch.int32)
    x = (torch.randn(7, 3, 64, generator=g) * 4).to(dtype)
    ref = apply_rope(x, pos, freqs, inverse=inverse)
    cos, sin = rope_cos_sin(pos, freqs)
    got = x.clone()
    out = rope_inplace(got, cos, sin, inverse=inverse)
    assert out is got
    assert torch.equal(got, ref)
    assert torch.equal(got[..., :48], x[..., :48])  # the non-rope channels are untouched
    assert not torch.equal(got, x)
    # A 2-D input ([T, D]) and a strided view (a head slice) as well.
    assert torch.equal(rope_inplace(x[:, 1].clone(), cos, sin, inverse=inverse), ref[:, 1])
    view = x.clone()
    rope_inplace(view[:, 1:], cos, sin, inverse=inverse)
    assert torch.equal(view[:, 1:], ref[:, 1:]) and torch.equal(view[:, 0], x[:, 0])


def test_bad_tables():
    x = torch.zeros(4, 2, 32)
    cos, sin = rope_cos_sin(torch.arange(4, dtype=torch.int32), torch.ones(8))
    with pytest.raises(ValueError, match=r"cos and sin must be \[4, R/2\]"):
        rope_inplace(x, cos[:3], sin[:3])
    with pytest.raises(ValueError, match="R <= 8"):
        rope_inplace(torch.zeros(4, 8), cos, sin)


@pytest.mark.interpreter
@pytest.mark.parametrize("inverse", [False, True])
def test_triton_rope_is_apply_rope(device, inverse):
    # R/2 = 12 (a masked 16-wide block), 5 heads, D = 80: no power of two hides an index error.
    g = torch.Generator().manual_seed(11)
    cfg = RopeConfig(24, 10000.0, yarn_factor=4.0, yarn_orig=16)
    freqs = rope_freqs(cfg)
    pos = torch.randint(0, 60000, (6,), generator=g, dtype=torch.int32)
    x = torch.randn(6, 5, 80, generator=g) * torch.logspace(-3, 3, 80)
    x = x.to(torch.bfloat16)
    ref = apply_rope(x, pos, freqs, inverse=inverse)
    cos, sin = (c.to(device) for c in rope_cos_sin(pos, freqs))
    got = x.clone().to(device)  # .to("cpu") alone would rotate x itself
    assert rope_inplace(got, cos, sin, inverse=inverse, backend="triton") is got
    assert torch.equal(got.cpu(), ref)
    # 2-D rows and a head-slice view (strides of the parent): the other heads untouched.
    flat = x[:, 2].clone().to(device)
    rope_inplace(flat, cos, sin, inverse=inverse, backend="triton")
    assert torch.equal(flat.cpu(), ref[:, 2])
    view = x.clone().to(device)
    rope_inplace(view[:, 1:4], cos, sin, inverse=inverse, backend="triton")
    assert torch.equal(view[:, 1:4].cpu(), ref[:, 1:4])
    assert torch.equal(view[:, 0].cpu(), x[:, 0]) and torch.equal(view[:, 4].cpu(), x[:, 4])
    # An odd head offset cannot be read as 4-byte words: the torch path, the same bits.
    odd = torch.cat([x.new_zeros(1), x.flatten()]).to(device)
    shifted = odd[1:].view(6, 5, 80)
    rope_inplace(shifted, cos, sin, inverse=inverse, backend="triton")
    assert torch.equal(shifted.cpu(), ref)
    # A NaN stays a NaN in its own pair and touches nothing else.
    bad = x.clone()
    bad[3, 1, 70] = float("nan")
    bad = bad.to(device)
    rope_inplace(bad, cos, sin, inverse=inverse, backend="triton")
    nan = torch.isnan(bad.cpu())
    assert nan[3, 1, 70] and nan.sum() <= 2 and nan[3, 1, 64:].sum() == nan.sum()
    keep = ~nan
    assert torch.equal(bad.cpu()[keep], ref[keep])


@pytest.mark.interpreter
@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64])
def test_triton_cos_sin_tables_are_the_torch_tables(device, pos_dtype):
    """One launch for both tables. On the GPU the same bits as torch's CUDA cos/sin (both
    libdevice); under the interpreter numpy's cos/sin stand in, within 2 ulp of torch's."""
    g = torch.Generator().manual_seed(9)
    flash = RopeConfig(64, 160000.0, yarn_factor=16.0, yarn_orig=65536)
    freqs = torch.cat([rope_freqs(flash), torch.tensor([1.0, 3.3, 2.0**-20])])  # 35: no pow2
    pos = torch.cat([torch.arange(70), torch.randint(0, 1 << 20, (4000,), generator=g)])
    pos, freqs = pos.to(pos_dtype).to(device), freqs.to(device)
    cos, sin = rope_cos_sin(pos, freqs, backend="triton")
    ref_cos, ref_sin = rope_cos_sin(pos, freqs, backend="torch")
    assert cos.shape == sin.shape == (4070, 35) and cos.dtype == sin.dtype == torch.float32
    for got, ref in ((cos, ref_cos), (sin, ref_sin)):
        if device.type == "cuda":
            assert torch.equal(got, ref)
        else:
            ulps = (got.view(torch.int32).long() - ref.view(torch.int32).long()).abs()
            assert int(ulps.max()) <= 2 and float((got - ref).abs().max()) < 1e-6
    empty_cos, _ = rope_cos_sin(pos[:0], freqs, backend="triton")
    assert empty_cos.shape == (0, 35)
