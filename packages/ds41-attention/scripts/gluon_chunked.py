# mypy: disable-error-code="no-untyped-def"
"""Lab copy (issue 11, sixth session): the Gluon kernel with 64-key tiles and a producer
that works in 16-key ring chunks (two K stages of 64 keys and Q take 192 KB of shared memory,
so only two 16-key chunks of records fit in flight), plus a `DROP` stage switch for timing.
Measured on the H200 slower than the 32-key production kernel at every T (BENCHMARKS.md,
"64-key tiles"), so it is not production. Correct: float64 tolerance, rows alone == in
batches, graph == eager on every format pair; with BLOCK_N=32 (`gluon_profile.py`
`chunk_n32*` variants) its outputs are bitwise the production kernel's.

Apart from the chunked producer, this copy issues every record copy in one key layout
(`_copy_layout`: no layout conversions between the slot load and the copies, 32-bit slot
division); that change measured slower than the conversions it removed (its replicated
address arithmetic costs more issue slots in the producer, which bounds the kernel).

DROP (timing only, outputs meaningless): 1 = the producer skips the decode (copies and
hand-offs stay); 2 = the consumers skip the products and the softmax (hand-offs stay).
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

GLUON_D = 512
GLUON_BLOCK_H = 64
GLUON_BLOCK_N = 64
GLUON_NUM_WARPS = 4
GLUON_KSTAGES = 2
GLUON_CHUNK = 16  # keys per raw-ring slot and decode step (8 when a cache holds bf16 records)
GLUON_RAW_STAGES = 2
# Register split: the launch caps every thread at GLUON_MAXNREG (12 warps x 32 x 168 fit the
# 64K register file); the partitions re-balance with setmaxnreg: consumer 1 to 160, the
# producer to 120, and Triton gives the default partition (consumer 0, which holds two
# 64x64 fp32 score tiles beside its 64x256 accumulator) what is left: 224.
GLUON_MAXNREG = 168
D = gl.constexpr(GLUON_D)
BLOCK_H = gl.constexpr(GLUON_BLOCK_H)
BLOCK_N = gl.constexpr(GLUON_BLOCK_N)
KSMAIN = gl.constexpr(GLUON_KSTAGES)
CHUNK = gl.constexpr(GLUON_CHUNK)
NRAW = gl.constexpr(GLUON_RAW_STAGES)
C1_REGS = gl.constexpr(160)
PRODUCER_REGS = gl.constexpr(120)
DROP = gl.constexpr(0)


@gluon.jit
def _chunk_slots(cg, n_w, end, swa_row, swa_len, comp_row, comp_len, w_slots, c_slots,
                 CH: gl.constexpr, HAS_COMP: gl.constexpr, layout: gl.constexpr):  # fmt: skip
    """(slot int32 clamped to >= 0, validity) of the CH keys of the row's chunk cg (tile
    cg CH // BLOCK_N), in `layout`; chunks of tiles from `end` on are masked (the program's
    slice of the row ends there)."""
    offs = gl.arange(0, CH, layout=layout)
    jw = cg * CH + offs
    in_w = jw < swa_len
    slots = gl.load(swa_row + jw, mask=in_w, other=-1)
    ok = in_w & (slots < w_slots)
    if HAS_COMP:
        jc = jw - n_w * BLOCK_N
        in_c = (jc >= 0) & (jc < comp_len)
        sc = gl.load(comp_row + jc, mask=in_c, other=-1)
        slots = gl.where(in_c, sc, slots)
        ok = ok | (in_c & (sc < c_slots))
    valid = ok & (slots >= 0) & (cg < end * (BLOCK_N // CH))
    return gl.maximum(slots, 0), valid


@gluon.constexpr_function
def _words(fmt):
    # int32 words per key and half of D in the raw ring: MXFP8 64, NVFP4 32, bf16 128
    f = int(fmt)
    return 64 if f == 0 else (32 if f == 1 else (128 if f == 2 else 0))


@gluon.constexpr_function
def _raw_words(w_fmt, c_fmt):
    w, c = int(w_fmt), int(c_fmt)
    ww = 64 if w == 0 else (32 if w == 1 else 128)
    cw = 64 if c == 0 else (32 if c == 1 else (128 if c == 2 else 0))
    return max(ww, cw)


@gluon.constexpr_function
def _kstages(w_fmt, c_fmt):
    return int(KSMAIN)


@gluon.constexpr_function
def _chunk(w_fmt, c_fmt):
    # bf16 records are twice as wide: half the keys per ring slot keep the ring's size
    return int(CHUNK) // 2 if 2 in (int(w_fmt), int(c_fmt)) else int(CHUNK)


@gluon.jit
def _issue_copy(raw_smem, rs, scl, st_ptr, page_stride, page_size, slots, valid,
                FMT: gl.constexpr):  # fmt: skip
    """cp.async both halves of the tile's data bytes into ring slot rs of `raw_smem` (int32
    [2 NRAW, BLOCK_N, RW]: entry 2 rs + h holds channels [256 h, 256 h + 256) of each key,
    packed at FMT's width) and the scale bytes into `scl` (uint8 [BLOCK_N, 32]: MXFP8 16
    ue8m0 per key, NVFP4 32 e4m3)."""
    # slots and valid come in SliceLayout(1, _copy_layout()): no layout conversion here
    page = (slots // page_size).to(gl.int64)  # 32-bit division (slots are int32, >= 0)
    off = (slots % page_size).to(gl.int64)
    base = page * page_stride
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    W: gl.constexpr = _words(FMT)
    lay: gl.constexpr = _copy_layout()
    c = gl.arange(0, W, layout=gl.SliceLayout(0, lay))
    vr = valid
    if FMT == 0:
        row = (base + off * D) // 4
    elif FMT == 1:
        row = (base + off * (D // 2)) // 4
    else:
        row = (base + off * (2 * D)) // 4
    wptr = st_ptr.to(gl.pointer_type(gl.int32))
    RW: gl.constexpr = raw_smem.shape[2]
    CH: gl.constexpr = raw_smem.shape[1]
    for h in gl.static_range(2):
        dst = raw_smem.index(rs * 2 + h)._reinterpret(gl.int32, [CH * (RW // W), W], plain)
        ptrs = wptr + row[:, None] + (h * W + c)[None, :]
        async_copy.async_copy_global_to_shared(dst.slice(0, CH), ptrs, mask=vr[:, None])
    if FMT != 2:
        NS: gl.constexpr = 16 if FMT == 0 else 32
        # the keys distributed as in _copy_layout (the conversions below move no data)
        sl_lay: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])
        ks = gl.arange(0, NS, layout=gl.SliceLayout(0, sl_lay))
        vs = gl.convert_layout(valid, gl.SliceLayout(1, sl_lay), assert_trivial=True)
        if FMT == 0:
            srow = base + page_size * D + off * (D // 32)
        else:
            srow = base + page_size * (D // 2) + off * (D // 16)
        srow = gl.convert_layout(srow, gl.SliceLayout(1, sl_lay), assert_trivial=True)
        sdst = scl._reinterpret(gl.uint8, [CH * (32 // NS), NS], plain).slice(0, CH)
        async_copy.async_copy_global_to_shared(
            sdst, st_ptr + srow[:, None] + ks[None, :], mask=vs[:, None]
        )


@gluon.constexpr_function
def _copy_layout():
    # [keys, int32 words]: keys over 2 threads x 4 warps, 16-byte words along a key. Every
    # copy (data of any width, scales) and the chunk's slot indices share this distribution
    # of keys, so no layout conversion (a shared-memory round trip and a barrier each, four
    # per chunk before) sits between the slot load and the copies; narrower rows (NVFP4) are
    # replicated, which the copy lowering predicates off.
    return gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])


@gluon.constexpr_function
def _dec_layout():
    # [SUB, 256] bf16: 16 consecutive channels of one key per thread
    return gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])


@gluon.jit
def _e2m1_to_e4m3(b):
    """Per byte of NVFP4 codes (element 2i low nibble, 2i+1 high): the e4m3 bytes of the low
    and high nibble; e2m1 code c (3 magnitude bits) as e4m3 `c << 2` is exactly c * 2^-6."""
    return gl.inline_asm_elementwise(
        "{ .reg .b32 t; shl.b32 t, $2, 2; and.b32 $0, t, 0x1C1C1C1C; shl.b32 t, $2, 4;"
        " and.b32 t, t, 0x80808080; or.b32 $0, $0, t; shr.b32 t, $2, 2;"
        " and.b32 $1, t, 0x1C1C1C1C; and.b32 t, $2, 0x80808080; or.b32 $1, $1, t; }",
        "=r,=r,r",
        [b],
        dtype=(gl.uint8, gl.uint8),
        is_pure=True,
        pack=4,
    )


@gluon.jit
def _decode_sub(raw, scl, k0: gl.constexpr, SUB: gl.constexpr, FMT: gl.constexpr,
                C: gl.constexpr):  # fmt: skip
    """bf16 [SUB, 256]: keys [k0, k0 + SUB) of the tile, channels [256 C, 256 C + 256), from
    the raw ring; exact (SPEC section 4). Invalid keys were zero-filled by their masked
    copies (data and scale bytes), so they decode to zeros."""
    lay: gl.constexpr = _dec_layout()
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    NB: gl.constexpr = raw.shape[0] * raw.shape[1] * 4  # bytes of the ring slot
    if FMT == 0:
        l3: gl.constexpr = gl.BlockedLayout([1, 1, 16], [2, 8, 2], [4, 1, 1], [2, 1, 0])
        sv = scl._reinterpret(gl.uint8, [raw.shape[0] * 2, 16], plain).slice(k0, SUB)
        sb = sv.slice(C * 8, 8, dim=1).load(gl.SliceLayout(2, l3)).to(gl.int16)
        s16 = gl.where(sb == 0, 0x40, sb << 7).to(gl.bfloat16, bitcast=True)
        s3 = gl.expand_dims(s16, 2).broadcast_to([SUB, 8, 32])
        scp = gl.convert_layout(gl.reshape(s3, [SUB, 256]), lay, assert_trivial=True)
        b = raw._reinterpret(gl.uint8, [NB // 256, 256], plain).slice(k0, SUB).load(lay)
        x = b.to(gl.float8e4nv, bitcast=True).to(gl.float16).to(gl.float32).to(gl.bfloat16)
        x = x * scp
    elif FMT == 1:
        l3b: gl.constexpr = gl.BlockedLayout([1, 1, 16], [2, 16, 1], [4, 1, 1], [2, 1, 0])
        sv1 = scl.slice(k0, SUB).slice(C * 16, 16, dim=1)
        sb1 = sv1.load(gl.SliceLayout(2, l3b))
        s1 = (sb1.to(gl.float8e4nv, bitcast=True).to(gl.float32) * 64.0).to(gl.bfloat16)
        s3b = gl.expand_dims(s1, 2).broadcast_to([SUB, 16, 16])
        scp1 = gl.convert_layout(gl.reshape(s3b, [SUB, 256]), lay, assert_trivial=True)
        lb: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
        b1 = raw._reinterpret(gl.uint8, [NB // 128, 128], plain).slice(k0, SUB).load(lb)
        lo, hi = _e2m1_to_e4m3(b1)
        flo = lo.to(gl.float8e4nv, bitcast=True).to(gl.float16).to(gl.float32)
        fhi = hi.to(gl.float8e4nv, bitcast=True).to(gl.float16).to(gl.float32)
        f = gl.convert_layout(gl.reshape(gl.join(flo, fhi), [SUB, 256]), lay, assert_trivial=True)
        x = f.to(gl.bfloat16) * scp1
    else:
        x = raw._reinterpret(gl.bfloat16, [NB // 512, 256], plain).slice(k0, SUB).load(lay)
    return x


@gluon.jit
def _fetch(rs, g, n_wc, sl, ok, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT: gl.constexpr,
           C_FMT: gl.constexpr):  # fmt: skip
    """Start the copies of the row's chunk g (the window's chunks are [0, n_wc)) into ring
    slot rs; record the keys' validity."""
    if C_FMT == 3 or g < n_wc:
        _issue_copy(raw_smem, rs, scl_smem.index(rs), w_ptr, w_page_stride, w_page_size, sl,
                    ok, W_FMT)  # fmt: skip
    else:
        _issue_copy(raw_smem, rs, scl_smem.index(rs), c_ptr, c_page_stride, c_page_size, sl,
                    ok, C_FMT)  # fmt: skip
    meta_smem.index(rs).store(ok.to(gl.int32))
    async_copy.commit_group()


