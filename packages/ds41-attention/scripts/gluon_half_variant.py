# mypy: disable-error-code="no-untyped-def"
"""Variant of the Hopper Gluon kernel kept for A/B measurements (not installed, not dispatched).

Two symmetric warpgroups, no producer: warpgroup C fetches and decodes its own half of each
tile (channels [256 C, 256 C + 256)), both compute Q.K^T over the whole D, each P.V over its
half; the decode of tile i overlaps the asynchronous P.V of tile i-1. Correct (the GPU tests
passed on it, 2026-11-30) but 0.90-0.97x the Triton kernel's time against the producer /
consumer kernel's 0.86-0.95x (BENCHMARKS.md). `launch_gluon_half(...)` has the arguments of
`ds41_attention.ops.sparse_attention.gluon_launch.launch_gluon_sparse_attention`.
"""

from __future__ import annotations

from gluon_v1 import (  # the previous kernel, in this folder
    BLOCK_H,
    BLOCK_N,
    NRAW,
    _decode,
    _issue_copy,
    _pair_layout,
    _tile_slots,
)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ds41_attention.ops.sparse_attention.gluon_launch import launch_with

REGS_WORKER = gl.constexpr(232)


@gluon.jit
def _fetch(
    i,
    n_w,
    sl,
    ok,
    C: gl.constexpr,
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
    """Start the copies of tile i (slots `sl`, validity `ok`) into ring slot i % NRAW and
    record its validity there; one commit group per tile."""
    rs = C * NRAW + i % NRAW
    if i < n_w:
        _issue_copy(
            raw_smem.index(rs),
            scl_smem.index(rs),
            w_ptr,
            w_page_stride,
            w_page_size,
            sl,
            ok,
            W_FMT,
            C,
        )
    else:
        _issue_copy(
            raw_smem.index(rs),
            scl_smem.index(rs),
            c_ptr,
            c_page_stride,
            c_page_size,
            sl,
            ok,
            C_FMT,
            C,
        )
    meta_smem.index(rs).store(ok.to(gl.int32))
    async_copy.commit_group()


@gluon.jit
def _produce(
    i,
    n_w,
    sl_f,
    ok_f,
    C: gl.constexpr,
    raw_smem,
    scl_smem,
    meta_smem,
    k_smem,
    kval_smem,
    bars,
    w_ptr,
    w_page_stride,
    w_page_size,
    c_ptr,
    c_page_stride,
    c_page_size,
    W_FMT: gl.constexpr,
    C_FMT: gl.constexpr,
):
    """Decode this warpgroup's half of tile i into K stage i % 2, refill its ring slot with
    tile i + NRAW (slots `sl_f`, validity `ok_f`), signal the stage's mbarrier."""
    lay: gl.constexpr = _pair_layout()
    ks = i % 2
    rs = C * NRAW + i % NRAW
    async_copy.wait_group(NRAW - 1)
    gl.thread_barrier()
    ok_i = meta_smem.index(rs).load(gl.SliceLayout(1, lay)) != 0
    # both warpgroups' Q.K^T of tile i - 2 read this stage: wait until they are done
    mbarrier.wait(bars.index(3 + ks), ((i // 2) & 1) ^ 1, pred=i >= 2)
    for par in gl.static_range(2):
        if i < n_w:
            x = _decode(raw_smem.index(rs), scl_smem.index(rs), ok_i, W_FMT, C, par)
        else:
            x = _decode(raw_smem.index(rs), scl_smem.index(rs), ok_i, C_FMT, C, par)
        k_smem.index((ks * 2 + C) * 2 + par).store(x)
    kval_smem.index(C * 2 + ks).store(ok_i.to(gl.int32))
    fence_async_shared()
    # every thread's stores are done: the stage is ready, the ring slot can be refilled
    gl.thread_barrier()
    mbarrier.arrive(bars.index(1 + ks), count=1)
    _fetch(
        i + NRAW,
        n_w,
        sl_f,
        ok_f,
        C,
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
    lay: gl.constexpr = _pair_layout()
    row_l: gl.constexpr = gl.SliceLayout(1, lay)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16]
    )
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)

    swa_len = gl.minimum(gl.maximum(gl.load(swa_lens_ptr + t), 0), W)
    n_w = gl.cdiv(swa_len, BLOCK_N)
    if HAS_COMP:
        comp_len = gl.minimum(gl.maximum(gl.load(comp_lens_ptr + t), 0), K)
    else:
        comp_len = swa_len * 0
    total = n_w + gl.cdiv(comp_len, BLOCK_N)
    swa_row = swa_ptr + t * stride_swa_t
    comp_row = comp_ptr + t * stride_comp_t

    # copies of tiles 0 .. NRAW-1 in flight first, then Q (its load overlaps them)
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
        _fetch(
            r,
            n_w,
            sl_r,
            ok_r,
            C,
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

    # Q: this warpgroup's 256 channels as 128 int32 words per head -> (even, odd) bf16
    heads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, lay))
    hmask = heads < H
    cw = gl.arange(0, 128, layout=gl.SliceLayout(0, lay))
    q_w = gl.load(
        q_ptr + t * (stride_qt // 2) + heads[:, None] * (stride_qh // 2) + C * 128 + cw[None, :],
        mask=hmask[:, None],
        other=0,
    )
    q_smem.index(2 * C).store((q_w << 16).to(gl.float32, bitcast=True).to(gl.bfloat16))
    q_smem.index(2 * C + 1).store((q_w & -65536).to(gl.float32, bitcast=True).to(gl.bfloat16))
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(0), count=1)

    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, gl.SliceLayout(1, mma_o))
    l_i = gl.zeros([BLOCK_H], gl.float32, gl.SliceLayout(1, mma_o))
    acc_ev = gl.zeros([BLOCK_H, 128], gl.float32, mma_o)
    acc_od = gl.zeros([BLOCK_H, 128], gl.float32, mma_o)

    if total > 0:
        sl_f, ok_f = _tile_slots(
            NRAW,
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
        _produce(
            0,
            n_w,
            sl_f,
            ok_f,
            C,
            raw_smem,
            scl_smem,
            meta_smem,
            k_smem,
            kval_smem,
            bars,
            w_ptr,
            w_page_stride,
            w_page_size,
            c_ptr,
            c_page_stride,
            c_page_size,
            W_FMT,
            C_FMT,
        )
    mbarrier.wait(bars.index(0), 0)

    for i in range(1, total + 1):
        # slots of tile i + NRAW (copied at the end of this iteration): loaded first so the
        # round trip overlaps the products below
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
        # attend tile j = i - 1: scores over the whole D from both halves of its K stage
        j = i - 1
        js = j % 2
        mbarrier.wait(bars.index(1 + js), (j // 2) & 1)
        s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, mma_s)
        for part in gl.static_range(4):
            s = warpgroup_mma(
                q_smem.index(part), k_smem.index(js * 4 + part).permute((1, 0)), s, is_async=True
            )
        s = warpgroup_mma_wait(0, deps=[s])
        mbarrier.arrive(bars.index(3 + js), count=1)
        ok_j = kval_smem.index(C * 2 + js).load(gl.SliceLayout(0, mma_s)) != 0
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
        # decode tile i while the tensor cores run P.V of tile j
        if i < total:
            _produce(
                i,
                n_w,
                sl_f,
                ok_f,
                C,
                raw_smem,
                scl_smem,
                meta_smem,
                k_smem,
                kval_smem,
                bars,
                w_ptr,
                w_page_stride,
                w_page_size,
                c_ptr,
                c_page_stride,
                c_page_size,
                W_FMT,
                C_FMT,
            )
        acc_ev, acc_od = warpgroup_mma_wait(0, deps=[tok_ev, tok_od])
    async_copy.wait_group(0)

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
    # Q as 4 [64, 128] parts (half, parity); K as 2 stages x 4 parts (half, parity); per
    # warpgroup an NRAW-deep ring of raw data, scale bytes and key validity; per warpgroup and
    # K stage the validity of the stage's keys
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [4, BLOCK_H, 128], q_lay)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [8, BLOCK_N, 128], k_lay)
    raw_smem = gl.allocate_shared_memory(gl.int32, [2 * NRAW, BLOCK_N, 128], plain)
    scl_smem = gl.allocate_shared_memory(gl.uint8, [2 * NRAW, BLOCK_N, 16], plain)
    meta_smem = gl.allocate_shared_memory(gl.int32, [2 * NRAW, BLOCK_N], plain1)
    kval_smem = gl.allocate_shared_memory(gl.int32, [4, BLOCK_N], plain1)
    # barriers: 0 = Q stored, 1 + s = K stage s filled, 3 + s = K stage s read (count 2 each:
    # one arrival per warpgroup)
    bars = gl.allocate_shared_memory(gl.int64, [5, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(5):
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
        ],
        [4],
        [REGS_WORKER],
    )


def launch_gluon_half(*args, **kwargs):
    """Run the variant: same arguments and results as `launch_gluon_sparse_attention`."""
    return launch_with(_gluon_sparse_attn_kernel, {}, *args, io_words=True, **kwargs)
