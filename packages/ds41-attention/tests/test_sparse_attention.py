"""`sparse_attention` against the float64 reference, edge cases and bitwise batch invariance.

Backends: "torch" (CPU) and "triton" (interpreter on CPU, the kernels on a GPU).

What the CPU tests prove: the interpreter runs the Triton kernel with everything in
fp32 (`UPCAST`: decoded tiles, P and the dots; the interpreter's bf16 dot is unreliable),
so it checks the algorithm (tiling, masking, the online softmax, the sink, the decode, the
addressing) and that a row's bits do not depend on the batch *for that configuration*. The GPU
runs the bf16 branches and the Gluon kernel; only `test_gpu.py` checks those bits.

Tolerances. Every cache format decodes exactly (SPEC section 4: each decoded value is a bf16),
and both paths compute scores, softmax and accumulation in fp32, so the error against the
float64 reference is the final bf16 rounding of the output (half an ulp: 2^-9 relative) plus
fp32 accumulation noise (~1e-6 of the largest entry). The same bound therefore holds for every
format; we allow 2x the rounding term plus 1e-5 of the row's largest |entry|. On the GPU the
PV product takes P in bf16 (2^-9 relative per weight), which adds up to 2^-9 of the largest
|entry|: there the second term is 2^-8. lse excludes the output rounding: fp32 only.
"""

from __future__ import annotations

import math

import pytest
import torch
from attn_helpers import max_abs_entry, random_cache, random_q, random_sink, random_slots

from ds41_attention import reference_sparse_attention, sparse_attention

D_TINY = 64
BACKENDS = [
    pytest.param("torch", id="torch"),
    pytest.param("triton", id="triton", marks=pytest.mark.interpreter),
]


def _dev(backend: str, device: torch.device) -> torch.device:
    return device if backend == "triton" else torch.device("cpu")


def _to(args, dev):
    return tuple(a.to(dev) if isinstance(a, torch.Tensor) else _cache_to(a, dev) for a in args)


def _cache_to(c, dev):
    if c is None or not hasattr(c, "storage"):
        return c
    return type(c)(c.fmt, c.dim, c.page_size, c.num_pages, c.page_stride, c.storage.to(dev))


