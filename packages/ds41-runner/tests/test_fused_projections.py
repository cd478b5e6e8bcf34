"""Projections that read the same input run as one matmul over their concatenated weight
(`LayerWeights.wq_a_kv`, `w13`, `wkv_gate_c`): the parts are near float64, a row's bits do not
depend on the batch, the consumers read the parts in place, and the weights and their
tensor-parallel shards hold what the separate projections held."""

import pytest
import torch

from ds41_runner.model import ModelConfig
from ds41_runner.model.layers import Runtime, mlp_block
from ds41_runner.model.weights import init_weights
from ds41_runner.ops.elementwise.naive import swiglu_gate_torch
from ds41_runner.ops.linear import linear
from ds41_runner.ops.matmul.naive import reference_matmul
from ds41_runner.ops.matmul.plan import plan_matmul
from ds41_runner.ops.norm import rmsnorm, rmsnorm_torch
from ds41_runner.ops.swiglu import swiglu_gate

# (group, part rows, K, fp32 operands): the layer's groups at small widths. K = 256 gives
# the concatenated weights two K segments, so the segment sum is exercised.
GROUPS = [
    ("w13 (w1 + w3)", (128, 128), 256, False),
    ("wq_a_kv (wq_a + wkv)", (96, 64), 256, False),
    ("wkv_gate_c (wkv_c + wgate_c)", (64, 64), 256, True),
]


def _group(parts: tuple[int, ...], k: int, seed: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(70, k, generator=g) * 3).to(torch.bfloat16)
    ws = [(torch.randn(n, k, generator=g) / k**0.5).to(torch.bfloat16) for n in parts]
    return x, ws


@pytest.mark.interpreter
@pytest.mark.parametrize(("name", "parts", "k", "fp32"), GROUPS)
def test_fused_parts_near_float64_and_rows_bitwise(device, name, parts, k, fp32):
    x, ws = _group(parts, k, seed=sum(parts) + k)
    w = torch.cat(ws)
    if fp32:
        w = w.float()  # the compressor's weights are held in fp32 (bf16 values)
    assert plan_matmul(w.shape[0], k).n_segs >= 2, "the test needs a segmented plan"
    x, w = x.to(device), w.to(device)
    kw = {"fp32": fp32, "out_dtype": torch.float32}
    full = linear(x, w, mode="bi", backend="triton", **kw)
    col = 0
    for wp in ws:
        n = wp.shape[0]
        part = full[:, col : col + n].double().cpu()
        ref = reference_matmul(x.cpu(), wp)
        tol = 1e-5 * (x.double().abs() @ wp.double().abs().T).cpu() + 1e-6
        assert ((part - ref).abs() <= tol).all(), name
        col += n
    # A row alone, a slice, and a row among other rows: the bits of the row in the batch.
    for m, start in ((1, 0), (1, 69), (7, 30)):
        alone = linear(x[start : start + m], w, mode="bi", backend="triton", **kw)
        assert torch.equal(alone, full[start : start + m]), (name, m, start)
    g = torch.Generator().manual_seed(99)
    other = (torch.randn(5, k, generator=g) * 3).to(torch.bfloat16).to(device)
    mixed = torch.cat([other[:2], x[11:12], other[2:]])
    assert torch.equal(linear(mixed, w, mode="bi", backend="triton", **kw)[2], full[11])


@pytest.mark.interpreter
def test_consumers_read_the_parts_in_place(device):
    """The gate and RMSNorm over column ranges of one wider output give the bits of the same
    values in contiguous tensors (the kernels take row strides)."""
    g = torch.Generator().manual_seed(21)
    ab = (torch.randn(9, 2 * 160, generator=g) * 2).to(torch.bfloat16).to(device)
    a, b = ab[:, :160], ab[:, 160:]
    assert not a.is_contiguous()
    got = swiglu_gate(a, b, backend="triton")
    assert torch.equal(got.cpu(), swiglu_gate_torch(a.contiguous().cpu(), b.contiguous().cpu()))
    assert torch.equal(swiglu_gate(a[4:5], b[4:5], backend="triton"), got[4:5])
    wq = (1.0 + 0.1 * torch.randn(96, generator=g)).to(torch.bfloat16).to(device)
    wk = (1.0 + 0.1 * torch.randn(224, generator=g)).to(torch.bfloat16).to(device)
    for lo, hi, w in ((0, 96, wq), (96, 320, wk)):
        view = ab[:, lo:hi]
        got_n = rmsnorm(view, w, 1e-6, backend="triton")
        assert torch.equal(got_n, rmsnorm(view.contiguous(), w, 1e-6, backend="triton"))
        ref = rmsnorm_torch(view.cpu(), w.cpu(), 1e-6)
        assert torch.allclose(got_n.cpu().float(), ref, rtol=2**-7, atol=1e-6)


