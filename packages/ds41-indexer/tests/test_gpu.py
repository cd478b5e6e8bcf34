"""GPU checks (skipped without CUDA): V4.1-Flash geometry, invariance, 1M-entry rows, graphs."""

from __future__ import annotations

import pytest
import torch
from helpers import make_queries, make_scenario, reference_logits, scale_edge_scenario

from ds41_cache.outputs import empty
from ds41_cache.paged import PagedCache
from ds41_indexer import candidate_blocks, index_logits, index_topk, paged_index_topk
from ds41_indexer.ops.logits.naive import visible_entries
from ds41_indexer.ops.topk.triton_kernels import done_counters, index_topk_triton

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def flash_setup(fmt: str, seed: int):
    sc = make_scenario(fmt, [700, 1300, 90], di=128, hi=32, page_size=64, seed=seed, device=CUDA)
    req = torch.tensor([1] * 6 + [0, 2, -1, 0], dtype=torch.int32, device=CUDA)
    pos = torch.tensor(
        [1000, 1001, 1002, 1003, 1004, 1299, 699, 89, 5, 0], dtype=torch.int32, device=CUDA
    )
    q, w = make_queries(len(req), 32, 128, seed=seed + 1, device=CUDA)
    return sc, q, w, req, pos


@pytest.mark.parametrize("fmt", ["mxfp4", "fp8_index"])
def test_gpu_logits_vs_float64(fmt: str) -> None:
    sc, q, w, req, pos = flash_setup(fmt, 1)
    got = index_logits(q, w, sc.cache, sc.block_table, req, pos, 1)
    ref, bound = reference_logits(sc, q.cpu(), w.cpu(), req.cpu(), pos.cpu(), 1, got.shape[1])
    got = got.cpu()
    assert torch.equal(torch.isinf(got), torch.isinf(ref))
    fin = torch.isfinite(ref)
    assert bool(((got.double() - ref).abs()[fin] <= 1e-4 * bound[fin] + 1e-30).all())


@pytest.mark.parametrize("fmt", ["mxfp4", "fp8_index"])
def test_gpu_fused_unfused_and_row_invariance(fmt: str) -> None:
    sc, q, w, req, pos = flash_setup(fmt, 2)
    args = (sc.cache, sc.block_table)
    nv = visible_entries(req, pos, 1)
    fused = paged_index_topk(q, w, *args, req, pos, 1, 512)
    logits = index_logits(q, w, *args, req, pos, 1)
    assert torch.equal(fused, index_topk(logits, nv, 512))
    assert torch.equal(fused.cpu(), index_topk(logits.cpu(), nv.cpu(), 512, backend="torch"))
    for i in range(len(req)):  # decode rows alone
        s = slice(i, i + 1)
        assert torch.equal(paged_index_topk(q[s], w[s], *args, req[s], pos[s], 1, 512), fused[s])
        assert torch.equal(index_logits(q[s], w[s], *args, req[s], pos[s], 1), logits[s])
    rep = 40  # 400 rows
    big = paged_index_topk(
        q.repeat(rep, 1, 1), w.repeat(rep, 1), *args, req.repeat(rep), pos.repeat(rep), 1, 512
    )
    assert torch.equal(big, fused.repeat(rep, 1))
    big_l = index_logits(
        q.repeat(rep, 1, 1), w.repeat(rep, 1), *args, req.repeat(rep), pos.repeat(rep), 1
    )
    assert torch.equal(big_l, logits.repeat(rep, 1))
    cand = candidate_blocks(logits, nv, 16, 8)
    assert torch.equal(cand.cpu(), candidate_blocks(logits.cpu(), nv.cpu(), 16, 8, backend="torch"))
    fc = paged_index_topk(q, w, *args, req, pos, 1, 512, candidates=cand)
    assert torch.equal(fc, index_topk(torch.where(cand, logits, float("-inf")), nv, 512))


