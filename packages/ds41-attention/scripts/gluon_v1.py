# mypy: disable-error-code="no-untyped-def"
"""The previous Hopper Gluon kernel (production until issue 11's rewrite), kept for A/B runs:
launch with `gluon_launch.launch_with(_gluon_sparse_attn_kernel, {"maxnreg": GLUON_MAXNREG},
*args, io_words=True)` (q and out as int32 words). Measured 108-113 TFLOP/s at T >= 1024.

Contract (as the Triton kernel's): one program per (row, head block of 64) walks that row's
keys in the fixed order (window ascending, then compressed ascending) in tiles of BLOCK_N, no
split over keys, configuration fixed for (H, D); records are decoded in the kernel (no
gathered bf16 copy); a row's bits do not depend on the other rows.

Structure (after FlashMLA's sm90 sparse kernels, written for this layout; three warpgroups,
`gl.warp_specialize`):
- producer (4 warps, 104 registers): cp.async gathers the records (data and scale bytes) of
  the tiles NRAW ahead into a raw ring; for each tile it waits until both consumers released
  the K stage, decodes the whole tile into bf16 K tiles in NVMMA-swizzled shared memory (two
  stages) and signals the stage's mbarrier. It also stores Q in shared memory once.
- two consumers (4 warps, 200 registers each; consumer C owns output channels
  [256 C, 256 C + 256), a 64x256 fp32 accumulator): Q.K^T over the whole D with `wgmma` from
  shared memory (both compute the same scores from the same operands, so their softmax
  statistics agree bit for bit), the online softmax, P.V over their half (P from registers),
  then release the stage.
Decode of tile i+1 (producer ALU) overlaps the products of tile i (consumer tensor cores); the
only global loads a tile waits on are its slot indices, loaded one tile ahead.

Channels are kept in (even, odd) halves, as in the Triton kernel: one NVFP4 byte, one MXFP8
16-bit word and one bf16 32-bit word hold a channel pair, so a tile half is a [BLOCK_N, 128]
array of pairs in every format. Q, K and the accumulators use the permutation
(half, parity, pair); the output is written back in channel order.

Only D = 512 (the V4.1 geometry) is supported; the Triton kernel serves every other shape.
`packages/ds41-attention/scripts/gluon_half_variant.py` keeps the measured-slower variant
(two symmetric warpgroups, each decoding its own half).
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
GLUON_BLOCK_N = 32
GLUON_RAW_STAGES = 2
GLUON_NUM_WARPS = 4  # per partition: one warpgroup (3 partitions, 12 warps)
# the partitions read the tile configuration as globals (constexpr arguments of the kernel
# reach the partitions only when the argument tuples are written inline in the
# gl.warp_specialize call, as below)
D = gl.constexpr(GLUON_D)
BLOCK_H = gl.constexpr(GLUON_BLOCK_H)
BLOCK_N = gl.constexpr(GLUON_BLOCK_N)
NRAW = gl.constexpr(GLUON_RAW_STAGES)


@gluon.constexpr_function
def _pair_layout():
    # [BLOCK_N, 128] pairs: each thread holds 8 consecutive pairs of one key (16-byte loads)
    return gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])


@gluon.jit
def _tile_slots(
    i,
    n_w,
    total,
    swa_row,
    swa_len,
    comp_row,
    comp_len,
    w_slots,
    c_slots,
    HAS_COMP: gl.constexpr,
    layout: gl.constexpr,
):
    """(slot int64 clamped to >= 0, validity) of tile i's keys, in `layout`.

    A key is valid when its tile exists, it lies within its list's length, its slot is >= 0
    and below its cache's slot count (so no input makes the kernel read outside the caches)."""
    offs = gl.arange(0, BLOCK_N, layout=layout)
    jw = i * BLOCK_N + offs
    in_w = jw < swa_len
    slots = gl.load(swa_row + jw, mask=in_w, other=-1)
    ok = in_w & (slots < w_slots)
    if HAS_COMP:
        jc = (i - n_w) * BLOCK_N + offs
        in_c = (jc >= 0) & (jc < comp_len)
        sc = gl.load(comp_row + jc, mask=in_c, other=-1)
        slots = gl.where(in_c, sc, slots)
        ok = ok | (in_c & (sc < c_slots))
    valid = ok & (slots >= 0) & (i < total)
    return gl.maximum(slots, 0).to(gl.int64), valid


