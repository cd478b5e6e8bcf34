"""The Hopper Gluon logits kernel (`ops/logits/gluon_kernels.py`): bitwise the Triton kernel's
logits and group maxima on every span, on the fp16 path and on the general path it takes for
spans outside that path's range; rows alone == in batches; graph replay == eager; float64
bound. GPU tests skip off sm_90."""

from __future__ import annotations

import pytest
import torch
from helpers import make_queries, make_scenario, reference_logits

from ds41_cache.paged import PagedCache
from ds41_indexer import index_logits, paged_index_topk
from ds41_indexer.ops.logits import gluon_launch
from ds41_indexer.ops.logits.gluon_launch import gluon_config, gluon_shape_ok
from ds41_indexer.ops.logits.triton_kernels import paged_logits_triton

CUDA = torch.device("cuda")


def test_gluon_shape_rule() -> None:
    """The Gluon kernel's eligibility depends on the device and the call's shape only."""
    assert gluon_shape_ok("mxfp4", 32, 128, 64, 0, (9, 0))
    assert gluon_shape_ok("mxfp4", 64, 128, 128, 4096, (9, 0))
    assert not gluon_shape_ok("fp8_index", 32, 128, 64, 0, (9, 0))
    assert not gluon_shape_ok("mxfp4", 32, 64, 64, 0, (9, 0))  # Di 64
    assert not gluon_shape_ok("mxfp4", 65, 128, 64, 0, (9, 0))  # more than 64 heads
    assert not gluon_shape_ok("mxfp4", 32, 128, 16, 0, (9, 0))  # tiles span pages
    assert not gluon_shape_ok("mxfp4", 32, 128, 64, 32, (9, 0))  # entry base off a tile
    assert not gluon_shape_ok("mxfp4", 32, 128, 64, 0, (8, 0))
    assert not gluon_shape_ok("mxfp4", 32, 128, 64, 0, (10, 0))


def test_gluon_config_rule() -> None:
    """The program shape (consumer warpgroups, tiles) is a function of the grid size only and
    is one of the shapes the kernel builds; one row keeps short programs."""
    for rows in (1, 8, 64, 256, 4096):
        for spans in (1, 2, 16, 64, 512, 65535):
            nc, tiles = gluon_config(rows, spans)
            assert gluon_config(rows, spans) == (nc, tiles)
            assert (nc, tiles) in ((1, 16), (1, 32), (1, 64), (1, 128), (2, 16))
    assert gluon_config(1, 128) == (2, 16)  # one row of 128K entries
    assert gluon_config(4, 128) == (1, 16)
    assert gluon_config(8, 128) == (1, 32)
    assert gluon_config(1, 1024) == (1, 32)  # one row of 1M entries
    assert gluon_config(32, 32) == (1, 32)  # 32 rows of 32K entries
    assert gluon_config(64, 32) == (1, 64)  # 64 rows of 32K entries
    assert gluon_config(128, 32) == (1, 128)
    assert gluon_config(64, 128) == (1, 128)
    assert gluon_config(256, 128) == (1, 128)
    assert gluon_config(64, 1024) == (1, 128)  # 64 rows of 1M entries
    assert gluon_config(256, 1024) == (1, 128)


def _hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _need_hopper() -> None:
    if not _hopper():
        pytest.skip("needs an sm_90 GPU")


def _mixed(seed: int, rows: int, page_size: int = 64):
    sc = make_scenario(
        "mxfp4", [3000, 700, 1900], di=128, hi=32, page_size=page_size, seed=seed, device=CUDA
    )
    g = torch.Generator().manual_seed(seed + 1)
    req = torch.randint(0, 3, (rows,), generator=g).to(torch.int32)
    lens = torch.tensor([3000, 700, 1900])
    pos = (torch.rand(rows, generator=g) * lens[req.long()]).long().to(torch.int32)
    req[::7] = -1  # padding rows
    q, w = make_queries(rows, 32, 128, seed=seed + 2, device=CUDA)
    return sc, q, w, req.to(CUDA), pos.to(CUDA)