def test_gpu_million_entry_rows() -> None:
    n = (1 << 20) + 300
    ps = 64
    pages = -(-n // ps)
    g = torch.Generator(device=CUDA).manual_seed(3)
    cache = PagedCache.allocate("mxfp4", 128, ps, pages + 2, page_stride=ps * 68 + 512, device=CUDA)
    cache.storage.copy_(
        torch.randint(0, 256, cache.storage.shape, dtype=torch.uint8, device=CUDA, generator=g)
    )
    sc = cache.scale_view()
    sc.copy_(torch.randint(122, 128, sc.shape, dtype=torch.uint8, device=CUDA, generator=g))
    table = (
        torch.randperm(pages + 2, device=CUDA, generator=g)[:pages].to(torch.int32).view(1, pages)
    )
    q, w = make_queries(3, 32, 128, seed=4, device=CUDA)
    req = torch.zeros(3, dtype=torch.int32, device=CUDA)
    pos = torch.tensor([n - 1, (1 << 20) - 1, 70000], dtype=torch.int32, device=CUDA)
    args = (q, w, cache, table, req, pos, 1)
    got = paged_index_topk(*args, 512)
    logits = index_logits(*args)
    nv = visible_entries(req, pos, 1)
    assert torch.equal(got, index_topk(logits, nv, 512, backend="torch"))
    assert bool((got >= 0).all()) and bool((got.diff(dim=1) > 0).all())
    # Several segments (running merge) and a row alone give the same answer.
    assert torch.equal(paged_index_topk(*args, 512, segment=1 << 16), got)
    one = paged_index_topk(q[1:2], w[1:2], cache, table, req[1:2], pos[1:2], 1, 512)
    assert torch.equal(one, got[1:2])


def test_gpu_many_segments_eager_and_graph_replay() -> None:
    """Rows of many segments (the running merge across segments), eagerly and under CUDA-graph
    replay into a poisoned output, equal the torch reference bitwise."""
    n, ps = 150_000, 64
    pages = -(-n // ps)
    g = torch.Generator(device=CUDA).manual_seed(21)
    cache = PagedCache.allocate("mxfp4", 128, ps, pages + 3, device=CUDA)
    cache.storage.copy_(
        torch.randint(0, 256, cache.storage.shape, dtype=torch.uint8, device=CUDA, generator=g)
    )
    cache.scale_view().copy_(
        torch.randint(
            121, 128, cache.scale_view().shape, dtype=torch.uint8, device=CUDA, generator=g
        )
    )
    table = torch.randperm(pages + 3, device=CUDA, generator=g)[:pages].to(torch.int32).view(1, -1)
    q, w = make_queries(6, 32, 128, seed=22, device=CUDA)
    req = torch.tensor([0, 0, 0, -1, 0, 0], dtype=torch.int32, device=CUDA)
    pos = torch.tensor([n - 1, 99_000, 20_000, 7, 300, 70_001], dtype=torch.int32, device=CUDA)
    args = (q, w, cache, table, req, pos, 1)
    nv = visible_entries(req, pos, 1)
    ref = index_topk(index_logits(*args), nv, 512, backend="torch")
    seg = 1 << 14  # 10 segments
    assert torch.equal(paged_index_topk(*args, 512, segment=seg), ref)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        paged_index_topk(*args, 512, segment=seg, validate=False)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = paged_index_topk(*args, 512, segment=seg, validate=False)
    out.fill_(-7)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, ref)


def test_gpu_visible_counts_equal_torch() -> None:
    """The fused call's n(p) kernel (one launch) == `visible_entries` on the GPU, bitwise."""
    from test_paged_topk import visible_cases

    from ds41_indexer.ops.topk.triton_kernels import visible_counts

    for req, pos, ratio in visible_cases():
        got = visible_counts(req.to(CUDA), pos.to(CUDA), ratio, empty)
        assert torch.equal(got.cpu(), visible_entries(req, pos, ratio))


def test_gpu_cuda_graph_replay_equals_eager() -> None:
    sc, q, w, req, pos = flash_setup("mxfp4", 5)
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    eager = paged_index_topk(*args, 512, validate=False)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        paged_index_topk(*args, 512, validate=False)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = paged_index_topk(*args, 512, validate=False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_gpu_bf16_logits() -> None:
    sc, q, w, req, pos = flash_setup("mxfp4", 6)
    args = (q, w, sc.cache, sc.block_table, req, pos, 1)
    f32 = index_logits(*args)
    b16 = index_logits(*args, out_dtype=torch.bfloat16)
    assert torch.equal(b16, f32.to(torch.bfloat16))


def tie_heavy_rows(t: int, n: int, seed: int) -> torch.Tensor:
    """[t, n] fp32 on the GPU: every fourth row distinct, the others full of exact ties
    (bf16-collapsed scores, a few levels, +-0.0 and -inf runs)."""
    g = torch.Generator(device=CUDA).manual_seed(seed)
    x = torch.randn(t, n, device=CUDA, generator=g)
    kind = torch.arange(t, device=CUDA)[:, None] % 4
    levels = x.mul(2).round().div(2)
    collapsed = (1 + x * 1e-3).to(torch.bfloat16).float()
    zeros = torch.where(x < 0, -0.0, 0.0) + torch.where(x > 1.5, float("-inf"), 0.0)
    return torch.where(
        kind == 0, x, torch.where(kind == 1, levels, torch.where(kind == 2, collapsed, zeros))
    )


@pytest.mark.parametrize(
    ("rows", "n"),
    [(1, 4096), (7, 5000), (64, 131072), (256, 65536), (2, 1 << 20), (1, (1 << 20) + 77)],
)
def test_gpu_topk_bitwise_equals_torch_reference(rows: int, n: int) -> None:
    """The Triton selector == the torch reference, bitwise, with ties, -0.0/+0.0, -inf, rows
    with fewer than k visible entries and empty rows; both long-row strategies."""
    logits = tie_heavy_rows(rows, n, seed=rows + n)
    g = torch.Generator(device=CUDA).manual_seed(n)
    nv = torch.randint(0, n + 1, (rows,), device=CUDA, generator=g, dtype=torch.int32)
    nv[0] = n
    if rows > 2:
        nv[1], nv[2] = 0, 300  # empty, fewer than k
    for k in (1, 512):
        got = index_topk(logits, nv, k)
        assert torch.equal(got, index_topk(logits, nv, k, backend="torch")), k
        # Each row alone gives its batch answer.
        assert torch.equal(index_topk(logits[-1:], nv[-1:], k), got[-1:])
        if n > 4096:  # the split selector and one program per row, whatever the row count
            for split in (False, True):
                assert torch.equal(index_topk_triton(logits, nv, k, empty, split=split), got)


def test_gpu_split_selector_graph_replays_with_new_data() -> None:
    """The split selector's last slice per row merges and resets the row's counter: a captured
    call replayed on fresh scores each time (both slice kinds, 1 and 40 rows) == the torch
    reference, and the counters are all zero afterwards."""
    for rows, n in ((1, 131072 + 5), (40, 20000)):
        logits = tie_heavy_rows(rows, n, seed=rows)
        g = torch.Generator(device=CUDA).manual_seed(rows)
        nv = torch.randint(n // 2, n + 1, (rows,), device=CUDA, generator=g, dtype=torch.int32)
        index_topk(logits, nv, 512)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = index_topk(logits, nv, 512, validate=False)
        for rep in range(3):
            logits.copy_(tie_heavy_rows(rows, n, seed=rows + 100 * rep + 1).roll(rep, dims=0))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, index_topk(logits, nv, 512, backend="torch")), (rows, rep)
        assert not bool(done_counters(rows, CUDA).any())


def test_gpu_logits_and_topk_row_invariance_1_to_256_rows_and_graph() -> None:
    """Mixed requests (prefill chunks and decode rows): a row's logits and top-k are bitwise the
    same in batches of 1..256 rows and under CUDA-graph replay."""
    sc = make_scenario(
        "mxfp4", [3000, 700, 1900], di=128, hi=32, page_size=64, seed=21, device=CUDA
    )
    g = torch.Generator().manual_seed(22)
    req = torch.randint(0, 3, (256,), generator=g).to(torch.int32)
    lens = torch.tensor([3000, 700, 1900])
    pos = (torch.rand(256, generator=g) * lens[req.long()]).long().clamp(min=0).to(torch.int32)
    req, pos = req.to(CUDA), pos.to(CUDA)
    q, w = make_queries(256, 32, 128, seed=23, device=CUDA)
    args = (sc.cache, sc.block_table)
    full_l = index_logits(q, w, *args, req, pos, 1)
    full_k = paged_index_topk(q, w, *args, req, pos, 1, 512)
    for size in (1, 2, 8, 64, 255):
        s = slice(256 - size, 256)
        assert torch.equal(index_logits(q[s], w[s], *args, req[s], pos[s], 1), full_l[s]), size
        assert torch.equal(paged_index_topk(q[s], w[s], *args, req[s], pos[s], 1, 512), full_k[s])
    nv = visible_entries(req, pos, 1)
    assert torch.equal(full_k.cpu(), index_topk(full_l.cpu(), nv.cpu(), 512, backend="torch"))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        paged_index_topk(q, w, *args, req, pos, 1, 512, validate=False)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_k = paged_index_topk(q, w, *args, req, pos, 1, 512, validate=False)
        out_l = index_logits(q, w, *args, req, pos, 1, validate=False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out_k, full_k) and torch.equal(out_l, full_l)


def test_gpu_extreme_scale_bytes() -> None:
    """Tiles with scale bytes 0, 1 and 253 (outside the tensor-core path's range) decode exactly."""
    sc = make_scenario("mxfp4", [200], di=128, hi=32, page_size=64, seed=24)
    cache, table = sc.cache, sc.block_table
    page = int(table[0, 1])  # entries 64..127; the other pages stay on the fast path
    data = cache.data_view()[page]
    data.copy_(data & 0x55)  # codes <= 5: 3 * 2**126 stays finite
    g = torch.Generator().manual_seed(25)
    choice = torch.tensor([0, 1, 253], dtype=torch.uint8)
    cache.scale_view()[page] = choice[
        torch.randint(0, 3, cache.scale_view()[page].shape, generator=g)
    ]
    from ds41_cache.insert import gather

    e = torch.arange(200)
    slots = table[0].long()[e // 64] * 64 + e % 64
    sc.keys[0] = gather(cache, slots, backend="torch").double()
    q, w = make_queries(2, 32, 128, seed=26)
    q = (q.float() * 2.0**-60).to(torch.bfloat16)
    req = torch.tensor([0, 0], dtype=torch.int32)
    pos = torch.tensor([199, 100], dtype=torch.int32)
    ref, bound = reference_logits(sc, q, w, req, pos, 1, 256)
    gcache = PagedCache(
        cache.fmt,
        cache.dim,
        cache.page_size,
        cache.num_pages,
        cache.page_stride,
        cache.storage.to(CUDA),
    )
    got = index_logits(
        q.to(CUDA), w.to(CUDA), gcache, table.to(CUDA), req.to(CUDA), pos.to(CUDA), 1
    )
    got = got.cpu().double()
    fin = torch.isfinite(ref)
    assert torch.equal(fin, torch.isfinite(got))
    assert bool(((got - ref).abs()[fin] <= 1e-5 * bound[fin] + 1e-30).all())


def test_gpu_scale_range_edges() -> None:
    """The fp16 path at the edges of its range (block spans of 32, scale bytes 250 and 10, a
    query head spanning 2^28) and a program on the general path (span 33) on the H200."""
    sc, q, w, req, pos = scale_edge_scenario(CUDA)
    got = index_logits(q, w, sc.cache, sc.block_table, req, pos, 1)
    ref, bound = reference_logits(sc, q.cpu(), w.cpu(), req.cpu(), pos.cpu(), 1, got.shape[1])
    got = got.cpu()
    assert torch.equal(torch.isinf(got), torch.isinf(ref))
    fin = torch.isfinite(ref)
    assert bool(((got.double() - ref).abs()[fin] <= 1e-5 * bound[fin] + 1e-30).all())
    for i in range(len(req)):  # rows alone
        s = slice(i, i + 1)
        one = index_logits(q[s], w[s], sc.cache, sc.block_table, req[s], pos[s], 1)
        assert torch.equal(one.cpu(), got[s])
