"""sample(): greedy ties, randomness keyed by (seed, position) only, distribution sanity."""

import math

import pytest
import torch

from ds41_runner.ops.sampling import gumbel_noise, sample, uniform_noise


def _lp(t: int, v: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(t, v, generator=g) * 2, dim=-1)


def test_greedy_picks_argmax_and_ties_to_lowest_id():
    lp = _lp(4, 50, seed=0)
    lp[1, 7] = lp[1, 30] = lp[1].max() + 1.0  # a tie at the top
    lp[3, :] = -3.0  # all tied
    seeds = torch.tensor([1, 2, 3, 4], dtype=torch.int64)
    pos = torch.tensor([0, 5, 9, 2], dtype=torch.int32)
    out = sample(lp, seeds, pos, torch.zeros(4))
    assert out.tolist() == [int(lp[0].argmax()), 7, int(lp[2].argmax()), 0]


def test_noise_keyed_by_seed_and_position_only():
    lp = _lp(6, 300, seed=1)
    seeds = torch.tensor([11, 12, 13, 14, 15, 2**40 + 3], dtype=torch.int64)
    pos = torch.tensor([0, 1, 2, 3, 4, 5], dtype=torch.int32)
    temp = torch.full((6,), 1.0)
    full = sample(lp, seeds, pos, temp)
    for i in range(6):
        alone = sample(lp[i : i + 1], seeds[i : i + 1], pos[i : i + 1], temp[i : i + 1])
        assert alone.item() == full[i].item()
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    assert torch.equal(sample(lp[perm], seeds[perm], pos[perm], temp[perm]), full[perm])
    # Noise bits themselves are independent of the batch.
    n_full = gumbel_noise(seeds, pos, 300)
    assert torch.equal(gumbel_noise(seeds[2:3], pos[2:3], 300), n_full[2:3])
    # Different seed or position -> different noise; high seed bits matter.
    assert not torch.equal(n_full[0], gumbel_noise(seeds[:1] + 1, pos[:1], 300)[0])
    assert not torch.equal(n_full[0], gumbel_noise(seeds[:1], pos[:1] + 1, 300)[0])
    hi = torch.tensor([5 + 2**33], dtype=torch.int64)
    assert not torch.equal(gumbel_noise(hi, pos[:1], 300), gumbel_noise(hi - 2**33, pos[:1], 300))


def test_uniforms_in_open_interval_and_roughly_uniform():
    u = uniform_noise(
        torch.arange(64, dtype=torch.int64), torch.arange(64, dtype=torch.int32), 4096
    )
    assert float(u.min()) > 0 and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.01
    hist = torch.histc(u, bins=16, min=0, max=1) / u.numel()
    assert float((hist - 1 / 16).abs().max()) < 0.005


def test_sampled_frequencies_follow_probabilities():
    # One distribution sampled at 4000 positions: empirical frequencies ~ softmax(lp / T).
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1])
    lp = probs.log()[None].expand(4000, 4).contiguous()
    pos = torch.arange(4000, dtype=torch.int32)
    seeds = torch.full((4000,), 99, dtype=torch.int64)
    for temp, target in ((1.0, probs), (0.5, torch.softmax(probs.log() / 0.5, 0))):
        got = sample(lp, seeds, pos, torch.full((4000,), temp))
        freq = torch.bincount(got, minlength=4).double() / 4000
        sigma = (target.double() * (1 - target.double()) / 4000).sqrt()
        assert ((freq - target.double()).abs() <= 4 * sigma + 1e-3).all(), (freq, target)


def test_bad_inputs():
    lp = _lp(2, 10, seed=2)
    s = torch.zeros(2, dtype=torch.int64)
    p = torch.zeros(2, dtype=torch.int32)
    t = torch.zeros(2)
    with pytest.raises(ValueError, match=r"seeds must be \[2\]"):
        sample(lp, s[:1], p, t)
    with pytest.raises(TypeError, match=r"temperature must be torch\.float32"):
        sample(lp, s, p, t.double())
    with pytest.raises(TypeError, match="logprobs must be f32"):
        sample(lp.double(), s, p, t)
    assert math.isfinite(float(gumbel_noise(s, p, 10).abs().max()))
