"""Index queries, head weights and index-key writes (SPEC section 6)."""

from __future__ import annotations

import pytest
import torch

from ds41_cache.codec import encode, quantize_dequantize
from ds41_cache.insert import gather
from ds41_cache.paged import PagedCache
from ds41_cache.rope import RopeConfig, apply_rope, rope_freqs
from ds41_indexer import head_weights, prepare_index_queries, rms_norm_rows, write_index_keys

E2M1 = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}


def freqs() -> torch.Tensor:
    return rope_freqs(RopeConfig(16, 160000.0, yarn_factor=4, yarn_orig=16))


def test_queries_rope_then_mxfp4() -> None:
    g = torch.Generator().manual_seed(0)
    t, hi, di = 5, 2, 32
    q_proj = torch.randn(t, hi * di, generator=g).to(torch.bfloat16)
    pos = torch.tensor([0, 7, 8, 100, 3], dtype=torch.int32)
    got = prepare_index_queries(q_proj, pos, freqs(), hi)
    assert got.dtype == torch.bfloat16 and got.shape == (t, hi, di)
    roped = apply_rope(q_proj.view(t, hi, di), pos, freqs())
    assert torch.equal(got, quantize_dequantize("mxfp4", roped.view(-1, di)).view(t, hi, di))
    # Values sit on the MXFP4 grid: |x| / 2**e in E2M1 with one power-of-two scale per 32 block.
    blocks = got.float().view(-1, 32)
    for b in blocks[:4]:
        scale = b.abs().max() / 6 if b.abs().max() > 0 else torch.tensor(1.0)
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
        assert {float(v) for v in (b.abs() / scale)} <= E2M1
    # The RoPE part moved, the rest did not change position dependence: row independence.
    one = prepare_index_queries(q_proj[3:4], pos[3:4], freqs(), hi)
    assert torch.equal(one, got[3:4])


def test_head_weights_scale() -> None:
    w = torch.randn(3, 32, generator=torch.Generator().manual_seed(1))
    out = head_weights(w, 128)
    assert out.dtype == torch.float32
    assert torch.equal(out, w * 2.0**-6)  # 128**-0.5 * 32**-0.5 = 2**-6 exactly
    assert torch.allclose(head_weights(w[:, :2], 32).double(), w[:, :2].double() * (32 * 2) ** -0.5)


def test_rms_norm_rows_reference_and_row_independence() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(9, 32, generator=g) * 3
    wt = torch.rand(32, generator=g) + 0.5
    got = rms_norm_rows(x, wt, 1e-20)
    ref = x.double() / torch.sqrt((x.double() ** 2).mean(1, keepdim=True) + 1e-20) * wt.double()
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.double(), ref, rtol=2**-8, atol=0)
    for i in range(9):
        assert torch.equal(rms_norm_rows(x[i : i + 1], wt, 1e-20), got[i : i + 1])


@pytest.mark.parametrize("fmt", ["mxfp4", "fp8_index"])
def test_write_index_keys_bytes(fmt: str) -> None:
    g = torch.Generator().manual_seed(3)
    n, di, ratio = 6, 32, 2
    k_proj = torch.randn(n, di, generator=g).to(torch.bfloat16)
    wt = torch.rand(di, generator=g) + 0.5
    entries = torch.tensor([0, 1, 2, 5, 9, 4])
    slots = torch.tensor([3, 17, 8, -1, 30, 0])
    cache = PagedCache.allocate(fmt, di, 8, 5, page_stride=512 + 64)
    cache.storage.copy_(torch.randint(0, 256, cache.storage.shape, generator=g, dtype=torch.uint8))
    before = cache.storage.clone()
    normed = write_index_keys(k_proj, wt, 1e-20, entries * ratio, freqs(), cache, slots)
    assert torch.equal(normed, rms_norm_rows(k_proj, wt, 1e-20))
    roped = apply_rope(normed, entries * ratio, freqs())
    data, scales = encode(fmt, roped, backend="torch")
    live = slots >= 0
    s = slots[live]
    assert torch.equal(cache.data_view()[s // 8, s % 8], data[live])
    assert torch.equal(cache.scale_view()[s // 8, s % 8], scales[live])
    # Nothing else changed (slot -1 skipped).
    mask = torch.ones_like(before, dtype=torch.bool)
    for slot in s.tolist():
        p, o = divmod(slot, 8)
        db, sb = cache.data_bytes, cache.scale_bytes
        mask[p, o * db : (o + 1) * db] = False
        mask[p, 8 * db + o * sb : 8 * db + (o + 1) * sb] = False
    assert torch.equal(cache.storage[mask], before[mask])
    assert torch.equal(gather(cache, s), quantize_dequantize(fmt, roped[live]))


def test_bad_input() -> None:
    cache = PagedCache.allocate("mxfp4", 32, 8, 2)
    k = torch.randn(2, 32)
    pos = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="n_heads must be a positive int"):
        prepare_index_queries(torch.randn(2, 64), pos, freqs(), 0)
    with pytest.raises(ValueError, match="multiple of n_heads"):
        prepare_index_queries(torch.randn(2, 64), pos, freqs(), 3)
    with pytest.raises(ValueError, match=r"positions must have shape \[2\]"):
        prepare_index_queries(torch.randn(2, 64), pos[:1], freqs(), 2)
    with pytest.raises(ValueError, match=r"norm_weight must have shape \[32\]"):
        write_index_keys(k, torch.ones(16), 1e-6, pos, freqs(), cache, pos)
    with pytest.raises(ValueError, match=r"key_cache\.fmt must be one of"):
        write_index_keys(
            k, torch.ones(32), 1e-6, pos, freqs(), PagedCache.allocate("mxfp8", 32, 8, 2), pos
        )
    with pytest.raises(IndexError):
        write_index_keys(k, torch.ones(32), 1e-6, pos, freqs(), cache, torch.tensor([0, 99]))
    assert not cache.storage.any()  # nothing written on error