def make_args(
    rows,
    heads,
    w,
    k,
    wfmt="mxfp8",
    cfmt="nvfp4",
    *,
    seed=0,
    page=16,
    pad=512,
    duplicates=False,
    neg_frac=0.1,
    w_lens=None,
    k_lens=None,
    dim=D_TINY,
):
    g = torch.Generator().manual_seed(seed)
    wc = random_cache(wfmt, dim, page, max(2, -(-2 * w // page)), g, pad=pad)
    ss, sl = random_slots(
        rows, w, wc.num_slots, g, lens=w_lens, duplicates=duplicates, neg_frac=neg_frac
    )
    if k:
        cc = random_cache(cfmt, dim, page, max(2, -(-2 * k // page)), g, pad=pad)
        cs, cl = random_slots(
            rows, k, cc.num_slots, g, lens=k_lens, duplicates=duplicates, neg_frac=neg_frac
        )
    else:
        cc = cs = cl = None
    q = random_q(rows, heads, dim, g)
    sink = random_sink(heads, g)
    return (q, wc, ss, sl, cc, cs, cl, sink, dim**-0.5)


def check(out, lse, args, device):
    cpu = _to(args, torch.device("cpu"))
    ref, rlse = reference_sparse_attention(*cpu)
    out, lse = out.cpu(), lse.cpu()
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert out.shape == ref.shape and lse.shape == rlse.shape
    vmax = (
        max_abs_entry(cpu[1])
        if cpu[4] is None
        else max(max_abs_entry(cpu[1]), max_abs_entry(cpu[4]))
    )
    p_term = 2.0**-8 if device.type == "cuda" else 1e-5
    tol = 2.0**-8 * ref.abs() + p_term * vmax
    err = (out.double() - ref).abs()
    assert not torch.isnan(out.float()).any(), "NaN (or an unwritten output element)"
    assert (err <= tol).all(), f"max err {float(err.max())}, vmax {vmax}"
    fin = torch.isfinite(rlse)
    assert torch.equal(fin, torch.isfinite(lse)), "lse finiteness differs"
    assert (lse[~fin] == -math.inf).all()
    assert torch.allclose(lse.double()[fin], rlse[fin], rtol=2e-6, atol=1e-5)


def run(args, backend, device, **kw):
    dev = _dev(backend, device)
    a = _to(args, dev)
    return sparse_attention(*a, backend=backend, **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "wfmt,cfmt,heads",
    [
        ("mxfp8", "nvfp4", 4),
        ("mxfp8", "mxfp8", 16),
        ("mxfp8", "bf16", 4),
        ("bf16", "nvfp4", 4),
        ("mxfp8", None, 4),
    ],
)
def test_formats_match_reference(backend, wfmt, cfmt, heads, device):
    args = make_args(6, heads, 8, 40 if cfmt else 0, wfmt, cfmt or "nvfp4", seed=heads)
    out, lse = run(args, backend, device)
    check(out, lse, args, _dev(backend, device))


@pytest.mark.interpreter
def test_split_kv_fast_path_matches_reference(device):
    args = make_args(3, 4, 8, 100, seed=7)
    out, lse = run(args, "triton", device, batch_invariant=False)
    check(out, lse, args, device)
    # an explicit large split count, uneven over the tiles, through the launcher
    from ds41_attention.ops.sparse_attention.launch import launch_sparse_attention

    out2, lse2 = launch_sparse_attention(*_to(args, device), batch_invariant=False, splits=3)
    check(out2, lse2, args, device)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_128_full_lengths(backend, device):
    args = make_args(
        2, 4, 128, 16, seed=3, page=64, w_lens=torch.tensor([128, 77]), k_lens=torch.tensor([16, 5])
    )
    out, lse = run(args, backend, device)
    check(out, lse, args, _dev(backend, device))


def test_torch_large_topk_and_heads():
    """One larger case on the torch path: K = 2048 compressed entries, H = 64, D = 512."""
    args = make_args(2, 64, 128, 2048, seed=4, page=64, dim=512, k_lens=torch.tensor([2048, 1500]))
    out, lse = run(args, "torch", torch.device("cpu"))
    check(out, lse, args, torch.device("cpu"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_padded_stride_duplicates_and_unaligned_pad(backend, device):
    args = make_args(5, 4, 8, 24, seed=5, pad=48, duplicates=True, neg_frac=0.3)
    out, lse = run(args, backend, device)
    check(out, lse, args, _dev(backend, device))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_rows_all_minus_one_and_zero_lengths(backend, device):
    args = list(make_args(4, 4, 8, 16, seed=6, neg_frac=0.0))
    args[2][0] = -1  # row 0: every window slot -1 ...
    args[5][0] = -1  # ... and every compressed slot -1 (lengths stay > 0)
    args[3][1] = 0  # row 1: both lengths 0
    args[6][1] = 0
    args[3][0] = 8
    args[6][0] = 16
    args[6][2] = 0  # row 2: window only
    out, lse = run(tuple(args), backend, device)
    check(out, lse, tuple(args), _dev(backend, device))
    assert (out[:2].cpu() == 0).all() and (lse[:2].cpu() == -math.inf).all()
    assert torch.isfinite(lse[2:].cpu()).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinite_sinks(backend, device):
    args = list(make_args(3, 4, 8, 16, seed=8))
    args[7] = torch.tensor([math.inf, -math.inf, 0.5, -math.inf])
    out, lse = run(tuple(args), backend, device)
    check(out, lse, tuple(args), _dev(backend, device))
    out = out.cpu()
    assert (out[:, 0] == 0).all()  # +inf sink takes all the mass, without NaN
    # -inf sink: a plain softmax, so lse is unchanged and the output is not damped
    assert torch.isfinite(out.float()).all()


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["huge", "tiny"])
def test_huge_and_tiny_logits(backend, sign, device):
    """Scores around +-3e3 (exp overflows / underflows without the max shift): no NaN/inf."""
    g = torch.Generator().manual_seed(9)
    wc = random_cache("mxfp8", D_TINY, 16, 2, g, positive=True, scale_lo=122, scale_hi=124)
    cc = random_cache("nvfp4", D_TINY, 16, 4, g, positive=True)
    ss, sl = random_slots(3, 8, wc.num_slots, g)
    cs, cl = random_slots(3, 24, cc.num_slots, g)
    q = (sign * torch.rand(3, 4, D_TINY, generator=g) * 4).to(torch.bfloat16)
    args = (q, wc, ss, sl, cc, cs, cl, random_sink(4, g), 8.0)
    out, lse = run(args, backend, device)
    fin = lse.cpu()[torch.isfinite(lse.cpu())]
    assert fin.abs().max() > 500.0, "test did not reach large logits"
    check(out, lse, args, _dev(backend, device))


def _select(args, idx):
    q, wc, ss, sl, cc, cs, cl, sink, scale = args
    pick = lambda x: None if x is None else x[idx]
    return (q[idx], wc, ss[idx], sl[idx], cc, pick(cs), pick(cl), sink, scale)


def _pad_rows(args, n):
    q, wc, ss, sl, cc, cs, cl, sink, scale = args
    return (
        torch.cat([q, q[:n].flip(0)]),
        wc,
        torch.cat([ss, torch.full_like(ss[:n], -1)]),
        torch.cat([sl, torch.zeros_like(sl[:n])]),
        cc,
        torch.cat([cs, torch.full_like(cs[:n], -1)]),
        torch.cat([cl, torch.zeros_like(cl[:n])]),
        sink,
        scale,
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_invariance_bitwise(backend, device):
    """Each row equals the row computed alone, in a permuted batch, in a padded batch."""
    rows = 10
    g = torch.Generator().manual_seed(10)
    # prefill-like rows (short windows, few compressed entries) mixed with decode-like rows
    w_lens = torch.where(
        torch.arange(rows) % 2 == 0,
        torch.full((rows,), 8),
        torch.randint(1, 8, (rows,), generator=g),
    )
    k_lens = torch.where(
        torch.arange(rows) % 2 == 0,
        torch.full((rows,), 40),
        torch.randint(0, 40, (rows,), generator=g),
    )
    args = _to(
        make_args(rows, 4, 8, 40, seed=11, w_lens=w_lens, k_lens=k_lens), _dev(backend, device)
    )
    full_o, full_l = sparse_attention(*args, backend=backend)
    for i in range(rows):
        o, l = sparse_attention(*_select(args, torch.tensor([i])), backend=backend)
        assert torch.equal(o[0], full_o[i]) and torch.equal(l[0], full_l[i]), i
    perm = torch.randperm(rows, generator=g)
    o, l = sparse_attention(*_select(args, perm), backend=backend)
    assert torch.equal(o, full_o[perm]) and torch.equal(l, full_l[perm])
    for n in (2, 5):
        o, l = sparse_attention(*_select(args, perm[:n]), backend=backend)
        assert torch.equal(o, full_o[perm[:n]]) and torch.equal(l, full_l[perm[:n]])
    o, l = sparse_attention(*_pad_rows(args, 3), backend=backend)
    assert torch.equal(o[:rows], full_o) and torch.equal(l[:rows], full_l)
    assert (o[rows:] == 0).all() and (l[rows:] == -math.inf).all()


def test_zero_rows():
    args = make_args(1, 4, 8, 16, seed=12)
    empty_args = _select(args, torch.arange(0))
    out, lse = sparse_attention(*empty_args, backend="torch")
    assert out.shape == (0, 4, D_TINY) and lse.shape == (0, 4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("extra", [64, 1], ids=["even-stride", "odd-stride"])
def test_strided_q_views(backend, extra, device):
    """q as a view into a wider buffer (even strides: read in place; odd: copied first)."""
    args = list(make_args(3, 4, 8, 16, seed=13))
    g = torch.Generator().manual_seed(14)
    wide = torch.randn(3, 4, D_TINY + extra, generator=g).to(torch.bfloat16)
    wide[..., :D_TINY] = args[0]
    dev = _dev(backend, device)
    a = list(_to(tuple(args), dev))
    a[0] = wide.to(dev)[..., :D_TINY]
    assert not a[0].is_contiguous()
    out, lse = sparse_attention(*a, backend=backend)
    check(out, lse, tuple(args), dev)


@pytest.mark.parametrize("backend", BACKENDS)
def test_caches_written_by_cache_insert(backend, device):
    """Caches filled through `ds41_cache.insert` from real latents; the kernels' decoders
    agree bitwise with `ds41_cache.insert.gather`."""
    from ds41_attention.ops.sparse_attention.records import gather_decode
    from ds41_cache import PagedCache
    from ds41_cache.insert import gather, insert

    g = torch.Generator().manual_seed(15)
    caches = []
    for fmt, n in (("mxfp8", 32), ("nvfp4", 64)):
        c = PagedCache.allocate(fmt, D_TINY, 16, n // 16, page_stride=2048)
        x = (torch.randn(n, D_TINY, generator=g) * 3).to(torch.bfloat16)
        insert(c, x, torch.arange(n, dtype=torch.int32), backend="torch")
        slots = torch.arange(n)
        assert torch.equal(gather(c, slots, backend="torch"), gather_decode(c, slots))
        caches.append(c)
    ss, sl = random_slots(4, 8, 32, g)
    cs, cl = random_slots(4, 24, 64, g)
    args = (
        random_q(4, 4, D_TINY, g),
        caches[0],
        ss,
        sl,
        caches[1],
        cs,
        cl,
        random_sink(4, g),
        0.125,
    )
    out, lse = run(args, backend, device)
    check(out, lse, args, _dev(backend, device))


@pytest.mark.interpreter
def test_partial_head_block_matches_reference_and_stays_invariant(device):
    """H=20 over head blocks of 16 (the second block is partial: masked heads)."""
    from ds41_attention.ops.sparse_attention.launch import KernelConfig, launch_sparse_attention

    cfg = KernelConfig(16, 16, 4, 1)
    rows = 5
    k_lens = torch.tensor([40, 0, 17, 40, 3])
    args = _to(make_args(rows, 20, 8, 40, seed=12, k_lens=k_lens), device)
    full_o, full_l = launch_sparse_attention(*args, config=cfg)
    check(full_o, full_l, args, device)
    for i in (0, 2):
        o, l = launch_sparse_attention(*_select(args, torch.tensor([i])), config=cfg)
        assert torch.equal(o[0], full_o[i]) and torch.equal(l[0], full_l[i]), i
    o, l = launch_sparse_attention(*_pad_rows(args, 2), config=cfg)
    assert torch.equal(o[:rows], full_o) and torch.equal(l[:rows], full_l)
    assert (o[rows:] == 0).all() and (l[rows:] == -math.inf).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_inputs_are_skipped_unvalidated(backend, device):
    """validate=False: a slot >= num_slots counts as -1 and lengths beyond W / K are clamped,
    on every backend; nothing is read out of bounds. Same result as the cleaned inputs."""
    args = list(
        _to(make_args(3, 4, 8, 16, seed=21, w_lens=torch.full((3,), 8)), _dev(backend, device))
    )
    clean = list(args)
    ss, cs = args[2].clone(), args[5].clone()
    ss[:, 2] = args[1].num_slots + 10**6
    cs[:, 4] = 2**31 - 1
    cs[1, 0] = args[4].num_slots
    args[2], args[5] = ss, cs
    args[3] = args[3] + 1000
    args[6] = args[6] + 50
    clean[2] = torch.where(ss >= args[1].num_slots, -1, ss)
    clean[5] = torch.where(cs >= args[4].num_slots, -1, cs)
    clean[6] = torch.full_like(args[6], 16)
    out, lse = sparse_attention(*args, backend=backend, validate=False)
    co, cl = sparse_attention(*clean, backend=backend)
    assert torch.equal(out, co) and torch.equal(lse, cl)
    check(out, lse, clean, _dev(backend, device))


@pytest.mark.parametrize("backend", BACKENDS)
def test_row_offsets_beyond_int32(backend, device):
    """A q whose row stride is 2^30 elements (a 32-bit kernel argument): row 4 starts 2^31
    int32 words in (the kernel reads q as words), past a 32-bit row offset, as row 131,072
    of an H 64, D 512 batch does. The storage is reserved but never touched beyond the five
    rows (virtual memory only)."""
    if device.type == "cuda":
        pytest.skip("the GPU test builds real T >= 131,072 batches (test_gpu.py)")
    args = list(make_args(5, 4, 8, 16, seed=31))
    h, d = args[0].shape[1:]
    stride = 2**30
    base = torch.empty(4 * stride + h * d, dtype=torch.bfloat16)
    q = base.as_strided((5, h, d), (stride, d, 1))
    for i in range(5):
        q[i] = args[0][i]
    args[0] = q
    out, lse = sparse_attention(*args, backend=backend)
    check(out, lse, args, torch.device("cpu"))


def test_gluon_split_planner():
    """The Gluon fast path's split count (host logic only; the kernel runs on sm_90): fill
    the SMs once, at most one slice per tile and GLUON_MAX_SPLITS, no split once the rows
    fill the SMs."""
    from ds41_attention.ops.sparse_attention.gluon_launch import (
        GLUON_MAX_SPLITS,
        plan_gluon_splits,
    )

    assert plan_gluon_splits(1, 1, 20, 132) == 20
    assert plan_gluon_splits(8, 1, 20, 132) == 16
    assert plan_gluon_splits(64, 1, 20, 132) == 2
    assert plan_gluon_splits(67, 1, 20, 132) == 1
    assert plan_gluon_splits(4096, 1, 20, 132) == 1
    assert plan_gluon_splits(8, 2, 20, 132) == 8
    assert plan_gluon_splits(1, 1, 68, 132) == GLUON_MAX_SPLITS
    assert plan_gluon_splits(1, 1, 4, 132) == 4
    assert plan_gluon_splits(0, 1, 0, 132) == 1


def test_gluon_persistent_grid_plan():
    """The invariant Gluon kernel's grid (host logic only): one item a program while the
    items (rows x head blocks) fit the SMs, one persistent program an SM past that; the
    fast path's split launches keep the one-item grid."""
    from ds41_attention.ops.sparse_attention.gluon_launch import persistent_programs

    assert persistent_programs(132, 1, 1, 132) == 0
    assert persistent_programs(133, 1, 1, 132) == 132
    assert persistent_programs(67, 2, 1, 132) == 132
    assert persistent_programs(66, 2, 1, 132) == 0
    assert persistent_programs(4096, 1, 1, 78) == 78
    assert persistent_programs(4096, 1, 2, 132) == 0
    assert persistent_programs(0, 1, 1, 132) == 0


def test_persistent_q_rows_view_or_copy():
    """The persistent kernel's [T H, D] view of q: q's own storage where its head rows are
    evenly spaced 16-byte multiples apart (a contiguous q, a column slice of a wider
    projection), a contiguous copy otherwise (heads-major storage); the values are q's."""
    from ds41_attention.ops.sparse_attention.gluon_launch import _q_rows

    g = torch.Generator().manual_seed(3)
    wide = torch.randn(5, 3, 1024, generator=g).to(torch.bfloat16)
    cases = {
        "contiguous": (wide[..., :512].contiguous(), True),
        "column slice": (wide[..., 256:768], True),
        "heads-major": (wide[..., :512].transpose(0, 1).contiguous().transpose(0, 1), False),
        "odd row stride": (torch.randn(5, 3, 516, generator=g).to(torch.bfloat16)[..., :512],
                           False),
    }  # fmt: skip
    for name, (q, shares) in cases.items():
        rows = _q_rows(q)
        assert rows.shape == (15, 512), name
        assert torch.equal(rows, q.reshape(15, 512)), name
        assert (rows.untyped_storage().data_ptr() == q.untyped_storage().data_ptr()) == shares, name
        assert rows.stride(1) == 1 and rows.stride(0) % 8 == 0, name


def test_pair_kernel_selection():
    """The invariant path's pair kernel (two CTAs a row) while every (row, head block) has two
    SMs in one wave, the one-CTA kernel past that (host logic; both give the same bits)."""
    from ds41_attention.ops.sparse_attention.gluon_launch import use_pair_kernel

    assert use_pair_kernel(1, 1, 132) and use_pair_kernel(66, 1, 132)
    assert not use_pair_kernel(67, 1, 132) and not use_pair_kernel(4096, 1, 132)
    assert use_pair_kernel(33, 2, 132) and not use_pair_kernel(34, 2, 132)
    assert not use_pair_kernel(0, 1, 132)


_PAIR_COMPILE = """
import sys, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from ds41_attention.ops.sparse_attention import gluon_pair_kernels as gp
from ds41_attention.ops.sparse_attention.gluon_launch import _k_stages_offset
fn = gp._gluon_pair_attn_kernel
ptrs = {"q_ptr": "*bf16", "out_ptr": "*bf16", "w_ptr": "*u8", "c_ptr": "*u8",
        "sink_ptr": "*fp32", "lse_ptr": "*fp32", "scale": "fp32"}
odd = {"H", "W", "K", "w_num_slots", "c_num_slots", "scale"}
for wf, cf in ((0, 1), (2, 2)):
    cx = {"W_FMT": wf, "C_FMT": cf, "XBASE": 0, "GDC": True}
    sig, attrs = {}, {}
    for i, n in enumerate(fn.arg_names):
        sig[n] = "constexpr" if n in cx else ptrs.get(n, "*i32" if n.endswith("_ptr") else "i32")
        if sig[n] != "constexpr" and n not in odd:
            attrs[(i,)] = [["tt.divisibility", 16]]
    k = triton.compile(GluonASTSource(fn, sig, cx, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "maxnreg": 168})
    print(wf, cf, k.metadata.shared, _k_stages_offset(k))
"""


def test_pair_kernel_compiles_for_sm90_with_k_stages_at_offset_zero():
    """The pair kernel compiles for sm_90a (no GPU needed) and Triton's shared-memory
    allocation puts its K stages at offset 0, where its bulk copies address them, within the
    H200's 227 KB with the barriers past it: for four K stages (MXFP8 + NVFP4) and for three
    (bf16 caches). In a fresh process without the interpreter, which cannot compile Gluon."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    res = subprocess.run([sys.executable, "-c", _PAIR_COMPILE], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [ln.split() for ln in res.stdout.strip().splitlines()]
    assert [ln[:2] for ln in lines] == [["0", "1"], ["2", "2"]]
    for _wf, _cf, shared, offset in lines:
        assert int(offset) == 0
        assert -(-int(shared) // 1024) * 1024 + 64 <= 227 * 1024
