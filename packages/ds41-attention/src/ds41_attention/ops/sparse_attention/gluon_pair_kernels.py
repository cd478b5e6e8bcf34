# mypy: disable-error-code="no-untyped-def"
"""Hopper (sm_90a) Gluon kernel of SPEC section 8, invariant path, for batches that leave SMs
idle: a row on a pair of CTAs (a cluster of two) that share the decode, with the arithmetic of
`gluon_kernels.py`, so every output bit is that kernel's.

Why: the one-CTA kernel (`gluon_kernels.py`) runs a row on one SM; with T x head blocks <= 66
most of the H200's 132 SMs idle and a row takes ~16 us + 20 tiles x 1.7 us. Here CTA r of the
pair gathers and decodes channels [256 r, 256 r + 256) of each 32-key tile only, stores them
into its own K stage and, with one bulk copy (`cp.async.bulk` shared::cta -> shared::cluster,
issued by one thread, counted in bytes on the peer's mbarrier), into the same place of the
peer's K stage: each CTA holds every tile whole after half the decode.

Roles (three warpgroups a CTA, registers 208 / 168 / 128):
- Q.K^T warpgroup (the default partition): Q held in registers (wgmma A operand, loaded once),
  so a product reads only the K tile from shared memory (the one-CTA kernel re-reads the 64 KB
  Q every tile); the online softmax; P (bf16) and the rescale factor to the P.V warpgroup
  through shared memory; lse (CTA 0) and the denominators. The same k-steps over all 512
  channels in the same order, the same softmax: the same scores and P bits as the one-CTA
  kernel's consumer 0.
- P.V warpgroup: P.V over this CTA's channels with P from shared memory, the rescale, the
  output division and store of those channels, staged through Q's first shared half (the
  one-CTA kernel's consumer 1 does exactly this for channels [256, 512)).
- producer: the gathers and decode of this CTA's half (the one-CTA producer's code on half the
  bytes), then the bulk copy.

Synchronisation. Besides Triton's mbarriers (Q landed; the P hand-off, as in the one-CTA
kernel), two rings of mbarriers that the peer reaches live past Triton's shared memory at the
constexpr byte offset XBASE, addressed by inline PTX: fill[s] (one local arrival carrying the
expected 16,384 bytes of the peer's half; the peer's bulk copy completes them) and free[s]
(three arrivals: the Q.K^T and P.V warpgroups here and, remotely, the peer's Q.K^T warpgroup:
a producer writes its half into stage s of both CTAs). Every partition passes a cluster barrier
at its start (the peer's barriers are initialised) and at its end (no CTA exits while its peer
may still arrive on its barriers).

Requirements the launcher (`gluon_launch.launch_gluon_pair`) establishes: clusters of two
along the first grid dimension (Triton compiles the kernel for one CTA; the launch asks for the
clusters and for the barrier bytes past XBASE), and the K stages at shared-memory offset 0 (the
bulk copies address them from `global_smem`; checked on every compiled kernel by running
Triton's shared-memory allocation pass on its TTGIR).
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

from .gluon_kernels import (
    _copy_q,
    _decode_sub,
    _first_tiles,
    _p_bars,
    _raw_words,
    _row_lengths,
    _sink_denom_lse,
    _softmax_handoff,
    _store_out,
    _tile_slots,
    _tile_slots_of,
    _words,
)

PAIR_D = 512
PAIR_BLOCK_H = 64
PAIR_NUM_WARPS = 4
PAIR_MAXNREG = 168  # 12 warps x 32 x 168 fit the register file; setmaxnreg re-balances
PAIR_KSTAGES = 4  # K stages (3 when a cache holds bf16 records: their raw ring is larger)
PAIR_CLUSTER = 2  # CTAs a row
D = gl.constexpr(PAIR_D)
BLOCK_H = gl.constexpr(PAIR_BLOCK_H)
BLOCK_N = gl.constexpr(32)
NRAW = gl.constexpr(2)
PV_REGS = gl.constexpr(168)
PRODUCER_REGS = gl.constexpr(128)
HALF_BYTES = gl.constexpr(32 * 256 * 2)  # a K stage's half: BLOCK_N keys x 256 channels, bf16


def pair_barrier_bytes() -> int:
    """Shared-memory bytes the kernel uses past XBASE: PAIR_KSTAGES fill, then free mbarriers."""
    return 2 * PAIR_KSTAGES * 8


@gluon.constexpr_function
def _kstages(w_fmt, c_fmt):
    return 3 if 2 in (int(w_fmt), int(c_fmt)) else PAIR_KSTAGES


def _thread0(op: str) -> gl.constexpr:
    """PTX: thread 0 (`$1` == 0) runs `op` on the mbarrier at `global_smem + $2` (`a`) and,
    in `op`, at the same offset in the peer CTA (`r`)."""
    return gl.constexpr(
        "{\n .reg .pred p;\n .reg .u32 a, r, peer;\n setp.eq.u32 p, $1, 0;\n"
        " mov.u32 a, global_smem;\n add.u32 a, a, $2;\n mov.u32 peer, %cluster_ctarank;\n"
        " xor.b32 peer, peer, 1;\n mapa.shared::cluster.u32 r, a, peer;\n" + op + "\n"
        " mov.u32 $0, 0;\n}"
    )


# init with $3 arrivals, the init visible to the cluster
_BAR_INIT = _thread0(
    "@p mbarrier.init.shared::cta.b64 [a], $3;\n @p fence.mbarrier_init.release.cluster;"
)
# this CTA's arrival on fill[s] expecting the peer's half; the bulk copy of this CTA's half
# of stage s (local byte offset $3) into the same place of the peer, completing its fill[s]
_PUSH_HALF = _thread0(
    "{\n .reg .u32 src, dst;\n mov.u32 src, global_smem;\n add.u32 src, src, $3;\n"
    " mapa.shared::cluster.u32 dst, src, peer;\n"
    " @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [a], 16384;\n"
    " @p cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes"
    " [dst], [src], 16384, [r];\n}"
)
# release stage s here and at the peer (the Q.K^T warpgroup read both halves)
_RELEASE_BOTH = _thread0(
    "@p mbarrier.arrive.shared::cta.b64 _, [a];\n"
    " @p mbarrier.arrive.release.cluster.shared::cluster.b64 _, [r];"
)
# release stage s here only (the P.V warpgroup read this CTA's half)
_RELEASE_HERE = _thread0("@p mbarrier.arrive.shared::cta.b64 _, [a];")
# every thread: wait for phase $2 of the barrier at global_smem + $1; acquire at cluster
# scope (a free[s] phase holds the peer's arrival)
_WAIT = gl.constexpr("""{
 .reg .pred p;
 .reg .u32 a;
 mov.u32 a, global_smem;
 add.u32 a, a, $1;
 PW_${:uid}:
 mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [a], $2;
 @!p bra PW_${:uid};
 mov.u32 $0, 0;
}""")
_CLUSTER_SYNC = gl.constexpr("""{
 barrier.cluster.arrive.release.aligned;
 barrier.cluster.wait.acquire.aligned;
 mov.u32 $0, 0;
}""")


@gluon.jit
def _tid():
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    return gl.arange(0, 128, layout=one)


@gluon.jit
def _on_barrier(code: gl.constexpr, off, arg):
    """Run a `_thread0` snippet on the barrier at byte offset `off` past `global_smem`."""
    tid = _tid()
    z = tid * 0
    gl.inline_asm_elementwise(code, "=r,r,r,r", [tid, off + z, arg + z], gl.int32, False, 1)


@gluon.jit
def _wait(off, phase):
    z = _tid() * 0
    gl.inline_asm_elementwise(_WAIT, "=r,r,r", [off + z, phase + z], gl.int32, False, 1)


@gluon.jit
def _cluster_sync():
    """Every thread of both CTAs (each partition calls it at its start and its end)."""
    gl.inline_asm_elementwise(_CLUSTER_SYNC, "=r,r", [_tid()], gl.int32, False, 1)


@gluon.jit
def _row_rank():
    """(row, CTA rank in the row's pair): two CTAs a row, clusters of two."""
    pid = gl.program_id(0)
    return (pid // 2).to(gl.int64), pid % 2


@gluon.jit
def _issue_copy_half(raw, scl, rank, st_ptr, page_stride, page_size, slots, valid,
                     FMT: gl.constexpr):  # fmt: skip
    """cp.async this CTA's half of the tile's data bytes into `raw` (int32 [BLOCK_N, RW]) and
    the half's scale bytes into the first half of each key's row of `scl` (uint8 [BLOCK_N,
    32]), where `_decode_sub(..., C=0)` reads them; masked keys zero-fill."""
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
    dst = raw._reinterpret(gl.int32, [BLOCK_N * (RW // W), W], plain).slice(0, BLOCK_N)
    ptrs = wptr + row[:, None] + (rank * W + c)[None, :]
    async_copy.async_copy_global_to_shared(dst, ptrs, mask=vr[:, None])
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
    """Start the copies of this CTA's half of tile i into ring slot i % NRAW; record the keys'
    validity."""
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
def _producer(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem, bars,
              W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
              XBASE: gl.constexpr):  # fmt: skip
    (q_ptr, stride_qt, stride_qh, w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr,
     stride_swa_t, swa_lens_ptr, W, c_ptr, c_page_stride, c_page_size, c_num_slots, comp_ptr,
     stride_comp_t, comp_lens_ptr, K, _sink_ptr, _scale_log2, _out_ptr, _stride_ot, _stride_oh,
     _lse_ptr, _stride_lt, H) = a  # fmt: skip
    _cluster_sync()
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _row_rank()
    hb = gl.program_id(1)
    row_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    # Q (both halves: the Q.K^T warpgroup needs every channel) by cp.async, first; the slots
    # of tiles 0..2 beside the lengths, as in the one-CTA kernel's invariant mode
    _copy_q(q_smem, q_ptr, t, stride_qt, stride_qh, hb, H)
    swa_row = swa_ptr + t * stride_swa_t
    comp_row = comp_ptr + t * stride_comp_t
    swa_len, n_w, comp_len, _lo, n, end, sl_0, ok_0, sl_1, ok_1, ws_2, cs_2 = _first_tiles(
        t,
        swa_row,
        comp_row,
        swa_lens_ptr,
        W,
        comp_lens_ptr,
        K,
        w_num_slots,
        c_num_slots,
        HAS_COMP,
        row_l,
    )
    sl_n, ok_n = _tile_slots_of(2, n_w, end, ws_2, cs_2, swa_len, comp_len, w_num_slots,
                                c_num_slots, HAS_COMP, row_l)  # fmt: skip
    _fetch(0, n_w, rank, sl_0, ok_0, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
    _fetch(1, n_w, rank, sl_1, ok_1, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
    async_copy.wait_group(2)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(0), count=1)
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
        # every reader of stage ks in both CTAs finished tile i - KS
        if i >= KS:
            _wait(XBASE + (KS + ks) * 8, ((i // KS) & 1) ^ 1)
        dst = k_smem.index(ks * 2 + rank)
        if C_FMT == 3 or i < n_w:
            dst.store(_decode_sub(raw_smem.index(rs), scl_smem.index(rs), W_FMT, 0))
        else:
            dst.store(_decode_sub(raw_smem.index(rs), scl_smem.index(rs), C_FMT, 0))
        kval_smem.index(ks).store(ok_i.to(gl.int32))
        fence_async_shared()
        gl.thread_barrier()
        _on_barrier(_PUSH_HALF, XBASE + ks * 8, (ks * 2 + rank) * HALF_BYTES)
        _fetch(i + NRAW, n_w, rank, sl_f, ok_f, raw_smem, scl_smem, meta_smem, w_ptr,
               w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT,
               C_FMT)  # fmt: skip
    async_copy.wait_group(0)
    _cluster_sync()


@gluon.jit
def _qk_reg(q0, q1, k_smem, js, mma_s: gl.constexpr):
    """Issue S = Q.K^T of K stage js with Q from registers (q0 / q1: channels [0, 256) /
    [256, 512)); the k-steps and their order of the one-CTA kernel's `_qk`."""
    s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, mma_s)
    s = warpgroup_mma(q0, k_smem.index(js * 2).permute((1, 0)), s, is_async=True)
    s = warpgroup_mma(q1, k_smem.index(js * 2 + 1).permute((1, 0)), s, is_async=True)
    return s


@gluon.jit
def _consumer_qk(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
                 bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
                 XBASE: gl.constexpr):  # fmt: skip
    """Q.K^T with Q in registers, the online softmax, P and the rescale factor to the P.V
    warpgroup, lse (CTA 0) and the denominators."""
    (_q_ptr, _stride_qt, _stride_qh, _w_ptr, _w_page_stride, _w_page_size, _w_num_slots,
     _swa_ptr, _stride_swa_t, swa_lens_ptr, W, _c_ptr, _c_page_stride, _c_page_size,
     _c_num_slots, _comp_ptr, _stride_comp_t, comp_lens_ptr, K, sink_ptr, scale_log2, _out_ptr,
     _stride_ot, _stride_oh, lse_ptr, stride_lt, H) = a  # fmt: skip
    _cluster_sync()
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _row_rank()
    hb = gl.program_id(1)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    q_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_s, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    _swa_len, _n_w, _comp_len, _lo, n, _end = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr,
                                                          K, 1, HAS_COMP, False)  # fmt: skip
    PF: gl.constexpr = _p_bars(KS)
    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_H], gl.float32, row_s)
    mbarrier.wait(bars.index(0), 0)
    q0 = q_smem.index(0).load(q_op)
    q1 = q_smem.index(1).load(q_op)
    _wait(XBASE, 0)
    s_cur = warpgroup_mma_wait(0, deps=[_qk_reg(q0, q1, k_smem, 0, mma_s)])
    for j in range(0, n - 1):
        js = j % KS
        jn = (j + 1) % KS
        # Q.K^T of tile j + 1 runs on the tensor cores during this tile's softmax
        _wait(XBASE + jn * 8, ((j + 1) // KS) & 1)
        s_tok = _qk_reg(q0, q1, k_smem, jn, mma_s)
        _p16, _alpha, m_i, l_i = _softmax_handoff(s_cur, j, kval_smem.index(js), p_smem, x_smem,
                                                  bars, m_i, l_i, scale_log2, mma_s, mma_o, PF,
                                                  True)  # fmt: skip
        s_cur = warpgroup_mma_wait(0, deps=[s_tok])
        gl.thread_barrier()
        _on_barrier(_RELEASE_BOTH, XBASE + (KS + js) * 8, 0)
    jl = n - 1
    js = jl % KS
    _p16, _alpha, m_i, l_i = _softmax_handoff(s_cur, jl, kval_smem.index(js), p_smem, x_smem,
                                              bars, m_i, l_i, scale_log2, mma_s, mma_o, PF,
                                              True)  # fmt: skip
    gl.thread_barrier()
    _on_barrier(_RELEASE_BOTH, XBASE + (KS + js) * 8, 0)
    # sink in the denominator only; the denominators to the P.V warpgroup
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_s)
    omask = oheads < H
    sink = gl.load(sink_ptr + oheads, mask=omask, other=0.0)
    denom, lse = _sink_denom_lse(m_i, l_i, sink)
    x_smem.index(2).store(denom)
    gl.thread_barrier()
    mbarrier.arrive(bars.index(PF + 4), count=1)
    gl.store(lse_ptr + t * stride_lt + oheads, lse, mask=omask & (rank == 0))
    _cluster_sync()


@gluon.jit
def _consumer_pv(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
                 bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
                 XBASE: gl.constexpr):  # fmt: skip
    """P.V over this CTA's channels with P and the rescale factor from the Q.K^T warpgroup."""
    (_q_ptr, _stride_qt, _stride_qh, _w_ptr, _w_page_stride, _w_page_size, _w_num_slots,
     _swa_ptr, _stride_swa_t, swa_lens_ptr, W, _c_ptr, _c_page_stride, _c_page_size,
     _c_num_slots, _comp_ptr, _stride_comp_t, comp_lens_ptr, K, _sink_ptr, _scale_log2, out_ptr,
     stride_ot, stride_oh, _lse_ptr, _stride_lt, H) = a  # fmt: skip
    _cluster_sync()
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _row_rank()
    hb = gl.program_id(1)
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    _swa_len, _n_w, _comp_len, _lo, n, _end = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr,
                                                          K, 1, HAS_COMP, False)  # fmt: skip
    PF: gl.constexpr = _p_bars(KS)
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
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
        _on_barrier(_RELEASE_HERE, XBASE + (KS + js) * 8, 0)
    mbarrier.wait(bars.index(PF + 4), 0)
    denom = x_smem.index(2).load(row_o)
    # Q's first half stages the output: the Q.K^T warpgroup holds Q in registers
    _store_out(acc, denom, q_smem.index(0), out_ptr, t, stride_ot, stride_oh, hb, H, rank * 256)
    _cluster_sync()


@gluon.jit
def _gluon_pair_attn_kernel(
    q_ptr, stride_qt, stride_qh,  # bf16 q; strides in elements
    # the page sizes are constexprs: one compile per pair of cache page sizes
    w_ptr, w_page_stride, w_page_size: gl.constexpr, w_num_slots,
    swa_ptr, stride_swa_t, swa_lens_ptr, W,
    c_ptr, c_page_stride, c_page_size: gl.constexpr, c_num_slots,
    comp_ptr, stride_comp_t, comp_lens_ptr, K,
    sink_ptr, scale_log2,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,  # bf16 out
    H,
    W_FMT: gl.constexpr, C_FMT: gl.constexpr, XBASE: gl.constexpr, GDC: gl.constexpr = False,
):  # fmt: skip
    gluon_enter_dependent(GDC)
    RW: gl.constexpr = _raw_words(W_FMT, C_FMT)
    KS: gl.constexpr = _kstages(W_FMT, C_FMT)
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 256], gl.bfloat16)
    k_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 256], gl.bfloat16)
    p_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], gl.bfloat16)
    # the K stages are the largest allocation: Triton places them at offset 0, where the bulk
    # copies address them (the launcher checks it on every compiled kernel)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [2 * KS, BLOCK_N, 256], k_lay)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_H, 256], q_lay)
    raw_smem = gl.allocate_shared_memory(gl.int32, [NRAW, BLOCK_N, RW], plain)
    scl_smem = gl.allocate_shared_memory(gl.uint8, [NRAW, BLOCK_N, 32], plain)
    meta_smem = gl.allocate_shared_memory(gl.int32, [NRAW, BLOCK_N], plain1)
    kval_smem = gl.allocate_shared_memory(gl.int32, [KS, BLOCK_N], plain1)
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_H, BLOCK_N], p_lay)
    x_smem = gl.allocate_shared_memory(gl.float32, [3, BLOCK_H], plain1)
    # Triton's barriers: 0 Q landed; PF + b P buffer b filled; PF + 2 + b P buffer b consumed;
    # PF + 4 denominators stored (the one-CTA kernel's indices, so its hand-off serves; the
    # indices between are unused)
    PF: gl.constexpr = _p_bars(KS)
    bars = gl.allocate_shared_memory(gl.int64, [PF + 5, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    for b in gl.static_range(PF, PF + 5):
        mbarrier.init(bars.index(b), count=1)
    for s in gl.static_range(KS):
        _on_barrier(_BAR_INIT, XBASE + s * 8, 1)
        _on_barrier(_BAR_INIT, XBASE + (KS + s) * 8, 3)
    fence_async_shared()
    gl.thread_barrier()
    # the page sizes reach the partitions as constants, as in `_gluon_sparse_attn_kernel`
    w_ps = gl.full([], w_page_size, gl.int32)
    c_ps = gl.full([], c_page_size, gl.int32)
    a = (q_ptr, stride_qt, stride_qh, w_ptr, w_page_stride, w_ps, w_num_slots, swa_ptr,
         stride_swa_t, swa_lens_ptr, W, c_ptr, c_page_stride, c_ps, c_num_slots,
         comp_ptr, stride_comp_t, comp_lens_ptr, K, sink_ptr, scale_log2, out_ptr, stride_ot,
         stride_oh, lse_ptr, stride_lt, H)  # fmt: skip
    # (the partitions' argument tuples are written out: a tuple assigned to a variable would
    # turn the constexprs in it into tensors)
    gl.warp_specialize(
        [
            (_consumer_qk, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem,
                            x_smem, bars, W_FMT, C_FMT, KS, XBASE)),
            (_consumer_pv, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem,
                            x_smem, bars, W_FMT, C_FMT, KS, XBASE)),
            (_producer, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem,
                         x_smem, bars, W_FMT, C_FMT, KS, XBASE)),
        ],
        [4, 4],
        [PV_REGS, PRODUCER_REGS],
    )  # fmt: skip
