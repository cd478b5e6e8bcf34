# mypy: disable-error-code="no-untyped-def"
# Lab copy (issue 12, sixth round, call 2): the software-pipelined Gluon kernel (two tiles per
# loop step; stage released by one asynchronous arrival per thread). Slower than the production
# (one tile at a time) kernel on the H200: see gluon6_lab.py and BENCHMARKS.md.
"""Hopper (sm_90a) Gluon kernel of the paged indexer logits, MXFP4 keys, fp16 path.

Contract: the same programs as the Triton kernel (`triton_kernels.py`): program (t, j) scores
row t against span j of `SPAN` = 16 tiles of 64 entries, on the fp16 path of the module
docstring there, with the same operands, the same tensor-core instruction shape (m64 n HI_PAD
k16, keys as the register A operand, the folded queries in shared memory as B, low nibbles then
high nibbles, K ascending), the same ReLU, head weights, head-sum tree (the reduction of one
accumulator layout) and power-of-two factors, so the logits it writes are the Triton fast
path's bits. It does not choose: it scores every span on the fast path and records, per span,
whether the fast path was the right one (`done` = 1: the row's queries and every readable key
scale byte of the span are in the fast path's range, the test of `_span_in_fast_range` and
`_fold_queries`). The launcher then runs the Triton kernel for the spans with `done` = 0, which
overwrites them (general path), so every span ends with the bits the Triton kernel alone gives.

Structure (warp specialized; why: the Triton loop is bound by its serial per-tile chain of
cp.async waits, barriers and waited tensor-core groups, not by memory or the decode):
- producer (1 warp): per tile, waits for a free ring stage, then one cp.async gather of the
  tile's 4,096 key bytes and 256 scale bytes (one page block each: a tile lies in one page)
  into the stage, completing on the stage's mbarrier (one asynchronous arrival per thread).
  Tiles past the row's visible entries or with a page outside the cache are masked copies
  (zero-fill, nothing read).
- consumer (4 warps): folds the row's queries into shared memory once, then per tile waits for
  its stage, loads the packed bytes (2-byte elements, each one half of a thread's fp16x2 A
  operand) and the scale bytes, releases the stage (one barrier of its 4 warps), decodes, runs
  the two tensor-core products and the epilogue (mask, store, group maximum, range test).
Several programs share an SM (registers capped by `GLUON_MAXNREG`), so one program's waits are
covered by the others' work.
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

GLUON_BLOCK_N = 64
GLUON_SPAN = 16  # tiles per fast/general decision (the Triton kernel's TILES)
GLUON_SPANS = 1  # spans per program
GLUON_STAGES = 4  # ring stages (4,352 bytes each)
GLUON_NUM_WARPS = 4
# Registers: every thread of the 8 warps (the 1-warp producer occupies a warpgroup) is capped
# at GLUON_MAXNREG, the producer drops to PRODUCER_REGS and the consumer gets the rest, so
# 65,536 / (256 * GLUON_MAXNREG) programs fit an SM.
GLUON_MAXNREG = 72
GLUON_PRODUCER_REGS = 24
PRODUCER_REGS = gl.constexpr(GLUON_PRODUCER_REGS)
BLOCK_N = gl.constexpr(GLUON_BLOCK_N)
DI = gl.constexpr(128)  # channels (MXFP4: 64 data bytes and 4 scale bytes per entry)
ROW_WORDS = gl.constexpr(16)  # int32 words of one entry's data


@gluon.constexpr_function
def _raw_layout():
    # int16 [64 entries, 4 blocks, 8 pairs]: the registers of the wgmma A operand (m64 k16,
    # 4 warps): thread (warp w, lane 4g + l) holds entries 16w + g and 16w + g + 8, pairs l and
    # l + 4 of every block (bytes 2l, 2l + 1, 2l + 8, 2l + 9: K 2l, 2l + 1, 2l + 8, 2l + 9 of
    # the block's k16 step); the register order makes join + reshape the A layout exactly.
    return gl.DistributedLinearLayout(
        reg_bases=[[8, 0, 0], [0, 0, 4], [0, 1, 0], [0, 2, 0]],
        lane_bases=[[0, 0, 1], [0, 0, 2], [1, 0, 0], [2, 0, 0], [4, 0, 0]],
        warp_bases=[[16, 0, 0], [32, 0, 0]],
        block_bases=[],
        shape=[64, 4, 8],
    )


@gluon.jit
def _e2m1_pair_f16(raw, fac):
    """Packed e2m1 byte pairs (int16) and the fp16x2 factor (int32, same shape) -> (low
    nibbles, high nibbles) as int32 fp16x2 words: the Triton kernel's `_e2m1_pair_f16`."""
    return gl.inline_asm_elementwise(
        """
        {
        .reg .b32 l, h, t;
        .reg .b16 l0, l1, h0, h1;
        shl.b32 t, $4, 4;
        and.b32 t, t, 0x80808080;
        shl.b32 l, $4, 2;
        and.b32 l, l, 0x1C1C1C1C;
        or.b32 l, l, t;
        and.b32 t, $4, 0x80808080;
        shr.b32 h, $4, 2;
        and.b32 h, h, 0x1C1C1C1C;
        or.b32 h, h, t;
        mov.b32 {l0, l1}, l;
        mov.b32 {h0, h1}, h;
        cvt.rn.f16x2.e4m3x2 $0, l0;
        cvt.rn.f16x2.e4m3x2 $1, l1;
        cvt.rn.f16x2.e4m3x2 $2, h0;
        cvt.rn.f16x2.e4m3x2 $3, h1;
        mul.rn.f16x2 $0, $0, $5;
        mul.rn.f16x2 $1, $1, $6;
        mul.rn.f16x2 $2, $2, $5;
        mul.rn.f16x2 $3, $3, $6;
        }
        """,
        "=r,=r,=r,=r,r,r,r",
        [raw, fac],
        dtype=(gl.int32, gl.int32),
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _f16x2_halves(w):
    """int32 fp16x2 words -> (low half, high half) fp16 (register moves only)."""
    return gl.inline_asm_elementwise(
        "mov.b32 {$0, $1}, $2;",
        "=h,=h,r",
        [w],
        dtype=(gl.float16, gl.float16),
        is_pure=True,
        pack=1,
    )


@gluon.jit
def _pow2_bits(e):
    """2**e as fp32 for an int32 tensor e in [-126, 127] (exponent bits)."""
    return ((e + 127) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _score_to_key(x):
    """The top-k's order-preserving uint32 key of an fp32 score (-0.0 ties +0.0)."""
    x = gl.where(x == 0.0, 0.0, x)
    b = x.to(gl.uint32, bitcast=True)
    neg = (b >> 31) != 0
    return gl.where(neg, b ^ 0xFFFFFFFF, b | 0x80000000)


@gluon.jit
def _row_state(req_ptr, pos_ptr, ratio, n_req, bt_stride_r):
    """(t, n_vis, r_at) of this program's row: a request id outside the table is a padding
    row (nothing visible, nothing read)."""
    t = gl.program_id(0).to(gl.int64)
    r = gl.load(req_ptr + t)
    p = gl.load(pos_ptr + t)
    live = (r >= 0) & (r < n_req)
    n_vis = gl.where(live, (p + 1) // ratio, 0)
    r_at = gl.where(live, r, 0).to(gl.int64) * bt_stride_r
    return t, n_vis, r_at


@gluon.jit
def _tile_page(bt_ptr, r_at, entry_base, c0, n_cols, n_vis, bt_cols, num_pages,
               PAGE_SIZE: gl.constexpr):  # fmt: skip
    """(page clamped to >= 0, whether the tile at column c0 has visible entries in a page of
    the cache): the tile lies in one page (PAGE_SIZE and entry_base multiples of 64)."""
    col = (entry_base + c0) // PAGE_SIZE
    live = (c0 < n_cols) & (entry_base + c0 < n_vis) & (col < bt_cols)
    page = gl.load(bt_ptr + r_at + col, mask=live, other=-1)
    ok = live & (page >= 0) & (page < num_pages)
    return gl.where(ok, page, 0).to(gl.int64), ok


@gluon.jit
def _producer(a, data_smem, scale_smem, q_smem, ready, empty, HI: gl.constexpr,
              HI_PAD: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr,
              OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr, STAGES: gl.constexpr,
              TILES: gl.constexpr):  # fmt: skip
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
        _done_ptr,
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
        _done_stride_t,
    ) = a
    _t, n_vis, r_at = _row_state(req_ptr, pos_ptr, ratio, n_req, bt_stride_r)
    c_first = gl.program_id(1) * TILES * BLOCK_N
    # 1 warp: [64 entries, 16 words] of data as 8 x 16-byte copies per thread, and the 64 scale
    # words of the tile's entries
    dl: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [1, 1], [1, 0])
    sl: gl.constexpr = gl.BlockedLayout([2], [32], [1], [0])
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, dl))
    words = gl.arange(0, ROW_WORDS, layout=gl.SliceLayout(0, dl))
    srows = gl.arange(0, BLOCK_N, layout=sl)
    wptr = cache_ptr.to(gl.pointer_type(gl.int32))
    pw = page_stride // 4
    for i in range(TILES):
        s = i % STAGES
        c0 = c_first + i * BLOCK_N
        page, ok = _tile_page(bt_ptr, r_at, entry_base, c0, n_cols, n_vis, bt_cols, num_pages,
                              PAGE_SIZE)  # fmt: skip
        off = (entry_base + c0) % PAGE_SIZE
        base = page * pw
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1, pred=i >= STAGES)
        dptr = wptr + (base + off * ROW_WORDS) + rows[:, None] * ROW_WORDS + words[None, :]
        mask = gl.full([BLOCK_N, ROW_WORDS], 1, gl.int1, dl) & ok
        async_copy.async_copy_global_to_shared(data_smem.index(s), dptr, mask=mask)
        sptr = wptr + (base + PAGE_SIZE * ROW_WORDS + off) + srows
        smask = gl.full([BLOCK_N], 1, gl.int1, sl) & ok
        async_copy.async_copy_global_to_shared(scale_smem.index(s), sptr, mask=smask)
        async_copy.mbarrier_arrive(ready.index(s), increment_count=False)


