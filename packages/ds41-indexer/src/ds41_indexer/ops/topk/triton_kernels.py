# mypy: allow-untyped-defs, allow-incomplete-defs, allow-untyped-calls
"""Exact, deterministic per-row top-k in Triton (SPEC section 6).

Scores become order-preserving uint32 keys (larger key = larger score, -0.0 folded into +0.0).
Every selection step finds the k-th largest key `thr` of a set held in registers in ascending
entry order with a ternary search (`_kth_key`: two cut points counted in one reduction a step,
so the bracket of the answer shrinks to a third a step; it stops as soon as exactly k keys are
>= a cut point, which on the bench's 4K-entry rows took 8-12 steps where the bitwise search
took 32), takes every key above it and the keys equal to it in entry order until k (the "ties to
the lower entry index" rule; no tie rank is needed after an exact cut), and compacts the
winners with a prefix sum, so they stay in ascending entry order. No sort of the row.

A row of at most `CHUNK` entries is one program's set (`_select_row_kernel`). Longer rows start
from the largest key of every GROUP consecutive entries (the logits kernel writes these group
maxima itself when fused; `_group_max_kernel` otherwise). tau = the k-th largest group maximum
(of buckets of consecutive groups when a row has many; or a lower bound of it within TAU_SPAN
key values) is a lower
bound of the row's k-th largest key: only groups whose maximum is >= tau can hold a winner, and
only their entries >= tau are gathered (typically ~k groups and ~k entries), then selected
exactly. Two ways to run that:

- the group selector (`_group_select_kernel`): one program per row, segment after segment with
  a running top-k (the fused call's long rows with many rows in flight);
- the split selector (`_split_select_kernel`, one launch): S programs per row, each one the
  exact top-k of a slice (one chunk each for rows of at most S chunks, else a run of groups
  pruned with the row's tau), written as a list of at most k entries; the last of a row's S
  programs to finish (an atomic count per row, which it sets back to 0) selects the top-k of
  the S lists (read in slice order, so in entry order). A lone long row is then S SMs' work,
  not one's, without a second launch.

The result depends on the row alone, whatever the strategy (chosen by shapes only): every step
is exact under one total order, and a winner of the row is a winner of its slice; whichever
program merges reads the same published lists. (A radix select, four 8-bit `tl.histogram`
passes per chunk, was measured slower than the bitwise search on the H200: see
`scripts/radix_select.py`.)
"""

from collections.abc import Callable, Sequence

import torch
import triton
import triton.language as tl

from ds41_cache.ops.launch import dependent_launch, enter_dependent

GROUP = tl.constexpr(64)
"""Entries per group of the first top-k pass (the group maxima, `gmax`)."""


@triton.jit
def _score_to_key(x):
    x = tl.where(x == 0.0, 0.0, x)  # -0.0 and +0.0 tie
    b = x.to(tl.uint32, bitcast=True)
    neg = (b >> 31) != 0
    return tl.where(neg, b ^ 0xFFFFFFFF, b | 0x80000000)


