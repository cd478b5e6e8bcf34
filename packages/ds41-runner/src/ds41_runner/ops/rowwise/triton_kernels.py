# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False, check-untyped-defs=False
"""RMSNorm (one program per row), the vocabulary partials of log-softmax and sampling (one
program per row and vocabulary segment) and their combination (one program per row): every
reduction in an order that depends only on the row or segment length, never on the number of
rows."""

import torch
import triton
import triton.language as tl

from ds41_cache.ops.codec.triton_jit import bf16_bits_to_f32, f32_to_bf16_store_bits
from ds41_cache.ops.launch import dependent_launch, enter_dependent
from ds41_cache.ops.rope.triton_kernels import rope_table_rows
from ds41_cache.ops.slots.triton_kernels import BLOCK as ENTRY_BLOCK
from ds41_cache.ops.slots.triton_kernels import slot_of_rows
from ds41_cache.outputs import empty


@triton.jit
def _rms_scaled(x, w_ptr, cols, ok, D, eps):
    # One row's `x * (1 / sqrt(mean(x^2) + eps)) * w` (fp32): both norm kernels call this on a
    # row loaded the same way, so their reduction trees and bits are the same.
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / D
    return x * (1.0 / tl.sqrt(ms + eps)) * w


@triton.jit
def rmsnorm_kernel(
    x_ptr,
    w_ptr,
    out_ptr,
    D,
    stride_x,
    stride_o,
    eps,
    BLOCK_D: tl.constexpr,
    GDC: tl.constexpr = False,
):
    enter_dependent(GDC)
    _rmsnorm_row(x_ptr, w_ptr, out_ptr, tl.program_id(0), D, stride_x, stride_o, eps, BLOCK_D)


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, out_ptr, row, D, stride_x, stride_o, eps, BLOCK_D: tl.constexpr):
    # One row of x normalised into out: rmsnorm_kernel's body, and each half of
    # rmsnorm_pair_kernel's.
    cols = tl.arange(0, BLOCK_D)
    ok = cols < D
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    y = _rms_scaled(x, w_ptr, cols, ok, D, eps)
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


def _norm_warps(block_d: int) -> int:
    # Warps follow the row width only (never the row count), so the reduction tree is fixed.
    return 4 if block_d <= 2048 else 8


def launch_rmsnorm(
    x: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor, interp: bool
) -> torch.Tensor:
    m, d = x.shape
    block = triton.next_power_of_2(d)
    rmsnorm_kernel[(m,)](
        x, w, out, d, x.stride(0), out.stride(0), eps, BLOCK_D=block,
        num_warps=_norm_warps(block),
        **dependent_launch(x.device),
    )  # fmt: skip
    return out


