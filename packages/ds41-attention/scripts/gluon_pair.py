# mypy: disable-error-code="no-untyped-def"
"""Lab kernel (issue 11, not production): the invariant path on a pair of CTAs a row (a
cluster of two) that share the decode, with the production kernel's arithmetic.

Production runs a row on one SM: a producer warpgroup decodes every key's 512 channels, consumer
0 computes Q.K^T, the softmax and P.V over channels [0, 256), consumer 1 P.V over [256, 512).
Here CTA r of the pair decodes channels [256 r, 256 r + 256) of each tile only, writes them into
its own K stage and, with one bulk copy (`cp.async.bulk` shared::cta -> shared::cluster, issued by
one thread, counted in bytes on the peer's mbarrier), into the same place of the peer's K stage.
Each CTA then holds the whole tile and runs production's consumer 0 on it: the same Q.K^T
chain over all 512 channels, the same softmax, P.V over its own channels with P from registers,
and stores those channels. So every output bit is production's (consumer 1's P.V, with P from
shared memory, is the same wgmma on the same operands), while a CTA's producer decodes half a
tile and no consumer 1 or P hand-off exists.

Synchronisation (past Triton's shared memory at the constexpr XBASE, addressed by inline PTX,
as `gluon_lab.py`'s SPLIT = 2 exchange ring): fill[s] (one local arrival carrying the expected
16,384 bytes of the peer's half; the peer's bulk copy completes them) and free[s] (two
arrivals: this CTA's consumer and the peer's, remote; a producer writes into both CTAs' stage
s, so both must have released it). The K stages must sit at shared offset 0 (the largest
allocation: Triton places it first), checked by the launcher's bitwise comparison against
production only; `gluon_profile.py`'s `launch_pair` compiles, sizes and launches it.
"""

import os
import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ds41_attention.ops.sparse_attention.gluon_kernels import (
    _dec_layout,
    _decode_sub,
    _first_slots,
    _qk,
    _raw_words,
    _rcp_approx,
    _softmax,
    _softmax_handoff,
    _spec_load,
    _tile_slots,
    _words,
)

sys.path.insert(0, "/".join(os.path.abspath(__file__).split("/")[:-1]))
from gluon_lab import _BAR_INIT, _CLUSTER_SYNC, _WAIT_LOCAL

GLUON_D = 512
GLUON_BLOCK_H = 64
GLUON_NUM_WARPS = 4
QREG = gl.constexpr(0)  # 1: three warpgroups, Q.K^T with Q in registers (see the docstring)
GLUON_MAXNREG = 168 if QREG.value else 240
D = gl.constexpr(GLUON_D)
BLOCK_H = gl.constexpr(GLUON_BLOCK_H)
BLOCK_N = gl.constexpr(32)
NRAW = gl.constexpr(2)
KS_MAIN = gl.constexpr(3)  # K stages (3 when a cache holds bf16 records: shared memory)
SUB = gl.constexpr(32)
PRODUCER_REGS = gl.constexpr(128 if QREG.value else 232)
PV_REGS = gl.constexpr(168)  # QREG: the P.V warpgroup (the Q.K^T one gets the rest, 208)
HALF_BYTES = gl.constexpr(32 * 256 * 2)  # one K stage half: BLOCK_N keys x 256 channels bf16


def cluster_bytes() -> int:
    """Shared-memory bytes past XBASE: KS fill barriers, then KS free barriers (room for
    KS_MAIN stages)."""
    return 2 * KS_MAIN.value * 8


@gluon.constexpr_function
def _kstages(w_fmt, c_fmt):
    return min(int(KS_MAIN), 3) if 2 in (int(w_fmt), int(c_fmt)) else int(KS_MAIN)


