# mypy: disable-error-code="no-untyped-def"
"""Lab copy of the Hopper Gluon kernel with profiling switches (not installed, not production).

Module constants (replaced by `gluon_profile.py`):
- `DROP` 0 = full kernel, 1 = the producer skips the decode (K stages keep stale bytes), 2 =
  the consumers skip every product and the softmax (they only wait and release), 3 = the
  producer issues no record copies (it decodes stale ring bytes), 4 = the work of one CTA of a
  two-CTA D split (issue 11): the producer decodes channels [0, 256) only, consumer 0 computes
  Q.K^T and P.V over them (no exchange), consumer 1 only waits and releases.
- `SPLIT` 0 = one CTA a row, Q.K^T one accumulator chain over D (production's arithmetic); 1 =
  one CTA a row, Q.K^T as two half-D products added (S0 + S1: the bits a D split gives); 2 =
  two CTAs a row in a cluster of two (launched by `gluon_profile.py`'s `launch_lab_split`): CTA
  r decodes channels [256 r, 256 r + 256), computes its partial Q.K^T `XAHEAD` tiles ahead,
  pushes it into the peer's shared memory (inline PTX: `mapa`, then `st.async` counted in bytes
  on the peer's mbarrier (`XMODE` 1) or `st.shared::cluster` and one remote release arrive a
  thread (`XMODE` 0)), adds the peer's, runs the softmax and P.V over its channels and stores
  them (consumer 1 idles). The exchange ring (`XRING` slots) lies past Triton's shared memory
  at the constexpr `XBASE` (the launcher raises the launch's shared-memory size).
- `KSTAGES_MAIN` / `NRAW_MAIN` the K-stage and raw-ring depths for non-bf16 formats; `PIPE` 1 =
  consumer 0 issues Q.K^T of tile j + 1 before the softmax of tile j (the production setting);
  `SUB` keys decoded per step; `C1_REGS` / `PRODUCER_REGS` the worker partitions' registers.

With DROP = 0, SPLIT = 0, PIPE = 1 and the default depths this compiled to the same SASS as the
production kernel up to commit 85a81ce; production has since decoded with integer ops (attn7)
and 32 keys per step, this copy keeps the hardware conversions.
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

DROP = gl.constexpr(0)
SPLIT = gl.constexpr(0)
XAHEAD = gl.constexpr(2)  # SPLIT 2: partial scores pushed this many tiles ahead (2 or 3)
XRING = gl.constexpr(4)  # exchange ring slots (SPLIT 2; >= 2 XAHEAD - 1)
# SPLIT 2's push: 0 = st.shared::cluster + one remote arrive (release) a thread, 1 = st.async
# whose bytes complete the peer's barrier (the receiver arms it with expect_tx; no fence)
XMODE = gl.constexpr(0)
KSTAGES_MAIN = gl.constexpr(3)
PIPE = gl.constexpr(1)  # 1: consumer 0 issues Q.K^T of tile j + 1 before the softmax of tile j
NRAW_MAIN = gl.constexpr(2)  # raw ring depth for non-bf16 formats (bf16 records: 2)
GLUON_D = 512
GLUON_BLOCK_H = 64
GLUON_BLOCK_N = 32
GLUON_NUM_WARPS = 4
GLUON_MAXNREG = 168
D = gl.constexpr(GLUON_D)
HALF = gl.constexpr(GLUON_D // 2)
BLOCK_H = gl.constexpr(GLUON_BLOCK_H)
BLOCK_N = gl.constexpr(GLUON_BLOCK_N)
SUB = gl.constexpr(16)  # keys decoded per step (register pressure)
C1_REGS = gl.constexpr(168)
PRODUCER_REGS = gl.constexpr(136)


@gluon.jit
def _tile_slots(i, n_w, total, swa_row, swa_len, comp_row, comp_len, w_slots, c_slots,
                HAS_COMP: gl.constexpr, layout: gl.constexpr):  # fmt: skip
    """(slot int64 clamped to >= 0, validity) of tile i's keys, in `layout`."""
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
def _kstages(w_fmt, c_fmt, main):
    # bf16 records need a raw ring twice as large: two K stages then fit shared memory
    return 2 if 2 in (int(w_fmt), int(c_fmt)) else int(main)


