"""GPU tests: real shapes against the float64 reference, invariance at scale, CUDA graphs.

Every invariant-path test runs on both implementations (`impl`): the portable Triton kernel
and, on a Hopper GPU, the Gluon kernel (D = 512 only). Within each, a row's bits must not
depend on the batch; across them only the float64 bound holds.

Tolerance here is a quick check on realistic inputs (every format decodes exactly, see SPEC
section 4): the bf16 output rounding (half an ulp, 2^-9 relative) plus the bf16 rounding of P
before the tensor-core PV product (up to 2^-8 per weight, so at most 2^-8 of the largest
|entry| of the row). The sound per-element bound, with the score errors of the tensor cores'
truncating accumulation, is checked at adversarial magnitudes in `test_gpu_accuracy.py`
(package README, Accuracy).
"""

from __future__ import annotations

import functools

import pytest
import torch
from attn_helpers import max_abs_entry, random_cache, random_q, random_sink, random_slots

from ds41_attention import reference_sparse_attention, sparse_attention
from ds41_attention.ops.sparse_attention.gluon_launch import (
    gluon_supported,
    launch_gluon_fast,
    launch_gluon_sparse_attention,
)
from ds41_attention.ops.sparse_attention.launch import launch_sparse_attention
from ds41_cache import PagedCache

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
# "gluon" picks the pair kernel (two CTAs a row) for small batches and the one-CTA kernel
# otherwise; "gluon_pair" forces the pair kernel at every batch size
IMPLS = {
    "triton": launch_sparse_attention,
    "gluon": launch_gluon_sparse_attention,
    "gluon_pair": functools.partial(launch_gluon_sparse_attention, pair=True),
}


@pytest.fixture(params=sorted(IMPLS))
def impl(request):
    """The invariant-path implementation under test (skips Gluon off Hopper)."""
    if request.param != "triton" and not gluon_supported(torch.zeros(1, 1, 512, device=CUDA)):
        pytest.skip("the Gluon kernel needs an sm_90 GPU")
    return IMPLS[request.param]


