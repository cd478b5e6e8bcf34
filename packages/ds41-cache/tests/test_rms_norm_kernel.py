"""The row RMSNorm's Triton kernel (`ops/norm/`) gives the torch reference's bits
(`compressor.rms_norm` on the torch backend): f32 and bf16 rows and weights, every
power-of-two width the models use, magnitudes over many decades, strided rows, NaN rows."""

from __future__ import annotations

import pytest
import torch

from ds41_cache.compressor import Compressor, rms_norm
from ds41_cache.ops.norm import naive
from ds41_cache.outputs import poisoned_allocations

EPS = 1e-20


def _rows(seed: int, t: int, d: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # one scale per row over 24 decades, and per channel over 4: the fold sees varied exponents
    x = torch.randn(t, d, generator=g) * torch.logspace(-12, 12, t)[:, None]
    return x * torch.logspace(-2, 2, d)[torch.randperm(d, generator=g)]


@pytest.mark.interpreter
@pytest.mark.parametrize("d", [2, 32, 128, 512])
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("w_dtype", [torch.float32, torch.bfloat16])
def test_triton_rms_norm_is_the_reference(device, d, x_dtype, w_dtype) -> None:
    t = 19  # not a multiple of any rows-per-program block
    x = _rows(d, t, d).to(x_dtype)
    x[3] = 0.0  # eps alone in the root
    g = torch.Generator().manual_seed(d + 1)
    w = (torch.rand(d, generator=g) + 0.5).to(w_dtype)
    # the reference on the same device (CUDA's rsqrt is not the CPU's)
    ref = naive.rms_norm(x.to(device), w.to(device), EPS).cpu()
    with poisoned_allocations():
        got = rms_norm(x.to(device), w.to(device), EPS, backend="triton")
    assert got.dtype == torch.bfloat16 and got.shape == (t, d)
    assert torch.equal(got.cpu().view(torch.int16), ref.view(torch.int16))
    assert torch.equal(rms_norm(x.to(device), w.to(device), EPS, backend="torch").cpu(), ref)
    # a row alone gets the bits it gets among the others
    assert torch.equal(rms_norm(x[7:8].to(device), w.to(device), EPS, backend="triton"), got[7:8])
    # against float64 (the reference's own accuracy bound)
    xd, wd = x.double(), w.double()
    exact = xd / torch.sqrt((xd * xd).mean(1, keepdim=True) + EPS) * wd
    assert torch.allclose(got.cpu().double(), exact, rtol=2**-7, atol=0)


@pytest.mark.interpreter
def test_triton_rms_norm_follows_the_reference_fold_order(device) -> None:
    # Squares are positive, so another summation order moves the mean by an ulp or so, which
    # the bf16 output hides in most elements: 2M elements make it show in some (a pairing of
    # neighbours instead of halves changes 11 of them).
    t, d = 4096, 512
    x = torch.randn(t, d, generator=torch.Generator().manual_seed(12)) * torch.logspace(-3, 3, d)
    w = torch.ones(d)
    ref = naive.rms_norm(x.to(device), w.to(device), EPS).cpu()
    got = rms_norm(x.to(device), w.to(device), EPS, backend="triton").cpu()
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))


@pytest.mark.interpreter
def test_triton_rms_norm_strided_rows_nan_and_fallbacks(device) -> None:
    d = 64
    parent = _rows(5, 9, 3 * d)
    x = parent[:, d : 2 * d]  # row stride 3 D
    x[2, 5] = float("nan")
    w = torch.rand(d, generator=torch.Generator().manual_seed(6)) + 0.5
    ref = naive.rms_norm(x.to(device), w.to(device), EPS).cpu()
    got = rms_norm(x.to(device), w.to(device), EPS, backend="triton").cpu()
    # A NaN spreads over its own row only (its bf16 NaN pattern is not compared: the CPU's
    # cast keeps the sign and payload, the GPU's and the kernel's give 0x7FC0).
    nan = got.isnan()
    assert torch.equal(nan, ref.isnan()) and bool(nan[2].all()) and int(nan.sum()) == d
    assert torch.equal(got[~nan].view(torch.int16), ref[~nan].view(torch.int16))
    # widths that are not a power of two take the reference
    odd = _rows(7, 4, 96)
    got_odd = rms_norm(odd.to(device), torch.ones(96, device=device), EPS, backend="triton")
    ref_odd = naive.rms_norm(odd.to(device), torch.ones(96, device=device), EPS)
    assert torch.equal(got_odd, ref_odd)
    empty = rms_norm(x[:0].to(device), w.to(device), EPS, backend="triton")
    assert empty.shape == (0, d)


@pytest.mark.interpreter
@pytest.mark.parametrize("ratio", [1, 2])
def test_compressor_latents_are_the_same_on_every_backend(device, ratio) -> None:
    d, t = 64, 6
    g = torch.Generator().manual_seed(10 + ratio)
    kv = torch.randn(t, d, generator=g) * 3
    score = torch.randn(t, d, generator=g) if ratio == 2 else None
    w = torch.rand(d, generator=g) + 0.5
    req = torch.tensor([0, 0, -1, 1, 1, 0], dtype=torch.int32)
    pos = torch.tensor([0, 1, 0, 4, 5, 2], dtype=torch.int32)
    outs = []
    for backend in ("torch", "triton"):
        comp = Compressor(ratio, d, 2, device=device)
        args = [a.to(device) if a is not None else None for a in (kv, score, req, pos, w)]
        outs.append([o.cpu() for o in comp(*args, EPS, backend=backend)])
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)
    assert bool(outs[0][1].any())  # something was emitted