def _edges(seed: int):
    """Di 128 keys with pages whose scale bytes sit at and past the fp16 path's range, and rows
    whose queries are outside it (a head with elements 2^40 apart), so both kernels run; rows
    whose logits are +inf (a weight of 2^110 on queries near 2^20) or NaN (a NaN weight), group
    maxima included."""
    sc, q, w, req, pos = _mixed(seed, 40)
    view = sc.cache.scale_view()
    table = sc.block_table
    for (r, p), (b0, b1, b2, b3) in {
        (0, 0): (140, 108, 120, 130),  # exactly 32 apart: fast
        (0, 3): (250, 218, 240, 250),  # largest byte 250: fast
        (1, 2): (10, 10, 10, 12),  # smallest byte 10: fast
        (2, 1): (150, 117, 130, 140),  # 33 apart: general
        (0, 20): (251, 240, 240, 240),  # above 250: general
        (2, 5): (9, 9, 9, 9),  # below 10: general
    }.items():
        page = int(table[r, p])
        for b, v in enumerate((b0, b1, b2, b3)):
            view[page, :, b] = v
    q = q.clone()
    q[3, 5, 0] = 2.0**20  # head 5 of row 3 spans 2^40: not exact in fp16 after scaling
    q[3, 5, 1:] = q[3, 5, 1:] * 2.0**-20
    q[9, :, :] = 0  # all-zero queries
    # rows 13 and 11 (live): head 7 with queries near 2^20 and a weight of 2^110 (its logits
    # overflow to +inf), head 3 with a NaN weight
    q[13, 7, :] = q[13, 7, :] * 2.0**20
    w = w.clone()
    w[13, 7] = 2.0**110
    w[11, 3] = float("nan")
    return sc, q, w, req, pos


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32) if x.dtype == torch.float32 else x.view(torch.int16)