@pytest.mark.interpreter
def test_mlp_block_rows_bitwise_and_near_float64(device):
    cfg = ModelConfig.preset("tiny")
    lw = init_weights(cfg, device).layers[0]
    rt = Runtime(
        mode="bi", backend="triton", attention=None, indexer=None, compressor=None, freqs={}
    )
    g = torch.Generator().manual_seed(5)
    x = torch.randn(66, cfg.hidden, generator=g).to(torch.bfloat16).to(device)
    full = mlp_block(lw, x, rt)
    for r in (0, 65):
        assert torch.equal(mlp_block(lw, x[r : r + 1], rt), full[r : r + 1])
    xd = x.double().cpu()
    a, b = xd @ lw.w1.double().cpu().T, xd @ lw.w3.double().cpu().T
    ref = (torch.nn.functional.silu(a) * b) @ lw.w2.double().cpu().T
    assert torch.allclose(full.double().cpu(), ref, rtol=3e-2, atol=3e-2 * ref.abs().max())


def test_weights_hold_one_copy_of_each_projection():
    cfg = ModelConfig.preset("tiny")
    weights = init_weights(cfg, torch.device("cpu"))
    plans = cfg.plans
    assert any(p.ratio == 2 and p.is_kv_source for p in plans)
    for p, lw in zip(plans, weights.layers, strict=True):
        f, q = cfg.mlp_hidden, cfg.q_lora_rank
        assert lw.w13.shape == (2 * f, cfg.hidden)
        assert lw.w1.shape == lw.w3.shape == (f, cfg.hidden)
        assert lw.wq_a.shape == (q, cfg.hidden) and lw.wkv.shape == (cfg.head_dim, cfg.hidden)
        # views into the fused storage, not copies
        assert lw.w1.data_ptr() == lw.w13.data_ptr()
        assert lw.w3.data_ptr() == lw.w13[f:].data_ptr()
        assert lw.wkv.data_ptr() == lw.wq_a_kv[q:].data_ptr()
        if p.is_kv_source:
            assert lw.wkv_c is not None and lw.wkv_c.dtype == torch.float32
            assert (lw.wgate_c is not None) == (p.ratio == 2)
        else:
            assert lw.wkv_c is None and lw.wgate_c is None
    # num_parameters counts each projection once
    per_layer = sum(v.numel() for lw in weights.layers for v in vars(lw).values() if v is not None)
    assert weights.num_parameters() == per_layer + 2 * cfg.vocab_size * cfg.hidden + cfg.hidden


def test_tp_shard_holds_the_rank_rows_of_w1_and_w3():
    from ds41_runner.parallel.shard import shard_weights

    cfg = ModelConfig.preset("tiny")
    full = init_weights(cfg, torch.device("cpu"))
    tp, f = 2, cfg.mlp_hidden
    for rank in range(tp):
        shard, specs = shard_weights(full, cfg, rank, tp, torch.device("cpu"))
        rows = slice(rank * f // tp, (rank + 1) * f // tp)
        for lw, lf in zip(shard.layers, full.layers, strict=True):
            assert torch.equal(lw.w1, lf.w1[rows]) and torch.equal(lw.w3, lf.w3[rows])
            spec = specs[id(lw.w13)]
            assert spec.kind == "col" and spec.full == (2 * f, cfg.hidden, 1)
            assert torch.equal(lw.wq_a_kv, lf.wq_a_kv)