@gluon.jit
def _issue_copy(
    raw, scl, st_ptr, page_stride, page_size, slots, valid, FMT: gl.constexpr, C: gl.constexpr
):
    """cp.async this warpgroup's half (channels [256 C, 256 C + 256)) of the tile's data
    bytes into `raw` (int32 [BLOCK_N, 128]) and 16 scale bytes per key into `scl` (uint8
    [BLOCK_N, 16]: MXFP8 the key's 16 ue8m0 bytes, NVFP4 this half's 16 e4m3 bytes);
    invalid keys copy nothing (their bytes are never used)."""
    page = slots // page_size
    off = slots % page_size
    base = page * page_stride
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    sl_lay: gl.constexpr = gl.BlockedLayout([1, 16], [32, 1], [4, 1], [1, 0])
    ks = gl.arange(0, 16, layout=gl.SliceLayout(0, sl_lay))
    vs = gl.convert_layout(valid, gl.SliceLayout(1, sl_lay))
    if FMT == 0:
        lay: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        c = gl.arange(0, 128, layout=gl.SliceLayout(0, lay))
        row = gl.convert_layout((base + off * D) // 2 + C * 128, gl.SliceLayout(1, lay))
        vr = gl.convert_layout(valid, gl.SliceLayout(1, lay))
        dst = raw._reinterpret(gl.int16, [2 * BLOCK_N, 128], plain).slice(0, BLOCK_N)
        ptrs = st_ptr.to(gl.pointer_type(gl.int16)) + row[:, None] + c[None, :]
        async_copy.async_copy_global_to_shared(dst, ptrs, mask=vr[:, None])
        srow = gl.convert_layout(base + page_size * D + off * (D // 32), gl.SliceLayout(1, sl_lay))
        async_copy.async_copy_global_to_shared(
            scl, st_ptr + srow[:, None] + ks[None, :], mask=vs[:, None]
        )
    elif FMT == 1:
        lay1: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
        c1 = gl.arange(0, 128, layout=gl.SliceLayout(0, lay1))
        row1 = gl.convert_layout(base + off * (D // 2) + C * 128, gl.SliceLayout(1, lay1))
        vr1 = gl.convert_layout(valid, gl.SliceLayout(1, lay1))
        dst1 = raw._reinterpret(gl.uint8, [4 * BLOCK_N, 128], plain).slice(0, BLOCK_N)
        async_copy.async_copy_global_to_shared(
            dst1, st_ptr + row1[:, None] + c1[None, :], mask=vr1[:, None]
        )
        srow1 = gl.convert_layout(
            base + page_size * (D // 2) + off * (D // 16) + C * 16, gl.SliceLayout(1, sl_lay)
        )
        async_copy.async_copy_global_to_shared(
            scl, st_ptr + srow1[:, None] + ks[None, :], mask=vs[:, None]
        )
    else:
        lay2: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0])
        c2 = gl.arange(0, 128, layout=gl.SliceLayout(0, lay2))
        row2 = gl.convert_layout((base + off * (2 * D)) // 4 + C * 128, gl.SliceLayout(1, lay2))
        vr2 = gl.convert_layout(valid, gl.SliceLayout(1, lay2))
        ptrs2 = st_ptr.to(gl.pointer_type(gl.int32)) + row2[:, None] + c2[None, :]
        async_copy.async_copy_global_to_shared(raw, ptrs2, mask=vr2[:, None])


@gluon.jit
def _decode(raw, scl, valid, FMT: gl.constexpr, C: gl.constexpr, PAR: gl.constexpr):
    """bf16 channels of parity PAR [BLOCK_N, 128] of this half of the tile, from the raw ring
    buffers (one parity at a time keeps half the registers live). Every value and code x
    scale product is exact in bf16 (SPEC section 4), so the decode does no rounding; invalid
    keys give zeros."""
    lay: gl.constexpr = _pair_layout()
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    vmask = gl.convert_layout(valid, gl.SliceLayout(1, lay))[:, None]
    if FMT == 0:
        # one ue8m0 byte per 16 pairs: [BLOCK_N, 8 groups, 16 pairs], 8 pairs per thread
        l3: gl.constexpr = gl.BlockedLayout([1, 1, 8], [2, 8, 2], [4, 1, 1], [2, 1, 0])
        sb = scl.slice(C * 8, 8, dim=1).load(gl.SliceLayout(2, l3)).to(gl.int32)
        s32 = gl.where(sb == 0, 5.877471754111438e-39, (sb << 23).to(gl.float32, bitcast=True))
        s3 = gl.expand_dims(s32.to(gl.bfloat16), 2).broadcast_to([BLOCK_N, 8, 16])
        scp = gl.convert_layout(gl.reshape(s3, [BLOCK_N, 128]), lay, assert_trivial=True)
        w = raw._reinterpret(gl.int16, [2 * BLOCK_N, 128], plain).slice(0, BLOCK_N).load(lay)
        w = w.to(gl.int32)
        code = ((w >> (8 * PAR)) & 0xFF).to(gl.uint8)
        x = code.to(gl.float8e4nv, bitcast=True).to(gl.bfloat16) * scp
    elif FMT == 1:
        # one e4m3 byte per 8 pairs: [BLOCK_N, 16 groups, 8 pairs], one group per thread;
        # x64 for the e2m1-as-e4m3 decode below
        l3b: gl.constexpr = gl.BlockedLayout([1, 1, 8], [2, 16, 1], [4, 1, 1], [2, 1, 0])
        sb1 = scl.load(gl.SliceLayout(2, l3b))
        s1 = (sb1.to(gl.float8e4nv, bitcast=True).to(gl.float32) * 64.0).to(gl.bfloat16)
        s3b = gl.expand_dims(s1, 2).broadcast_to([BLOCK_N, 16, 8])
        scp1 = gl.convert_layout(gl.reshape(s3b, [BLOCK_N, 128]), lay, assert_trivial=True)
        b = raw._reinterpret(gl.uint8, [4 * BLOCK_N, 128], plain).slice(0, BLOCK_N).load(lay)
        b = b.to(gl.int32)
        # e2m1 code c (3 magnitude bits) as the e4m3 byte c << 2 is exactly c * 2^-6 (0.5
        # lands on the e4m3 subnormal 2^-7); the 2^6 is in the scale
        if PAR == 0:
            code1 = (((b & 8) << 4) | ((b & 7) << 2)).to(gl.uint8)
        else:
            code1 = ((b & 0x80) | ((b & 0x70) >> 2)).to(gl.uint8)
        x = code1.to(gl.float8e4nv, bitcast=True).to(gl.bfloat16) * scp1
    else:
        w2 = raw.load(lay)
        if PAR == 0:
            x = (w2 << 16).to(gl.float32, bitcast=True).to(gl.bfloat16)
        else:
            x = (w2 & -65536).to(gl.float32, bitcast=True).to(gl.bfloat16)
    return gl.where(vmask, x, gl.zeros([BLOCK_N, 128], gl.bfloat16, lay))


# Register split: the launch caps every thread at GLUON_MAXNREG (12 warps x 32 x 168 fit the
# 64K register file); the partitions then re-balance with setmaxnreg: the consumers (a 64x256
# fp32 accumulator each) to 200, the producer to 104. Triton gives the default partition
# (consumer 0) what the cap leaves: (168 * 12 - 200 * 4 - 104 * 4) / 4 = 200.
GLUON_MAXNREG = 168
GLUON_CONSUMER_REGS = 200
GLUON_PRODUCER_REGS = 104
CONSUMER_REGS = gl.constexpr(GLUON_CONSUMER_REGS)
PRODUCER_REGS = gl.constexpr(GLUON_PRODUCER_REGS)


@gluon.jit
def _fetch_full(
    i,
    n_w,
    sl,
    ok,
    raw_smem,
    scl_smem,
    meta_smem,
    w_ptr,
    w_page_stride,
    w_page_size,
    c_ptr,
    c_page_stride,
    c_page_size,
    W_FMT: gl.constexpr,
    C_FMT: gl.constexpr,
):
    """Start the copies of both halves of tile i into ring slot i % NRAW; record validity."""
    rs = i % NRAW
    for half in gl.static_range(2):
        if i < n_w:
            _issue_copy(
                raw_smem.index(rs * 2 + half),
                scl_smem.index(rs * 2 + half),
                w_ptr,
                w_page_stride,
                w_page_size,
                sl,
                ok,
                W_FMT,
                half,
            )
        else:
            _issue_copy(
                raw_smem.index(rs * 2 + half),
                scl_smem.index(rs * 2 + half),
                c_ptr,
                c_page_stride,
                c_page_size,
                sl,
                ok,
                C_FMT,
                half,
            )
    meta_smem.index(rs).store(ok.to(gl.int32))
    async_copy.commit_group()


@gluon.jit
def _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP: gl.constexpr):
    swa_len = gl.minimum(gl.maximum(gl.load(swa_lens_ptr + t), 0), W)
    n_w = gl.cdiv(swa_len, BLOCK_N)
    if HAS_COMP:
        comp_len = gl.minimum(gl.maximum(gl.load(comp_lens_ptr + t), 0), K)
    else:
        comp_len = swa_len * 0
    return swa_len, n_w, comp_len, n_w + gl.cdiv(comp_len, BLOCK_N)


@gluon.jit
def _producer(
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
    sink_ptr,
    scale,
    out_ptr,
    stride_ot,
    stride_oh,
    lse_ptr,
    stride_lt,
    H,
    q_smem,
    k_smem,
    raw_smem,
    scl_smem,
    meta_smem,
    kval_smem,
    bars,
    W_FMT: gl.constexpr,
    C_FMT: gl.constexpr,
):
    HAS_COMP: gl.constexpr = C_FMT != 3
    t = gl.program_id(0).to(gl.int64)
    hb = gl.program_id(1)
    lay: gl.constexpr = _pair_layout()
    row_l: gl.constexpr = gl.SliceLayout(1, lay)
    swa_len, n_w, comp_len, total = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)
    swa_row = swa_ptr + t * stride_swa_t
    comp_row = comp_ptr + t * stride_comp_t
    for r in gl.static_range(NRAW):
        sl_r, ok_r = _tile_slots(
            r,
            n_w,
            total,
            swa_row,
            swa_len,
            comp_row,
            comp_len,
            w_num_slots,
            c_num_slots,
            HAS_COMP,
            row_l,
        )
        _fetch_full(
            r,
            n_w,
            sl_r,
            ok_r,
            raw_smem,
            scl_smem,
            meta_smem,
            w_ptr,
            w_page_stride,
            w_page_size,
            c_ptr,
            c_page_stride,
            c_page_size,
            W_FMT,
            C_FMT,
        )
    # Q as 4 [64, 128] parts (half, parity), from int32 words (one channel pair each)
    heads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, lay))
    hmask = heads < H
    cw = gl.arange(0, 128, layout=gl.SliceLayout(0, lay))
    for half in gl.static_range(2):
        q_w = gl.load(q_ptr + t * (stride_qt // 2) + heads[:, None] * (stride_qh // 2)
                      + half * 128 + cw[None, :], mask=hmask[:, None], other=0)  # fmt: skip
        q_smem.index(2 * half).store((q_w << 16).to(gl.float32, bitcast=True).to(gl.bfloat16))
        q_smem.index(2 * half + 1).store(
            (q_w & -65536).to(gl.float32, bitcast=True).to(gl.bfloat16)
        )
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(0), count=1)

    for i in range(0, total):
        # slots of tile i + NRAW, loaded first so the round trip overlaps the decode
        sl_f, ok_f = _tile_slots(
            i + NRAW,
            n_w,
            total,
            swa_row,
            swa_len,
            comp_row,
            comp_len,
            w_num_slots,
            c_num_slots,
            HAS_COMP,
            row_l,
        )
        ks = i % 2
        rs = i % NRAW
        async_copy.wait_group(NRAW - 1)
        gl.thread_barrier()
        ok_i = meta_smem.index(rs).load(row_l) != 0
        # both consumers finished P.V of tile i - 2, the last reader of this stage
        mbarrier.wait(bars.index(3 + ks), ((i // 2) & 1) ^ 1, pred=i >= 2)
        for half in gl.static_range(2):
            for par in gl.static_range(2):
                if i < n_w:
                    x = _decode(
                        raw_smem.index(rs * 2 + half),
                        scl_smem.index(rs * 2 + half),
                        ok_i,
                        W_FMT,
                        half,
                        par,
                    )
                else:
                    x = _decode(
                        raw_smem.index(rs * 2 + half),
                        scl_smem.index(rs * 2 + half),
                        ok_i,
                        C_FMT,
                        half,
                        par,
                    )
                k_smem.index((ks * 2 + half) * 2 + par).store(x)
        kval_smem.index(ks).store(ok_i.to(gl.int32))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(bars.index(1 + ks), count=1)
        _fetch_full(
            i + NRAW,
            n_w,
            sl_f,
            ok_f,
            raw_smem,
            scl_smem,
            meta_smem,
            w_ptr,
            w_page_stride,
            w_page_size,
            c_ptr,
            c_page_stride,
            c_page_size,
            W_FMT,
            C_FMT,
        )
    async_copy.wait_group(0)


@gluon.jit
def _consumer(
    C: gl.constexpr,
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
    sink_ptr,
    scale,
    out_ptr,
    stride_ot,
    stride_oh,
    lse_ptr,
    stride_lt,
    H,
    q_smem,
    k_smem,
    raw_smem,
    scl_smem,
    meta_smem,
    kval_smem,
    bars,
    W_FMT: gl.constexpr,
    C_FMT: gl.constexpr,
):
    HAS_COMP: gl.constexpr = C_FMT != 3
    t = gl.program_id(0).to(gl.int64)
    hb = gl.program_id(1)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16]
    )
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    _swa_len, _n_w, _comp_len, total = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)

    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, gl.SliceLayout(1, mma_o))
    l_i = gl.zeros([BLOCK_H], gl.float32, gl.SliceLayout(1, mma_o))
    acc_ev = gl.zeros([BLOCK_H, 128], gl.float32, mma_o)
    acc_od = gl.zeros([BLOCK_H, 128], gl.float32, mma_o)
    mbarrier.wait(bars.index(0), 0)
    for j in range(0, total):
        js = j % 2
        mbarrier.wait(bars.index(1 + js), (j // 2) & 1)
        s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, mma_s)
        for part in gl.static_range(4):
            s = warpgroup_mma(
                q_smem.index(part), k_smem.index(js * 4 + part).permute((1, 0)), s, is_async=True
            )
        s = warpgroup_mma_wait(0, deps=[s])
        ok_j = kval_smem.index(js).load(gl.SliceLayout(0, mma_s)) != 0
        s = gl.where(ok_j[None, :], s * scale, -float("inf"))
        m_new = gl.maximum(m_i, gl.convert_layout(gl.max(s, 1), gl.SliceLayout(1, mma_o)))
        # a head with no valid key yet keeps m = -inf; shift by 0 so no inf - inf appears
        m_safe = gl.where(m_new == -float("inf"), 0.0, m_new)
        alpha = gl.exp(m_i - m_safe)
        p = gl.exp(s - gl.convert_layout(m_safe, gl.SliceLayout(1, mma_s))[:, None])
        l_i = l_i * alpha + gl.convert_layout(gl.sum(p, 1), gl.SliceLayout(1, mma_o))
        m_i = m_new
        p16 = gl.convert_layout(p.to(gl.bfloat16), p_op)
        tok_ev = warpgroup_mma(
            p16, k_smem.index((js * 2 + C) * 2), acc_ev * alpha[:, None], is_async=True
        )
        tok_od = warpgroup_mma(
            p16, k_smem.index((js * 2 + C) * 2 + 1), acc_od * alpha[:, None], is_async=True
        )
        acc_ev, acc_od = warpgroup_mma_wait(0, deps=[tok_ev, tok_od])
        mbarrier.arrive(bars.index(3 + js), count=1)

    # epilogue: sink in the denominator only, bf16 output in channel order, lse
    has = m_i > -float("inf")
    m_safe_o = gl.where(has, m_i, 0.0)
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_o))
    omask = oheads < H
    sink = gl.load(sink_ptr + oheads, mask=omask, other=0.0)
    denom = l_i + gl.exp(sink - m_safe_o)
    o_ev = gl.where(has[:, None], acc_ev / denom[:, None], 0.0)
    o_od = gl.where(has[:, None], acc_od / denom[:, None], 0.0)
    bits_ev = o_ev.to(gl.bfloat16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    bits_od = o_od.to(gl.bfloat16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    words = bits_ev | (bits_od << 16)
    ocw = gl.arange(0, 128, layout=gl.SliceLayout(0, mma_o))
    o_rows = out_ptr + t * (stride_ot // 2) + oheads[:, None] * (stride_oh // 2) + C * 128
    gl.store(o_rows + ocw[None, :], words, mask=omask[:, None])
    if C == 0:
        lse = gl.where(has, m_safe_o + gl.log(gl.where(has, l_i, 1.0)), -float("inf"))
        gl.store(lse_ptr + t * stride_lt + oheads, lse, mask=omask)
    return (m_i,)


@gluon.jit
def _consumer0(
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
    sink_ptr,
    scale,
    out_ptr,
    stride_ot,
    stride_oh,
    lse_ptr,
    stride_lt,
    H,
    q_smem,
    k_smem,
    raw_smem,
    scl_smem,
    meta_smem,
    kval_smem,
    bars,
    W_FMT: gl.constexpr,
    C_FMT: gl.constexpr,
):
    return _consumer(
        0,
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
        sink_ptr,
        scale,
        out_ptr,
        stride_ot,
        stride_oh,
        lse_ptr,
        stride_lt,
        H,
        q_smem,
        k_smem,
        raw_smem,
        scl_smem,
        meta_smem,
        kval_smem,
        bars,
        W_FMT,
        C_FMT,
    )


@gluon.jit
def _consumer1(
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
    sink_ptr,
    scale,
    out_ptr,
    stride_ot,
    stride_oh,
    lse_ptr,
    stride_lt,
    H,
    q_smem,
    k_smem,
    raw_smem,
    scl_smem,
    meta_smem,
    kval_smem,
    bars,
    W_FMT: gl.constexpr,
    C_FMT: gl.constexpr,
):
    _consumer(
        1,
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
        sink_ptr,
        scale,
        out_ptr,
        stride_ot,
        stride_oh,
        lse_ptr,
        stride_lt,
        H,
        q_smem,
        k_smem,
        raw_smem,
        scl_smem,
        meta_smem,
        kval_smem,
        bars,
        W_FMT,
        C_FMT,
    )


@gluon.jit
def _gluon_sparse_attn_kernel(
    q_ptr,
    stride_qt,
    stride_qh,  # q as int32 words; strides in bf16 elements (even)
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
    sink_ptr,
    scale,
    out_ptr,
    stride_ot,
    stride_oh,
    lse_ptr,
    stride_lt,  # out as int32 words
    H,
    W_FMT: gl.constexpr,
    C_FMT: gl.constexpr,
):
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 128], gl.bfloat16)
    k_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 128], gl.bfloat16)
    # Q as 4 [64, 128] parts (half, parity); K as 2 stages x 4 parts; an NRAW-deep ring of
    # raw data / scale bytes (2 halves each) and key validity; validity per K stage
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [4, BLOCK_H, 128], q_lay)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [8, BLOCK_N, 128], k_lay)
    raw_smem = gl.allocate_shared_memory(gl.int32, [2 * NRAW, BLOCK_N, 128], plain)
    scl_smem = gl.allocate_shared_memory(gl.uint8, [2 * NRAW, BLOCK_N, 16], plain)
    meta_smem = gl.allocate_shared_memory(gl.int32, [NRAW, BLOCK_N], plain1)
    kval_smem = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N], plain1)
    # barriers: 0 = Q stored (1 arrival: the producer), 1 + s = K stage s filled (1: the
    # producer), 3 + s = K stage s consumed (2: both consumers)
    bars = gl.allocate_shared_memory(gl.int64, [5, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(3):
        mbarrier.init(bars.index(b), count=1)
    for b in gl.static_range(3, 5):
        mbarrier.init(bars.index(b), count=2)
    fence_async_shared()
    gl.thread_barrier()
    gl.warp_specialize(
        [
            (
                _consumer0,
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
                    sink_ptr,
                    scale,
                    out_ptr,
                    stride_ot,
                    stride_oh,
                    lse_ptr,
                    stride_lt,
                    H,
                    q_smem,
                    k_smem,
                    raw_smem,
                    scl_smem,
                    meta_smem,
                    kval_smem,
                    bars,
                    W_FMT,
                    C_FMT,
                ),
            ),
            (
                _consumer1,
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
                    sink_ptr,
                    scale,
                    out_ptr,
                    stride_ot,
                    stride_oh,
                    lse_ptr,
                    stride_lt,
                    H,
                    q_smem,
                    k_smem,
                    raw_smem,
                    scl_smem,
                    meta_smem,
                    kval_smem,
                    bars,
                    W_FMT,
                    C_FMT,
                ),
            ),
            (
                _producer,
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
                    sink_ptr,
                    scale,
                    out_ptr,
                    stride_ot,
                    stride_oh,
                    lse_ptr,
                    stride_lt,
                    H,
                    q_smem,
                    k_smem,
                    raw_smem,
                    scl_smem,
                    meta_smem,
                    kval_smem,
                    bars,
                    W_FMT,
                    C_FMT,
                ),
            ),
        ],
        [4, 4],
        [CONSUMER_REGS, PRODUCER_REGS],
    )