def _problem(h, d, w, k, rows, cfmt, seed, *, wfmt="mxfp8", page=64, lens_full=False):
    g = torch.Generator().manual_seed(seed)
    wc = random_cache(wfmt, d, page, max(4, rows * w // page // 4 + 2), g, device=CUDA)
    cc = random_cache(cfmt, d, page, max(8, 4 * k // page + 2), g, device=CUDA) if k else None
    wl = torch.full((rows,), w) if lens_full else None
    ss, sl = random_slots(rows, w, wc.num_slots, g, lens=wl)
    if k:
        kl = torch.full((rows,), k) if lens_full else None
        cs, cl = random_slots(rows, k, cc.num_slots, g, lens=kl)
        comp = (cc, cs.to(CUDA), cl.to(CUDA))
    else:
        comp = (None, None, None)
    q = random_q(rows, h, d, g).to(CUDA)
    sink = random_sink(h, g).to(CUDA)
    return (q, wc, ss.to(CUDA), sl.to(CUDA), *comp, sink, d**-0.5)


def _check_close(out, lse, args):
    ref, rlse = reference_sparse_attention(*args)
    vmax = max_abs_entry(args[1])
    if args[4] is not None:
        vmax = max(vmax, max_abs_entry(args[4]))
    err = (out.double() - ref).abs()
    tol = 2.0**-8 * ref.abs() + 2.0**-8 * vmax
    assert torch.isfinite(out.float()).all()
    assert (err <= tol).all(), f"max err {err.max().item()} (vmax {vmax})"
    fin = torch.isfinite(rlse)
    assert torch.equal(fin, torch.isfinite(lse))
    assert torch.allclose(lse.double()[fin], rlse[fin], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("h", [4, 16, 64, 128])
@pytest.mark.parametrize("cfmt", ["mxfp8", "nvfp4", "bf16"])
def test_flash_shapes_match_reference(h, cfmt, impl):
    args = _problem(h, 512, 128, 512, 24, cfmt, seed=h)
    out, lse = impl(*args)
    _check_close(out, lse, args)


def _triton_fast(*args):
    return launch_sparse_attention(*args, batch_invariant=False)


@pytest.mark.parametrize("path", ["dispatch", "triton"])
@pytest.mark.parametrize("cfmt", ["mxfp8", "nvfp4", "bf16"])
def test_fast_path_matches_reference(cfmt, path):
    """The fast path as `sparse_attention` dispatches it (the Gluon split path on sm_90) and
    the Triton split path."""
    args = _problem(64, 512, 128, 512, 24, cfmt, seed=7)
    if path == "dispatch":
        out, lse = sparse_attention(*args, batch_invariant=False)
    else:
        out, lse = _triton_fast(*args)
    _check_close(out, lse, args)


def _needs_gluon():
    if not gluon_supported(torch.zeros(1, 1, 512, device=CUDA)):
        pytest.skip("the Gluon kernel needs an sm_90 GPU")


@pytest.mark.parametrize("splits", [2, 7, 32, None])
@pytest.mark.parametrize(
    "wfmt,cfmt,h",
    [("mxfp8", "nvfp4", 64), ("mxfp8", "mxfp8", 128), ("bf16", "bf16", 16), ("mxfp8", None, 64)],
)
def test_gluon_split_matches_reference(wfmt, cfmt, h, splits):
    """The Gluon fast path at forced split counts (32 > the row's 20 tiles: empty slices) and
    the planner's, with rows without keys and short rows: the float64 tolerance, zeros and
    lse = -inf for empty rows; a forced split count keeps a row's bits whatever the batch."""
    _needs_gluon()
    k = 0 if cfmt is None else 512
    args = list(_problem(h, 512, 128, k, 9, cfmt or "nvfp4", seed=81, wfmt=wfmt))
    args[3] = args[3].clone()
    args[3][2] = 0
    args[3][4] = 5
    if k:
        args[6] = args[6].clone()
        args[6][2] = 0
        args[6][4] = 33
    out, lse = launch_gluon_fast(*args, splits=splits)
    _check_close(out, lse, args)
    assert (out[2] == 0).all() and (lse[2] == -float("inf")).all()
    if splits is not None:
        for i in (0, 4, 8):
            o, l = launch_gluon_fast(*_rows(args, torch.tensor([i], device=CUDA)), splits=splits)
            assert torch.equal(o[0], out[i]) and torch.equal(l[0], lse[i]), i


@pytest.mark.parametrize(
    "wfmt,cfmt,h",
    [("mxfp8", "nvfp4", 64), ("mxfp8", "mxfp8", 64), ("mxfp8", "bf16", 64),
     ("bf16", "nvfp4", 64), ("mxfp8", None, 64), ("bf16", "bf16", 64), ("mxfp8", "nvfp4", 128),
     ("mxfp8", "nvfp4", 16)],
)  # fmt: skip
def test_pair_kernel_gives_the_one_cta_bits(wfmt, cfmt, h):
    """The pair kernel (two CTAs a row sharing the decode) gives every row the one-CTA
    kernel's bits: one row, 40 rows of random lengths (some 0) and 150 rows (more CTAs than
    SMs), every format pair, partial and two head blocks. This is what lets the invariant
    path pick a kernel by batch size."""
    _needs_gluon()
    k = 0 if cfmt is None else 512
    for rows, seed in ((1, 91), (40, 92), (150, 93)):
        args = _problem(h, 512, 128, k, rows, cfmt or "nvfp4", seed=seed, wfmt=wfmt)
        po, pl = launch_gluon_sparse_attention(*args, pair=True)
        co, cl = launch_gluon_sparse_attention(*args, pair=False)
        assert torch.equal(po, co) and torch.equal(pl, cl), rows


def _repaged(cache, page):
    """The records of `cache` at the same slots in a cache of `page` tokens a page."""
    n = cache.num_slots
    out = PagedCache.allocate(cache.fmt, cache.dim, page, -(-n // page), device=cache.device)
    for nbytes, src, dst in (
        (cache.data_bytes, cache.data_view(), out.data_view()),
        (cache.scale_bytes, cache.scale_view(), out.scale_view()),
    ):
        if nbytes:
            rows = torch.zeros((out.num_slots, nbytes), dtype=torch.uint8, device=cache.device)
            rows[:n] = src.reshape(n, nbytes)
            dst.copy_(rows.view(out.num_pages, page, nbytes))
    return out


@pytest.mark.parametrize("pages", [(16, 48), (48, 16)])
@pytest.mark.parametrize("rows", [40, 150])
def test_page_size_does_not_change_the_bits(pages, rows, impl):
    """The same records at the same slots in caches of other page sizes give every row the
    same bits: 16 tokens a page (the runner's) and 48 (not a power of two: the Gluon kernels,
    which take the page sizes as constexprs, divide by a constant there, not shift); 40 rows
    run the pair kernel, 150 the one-CTA kernel."""
    args = _problem(64, 512, 128, 512, rows, "nvfp4", seed=rows + pages[0])
    out, lse = impl(*args)
    paged = list(args)
    paged[1] = _repaged(args[1], pages[0])
    paged[4] = _repaged(args[4], pages[1])
    assert (paged[1].page_size, paged[4].page_size) == pages
    o2, l2 = impl(*paged)
    assert torch.equal(o2, out) and torch.equal(l2, lse)


def test_invariant_path_runs_the_pair_kernel_while_rows_fit(monkeypatch):
    """`sparse_attention` takes the pair kernel while every row has two SMs in one wave."""
    _needs_gluon()
    from ds41_attention.ops.sparse_attention import gluon_launch

    calls = []
    real = gluon_launch.launch_gluon_pair

    def spy(*a):
        calls.append(a[0].shape[0])
        return real(*a)

    monkeypatch.setattr(gluon_launch, "launch_gluon_pair", spy)
    half = torch.cuda.get_device_properties(CUDA).multi_processor_count // 2
    for rows in (1, half, half + 1):
        sparse_attention(*_problem(64, 512, 128, 512, rows, "nvfp4", seed=95))
    assert calls == [1, half]


def test_pair_kernel_failing_its_check_falls_back_to_one_cta(monkeypatch):
    """A compiled pair kernel whose K stages are not at shared offset 0 is never launched:
    the dispatcher warns and serves those formats with the one-CTA kernel (same bits), and a
    caller forcing the pair kernel gets the error. H = 1 makes Triton compile a kernel no other
    test has prepared, so the check runs here."""
    _needs_gluon()
    from ds41_attention.ops.sparse_attention import gluon_launch

    monkeypatch.setattr(gluon_launch, "_PAIR_DISABLED", set())
    monkeypatch.setattr(gluon_launch, "_k_stages_offset", lambda kernel: 512)
    args = _problem(1, 512, 128, 512, 3, "nvfp4", seed=97)
    with pytest.warns(RuntimeWarning, match="K stages at shared offset 512"):
        o, l = launch_gluon_sparse_attention(*args)
    co, cl = launch_gluon_sparse_attention(*args, pair=False)
    assert torch.equal(o, co) and torch.equal(l, cl)
    with pytest.raises(gluon_launch.PairKernelUnavailable):
        launch_gluon_sparse_attention(*args, pair=True)


def _ragged(args, seed):
    """args with a quarter of the rows empty (lengths 0), a quarter of one window key and no
    compressed key (one all-but-one-masked tile), the rest as drawn: items of 1 to 20 tiles."""
    q, wc, ss, sl, cc, cs, cl, sink, scale = args
    g = torch.Generator().manual_seed(seed)
    kind = torch.randint(0, 4, (q.shape[0],), generator=g).to(CUDA)
    sl = torch.where(kind == 0, 0, torch.where(kind == 1, 1, sl))
    if cl is not None:
        cl = torch.where(kind <= 1, 0, cl)
    return (q, wc, ss, sl, cc, cs, cl, sink, scale)


@pytest.mark.parametrize(
    "wfmt,cfmt,h,rows",
    [("mxfp8", "nvfp4", 64, 333), ("mxfp8", "mxfp8", 16, 301), ("mxfp8", None, 128, 150),
     ("bf16", "nvfp4", 64, 200), ("mxfp8", "bf16", 40, 333)],
)  # fmt: skip
def test_persistent_grid_gives_the_one_item_bits(monkeypatch, wfmt, cfmt, h, rows):
    """Past one wave the Gluon kernel runs persistent programs: each walks several (row, head
    block) items with its rings running on across them, a later item's Q loaded and every
    output stored by TMA. Every row must get the one-item grid's bits, with one program an
    SM (the launcher's choice), with 7 programs (up to 48 items each, uneven counts) and at
    a batch within one wave (forced): empty and one-key rows, every format pair, H below,
    at and above one head block of 64 (a partial block reads the next row's Q heads by TMA)."""
    from ds41_attention.ops.sparse_attention import gluon_launch

    if not gluon_supported(torch.zeros(1, 1, 512, device=CUDA)):
        pytest.skip("the Gluon kernel needs an sm_90 GPU")
    k = 0 if cfmt is None else 512
    args = _ragged(_problem(h, 512, 128, k, rows, cfmt or "nvfp4", seed=rows + h, wfmt=wfmt),
                   seed=h)  # fmt: skip
    real = gluon_launch.persistent_programs
    plans = {"one-item": lambda *a: 0, "default": real, "7 programs": lambda *a: 7}
    res = {}
    for name, plan in plans.items():
        monkeypatch.setattr(gluon_launch, "persistent_programs", plan)
        res[name] = launch_gluon_sparse_attention(*args, pair=False)
        if name == "default":
            assert real(rows, -(-h // 64), 1, gluon_launch._num_sms(None)) > 0
    small = tuple(a[:40] if isinstance(a, torch.Tensor) and a.shape[:1] == (rows,) else a
                  for a in args)  # fmt: skip
    ref_small = launch_gluon_sparse_attention(*small, pair=False)  # one wave: one-item grid
    monkeypatch.setattr(gluon_launch, "persistent_programs", lambda *a: 5)
    forced_small = launch_gluon_sparse_attention(*small, pair=False)
    monkeypatch.undo()
    ref_o, ref_l = res["one-item"]
    _check_close(ref_o, ref_l, args)
    for name in ("default", "7 programs"):
        o, lse = res[name]
        assert torch.equal(o, ref_o) and torch.equal(lse, ref_l), name
    assert torch.equal(forced_small[0], ref_small[0]) and torch.equal(forced_small[1], ref_small[1])
    assert torch.equal(ref_small[0], ref_o[:40])


def test_persistent_grid_reads_strided_q():
    """The persistent kernel's Q descriptor covers q's own strides (a column slice of a wider
    projection) and copies a q whose head rows are not evenly spaced (heads-major storage):
    both give the contiguous q's bits."""
    if not gluon_supported(torch.zeros(1, 1, 512, device=CUDA)):
        pytest.skip("the Gluon kernel needs an sm_90 GPU")
    args = list(_problem(64, 512, 128, 512, 300, "nvfp4", seed=113))
    ref = launch_gluon_sparse_attention(*args, pair=False)
    wide = torch.randn(300, 64, 1024, device=CUDA).to(torch.bfloat16)
    wide[..., 256:768] = args[0]
    heads_major = args[0].transpose(0, 1).contiguous().transpose(0, 1)
    for q in (wide[..., 256:768], heads_major):
        args[0] = q
        o, lse = launch_gluon_sparse_attention(*args, pair=False)
        assert torch.equal(o, ref[0]) and torch.equal(lse, ref[1])


def test_gluon_fast_single_split_is_the_invariant_kernel():
    _needs_gluon()
    args = _problem(64, 512, 128, 512, 6, "nvfp4", seed=83)
    fo, fl = launch_gluon_fast(*args, splits=1)
    io, il = launch_gluon_sparse_attention(*args)
    assert torch.equal(fo, io) and torch.equal(fl, il)


def test_gluon_fast_path_takes_the_pair_kernel_for_two_slices():
    """Where the planner would cut each row in two (T = 45..66 at H 64) the fast path runs the
    invariant pair kernel (same bits as the invariant path); at T = 44 (three slices) it
    splits, and its bits differ from the invariant path's."""
    from ds41_attention.ops.sparse_attention import gluon_launch

    _needs_gluon()
    args = _problem(64, 512, 128, 512, 64, "nvfp4", seed=89, lens_full=True)
    fo, fl = launch_gluon_fast(*args)
    io, il = launch_gluon_sparse_attention(*args)
    if gluon_launch._pair_serves(args[0], gluon_launch._fmt_key(args[1], args[4])):
        assert torch.equal(fo, io) and torch.equal(fl, il)
    else:
        # DS41_PAIR=0 keeps the invariant path off the pair kernel: the fast path splits
        _check_close(fo, fl, args)
        assert not torch.equal(fo, io)
    first = _rows(args, torch.arange(44, device=CUDA))
    so, sl = launch_gluon_fast(*first)
    _check_close(so, sl, first)
    assert not torch.equal(so, io[:44])


def test_gluon_fast_path_is_not_batch_invariant():
    """The planner splits a row into 20 slices at T = 1 and 16 at T = 8, and T = 64 runs the
    unsplit pair kernel, so the fp32 partial sums, and the bits, of a row differ between those
    batch sizes; each stays within the float64 tolerance."""
    _needs_gluon()
    args = _problem(64, 512, 128, 512, 64, "nvfp4", seed=85, lens_full=True)
    outs = {}
    for n in (1, 8, 64):
        outs[n] = sparse_attention(*_rows(args, torch.arange(n, device=CUDA)),
                                   batch_invariant=False)  # fmt: skip
        first = _rows(args, torch.arange(min(n, 8), device=CUDA))
        _check_close(outs[n][0][:8], outs[n][1][:8], first)
    differs = int(not torch.equal(outs[1][0][0], outs[8][0][0]))
    differs += sum(int(not torch.equal(outs[8][0][i], outs[64][0][i])) for i in range(8))
    assert differs > 0


def test_gluon_fast_path_graph_replay_is_bitwise_eager():
    _needs_gluon()
    args = _problem(64, 512, 128, 512, 4, "nvfp4", seed=87)
    eager_o, eager_l = launch_gluon_fast(*args)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch_gluon_fast(*args)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        go, gl = launch_gluon_fast(*args)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(go, eager_o) and torch.equal(gl, eager_l)


@pytest.mark.parametrize("d,w,k", [(64, 8, 4), (512, 128, 2048), (512, 8, 0), (64, 128, 64)])
def test_other_geometries(d, w, k, impl):
    if d != 512 and impl is not launch_sparse_attention:
        pytest.skip("the Gluon kernel serves D = 512 only")
    args = _problem(16, d, w, k, 9, "nvfp4", seed=d + w + k)
    out, lse = impl(*args)
    _check_close(out, lse, args)


def test_bf16_window(impl):
    args = _problem(64, 512, 128, 64, 7, "bf16", seed=3, wfmt="bf16")
    out, lse = impl(*args)
    _check_close(out, lse, args)


def test_dispatch_picks_gluon_on_hopper():
    """`sparse_attention` runs the Gluon kernel on sm_90 when it is the default (bitwise its
    output), else the Triton kernel, for the invariant and the fast path; backend="gluon"
    forces it."""
    from ds41_attention.sparse_attention import GLUON_DEFAULT

    args = _problem(64, 512, 128, 512, 5, "nvfp4", seed=8)
    out, lse = sparse_attention(*args)
    on = GLUON_DEFAULT and gluon_supported(args[0])
    expect = launch_gluon_sparse_attention if on else launch_sparse_attention
    eo, el = expect(*args)
    assert torch.equal(out, eo) and torch.equal(lse, el)
    fo, fl = sparse_attention(*args, batch_invariant=False)
    fexpect = launch_gluon_fast if on else _triton_fast
    eo, el = fexpect(*args)
    assert torch.equal(fo, eo) and torch.equal(fl, el)
    if gluon_supported(args[0]):
        go, gl = sparse_attention(*args, backend="gluon")
        ko, kl = launch_gluon_sparse_attention(*args)
        assert torch.equal(go, ko) and torch.equal(gl, kl)
        go, gl = sparse_attention(*args, backend="gluon", batch_invariant=False)
        ko, kl = launch_gluon_fast(*args)
        assert torch.equal(go, ko) and torch.equal(gl, kl)


def _rows(args, idx):
    q, wc, ss, sl, cc, cs, cl, sink, scale = args
    if cc is None:
        return (q[idx], wc, ss[idx], sl[idx], None, None, None, sink, scale)
    return (q[idx], wc, ss[idx], sl[idx], cc, cs[idx], cl[idx], sink, scale)


def test_invariance_batches_of_1_to_512(impl):
    """Every row equals the same row computed alone, in any batch composition."""
    pool = 512
    args = _problem(64, 512, 128, 512, pool, "nvfp4", seed=11)
    q, wc, ss, sl, cc, cs, cl, sink, scale = args
    # mix decode-like rows (full window, full top-k) with prefill-like rows (short, partial)
    g = torch.Generator().manual_seed(5)
    decode_like = torch.rand(pool, generator=g) < 0.5
    sl = torch.where(decode_like.to(CUDA), torch.full_like(sl, 128), sl)
    cl = torch.where(decode_like.to(CUDA), torch.full_like(cl, 512), cl)
    args = (q, wc, ss, sl, cc, cs, cl, sink, scale)
    alone = [impl(*_rows(args, torch.tensor([i], device=CUDA))) for i in range(pool)]
    alone_o = torch.cat([a[0] for a in alone])
    alone_l = torch.cat([a[1] for a in alone])
    _check_close(alone_o[:32], alone_l[:32], _rows(args, torch.arange(32, device=CUDA)))
    for n in (1, 2, 7, 64, 255, 512):
        idx = torch.randperm(pool, generator=g)[:n].to(CUDA)
        o, l = impl(*_rows(args, idx))
        assert torch.equal(o, alone_o[idx]), n
        assert torch.equal(l, alone_l[idx]), n
    # padded with empty rows (lengths 0, all -1), as CUDA-graph padding does
    idx = torch.randperm(pool, generator=g)[:100].to(CUDA)
    sub = list(_rows(args, idx))
    pad = 28
    sub[0] = torch.cat([sub[0], sub[0][:pad]])
    sub[2] = torch.cat([sub[2], torch.full_like(sub[2][:pad], -1)])
    sub[3] = torch.cat([sub[3], torch.zeros_like(sub[3][:pad])])
    sub[5] = torch.cat([sub[5], torch.full_like(sub[5][:pad], -1)])
    sub[6] = torch.cat([sub[6], torch.zeros_like(sub[6][:pad])])
    o, l = impl(*sub)
    assert torch.equal(o[:100], alone_o[idx]) and torch.equal(l[:100], alone_l[idx])
    assert (o[100:] == 0).all() and (l[100:] == -float("inf")).all()


@pytest.mark.parametrize("rows", [48, 300])
def test_cuda_graph_replay_is_bitwise_eager(impl, rows):
    """48 rows: one wave (the pair / one-item kernels); 300: the Gluon kernel's persistent
    grid, whose TMA descriptors the graph holds by value."""
    args = _problem(64, 512, 128, 512, rows, "nvfp4", seed=21)
    eager_o, eager_l = impl(*args)
    static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        impl(*static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        go, gl = impl(*static)
    # change the inputs in place to different rows, replay, then restore and replay
    static[0].copy_(args[0].roll(1, 0))
    graph.replay()
    assert not torch.equal(go, eager_o)
    static[0].copy_(args[0])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(go, eager_o) and torch.equal(gl, eager_l)


def test_fast_path_breaks_invariance():
    """The split-KV plan depends on the batch, so a row alone differs from the row in a batch."""
    args = _problem(64, 512, 128, 512, 512, "nvfp4", seed=31, lens_full=True)
    big_o, big_l = sparse_attention(*args, batch_invariant=False)
    differs = 0
    for i in range(8):
        o, _ = sparse_attention(*_rows(args, torch.tensor([i], device=CUDA)), batch_invariant=False)
        differs += int(not torch.equal(o[0], big_o[i]))
    assert differs > 0
    # the batched split result is still correct (its own out and lse)
    _check_close(big_o[:8], big_l[:8], _rows(args, torch.arange(8, device=CUDA)))


def test_hardware_e4m3_decode_matches_integer_decode():
    """The GPU's native e4m3 conversion and the integer helpers decode to identical values."""
    for cfmt in ("mxfp8", "nvfp4"):
        args = _problem(64, 512, 128, 256, 16, cfmt, seed=41)
        hw = launch_sparse_attention(*args, hw_fp8=True)
        sw = launch_sparse_attention(*args, hw_fp8=False)
        assert torch.equal(hw[0], sw[0]) and torch.equal(hw[1], sw[1]), cfmt


@pytest.mark.parametrize(
    "cfg",
    [(64, 32, 8, 1), (64, 64, 16, 1), (32, 64, 4, 2)],
    ids=lambda c: "-".join(map(str, c)),
)
def test_tile_configs_correct_and_invariant(cfg):
    """Other Triton tile configs (small tiles, 16 warps, small head blocks): each matches the
    reference and keeps every row bitwise equal to the row alone and in other batches."""
    from ds41_attention.ops.sparse_attention.launch import KernelConfig

    kc = KernelConfig(*cfg)
    args = _problem(64, 512, 128, 512, 40, "nvfp4", seed=51)
    full_o, full_l = launch_sparse_attention(*args, config=kc)
    _check_close(full_o, full_l, args)
    for i in (0, 17, 39):
        o, l = launch_sparse_attention(*_rows(args, torch.tensor([i], device=CUDA)), config=kc)
        assert torch.equal(o[0], full_o[i]) and torch.equal(l[0], full_l[i]), i
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(2)).to(CUDA)
    o, l = launch_sparse_attention(*_rows(args, perm[:13]), config=kc)
    assert torch.equal(o, full_o[perm[:13]]) and torch.equal(l, full_l[perm[:13]])


def one_key_problem(cfmt: str, device: torch.device) -> tuple[tuple, torch.Tensor]:
    """Rows with exactly one valid key (a window key in the first half of the rows, a
    compressed one in the second), q = 0 and sink = -inf, over caches whose scale bytes span
    a wide range (ue8m0 10..246: entries from 2^-126 to 1.75 * 2^127; NVFP4 e4m3 block scales
    0..0x7E, subnormal ones included) and random codes of both signs. The softmax weight of
    the key is exactly 1 and the denominator exactly 1, so every head's output must be the
    key's decoded entry, bitwise: (args, expected bf16 [T, D])."""
    from ds41_attention.ops.sparse_attention.records import gather_decode

    g = torch.Generator().manual_seed(71)
    rows, half = 256, 128
    wc = random_cache("mxfp8", 512, 64, 4, g, scale_lo=10, scale_hi=246)
    cc = random_cache(cfmt, 512, 64, 4, g, scale_lo=10, scale_hi=246)
    if cfmt == "nvfp4":
        sv = cc.scale_view()
        sv.copy_(torch.randint(0, 0x7F, sv.shape, generator=g).to(torch.uint8))
    ss = torch.full((rows, 4), -1, dtype=torch.int32)
    cs = torch.full((rows, 4), -1, dtype=torch.int32)
    ss[:half, 0] = torch.randperm(wc.num_slots, generator=g)[:half].to(torch.int32)
    cs[half:, 0] = torch.randperm(cc.num_slots, generator=g)[:half].to(torch.int32)
    sl = torch.cat([torch.ones(half), torch.zeros(half)]).to(torch.int32)
    expected = torch.cat([gather_decode(wc, ss[:half, 0]), gather_decode(cc, cs[half:, 0])])
    wc = wc.__class__(wc.fmt, 512, 64, 4, wc.page_stride, wc.storage.to(device))
    cc = cc.__class__(cc.fmt, 512, 64, 4, cc.page_stride, cc.storage.to(device))
    q = torch.zeros(rows, 64, 512, dtype=torch.bfloat16, device=device)
    sink = torch.full((64,), -float("inf"), device=device)
    args = (q, wc, ss.to(device), sl.to(device), cc, cs.to(device), (1 - sl).to(device), sink,
            512**-0.5)  # fmt: skip
    return args, expected.to(device)


@pytest.mark.parametrize("cfmt", ["mxfp8", "nvfp4"])
def test_one_key_rows_give_the_decoded_entry(impl, cfmt):
    """The kernels' decode is exact over the whole range of codes and (nearly) of scales:
    a row whose only key has weight 1 outputs that key's decoded entry bitwise in every head
    (`one_key_problem`), and lse = 0."""
    args, expected = one_key_problem(cfmt, CUDA)
    o, lse = impl(*args)
    assert torch.equal(o, expected[:, None, :].expand_as(o))
    assert torch.equal(lse, torch.zeros_like(lse))


def test_rows_beyond_int32_offsets(impl):
    """T = 131,072 + 8 rows at H 64, D 512: q and out hold 2^32 bf16 elements, so row offsets
    in 32-bit words pass 2^31. The last rows must equal the same rows computed alone."""
    big = 131072 + 8
    args = _problem(64, 512, 128, 512, 8, "nvfp4", seed=61)
    q, wc, ss, sl, cc, cs, cl, sink, scale = args
    bq = torch.empty(big, 64, 512, dtype=torch.bfloat16, device=CUDA)
    bq[:-8].fill_(1.0)
    bq[-8:] = q

    def pad(x, fill):
        head = torch.full((big - 8, *x.shape[1:]), fill, dtype=x.dtype, device=CUDA)
        return torch.cat([head, x])

    bargs = (bq, wc, pad(ss, -1), pad(sl, 0), cc, pad(cs, -1), pad(cl, 0), sink, scale)
    o, l = impl(*bargs)
    ao, al = impl(*args)
    assert torch.equal(o[-8:], ao) and torch.equal(l[-8:], al)
    assert (o[:-8:4096] == 0).all() and (l[:-8:4096] == -float("inf")).all()
    del bq, o, l


def test_out_of_range_inputs_are_skipped_unvalidated(impl):
    """validate=False: slots >= num_slots act as -1 and lengths > W / K are clamped; nothing
    is read out of bounds (the process would fault) and the result equals the clean one."""
    args = list(_problem(64, 512, 128, 512, 6, "nvfp4", seed=71, lens_full=True))
    clean = list(args)
    ss, cs = args[2].clone(), args[5].clone()
    ss[:, 3] = args[1].num_slots + 10**6
    cs[:, 5] = 2**31 - 1
    args[2], args[5] = ss, cs
    args[3] = args[3] + 1000
    args[6] = args[6] + 7
    clean[2] = torch.where(ss > args[1].num_slots - 1, -1, ss)
    clean[5] = torch.where(cs > args[4].num_slots - 1, -1, cs)
    o, l = impl(*args)
    co, cl = impl(*clean)
    torch.cuda.synchronize()
    assert torch.equal(o, co) and torch.equal(l, cl)