@triton.jit
def _kth_key(key, kk, lo, hi, span: tl.constexpr):
    """The kk-th largest of the keys (uint32 [C], invalid ones 0), known to lie in [lo, hi]
    (uint32 scalars, 1 <= kk keys >= lo; or kk = 0 and hi = 0) -> (thr uint32, exact).

    Each step counts the keys >= two cut points, at a third and two thirds of [lo, hi], in one
    reduction and keeps the third that holds the answer. It stops early when exactly kk keys
    are >= a cut point: those keys are the selection (no tie straddles the cut), `exact` is 1
    and thr is that cut point (a lower bound of the kk-th largest key). Else thr is the kk-th
    largest key (span 1), or the lower end of a bracket narrower than `span` (a lower bound of
    it, found in fewer steps). The cut points are >= lo + 1 >= 1, so invalid keys never count."""
    lo = lo.to(tl.uint32)
    hi = hi.to(tl.uint32)
    thr = lo
    exact = tl.zeros((), tl.int32)
    while (hi - lo >= span) & (exact == 0):
        third = (hi - lo) // 3 + 1
        c1 = lo + third
        c2 = c1 + tl.minimum(third, hi - c1)
        # Both counts in one reduction: 16-bit fields of an int32 (32-bit fields of an int64
        # for sets of more than 2^15 keys). Inline: the interpreter pays per helper call.
        if key.shape[0] > 32768:
            both = (key >= c1).to(tl.int64) + ((key >= c2).to(tl.int64) << 32)
            sums = tl.sum(both, axis=0)
            n1 = (sums & 0xFFFFFFFF).to(tl.int32)
            n2 = (sums >> 32).to(tl.int32)
        else:
            sums = tl.sum((key >= c1).to(tl.int32) + ((key >= c2).to(tl.int32) << 16), axis=0)
            n1 = sums & 0xFFFF
            n2 = sums >> 16
        up1 = n1 >= kk
        up2 = n2 >= kk
        exact = ((n1 == kk) | (n2 == kk)).to(tl.int32)
        thr = tl.where(n2 == kk, c2, c1)
        hi = tl.where(up2, hi, tl.where(up1, c2 - 1, c1 - 1))
        lo = tl.where(up2, c2, tl.where(up1, c1, lo))
    return tl.where(exact != 0, thr, lo), exact


@triton.jit
def _select_keys(key, valid, k, lo, n_valid):
    """(key uint32 [C], valid bool [C]) in ascending entry order, n_valid = number of valid keys,
    `lo` a lower bound of the k-th largest valid key when n_valid >= k (else any value) ->
    (take bool [C], slot int32 [C], kk int32, thr): the kk = min(k, n_valid) winners, each
    one's slot among them (entry order), and a lower bound thr of the kk-th largest key.

    Row order is entry order, so the tie rule is a rank among the keys equal to the kk-th largest
    key; it is needed only when the search did not stop at an exact cut (ties straddle it)."""
    key = tl.where(valid, key, 0)
    kk = tl.minimum(n_valid, k)
    hi = tl.max(key, axis=0)
    lo = tl.where(n_valid >= k, tl.minimum(lo, hi), 0).to(tl.uint32)
    thr, exact = _kth_key(key, kk, lo, hi, 1)
    if exact != 0:
        take = valid & (key >= thr)
    else:
        gt = valid & (key > thr)
        eq = valid & (key == thr)
        n_gt = tl.sum(gt.to(tl.int32), axis=0)
        eq_rank = tl.cumsum(eq.to(tl.int32), axis=0)
        take = gt | (eq & (eq_rank <= kk - n_gt))
    slot = tl.cumsum(take.to(tl.int32), axis=0) - 1
    return take, slot, kk, thr


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
    GDC: tl.constexpr = False,
):
    """A row of at most CHUNK fp32/bf16 scores -> its top-k entries [k] (ascending, then -1)."""
    enter_dependent(GDC)
    t = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    # The scores load does not wait for n_visible (columns past it are read, then masked).
    x = tl.load(score_ptr + t * score_stride_t + cols, mask=cols < n_cols, other=0.0)
    n_vis = tl.minimum(tl.maximum(tl.load(nvis_ptr + t), 0), n_cols)
    valid = cols < n_vis
    key = _score_to_key(x.to(tl.float32))
    take, slot, kk, _ = _select_keys(key, valid, k, tl.zeros((), tl.uint32), n_vis)
    tl.store(out_ptr + t * out_stride_t + slot, cols, mask=take)
    fill = tl.arange(0, K_PAD)
    tl.store(
        out_ptr + t * out_stride_t + fill,
        tl.full((K_PAD,), -1, tl.int32),
        mask=(fill >= kk) & (fill < k),
    )