@gluon.jit
def _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, num_splits, HAS_COMP: gl.constexpr,
                 SPLIT: gl.constexpr):  # fmt: skip
    """(window length, window tiles, compressed length, first tile, tile count, end tile) of
    this program: the row's tiles [0, total), or with SPLIT the contiguous slice
    [sp total / S, (sp + 1) total / S) of split sp = program_id(2) of S = num_splits."""
    swa_len = gl.minimum(gl.maximum(gl.load(swa_lens_ptr + t), 0), W)
    n_w = gl.cdiv(swa_len, BLOCK_N)
    if HAS_COMP:
        comp_len = gl.minimum(gl.maximum(gl.load(comp_lens_ptr + t), 0), K)
    else:
        comp_len = swa_len * 0
    total = n_w + gl.cdiv(comp_len, BLOCK_N)
    if SPLIT:
        sp = gl.program_id(2)
        lo = sp * total // num_splits
        end = (sp + 1) * total // num_splits
    else:
        lo = total * 0
        end = total
    # at least one (all-masked) tile, so a consumer may issue its first product unconditionally
    return swa_len, n_w, comp_len, lo, gl.maximum(end - lo, 1), end


@gluon.jit
def _producer(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
              bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
              SPLIT: gl.constexpr):  # fmt: skip
    (
        q_ptr,
        stride_qt,
        stride_qh,
        w_ptr,
        w_page_stride,
        w_page_size,
        w_num_slots,
        swa_ptr,
        stride_swa_t,
        swa_lens_ptr,
        W,
        c_ptr,
        c_page_stride,
        c_page_size,
        c_num_slots,
        comp_ptr,
        stride_comp_t,
        comp_lens_ptr,
        K,
        _sink_ptr,
        _scale,
        _out_ptr,
        _stride_ot,
        _stride_oh,
        _lse_ptr,
        _stride_lt,
        H,
        _part_o_ptr,
        _part_ml_ptr,
        num_splits,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    t = gl.program_id(0).to(gl.int64)
    hb = gl.program_id(1)
    row_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    swa_len, n_w, comp_len, lo, n, end = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K,
                                                      num_splits, HAS_COMP, SPLIT)  # fmt: skip
    swa_row = swa_ptr + t * stride_swa_t
    comp_row = comp_ptr + t * stride_comp_t
    # program chunk c is the row's chunk lo CPT + c (tile lo + c // CPT)
    cp_l: gl.constexpr = gl.SliceLayout(1, _copy_layout())
    CH: gl.constexpr = raw_smem.shape[1]
    CPT: gl.constexpr = BLOCK_N // CH
    SUB: gl.constexpr = min(CH, 16)  # keys decoded per step (register pressure)
    cb = lo * CPT
    n_wc = n_w * CPT
    # slot indices are loaded two chunks before their copies are issued
    sl_a, ok_a = _chunk_slots(cb + NRAW, n_w, end, swa_row, swa_len, comp_row, comp_len,
                              w_num_slots, c_num_slots, CH, HAS_COMP, cp_l)  # fmt: skip
    sl_b, ok_b = _chunk_slots(cb + NRAW + 1, n_w, end, swa_row, swa_len, comp_row, comp_len,
                              w_num_slots, c_num_slots, CH, HAS_COMP, cp_l)  # fmt: skip
    for r in gl.static_range(NRAW):
        sl_r, ok_r = _chunk_slots(cb + r, n_w, end, swa_row, swa_len, comp_row, comp_len,
                                  w_num_slots, c_num_slots, CH, HAS_COMP, cp_l)  # fmt: skip
        _fetch(r, cb + r, n_wc, sl_r, ok_r, raw_smem, scl_smem, meta_smem, w_ptr,
               w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT,
               C_FMT)  # fmt: skip
    # Q as 2 [64, 256] halves in channel order
    ql: gl.constexpr = _dec_layout()
    heads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ql))
    hmask = heads < H
    cq = gl.arange(0, 256, layout=gl.SliceLayout(0, ql))
    for h in gl.static_range(2):
        qv = gl.load(q_ptr + t * stride_qt + heads[:, None] * stride_qh + h * 256 + cq[None, :],
                     mask=hmask[:, None], other=0.0)  # fmt: skip
        q_smem.index(h).store(qv)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(0), count=1)

    for i in range(0, n):
        ks = i % KS
        # both consumers finished tile i - KS, the last reader of this stage
        mbarrier.wait(bars.index(1 + KS + ks), ((i // KS) & 1) ^ 1, pred=i >= KS)
        for q in gl.static_range(CPT):
            c = i * CPT + q
            if CPT % NRAW == 0:
                rs = q % NRAW  # static: the compiler sees the slots' buffers apart
            else:
                rs = c % NRAW
            sl_f = sl_a
            ok_f = ok_a
            sl_a = sl_b
            ok_a = ok_b
            sl_b, ok_b = _chunk_slots(cb + c + NRAW + 2, n_w, end, swa_row, swa_len, comp_row,
                                      comp_len, w_num_slots, c_num_slots, CH, HAS_COMP,
                                      cp_l)  # fmt: skip
            async_copy.wait_group(NRAW - 1)
            gl.thread_barrier()
            ok_c = meta_smem.index(rs).load(row_l) != 0
            for h in gl.static_range(2 if DROP != 1 else 0):
                for k0 in gl.static_range(0, CH, SUB):
                    if C_FMT == 3 or lo + i < n_w:
                        x = _decode_sub(raw_smem.index(rs * 2 + h), scl_smem.index(rs), k0, SUB,
                                        W_FMT, h)  # fmt: skip
                    else:
                        x = _decode_sub(raw_smem.index(rs * 2 + h), scl_smem.index(rs), k0, SUB,
                                        C_FMT, h)  # fmt: skip
                    k_smem.index(ks * 2 + h).slice(q * CH + k0, SUB).store(x)
            kval_smem.index(ks).slice(q * CH, CH).store(ok_c.to(gl.int32))
            if q == CPT - 1:
                fence_async_shared()
            # every thread has read ring slot rs before its refill (and, at the tile's last
            # chunk, has stored its part of the K stage)
            gl.thread_barrier()
            if q == CPT - 1:
                mbarrier.arrive(bars.index(1 + ks), count=1)
            _fetch(rs, cb + c + NRAW, n_wc, sl_f, ok_f, raw_smem, scl_smem, meta_smem,
                   w_ptr, w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT,
                   C_FMT)  # fmt: skip
    async_copy.wait_group(0)


@gluon.jit
def _qk(q_smem, k_smem, js, mma_s: gl.constexpr):
    """Issue S = Q.K^T of K stage js (async; wait on the result)."""
    s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, mma_s)
    for h in gl.static_range(2):
        s = warpgroup_mma(q_smem.index(h), k_smem.index(js * 2 + h).permute((1, 0)), s,
                          is_async=True)  # fmt: skip
    return s


@gluon.jit
def _softmax(s, kval, m_i, l_i, scale, mma_s: gl.constexpr):
    """Online softmax of one tile: (P bf16, rescale factor, new max, new sum)."""
    ok_j = kval.load(gl.SliceLayout(0, mma_s)) != 0
    s = gl.where(ok_j[None, :], s * scale, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    # a head with no valid key yet keeps m = -inf; shift by 0 so no inf - inf appears
    m_safe = gl.where(m_new == -float("inf"), 0.0, m_new)
    alpha = gl.exp(m_i - m_safe)
    p = gl.exp(s - m_safe[:, None])
    l_new = l_i * alpha + gl.sum(p, 1)
    return p.to(gl.bfloat16), alpha, m_new, l_new


@gluon.jit
def _consumer0(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
               bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
               SPLIT: gl.constexpr):  # fmt: skip
    """Q.K^T of the whole tile, the online softmax, P (bf16) and the rescale factor to shared
    memory for consumer 1, P.V over channels [0, 256)."""
    (
        _q_ptr,
        _stride_qt,
        _stride_qh,
        _w_ptr,
        _w_page_stride,
        _w_page_size,
        _w_num_slots,
        _swa_ptr,
        _stride_swa_t,
        swa_lens_ptr,
        W,
        _c_ptr,
        _c_page_stride,
        _c_page_size,
        _c_num_slots,
        _comp_ptr,
        _stride_comp_t,
        comp_lens_ptr,
        K,
        sink_ptr,
        scale,
        out_ptr,
        stride_ot,
        stride_oh,
        lse_ptr,
        stride_lt,
        H,
        part_o_ptr,
        part_ml_ptr,
        num_splits,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    t = gl.program_id(0).to(gl.int64)
    hb = gl.program_id(1)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    _swa_len, _n_w, _comp_len, _lo, n, _end = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K,
                                                          num_splits, HAS_COMP, SPLIT)  # fmt: skip
    PF: gl.constexpr = 2 + 2 * KS
    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_H], gl.float32, row_s)
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
    mbarrier.wait(bars.index(0), 0)
    mbarrier.wait(bars.index(1), 0)
    s_cur = warpgroup_mma_wait(0, deps=[_qk(q_smem, k_smem, 0, mma_s)])
    for j in range(0, n):
        js = j % KS
        ps = j % 2
        # Q.K^T of tile j + 1 runs on the tensor cores during this tile's softmax (the
        # last tile repeats its own stage, result unused)
        has_next = j + 1 < n
        jn = gl.where(has_next, (j + 1) % KS, js)
        mbarrier.wait(bars.index(1 + jn), ((j + 1) // KS) & 1, pred=has_next)
        if DROP == 2:
            s_tok = s_cur
            alpha = m_i
            p16 = s_cur.to(gl.bfloat16)
        else:
            s_tok = _qk(q_smem, k_smem, jn, mma_s)
            p16, alpha, m_i, l_i = _softmax(s_cur, kval_smem.index(js), m_i, l_i, scale, mma_s)
        mbarrier.wait(bars.index(PF + 2 + ps), ((j // 2) & 1) ^ 1, pred=j >= 2)
        p_smem.index(ps).store(p16)
        x_smem.index(ps).store(alpha)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(bars.index(PF + ps), count=1)
        if DROP != 2:
            alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, mma_o))
            tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2),
                                acc * alpha_o[:, None], is_async=True)  # fmt: skip
            acc, s_cur = warpgroup_mma_wait(0, deps=[tok, s_tok])
        gl.thread_barrier()
        mbarrier.arrive(bars.index(1 + KS + js), count=1)

    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_s)
    omask = oheads < H
    if SPLIT:
        # the slice's partial state for the combine kernel: (m, l) and acc, unnormalized
        pidx = (t * H + oheads) * num_splits + gl.program_id(2)
        gl.store(part_ml_ptr + pidx * 2, m_i, mask=omask)
        gl.store(part_ml_ptr + pidx * 2 + 1, l_i, mask=omask)
        _store_part(acc, part_o_ptr, t, H, hb, num_splits, 0, mma_o)
    else:
        # sink in the denominator only; the denominator to consumer 1
        has = m_i > -float("inf")
        m_safe_o = gl.where(has, m_i, 0.0)
        sink = gl.load(sink_ptr + oheads, mask=omask, other=0.0)
        denom = gl.where(has, l_i + gl.exp(sink - m_safe_o), 0.0)
        x_smem.index(2).store(denom)
        gl.thread_barrier()
        mbarrier.arrive(bars.index(PF + 4), count=1)
        lse = gl.where(has, m_safe_o + gl.log(gl.where(has, l_i, 1.0)), -float("inf"))
        gl.store(lse_ptr + t * stride_lt + oheads, lse, mask=omask)
        _store_out(acc, gl.convert_layout(denom, gl.SliceLayout(1, mma_o)), out_ptr, t,
                   stride_ot, stride_oh, hb, H, 0, mma_o)  # fmt: skip
    return (m_i,)


@gluon.jit
def _store_out(acc, denom, out_ptr, t, stride_ot, stride_oh, hb, H, C: gl.constexpr,
               mma_o: gl.constexpr):  # fmt: skip
    o = gl.where(denom[:, None] > 0.0, acc / denom[:, None], 0.0).to(gl.bfloat16)
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_o))
    oc = gl.arange(0, 256, layout=gl.SliceLayout(0, mma_o))
    ptrs = out_ptr + t * stride_ot + oheads[:, None] * stride_oh + C * 256 + oc[None, :]
    gl.store(ptrs, o, mask=(oheads < H)[:, None])


