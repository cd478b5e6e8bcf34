# mypy: disable-error-code="no-untyped-def"
"""Issue 12, twenty-first session (lab): the Gluon logits kernel as one program an SM of NP
producer/consumer pairs that take the spans of the program's range as they come.

Why (`timeline.py`): with four one-pair programs an SM, the programs the SM placed last are
starved by the ones placed first, so the four end at ~46, 48, 55 and 63 us of a 64 x 32K launch
and the SM runs its last ~15 us with one or two programs (a program alone: ~700 cycles a tile;
four together: ~320 SM cycles a tile). Here the four pairs share one program: program g of G
owns spans [g * S // G, (g + 1) * S // G) of the call's S = rows x spans (row-major), and each
pair's producer takes the next span of that range with an atomic increment of the program's
counter (one span ahead of its use), so a starved pair takes fewer spans and the pairs end
within one span of each other.

A span is scored exactly as the production kernel scores it (`gluon_kernels.py`: the same
operands, instructions, order and head-sum tree; the general path over the span when its range
test or its row's query test fails), so the bits are the production kernel's whichever pair
takes a span. Per ring stage the producer writes the span's number (times two, plus the span's
range bit on its last tile) beside the key bytes; -1 ends the consumer. A consumer folds the
queries again when its span's row changes (its spans increase, so at most once per row it
meets) and after the general path, which uses the query buffers.

Measured on the H200 (BENCHMARKS.md, issue 12, twenty-first session): bitwise the production
kernel, but slower at 64 x 32K (production 68 us): 130 us with the consumers first and their
loop unrolled by the ring's 4 stages, 145 us with the producers as the oldest warps (as here),
88 us with the loop not unrolled (as here: UNROLL 1). Each pair's partition is its
own copy of the code, and four copies of the unrolled consumer body (~13 KB each) overflow
the SM's instruction cache. Not adopted; kept as the record of the design.

`_rowclaim_kernel` (measured in the twenty-second session, not adopted): the same producer and
consumer as one pair a program in the production layout (programs (t, j), four an SM running
one copy of the code), taking row t's spans from a per-row counter that the launcher zeroes
(the launcher passes n_spans = -1 to say so). Offline for sm_90a: 8 warps, 33.9 KB of shared
memory, the consumer's 4-tile loop 867 instructions (production 845), the producer's tile loop
154, spills only per span. On the H200 (`benchmarks/results/lead_s22_call1.sh`): bitwise the
production kernel on every scenario and size, 4-22% slower at every size (64 x 32K 75.8 us
against 68.0 with the launch hidden). Likely causes, not measured apart: each claimed span
starts by loading its row's state and its 16 pages while the ring drains, and a span (16
tiles, the path decision's unit) is too coarse to even out the SMs' ends.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ds41_cache.ops.launch import gluon_enter_dependent
from ds41_indexer.ops.logits.gluon_kernels import (
    BLOCK_N,
    DI,
    PRODUCER_REGS,
    ROW_WORDS,
    SPAN,
    _data_smem_layout,
    _e2m1_pair_f16,
    _f16x2_dup,
    _f16x2_halves,
    _fold_queries,
    _general_spans,
    _mask_and_store,
    _max_nan,
    _raw_layout,
    _raw_smem_layout,
    _score_to_key,
    _tile_page,
)

PAIRS_STAGES = 4
# lab: with True, each pair records per span (consumer start / end, span, producer start / pages
# loaded / last tile issued; globaltimer ns, low 32 bits) after the counters in claim_ptr
PAIR_STAMPS = gl.constexpr(False)
STAMP_SPANS = gl.constexpr(40)
PAIRS_NUM_WARPS = 4


@gluon.jit
def _warp_claim(ptr):
    """Lane 0 adds one to the int32 at `ptr` (global); every lane gets the old value."""
    return gl.inline_asm_elementwise(
        """
        {
        .reg .pred p;
        .reg .b32 l, v;
        mov.u32 l, %laneid;
        setp.eq.u32 p, l, 0;
        mov.u32 v, 0;
        @p atom.global.add.u32 v, [$1], 1;
        shfl.sync.idx.b32 $0, v, 0, 0x1f, 0xffffffff;
        }
        """,
        "=r,l",
        [ptr],
        dtype=gl.int32,
        is_pure=False,
        pack=1,
    )


@gluon.jit
def _cta_reset(ptr):
    """Thread 0 sets the int32 at `ptr` to 0 and waits for it (returns the old value)."""
    return gl.inline_asm_elementwise(
        """
        {
        .reg .pred p;
        .reg .b32 t, v;
        mov.u32 t, %tid.x;
        setp.eq.u32 p, t, 0;
        mov.u32 v, 0;
        @p atom.global.exch.b32 v, [$1], 0;
        mov.u32 $0, v;
        }
        """,
        "=r,l",
        [ptr],
        dtype=gl.int32,
        is_pure=False,
        pack=1,
    )


@gluon.jit
def _now():
    return gl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1
    )


@gluon.jit
def _pair_stamp(claim_ptr, C: gl.constexpr, j, k: gl.constexpr, v):
    if PAIR_STAMPS:
        at = gl.num_programs(0) + ((gl.program_id(0) * 4 + C) * STAMP_SPANS + j) * 6 + k
        gl.store(claim_ptr + at, v.to(gl.int32), mask=j < STAMP_SPANS)


@gluon.jit
def _range_of(n_spans):
    """This program's spans [lo, hi) of the call's n_spans."""
    g = gl.program_id(0).to(gl.int64)
    n = gl.num_programs(0).to(gl.int64)
    return (g * n_spans) // n, ((g + 1) * n_spans) // n


@gluon.jit
def _row_of(t, req_ptr, pos_ptr, ratio, n_req, bt_stride_r):
    """(n_vis, r_at) of row t (`gluon_kernels._row_state` for a row given by value)."""
    r = gl.load(req_ptr + t)
    p = gl.load(pos_ptr + t)
    live = (r >= 0) & (r < n_req)
    n_vis = gl.where(live, (p + 1) // ratio, 0)
    r_at = gl.where(live, r, 0).to(gl.int64) * bt_stride_r
    return n_vis, r_at


@gluon.jit
def _pp_pages(page_smem, bt_ptr, r_at, entry_base, c_first, n_cols, n_vis, bt_cols, num_pages,
              P: gl.constexpr, PAGE_SIZE: gl.constexpr):  # fmt: skip
    """`gluon_kernels._program_pages` for one span of pair P: its 16 tiles' pages into slots
    P * SPAN.. of page_smem (int32 [NP * SPAN, 1])."""
    tl_lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    c0 = c_first + gl.arange(0, SPAN, layout=tl_lay) * BLOCK_N
    col = (entry_base + c0) // PAGE_SIZE
    live = (c0 < n_cols) & (entry_base + c0 < n_vis) & (col < bt_cols)
    page = gl.load(bt_ptr + r_at + col, mask=live, other=-1)
    ok = live & (page >= 0) & (page < num_pages)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    n: gl.constexpr = page_smem.shape[0]
    page_smem._reinterpret(gl.int32, [n], flat).slice(P * SPAN, SPAN).store(gl.where(ok, page, -1))
    gl.thread_barrier()


@gluon.jit
def _pp_issue(gp, tl, page, ok, c_first, entry_base, wptr, pw, data_smem, ready, empty, rows,
              words, keys, dl: gl.constexpr, P: gl.constexpr, PAGE_SIZE: gl.constexpr,
              STAGES: gl.constexpr):  # fmt: skip
    """`gluon_kernels._pf_issue` for the tile tl of a span at ring position gp of pair P."""
    s = P * STAGES + gp % STAGES
    c0 = c_first + tl * BLOCK_N
    off = (entry_base + c0) % PAGE_SIZE
    base = page * pw
    sw = gl.load(wptr + (base + PAGE_SIZE * ROW_WORDS + off) + keys, mask=ok, other=0)
    mbarrier.wait(empty.index(s), ((gp // STAGES) & 1) ^ 1, pred=gp >= STAGES)
    dptr = wptr + (base + off * ROW_WORDS) + rows[:, None] * ROW_WORDS + words[None, :]
    mask = gl.full([BLOCK_N, ROW_WORDS], 1, gl.int1, dl) & ok
    async_copy.async_copy_global_to_shared(data_smem.index(s), dptr, mask=mask)
    async_copy.mbarrier_arrive(ready.index(s), increment_count=False)
    return sw


@gluon.jit
def _pp_finish(gp, tl, sw, pbad, c_first, lim, meta, fac_smem, mult_smem, meta_smem, ready,
               keys, nib, P: gl.constexpr, STAGES: gl.constexpr,
               LAST: gl.constexpr):  # fmt: skip
    """`gluon_kernels._pf_finish` for the tile tl of a span at ring position gp of pair P, plus
    the stage's span word (`meta`; on the span's last tile with its range bit)."""
    s = P * STAGES + gp % STAGES
    sc = (sw[:, None] >> (nib[None, :] * 8)) & 0xFF
    mk = gl.max(sc, axis=1)
    mn = gl.min(sc, axis=1)
    fac_smem.index(s).store(_f16x2_dup(((sc - mk[:, None]) + 142) << 23))
    mult_smem.index(s).store(((gl.minimum(gl.maximum(mk, 10), 250) - 9) << 23).to(
        gl.float32, bitcast=True))  # fmt: skip
    valid = keys < lim - (c_first + tl * BLOCK_N)
    out_of_range = (mn < mk - 32) | (mk < 10) | (mk > 250)
    pbad = pbad | (valid & out_of_range).to(gl.int32)
    one: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    word = meta
    if LAST:
        word = meta + gl.max(pbad, axis=0)
    meta_smem.index(s).store(gl.full([1], 0, gl.int32, one) + word)
    gl.thread_barrier()
    mbarrier.arrive(ready.index(s), count=1)
    return pbad


@gluon.jit
def _pair_producer(a, data_smem, fac_smem, mult_smem, meta_smem, ready, empty, page_smem,
                   P: gl.constexpr, PAGE_SIZE: gl.constexpr,
                   STAGES: gl.constexpr):  # fmt: skip
    (
        _q_ptr,
        _w_ptr,
        cache_ptr,
        bt_ptr,
        req_ptr,
        pos_ptr,
        _cand_ptr,
        _out_ptr,
        _gmax_ptr,
        _path_ptr,
        claim_ptr,
        ratio,
        entry_base,
        n_cols,
        _q_stride_t,
        _q_stride_h,
        _w_stride_t,
        n_req,
        bt_cols,
        bt_stride_r,
        num_pages,
        page_stride,
        _cand_stride_t,
        _cand_cols,
        _out_stride_t,
        _gmax_stride_t,
        _path_stride_t,
        n_spans,
        spans_per_row,
    ) = a
    # n_spans < 0 (`_rowclaim_kernel`): program (t, j) takes the spans of row t from row t's
    # counter; else program g the spans of its range from its own (a constexpr flag here
    # crashed the Gluon compiler's coalescing pass on the eight-partition kernel)
    lo, hi = _range_of(n_spans)
    if n_spans < 0:
        lo = gl.program_id(0).to(gl.int64) * spans_per_row
        hi = lo + spans_per_row
    cnt = claim_ptr + gl.program_id(0)
    dl: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [1, 1], [1, 0])
    kl: gl.constexpr = gl.BlockedLayout([2, 4], [32, 1], [1, 1], [1, 0])
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, dl))
    words = gl.arange(0, ROW_WORDS, layout=gl.SliceLayout(0, dl))
    keys = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kl))
    nib = gl.arange(0, 4, layout=gl.SliceLayout(0, kl))
    wptr = cache_ptr.to(gl.pointer_type(gl.int32))
    pw = page_stride // 4
    span = lo + _warp_claim(cnt)
    gp = span.to(gl.int32) * 0
    js = gp
    while span < hi:
        _pair_stamp(claim_ptr, P, js, 3, _now())
        # the next claim now: its latency passes under this span's tiles
        nxt_span = lo + _warp_claim(cnt)
        t = span // spans_per_row
        c_first = ((span % spans_per_row) * (SPAN * BLOCK_N)).to(gl.int32)
        n_vis, r_at = _row_of(t, req_ptr, pos_ptr, ratio, n_req, bt_stride_r)
        lim = gl.minimum(n_cols, n_vis - entry_base)
        _pp_pages(page_smem, bt_ptr, r_at, entry_base, c_first, n_cols, n_vis, bt_cols,
                  num_pages, P, PAGE_SIZE)  # fmt: skip
        _pair_stamp(claim_ptr, P, js, 4, _now())
        meta = (span * 2).to(gl.int32)
        pbad = gl.zeros([BLOCK_N], gl.int32, gl.SliceLayout(1, kl))
        page, ok = _tile_page(page_smem, P * SPAN)
        sw = _pp_issue(gp, 0, page, ok, c_first, entry_base, wptr, pw, data_smem, ready, empty,
                       rows, words, keys, dl, P, PAGE_SIZE, STAGES)  # fmt: skip
        for tl in range(1, SPAN):
            page, ok = _tile_page(page_smem, P * SPAN + tl)
            nsw = _pp_issue(gp + tl, tl, page, ok, c_first, entry_base, wptr, pw, data_smem,
                            ready, empty, rows, words, keys, dl, P, PAGE_SIZE,
                            STAGES)  # fmt: skip
            pbad = _pp_finish(gp + tl - 1, tl - 1, sw, pbad, c_first, lim, meta, fac_smem,
                              mult_smem, meta_smem, ready, keys, nib, P, STAGES,
                              False)  # fmt: skip
            sw = nsw
        pbad = _pp_finish(gp + SPAN - 1, SPAN - 1, sw, pbad, c_first, lim, meta, fac_smem,
                          mult_smem, meta_smem, ready, keys, nib, P, STAGES, True)  # fmt: skip
        _pair_stamp(claim_ptr, P, js, 5, _now())
        js += 1
        gp += SPAN
        span = nxt_span
    # the end: a stage whose span word is -1 (all of the stage's arrivals at once)
    s = P * STAGES + gp % STAGES
    mbarrier.wait(empty.index(s), ((gp // STAGES) & 1) ^ 1, pred=gp >= STAGES)
    one: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    meta_smem.index(s).store(gl.full([1], -1, gl.int32, one))
    gl.thread_barrier()
    mbarrier.arrive(ready.index(s), count=33)


@gluon.jit
def _pair_consumer(a, data_smem, fac_smem, mult_smem, meta_smem, q_smem, q2_smem, ready, empty,
                   HI: gl.constexpr, HI_PAD: gl.constexpr, PAGE_SIZE: gl.constexpr,
                   HAS_CAND: gl.constexpr, OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr,
                   STAGES: gl.constexpr, C: gl.constexpr,
                   UNROLL: gl.constexpr):  # fmt: skip
    """Consumer of pair C: the spans its producer hands over, each as the production kernel's
    consumer scores a span (`gluon_kernels._consume`), then the span's general path if its
    range bit or its row's query test says so, and the span's path byte."""
    (
        q_ptr,
        w_ptr,
        cache_ptr,
        bt_ptr,
        req_ptr,
        pos_ptr,
        cand_ptr,
        out_ptr,
        gmax_ptr,
        path_ptr,
        claim_ptr,
        ratio,
        entry_base,
        n_cols,
        q_stride_t,
        q_stride_h,
        w_stride_t,
        n_req,
        bt_cols,
        bt_stride_r,
        num_pages,
        page_stride,
        cand_stride_t,
        cand_cols,
        out_stride_t,
        gmax_stride_t,
        path_stride_t,
        _n_spans,
        spans_per_row,
    ) = a
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HI_PAD, 16]
    )
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    rl: gl.constexpr = _raw_layout()
    scl: gl.constexpr = gl.SliceLayout(2, rl)
    row: gl.constexpr = gl.SliceLayout(1, mma)
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    qs = q_smem.index(C)
    q2s = q2_smem.index(C)
    qlo = qs.permute((1, 0))
    qhi = q2s.permute((1, 0))
    lane_rows = gl.arange(0, BLOCK_N, layout=row)
    zero = gl.zeros([BLOCK_N, HI_PAD], gl.float32, mma)
    gml: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
    slot = gl.arange(0, 32, layout=gl.SliceLayout(0, gml))
    warp_row = gl.arange(0, 4, layout=gl.SliceLayout(1, gml)) * (BLOCK_N // 4)
    # the row whose queries are in this pair's buffers (-1: none)
    cur_t = gl.program_id(0).to(gl.int64) * 0 - 1
    n_vis = gl.program_id(0) * 0
    r_at = cur_t * 0
    q_ok = n_vis == 0
    wf = gl.zeros([HI_PAD], gl.float32, gl.SliceLayout(0, mma))
    gp = n_vis
    js = n_vis
    go = n_vis == 0
    while go:
        s0 = C * STAGES
        mbarrier.wait(ready.index(s0), (gp // STAGES) & 1)
        m = gl.max(meta_smem.index(s0).load(one), axis=0)
        if m >= 0:
            _pair_stamp(claim_ptr, C, js, 0, _now())
            span = (m >> 1).to(gl.int64)
            t = span // spans_per_row
            sp = span % spans_per_row
            c_first = (sp * (SPAN * BLOCK_N)).to(gl.int32)
            if t != cur_t:
                n_vis, r_at = _row_of(t, req_ptr, pos_ptr, ratio, n_req, bt_stride_r)
                wf, q_ok = _fold_queries(q_ptr, w_ptr, t, q_stride_t, q_stride_h, w_stride_t,
                                         qs, q2s, HI, HI_PAD, mma, True)  # fmt: skip
                fence_async_shared()
                gl.thread_barrier()
                cur_t = t
            out_row = out_ptr + t * out_stride_t
            lim = gl.minimum(n_cols, n_vis - entry_base)
            gslots = gl.zeros([4, 32], gl.float32, gml)
            last = m
            for q4 in range(0, SPAN, UNROLL):
                for k in gl.static_range(UNROLL):
                    tl = q4 + k
                    if UNROLL == STAGES:
                        s = C * STAGES + k
                    else:
                        s = C * STAGES + tl % STAGES
                    c0 = c_first + tl * BLOCK_N
                    mbarrier.wait(ready.index(s), ((gp + tl) // STAGES) & 1)
                    raw = data_smem.index(s)._reinterpret(gl.int16, [BLOCK_N, 4, 8],
                                                          _raw_smem_layout())  # fmt: skip
                    raw = raw.load(rl)
                    fac = fac_smem.index(s).load(scl)
                    kfac = mult_smem.index(s).load(row)
                    if k == UNROLL - 1:
                        last = gl.max(meta_smem.index(s).load(one), axis=0)
                    gl.thread_barrier()
                    mbarrier.arrive(empty.index(s), count=1)
                    fac = gl.expand_dims(fac, 2).broadcast_to([BLOCK_N, 4, 8])
                    lw, hw = _e2m1_pair_f16(raw, fac)
                    l0, l1 = _f16x2_halves(lw)
                    h0, h1 = _f16x2_halves(hw)
                    lo = gl.convert_layout(gl.reshape(gl.join(l0, l1), [BLOCK_N, DI // 2]), a_op)
                    hi = gl.convert_layout(gl.reshape(gl.join(h0, h1), [BLOCK_N, DI // 2]), a_op)
                    acc = warpgroup_mma(lo, qlo, zero, is_async=True)
                    acc = warpgroup_mma(hi, qhi, acc, is_async=True)
                    acc = warpgroup_mma_wait(0, deps=[acc])
                    logit = gl.sum(gl.maximum(acc, 0.0) * wf[None, :], axis=1)
                    logit = logit * kfac
                    valid = lane_rows < lim - c0
                    in_row = lane_rows < n_cols - c0
                    logit = _mask_and_store(logit, valid, entry_base + c0 + lane_rows,
                                            out_row + c0 + lane_rows, in_row,
                                            cand_ptr + t * cand_stride_t, cand_cols, HAS_CAND,
                                            OUT_BF16)  # fmt: skip
                    if HAS_GMAX:
                        lw = gl.reduce(gl.reshape(logit, [4, BLOCK_N // 4]), 1, _max_nan)
                        kw = gl.convert_layout(lw, gl.SliceLayout(1, gml))
                        gslots = gl.where(slot[None, :] == tl, kw[:, None], gslots)
            if HAS_GMAX:
                first = c_first + slot[None, :] * BLOCK_N + warp_row[:, None]
                gk = gl.max(gl.where(first < lim, _score_to_key(gslots), 0), axis=0)
                g = c_first // BLOCK_N + slot
                gkeep = (slot < SPAN) & (g * BLOCK_N < n_cols)
                gl.store(gmax_ptr + t * gmax_stride_t + g, gk.to(gl.int32, bitcast=True),
                         mask=gkeep)  # fmt: skip
            bad = ((last & 1) != 0) | (~q_ok)
            if bad:
                _general_spans(1, q_ptr, w_ptr, cache_ptr, bt_ptr, cand_ptr, out_ptr, gmax_ptr,
                               t, r_at, n_vis, entry_base, n_cols, c_first, q_stride_t,
                               q_stride_h, w_stride_t, bt_cols, num_pages, page_stride,
                               cand_stride_t, cand_cols, out_stride_t, gmax_stride_t, qs, q2s,
                               HI, HI_PAD, PAGE_SIZE, HAS_CAND, OUT_BF16, HAS_GMAX, SPAN,
                               mma)  # fmt: skip
                # the general path used the query buffers
                cur_t = cur_t * 0 - 1
            pv = gl.full([1], 1, gl.int8, one) + bad.to(gl.int8)
            pk = gl.full([1], 0, gl.int64, one) + sp
            gl.store(path_ptr + t * path_stride_t + pk, pv)
            _pair_stamp(claim_ptr, C, js, 1, _now())
            _pair_stamp(claim_ptr, C, js, 2, span)
            js += 1
            gp += SPAN
        else:
            go = m >= 0


@gluon.jit
def _idle():
    pass


@gluon.jit
def _pairs_kernel(
    q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr, gmax_ptr, path_ptr,
    claim_ptr, ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t, n_req, bt_cols,
    bt_stride_r, num_pages, page_stride, cand_stride_t, cand_cols, out_stride_t,
    gmax_stride_t, path_stride_t, n_spans, spans_per_row,
    HI: gl.constexpr, HI_PAD: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr,
    OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, GDC: gl.constexpr = False,
):  # fmt: skip
    gluon_enter_dependent(GDC)
    NP: gl.constexpr = 4
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HI_PAD, DI // 2], gl.float16)
    data_smem = gl.allocate_shared_memory(gl.int32, [NP * STAGES, BLOCK_N, ROW_WORDS],
                                          _data_smem_layout())  # fmt: skip
    fac_smem = gl.allocate_shared_memory(gl.int32, [NP * STAGES, BLOCK_N, 4],
                                         gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))  # fmt: skip
    mult_smem = gl.allocate_shared_memory(gl.float32, [NP * STAGES, BLOCK_N], plain1)
    # per stage: the span word of the tile (`_pp_finish`)
    meta_smem = gl.allocate_shared_memory(gl.int32, [NP * STAGES, 1], plain1)
    q_smem = gl.allocate_shared_memory(gl.float16, [NP, HI_PAD, DI // 2], q_lay)
    q2_smem = gl.allocate_shared_memory(gl.float16, [NP, HI_PAD, DI // 2], q_lay)
    ready = gl.allocate_shared_memory(gl.int64, [NP * STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NP * STAGES, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(NP * STAGES):
        mbarrier.init(ready.index(b), count=33)
        mbarrier.init(empty.index(b), count=1)
    # per pair: the pages of its span's tiles (`_program_pages`)
    page_smem = gl.allocate_shared_memory(gl.int32, [NP * SPAN, 1], plain1)
    # this program's span counter starts at 0 before any pair takes a span
    # (the branch uses the exchange's result, so thread 0 waits for it before the barrier and
    # no pair's increment can reach the counter first)
    old = _cta_reset(claim_ptr + gl.program_id(0))
    if old == -123456789:
        fence_async_shared()
    fence_async_shared()
    gl.thread_barrier()
    a = (q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr, gmax_ptr,
         path_ptr, claim_ptr, ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t,
         n_req, bt_cols, bt_stride_r, num_pages, page_stride, cand_stride_t, cand_cols,
         out_stride_t, gmax_stride_t, path_stride_t, n_spans, spans_per_row)  # fmt: skip
    # the consumers' loops are not unrolled (UNROLL 1): each pair's consumer is its own copy of
    # the code, and four copies of a 4-tile body (~13 KB each) overflow the instruction cache.
    # The producers come first (warps 4-7, after the idle default partition), so schedulers that
    # favour older warps do not starve them behind the consumers
    gl.warp_specialize(
        [
            (_idle, ()),
            (_pair_producer, (a, data_smem, fac_smem, mult_smem, meta_smem, ready, empty,
                              page_smem, 0, PAGE_SIZE, STAGES)),
            (_pair_producer, (a, data_smem, fac_smem, mult_smem, meta_smem, ready, empty,
                              page_smem, 1, PAGE_SIZE, STAGES)),
            (_pair_producer, (a, data_smem, fac_smem, mult_smem, meta_smem, ready, empty,
                              page_smem, 2, PAGE_SIZE, STAGES)),
            (_pair_producer, (a, data_smem, fac_smem, mult_smem, meta_smem, ready, empty,
                              page_smem, 3, PAGE_SIZE, STAGES)),
            (_pair_consumer, (a, data_smem, fac_smem, mult_smem, meta_smem, q_smem, q2_smem,
                              ready, empty, HI, HI_PAD, PAGE_SIZE, HAS_CAND, OUT_BF16,
                              HAS_GMAX, STAGES, 0, 1)),
            (_pair_consumer, (a, data_smem, fac_smem, mult_smem, meta_smem, q_smem, q2_smem,
                              ready, empty, HI, HI_PAD, PAGE_SIZE, HAS_CAND, OUT_BF16,
                              HAS_GMAX, STAGES, 1, 1)),
            (_pair_consumer, (a, data_smem, fac_smem, mult_smem, meta_smem, q_smem, q2_smem,
                              ready, empty, HI, HI_PAD, PAGE_SIZE, HAS_CAND, OUT_BF16,
                              HAS_GMAX, STAGES, 2, 1)),
            (_pair_consumer, (a, data_smem, fac_smem, mult_smem, meta_smem, q_smem, q2_smem,
                              ready, empty, HI, HI_PAD, PAGE_SIZE, HAS_CAND, OUT_BF16,
                              HAS_GMAX, STAGES, 3, 1)),
        ],
        [1, 1, 1, 1, 4, 4, 4, 4],
        [PRODUCER_REGS, PRODUCER_REGS, PRODUCER_REGS, PRODUCER_REGS, CONSUMER_REGS,
         CONSUMER_REGS, CONSUMER_REGS, CONSUMER_REGS],
    )  # fmt: skip


@gluon.jit
def _rowclaim_kernel(
    q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr, gmax_ptr, path_ptr,
    claim_ptr, ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t, n_req, bt_cols,
    bt_stride_r, num_pages, page_stride, cand_stride_t, cand_cols, out_stride_t,
    gmax_stride_t, path_stride_t, n_spans, spans_per_row,
    HI: gl.constexpr, HI_PAD: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr,
    OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr, STAGES: gl.constexpr,
    GDC: gl.constexpr = False,
):  # fmt: skip
    """Prepared, not measured (twenty-first session): the production layout (programs (t, j),
    one producer warp and one consumer warpgroup each, four programs an SM running the same
    code), but the programs of row t take its spans from row t's counter (claim_ptr[t], zeroed
    by the launcher) one span ahead, so the programs an SM favours take more of their rows and
    the SM's programs end together. The consumer folds its row's queries once."""
    gluon_enter_dependent(GDC)
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HI_PAD, DI // 2], gl.float16)
    data_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, ROW_WORDS],
                                          _data_smem_layout())  # fmt: skip
    fac_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, 4],
                                         gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))  # fmt: skip
    mult_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_N], plain1)
    meta_smem = gl.allocate_shared_memory(gl.int32, [STAGES, 1], plain1)
    q_smem = gl.allocate_shared_memory(gl.float16, [1, HI_PAD, DI // 2], q_lay)
    q2_smem = gl.allocate_shared_memory(gl.float16, [1, HI_PAD, DI // 2], q_lay)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(STAGES):
        mbarrier.init(ready.index(b), count=33)
        mbarrier.init(empty.index(b), count=1)
    page_smem = gl.allocate_shared_memory(gl.int32, [SPAN, 1], plain1)
    fence_async_shared()
    gl.thread_barrier()
    a = (q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr, gmax_ptr,
         path_ptr, claim_ptr, ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t,
         n_req, bt_cols, bt_stride_r, num_pages, page_stride, cand_stride_t, cand_cols,
         out_stride_t, gmax_stride_t, path_stride_t, n_spans, spans_per_row)  # fmt: skip
    gl.warp_specialize(
        [
            (_pair_consumer, (a, data_smem, fac_smem, mult_smem, meta_smem, q_smem, q2_smem,
                              ready, empty, HI, HI_PAD, PAGE_SIZE, HAS_CAND, OUT_BF16,
                              HAS_GMAX, STAGES, 0, STAGES)),
            (_pair_producer, (a, data_smem, fac_smem, mult_smem, meta_smem, ready, empty,
                              page_smem, 0, PAGE_SIZE, STAGES)),
        ],
        [1],
        [PRODUCER_REGS],
    )  # fmt: skip