@triton.jit
def _visible_kernel(
    req_ptr, pos_ptr, out_ptr, t, ratio, BLOCK: tl.constexpr, GDC: tl.constexpr = False
):
    """n(p) = floor((p + 1) / ratio) of each row, 0 for padding rows (req_idx < 0), as int32:
    `visible_entries` (the torch reference) exactly. int64 arithmetic; the floor of a negative
    quotient is taken with non-negative operands only, where C's and Python's `//` agree."""
    enter_dependent(GDC)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < t
    req = tl.load(req_ptr + offs, mask=m, other=-1)
    num = tl.load(pos_ptr + offs, mask=m, other=0).to(tl.int64) + 1
    r = tl.zeros((), tl.int64) + ratio
    n = tl.where(num >= 0, num // r, -((r - 1 - num) // r))
    n = tl.where(req >= 0, n, 0)
    tl.store(out_ptr + offs, n.to(tl.int32), mask=m)


# ----------------------------------------------------------------------------- host side

EmptyFn = Callable[[Sequence[int], torch.dtype, torch.device], torch.Tensor]


def visible_counts(
    req_idx: torch.Tensor, pos: torch.Tensor, ratio: int, empty: EmptyFn
) -> torch.Tensor:
    """int32 [T]: `visible_entries(req_idx, pos, ratio)` in one launch (the torch expression
    is seven elementwise kernels, each a node of a captured graph)."""
    t = req_idx.shape[0]
    out = empty((t,), torch.int32, req_idx.device)
    if t:
        block = min(1024, max(32, int(triton.next_power_of_2(t))))
        _visible_kernel[(triton.cdiv(t, block),)](
            req_idx.contiguous(),
            pos.contiguous(),
            out,
            t,
            ratio,
            BLOCK=block,
            num_warps=1 if block <= 128 else 4,
            **dependent_launch(pos.device),
        )
    return out


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
        **dependent_launch(scores.device),
    )


def index_topk_triton(
    logits: torch.Tensor,
    n_visible: torch.Tensor,
    k: int,
    empty: EmptyFn,
    *,
    chunk: int | None = None,
    split: bool | None = None,
) -> torch.Tensor:
    """logits [T, N] f32|bf16, n_visible int32 [T] -> int32 [T, k] (allocated through `empty`).

    A row of at most `chunk` entries is one program's chunk. Longer rows take the split
    selector (slices of each row in parallel, the last one merging; `use_split` by shape, or
    `split`)
    or the group selector (one program per row); both start from the group maxima when rows
    are long enough to prune."""
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
    if use_split(t, n, chunk) if split is None else split:
        sp = split_scratch(t, n, k_pad, chunk, empty, logits.device)
        if split_plan(n, k_pad, chunk)[0]:
            group_max(logits, n_visible, sp[0])
        split_select(logits, n_visible, k, k_pad, chunk, sp, out)
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
    GDC: tl.constexpr = False,
):
    """First pass of the selector on a [T, N] score tensor: per GROUP entries the largest
    order-preserving key of the visible entries (0 when none) -> int32 [T, ceil(N / GROUP)]."""
    enter_dependent(GDC)
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
def _select_region(key_ptr, idx_ptr, n_used, k, lo, CCAP: tl.constexpr):
    """Exact top-k of the first n_used slots of a candidate region (idx -1 = empty slot; valid
    slots in ascending entry order), `lo` a lower bound of the k-th largest key (or 0) ->
    (take, slot, kk, key, idx) as `_select_keys`."""
    offs = tl.arange(0, CCAP)
    idx = tl.load(idx_ptr + offs, mask=offs < n_used, other=-1)
    valid = idx >= 0
    key = tl.load(key_ptr + offs, mask=valid, other=0).to(tl.uint32, bitcast=True)
    key = tl.where(valid, key, 0)
    take, slot, kk, _ = _select_keys(key, valid, k, lo, tl.sum(valid.to(tl.int32), axis=0))
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


TAU_SPAN = tl.constexpr(1 << 16)
"""The search for tau stops once its bracket is narrower than this many key values (fewer
steps; the k-th largest bucket maximum is then at most ~2^-7 relatively above tau)."""


@triton.jit
def _row_tau(gmax, ng, k, NGB: tl.constexpr):
    """A lower bound tau of the k-th largest visible key of a row (part) from its ng group maxima
    (int32 bits at `gmax`): the k-th largest of the bucket maxima (a bucket = one or more
    consecutive groups, at most NGB buckets), or a lower bound of it within TAU_SPAN key values,
    when at least k buckets hold visible entries, else 1 (every visible key is >= 1)."""
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
    tau = tl.full((), 1, tl.uint32)
    if nb >= k:
        lo = tl.min(tl.where(b < nb, bmax, tl.full((), 0xFFFFFFFF, tl.uint32)), axis=0)
        tau, _ = _kth_key(bmax, k, lo, tl.max(bmax, axis=0), TAU_SPAN)
    return tau


