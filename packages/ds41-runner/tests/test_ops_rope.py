"""The runner's in-place RoPE (ops/rope.py) is bitwise `ds41_cache.rope.apply_rope`."""

import pytest
import torch

from ds41_cache.rope import RopeConfig, apply_rope, rope_freqs
from ds41_runner.ops.rope import rope_, step_cos_sin


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
    cos, sin = step_cos_sin(pos, freqs)
    got = x.clone()
    out = rope_(got, cos, sin, inverse=inverse)
    assert out is got
    assert torch.equal(got, ref)
    assert torch.equal(got[..., :48], x[..., :48])  # the non-rope channels are untouched
    assert not torch.equal(got, x)
    # A 2-D input ([T, D]) and a strided view (a head slice) as well.
    assert torch.equal(rope_(x[:, 1].clone(), cos, sin, inverse=inverse), ref[:, 1])
    view = x.clone()
    rope_(view[:, 1:], cos, sin, inverse=inverse)
    assert torch.equal(view[:, 1:], ref[:, 1:]) and torch.equal(view[:, 0], x[:, 0])


def test_bad_tables():
    x = torch.zeros(4, 2, 32)
    cos, sin = step_cos_sin(torch.arange(4, dtype=torch.int32), torch.ones(8))
    with pytest.raises(ValueError, match=r"cos and sin must be \[4, R/2\]"):
        rope_(x, cos[:3], sin[:3])
    with pytest.raises(ValueError, match="R <= 8"):
        rope_(torch.zeros(4, 8), cos, sin)