# thread 0: this CTA's arrival on fill[s] expecting the peer's half, then the bulk copy of this
# CTA's half of stage s (local offset $3) into the same place of the peer, completing there
_PUSH_HALF = gl.constexpr("""{
 .reg .pred p;
 .reg .u32 a, b, src, dst, pb, peer;
 setp.eq.u32 p, $1, 0;
 mov.u32 a, global_smem;
 add.u32 b, a, $2;
 add.u32 src, a, $3;
 mov.u32 peer, %cluster_ctarank;
 xor.b32 peer, peer, 1;
 mapa.shared::cluster.u32 dst, src, peer;
 mapa.shared::cluster.u32 pb, b, peer;
 @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [b], 16384;
 @p cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes
   [dst], [src], 16384, [pb];
 mov.u32 $0, 0;
}""")
# thread 0: release stage s here and at the peer
_RELEASE = gl.constexpr("""{
 .reg .pred p;
 .reg .u32 a, r, peer;
 setp.eq.u32 p, $1, 0;
 mov.u32 a, global_smem;
 add.u32 a, a, $2;
 mov.u32 peer, %cluster_ctarank;
 xor.b32 peer, peer, 1;
 mapa.shared::cluster.u32 r, a, peer;
 @p mbarrier.arrive.shared::cta.b64 _, [a];
 @p mbarrier.arrive.release.cluster.shared::cluster.b64 _, [r];
 mov.u32 $0, 0;
}""")
# thread 0: release stage s here only (QREG's P.V warpgroup reads this CTA's half only)
_RELEASE_LOCAL = gl.constexpr("""{
 .reg .pred p;
 .reg .u32 a;
 setp.eq.u32 p, $1, 0;
 mov.u32 a, global_smem;
 add.u32 a, a, $2;
 @p mbarrier.arrive.shared::cta.b64 _, [a];
 mov.u32 $0, 0;
}""")
# every thread: wait for phase $2 of the barrier at global_smem + $1, acquiring at cluster scope
# (the peer's consumer released the stage the bulk copy overwrites)
_WAIT_CLUSTER = gl.constexpr("""{
 .reg .pred p;
 .reg .u32 a;
 mov.u32 a, global_smem;
 add.u32 a, a, $1;
 XC_${:uid}:
 mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [a], $2;
 @!p bra XC_${:uid};
 mov.u32 $0, 0;
}""")


@gluon.jit
def _tid():
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.arange(0, 128, layout=one)


@gluon.jit
def _asm1(code: gl.constexpr, x, y, z):
    gl.inline_asm_elementwise(code, "=r,r,r,r", [x, y, z], gl.int32, False, 1)


@gluon.jit
def _wait(code: gl.constexpr, off, phase):
    z = _tid() * 0
    gl.inline_asm_elementwise(code, "=r,r,r", [off + z, phase + z], gl.int32, False, 1)


@gluon.jit
def _cluster_sync():
    gl.inline_asm_elementwise(_CLUSTER_SYNC, "=r,r", [_tid()], gl.int32, False, 1)


