"""linear(): row independence (bitwise) and accuracy against float64."""

import pytest
import torch

from ds41_runner.ops.linear import linear
from ds41_runner.ops.matmul.naive import reference_matmul


def _data(m: int, n: int, k: int, seed: int, dtype: torch.dtype = torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * 3).to(dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype)
    return x, w


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_torch_rows_independent_of_batch(out_dtype):
    x, w = _data(64, 96, 80, seed=1)
    full = linear(x, w, mode="bi", backend="torch", out_dtype=out_dtype)
    for m in (1, 7, 64):
        for start in (0, 64 - m):
            part = linear(x[start : start + m], w, mode="bi", backend="torch", out_dtype=out_dtype)
            assert torch.equal(part, full[start : start + m])
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(2))
    assert torch.equal(
        linear(x[perm], w, mode="bi", backend="torch", out_dtype=out_dtype), full[perm]
    )
    # The same row inside a batch of different rows.
    other, _ = _data(9, 96, 80, seed=3)
    mixed = torch.cat([other[:4], x[5:6], other[4:]])
    assert torch.equal(
        linear(mixed, w, mode="bi", backend="torch", out_dtype=out_dtype)[4], full[5]
    )


def test_torch_matches_float64():
    x, w = _data(16, 48, 64, seed=4)
    ref = reference_matmul(x, w)
    got32 = linear(x, w, mode="bi", backend="torch", out_dtype=torch.float32).double()
    # bf16 x bf16 products are exact in fp32; only fp32 accumulation rounding remains.
    tol = 1e-5 * (x.double().abs() @ w.double().abs().T)
    assert ((got32 - ref).abs() <= tol).all()
    got = linear(x, w, mode="bi", backend="torch")
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, got32.float().to(torch.bfloat16))


def test_fp32_flag_and_fast_mode():
    x, w = _data(8, 32, 64, seed=5)
    a = linear(x, w, fp32=True, out_dtype=torch.float32, backend="torch")
    ref = reference_matmul(x, w)
    assert torch.allclose(a.double(), ref, rtol=1e-5, atol=1e-5)
    fast = linear(x, w, mode="fast", out_dtype=torch.float32)
    assert torch.allclose(fast.double(), ref, rtol=1e-2, atol=1e-2)


def test_bad_inputs():
    x, w = _data(4, 8, 32, seed=6)
    with pytest.raises(ValueError, match="mode"):
        linear(x, w, mode="quick")
    with pytest.raises(ValueError, match=r"w must be \[N, 32\]"):
        linear(x, w[:, :16])
    with pytest.raises(TypeError, match="bf16/fp16/fp32"):
        linear(x.to(torch.int32), w)
    with pytest.raises(ValueError, match="2-D"):
        linear(x[0], w)


@pytest.mark.interpreter
def test_triton_matches_reference_and_is_row_invariant(device):
    # 70 rows cross the 64-row tile; K = 96 is not a multiple of the 64-wide K tile.
    x, w = _data(70, 72, 96, seed=7)
    x, w = x.to(device), w.to(device)
    full = linear(x, w, mode="bi", backend="triton", out_dtype=torch.float32)
    ref = reference_matmul(x.cpu(), w.cpu())
    tol = 1e-5 * (x.double().abs() @ w.double().abs().T).cpu() + 1e-6
    assert ((full.double().cpu() - ref).abs() <= tol).all()
    for m, start in ((1, 0), (1, 69), (7, 30)):
        part = linear(x[start : start + m], w, mode="bi", backend="triton", out_dtype=torch.float32)
        assert torch.equal(part, full[start : start + m])
    strided = x[:, :64]
    got = linear(strided, w[:, :64], mode="bi", backend="triton", out_dtype=torch.float32)
    assert torch.allclose(
        got.double().cpu(), reference_matmul(strided.cpu(), w[:, :64].cpu()), rtol=1e-5, atol=1e-5
    )


@pytest.mark.interpreter
def test_triton_fp32_path(device):
    x, w = _data(5, 40, 64, seed=8, dtype=torch.float32)
    got = linear(x.to(device), w.to(device), fp32=True, out_dtype=torch.float32, backend="triton")
    assert torch.allclose(got.double().cpu(), reference_matmul(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_rows_bitwise_for_any_batch():
    x, w = _data(300, 1024, 512, seed=9)
    x, w = x.cuda(), w.cuda()
    full = linear(x, w, mode="bi")
    for m in (1, 7, 64, 129):
        assert torch.equal(linear(x[:m], w, mode="bi"), full[:m])
        assert torch.equal(linear(x[-m:], w, mode="bi"), full[-m:])
