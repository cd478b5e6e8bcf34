# mypy: allow-untyped-defs, allow-incomplete-defs, allow-untyped-calls
"""Exact, deterministic per-row top-k in Triton (SPEC section 6).

Scores become order-preserving uint32 keys (larger key = larger score, -0.0 folded into +0.0).
Every selection step finds the k-th largest key `thr` of a set held in registers in ascending
entry order with a bitwise search (one bit per step, from the highest bit where a known lower
and upper bound of the answer differ), takes every key above it and the keys equal to it in
entry order until k (the "ties to the lower entry index" rule), and compacts the winners with a
prefix sum, so they stay in ascending entry order. No sort of the row.

A row of at most `CHUNK` entries is one program's set (`_select_from_scores_kernel`). Longer
rows take two passes. The first gives the largest key of every GROUP consecutive entries (the
logits kernel writes these group maxima itself when fused; `_group_max_kernel` otherwise). The
second (`_group_select_kernel`, one program per row) takes tau = the k-th largest group maximum
(of buckets of consecutive groups when a row has many), a lower bound of the row's k-th largest
key: only groups whose maximum is >= tau can hold a winner, and only their entries >= tau are
gathered (typically ~k groups and ~k entries), then selected exactly. The result depends on the
row alone: every step is exact under one total order. (A radix select, four 8-bit
`tl.histogram` passes per chunk, was measured slower than the bitwise search on the H200: see
`scripts/radix_select.py`.)
"""

from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

GROUP = tl.constexpr(64)
"""Entries per group of the first top-k pass (the group maxima, `gmax`)."""


@triton.jit
def _score_to_key(x):
    x = tl.where(x == 0.0, 0.0, x)  # -0.0 and +0.0 tie
    b = x.to(tl.uint32, bitcast=True)
    neg = (b >> 31) != 0
    return tl.where(neg, b ^ 0xFFFFFFFF, b | 0x80000000)


@triton.jit
def _select_chunk(key, valid, k):
    """(key uint32 [C], valid bool [C]) -> (take bool [C], slot int32 [C], kk int32).

    Row order is entry order, so the tie rule is a rank among the keys equal to the threshold.
    """
    n_valid = tl.sum(valid.to(tl.int32), axis=0)
    kk = tl.minimum(n_valid, k)
    hi = tl.max(tl.where(valid, key, 0), axis=0)
    thr = _threshold_in(key, valid, kk, tl.zeros((), tl.uint32), hi)
    gt = valid & (key > thr)
    eq = valid & (key == thr)
    n_gt = tl.sum(gt.to(tl.int32), axis=0)
    eq_rank = tl.cumsum(eq.to(tl.int32), axis=0)
    take = gt | (eq & (eq_rank <= kk - n_gt))
    slot = tl.cumsum(take.to(tl.int32), axis=0) - 1
    return take, slot, kk


@triton.jit
def _select_row_kernel(
    score_ptr,
    nvis_ptr,
    out_ptr,
    n_cols,
    score_stride_t,
    out_stride_t,
    k,
    CHUNK: tl.constexpr,
    K_PAD: tl.constexpr,
):
    """A row of at most CHUNK fp32/bf16 scores -> its top-k entries [k] (ascending, then -1)."""
    t = tl.program_id(0).to(tl.int64)
    n_vis = tl.load(nvis_ptr + t)
    cols = tl.arange(0, CHUNK)
    valid = (cols < n_cols) & (cols < n_vis)
    x = tl.load(score_ptr + t * score_stride_t + cols, mask=valid, other=0.0).to(tl.float32)
    key = _score_to_key(x)
    take, slot, kk = _select_chunk(key, valid, k)
    tl.store(out_ptr + t * out_stride_t + slot, cols, mask=take)
    fill = tl.arange(0, K_PAD)
    tl.store(
        out_ptr + t * out_stride_t + fill,
        tl.full((K_PAD,), -1, tl.int32),
        mask=(fill >= kk) & (fill < k),
    )


# ----------------------------------------------------------------------------- host side