def _both(sc, q, w, req, pos, *, cand=None, dtype=torch.float32, ratio=1, config=None):
    """(Triton alone, Gluon alone, the Gluon kernel's path per span): logits and group
    maxima."""
    n = sc.block_table.shape[1] * sc.cache.page_size
    t = q.shape[0]
    args = (q, w, sc.cache, sc.block_table, req, pos, ratio)
    out_t = torch.full((t, n), 7.0, device=CUDA).to(dtype)
    out_g = torch.full((t, n), 5.0, device=CUDA).to(dtype)
    gm_t = torch.full((t, -(-n // 64)), 3, dtype=torch.int32, device=CUDA)
    gm_g = torch.full((t, -(-n // 64)), 9, dtype=torch.int32, device=CUDA)
    paged_logits_triton(*args, out_t, cand, gmax=gm_t)
    path = gluon_launch.launch_gluon_logits(*args, out_g, cand, gmax=gm_g, config=config)
    return (out_t, gm_t), (out_g, gm_g), path


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case", ["mixed", "mixed bf16", "mixed candidates", "page 128", "edges", "ratio 4"]
)
def test_gluon_equals_triton_bitwise(case: str) -> None:
    _need_hopper()
    kw: dict[str, object] = {}
    if case == "edges":
        sc, q, w, req, pos = _edges(41)
    else:
        sc, q, w, req, pos = _mixed(42, 64, page_size=128 if case == "page 128" else 64)
    if case == "mixed bf16":
        kw["dtype"] = torch.bfloat16
    if case == "mixed candidates":
        kw["cand"] = torch.rand(q.shape[0], 2900, device=CUDA) < 0.5
    if case == "ratio 4":
        kw["ratio"] = 4
    (out_t, gm_t), (out_g, gm_g), path = _both(sc, q, w, req, pos, **kw)  # type: ignore[arg-type]
    assert torch.equal(_bits(out_g), _bits(out_t))
    assert torch.equal(gm_g, gm_t)
    # most spans took the fp16 path and, on the edge case, some the general path (the test
    # covers both)
    assert int((path == 1).sum()) > path.numel() // 2
    if case == "edges":
        assert int((path == 2).sum()) > 0
        assert bool(torch.isnan(out_g[11, : int(pos[11]) + 1]).all())
        assert bool(torch.isposinf(out_g[13, : int(pos[13]) + 1]).any())


@pytest.mark.gpu
@pytest.mark.parametrize("config", [(1, 16), (1, 32), (1, 64), (1, 128), (2, 16), (2, 32)])
@pytest.mark.parametrize("case", ["mixed candidates", "edges"])
def test_gluon_configs_bitwise(config: tuple[int, int], case: str) -> None:
    """Every program shape the launcher may pick gives the Triton kernel's bits (one or two
    consumer warpgroups, one to eight spans a program, each span flagged on its own, the group
    maxima stored every 32 tiles)."""
    _need_hopper()
    if case == "edges":
        sc, q, w, req, pos = _edges(45)
        cand = None
    else:
        sc, q, w, req, pos = _mixed(46, 64)
        cand = torch.rand(q.shape[0], 2900, device=CUDA) < 0.5
    (out_t, gm_t), (out_g, gm_g), path = _both(sc, q, w, req, pos, cand=cand, config=config)
    assert torch.equal(_bits(out_g), _bits(out_t))
    assert torch.equal(gm_g, gm_t)
    assert int((path == 1).sum()) > path.numel() // 2
    if case == "edges":
        assert int((path == 2).sum()) > 0


@pytest.mark.gpu
def test_gluon_rows_alone_and_graph() -> None:
    """On the Gluon kernel (every call on sm_90): rows alone == in batches of 1..256 mixed
    rows, the fused top-k == the one of the logits, graph replay == eager, float64 bound."""
    _need_hopper()
    sc, q, w, req, pos = _mixed(43, 256)
    assert gluon_launch.use_gluon(q[:1], sc.cache, 0, sc.block_table.shape[1] * 64)
    args = (sc.cache, sc.block_table)
    full = index_logits(q, w, *args, req, pos, 1)
    full_k = paged_index_topk(q, w, *args, req, pos, 1, 512)
    for size in (1, 2, 8, 64, 255):
        s = slice(256 - size, 256)
        assert torch.equal(
            _bits(index_logits(q[s], w[s], *args, req[s], pos[s], 1)), _bits(full[s])
        )
        assert torch.equal(paged_index_topk(q[s], w[s], *args, req[s], pos[s], 1, 512), full_k[s])
    ref, bound = reference_logits(sc, q.cpu(), w.cpu(), req.cpu(), pos.cpu(), 1, full.shape[1])
    got = full.cpu()
    assert torch.equal(torch.isinf(got), torch.isinf(ref))
    fin = torch.isfinite(ref)
    assert bool(((got.double() - ref).abs()[fin] <= 1e-4 * bound[fin] + 1e-30).all())
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        index_logits(q, w, *args, req, pos, 1, validate=False)
        paged_index_topk(q, w, *args, req, pos, 1, 512, validate=False)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_l = index_logits(q, w, *args, req, pos, 1, validate=False)
        out_k = paged_index_topk(q, w, *args, req, pos, 1, 512, validate=False)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(_bits(out_l), _bits(full)) and torch.equal(out_k, full_k)


@pytest.mark.gpu
def test_gluon_bad_pages_read_nothing() -> None:
    """validate=False: table entries past the cache or negative score as zero keys (no read
    outside the storage), as on the Triton kernel."""
    _need_hopper()
    sc, q, w, req, pos = _mixed(44, 16)
    table = sc.block_table.clone()
    table[0, 3] = sc.cache.num_pages + 5
    table[1, 0] = -7
    storage = sc.cache.storage
    cache = PagedCache(
        "mxfp4", 128, 64, sc.cache.num_pages, sc.cache.page_stride, storage[: sc.cache.num_pages]
    )
    args = (q, w, cache, table, req, pos, 1)
    got = index_logits(*args, validate=False)
    assert gluon_launch.use_gluon(q, cache, 0, got.shape[1])
    ref = paged_logits_triton(*args, torch.empty_like(got))
    assert torch.equal(_bits(ref), _bits(got))
    # the spans with such pages take the general path (zero-filled keys are out of the fp16
    # path's range)
    path = gluon_launch.launch_gluon_logits(*args, torch.empty_like(got))
    assert int((path == 2).sum()) > 0
