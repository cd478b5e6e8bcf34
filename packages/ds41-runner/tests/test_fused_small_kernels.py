"""Small kernels of a decode step folded into fewer launches, with the bits of the separate
kernels: `q_norm` and `kv_norm` in one launch (`ops.norm.rmsnorm_pair`), the index queries'
cast, RoPE and MXFP4 round trip in one launch (`ds41_indexer.prepare_index_queries`), and the
sparse-attention slots computed once per (ratio, top-k source) and shared by the layers that
read the same ones (`model.layers.StepContext.paged_indices`).

Each fused kernel is compared bitwise with the separate kernels it replaces, on the
interpreter here and on CUDA at 1..1024 rows in the `gpu` tests, on inputs without zeros and
with mixed magnitudes, NaN and inf; outputs are fresh allocations (poisoned in the tests)."""

from __future__ import annotations

import pytest
import torch

from ds41_cache.paged import lookup_slots
from ds41_cache.rope import RopeConfig, rope_cos_sin, rope_freqs, rope_inplace
from ds41_indexer import prepare_index_queries
from ds41_indexer.ops.queries.triton_kernels import launch_index_queries
from ds41_indexer.queries import _index_queries_separate
from ds41_runner.model import KVState, Model, ModelConfig
from ds41_runner.ops.entries import entry_slots_positions
from ds41_runner.ops.norm import UNMARKED, embed_rmsnorm, residual_rmsnorm, rmsnorm, rmsnorm_pair

GPU_ROWS = (1, 2, 3, 5, 8, 17, 64, 100, 256, 1000, 1024)


def _rows(m: int, d: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, d, generator=g) * scale
    # no zeros, mixed magnitudes along the row
    scale = torch.logspace(-2, 2, d)[torch.randperm(d, generator=g)]
    return (x + torch.where(x >= 0, 1e-3, -1e-3)) * scale


def _qkv(m: int, d1: int, d2: int, seed: int) -> torch.Tensor:
    return _rows(m, d1 + d2, seed).to(torch.bfloat16)