@gluon.jit
def _store_part(acc, part_o_ptr, t, H, hb, num_splits, C: gl.constexpr, mma_o: gl.constexpr):
    """Channels [256 C, 256 C + 256) of the unnormalized fp32 accumulator into the partials
    (fp32 [T, H, splits, D]) of split program_id(2)."""
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_o))
    oc = gl.arange(0, 256, layout=gl.SliceLayout(0, mma_o))
    pidx = (t * H + oheads) * num_splits + gl.program_id(2)
    ptrs = part_o_ptr + pidx[:, None] * D + C * 256 + oc[None, :]
    gl.store(ptrs, acc, mask=(oheads < H)[:, None])


@gluon.jit
def _consumer1(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
               bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
               SPLIT: gl.constexpr):  # fmt: skip
    """P.V over channels [256, 512) with P and the rescale factor from consumer 0."""
    (
        _q_ptr,
        _stride_qt,
        _stride_qh,
        _w_ptr,
        _w_page_stride,
        _w_page_size,
        _w_num_slots,
        _swa_ptr,
        _stride_swa_t,
        swa_lens_ptr,
        W,
        _c_ptr,
        _c_page_stride,
        _c_page_size,
        _c_num_slots,
        _comp_ptr,
        _stride_comp_t,
        comp_lens_ptr,
        K,
        _sink_ptr,
        _scale,
        out_ptr,
        stride_ot,
        stride_oh,
        _lse_ptr,
        _stride_lt,
        H,
        part_o_ptr,
        _part_ml_ptr,
        num_splits,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    t = gl.program_id(0).to(gl.int64)
    hb = gl.program_id(1)
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    _swa_len, _n_w, _comp_len, _lo, n, _end = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K,
                                                          num_splits, HAS_COMP, SPLIT)  # fmt: skip
    PF: gl.constexpr = 2 + 2 * KS
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
    for j in range(0, n):
        js = j % KS
        ps = j % 2
        mbarrier.wait(bars.index(PF + ps), (j // 2) & 1)
        if DROP != 2:
            alpha = x_smem.index(ps).load(row_o)
            tok = warpgroup_mma(p_smem.index(ps), k_smem.index(js * 2 + 1),
                                acc * alpha[:, None], is_async=True)  # fmt: skip
            acc = warpgroup_mma_wait(0, deps=[tok])
        gl.thread_barrier()
        mbarrier.arrive(bars.index(PF + 2 + ps), count=1)
        mbarrier.arrive(bars.index(1 + KS + js), count=1)
    if SPLIT:
        _store_part(acc, part_o_ptr, t, H, hb, num_splits, 1, mma_o)
    else:
        mbarrier.wait(bars.index(PF + 4), 0)
        denom = x_smem.index(2).load(row_o)
        _store_out(acc, denom, out_ptr, t, stride_ot, stride_oh, hb, H, 1, mma_o)


@gluon.jit
def _gluon_sparse_attn_kernel(
    q_ptr, stride_qt, stride_qh,  # bf16 q; strides in elements
    w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr, stride_swa_t, swa_lens_ptr, W,
    c_ptr, c_page_stride, c_page_size, c_num_slots, comp_ptr, stride_comp_t, comp_lens_ptr, K,
    sink_ptr, scale,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,  # bf16 out
    H,
    part_o_ptr, part_ml_ptr, num_splits,  # SPLIT: fp32 [T, H, splits, D], [T, H, splits, 2]
    W_FMT: gl.constexpr, C_FMT: gl.constexpr, SPLIT: gl.constexpr,
):  # fmt: skip
    KS: gl.constexpr = _kstages(W_FMT, C_FMT)
    RW: gl.constexpr = _raw_words(W_FMT, C_FMT)
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 256], gl.bfloat16)
    k_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 256], gl.bfloat16)
    p_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], gl.bfloat16)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_H, 256], q_lay)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [2 * KS, BLOCK_N, 256], k_lay)
    CH: gl.constexpr = _chunk(W_FMT, C_FMT)
    raw_smem = gl.allocate_shared_memory(gl.int32, [NRAW * 2, CH, RW], plain)
    scl_smem = gl.allocate_shared_memory(gl.uint8, [NRAW, CH, 32], plain)
    meta_smem = gl.allocate_shared_memory(gl.int32, [NRAW, CH], plain1)
    kval_smem = gl.allocate_shared_memory(gl.int32, [KS, BLOCK_N], plain1)
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_H, BLOCK_N], p_lay)
    x_smem = gl.allocate_shared_memory(gl.float32, [3, BLOCK_H], plain1)
    # barriers: 0 Q stored; 1 + s K stage s filled; 1 + KS + s stage s released (2 arrivals);
    # PF + b P buffer b filled; PF + 2 + b P buffer b consumed; PF + 4 denominator stored
    PF: gl.constexpr = 2 + 2 * KS
    bars = gl.allocate_shared_memory(gl.int64, [PF + 5, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(1 + KS):
        mbarrier.init(bars.index(b), count=1)
    for b in gl.static_range(1 + KS, PF):
        mbarrier.init(bars.index(b), count=2)
    for b in gl.static_range(PF, PF + 5):
        mbarrier.init(bars.index(b), count=1)
    fence_async_shared()
    gl.thread_barrier()
    a = (q_ptr, stride_qt, stride_qh, w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr,
         stride_swa_t, swa_lens_ptr, W, c_ptr, c_page_stride, c_page_size, c_num_slots,
         comp_ptr, stride_comp_t, comp_lens_ptr, K, sink_ptr, scale, out_ptr, stride_ot,
         stride_oh, lse_ptr, stride_lt, H, part_o_ptr, part_ml_ptr, num_splits)  # fmt: skip
    gl.warp_specialize(
        [
            (
                _consumer0,
                (
                    a,
                    q_smem,
                    k_smem,
                    raw_smem,
                    scl_smem,
                    meta_smem,
                    kval_smem,
                    p_smem,
                    x_smem,
                    bars,
                    W_FMT,
                    C_FMT,
                    KS,
                    SPLIT,
                ),
            ),
            (
                _consumer1,
                (
                    a,
                    q_smem,
                    k_smem,
                    raw_smem,
                    scl_smem,
                    meta_smem,
                    kval_smem,
                    p_smem,
                    x_smem,
                    bars,
                    W_FMT,
                    C_FMT,
                    KS,
                    SPLIT,
                ),
            ),
            (
                _producer,
                (
                    a,
                    q_smem,
                    k_smem,
                    raw_smem,
                    scl_smem,
                    meta_smem,
                    kval_smem,
                    p_smem,
                    x_smem,
                    bars,
                    W_FMT,
                    C_FMT,
                    KS,
                    SPLIT,
                ),
            ),
        ],
        [4, 4],
        [C1_REGS, PRODUCER_REGS],
    )