EmptyFn = Callable[[Sequence[int], torch.dtype, torch.device], torch.Tensor]


def k_pad_of(k: int) -> int:
    return max(16, int(triton.next_power_of_2(k)))


def default_chunk(k_pad: int) -> int:
    return max(4096, 4 * k_pad)


def check_chunk(chunk: int, k_pad: int) -> None:
    least = max(2 * k_pad, GROUP.value)
    if chunk < least or chunk & (chunk - 1):
        raise ValueError(
            f"chunk must be a power of two >= max(2 * k_pad, {GROUP.value}) = {least}, got {chunk}"
        )


def select_rows(
    scores: torch.Tensor, n_visible: torch.Tensor, k: int, k_pad: int, chunk: int, out: torch.Tensor
) -> None:
    """Top-k of rows of at most `chunk` entries: scores [T, n <= chunk] -> out int32 [T, k]."""
    t, n = scores.shape
    _select_row_kernel[(t,)](
        scores,
        n_visible,
        out,
        n,
        scores.stride(0),
        out.stride(0),
        k,
        CHUNK=chunk,
        K_PAD=k_pad,
        num_warps=8 if chunk >= 4096 else 4,
    )


def index_topk_triton(
    logits: torch.Tensor,
    n_visible: torch.Tensor,
    k: int,
    empty: EmptyFn,
    *,
    chunk: int | None = None,
) -> torch.Tensor:
    """logits [T, N] f32|bf16, n_visible int32 [T] -> int32 [T, k] (allocated through `empty`).

    A row of at most `chunk` entries is one program's chunk; longer rows take two passes: the
    group maxima, then the group selector (one program per row)."""
    t, n = logits.shape
    out = empty((t, k), torch.int32, logits.device)
    if t == 0:
        return out
    k_pad = k_pad_of(k)
    chunk = default_chunk(k_pad) if chunk is None else chunk
    check_chunk(chunk, k_pad)
    if n <= chunk:
        select_rows(logits, n_visible, k, k_pad, chunk, out)
        return out
    scratch = group_scratch(t, n, k_pad, chunk, empty, logits.device)
    group_max(logits, n_visible, scratch[0])
    group_select(logits, n_visible, k, k_pad, chunk, scratch, out)
    return out


# ----------------------------------------------------------------- group-maxima selector