@triton.jit
def rmsnorm_pair_kernel(
    x1_ptr, w1_ptr, out1_ptr, D1, stride_x1, stride_o1,
    x2_ptr, w2_ptr, out2_ptr, D2, stride_x2, stride_o2, eps,
    BLOCK_D1: tl.constexpr, BLOCK_D2: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    # Two independent RMSNorms in one launch: program (row, 0) normalises row `row` of x1,
    # program (row, 1) row `row` of x2, each exactly as rmsnorm_kernel (one program per row,
    # its own width and block, the launch's warps those rmsnorm_kernel takes for both).
    row = tl.program_id(0)
    if tl.program_id(1) == 0:
        _rmsnorm_row(x1_ptr, w1_ptr, out1_ptr, row, D1, stride_x1, stride_o1, eps, BLOCK_D1)
    else:
        _rmsnorm_row(x2_ptr, w2_ptr, out2_ptr, row, D2, stride_x2, stride_o2, eps, BLOCK_D2)


def pair_warps_match(d1: int, d2: int) -> bool:
    """Whether `launch_rmsnorm_pair` can norm widths `d1` and `d2` with the warps
    `launch_rmsnorm` gives each (it launches once with one warp count)."""
    return _norm_warps(triton.next_power_of_2(d1)) == _norm_warps(triton.next_power_of_2(d2))


def launch_rmsnorm_pair(
    x1: torch.Tensor, w1: torch.Tensor, out1: torch.Tensor,
    x2: torch.Tensor, w2: torch.Tensor, out2: torch.Tensor, eps: float,
) -> None:  # fmt: skip
    """`launch_rmsnorm(x1, w1, eps, out1)` and `launch_rmsnorm(x2, w2, eps, out2)` (the same
    row count, `pair_warps_match`) in one launch, with their bits."""
    m, d1 = x1.shape
    d2 = x2.shape[1]
    b1, b2 = triton.next_power_of_2(d1), triton.next_power_of_2(d2)
    assert _norm_warps(b1) == _norm_warps(b2)
    rmsnorm_pair_kernel[(m, 2)](
        x1, w1, out1, d1, x1.stride(0), out1.stride(0),
        x2, w2, out2, d2, x2.stride(0), out2.stride(0), eps,
        BLOCK_D1=b1, BLOCK_D2=b2, num_warps=_norm_warps(b1),
        **dependent_launch(x1.device),
    )  # fmt: skip


@triton.jit
def residual_rmsnorm_kernel(
    x_ptr, delta_ptr, w_ptr, sum_ptr, out_ptr, first_ptr, stage, D, stride_x, stride_d,
    stride_s, stride_o, eps,
    BLOCK_D: tl.constexpr, HAS_DELTA: tl.constexpr, MARK: tl.constexpr, NORM: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    # One program per row: s = bf16(x + delta) (torch's bf16 add: fp32 sum, one rounding),
    # then the non-finite mark of s, then rmsnorm(s) as rmsnorm_kernel computes it.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    ok = cols < D
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_DELTA:
        d = tl.load(delta_ptr + row * stride_d + cols, mask=ok, other=0.0).to(tl.float32)
        bits = f32_to_bf16_store_bits(x + d)
        tl.store(sum_ptr + row * stride_s + cols, bits, mask=ok)
        x = bf16_bits_to_f32(bits)
    if MARK:
        # not (|x| < inf) holds for inf and NaN alike
        bad = tl.max(tl.where(ok & ~(tl.abs(x) < float("inf")), 1, 0), axis=0)
        first = tl.load(first_ptr + row)  # -1: rowwise.naive.UNMARKED
        tl.store(first_ptr + row, tl.where((bad > 0) & (first == -1), stage, first))
    if NORM:
        y = _rms_scaled(x, w_ptr, cols, ok, D, eps)
        tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def embed_rmsnorm_kernel(
    tok_ptr, req_ptr, emb_ptr, w_ptr, x_ptr, out_ptr, first_ptr, stage, V, D, stride_e,
    stride_x, stride_o, eps,
    BLOCK_D: tl.constexpr, MARK: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    # One program per row: the embedding row of the row's token (0 on padding rows, clamped
    # to the vocabulary, as the model's torch ops pick it) copied out, then
    # residual_rmsnorm_kernel without a delta: the non-finite mark (over an unmarked row) and
    # rmsnorm of the row.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    ok = cols < D
    tok = tl.load(tok_ptr + row).to(tl.int64)
    tok = tl.where(tl.load(req_ptr + row) >= 0, tok, 0)
    tok = tl.minimum(tl.maximum(tok, 0), V - 1)
    e = tl.load(emb_ptr + tok * stride_e + cols, mask=ok, other=0.0)
    tl.store(x_ptr + row * stride_x + cols, e, mask=ok)
    x = e.to(tl.float32)
    if MARK:
        # not (|x| < inf) holds for inf and NaN alike; -1: rowwise.naive.UNMARKED
        bad = tl.max(tl.where(ok & ~(tl.abs(x) < float("inf")), 1, 0), axis=0)
        tl.store(first_ptr + row, tl.where(bad > 0, stage, -1).to(tl.int64))
    y = _rms_scaled(x, w_ptr, cols, ok, D, eps)
    tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=ok)


def launch_embed_rmsnorm(
    tokens: torch.Tensor,
    req_idx: torch.Tensor,
    embed: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    x: torch.Tensor,
    out: torch.Tensor,
    first: torch.Tensor | None,
    stage: int,
) -> None:
    """`tokens: int64 [M]`, `req_idx: int32 [M]`, `embed: bf16 [V, D]` (unit column stride)
    -> `x: bf16 [M, D]` the rows, `out: [M, D]` their norm, `first: int64 [M]` the marks."""
    m = tokens.shape[0]
    v, d = embed.shape
    block = triton.next_power_of_2(d)
    embed_rmsnorm_kernel[(m,)](
        tokens, req_idx, embed, w, x, out, x if first is None else first, stage, v, d,
        embed.stride(0), x.stride(0), out.stride(0), eps,
        BLOCK_D=block, MARK=first is not None, num_warps=_norm_warps(block),
        **dependent_launch(x.device),
    )  # fmt: skip


def launch_residual_rmsnorm(
    x: torch.Tensor,
    delta: torch.Tensor | None,
    w: torch.Tensor | None,
    eps: float,
    total: torch.Tensor | None,
    out: torch.Tensor | None,
    first: torch.Tensor | None,
    stage: int,
) -> None:
    """`x`, `delta`: bf16 `[M, D]` (last dim contiguous); `total`: bf16 `[M, D]` gets
    `x + delta`; `out`: `[M, D]` gets the norm; `first`: int64 `[M]` the marks."""
    m, d = x.shape
    block = triton.next_power_of_2(d)
    residual_rmsnorm_kernel[(m,)](
        x, x if delta is None else delta, x if w is None else w,
        x.view(torch.int16) if total is None else total.view(torch.int16),
        x if out is None else out, x if first is None else first, stage, d,
        x.stride(0), 0 if delta is None else delta.stride(0),
        0 if total is None else total.stride(0), 0 if out is None else out.stride(0), eps,
        BLOCK_D=block, HAS_DELTA=delta is not None, MARK=first is not None, NORM=w is not None,
        num_warps=_norm_warps(block),
        **dependent_launch(x.device),
    )  # fmt: skip


@triton.jit
def entry_slots_kernel(
    bt_ptr, bt_stride0, bt_stride1, num_req, num_cols, req_ptr, entry_ptr, emit_ptr,
    slots_ptr, epos_ptr, freqs_ptr, cos_ptr, sin_ptr, T, ratio,
    PAGE: tl.constexpr, BLOCK: tl.constexpr, HALF_R: tl.constexpr, BLOCK_P: tl.constexpr,
    TABLES: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    enter_dependent(GDC)
    # lookup_slots_kernel's slot (integer steps), the entry's position max(e, 0) * ratio as
    # int32 (torch's clamp, product and cast), and rope_tables_kernel's tables at it.
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = rows < T
    slot, _need, _have, pos = slot_of_rows(bt_ptr, bt_stride0, bt_stride1, num_req, num_cols,
                                           req_ptr, entry_ptr, emit_ptr, rows, ok, PAGE)  # fmt: skip
    tl.store(slots_ptr + rows, slot, mask=ok)
    epos = (tl.maximum(pos, 0) * ratio).to(tl.int32)
    tl.store(epos_ptr + rows, epos, mask=ok)
    if TABLES:
        rope_table_rows(epos.to(tl.float32), rows, ok, freqs_ptr, cos_ptr, sin_ptr, HALF_R, BLOCK_P)


def launch_entry_slots(
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    entry: torch.Tensor,
    emit: torch.Tensor,
    page_size: int,
    ratio: int,
    freqs: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """`ops.entries.entry_slots_positions` in one launch (T > 0); the tables only with
    `freqs` (f32 [R/2] contiguous)."""
    t = entry.shape[0]
    dev = entry.device
    slots = empty((t,), torch.int64, dev)
    epos = empty((t,), torch.int32, dev)
    tables = None
    half_r = 1 if freqs is None else freqs.shape[0]
    if freqs is not None:
        tables = (empty((t, half_r), torch.float32, dev), empty((t, half_r), torch.float32, dev))
    entry_slots_kernel[(triton.cdiv(t, ENTRY_BLOCK),)](
        block_table, block_table.stride(0), block_table.stride(1), block_table.shape[0],
        block_table.shape[1], req_idx.contiguous(), entry.contiguous(),
        emit.contiguous().view(torch.uint8), slots, epos,
        epos if freqs is None else freqs,
        epos if tables is None else tables[0], epos if tables is None else tables[1],
        t, ratio, PAGE=page_size, BLOCK=ENTRY_BLOCK, HALF_R=half_r,
        BLOCK_P=triton.next_power_of_2(half_r), TABLES=freqs is not None, num_warps=4,
        **dependent_launch(dev),
    )  # fmt: skip
    return slots, epos, tables


VOCAB_BLOCK = 1024
_N_FIELDS = 6  # ops.vocab.PARTIAL_FIELDS


@triton.jit
def _mul32(a, c: tl.constexpr):
    # uint32 products wrap mod 2**32: the torch path's `_mul32`.
    return a * tl.full(a.shape, c, tl.uint32)


@triton.jit
def _fmix32(h):
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


@triton.jit
def vocab_partials_kernel(
    x_ptr,
    out_ptr,
    seed_ptr,
    posn_ptr,
    temp_ptr,
    tgt_ptr,
    stride_x,
    v0,
    seg_len,
    nseg,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
    SAMPLE: tl.constexpr,
    TARGETS: tl.constexpr,
    GDC: tl.constexpr = False,
):
    enter_dependent(GDC)
    # One program per (row, segment): the order of every reduction depends on the segment
    # length only. Fields as ops.vocab.PARTIAL_FIELDS. Pass 1: the max and the best score;
    # pass 2: the sum of exp(x - max).
    row = tl.program_id(0)
    sg = tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    base = x_ptr + row * stride_x + sg * seg_len
    out = out_ptr + (row * nseg + sg) * 6
    id0 = v0 + sg * seg_len
    mx = tl.full((BLOCK,), float("-inf"), tl.float32)
    best = tl.full((BLOCK,), float("-inf"), tl.float32)
    bidx = tl.full((BLOCK,), 2147483647, tl.int32)
    bx = tl.zeros((BLOCK,), tl.float32)
    if SAMPLE:
        temp = tl.load(temp_ptr + row)
        seed = tl.load(seed_ptr + row)
        s_lo = (seed & 0xFFFFFFFF).to(tl.uint32)
        s_hi = ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32)
        p = (tl.load(posn_ptr + row).to(tl.int64) & 0xFFFFFFFF).to(tl.uint32)
        greedy = temp <= 0
        safe_t = tl.where(greedy, 1.0, temp)
    for t in range(0, TILES):
        c = t * BLOCK + cols
        ok = c < seg_len
        x = tl.load(base + c, mask=ok, other=float("-inf"))
        mx = tl.maximum(mx, x)
        if SAMPLE:
            ids = id0 + c
            h = _fmix32(((ids.to(tl.int64) + 0x9E3779B9) & 0xFFFFFFFF).to(tl.uint32))
            h = _fmix32(h ^ p)
            h = _fmix32(h ^ s_hi)
            h = _fmix32(h ^ s_lo)
            u = ((h >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
            # fp32 log (no fp64 math on the GPU path): a fixed function of the element, so
            # the same bits in any batch; the torch path's float64 noise may differ by an ulp.
            g = -tl.log(-tl.log(u))
            noisy = tl.div_rn(x, tl.full(x.shape, 1.0, tl.float32) * safe_t) + g
            score = tl.where(greedy, x, noisy)
            score = tl.where(ok, score, float("-inf"))
            # Strictly greater: a lane keeps its earlier (lower) id on ties.
            upd = score > best
            best = tl.where(upd, score, best)
            bidx = tl.where(upd, ids, bidx)
            bx = tl.where(upd, x, bx)
    m = tl.max(mx, axis=0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for t in range(0, TILES):
        c = t * BLOCK + cols
        x = tl.load(base + c, mask=c < seg_len, other=float("-inf"))
        acc += tl.exp(x - m)
    tl.store(out, m)
    tl.store(out + 1, tl.sum(acc, axis=0))
    if SAMPLE:
        top = tl.max(best, axis=0)
        idx = tl.min(tl.where(best == top, bidx, 2147483647), axis=0)
        # No finite score (e.g. all -inf): the segment's first id, as torch.argmax.
        idx = tl.where(idx == 2147483647, id0, idx)
        xv = tl.max(tl.where(bidx == idx, bx, float("-inf")), axis=0)
        xv = tl.where(top == float("-inf"), tl.load(base), xv)
        tl.store(out + 2, top)
        tl.store(out + 3, idx.to(tl.float32))
        tl.store(out + 4, xv)
        if TARGETS:
            tgt = tl.load(tgt_ptr + row) - id0
            hit = (tgt >= 0) & (tgt < seg_len)
            tv = tl.load(base + tl.where(hit, tgt, 0))
            tl.store(out + 5, tl.where(hit, tv, 0.0))
        else:
            tl.store(out + 5, 0.0)
    else:
        tl.store(out + 2, 0.0)
        tl.store(out + 3, 0.0)
        tl.store(out + 4, 0.0)
        tl.store(out + 5, 0.0)


def launch_vocab_partials(x: torch.Tensor, v0: int, seg: int, sampling) -> torch.Tensor:
    """`x: f32 [S, Vl]` contiguous, whole segments of `seg` ids starting at id `v0` ->
    f32 `[S, Vl / seg, 6]` partials (`ops.vocab.segment_partials`)."""
    s, vl = x.shape
    nseg = vl // seg
    out = empty((s, nseg, _N_FIELDS), torch.float32, x.device)
    block = min(VOCAB_BLOCK, triton.next_power_of_2(seg))
    sample = sampling is not None
    targets = sample and sampling.targets is not None
    dummy = x
    vocab_partials_kernel[(s, nseg)](
        x, out,
        sampling.seeds if sample else dummy,
        sampling.positions if sample else dummy,
        sampling.temperature if sample else dummy,
        sampling.targets if targets else dummy,
        x.stride(0), v0, seg, nseg,
        BLOCK=block, TILES=triton.cdiv(seg, block), SAMPLE=sample, TARGETS=targets,
        **dependent_launch(x.device),
    )  # fmt: skip
    return out


@triton.jit
def vocab_combine_kernel(
    parts_ptr,
    tgt_ptr,
    lse_ptr,
    new_ptr,
    logit_ptr,
    tlogit_ptr,
    chosen_ptr,
    logprob_ptr,
    seg_len,
    NSEG: tl.constexpr,
    LOG2_NSEG: tl.constexpr,
    TARGETS: tl.constexpr,
    GDC: tl.constexpr = False,
):
    enter_dependent(GDC)
    # One program per row: ops.vocab.combine_partials's operations in its order (float64
    # exp / log rounded to fp32, the segment sum in row_sum's pairwise order; launched without
    # FMA contraction, which fused `sumexp * scale` into the first addition), then the
    # target's logit and the chosen token's log-prob (ops.vocab.pick without filters).
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, NSEG)
    base = parts_ptr + row * (NSEG * 6)
    m = tl.load(base + j * 6)
    big = tl.max(m, axis=0)
    scale = tl.exp((m - big).to(tl.float64)).to(tl.float32)
    part = tl.load(base + j * 6 + 1) * scale
    # row_sum: the second half added to the first until one element is left.
    for _ in tl.static_range(LOG2_NSEG):
        part = tl.sum(tl.reshape(part, (2, part.shape[0] // 2)), axis=0)
    total = tl.sum(part, axis=0)
    lse = big + tl.log(total.to(tl.float64)).to(tl.float32)
    # torch.argmax: a NaN wins (the first one); else the first of the largest scores.
    score = tl.load(base + j * 6 + 2)
    nan = score != score
    first_nan = tl.min(tl.where(nan, j, NSEG), axis=0)
    top = tl.max(tl.where(nan, float("-inf"), score), axis=0)
    first_top = tl.min(tl.where(score == top, j, NSEG), axis=0)
    best = tl.where(first_nan < NSEG, first_nan, first_top)
    token = tl.load(base + best * 6 + 3).to(tl.int64)
    logit = tl.load(base + best * 6 + 4)
    tl.store(lse_ptr + row, lse)
    tl.store(new_ptr + row, token)
    tl.store(logit_ptr + row, logit)
    chosen = token
    if TARGETS:
        tgt = tl.load(tgt_ptr + row)
        which = tl.minimum(tl.maximum(tgt, 0) // seg_len, NSEG - 1)
        tlogit = tl.load(base + which * 6 + 5)
        tl.store(tlogit_ptr + row, tlogit)
        scored = tgt >= 0
        chosen = tl.where(scored, tgt, token)
        logit = tl.where(scored, tlogit, logit)
    tl.store(chosen_ptr + row, chosen)
    tl.store(logprob_ptr + row, logit - lse)


def launch_vocab_combine(
    parts: torch.Tensor, seg: int, targets: torch.Tensor | None
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor
]:
    """`parts: f32 [S, nseg, 6]` (nseg a power of two), the segment length and the targets
    (int64 `[S]` or None) -> (lse f32 `[S, 1]`, new int64 `[S]`, its logit f32 `[S]`, the
    target's logit f32 `[S]` (None without targets), chosen int64 `[S]`, its log-prob f32
    `[S]`)."""
    s, nseg, _ = parts.shape
    if nseg & (nseg - 1):
        raise ValueError(f"parts must hold a power-of-two number of segments, got {nseg}")
    parts = parts.contiguous()
    dev = parts.device
    lse = empty((s, 1), torch.float32, dev)
    new = empty((s,), torch.int64, dev)
    logit = empty((s,), torch.float32, dev)
    tlogit = empty((s,), torch.float32, dev) if targets is not None else None
    chosen = empty((s,), torch.int64, dev)
    logprob = empty((s,), torch.float32, dev)
    if s:
        vocab_combine_kernel[(s,)](
            parts, targets if targets is not None else new, lse, new, logit,
            tlogit if tlogit is not None else logit, chosen, logprob, seg,
            NSEG=nseg, LOG2_NSEG=nseg.bit_length() - 1, TARGETS=targets is not None, num_warps=1,
            enable_fp_fusion=False,
            **dependent_launch(dev),
        )  # fmt: skip
    return lse, new, logit, tlogit, chosen, logprob