@gluon.jit
def _fold_queries(q_ptr, w_ptr, t, q_stride_t, q_stride_h, w_stride_t, q_smem,
                  HI: gl.constexpr, HI_PAD: gl.constexpr, mma: gl.constexpr):  # fmt: skip
    """The row's queries into q_smem (fp16 [2, HI_PAD, 64]: even channels, odd channels), each
    head scaled by 2^-e_h so its largest |q| lies in [2^14, 2^15); returns the head weights
    times 2^e_h (f32 [HI_PAD] in the accumulator's column layout) and whether every scaled
    query is exact in fp16 with e_h in range: the Triton kernel's `_fold_queries`."""
    ql: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    h = gl.arange(0, HI_PAD, layout=gl.SliceLayout(1, ql))
    hm = h < HI
    d = gl.arange(0, DI // 2, layout=gl.SliceLayout(0, ql))
    at = q_ptr + t * q_stride_t + h[:, None] * q_stride_h + 2 * d[None, :]
    qe = gl.load(at, mask=hm[:, None], other=0.0).to(gl.float32)
    qo = gl.load(at + 1, mask=hm[:, None], other=0.0).to(gl.float32)
    amax = gl.maximum(gl.max(gl.abs(qe), axis=1), gl.max(gl.abs(qo), axis=1))
    ex = ((amax.to(gl.int32, bitcast=True) >> 23) & 0xFF) - 127
    ex = gl.where(amax == 0.0, 14, ex)
    in_range = (ex >= -100) & (ex <= 100)
    eh = gl.where(in_range, ex - 14, 0)
    qs = _pow2_bits(-eh)[:, None]
    qe = qe * qs
    qo = qo * qs
    qe16 = qe.to(gl.float16)
    qo16 = qo.to(gl.float16)
    exact = (qe16.to(gl.float32) == qe) & (qo16.to(gl.float32) == qo)
    bad = gl.sum((~exact).to(gl.int32), axis=1) + (~in_range).to(gl.int32)
    q_ok = gl.sum(bad, axis=0) == 0
    q_smem.slice(0, DI // 2, dim=1).store(qe16)
    q_smem.slice(DI // 2, DI // 2, dim=1).store(qo16)
    w = gl.load(w_ptr + t * w_stride_t + h, mask=hm, other=0.0)
    wf = gl.convert_layout(w * _pow2_bits(eh), gl.SliceLayout(0, mma))
    return wf, q_ok


@gluon.jit
def _take_tile(i, data_smem, scale_smem, ready, empty, bt_ptr, r_at, entry_base, c_first,
               n_cols, n_vis, bt_cols, num_pages, PAGE_SIZE: gl.constexpr,
               STAGES: gl.constexpr, mma: gl.constexpr):  # fmt: skip
    """Wait for tile i's ring stage, read its keys, release the stage and decode them -> (the
    fp16 A operand [64, 128]: low nibbles then high nibbles, the keys' largest scale byte, 1
    where a readable key's scale bytes are outside the fp16 path's range), rows in
    `SliceLayout(1, mma)`."""
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    rl: gl.constexpr = _raw_layout()
    row: gl.constexpr = gl.SliceLayout(1, mma)
    plain3: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])
    plain2: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    st = i % STAGES
    c0 = c_first + i * BLOCK_N
    _page, page_ok = _tile_page(bt_ptr, r_at, entry_base, c0, n_cols, n_vis, bt_cols,
                                num_pages, PAGE_SIZE)  # fmt: skip
    mbarrier.wait(ready.index(st), (i // STAGES) & 1)
    raw = data_smem.index(st)._reinterpret(gl.int16, [BLOCK_N, 4, 8], plain3).load(rl)
    sc = scale_smem.index(st)._reinterpret(gl.uint8, [BLOCK_N, 4], plain2)
    sc = sc.load(gl.SliceLayout(2, rl)).to(gl.int32)
    mk = gl.max(sc, axis=1)
    mn = gl.min(sc, axis=1)
    d = sc - mk[:, None]
    # factor 2^(d + 15) in fp16 (d in [-32, 0]: normal down to 2^-14, then subnormal)
    e = gl.maximum(d + 15, -24)
    fbits = gl.where(e >= -14, (e + 15) << 10, 1 << (e + 24))
    fac = gl.expand_dims(fbits | (fbits << 16), 2).broadcast_to([BLOCK_N, 4, 8])
    lw, hw = _e2m1_pair_f16(raw, fac)
    l0, l1 = _f16x2_halves(lw)
    h0, h1 = _f16x2_halves(hw)
    # K = 64 half + 16 block + 2 pair + b: the low nibbles (even channels) then the high
    # nibbles, each in channel order (the Triton kernel's two dots as one K = 128 product)
    k16 = gl.join(gl.join(l0, l1), gl.join(h0, h1))
    kk = gl.convert_layout(gl.reshape(gl.permute(k16, (0, 4, 1, 2, 3)), [BLOCK_N, DI]), a_op,
                           assert_trivial=True)  # fmt: skip
    # every thread releases the stage once its reads are consumed (the decode used them)
    async_copy.mbarrier_arrive(empty.index(st), increment_count=False)
    mkr = gl.convert_layout(mk, row)
    cols = c0 + gl.arange(0, BLOCK_N, layout=row)
    valid = (cols < n_cols) & (entry_base + cols < n_vis)
    # the span's range test (the Triton kernel's `_span_in_fast_range`) on readable keys
    out_of_range = (gl.convert_layout(mn, row) < mkr - 32) | (mkr < 10) | (mkr > 250)
    return kk, mkr, (valid & page_ok & out_of_range).to(gl.int32)


@gluon.jit
def _finish_tile(acc, mkr, i, wf, gslots, t, out_row, cand_ptr, cand_stride_t, cand_cols,
                 entry_base, c_first, n_cols, n_vis, HAS_CAND: gl.constexpr,
                 OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr, mma: gl.constexpr,
                 gml: gl.constexpr):  # fmt: skip
    """ReLU, head weights, head sum and the keys' factor of tile i's products `acc`; mask and
    store its logits; returns the group-maximum slots with tile i's per-warp maxima."""
    row: gl.constexpr = gl.SliceLayout(1, mma)
    logit = gl.sum(gl.maximum(acc, 0.0) * wf[None, :], axis=1)
    # the keys' common factor 2^(mk - 136): exact (a power of two on a normal fp32)
    logit = logit * ((gl.minimum(gl.maximum(mkr, 10), 250) - 9) << 23).to(gl.float32, bitcast=True)
    cols = c_first + i * BLOCK_N + gl.arange(0, BLOCK_N, layout=row)
    valid = (cols < n_cols) & (entry_base + cols < n_vis)
    keep = valid
    if HAS_CAND:
        entries = entry_base + cols
        cm = gl.load(cand_ptr + t * cand_stride_t + entries,
                     mask=valid & (entries < cand_cols), other=0)  # fmt: skip
        keep = keep & (cm != 0)
    logit = gl.where(keep, logit, float("-inf"))
    if OUT_BF16:
        bmax: gl.constexpr = 3.3895313892515355e38
        lb = gl.where(logit == float("-inf"), logit,
                      gl.minimum(gl.maximum(logit, -bmax), bmax))  # fmt: skip
        b = lb.to(gl.uint32, bitcast=True)
        rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        gl.store(out_row + cols, rounded.to(gl.int16), mask=cols < n_cols)
    else:
        gl.store(out_row + cols, logit, mask=cols < n_cols)
    if HAS_GMAX:
        # each warp's largest key of its 16 entries, kept in register slot i (lanes hold the
        # slots): the maximum over the warps is taken once after the loop, so no barrier is
        # needed per tile
        key = gl.where(valid, _score_to_key(logit), 0)
        kw = gl.convert_layout(gl.max(gl.reshape(key, [4, BLOCK_N // 4]), axis=1),
                               gl.SliceLayout(1, gml))  # fmt: skip
        slot = gl.arange(0, 32, layout=gl.SliceLayout(0, gml))
        gslots = gl.where(slot[None, :] == i, kw[:, None], gslots)
    return gslots


@gluon.jit
def _consumer(a, data_smem, scale_smem, q_smem, ready, empty, HI: gl.constexpr,
              HI_PAD: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr,
              OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr, STAGES: gl.constexpr,
              TILES: gl.constexpr):  # fmt: skip
    """Software pipelined over the tiles: tile i's products run on the tensor cores while
    tile i + 1 is read and decoded and tile i - 1's logits are finished."""
    (
        q_ptr,
        w_ptr,
        _cache_ptr,
        bt_ptr,
        req_ptr,
        pos_ptr,
        cand_ptr,
        out_ptr,
        gmax_ptr,
        done_ptr,
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
        _page_stride,
        cand_stride_t,
        cand_cols,
        out_stride_t,
        gmax_stride_t,
        done_stride_t,
    ) = a
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HI_PAD, 16]
    )
    gml: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
    t, n_vis, r_at = _row_state(req_ptr, pos_ptr, ratio, n_req, bt_stride_r)
    j = gl.program_id(1)
    c_first = j * TILES * BLOCK_N
    wf, q_ok = _fold_queries(q_ptr, w_ptr, t, q_stride_t, q_stride_h, w_stride_t, q_smem,
                             HI, HI_PAD, mma)  # fmt: skip
    fence_async_shared()
    gl.thread_barrier()
    qk = q_smem.permute((1, 0))
    out_row = out_ptr + t * out_stride_t
    gslots = gl.zeros([4, 32], gl.uint32, gml)
    # Two accumulators, tiles alternating between them, each product started with
    # use_acc=False on the registers of the accumulator's previous product: no other
    # instruction writes an accumulator while products are in flight (ptxas would otherwise
    # serialize every product).
    acc_a = gl.zeros([BLOCK_N, HI_PAD], gl.float32, mma)
    acc_b = gl.zeros([BLOCK_N, HI_PAD], gl.float32, mma)
    bad = gl.zeros([BLOCK_N], gl.int32, gl.SliceLayout(1, mma))
    for p in range(TILES // 2):
        # tile 2p's products run while tile 2p + 1 is decoded, tile 2p + 1's while tile 2p is
        # finished; no product is in flight across iterations
        i = 2 * p
        kk, mk_a, bad_i = _take_tile(i, data_smem, scale_smem, ready, empty, bt_ptr, r_at,
                                     entry_base, c_first, n_cols, n_vis, bt_cols, num_pages,
                                     PAGE_SIZE, STAGES, mma)  # fmt: skip
        bad = bad | bad_i
        # the Triton kernel's two dots as one: the same instructions in the same order
        acc_a = warpgroup_mma(kk, qk, acc_a, use_acc=False, is_async=True)
        kk, mk_b, bad_i = _take_tile(i + 1, data_smem, scale_smem, ready, empty, bt_ptr, r_at,
                                     entry_base, c_first, n_cols, n_vis, bt_cols, num_pages,
                                     PAGE_SIZE, STAGES, mma)  # fmt: skip
        bad = bad | bad_i
        acc_a = warpgroup_mma_wait(0, deps=[acc_a])
        acc_b = warpgroup_mma(kk, qk, acc_b, use_acc=False, is_async=True)
        gslots = _finish_tile(acc_a, mk_a, i, wf, gslots, t, out_row, cand_ptr, cand_stride_t,
                              cand_cols, entry_base, c_first, n_cols, n_vis, HAS_CAND,
                              OUT_BF16, HAS_GMAX, mma, gml)  # fmt: skip
        acc_b = warpgroup_mma_wait(0, deps=[acc_b])
        gslots = _finish_tile(acc_b, mk_b, i + 1, wf, gslots, t, out_row, cand_ptr,
                              cand_stride_t, cand_cols, entry_base, c_first, n_cols, n_vis,
                              HAS_CAND, OUT_BF16, HAS_GMAX, mma, gml)  # fmt: skip
    if HAS_GMAX:
        slot = gl.arange(0, 32, layout=gl.SliceLayout(0, gml))
        gk = gl.max(gslots, axis=0)
        g = c_first // BLOCK_N + slot
        gl.store(gmax_ptr + t * gmax_stride_t + g, gk.to(gl.int32, bitcast=True),
                 mask=(slot < TILES) & (g * BLOCK_N < n_cols))  # fmt: skip
    ok = q_ok & (gl.max(bad, axis=0) == 0)
    gl.store(done_ptr + t * done_stride_t + j, ok.to(gl.int8))
    return (ok,)


@gluon.jit
def _gluon_logits_kernel(
    q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr, gmax_ptr, done_ptr,
    ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t, n_req, bt_cols, bt_stride_r,
    num_pages, page_stride, cand_stride_t, cand_cols, out_stride_t, gmax_stride_t,
    done_stride_t,
    HI: gl.constexpr, HI_PAD: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr,
    OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr, STAGES: gl.constexpr, TILES: gl.constexpr,
):  # fmt: skip
    plain2: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HI_PAD, DI], gl.float16)
    data_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, ROW_WORDS], plain2)
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    scale_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N], plain1)
    q_smem = gl.allocate_shared_memory(gl.float16, [HI_PAD, DI], q_lay)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(STAGES):
        # one asynchronous arrival per producer thread; one arrival of the consumer
        mbarrier.init(ready.index(b), count=32)
        mbarrier.init(empty.index(b), count=128)
    fence_async_shared()
    gl.thread_barrier()
    a = (q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr, gmax_ptr,
         done_ptr, ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t, n_req,
         bt_cols, bt_stride_r, num_pages, page_stride, cand_stride_t, cand_cols, out_stride_t,
         gmax_stride_t, done_stride_t)  # fmt: skip
    # (constexprs stay constexprs only when the argument tuples are written in place)
    gl.warp_specialize(
        [
            (_consumer, (a, data_smem, scale_smem, q_smem, ready, empty, HI, HI_PAD,
                         PAGE_SIZE, HAS_CAND, OUT_BF16, HAS_GMAX, STAGES, TILES)),
            (_producer, (a, data_smem, scale_smem, q_smem, ready, empty, HI, HI_PAD,
                         PAGE_SIZE, HAS_CAND, OUT_BF16, HAS_GMAX, STAGES, TILES)),
        ],
        [1],
        [PRODUCER_REGS],
    )  # fmt: skip