@triton.jit
def _group_max_kernel(
    score_ptr,
    nvis_ptr,
    gmax_ptr,
    n_cols,
    score_stride_t,
    gmax_stride_t,
    GPP: tl.constexpr,
):
    """First pass of the selector on a [T, N] score tensor: per GROUP entries the largest
    order-preserving key of the visible entries (0 when none) -> int32 [T, ceil(N / GROUP)]."""
    t = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1) * GPP + tl.arange(0, GPP)
    n_vis = tl.load(nvis_ptr + t)
    cols = g[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    valid = (cols < n_cols) & (cols < n_vis)
    x = tl.load(score_ptr + t * score_stride_t + cols, mask=valid, other=0.0).to(tl.float32)
    key = tl.where(valid, _score_to_key(x), 0)
    gk = tl.max(key, axis=1)
    tl.store(
        gmax_ptr + t * gmax_stride_t + g, gk.to(tl.int32, bitcast=True), mask=g * GROUP < n_cols
    )


@triton.jit
def _high_step(x, b, sh: tl.constexpr):
    up = (x >> sh) != 0
    return tl.where(up, x >> sh, x), tl.where(up, b + sh, b)


@triton.jit
def _high_bit(x):
    """Index of the highest set bit of a nonzero uint32 scalar (a 5-step binary search)."""
    b = tl.zeros((), dtype=tl.int32)
    x, b = _high_step(x, b, 16)
    x, b = _high_step(x, b, 8)
    x, b = _high_step(x, b, 4)
    x, b = _high_step(x, b, 2)
    x, b = _high_step(x, b, 1)
    return b


@triton.jit
def _threshold_in(key, valid, kk, lo, hi):
    """`_threshold` when the answer is known to lie in [lo, hi] (uint32 scalars, lo <= hi): the
    bits the two share are fixed, the search runs over the rest only."""
    key = tl.where(valid, key, 0)
    x = lo ^ hi
    one = tl.full((), 1, tl.uint32)
    nb = tl.where(x == 0, 0, _high_bit(x) + 1)
    thr = tl.where(nb >= 32, 0, (hi >> nb) << nb).to(tl.uint32)
    # (while loops: runtime bounds that the interpreter also accepts)
    bit = nb - 1
    while bit >= 0:
        cand = thr | (one << bit)
        cnt = tl.sum((key >= cand).to(tl.int32), axis=0)
        thr = tl.where(cnt >= kk, cand, thr)
        bit -= 1
    return thr


@triton.jit
def _select_region(key_ptr, idx_ptr, n_used, k, lo, CCAP: tl.constexpr):
    """Exact top-k of the first n_used slots of a candidate region (idx -1 = empty slot; valid
    slots in ascending entry order), `lo` a lower bound of the k-th largest key (or 0) ->
    (take, slot, kk, key, idx) as `_select_chunk`."""
    offs = tl.arange(0, CCAP)
    idx = tl.load(idx_ptr + offs, mask=offs < n_used, other=-1)
    valid = idx >= 0
    key = tl.load(key_ptr + offs, mask=valid, other=0).to(tl.uint32, bitcast=True)
    key = tl.where(valid, key, 0)
    n_valid = tl.sum(valid.to(tl.int32), axis=0)
    kk = tl.minimum(n_valid, k)
    hi = tl.max(key, axis=0)
    lo = tl.where(n_valid >= k, tl.minimum(lo, hi), 0).to(tl.uint32)
    thr = _threshold_in(key, valid, kk, lo, hi)
    gt = valid & (key > thr)
    eq = valid & (key == thr)
    n_gt = tl.sum(gt.to(tl.int32), axis=0)
    eq_rank = tl.cumsum(eq.to(tl.int32), axis=0)
    take = gt | (eq & (eq_rank <= kk - n_gt))
    slot = tl.cumsum(take.to(tl.int32), axis=0) - 1
    return take, slot, kk, key, idx


@triton.jit
def _gather_groups(row_ptr, gids, b0, m_sel, n_here, GPB: tl.constexpr):
    """Scores of the selected groups b0 + [0, GPB) of a row -> (keys, in-range, entry columns),
    each [GPB * GROUP] in ascending entry order."""
    gb = b0 + tl.arange(0, GPB)
    gid = tl.load(gids + gb, mask=gb < m_sel, other=0)
    cols = gid[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    ok = (gb < m_sel)[:, None] & (cols < n_here)
    x = tl.load(row_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    n: tl.constexpr = GPB * GROUP
    return (
        tl.reshape(_score_to_key(x), (n,)),
        tl.reshape(ok, (n,)),
        tl.reshape(cols, (n,)),
    )


@triton.jit
def _append(ckey, cidx, used, key, cand, entry, k, K_PAD: tl.constexpr, CCAP: tl.constexpr):
    """Append the candidates (ascending entries) after the `used` buffered ones of the region;
    first reduce the region to its top-k when they would not fit. -> the new count."""
    cnt = tl.sum(cand.to(tl.int32), axis=0)
    if used + cnt > CCAP - K_PAD:
        take, slot, kk, rkey, ridx = _select_region(ckey, cidx, K_PAD + used, k, 0, CCAP)
        tl.debug_barrier()
        tl.store(cidx + slot, ridx, mask=take)
        tl.store(ckey + slot, rkey.to(tl.int32, bitcast=True), mask=take)
        fill = tl.arange(0, K_PAD)
        tl.store(cidx + fill, tl.full((K_PAD,), -1, tl.int32), mask=fill >= kk)
        used = 0
    pos = K_PAD + used + tl.cumsum(cand.to(tl.int32), axis=0) - 1
    tl.store(cidx + pos, entry, mask=cand)
    tl.store(ckey + pos, key.to(tl.int32, bitcast=True), mask=cand)
    tl.debug_barrier()
    return used + cnt


@triton.jit
def _group_select_kernel(
    score_ptr,
    gmax_ptr,
    nvis_ptr,
    ckey_ptr,
    cidx_ptr,
    gid_ptr,
    out_ptr,
    n_cols,
    entry_base,
    score_stride_t,
    gmax_stride_t,
    c_stride_t,
    gid_stride_t,
    out_stride_t,
    k,
    HAS_RUN: tl.constexpr,
    FINAL: tl.constexpr,
    K_PAD: tl.constexpr,
    CCAP: tl.constexpr,
    BATCH: tl.constexpr,
    NGB: tl.constexpr,
):
    """Second pass, one program per row: the exact top-k of a segment of scores (columns are
    entries entry_base + col) merged with the row's running list, from the group maxima.

    tau = the k-th largest of the segment's bucket maxima (a bucket = one or more consecutive
    groups, at most NGB buckets) is a lower bound of the segment's k-th largest key when at
    least k buckets hold visible entries (else tau = the smallest key: every visible entry
    counts). Only groups whose maximum is >= tau can hold a winner; their entries >= tau are
    appended, in entry order, to the candidate region [K_PAD, CCAP) of the row's scratch, whose
    first K_PAD slots hold the running top-k (entries of earlier segments, ascending). When the
    region would overflow, it is reduced to its top-k (into the first K_PAD slots); the last
    reduction is the answer: `out` (FINAL, k columns, then -1) or the running list.
    """
    t = tl.program_id(0).to(tl.int64)
    n_vis = tl.load(nvis_ptr + t)
    n_here = tl.minimum(tl.maximum(n_vis - entry_base, 0), n_cols)
    ng = (n_here + GROUP - 1) // GROUP
    ckey = ckey_ptr + t * c_stride_t
    cidx = cidx_ptr + t * c_stride_t
    gmax = gmax_ptr + t * gmax_stride_t
    gids = gid_ptr + t * gid_stride_t
    if not HAS_RUN:
        fill = tl.arange(0, K_PAD)
        tl.store(cidx + fill, tl.full((K_PAD,), -1, tl.int32))
    # tau from the bucket maxima (bucket = `per` consecutive groups)
    per = tl.maximum((ng + NGB - 1) // NGB, 1)
    nb = (ng + per - 1) // per
    b = tl.arange(0, NGB)
    bmax = tl.zeros((NGB,), dtype=tl.uint32)
    s = 0
    while s < per:
        g = b * per + s
        m = tl.load(gmax + g, mask=g < ng, other=0).to(tl.uint32, bitcast=True)
        bmax = tl.maximum(bmax, m)
        s += 1
    one = tl.full((), 1, tl.uint32)
    if nb >= k:
        lo = tl.min(tl.where(b < nb, bmax, tl.full((), 0xFFFFFFFF, tl.uint32)), axis=0)
        tau = _threshold_in(bmax, b < nb, k, lo, tl.max(bmax, axis=0))
    else:
        tau = one
    # the groups that can hold a winner, in ascending order
    m_sel = 0
    g0 = 0
    while g0 < ng:
        g = g0 + b
        g0 += NGB
        gm = tl.load(gmax + g, mask=g < ng, other=0).to(tl.uint32, bitcast=True)
        sel = (g < ng) & (gm >= tau)
        pos = tl.cumsum(sel.to(tl.int32), axis=0) - 1
        tl.store(gids + m_sel + pos, g, mask=sel)
        m_sel += tl.sum(sel.to(tl.int32), axis=0)
    tl.debug_barrier()
    # gather their entries >= tau into the candidate region, reducing it when full; two
    # batches per step, both requested before either is appended
    GPB: tl.constexpr = BATCH // GROUP
    used = 0
    b0 = 0
    while b0 < m_sel:
        ka, ca, ea = _gather_groups(score_ptr + t * score_stride_t, gids, b0, m_sel, n_here, GPB)
        kb, cb, eb = _gather_groups(
            score_ptr + t * score_stride_t, gids, b0 + GPB, m_sel, n_here, GPB
        )
        b0 += 2 * GPB
        used = _append(ckey, cidx, used, ka, ca & (ka >= tau), entry_base + ea, k, K_PAD, CCAP)
        used = _append(ckey, cidx, used, kb, cb & (kb >= tau), entry_base + eb, k, K_PAD, CCAP)
    take, slot, kk, rkey, ridx = _select_region(ckey, cidx, K_PAD + used, k, tau, CCAP)
    if FINAL:
        tl.store(out_ptr + t * out_stride_t + slot, ridx, mask=take)
        fill = tl.arange(0, K_PAD)
        tl.store(
            out_ptr + t * out_stride_t + fill,
            tl.full((K_PAD,), -1, tl.int32),
            mask=(fill >= kk) & (fill < k),
        )
    else:
        tl.debug_barrier()
        tl.store(cidx + slot, ridx, mask=take)
        tl.store(ckey + slot, rkey.to(tl.int32, bitcast=True), mask=take)
        fill = tl.arange(0, K_PAD)
        tl.store(cidx + fill, tl.full((K_PAD,), -1, tl.int32), mask=fill >= kk)


def gather_batch(chunk: int) -> int:
    """Entries the group selector gathers per batch (a power of two, whole groups)."""
    return max(int(GROUP.value), chunk // 2)


Scratch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def group_scratch(
    t: int, n: int, k_pad: int, chunk: int, empty: EmptyFn, device: torch.device
) -> Scratch:
    """Scratch of the group selector for segments of n columns: (gmax int32 [T, ceil(n/GROUP)],
    candidate keys and entries int32 [T, CCAP], selected group ids int32 [T, ceil(n/GROUP)])."""
    ng = max(1, triton.cdiv(n, int(GROUP.value)))
    ccap = int(triton.next_power_of_2(k_pad + gather_batch(chunk)))
    gmax = empty((t, ng), torch.int32, device)
    gids = empty((t, ng), torch.int32, device)
    ckey = empty((t, ccap), torch.int32, device)
    cidx = empty((t, ccap), torch.int32, device)
    return gmax, ckey, cidx, gids


def group_max(scores: torch.Tensor, n_visible: torch.Tensor, gmax: torch.Tensor) -> None:
    """Launch the first pass on scores [T, n] (entry = column) into gmax [T, >= ceil(n/GROUP)]."""
    t, n = scores.shape
    gpp = 64
    _group_max_kernel[(t, triton.cdiv(triton.cdiv(n, GROUP), gpp))](
        scores, n_visible, gmax, n, scores.stride(0), gmax.stride(0), GPP=gpp, num_warps=4
    )


def group_select(
    scores: torch.Tensor,
    n_visible: torch.Tensor,
    k: int,
    k_pad: int,
    chunk: int,
    scratch: Scratch,
    out: torch.Tensor,
    *,
    entry_base: int = 0,
    has_run: bool = False,
    final: bool = True,
) -> None:
    """Launch the second pass on the segment scores [T, n] (entries entry_base + col), whose
    group maxima are in scratch[0]; merges with the running list when `has_run`; writes `out`
    [T, k] when `final`, else the running list (first k_pad slots of the candidate region)."""
    gmax, ckey, cidx, gids = scratch
    t, n = scores.shape
    ccap = ckey.shape[1]
    _group_select_kernel[(t,)](
        scores,
        gmax,
        n_visible,
        ckey,
        cidx,
        gids,
        out,
        n,
        entry_base,
        scores.stride(0),
        gmax.stride(0),
        ckey.stride(0),
        gids.stride(0),
        out.stride(0),
        k,
        HAS_RUN=has_run,
        FINAL=final,
        K_PAD=k_pad,
        CCAP=ccap,
        BATCH=gather_batch(chunk),
        NGB=min(chunk, 4096),
        num_warps=8,
    )