@triton.jit
def _pick_groups(gmax, gids, g_lo, g_hi, tau, NGB: tl.constexpr):
    """Ids of the groups in [g_lo, g_hi) whose maximum is >= tau, ascending, stored from
    gids[0] -> their count."""
    b = tl.arange(0, NGB)
    m_sel = 0
    g0 = g_lo
    while g0 < g_hi:
        g = g0 + b
        g0 += NGB
        gm = tl.load(gmax + g, mask=g < g_hi, other=0).to(tl.uint32, bitcast=True)
        sel = (g < g_hi) & (gm >= tau)
        pos = tl.cumsum(sel.to(tl.int32), axis=0) - 1
        tl.store(gids + m_sel + pos, g, mask=sel)
        m_sel += tl.sum(sel.to(tl.int32), axis=0)
    tl.debug_barrier()
    return m_sel


@triton.jit
def _gather_candidates(
    row_ptr,
    gids,
    m_sel,
    n_here,
    tau,
    entry_base,
    ckey,
    cidx,
    k,
    K_PAD: tl.constexpr,
    CCAP: tl.constexpr,
    BATCH: tl.constexpr,
):
    """Append the entries >= tau of the m_sel groups listed at `gids` (ascending) to the
    candidate region [K_PAD, CCAP), reducing it to its top-k when full -> the count appended
    since the last reduction. Two batches per step, both requested before either is appended."""
    GPB: tl.constexpr = BATCH // GROUP
    used = 0
    b0 = 0
    while b0 < m_sel:
        ka, ca, ea = _gather_groups(row_ptr, gids, b0, m_sel, n_here, GPB)
        kb, cb, eb = _gather_groups(row_ptr, gids, b0 + GPB, m_sel, n_here, GPB)
        b0 += 2 * GPB
        used = _append(ckey, cidx, used, ka, ca & (ka >= tau), entry_base + ea, k, K_PAD, CCAP)
        used = _append(ckey, cidx, used, kb, cb & (kb >= tau), entry_base + eb, k, K_PAD, CCAP)
    return used


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
    GDC: tl.constexpr = False,
):
    """Second pass, one program per row: the exact top-k of a segment of scores (columns are
    entries entry_base + col) merged with the row's running list, from the group maxima.

    tau (`_row_tau`) is a lower bound of the segment's k-th largest key. Only groups whose
    maximum is >= tau can hold a winner; their entries >= tau are appended, in entry order, to
    the candidate region [K_PAD, CCAP) of the row's scratch, whose first K_PAD slots hold the
    running top-k (entries of earlier segments, ascending). When the region would overflow, it
    is reduced to its top-k (into the first K_PAD slots); the last reduction is the answer:
    `out` (FINAL, k columns, then -1) or the running list.
    """
    enter_dependent(GDC)
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
    tau = _row_tau(gmax, ng, k, NGB)
    m_sel = _pick_groups(gmax, gids, 0, ng, tau, NGB)
    used = _gather_candidates(
        score_ptr + t * score_stride_t,
        gids,
        m_sel,
        n_here,
        tau,
        entry_base,
        ckey,
        cidx,
        k,
        K_PAD,
        CCAP,
        BATCH,
    )
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


# ------------------------------------------------------------------------ split selector