@gluon.jit
def _issue_copy(raw_smem, rs, scl, st_ptr, page_stride, page_size, slots, valid,
                FMT: gl.constexpr):  # fmt: skip
    """cp.async both halves of the tile's data bytes into ring slot rs of `raw_smem` (int32
    [2 NRAW, BLOCK_N, RW]: entry 2 rs + h holds channels [256 h, 256 h + 256) of each key,
    packed at FMT's width) and the scale bytes into `scl` (uint8 [BLOCK_N, 32]: MXFP8 16
    ue8m0 per key, NVFP4 32 e4m3)."""
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
    RW: gl.constexpr = raw_smem.shape[2]
    for h in gl.static_range(2):
        dst = raw_smem.index(rs * 2 + h)._reinterpret(gl.int32, [BLOCK_N * (RW // W), W], plain)
        ptrs = wptr + row[:, None] + (h * W + c)[None, :]
        async_copy.async_copy_global_to_shared(dst.slice(0, BLOCK_N), ptrs, mask=vr[:, None])
    if FMT != 2:
        NS: gl.constexpr = 16 if FMT == 0 else 32
        sl_lay: gl.constexpr = gl.BlockedLayout(
            [1, 16], [32 // (NS // 16), NS // 16], [4, 1], [1, 0]
        )
        ks = gl.arange(0, NS, layout=gl.SliceLayout(0, sl_lay))
        vs = gl.convert_layout(valid, gl.SliceLayout(1, sl_lay))
        if FMT == 0:
            srow = base + page_size * D + off * (D // 32)
        else:
            srow = base + page_size * (D // 2) + off * (D // 16)
        srow = gl.convert_layout(srow, gl.SliceLayout(1, sl_lay))
        sdst = scl._reinterpret(gl.uint8, [BLOCK_N * (32 // NS), NS], plain).slice(0, BLOCK_N)
        async_copy.async_copy_global_to_shared(
            sdst, st_ptr + srow[:, None] + ks[None, :], mask=vs[:, None]
        )


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
def _decode_sub(raw, scl, k0, FMT: gl.constexpr, C: gl.constexpr):
    """bf16 [SUB, 256]: keys [k0, k0 + SUB) of the tile, channels [256 C, 256 C + 256), from
    the raw ring; exact (SPEC section 4). Invalid keys were zero-filled by their masked
    copies (data and scale bytes), so they decode to zeros."""
    lay: gl.constexpr = _dec_layout()
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    NB: gl.constexpr = raw.shape[0] * raw.shape[1] * 4  # bytes of the ring slot
    if FMT == 0:
        l3: gl.constexpr = gl.BlockedLayout([1, 1, 16], [2, 8, 2], [4, 1, 1], [2, 1, 0])
        sv = scl._reinterpret(gl.uint8, [BLOCK_N * 2, 16], plain).slice(k0, SUB)
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
def _fetch(i, n_w, sl, ok, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride, w_page_size,
           c_ptr, c_page_stride, c_page_size, W_FMT: gl.constexpr,
           C_FMT: gl.constexpr):  # fmt: skip
    """Start the copies of tile i into ring slot i % NRAW; record the keys' validity."""
    NRAW: gl.constexpr = meta_smem.shape[0]
    rs = i % NRAW
    if DROP != 3:
        if C_FMT == 3 or i < n_w:
            _issue_copy(raw_smem, rs, scl_smem.index(rs), w_ptr, w_page_stride,
                        w_page_size, sl, ok, W_FMT)  # fmt: skip
        else:
            _issue_copy(raw_smem, rs, scl_smem.index(rs), c_ptr, c_page_stride,
                        c_page_size, sl, ok, C_FMT)  # fmt: skip
    meta_smem.index(rs).store(ok.to(gl.int32))
    async_copy.commit_group()


@gluon.jit
def _decode_tile(raw_smem, scl_smem, dst, rs, in_window, W_FMT: gl.constexpr, C_FMT: gl.constexpr,
                 h: gl.constexpr):  # fmt: skip
    """Channels [256 h, 256 h + 256) of ring slot rs's keys, decoded into `dst`."""
    for k0 in gl.static_range(0, BLOCK_N, SUB):
        if C_FMT == 3 or in_window:
            x = _decode_sub(raw_smem.index(rs * 2 + h), scl_smem.index(rs), k0, W_FMT, h)
        else:
            x = _decode_sub(raw_smem.index(rs * 2 + h), scl_smem.index(rs), k0, C_FMT, h)
        dst.slice(k0, SUB).store(x)


@gluon.jit
def _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP: gl.constexpr):
    swa_len = gl.minimum(gl.maximum(gl.load(swa_lens_ptr + t), 0), W)
    n_w = gl.cdiv(swa_len, BLOCK_N)
    if HAS_COMP:
        comp_len = gl.minimum(gl.maximum(gl.load(comp_lens_ptr + t), 0), K)
    else:
        comp_len = swa_len * 0
    # at least one (all-masked) tile, so a consumer may issue its first product unconditionally
    return swa_len, n_w, comp_len, gl.maximum(n_w + gl.cdiv(comp_len, BLOCK_N), 1)


def exchange_ring_bytes() -> int:
    """Shared-memory bytes of SPLIT 2's exchange ring: XRING score tiles (fp32), then XRING
    mbarriers (the layout `_push` / `_recv` address past XBASE)."""
    return XRING.value * (BLOCK_H.value * BLOCK_N.value * 4 + 8)


@gluon.jit
def _row_rank():
    """(row, CTA rank in the row's pair): SPLIT 2 launches two CTAs a row, clusters of two."""
    pid = gl.program_id(0)
    if SPLIT == 2:
        t = (pid // 2).to(gl.int64)
        rank = pid % 2
    else:
        t = pid.to(gl.int64)
        rank = pid * 0
    return t, rank


_CLUSTER_SYNC = gl.constexpr("""{
 barrier.cluster.arrive.release.aligned;
 barrier.cluster.wait.acquire.aligned;
 mov.u32 $0, 0;
}""")


def _thread0_on_barrier(op: str) -> gl.constexpr:
    """PTX: thread 0 (`$1` == 0) runs `op` on the mbarrier at `global_smem + $2` (`a`)."""
    return gl.constexpr(
        "{\n .reg .pred p;\n .reg .u32 a;\n setp.eq.u32 p, $1, 0;\n mov.u32 a, global_smem;\n"
        " add.u32 a, a, $2;\n @p " + op + "\n mov.u32 $0, 0;\n}"
    )


# init with $3 arrivals (all threads fence the inits for the cluster)
_BAR_INIT = _thread0_on_barrier(
    "mbarrier.init.shared::cta.b64 [a], $3;\n fence.mbarrier_init.release.cluster;"
)
# one local arrival expecting a tile of the peer's bytes
_ARM = _thread0_on_barrier("mbarrier.arrive.expect_tx.shared::cta.b64 _, [a], 8192;")
_PUSH_ASYNC = gl.constexpr(
    "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [$4], {$2, $3}, [$6];"
    " mov.u32 $0, 0; mov.u32 $1, 0;"
)
_PEER_BASE = gl.constexpr("""{
 .reg .u32 la, peer;
 mov.u32 peer, %cluster_ctarank;
 xor.b32 peer, peer, 1;
 mov.u32 la, global_smem;
 mapa.shared::cluster.u32 $0, la, peer;
}""")
_PUSH_PAIR = gl.constexpr("st.shared::cluster.v2.b32 [$4], {$2, $3}; mov.u32 $0, 0; mov.u32 $1, 0;")
_ARRIVE_REMOTE = gl.constexpr(
    "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [$1]; mov.u32 $0, 0;"
)
_WAIT_LOCAL = gl.constexpr("""{
 .reg .pred p;
 .reg .u32 a;
 mov.u32 a, global_smem;
 add.u32 a, a, $1;
 XW_${:uid}:
 mbarrier.try_wait.parity.shared::cta.b64 p, [a], $2;
 @!p bra XW_${:uid};
 mov.u32 $0, 0;
}""")
_LOAD_PAIR = gl.constexpr("""{
 .reg .u32 a;
 mov.u32 a, global_smem;
 add.u32 a, a, $2;
 ld.shared.v2.b32 {$0, $1}, [a];
}""")


@gluon.jit
def _cluster_sync():
    """Every thread of both CTAs (each partition calls it once at its start)."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gl.inline_asm_elementwise(_CLUSTER_SYNC, "=r,r", [gl.arange(0, 128, layout=one)], gl.int32,
                              False, 1)  # fmt: skip


@gluon.jit
def _push(part, hk, peer, slot, XBASE: gl.constexpr):
    """Partial scores [BLOCK_H, BLOCK_N] fp32 into the peer's ring slot, then one arrival a
    thread on the slot's barrier there (release: the stores land first)."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    dst = peer + XBASE + slot * (BLOCK_H * BLOCK_N * 4) + hk * 4
    bar = peer + XBASE + XRING * (BLOCK_H * BLOCK_N * 4) + slot * 8
    if XMODE == 1:
        args = [part.to(gl.int32, bitcast=True), dst, bar + hk * 0]
        gl.inline_asm_elementwise(_PUSH_ASYNC, "=r,=r,r,r,r,r,r,r", args, gl.int32, False, 2)
    else:
        gl.inline_asm_elementwise(
            _PUSH_PAIR, "=r,=r,r,r,r,r", [part.to(gl.int32, bitcast=True), dst], gl.int32, False, 2
        )
        gl.inline_asm_elementwise(
            _ARRIVE_REMOTE, "=r,r", [bar + gl.arange(0, 128, layout=one) * 0], gl.int32, False, 1
        )


@gluon.jit
def _recv(hk, slot, phase, XBASE: gl.constexpr):
    """The peer's partial scores of ring slot `slot` (waits for its 128 arrivals)."""
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    bar = XBASE + XRING * (BLOCK_H * BLOCK_N * 4) + slot * 8
    z = gl.arange(0, 128, layout=one) * 0
    gl.inline_asm_elementwise(_WAIT_LOCAL, "=r,r,r", [bar + z, phase + z], gl.int32, False, 1)
    src = XBASE + slot * (BLOCK_H * BLOCK_N * 4) + hk * 4
    v = gl.inline_asm_elementwise(_LOAD_PAIR, "=r,=r,r,r", [src], gl.int32, True, 2)
    if XMODE == 1:  # arm the slot's next phase (tile + XRING) for the peer's bytes
        tid = gl.arange(0, 128, layout=one)
        gl.inline_asm_elementwise(_ARM, "=r,r,r", [tid, bar + z], gl.int32, False, 1)
    return v.to(gl.float32, bitcast=True)


@gluon.jit
def _producer(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
              bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
              XBASE: gl.constexpr):  # fmt: skip
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
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _row_rank()
    if SPLIT == 2:
        _cluster_sync()
    hb = gl.program_id(1)
    row_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    swa_len, n_w, comp_len, total = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)
    swa_row = swa_ptr + t * stride_swa_t
    comp_row = comp_ptr + t * stride_comp_t
    NRAW: gl.constexpr = meta_smem.shape[0]
    sl_n, ok_n = _tile_slots(NRAW, n_w, total, swa_row, swa_len, comp_row, comp_len,
                             w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
    for r in gl.static_range(NRAW):
        sl_r, ok_r = _tile_slots(r, n_w, total, swa_row, swa_len, comp_row, comp_len,
                                 w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
        _fetch(r, n_w, sl_r, ok_r, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
               w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
    # Q as 2 [64, 256] halves in channel order
    ql: gl.constexpr = _dec_layout()
    heads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ql))
    hmask = heads < H
    cq = gl.arange(0, 256, layout=gl.SliceLayout(0, ql))
    for h in gl.static_range(2 if SPLIT != 2 else 1):
        qc = (h + rank) * 256
        qv = gl.load(q_ptr + t * stride_qt + heads[:, None] * stride_qh + qc + cq[None, :],
                     mask=hmask[:, None], other=0.0)  # fmt: skip
        q_smem.index(h).store(qv)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(0), count=1)

    for i in range(0, total):
        # slots of tile i + NRAW were loaded one iteration ago; load those of i + NRAW + 1
        sl_f = sl_n
        ok_f = ok_n
        sl_n, ok_n = _tile_slots(i + NRAW + 1, n_w, total, swa_row, swa_len, comp_row, comp_len,
                                 w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
        ks = i % KS
        rs = i % NRAW
        async_copy.wait_group(NRAW - 1)
        gl.thread_barrier()
        ok_i = meta_smem.index(rs).load(row_l) != 0
        # both consumers finished tile i - KS, the last reader of this stage
        mbarrier.wait(bars.index(1 + KS + ks), ((i // KS) & 1) ^ 1, pred=i >= KS)
        if SPLIT == 2:  # this CTA's channels only, into the one half of its K stage
            if rank == 0:
                _decode_tile(raw_smem, scl_smem, k_smem.index(ks), rs, i < n_w, W_FMT, C_FMT, 0)
            else:
                _decode_tile(raw_smem, scl_smem, k_smem.index(ks), rs, i < n_w, W_FMT, C_FMT, 1)
        elif DROP != 1:
            for h in gl.static_range(2 if DROP != 4 else 1):
                _decode_tile(raw_smem, scl_smem, k_smem.index(ks * 2 + h), rs, i < n_w, W_FMT,
                             C_FMT, h)  # fmt: skip
        kval_smem.index(ks).store(ok_i.to(gl.int32))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(bars.index(1 + ks), count=1)
        _fetch(i + NRAW, n_w, sl_f, ok_f, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
               w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
    async_copy.wait_group(0)


@gluon.jit
def _qk(q_smem, k_smem, js, mma_s: gl.constexpr):
    """Issue S = Q.K^T of K stage js (async; wait on the result)."""
    s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, mma_s)
    for h in gl.static_range(2 if DROP != 4 else 1):
        s = warpgroup_mma(q_smem.index(h), k_smem.index(js * 2 + h).permute((1, 0)), s,
                          is_async=True)  # fmt: skip
    return s


@gluon.jit
def _qk_half(q_smem, k_smem, qi, ki, mma_s: gl.constexpr):
    """Issue one half-D product Q_qi.K_ki^T from zero (async; wait on the result)."""
    s = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, mma_s)
    return warpgroup_mma(q_smem.index(qi), k_smem.index(ki).permute((1, 0)), s, is_async=True)


@gluon.jit
def _ahead_part(q_smem, k_smem, bars, hk, peer, total, m: gl.constexpr, KS: gl.constexpr,
                XBASE: gl.constexpr, mma_s: gl.constexpr):  # fmt: skip
    """Prologue of SPLIT 2: this CTA's partial scores of tile m, pushed when the row has it."""
    has = total > m
    jm = gl.where(has, m % KS, 0)
    mbarrier.wait(bars.index(1 + jm), (m // KS) & 1, pred=has)
    part = warpgroup_mma_wait(0, deps=[_qk_half(q_smem, k_smem, 0, jm, mma_s)])
    if has:
        _push(part, hk, peer, m, XBASE)
    return part


@gluon.jit
def _p_out_and_pv(p16, alpha, acc, p_smem, x_smem, bars, v_stage, j, PF: gl.constexpr,
                  mma_o: gl.constexpr, p_op: gl.constexpr):  # fmt: skip
    """Tile j's P and rescale factor to consumer 1's double buffer, then issue P.V over
    `v_stage`'s channels on the rescaled accumulator (async)."""
    ps = j % 2
    mbarrier.wait(bars.index(PF + 2 + ps), ((j // 2) & 1) ^ 1, pred=j >= 2)
    p_smem.index(ps).store(p16)
    x_smem.index(ps).store(alpha)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(PF + ps), count=1)
    alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, mma_o))
    return warpgroup_mma(gl.convert_layout(p16, p_op), v_stage, acc * alpha_o[:, None],
                         is_async=True)  # fmt: skip


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
               XBASE: gl.constexpr):  # fmt: skip
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
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, rank = _row_rank()
    if SPLIT == 2:
        _cluster_sync()
    hb = gl.program_id(1)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    _swa_len, _n_w, _comp_len, total = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)
    PF: gl.constexpr = 2 + 2 * KS
    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_H], gl.float32, row_s)
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
    mbarrier.wait(bars.index(0), 0)
    if SPLIT == 2:
        # partial scores XAHEAD tiles ahead: tile j + XAHEAD's product and push overlap tile j.
        # Tile j + XAHEAD needs its own K stage while tile j holds one; a slot is written
        # again only after the peer read it (its push of tile m follows its read of tile
        # m - 2 XAHEAD + 1 or later)
        gl.static_assert(KS >= XAHEAD + 1, "SPLIT 2 needs XAHEAD + 1 K stages")
        gl.static_assert(XRING >= 2 * XAHEAD - 1, "SPLIT 2 needs 2 XAHEAD - 1 ring slots")
        hk = (gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_s))[:, None] * BLOCK_N
              + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_s))[None, :])  # fmt: skip
        one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        peer = gl.max(gl.inline_asm_elementwise(_PEER_BASE, "=r,r", [gl.arange(0, 128, layout=one)],
                                                gl.int32, True, 1), axis=0)  # fmt: skip
        mbarrier.wait(bars.index(1), 0)
        p0 = warpgroup_mma_wait(0, deps=[_qk_half(q_smem, k_smem, 0, 0, mma_s)])
        _push(p0, hk, peer, 0, XBASE)
        pn = _ahead_part(q_smem, k_smem, bars, hk, peer, total, 1, KS, XBASE, mma_s)
        if XAHEAD == 3:
            pn2 = _ahead_part(q_smem, k_smem, bars, hk, peer, total, 2, KS, XBASE, mma_s)
        s_cur = p0 + _recv(hk, 0, 0, XBASE)
        for j in range(0, total):
            js = j % KS
            has_a = j + XAHEAD < total
            ja = gl.where(has_a, (j + XAHEAD) % KS, js)
            mbarrier.wait(bars.index(1 + ja), ((j + XAHEAD) // KS) & 1, pred=has_a)
            s_tok = _qk_half(q_smem, k_smem, 0, ja, mma_s)
            p16, alpha, m_i, l_i = _softmax(s_cur, kval_smem.index(js), m_i, l_i, scale, mma_s)
            tok = _p_out_and_pv(p16, alpha, acc, p_smem, x_smem, bars, k_smem.index(js), j, PF,
                                mma_o, p_op)  # fmt: skip
            acc, part = warpgroup_mma_wait(0, deps=[tok, s_tok])
            gl.thread_barrier()
            mbarrier.arrive(bars.index(1 + KS + js), count=1)
            if has_a:
                _push(part, hk, peer, (j + XAHEAD) % XRING, XBASE)
            if j + 1 < total:
                s_cur = pn + _recv(hk, (j + 1) % XRING, ((j + 1) // XRING) & 1, XBASE)
            if XAHEAD == 3:
                pn = pn2
                pn2 = part
            else:
                pn = part
    elif PIPE and DROP != 2:
        mbarrier.wait(bars.index(1), 0)
        if SPLIT == 1:
            t0 = _qk_half(q_smem, k_smem, 0, 0, mma_s)
            t1 = _qk_half(q_smem, k_smem, 1, 1, mma_s)
            s0, s1 = warpgroup_mma_wait(0, deps=[t0, t1])
            s_cur = s0 + s1
        else:
            s_cur = warpgroup_mma_wait(0, deps=[_qk(q_smem, k_smem, 0, mma_s)])
        for j in range(0, total):
            js = j % KS
            # Q.K^T of tile j + 1 runs on the tensor cores during this tile's softmax (the
            # last tile repeats its own stage, result unused)
            has_next = j + 1 < total
            jn = gl.where(has_next, (j + 1) % KS, js)
            mbarrier.wait(bars.index(1 + jn), ((j + 1) // KS) & 1, pred=has_next)
            if SPLIT == 1:
                t0 = _qk_half(q_smem, k_smem, 0, jn * 2, mma_s)
                t1 = _qk_half(q_smem, k_smem, 1, jn * 2 + 1, mma_s)
            else:
                s_tok = _qk(q_smem, k_smem, jn, mma_s)
            p16, alpha, m_i, l_i = _softmax(s_cur, kval_smem.index(js), m_i, l_i, scale, mma_s)
            tok = _p_out_and_pv(p16, alpha, acc, p_smem, x_smem, bars, k_smem.index(js * 2), j,
                                PF, mma_o, p_op)  # fmt: skip
            if SPLIT == 1:
                acc, s0, s1 = warpgroup_mma_wait(0, deps=[tok, t0, t1])
                s_cur = s0 + s1
            else:
                acc, s_cur = warpgroup_mma_wait(0, deps=[tok, s_tok])
            gl.thread_barrier()
            mbarrier.arrive(bars.index(1 + KS + js), count=1)
    else:
        for j in range(0, total):
            js = j % KS
            ps = j % 2
            mbarrier.wait(bars.index(1 + js), (j // KS) & 1)
            if DROP != 2:
                s = warpgroup_mma_wait(0, deps=[_qk(q_smem, k_smem, js, mma_s)])
                p16, alpha, m_i, l_i = _softmax(s, kval_smem.index(js), m_i, l_i, scale, mma_s)
                tok = _p_out_and_pv(p16, alpha, acc, p_smem, x_smem, bars, k_smem.index(js * 2),
                                    j, PF, mma_o, p_op)  # fmt: skip
                acc = warpgroup_mma_wait(0, deps=[tok])
                gl.thread_barrier()
            else:
                mbarrier.wait(bars.index(PF + 2 + ps), ((j // 2) & 1) ^ 1, pred=j >= 2)
                gl.thread_barrier()
                mbarrier.arrive(bars.index(PF + ps), count=1)
            mbarrier.arrive(bars.index(1 + KS + js), count=1)

    # epilogue: sink in the denominator only; denominator and row flag to consumer 1
    has = m_i > -float("inf")
    m_safe_o = gl.where(has, m_i, 0.0)
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_s)
    omask = oheads < H
    sink = gl.load(sink_ptr + oheads, mask=omask, other=0.0)
    denom = gl.where(has, l_i + gl.exp(sink - m_safe_o), 0.0)
    x_smem.index(2).store(denom)
    gl.thread_barrier()
    mbarrier.arrive(bars.index(PF + 4), count=1)
    lse = gl.where(has, m_safe_o + gl.log(gl.where(has, l_i, 1.0)), -float("inf"))
    gl.store(lse_ptr + t * stride_lt + oheads, lse, mask=omask & (rank == 0))
    denom_o = gl.convert_layout(denom, gl.SliceLayout(1, mma_o))
    _store_out(acc, denom_o, out_ptr, t, stride_ot, stride_oh, hb, H, rank, mma_o)
    return (m_i,)


@gluon.jit
def _store_out(acc, denom, out_ptr, t, stride_ot, stride_oh, hb, H, C,
               mma_o: gl.constexpr):  # fmt: skip
    """Channels [256 C, 256 C + 256) of the output rows (C: the half of D, a runtime value in
    a split CTA)."""
    o = gl.where(denom[:, None] > 0.0, acc / denom[:, None], 0.0).to(gl.bfloat16)
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_o))
    oc = gl.arange(0, 256, layout=gl.SliceLayout(0, mma_o))
    ptrs = out_ptr + t * stride_ot + oheads[:, None] * stride_oh + C * 256 + oc[None, :]
    gl.store(ptrs, o, mask=(oheads < H)[:, None])


@gluon.jit
def _consumer1(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
               bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
               XBASE: gl.constexpr):  # fmt: skip
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
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    t, _rank = _row_rank()
    if SPLIT == 2:
        _cluster_sync()
    hb = gl.program_id(1)
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    _swa_len, _n_w, _comp_len, total = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, HAS_COMP)
    PF: gl.constexpr = 2 + 2 * KS
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
    for j in range(0, total):
        js = j % KS
        ps = j % 2
        mbarrier.wait(bars.index(PF + ps), (j // 2) & 1)
        if DROP != 2 and DROP != 4 and SPLIT != 2:
            alpha = x_smem.index(ps).load(row_o)
            tok = warpgroup_mma(p_smem.index(ps), k_smem.index(js * 2 + 1),
                                acc * alpha[:, None], is_async=True)  # fmt: skip
            acc = warpgroup_mma_wait(0, deps=[tok])
        gl.thread_barrier()
        mbarrier.arrive(bars.index(PF + 2 + ps), count=1)
        mbarrier.arrive(bars.index(1 + KS + js), count=1)
    mbarrier.wait(bars.index(PF + 4), 0)
    if SPLIT != 2:  # a split CTA's consumer 0 stores its channels
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
    W_FMT: gl.constexpr, C_FMT: gl.constexpr, XBASE: gl.constexpr = 0,
):  # fmt: skip
    KS: gl.constexpr = _kstages(W_FMT, C_FMT, KSTAGES_MAIN)
    NRAW: gl.constexpr = _kstages(W_FMT, C_FMT, NRAW_MAIN)
    RW: gl.constexpr = _raw_words(W_FMT, C_FMT)
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 256], gl.bfloat16)
    k_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 256], gl.bfloat16)
    p_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], gl.bfloat16)
    NH: gl.constexpr = 2 if SPLIT != 2 else 1  # halves of D a CTA holds
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [NH, BLOCK_H, 256], q_lay)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [NH * KS, BLOCK_N, 256], k_lay)
    raw_smem = gl.allocate_shared_memory(gl.int32, [NRAW * 2, BLOCK_N, RW], plain)
    scl_smem = gl.allocate_shared_memory(gl.uint8, [NRAW, BLOCK_N, 32], plain)
    meta_smem = gl.allocate_shared_memory(gl.int32, [NRAW, BLOCK_N], plain1)
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
    if SPLIT == 2:  # the exchange ring's barriers, past Triton's shared memory
        one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        tid = gl.arange(0, 128, layout=one)
        for r in gl.static_range(XRING):
            off = XBASE + XRING * (BLOCK_H * BLOCK_N * 4) + r * 8
            count = 1 if XMODE == 1 else 128  # the local arm, or each peer thread
            gl.inline_asm_elementwise(_BAR_INIT, "=r,r,r,r", [tid, off + tid * 0, count + tid * 0],
                                      gl.int32, False, 1)  # fmt: skip
            if XMODE == 1:
                gl.inline_asm_elementwise(_ARM, "=r,r,r", [tid, off + tid * 0], gl.int32, False, 1)
    fence_async_shared()
    gl.thread_barrier()
    a = (q_ptr, stride_qt, stride_qh, w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr,
         stride_swa_t, swa_lens_ptr, W, c_ptr, c_page_stride, c_page_size, c_num_slots,
         comp_ptr, stride_comp_t, comp_lens_ptr, K, sink_ptr, scale, out_ptr, stride_ot,
         stride_oh, lse_ptr, stride_lt, H)  # fmt: skip
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
                    XBASE,
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
                    XBASE,
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
                    XBASE,
                ),
            ),
        ],
        [4, 4],
        [C1_REGS, PRODUCER_REGS],
    )