def _norm_weights(d1: int, d2: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (
        (1 + 0.1 * torch.randn(d1, generator=g)).to(torch.bfloat16),
        (1 + 0.1 * torch.randn(d2, generator=g)).to(torch.bfloat16),
    )


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int16) if x.dtype == torch.bfloat16 else x.view(torch.int32)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, NaN payloads included (the fused kernels run the separate ones' ops)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _check_pair(qkv: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, d1: int) -> None:
    a, b = qkv[:, :d1], qkv[:, d1:]
    got1, got2 = rmsnorm_pair(a, w1, b, w2, 1e-20, backend="triton")
    assert _same_bits(got1, rmsnorm(a, w1, 1e-20, backend="triton"))
    assert _same_bits(got2, rmsnorm(b, w2, 1e-20, backend="triton"))
    m = qkv.shape[0]
    for r in sorted({0, m // 2, m - 1}):
        one1, one2 = rmsnorm_pair(a[r : r + 1], w1, b[r : r + 1], w2, 1e-20, backend="triton")
        assert _same_bits(one1, got1[r : r + 1]) and _same_bits(one2, got2[r : r + 1])


@pytest.mark.interpreter
@pytest.mark.parametrize(("d1", "d2"), [(96, 224), (256, 512)])
def test_rmsnorm_pair_is_two_rmsnorms(device, d1, d2):
    qkv = _qkv(9, d1, d2, seed=d1 + d2).to(device)
    qkv[3, 5] = float("inf")  # a non-finite row in each part
    qkv[6, d1 + 7] = float("nan")
    w1, w2 = (w.to(device) for w in _norm_weights(d1, d2, seed=d2))
    _check_pair(qkv, w1, w2, d1)


def test_rmsnorm_pair_torch_and_shapes():
    qkv = _qkv(5, 32, 64, seed=1)
    w1, w2 = _norm_weights(32, 64, seed=2)
    a, b = qkv[:, :32], qkv[:, 32:]
    got1, got2 = rmsnorm_pair(a, w1, b, w2, 1e-6, backend="torch")
    assert _same_bits(got1, rmsnorm(a, w1, 1e-6, backend="torch"))
    assert _same_bits(got2, rmsnorm(b, w2, 1e-6, backend="torch"))
    with pytest.raises(ValueError, match=r"w2 must be \[64\]"):
        rmsnorm_pair(a, w1, b, w1, 1e-6)
    with pytest.raises(ValueError, match="x1 and x2"):
        rmsnorm_pair(a, w1, b[:4], w2, 1e-6)


def _index_inputs(t: int, heads: int, d: int, r: int, seed: int, dtype: torch.dtype):
    q = _rows(t, heads * d, seed, scale=3.0)
    q[0, 5] = float("nan")
    q[min(1, t - 1), d - 1] = float("inf")  # in the RoPE part of head 0
    if t > 2:
        q[2, 2 * d - 2] = 3.0e38  # a huge value in a RoPE pair
    cfg = RopeConfig(r, 160000.0, yarn_factor=16.0, yarn_orig=65536)
    freqs = rope_freqs(cfg)
    pos = torch.randint(0, 60000, (t,), generator=torch.Generator().manual_seed(seed + 1))
    cos, sin = rope_cos_sin(pos.to(torch.int32), freqs, backend="torch")
    return q.to(dtype), pos.to(torch.int32), freqs, (cos, sin)


def _check_index_queries(q, pos, freqs, tables, heads):
    got = prepare_index_queries(
        q, pos, freqs, heads, rope_tables=tables, backend="triton", validate=False
    )
    want = _index_queries_separate(q, *tables, heads, "triton", False)
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    assert _same_bits(got, want)
    # the rotated bf16 queries before the MXFP4 round trip (finer than its 4-bit codes)
    t, width = q.shape
    _, rot, _ = launch_index_queries(q, tables[0], tables[1], heads, rotated=True)
    want_rot = q.to(torch.bfloat16, copy=True).view(t, heads, width // heads)
    rope_inplace(want_rot, *tables, backend="triton")
    # (NaN at the same places: the payload of torch's cast of a NaN differs between its CPU
    # and CUDA kernels; the MXFP4 round trip quantizes every NaN as +0)
    assert rot is not None and torch.equal(rot.isnan(), want_rot.isnan())
    assert _same_bits(rot.nan_to_num(0.0), want_rot.nan_to_num(0.0))
    for r in sorted({0, t // 2, t - 1}):
        one = prepare_index_queries(
            q[r : r + 1], pos[r : r + 1], freqs, heads,
            rope_tables=(tables[0][r : r + 1], tables[1][r : r + 1]), backend="triton",
            validate=False,
        )  # fmt: skip
        assert _same_bits(one, got[r : r + 1])


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_index_queries_one_launch_is_the_separate_kernels(device, dtype):
    heads, d, r = 4, 128, 64
    q, pos, freqs, tables = _index_inputs(6, heads, d, r, seed=3, dtype=dtype)
    q, pos, freqs = q.to(device), pos.to(device), freqs.to(device)
    tables = (tables[0].to(device), tables[1].to(device))
    _check_index_queries(q, pos, freqs, tables, heads)
    # a column slice of a wider projection (row stride) reads in place
    wide = torch.cat([q, q[:, :64]], dim=1)[:, : heads * d]
    _check_index_queries(wide, pos, freqs, tables, heads)


def _check_queries_and_weights(q, pos, freqs, tables, heads, w_proj):
    from ds41_indexer import head_weights, index_queries_and_weights

    qi, w = index_queries_and_weights(
        q, w_proj, pos, freqs, heads, rope_tables=tables, backend="triton", validate=False
    )
    want_q = _index_queries_separate(q, *tables, heads, "triton", False)
    want_w = head_weights(w_proj, q.shape[1] // heads)  # torch's product
    assert _same_bits(qi, want_q) and _same_bits(w, want_w)


@pytest.mark.interpreter
@pytest.mark.parametrize("wdtype", [torch.float32, torch.bfloat16])
def test_index_queries_and_head_weights_in_one_launch(device, wdtype):
    heads, d, r = 4, 128, 64
    q, pos, freqs, tables = _index_inputs(6, heads, d, r, seed=5, dtype=torch.bfloat16)
    q, pos, freqs = q.to(device), pos.to(device), freqs.to(device)
    tables = (tables[0].to(device), tables[1].to(device))
    # 6 x 300 weights: two blocks of the weights' programs, the second partial
    w_proj = _rows(6, 300, seed=6, scale=5.0).to(wdtype).to(device)
    w_proj[1, 2] = float("nan")
    _check_queries_and_weights(q, pos, freqs, tables, heads, w_proj)


@pytest.mark.interpreter
def test_index_queries_validate_checks_the_rotated_queries(device):
    heads, d, r = 2, 64, 32
    q, pos, freqs, tables = _index_inputs(3, heads, d, r, seed=4, dtype=torch.bfloat16)
    q, pos, freqs = q.to(device), pos.to(device), freqs.to(device)
    tables = (tables[0].to(device), tables[1].to(device))
    for backend in ("torch", "triton"):
        with pytest.raises(ValueError, match="must be finite"):
            prepare_index_queries(q, pos, freqs, heads, rope_tables=tables, backend=backend)
    fin = torch.nan_to_num(q, nan=1.5, posinf=2.5, neginf=-2.5).clamp(-1e4, 1e4)
    got = prepare_index_queries(fin, pos, freqs, heads, rope_tables=tables, backend="triton")
    want = _index_queries_separate(fin, *tables, heads, "triton", True)
    assert _same_bits(got, want)


def _key_case(n: int, d: int, r: int, seed: int, device, dtype=torch.bfloat16):
    from ds41_cache.paged import PagedCache

    g = torch.Generator().manual_seed(seed)
    k = _rows(n, d, seed, scale=4.0).to(dtype)
    k[0, 3] = float("nan")
    if n > 2:
        k[2, d - 1] = float("inf")
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16)
    ps, pages = 4, max(2, -(-2 * n // 4))
    cache = PagedCache.allocate("fp8_index", d, ps, pages, device=device)
    cache.storage.copy_(
        torch.randint(0, 256, cache.storage.shape, generator=g, dtype=torch.uint8).to(device)
    )
    slots = torch.randperm(ps * pages, generator=g)[:n].to(torch.int64)
    slots[n // 2] = -1  # skipped rows
    if n > 3:
        slots[3] = ps * pages + 5  # out of range: skipped unvalidated
    freqs = rope_freqs(RopeConfig(r, 160000.0, yarn_factor=16.0, yarn_orig=65536))
    pos = torch.randint(0, 60000, (n,), generator=g).to(torch.int32)
    return k.to(device), w.to(device), cache, slots.to(device), pos.to(device), freqs.to(device)


def _check_keys(k, w, cache, slots, pos, freqs, tables):
    import copy

    from ds41_cache.insert import insert
    from ds41_indexer import rms_norm_rows, write_index_keys

    ref = copy.deepcopy(cache)
    got = write_index_keys(
        k, w, 1e-20, pos, freqs, cache, slots, rope_tables=tables, backend="triton",
        validate=False,
    )  # fmt: skip
    normed = rms_norm_rows(k, w, 1e-20, backend="triton")
    insert(ref, normed, slots, positions=pos, freqs=freqs, rope_tables=tables, backend="triton",
           validate=False)  # fmt: skip
    assert _same_bits(got, normed)
    assert torch.equal(cache.storage, ref.storage)


@pytest.mark.interpreter
@pytest.mark.parametrize(("d", "r", "dtype"), [(128, 64, torch.bfloat16), (32, 16, torch.float32)])
def test_index_keys_norm_and_write_in_one_launch(device, d, r, dtype):
    k, w, cache, slots, pos, freqs = _key_case(9, d, r, seed=d, device=device, dtype=dtype)
    tables = rope_cos_sin(pos, freqs, backend="torch")
    _check_keys(k, w, cache, slots, pos, freqs, tables)
    _check_keys(k, w, cache, slots, pos, freqs, None)  # tables computed inside


def _entry_case(t: int, ratio: int, seed: int, device):
    g = torch.Generator().manual_seed(seed)
    r, cols, ps = 5, 7, 4
    bt = torch.randint(0, 50, (r, cols), generator=g, dtype=torch.int32)
    bt[1, 2] = -1  # a missing page
    req = torch.randint(-1, r + 1, (t,), generator=g, dtype=torch.int32)  # padding, out of range
    entry = torch.randint(-1, cols * ps + 3, (t,), generator=g)  # -1, past the table
    emit = torch.rand(t, generator=g) < 0.7
    entry = torch.where(emit, entry, torch.full_like(entry, -1))
    freqs = rope_freqs(RopeConfig(64, 160000.0, yarn_factor=16.0, yarn_orig=65536))
    return [v.to(device) for v in (bt, req, entry, emit, freqs)] + [ps, ratio]


def _check_entries(bt, req, entry, emit, freqs, ps, ratio):
    slots, epos, tables = entry_slots_positions(
        bt, req, entry, emit, ps, ratio, freqs=freqs, backend="triton"
    )
    want_slots = lookup_slots(bt, req, entry, ps, emit, backend="triton")[0]
    want_pos = (entry.clamp(min=0) * ratio).to(torch.int32)
    assert torch.equal(slots, want_slots) and torch.equal(epos, want_pos)
    want = rope_cos_sin(want_pos, freqs)  # the default dispatch, as the model called it
    assert tables is not None and _same_bits(tables[0], want[0]) and _same_bits(tables[1], want[1])
    no_tables = entry_slots_positions(bt, req, entry, emit, ps, ratio, backend="triton")
    assert no_tables[2] is None and torch.equal(no_tables[0], slots)
    assert torch.equal(no_tables[1], epos)


@pytest.mark.interpreter
@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_entry_slots_positions_and_tables_in_one_launch(device, ratio):
    from ds41_cache.ops.rope.triton_kernels import launch_rope_tables
    from ds41_runner.ops.rowwise.triton_kernels import launch_entry_slots

    bt, req, entry, emit, freqs, ps, ratio = _entry_case(300, ratio, seed=ratio, device=device)
    _check_entries(bt, req, entry, emit, freqs, ps, ratio)
    # the in-kernel tables (CUDA's path) against rope_tables_kernel, on this device
    _, epos, tables = launch_entry_slots(bt, req, entry, emit, ps, ratio, freqs)
    want = launch_rope_tables(epos, freqs)
    assert tables is not None and _same_bits(tables[0], want[0]) and _same_bits(tables[1], want[1])
    for backend in ("torch", "triton"):  # no rows
        e = entry[:0]
        got = entry_slots_positions(bt, req[:0], e, emit[:0], ps, ratio, backend=backend)
        assert got[0].shape == (0,) and got[1].shape == (0,)


def _embed_case(m: int, v: int, d: int, seed: int, device):
    g = torch.Generator().manual_seed(seed)
    emb = _rows(v, d, seed, scale=2.0).to(torch.bfloat16)
    emb[3, 1] = float("inf")
    emb[5, d - 1] = float("nan")
    tokens = torch.randint(-2, v + 3, (m,), generator=g)  # some out of range: clamped
    tokens[: min(m, 2)] = torch.tensor([3, 5])[: min(m, 2)]  # the non-finite rows
    req = torch.randint(-1, 4, (m,), generator=g, dtype=torch.int32)
    if m > 2:
        req[:2] = 0
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16)
    return tokens.to(device), req.to(device), emb.to(device), w.to(device)


def _check_embed(tokens, req, emb, w):
    m = tokens.shape[0]
    marks = torch.full((m,), 77, dtype=torch.int64, device=tokens.device)  # stale values
    x, h = embed_rmsnorm(tokens, req, emb, w, 1e-20, nonfinite=marks, stage=0, backend="triton")
    tok = torch.where(req >= 0, tokens, torch.zeros_like(tokens)).clamp(0, emb.shape[0] - 1)
    want_marks = torch.full((m,), UNMARKED, dtype=torch.int64, device=tokens.device)
    wx, wh = residual_rmsnorm(emb[tok], None, w, 1e-20, nonfinite=want_marks, backend="triton")
    assert wh is not None
    assert _same_bits(x, wx) and _same_bits(h, wh) and torch.equal(marks, want_marks)
    x2, h2 = embed_rmsnorm(tokens, req, emb, w, 1e-20, backend="triton")
    assert _same_bits(x2, x) and _same_bits(h2, h)
    return marks


@pytest.mark.interpreter
@pytest.mark.parametrize("d", [64, 1024])
def test_embedding_rows_and_first_norm_in_one_launch(device, d):
    tokens, req, emb, w = _embed_case(12, 40, d, seed=d, device=device)
    marks = _check_embed(tokens, req, emb, w)
    assert marks[:2].tolist() == [0, 0]  # the two non-finite embedding rows, marked
    x, _ = embed_rmsnorm(tokens, req, emb, w, 1e-20, backend="triton")
    tx, th = embed_rmsnorm(tokens.cpu(), req.cpu(), emb.cpu(), w.cpu(), 1e-20, backend="torch")
    assert _same_bits(tx, x.cpu()) and th.shape == (12, d)  # the same rows picked


def test_paged_indices_computed_once_per_ratio_and_topk_source(monkeypatch):
    import ds41_cache.indices as indices

    cfg = ModelConfig.preset("tiny")
    calls: list[int] = []
    real = indices.sparse_paged_indices

    def counted(*args, **kw):
        calls.append(args[7])
        return real(*args, **kw)

    monkeypatch.setattr(indices, "sparse_paged_indices", counted)
    model = Model(cfg, mode="bi", backend="torch")
    kv = KVState(cfg, kv_dtype="nvfp4_ds_mla", max_requests=2, max_tokens_per_request=16,
                 num_pages=16, page_size=4)  # fmt: skip
    for r in range(2):
        kv.reserve(r, 9)
    tok = torch.tensor([5, 6, 7], dtype=torch.int64)
    req = torch.tensor([0, 1, 1], dtype=torch.int32)
    pos = torch.tensor([0, 0, 1], dtype=torch.int32)
    cap: dict = {}
    model.forward(tok, req, pos, kv, capture=cap)
    keys = {(p.ratio, p.topk_source if p.ratio > 0 else None) for p in cfg.plans}
    assert len(calls) == len(keys) < len(cfg.plans)


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_rmsnorm_pair_bitwise_1_to_1024_rows():
    # flash_mini's q_norm / kv_norm widths (256, 512) and flash_wide's (1280, 512)
    for d1, d2 in ((256, 512), (1280, 512)):
        w1, w2 = (w.cuda() for w in _norm_weights(d1, d2, seed=d1))
        big = _qkv(max(GPU_ROWS), d1, d2, seed=d1 + 1).cuda()
        big[3, 5] = float("inf")
        big[7, d1 + 9] = float("nan")
        full1, full2 = rmsnorm_pair(big[:, :d1], w1, big[:, d1:], w2, 1e-20, backend="triton")
        for m in GPU_ROWS:
            _check_pair(big[:m], w1, w2, d1)
            got1, got2 = rmsnorm_pair(big[:m, :d1], w1, big[:m, d1:], w2, 1e-20, backend="triton")
            assert _same_bits(got1, full1[:m]) and _same_bits(got2, full2[:m]), (d1, m)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_index_queries_bitwise_1_to_1024_rows(dtype):
    heads, d, r = 32, 128, 64  # flash_mini / V4.1-Flash index queries
    q, pos, freqs, _ = _index_inputs(max(GPU_ROWS), heads, d, r, seed=7, dtype=dtype)
    q, pos, freqs = q.cuda(), pos.cuda(), freqs.cuda()
    tables = rope_cos_sin(pos, freqs)  # the Triton tables a model step uses
    full = prepare_index_queries(q, pos, freqs, heads, rope_tables=tables, validate=False)
    for m in GPU_ROWS:
        sub = (tables[0][:m], tables[1][:m])
        _check_index_queries(q[:m], pos[:m], freqs, sub, heads)
        got = prepare_index_queries(q[:m], pos[:m], freqs, heads, rope_tables=sub, validate=False)
        assert _same_bits(got, full[:m]), m


@pytest.mark.gpu
def test_gpu_index_keys_bitwise_1_to_1024_rows():
    for m in GPU_ROWS:
        k, w, cache, slots, pos, freqs = _key_case(m, 128, 64, seed=m, device="cuda")
        _check_keys(k, w, cache, slots, pos, freqs, rope_cos_sin(pos, freqs))


@pytest.mark.gpu
def test_gpu_final_norm_in_the_residual_launch_bitwise_1_to_1024_rows():
    # the model's last residual step now norms with the final weight in the same launch
    # (`residual_rmsnorm`) instead of a separate `rmsnorm`: the bits of the separate norm
    for d in (1024, 5120):  # flash_mini, flash_wide hidden
        x = _rows(max(GPU_ROWS), d, seed=d).to(torch.bfloat16).cuda()
        delta = _rows(max(GPU_ROWS), d, seed=d + 1, scale=0.3).to(torch.bfloat16).cuda()
        w = (1 + 0.1 * _rows(1, d, seed=d + 2)[0].clamp(-3, 3)).to(torch.bfloat16).cuda()
        for m in GPU_ROWS:
            total, h = residual_rmsnorm(x[:m], delta[:m], w, 1e-20, backend="triton")
            assert h is not None
            assert _same_bits(h, rmsnorm(total, w, 1e-20, backend="triton")), (d, m)


@pytest.mark.gpu
@pytest.mark.parametrize("ratio", [1, 2])
def test_gpu_entry_slots_positions_and_tables_1_to_1024_rows(ratio):
    for m in GPU_ROWS:
        _check_entries(*_entry_case(m, ratio, seed=m, device="cuda"))


@pytest.mark.gpu
def test_gpu_embedding_rows_and_first_norm_1_to_1024_rows():
    for d in (1024, 5120):
        for m in GPU_ROWS:
            _check_embed(*_embed_case(m, 4096, d, seed=m, device="cuda"))


@pytest.mark.gpu
def test_gpu_index_queries_and_head_weights_1_to_1024_rows():
    heads, d, r = 32, 128, 64
    q, pos, freqs, _ = _index_inputs(max(GPU_ROWS), heads, d, r, seed=9, dtype=torch.bfloat16)
    q, pos, freqs = q.cuda(), pos.cuda(), freqs.cuda()
    tables = rope_cos_sin(pos, freqs)
    w_proj = _rows(max(GPU_ROWS), heads, seed=10, scale=5.0).cuda()
    for m in GPU_ROWS:
        sub = (tables[0][:m], tables[1][:m])
        _check_queries_and_weights(q[:m], pos[:m], freqs, sub, heads, w_proj[:m])