@triton.jit
def _merge_slices(ckey_ptr, cidx_ptr, meta_ptr, out_ptr, t, c_stride_p, out_stride_t, k, S, K_PAD):
    """The exact top-k of row t's S slice lists (in slice order, so in ascending entry order)
    -> out [k] (ascending, then -1). Reads only what every slice program has published, so the
    result is the same whichever program runs it. The largest of the slices' lower bounds
    bounds the row's k-th largest key from below. Loads go to L2 (`.cg`): the lists were written
    by other SMs during this launch."""
    offs = tl.arange(0, S * K_PAD)
    p = t * S + offs // K_PAD
    j = offs % K_PAD
    first = tl.load(meta_ptr + p * 4, cache_modifier=".cg")
    count = tl.load(meta_ptr + p * 4 + 1, cache_modifier=".cg")
    valid = j < count
    at = p * c_stride_p + first + j
    idx = tl.load(cidx_ptr + at, mask=valid, other=-1, cache_modifier=".cg")
    key = tl.load(ckey_ptr + at, mask=valid, other=0, cache_modifier=".cg")
    key = key.to(tl.uint32, bitcast=True)
    sl = t * S + tl.arange(0, S)
    lo = tl.load(meta_ptr + sl * 4 + 2, cache_modifier=".cg").to(tl.uint32, bitcast=True)
    n_valid = tl.sum(tl.load(meta_ptr + sl * 4 + 1, cache_modifier=".cg"), axis=0)
    take, slot, kk, _ = _select_keys(key, valid, k, tl.max(lo, axis=0), n_valid)
    tl.store(out_ptr + t * out_stride_t + slot, idx, mask=take)
    fill = tl.arange(0, K_PAD)
    tl.store(
        out_ptr + t * out_stride_t + fill,
        tl.full((K_PAD,), -1, tl.int32),
        mask=(fill >= kk) & (fill < k),
    )


@triton.jit
def _split_select_kernel(
    score_ptr,
    gmax_ptr,
    nvis_ptr,
    ckey_ptr,
    cidx_ptr,
    gid_ptr,
    meta_ptr,
    done_ptr,
    out_ptr,
    n_cols,
    score_stride_t,
    gmax_stride_t,
    c_stride_p,
    gid_stride_t,
    out_stride_t,
    k,
    S: tl.constexpr,
    PRUNE: tl.constexpr,
    K_PAD: tl.constexpr,
    CCAP: tl.constexpr,
    BATCH: tl.constexpr,
    NGB: tl.constexpr,
    CHUNK: tl.constexpr,
    GDC: tl.constexpr = False,
):
    """The split selector, program (t, s): the exact top-k of slice s of row t (or the part of
    it that can hold a winner of the row), a list of at most k entries (ascending) in the
    program's candidate region, described by meta = (first slot, count, lower bound of the
    row's k-th largest key, -). The last of the row's S programs to finish (an atomic count in
    done[t], which it sets back to 0 for the next launch) merges the S lists into out [k].

    PRUNE: slice s is the s-th of S runs of consecutive groups; tau (`_row_tau` over the whole
    row, the same in every slice) picks the groups and entries that can hold a winner; when more
    than K_PAD candidates (or a reduction) came, they are reduced to the slice's top-k. Else
    slice s is the CHUNK entries from s * CHUNK, selected in registers.
    """
    enter_dependent(GDC)
    t = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    p = t * S + s
    n_vis = tl.load(nvis_ptr + t)
    n_here = tl.minimum(tl.maximum(n_vis, 0), n_cols)
    ckey = ckey_ptr + p * c_stride_p
    cidx = cidx_ptr + p * c_stride_p
    row = score_ptr + t * score_stride_t
    if PRUNE:
        fill = tl.arange(0, K_PAD)
        tl.store(cidx + fill, tl.full((K_PAD,), -1, tl.int32))
        ng = (n_here + GROUP - 1) // GROUP
        gmax = gmax_ptr + t * gmax_stride_t
        tau = _row_tau(gmax, ng, k, NGB)
        gs = (ng + S - 1) // S
        g_lo = tl.minimum(s * gs, ng)
        g_hi = tl.minimum(g_lo + gs, ng)
        gids = gid_ptr + t * gid_stride_t + g_lo
        m_sel = _pick_groups(gmax, gids, g_lo, g_hi, tau, NGB)
        used = _gather_candidates(
            row, gids, m_sel, n_here, tau, 0, ckey, cidx, k, K_PAD, CCAP, BATCH
        )
        # A reduction ran iff the running list (first K_PAD slots) holds an entry.
        reduced = tl.load(cidx) >= 0
        first = tl.full((), K_PAD, tl.int32)
        count = used
        if reduced | (used > K_PAD):
            take, slot, kk, rkey, ridx = _select_region(ckey, cidx, K_PAD + used, k, tau, CCAP)
            tl.debug_barrier()
            tl.store(cidx + slot, ridx, mask=take)
            tl.store(ckey + slot, rkey.to(tl.int32, bitcast=True), mask=take)
            first = tl.full((), 0, tl.int32)
            count = kk
        lo = tau
    else:
        cols = s * CHUNK + tl.arange(0, CHUNK)
        x = tl.load(row + cols, mask=cols < n_cols, other=0.0)
        valid = cols < n_here
        key = _score_to_key(x.to(tl.float32))
        n_valid = tl.minimum(tl.maximum(n_here - s * CHUNK, 0), CHUNK)
        take, slot, count, thr = _select_keys(key, valid, k, tl.zeros((), tl.uint32), n_valid)
        tl.store(cidx + slot, cols, mask=take)
        tl.store(ckey + slot, key.to(tl.int32, bitcast=True), mask=take)
        first = tl.full((), 0, tl.int32)
        lo = tl.where(count >= k, thr, 0).to(tl.uint32)
    tl.store(meta_ptr + p * 4, first)
    tl.store(meta_ptr + p * 4 + 1, count)
    tl.store(meta_ptr + p * 4 + 2, lo.to(tl.int32, bitcast=True))
    # Publish the list, then count this slice in: every thread's stores come before the
    # barrier, the barrier before the (gpu-scope release) increment.
    tl.debug_barrier()
    done = tl.atomic_add(done_ptr + t, 1, sem="acq_rel", scope="gpu")
    if done == S - 1:
        tl.store(done_ptr + t, 0)
        _merge_slices(
            ckey_ptr, cidx_ptr, meta_ptr, out_ptr, t, c_stride_p, out_stride_t, k, S, K_PAD
        )


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
        scores,
        n_visible,
        gmax,
        n,
        scores.stride(0),
        gmax.stride(0),
        GPP=gpp,
        num_warps=4,
        **dependent_launch(scores.device),
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
        **dependent_launch(scores.device),
    )


