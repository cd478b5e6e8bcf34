"""RMSNorm, the fused residual step and log-softmax: per-row (bitwise) and against float64."""

import pytest
import torch

from ds41_runner.ops.logits import log_softmax
from ds41_runner.ops.norm import UNMARKED, residual_rmsnorm, rmsnorm, row_sum


def _rows(m: int, d: int, seed: int, scale: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, d, generator=g) * scale + 0.3


def _rms_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.double()
    return xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + eps) * w.double()


@pytest.mark.parametrize("d", [64, 80, 5120])
def test_row_sum_and_rmsnorm_rows_independent(d):
    x = _rows(64, d, seed=d).to(torch.bfloat16)
    w = (1 + 0.1 * _rows(1, d, seed=1)[0]).to(torch.bfloat16)
    full = rmsnorm(x, w, 1e-20, backend="torch")
    for m in (1, 7, 64):
        for start in (0, 64 - m):
            assert torch.equal(
                rmsnorm(x[start : start + m], w, 1e-20, backend="torch"), full[start : start + m]
            )
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(rmsnorm(x[perm], w, 1e-20, backend="torch"), full[perm])
    sums = row_sum(x.float())
    assert torch.allclose(sums.double()[:, 0], x.double().sum(-1), rtol=1e-5, atol=1e-3)


def test_rmsnorm_matches_float64():
    x = _rows(16, 64, seed=3)
    w = 1 + 0.1 * _rows(1, 64, seed=4)[0]
    got = rmsnorm(x, w, 1e-6, out_dtype=torch.float32, backend="torch").double()
    assert torch.allclose(got, _rms_ref(x, w, 1e-6), rtol=1e-6, atol=1e-6)
    bf = rmsnorm(x, w, 1e-6, backend="torch")
    assert bf.dtype == torch.bfloat16
    # bf16 output: within half an ulp of bf16 (2^-8 relative) of the float64 value.
    assert torch.allclose(bf.double(), _rms_ref(x, w, 1e-6), rtol=2**-8, atol=0)


def test_log_softmax_rows_and_reference():
    x = _rows(64, 512, seed=5, scale=4.0)
    full = log_softmax(x, backend="torch")
    for m in (1, 7, 64):
        for start in (0, 64 - m):
            assert torch.equal(
                log_softmax(x[start : start + m], backend="torch"), full[start : start + m]
            )
    ref = torch.log_softmax(x.double(), dim=-1)
    assert torch.allclose(full.double(), ref, rtol=0, atol=1e-5)
    assert torch.allclose(
        full.exp().sum(-1).double(), torch.ones(64, dtype=torch.float64), atol=1e-5
    )


def test_bad_shapes():
    with pytest.raises(ValueError, match=r"weight must be \[64\]"):
        rmsnorm(torch.ones(2, 64) * 0.5, torch.ones(32), 1e-6)
    with pytest.raises(ValueError, match=r"logits must be \[M, V\]"):
        log_softmax(torch.ones(3) * 0.5)


@pytest.mark.interpreter
@pytest.mark.parametrize("d", [64, 96])
def test_triton_rmsnorm(device, d):
    x = _rows(9, d, seed=6).to(torch.bfloat16)
    w = (1 + 0.1 * _rows(1, d, seed=7)[0]).to(torch.bfloat16)
    full = rmsnorm(x.to(device), w.to(device), 1e-20, backend="triton", out_dtype=torch.float32)
    assert torch.allclose(full.double().cpu(), _rms_ref(x, w, 1e-20), rtol=1e-5, atol=1e-6)
    assert torch.equal(
        rmsnorm(x[3:4].to(device), w.to(device), 1e-20, backend="triton", out_dtype=torch.float32),
        full[3:4],
    )


@pytest.mark.interpreter
def test_triton_log_softmax(device):
    # 2500 columns: three 1024-wide chunks, the last one partial.
    x = _rows(5, 2500, seed=8, scale=5.0)
    full = log_softmax(x.to(device), backend="triton")
    assert torch.allclose(full.double().cpu(), torch.log_softmax(x.double(), -1), rtol=0, atol=2e-5)
    assert torch.equal(log_softmax(x[2:3].to(device), backend="triton"), full[2:3])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal where not NaN, NaN at the same places (NaN payloads may differ)."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


@pytest.mark.interpreter
@pytest.mark.parametrize("d", [80, 1024])
def test_residual_rmsnorm_is_add_then_rmsnorm(device, d):
    # bf16 sums that round (mixed magnitudes), a row overflowing to inf, a NaN row, a row
    # already marked by an earlier stage: every output against the unfused ops on the device.
    x = (_rows(9, d, seed=21) * torch.logspace(-2, 2, d)).to(torch.bfloat16)
    delta = (_rows(9, d, seed=22) * 7).to(torch.bfloat16)
    x[2, 5], delta[2, 5] = 3.0e38, 3.0e38
    delta[4, d - 1] = float("nan")
    w = (1 + 0.1 * _rows(1, d, seed=23)[0]).to(torch.bfloat16)
    x, delta, w = x.to(device), delta.to(device), w.to(device)
    first = torch.full((9,), UNMARKED, dtype=torch.int64, device=device)
    first[4] = 3  # marked before: kept
    for backend in ("torch", "triton"):
        marks = first.clone()
        total, h = residual_rmsnorm(x, delta, w, 1e-6, nonfinite=marks, stage=7, backend=backend)
        assert _same(total, x + delta)
        assert h is not None
        ok = torch.isfinite(total).all(-1)
        assert torch.equal(h[ok], rmsnorm(x + delta, w, 1e-6, backend=backend)[ok])
        want = [UNMARKED] * 9
        want[2], want[4] = 7, 3
        assert marks.tolist() == want, backend
        # one row alone: the same bits
        t1, h1 = residual_rmsnorm(x[6:7], delta[6:7], w, 1e-6, backend=backend)
        assert _same(t1, total[6:7]) and h1 is not None and torch.equal(h1, h[6:7])
    # without a delta (the embedding's mark) and without a weight (the last block's sum)
    marks = torch.full((9,), UNMARKED, dtype=torch.int64, device=device)
    same, h = residual_rmsnorm(x, None, w, 1e-6, nonfinite=marks, stage=0, backend="triton")
    assert same is x and h is not None and torch.equal(h, rmsnorm(x, w, 1e-6, backend="triton"))
    assert marks.tolist() == [UNMARKED] * 9
    total, none = residual_rmsnorm(x, delta, None, 1e-6, backend="triton")
    assert none is None and _same(total, x + delta)


def test_residual_rmsnorm_bad_inputs():
    x = torch.ones(3, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"delta must be bf16 \[3, 8\] like x"):
        residual_rmsnorm(x, x.float(), None, 1e-6)
    with pytest.raises(ValueError, match=r"nonfinite must be int64 \[3\]"):
        residual_rmsnorm(x, x, None, 1e-6, nonfinite=torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"weight must be \[8\]"):
        residual_rmsnorm(x, x, torch.ones(4), 1e-6)