@gluon.jit
def _pair():
    pid = gl.program_id(0)
    return (pid // 2).to(gl.int64), pid % 2


@gluon.jit
def _issue_copy_half(raw, scl, rank, st_ptr, page_stride, page_size, slots, valid,
                     FMT: gl.constexpr):  # fmt: skip
    """cp.async this CTA's half of the tile's data bytes into raw (int32 [BLOCK_N, RW]) and the
    half's scale bytes into the first half of each key's row of `scl` (uint8 [BLOCK_N, 32]),
    where `_decode_sub(..., C=0)` reads them."""
    page = slots // page_size
    off = slots % page_size
    base = page * page_stride
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    W: gl.constexpr = _words(FMT)
    lay: gl.constexpr = gl.BlockedLayout([1, 4], [32 // (W // 4), W // 4], [4, 1], [1, 0])
    c = gl.arange(0, W, layout=gl.SliceLayout(0, lay))
    vr = gl.convert_layout(valid, gl.SliceLayout(1, lay))
    if FMT == 0:
        row = (base + off * D) // 4
    elif FMT == 1:
        row = (base + off * (D // 2)) // 4
    else:
        row = (base + off * (2 * D)) // 4
    row = gl.convert_layout(row, gl.SliceLayout(1, lay))
    wptr = st_ptr.to(gl.pointer_type(gl.int32))
    RW: gl.constexpr = raw.shape[1]
    dst = raw._reinterpret(gl.int32, [BLOCK_N * (RW // W), W], plain)
    ptrs = wptr + row[:, None] + (rank * W + c)[None, :]
    async_copy.async_copy_global_to_shared(dst.slice(0, BLOCK_N), ptrs, mask=vr[:, None])
    if FMT != 2:
        NS: gl.constexpr = 16 if FMT == 0 else 32
        HS: gl.constexpr = NS // 2
        sl_lay: gl.constexpr = gl.BlockedLayout([1, HS], [32, 1], [4, 1], [1, 0])
        ks = gl.arange(0, HS, layout=gl.SliceLayout(0, sl_lay))
        vs = gl.convert_layout(valid, gl.SliceLayout(1, sl_lay))
        if FMT == 0:
            srow = base + page_size * D + off * (D // 32)
        else:
            srow = base + page_size * (D // 2) + off * (D // 16)
        srow = gl.convert_layout(srow, gl.SliceLayout(1, sl_lay))
        sdst = scl._reinterpret(gl.uint8, [BLOCK_N * (32 // NS), NS], plain).slice(0, BLOCK_N)
        async_copy.async_copy_global_to_shared(
            sdst.slice(0, HS, dim=1), st_ptr + srow[:, None] + (rank * HS + ks)[None, :],
            mask=vs[:, None],
        )  # fmt: skip


@gluon.jit
def _fetch(i, n_w, rank, sl, ok, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT: gl.constexpr,
           C_FMT: gl.constexpr):  # fmt: skip
    rs = i % NRAW
    if C_FMT == 3 or i < n_w:
        _issue_copy_half(raw_smem.index(rs), scl_smem.index(rs), rank, w_ptr, w_page_stride,
                         w_page_size, sl, ok, W_FMT)  # fmt: skip
    else:
        _issue_copy_half(raw_smem.index(rs), scl_smem.index(rs), rank, c_ptr, c_page_stride,
                         c_page_size, sl, ok, C_FMT)  # fmt: skip
    meta_smem.index(rs).store(ok.to(gl.int32))
    async_copy.commit_group()


@gluon.jit
def _lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP: gl.constexpr):
    swa_len = gl.minimum(gl.maximum(gl.load(swa_lens_ptr + t), 0), W)
    n_w = gl.cdiv(swa_len, BLOCK_N)
    if HAS_COMP:
        comp_len = gl.minimum(gl.maximum(gl.load(comp_lens_ptr + t), 0), K)
    else:
        comp_len = swa_len * 0
    # tiles from `total` on are masked; at least one (all-masked) tile, as production
    total = n_w + gl.cdiv(comp_len, BLOCK_N)
    return swa_len, n_w, comp_len, total, gl.maximum(total, 1)


@gluon.jit
def _producer(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem, bars,
              W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
              XBASE: gl.constexpr):  # fmt: skip
    (q_ptr, stride_qt, stride_qh, w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr,
     stride_swa_t, swa_lens_ptr, W, c_ptr, c_page_stride, c_page_size, c_num_slots, comp_ptr,
     stride_comp_t, comp_lens_ptr, K, _sink_ptr, _scale, _out_ptr, _stride_ot, _stride_oh,
     _lse_ptr, _stride_lt, H) = a  # fmt: skip
    _cluster_sync()
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _pair()
    hb = gl.program_id(1)
    row_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    ql: gl.constexpr = _dec_layout()
    heads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ql))
    hmask = heads < H
    cq = gl.arange(0, 256, layout=gl.SliceLayout(0, ql))
    for h in gl.static_range(2):
        async_copy.async_copy_global_to_shared(
            q_smem.index(h),
            q_ptr + t * stride_qt + heads[:, None] * stride_qh + h * 256 + cq[None, :],
            mask=hmask[:, None],
        )
    async_copy.commit_group()
    swa_row = swa_ptr + t * stride_swa_t
    comp_row = comp_ptr + t * stride_comp_t
    w0 = _spec_load(swa_row, 0, W, row_l)
    w1 = _spec_load(swa_row, 1, W, row_l)
    w2 = _spec_load(swa_row, 2, W, row_l)
    if HAS_COMP:
        c0 = _spec_load(comp_row, 0, K, row_l)
        c1 = _spec_load(comp_row, 1, K, row_l)
        c2 = _spec_load(comp_row, 2, K, row_l)
    else:
        c0 = w0
        c1 = w0
        c2 = w0
    swa_len, n_w, comp_len, end, n = _lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)
    sl_0, ok_0 = _first_slots(0, n_w, end, w0, c0, c1, c2, swa_len, comp_len, w_num_slots,
                              c_num_slots, HAS_COMP, row_l)  # fmt: skip
    sl_1, ok_1 = _first_slots(1, n_w, end, w1, c0, c1, c2, swa_len, comp_len, w_num_slots,
                              c_num_slots, HAS_COMP, row_l)  # fmt: skip
    sl_n, ok_n = _first_slots(2, n_w, end, w2, c0, c1, c2, swa_len, comp_len, w_num_slots,
                              c_num_slots, HAS_COMP, row_l)  # fmt: skip
    _fetch(0, n_w, rank, sl_0, ok_0, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
    _fetch(1, n_w, rank, sl_1, ok_1, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
    async_copy.wait_group(2)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(0), count=1)
    tid = _tid()
    z = tid * 0
    for i in range(0, n):
        sl_f = sl_n
        ok_f = ok_n
        sl_n, ok_n = _tile_slots(i + NRAW + 1, n_w, end, swa_row, swa_len, comp_row, comp_len,
                                 w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
        ks = i % KS
        rs = i % NRAW
        async_copy.wait_group(NRAW - 1)
        gl.thread_barrier()
        ok_i = meta_smem.index(rs).load(row_l) != 0
        # both CTAs' consumers finished tile i - KS (this producer writes stage ks in both)
        if i >= KS:
            _wait(_WAIT_CLUSTER, XBASE + (KS + ks) * 8, ((i // KS) & 1) ^ 1)
        dst = k_smem.index(ks * 2 + rank)
        for k0 in gl.static_range(0, BLOCK_N, SUB):
            if C_FMT == 3 or i < n_w:
                x = _decode_sub(raw_smem.index(rs), scl_smem.index(rs), k0, W_FMT, 0)
            else:
                x = _decode_sub(raw_smem.index(rs), scl_smem.index(rs), k0, C_FMT, 0)
            dst.slice(k0, SUB).store(x)
        kval_smem.index(ks).store(ok_i.to(gl.int32))
        fence_async_shared()
        gl.thread_barrier()
        _asm1(_PUSH_HALF, tid, XBASE + ks * 8 + z, (ks * 2 + rank) * HALF_BYTES + z)
        _fetch(i + NRAW, n_w, rank, sl_f, ok_f, raw_smem, scl_smem, meta_smem, w_ptr,
               w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT,
               C_FMT)  # fmt: skip
    async_copy.wait_group(0)
    _cluster_sync()


@gluon.jit
def _store_half(acc, denom, out_ptr, t, stride_ot, stride_oh, hb, H, rank, mma_o: gl.constexpr):
    """production's `_store_out` with the channel half a runtime value."""
    ad = gl.abs(denom)
    c = gl.where(ad > 2.0**126, 0.25, gl.where(ad < 2.0**-126, 16777216.0, 1.0))
    r = _rcp_approx(denom * c)
    q = (acc * c[:, None]) * r[:, None]
    o = gl.where(denom[:, None] > 0.0, q, 0.0).to(gl.bfloat16)
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_o))
    oc = gl.arange(0, 256, layout=gl.SliceLayout(0, mma_o))
    ptrs = out_ptr + t * stride_ot + oheads[:, None] * stride_oh + rank * 256 + oc[None, :]
    gl.store(ptrs, o, mask=(oheads < H)[:, None])


@gluon.jit
def _consumer(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem, bars,
              W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
              XBASE: gl.constexpr):  # fmt: skip
    """Production's consumer 0 on the whole tile, P.V over this CTA's channels."""
    (_q_ptr, _stride_qt, _stride_qh, _w_ptr, _w_page_stride, _w_page_size, _w_num_slots,
     _swa_ptr, _stride_swa_t, swa_lens_ptr, W, _c_ptr, _c_page_stride, _c_page_size,
     _c_num_slots, _comp_ptr, _stride_comp_t, comp_lens_ptr, K, sink_ptr, scale, out_ptr,
     stride_ot, stride_oh, lse_ptr, stride_lt, H) = a  # fmt: skip
    _cluster_sync()
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _pair()
    hb = gl.program_id(1)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    _swa_len, _n_w, _comp_len, _end, n = _lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)
    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_H], gl.float32, row_s)
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
    tid = _tid()
    z = tid * 0
    mbarrier.wait(bars.index(0), 0)
    _wait(_WAIT_LOCAL, XBASE, 0)
    s_cur = warpgroup_mma_wait(0, deps=[_qk(q_smem, k_smem, 0, mma_s)])
    for j in range(0, n - 1):
        js = j % KS
        jn = (j + 1) % KS
        _wait(_WAIT_LOCAL, XBASE + jn * 8, ((j + 1) // KS) & 1)
        s_tok = _qk(q_smem, k_smem, jn, mma_s)
        p16, alpha, m_i, l_i = _softmax(s_cur, kval_smem.index(js), m_i, l_i, scale, mma_s)
        alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, mma_o))
        tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2 + rank),
                            acc * alpha_o[:, None], is_async=True)  # fmt: skip
        acc, s_cur = warpgroup_mma_wait(0, deps=[tok, s_tok])
        gl.thread_barrier()
        _asm1(_RELEASE, tid, XBASE + (KS + js) * 8 + z, z)
    jl = n - 1
    js = jl % KS
    p16, alpha, m_i, l_i = _softmax(s_cur, kval_smem.index(js), m_i, l_i, scale, mma_s)
    alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, mma_o))
    tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2 + rank),
                        acc * alpha_o[:, None], is_async=True)  # fmt: skip
    acc = warpgroup_mma_wait(0, deps=[tok])
    gl.thread_barrier()
    _asm1(_RELEASE, tid, XBASE + (KS + js) * 8 + z, z)

    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_s)
    omask = oheads < H
    has = m_i > -float("inf")
    m_safe_o = gl.where(has, m_i, 0.0)
    sink = gl.load(sink_ptr + oheads, mask=omask, other=0.0)
    denom = gl.where(has, l_i + gl.exp(sink - m_safe_o), 0.0)
    lse = gl.where(has, m_safe_o + gl.log(gl.where(has, l_i, 1.0)), -float("inf"))
    gl.store(lse_ptr + t * stride_lt + oheads, lse, mask=omask & (rank == 0))
    _store_half(acc, gl.convert_layout(denom, gl.SliceLayout(1, mma_o)), out_ptr, t, stride_ot,
                stride_oh, hb, H, rank, mma_o)  # fmt: skip
    _cluster_sync()


@gluon.jit
def _qk_reg(q0, q1, k_smem, js, mma_s: gl.constexpr):
    """Issue S = Q.K^T of K stage js with Q from registers (q0 / q1: channels [0, 256) /
    [256, 512) as wgmma A operands): the same k-steps in the same order as production's `_qk`."""
    s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, mma_s)
    s = warpgroup_mma(q0, k_smem.index(js * 2).permute((1, 0)), s, is_async=True)
    s = warpgroup_mma(q1, k_smem.index(js * 2 + 1).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _consumer_qk(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
                 bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
                 XBASE: gl.constexpr):  # fmt: skip
    """QREG: Q.K^T with Q held in registers, the online softmax, P and the rescale factor to
    the P.V warpgroup (production's consumer 0 hand-off), lse and the denominators."""
    (_q_ptr, _stride_qt, _stride_qh, _w_ptr, _w_page_stride, _w_page_size, _w_num_slots,
     _swa_ptr, _stride_swa_t, swa_lens_ptr, W, _c_ptr, _c_page_stride, _c_page_size,
     _c_num_slots, _comp_ptr, _stride_comp_t, comp_lens_ptr, K, sink_ptr, scale, _out_ptr,
     _stride_ot, _stride_oh, lse_ptr, stride_lt, H) = a  # fmt: skip
    _cluster_sync()
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _pair()
    hb = gl.program_id(1)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    q_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_s, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    _swa_len, _n_w, _comp_len, _end, n = _lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)
    PF: gl.constexpr = 2 + 2 * KS
    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_H], gl.float32, row_s)
    tid = _tid()
    z = tid * 0
    mbarrier.wait(bars.index(0), 0)
    q0 = q_smem.index(0).load(q_op)
    q1 = q_smem.index(1).load(q_op)
    _wait(_WAIT_LOCAL, XBASE, 0)
    s_cur = warpgroup_mma_wait(0, deps=[_qk_reg(q0, q1, k_smem, 0, mma_s)])
    for j in range(0, n - 1):
        js = j % KS
        jn = (j + 1) % KS
        _wait(_WAIT_LOCAL, XBASE + jn * 8, ((j + 1) // KS) & 1)
        s_tok = _qk_reg(q0, q1, k_smem, jn, mma_s)
        _p16, _alpha, m_i, l_i = _softmax_handoff(
            s_cur, j, kval_smem.index(js), p_smem, x_smem, bars, m_i, l_i, scale, mma_s, mma_o, PF
        )
        s_cur = warpgroup_mma_wait(0, deps=[s_tok])
        gl.thread_barrier()
        _asm1(_RELEASE, tid, XBASE + (KS + js) * 8 + z, z)
    jl = n - 1
    js = jl % KS
    _p16, _alpha, m_i, l_i = _softmax_handoff(s_cur, jl, kval_smem.index(js), p_smem, x_smem,
                                              bars, m_i, l_i, scale, mma_s, mma_o, PF)  # fmt: skip
    gl.thread_barrier()
    _asm1(_RELEASE, tid, XBASE + (KS + js) * 8 + z, z)
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_s)
    omask = oheads < H
    has = m_i > -float("inf")
    m_safe_o = gl.where(has, m_i, 0.0)
    sink = gl.load(sink_ptr + oheads, mask=omask, other=0.0)
    denom = gl.where(has, l_i + gl.exp(sink - m_safe_o), 0.0)
    x_smem.index(2).store(denom)
    gl.thread_barrier()
    mbarrier.arrive(bars.index(PF + 4), count=1)
    lse = gl.where(has, m_safe_o + gl.log(gl.where(has, l_i, 1.0)), -float("inf"))
    gl.store(lse_ptr + t * stride_lt + oheads, lse, mask=omask & (rank == 0))
    _cluster_sync()


@gluon.jit
def _consumer_pv(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
                 bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
                 XBASE: gl.constexpr):  # fmt: skip
    """QREG: P.V over this CTA's channels with P and the rescale factor from the Q.K^T
    warpgroup (production's consumer 1)."""
    (_q_ptr, _stride_qt, _stride_qh, _w_ptr, _w_page_stride, _w_page_size, _w_num_slots,
     _swa_ptr, _stride_swa_t, swa_lens_ptr, W, _c_ptr, _c_page_stride, _c_page_size,
     _c_num_slots, _comp_ptr, _stride_comp_t, comp_lens_ptr, K, _sink_ptr, _scale, out_ptr,
     stride_ot, stride_oh, _lse_ptr, _stride_lt, H) = a  # fmt: skip
    _cluster_sync()
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _pair()
    hb = gl.program_id(1)
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    _swa_len, _n_w, _comp_len, _end, n = _lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)
    PF: gl.constexpr = 2 + 2 * KS
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
    tid = _tid()
    z = tid * 0
    for j in range(0, n):
        js = j % KS
        ps = j % 2
        mbarrier.wait(bars.index(PF + ps), (j // 2) & 1)
        alpha = x_smem.index(ps).load(row_o)
        tok = warpgroup_mma(p_smem.index(ps), k_smem.index(js * 2 + rank), acc * alpha[:, None],
                            is_async=True)  # fmt: skip
        acc = warpgroup_mma_wait(0, deps=[tok])
        gl.thread_barrier()
        mbarrier.arrive(bars.index(PF + 2 + ps), count=1)
        _asm1(_RELEASE_LOCAL, tid, XBASE + (KS + js) * 8 + z, z)
    mbarrier.wait(bars.index(PF + 4), 0)
    denom = x_smem.index(2).load(row_o)
    _store_half(acc, denom, out_ptr, t, stride_ot, stride_oh, hb, H, rank, mma_o)
    _cluster_sync()


@gluon.jit
def _gluon_sparse_attn_kernel(
    q_ptr, stride_qt, stride_qh,
    w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr, stride_swa_t, swa_lens_ptr, W,
    c_ptr, c_page_stride, c_page_size, c_num_slots, comp_ptr, stride_comp_t, comp_lens_ptr, K,
    sink_ptr, scale,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,
    H,
    W_FMT: gl.constexpr, C_FMT: gl.constexpr, XBASE: gl.constexpr = 0,
):  # fmt: skip
    RW: gl.constexpr = _raw_words(W_FMT, C_FMT)
    KS: gl.constexpr = _kstages(W_FMT, C_FMT)
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 256], gl.bfloat16)
    k_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 256], gl.bfloat16)
    # the K stages first and largest: Triton places them at shared offset 0 (the bulk copies
    # address them from global_smem)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [2 * KS, BLOCK_N, 256], k_lay)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_H, 256], q_lay)
    raw_smem = gl.allocate_shared_memory(gl.int32, [NRAW, BLOCK_N, RW], plain)
    scl_smem = gl.allocate_shared_memory(gl.uint8, [NRAW, BLOCK_N, 32], plain)
    meta_smem = gl.allocate_shared_memory(gl.int32, [NRAW, BLOCK_N], plain1)
    kval_smem = gl.allocate_shared_memory(gl.int32, [KS, BLOCK_N], plain1)
    p_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], gl.bfloat16)
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [1 + QREG, BLOCK_H, BLOCK_N], p_lay)
    x_smem = gl.allocate_shared_memory(gl.float32, [3, BLOCK_H], plain1)
    # Gluon barriers: 0 Q stored; with QREG, production's hand-off barriers at PF..PF + 4
    # (P buffer b filled, P buffer b consumed, denominator stored); 1..PF - 1 unused
    PF: gl.constexpr = 2 + 2 * KS
    bars = gl.allocate_shared_memory(gl.int64, [PF + 5, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    for b in gl.static_range(PF, PF + 5):
        mbarrier.init(bars.index(b), count=1)
    tid = _tid()
    for s in gl.static_range(KS):
        _asm1(_BAR_INIT, tid, XBASE + s * 8 + tid * 0, 1 + tid * 0)
        # free: the consumers here (1, or 2 with QREG) and the peer's Q.K^T warpgroup
        _asm1(_BAR_INIT, tid, XBASE + (KS + s) * 8 + tid * 0, 2 + QREG + tid * 0)
    fence_async_shared()
    gl.thread_barrier()
    a = (q_ptr, stride_qt, stride_qh, w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr,
         stride_swa_t, swa_lens_ptr, W, c_ptr, c_page_stride, c_page_size, c_num_slots,
         comp_ptr, stride_comp_t, comp_lens_ptr, K, sink_ptr, scale, out_ptr, stride_ot,
         stride_oh, lse_ptr, stride_lt, H)  # fmt: skip
    # (the argument tuples are written out: a tuple assigned to a variable would turn the
    # constexprs in it into tensors)
    if QREG:
        gl.warp_specialize(
            [
                (_consumer_qk, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem,
                                p_smem, x_smem, bars, W_FMT, C_FMT, KS, XBASE)),
                (_consumer_pv, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem,
                                p_smem, x_smem, bars, W_FMT, C_FMT, KS, XBASE)),
                (_producer, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem,
                             p_smem, x_smem, bars, W_FMT, C_FMT, KS, XBASE)),
            ],
            [4, 4],
            [PV_REGS, PRODUCER_REGS],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (_consumer, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem,
                             p_smem, x_smem, bars, W_FMT, C_FMT, KS, XBASE)),
                (_producer, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem,
                             p_smem, x_smem, bars, W_FMT, C_FMT, KS, XBASE)),
            ],
            [4],
            [PRODUCER_REGS],
        )  # fmt: skip