SPLIT_SLICES = 8
"""Most slices (programs) per row of the split selector."""
SPLIT_MAX_ROWS = 64
"""Rows up to which a long row (one segment) may take the split selector."""
SPLIT_MAX_ENTRIES = 64 * 32768
"""Most entries (rows x row length) the split selector takes. Measured on the H200 (CUDA
graph, with the merge then a second launch and the bitwise search; `topk_variants.py` at
8501892): one row at 32K / 128K / 1M entries 29 / 34 / 40 us split vs 55 / 58 / 71 us one
program per row; 64 rows at 32K 52 vs 72 us, but at 128K 82 vs 69 and at 1M 184 vs 165: past
~2M entries the group selector already fills the SMs and the slice lists cost more than they
save. Not re-tuned since the merge moved into the slice launch."""


def use_split(t: int, n: int, chunk: int) -> bool:
    """Whether rows of n > chunk entries take the split selector (a function of shapes only;
    every selector is exact, so the choice never changes a bit)."""
    return n > chunk and t <= SPLIT_MAX_ROWS and t * n <= SPLIT_MAX_ENTRIES


def split_plan(n: int, k_pad: int, chunk: int) -> tuple[bool, int]:
    """(prune, slices) of the split selector on rows of n > chunk entries: rows of at most
    `slices` chunks take one chunk per slice (PRUNE off, slices a power of two); longer rows
    take SPLIT_SLICES runs of groups (fewer when k_pad * slices would exceed chunk)."""
    most = max(1, min(SPLIT_SLICES, chunk // k_pad))
    pieces = triton.cdiv(n, chunk)
    if pieces <= most:
        return False, int(triton.next_power_of_2(pieces))
    return True, most


SplitScratch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def split_scratch(
    t: int, n: int, k_pad: int, chunk: int, empty: EmptyFn, device: torch.device
) -> SplitScratch:
    """Scratch of the split selector on rows of n columns: (gmax int32 [T, ceil(n/GROUP)],
    candidate keys and entries int32 [T * slices, CCAP], selected group ids int32
    [T, ceil(n/GROUP)], slice lists' meta int32 [T * slices, 4])."""
    prune, slices = split_plan(n, k_pad, chunk)
    ng = max(1, triton.cdiv(n, int(GROUP.value))) if prune else 1
    ccap = int(triton.next_power_of_2(k_pad + gather_batch(chunk))) if prune else k_pad
    gmax = empty((t, ng), torch.int32, device)
    gids = empty((t, ng), torch.int32, device)
    ckey = empty((t * slices, ccap), torch.int32, device)
    cidx = empty((t * slices, ccap), torch.int32, device)
    meta = empty((t * slices, 4), torch.int32, device)
    return gmax, ckey, cidx, gids, meta


def selection_scratch(
    t: int, n_total: int, seg: int, k_pad: int, chunk: int, empty: EmptyFn, device: torch.device
) -> tuple[SplitScratch | None, Scratch | None, torch.Tensor | None]:
    """Scratch for selecting rows of n_total > chunk entries scored in segments of `seg`:
    (split selector's scratch, group selector's scratch, the group maxima the logits kernel
    fills). Exactly one scratch is set: the split selector's when a row is one segment and
    `use_split` takes the shape. The maxima are None when the split selector takes one chunk
    per slice (it needs none)."""
    width = min(seg, n_total)
    if n_total <= seg and use_split(t, n_total, chunk):
        sp = split_scratch(t, width, k_pad, chunk, empty, device)
        return sp, None, sp[0] if split_plan(n_total, k_pad, chunk)[0] else None
    scratch = group_scratch(t, width, k_pad, chunk, empty, device)
    return None, scratch, scratch[0]


_DONE: dict[torch.device, torch.Tensor] = {}
"""Per device, the split selector's per-row slice counters (all zeros between launches). A
buffer outgrown is kept alive: CUDA graphs captured with it still use it."""
_DONE_KEPT: list[torch.Tensor] = []


def done_counters(t: int, device: torch.device) -> torch.Tensor:
    """int32 [>= t] zeros for the split selector's slice counts of t rows on `device`. Each launch
    counts its slices in and the last slice of a row sets the row's count back to 0, so one
    buffer serves every launch and CUDA-graph replay on the device without a reset launch; two
    split selections on one device must therefore not run at the same time (on streams not
    ordered with each other). Under graph capture a missing buffer is made for that graph alone
    (its zero fill is captured, so it is zero before every replay)."""
    have = _DONE.get(device)
    if have is not None and have.shape[0] >= t:
        return have
    size = max(int(triton.next_power_of_2(t)), SPLIT_MAX_ROWS)
    buf = torch.zeros(size, dtype=torch.int32, device=device)
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return buf
    if have is not None:
        _DONE_KEPT.append(have)
    _DONE[device] = buf
    return buf


def split_select(
    scores: torch.Tensor,
    n_visible: torch.Tensor,
    k: int,
    k_pad: int,
    chunk: int,
    scratch: SplitScratch,
    out: torch.Tensor,
) -> None:
    """Top-k of rows of scores [T, n > chunk] (entry = column) in one launch: the slices (group
    maxima in scratch[0] when `split_plan` prunes), the last slice of each row merging -> out."""
    gmax, ckey, cidx, gids, meta = scratch
    t, n = scores.shape
    prune, slices = split_plan(n, k_pad, chunk)
    _split_select_kernel[(t, slices)](
        scores,
        gmax,
        n_visible,
        ckey,
        cidx,
        gids,
        meta,
        done_counters(t, scores.device),
        out,
        n,
        scores.stride(0),
        gmax.stride(0),
        ckey.stride(0),
        gids.stride(0),
        out.stride(0),
        k,
        S=slices,
        PRUNE=prune,
        K_PAD=k_pad,
        CCAP=ckey.shape[1],
        BATCH=gather_batch(chunk),
        NGB=min(chunk, 4096),
        CHUNK=chunk,
        num_warps=8,
        **dependent_launch(scores.device),
    )
