"""The SwiGLU gate's kernel is bitwise its torch path. (The in-place RoPE the layers call is
`ds41_cache.rope.rope_inplace`, tested in ds41-cache's test_rope_inplace.py.)"""

import pytest
import torch

from ds41_runner.ops.elementwise.naive import swiglu_gate_torch
from ds41_runner.ops.swiglu import swiglu_gate


@pytest.mark.interpreter
def test_triton_swiglu_gate_is_torch_path(device):
    g = torch.Generator().manual_seed(12)
    # a spans silu's regions: exp(-a) overflowing (a << 0), the linear tail, the knee.
    a = (torch.randn(7, 300, generator=g) * torch.logspace(-2, 2.5, 300)).to(torch.bfloat16)
    b = (torch.randn(7, 300, generator=g) * 3).to(torch.bfloat16)
    a[0, :4] = torch.tensor([-1000.0, 1000.0, 0.0, -0.0], dtype=torch.bfloat16)
    ref = swiglu_gate_torch(a, b)
    got = swiglu_gate(a.to(device), b.to(device), backend="triton")
    assert got.dtype == torch.bfloat16 and got.shape == (7, 300)
    assert torch.equal(got.cpu().view(torch.int16), ref.view(torch.int16))
    # a row's bits do not depend on the rows beside it
    assert torch.equal(
        swiglu_gate(a[2:3].to(device), b[2:3].to(device), backend="triton"), got[2:3]
    )
    exact = torch.nn.functional.silu(a.double()) * b.double()
    # (values below the fp32 range, silu(-122) ~ 1e-51, round to 0)
    assert torch.allclose(got.cpu().double(), exact, rtol=2**-8, atol=1e-37)


def test_swiglu_gate_bad_inputs():
    a = torch.ones(2, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"a and b must be \[M, F\] of one shape"):
        swiglu_gate(a, a[:, :4])
    with pytest.raises(TypeError, match="a and b must be bf16"):
        swiglu_gate(a, a.float())
