"""Index queries, head weights and index-key writes (SPEC section 6)."""

from __future__ import annotations

import pytest
import torch

from ds41_cache.codec import encode, quantize_dequantize
from ds41_cache.insert import gather
from ds41_cache.paged import PagedCache
from ds41_cache.rope import RopeConfig, apply_rope, rope_cos_sin, rope_freqs
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


def _queries_case(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    # 3 heads of 64 channels, R = 24 (a masked 16-wide block in the kernel); magnitudes over six
    # decades so the MXFP4 blocks and the bf16 rounding after RoPE both see varied exponents.
    g = torch.Generator().manual_seed(seed)
    t, hi, di = 6, 3, 64
    q_proj = torch.randn(t, hi * di, generator=g) * torch.logspace(-3, 3, hi * di)
    pos = torch.randint(0, 60000, (t,), generator=g, dtype=torch.int32)
    f = rope_freqs(RopeConfig(24, 160000.0, yarn_factor=4, yarn_orig=16))
    return q_proj.to(torch.bfloat16), pos, f, hi


def _queries_reference(q_proj, pos, f, hi):  # type: ignore[no-untyped-def]
    # the pre-`rope_tables` formula: apply_rope's copy, then MXFP4 quantize-dequantize, on the
    # inputs' device (CUDA's cos / sin tables are not the CPU's)
    t = q_proj.shape[0]
    roped = apply_rope(q_proj.view(t, hi, -1), pos, f)
    return quantize_dequantize("mxfp4", roped, backend="torch").cpu()


def test_queries_with_rope_tables_are_bitwise_the_same() -> None:
    q_proj, pos, f, hi = _queries_case(4)
    kept = q_proj.clone()
    ref = _queries_reference(q_proj, pos, f, hi)
    got = prepare_index_queries(q_proj, pos, f, hi, rope_tables=rope_cos_sin(pos, f))
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))
    assert torch.equal(prepare_index_queries(q_proj, pos, f, hi), got)
    assert torch.equal(q_proj.view(torch.int16), kept.view(torch.int16))  # input not rotated
    # tables of other positions give other queries: the tables are really used
    other = rope_cos_sin(pos + 1, f)
    assert not torch.equal(prepare_index_queries(q_proj, pos, f, hi, rope_tables=other), got)
    cos, sin = rope_cos_sin(pos, f)
    with pytest.raises(ValueError, match=r"rope_tables cos must be float32 \[6, 12\]"):
        prepare_index_queries(q_proj, pos, f, hi, rope_tables=(cos[:5], sin[:5]))
    with pytest.raises(ValueError, match="rope_tables sin must be float32"):
        prepare_index_queries(q_proj, pos, f, hi, rope_tables=(cos, sin.double()))
    with pytest.raises(TypeError, match="a \\(cos, sin\\) tuple"):
        prepare_index_queries(q_proj, pos, f, hi, rope_tables=[cos, sin])  # type: ignore[arg-type]


@pytest.mark.interpreter
@pytest.mark.parametrize("with_tables", [False, True])
def test_triton_queries_are_bitwise_the_reference(device: str, with_tables: bool) -> None:
    q_proj, pos, f, hi = _queries_case(5)
    qd, posd, fd = q_proj.to(device), pos.to(device), f.to(device)
    ref = _queries_reference(qd, posd, fd, hi)
    kept = qd.clone()
    tables = rope_cos_sin(posd, fd) if with_tables else None
    got = prepare_index_queries(qd, posd, fd, hi, rope_tables=tables, backend="triton")
    assert torch.equal(got.cpu().view(torch.int16), ref.view(torch.int16))
    assert torch.equal(qd.view(torch.int16), kept.view(torch.int16))
    # a row alone gets the same bits as among the others
    one = prepare_index_queries(
        qd[2:3], posd[2:3], fd, hi,
        rope_tables=None if tables is None else (tables[0][2:3], tables[1][2:3]),
        backend="triton",
    )  # fmt: skip
    assert torch.equal(one, got[2:3])


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


@pytest.mark.interpreter
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_write_index_keys_with_rope_tables_writes_the_same_bytes(device: str, backend: str) -> None:
    g = torch.Generator().manual_seed(6)
    n, di = 7, 64
    f = rope_freqs(RopeConfig(24, 160000.0, yarn_factor=4, yarn_orig=16))
    k_proj = (torch.randn(n, di, generator=g) * torch.logspace(-2, 2, di)).to(device)
    wt = (torch.rand(di, generator=g) + 0.5).to(device)
    entries_pos = torch.tensor([0, 2, 4, 10, 18, 6, 60000]).to(device)
    slots = torch.tensor([3, 17, 8, -1, 30, 0, 12]).to(device)
    caches = []
    for tables in (None, rope_cos_sin(entries_pos, f.to(device))):
        cache = PagedCache.allocate("mxfp4", di, 8, 5, device=device)
        write_index_keys(
            k_proj, wt, 1e-6, entries_pos, f.to(device), cache, slots,
            rope_tables=tables, backend=backend,
        )  # fmt: skip
        caches.append(cache.storage)
    assert torch.equal(caches[0], caches[1]) and caches[0].any()
    # against the torch path without tables on the same device (the bytes before this change)
    ref = PagedCache.allocate("mxfp4", di, 8, 5, device=device)
    write_index_keys(
        k_proj, wt, 1e-6, entries_pos, f.to(device), ref, slots, backend="torch"
    )  # fmt: skip
    assert torch.equal(caches[1], ref.storage)


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
