# mypy: disable-error-code="no-untyped-def"
"""Lab copy: the Hopper Gluon kernel on a persistent grid (issue 11; not installed, not
production). First version (attn4, BENCHMARKS.md "persistent grid"): bitwise the production
kernel's outputs, but slower at every T: an item cost ~12 us beyond its tiles instead of
~17.5, while a tile cost 2.2-2.6 us instead of 1.8-1.9. This version (attn5, "v2" in
BENCHMARKS.md) takes the (item, tile) cursor off the producer's per-tile path (it keeps the
current item's values and recomputes them, with the two divisions and the next length loads,
only in a branch where it crosses into the next item) and moves the Q copy from the producer to
consumer 0 (issued after its last Q.K^T of an item, waited before the first of the next), so
the producer never stalls at an item boundary waiting for Q to be free. Measured on the H200
(bitwise the production kernel's outputs): faster than production at T = 1024 / 4096 (396.5 /
1478.0 us vs 408.8 / 1570.6), slower at T <= 64 (54.8 vs 50.7 us at T = 1): a tile still costs
~2.0-2.1 us against production's ~1.8, an item ~11.5 us beyond its tiles against ~17. A flat
producer loop (commit d768e0e, "v3": fewer live registers, 2 spill instructions per tile
instead of 7) was slower again (415.4 / 1563.5 us). `DROP` switches the stages off for
profiling (with DROP = 0 this file compiles to the SASS that was measured as v2).
`gluon_profile.py --variants persist --bits persist:gluon` launches it (`launch_persist`:
grid min(items, SMs), the item count after `num_splits`).

Contract (as the Triton kernel's): each (row, head block of 64) item is walked by one program
over that row's keys in the fixed order (window ascending, then compressed ascending) in tiles
of BLOCK_N = 32, no split over keys, configuration fixed for (H, D); records are decoded in the
kernel (no gathered bf16 copy); a row's bits do not depend on the other rows.

Persistent grid: min(items, SMs) programs; program p walks the items p, p + G, p + 2G, ... (G
the grid size) in that order, each with the same per-tile arithmetic as a program of its own,
so an item's bits are a function of its row alone. The pipeline runs on across items: the
producer walks a flat sequence of (item, tile) and gathers / decodes the next item's first
tiles while the consumers finish the current one; every barrier phase counts tiles (or items)
from the program's start.

Structure (after FlashMLA's sm90 sparse kernels, written for this layout; three warpgroups,
`gl.warp_specialize`, registers re-balanced to 200 / 168 / 136):
- producer (4 warps): gathers the records (data and scale bytes) of the tiles NRAW ahead with
  16-byte cp.async into a raw ring (the slot indices one tile further ahead; a cursor over
  (item, tile) that keeps the current item's values and crosses into the next item with its
  lengths loaded one item earlier); keys outside the row or with a bad slot are masked
  copies, which zero-fill, so they decode to zeros. It decodes each tile into bf16 K tiles in
  NVMMA-swizzled shared memory (KS stages, two halves of D in channel order) and signals the
  stage's mbarrier.
- consumer 0 (4 warps, a 64x256 fp32 accumulator for channels [0, 256)): copies Q (64 KB;
  shared memory has room for one) by cp.async itself: the first item's at the start, each
  later item's right after its last Q.K^T of the item before; Q.K^T of the whole
  tile (wgmma from shared memory; the product of tile j + 1 is issued before the softmax of
  tile j so the tensor cores run during it; the item's last tile has none), the online
  softmax, P (bf16) and the rescale factor into shared memory for consumer 1 (double
  buffered), P.V over its half with P from registers; it writes lse and the denominators for
  consumer 1.
- consumer 1 (4 warps, channels [256, 512)): rescale, P.V with P from shared memory.
A K stage is free again when both consumers arrived on its mbarrier.

Split mode (constexpr SPLIT, the fast path): the items are (row, head block, slice sp) of S =
num_splits slices; item sp walks the contiguous slice [sp n / S, (sp + 1) n / S) of its row's
n tiles with the same pipeline and stores its unnormalized fp32 accumulator and (max, sum) as
partials for the combine kernel (not batch invariant: the slices follow S, which the launcher
picks from T). In invariant mode the slice is [0, n).

Decode (every product exact in bf16, SPEC section 4): e4m3 bytes go through the hardware
e4m3x2 -> f16x2 conversion, f32, a bf16x2 pack and one bf16x2 multiply by the block scale
(ue8m0 scales are built as bf16 bits, byte 0 = 2^-127 as the bf16 subnormal); NVFP4 nibbles
become e4m3 bytes with a few word-wide bit operations (inline PTX, four bytes at a time):
e2m1 code c (3 magnitude bits) as the e4m3 byte `c << 2` is exactly c * 2^-6, the 2^6 goes
into the scale.

Only D = 512 (the V4.1 geometry) is supported; the Triton kernel serves every other shape.
The production kernel (one program per item, the same bits) is
`ds41_attention.ops.sparse_attention.gluon_kernels`; `scripts/gluon_lab.py` is its lab copy.
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

# The constants and the helpers this copy shares with the production kernel, unchanged (the
# persistent grid changes the producer, the consumers, the fetch and the kernel only).
from ds41_attention.ops.sparse_attention.gluon_kernels import (  # noqa: F401
    BLOCK_H,
    BLOCK_N,
    C1_REGS,
    GLUON_BLOCK_H,
    GLUON_BLOCK_N,
    GLUON_D,
    GLUON_KSTAGES,
    GLUON_MAXNREG,
    GLUON_NUM_WARPS,
    GLUON_RAW_STAGES,
    HALF,
    NRAW,
    PRODUCER_REGS,
    SUB,
    D,
    _dec_layout,
    _decode_sub,
    _issue_copy,
    _kstages,
    _qk,
    _raw_words,
    _softmax,
    _store_out,
    _tile_slots,
    _words,
)

# Profiling switch (timing only; outputs meaningless unless 0): 1 = the producer skips the
# decode, 2 = the consumers skip the products and the softmax (they only wait and release),
# 3 = the producer issues no record copies.
DROP = gl.constexpr(0)


@gluon.jit
def _fetch(i, isw, sl, ok, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride, w_page_size,
           c_ptr, c_page_stride, c_page_size, W_FMT: gl.constexpr,
           C_FMT: gl.constexpr):  # fmt: skip
    """Start the copies of the program's tile i (a window tile when `isw`) into ring slot
    i % NRAW as one cp.async group; record the keys' validity."""
    rs = i % NRAW
    if DROP != 3:
        if C_FMT == 3 or isw:
            _issue_copy(raw_smem, rs, scl_smem.index(rs), w_ptr, w_page_stride, w_page_size,
                        sl, ok, W_FMT)  # fmt: skip
        else:
            _issue_copy(raw_smem, rs, scl_smem.index(rs), c_ptr, c_page_stride, c_page_size,
                        sl, ok, C_FMT)  # fmt: skip
    meta_smem.index(rs).store(ok.to(gl.int32))
    async_copy.commit_group()


@gluon.jit
def _item_row(it, HB, S, SPLIT: gl.constexpr):
    """(row int64, head block, slice) of item `it`; items are ordered (row, head block,
    slice), S slices per (row, head block) in split mode, one otherwise."""
    if SPLIT:
        sp = it % S
        th = it // S
    else:
        sp = it * 0
        th = it
    return (th // HB).to(gl.int64), th % HB, sp


@gluon.jit
def _item_lens(it, num_items, HB, S, swa_lens_ptr, comp_lens_ptr, HAS_COMP: gl.constexpr,
               SPLIT: gl.constexpr):  # fmt: skip
    """The raw (window, compressed) lengths of item `it`'s row; 0 from `num_items` on (past
    the program's last item: its tiles are all masked and nothing is read)."""
    t, _hb, _sp = _item_row(it, HB, S, SPLIT)
    live = it < num_items
    swa = gl.load(swa_lens_ptr + t, mask=live, other=0)
    if HAS_COMP:
        comp = gl.load(comp_lens_ptr + t, mask=live, other=0)
    else:
        comp = swa * 0
    return swa, comp


@gluon.jit
def _item_tiles(sp, swa_raw, comp_raw, W, K, S, HAS_COMP: gl.constexpr, SPLIT: gl.constexpr):
    """(window length, window tiles, compressed length, first tile, tile count, end tile) of
    an item from its row's raw lengths: the row's tiles [0, total), or with SPLIT the
    contiguous slice [sp total / S, (sp + 1) total / S)."""
    swa_len = gl.minimum(gl.maximum(swa_raw, 0), W)
    n_w = gl.cdiv(swa_len, BLOCK_N)
    if HAS_COMP:
        comp_len = gl.minimum(gl.maximum(comp_raw, 0), K)
    else:
        comp_len = swa_len * 0
    total = n_w + gl.cdiv(comp_len, BLOCK_N)
    if SPLIT:
        lo = sp * total // S
        end = (sp + 1) * total // S
    else:
        lo = total * 0
        end = total
    # at least one (all-masked) tile, so a consumer may issue its first product unconditionally
    return swa_len, n_w, comp_len, lo, gl.maximum(end - lo, 1), end


@gluon.jit
def _item_setup(it, raw_swa, raw_comp, G, num_items, HB, S, W, K, swa_ptr, stride_swa_t,
                swa_lens_ptr, comp_ptr, stride_comp_t, comp_lens_ptr, HAS_COMP: gl.constexpr,
                SPLIT: gl.constexpr):  # fmt: skip
    """What the producer's fetch cursor keeps of item `it` (whose row's raw lengths are
    given) while it walks the item's tiles: the row's slot-table pointers, (window length,
    window tiles, compressed length, first tile, tile count, end tile), and the raw lengths
    of item it + G (loaded now, used when the cursor reaches that item)."""
    t, _hb, sp = _item_row(it, HB, S, SPLIT)
    swa_len, n_w, comp_len, lo, n, end = _item_tiles(sp, raw_swa, raw_comp, W, K, S, HAS_COMP,
                                                     SPLIT)  # fmt: skip
    nx_swa, nx_comp = _item_lens(it + G, num_items, HB, S, swa_lens_ptr, comp_lens_ptr, HAS_COMP,
                                 SPLIT)  # fmt: skip
    return (swa_ptr + t * stride_swa_t, comp_ptr + t * stride_comp_t, swa_len, n_w, comp_len,
            lo, n, end, nx_swa, nx_comp)  # fmt: skip


@gluon.jit
def _copy_q(q_smem, q_ptr, t, hb, stride_qt, stride_qh, H):
    """cp.async Q of (row t, head block hb) into the two [64, 256] halves of `q_smem` (16-byte
    pieces; heads >= H zero-fill, as the masked load of the production kernel does), in
    16-head pieces so that few addresses are live at once (consumer 0 issues it while it
    holds its accumulator)."""
    lay: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    r = gl.arange(0, 16, layout=gl.SliceLayout(1, lay))
    c = gl.arange(0, 256, layout=gl.SliceLayout(0, lay))
    for h in gl.static_range(2):
        for r0 in gl.static_range(0, BLOCK_H, 16):
            heads = hb * BLOCK_H + r0 + r
            ptrs = q_ptr + t * stride_qt + heads[:, None] * stride_qh + h * 256 + c[None, :]
            async_copy.async_copy_global_to_shared(q_smem.index(h).slice(r0, 16), ptrs,
                                                   mask=(heads < H)[:, None])  # fmt: skip


@gluon.jit
def _producer(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
              bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
              SPLIT: gl.constexpr):  # fmt: skip
    (
        _q_ptr,
        _stride_qt,
        _stride_qh,
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
        S,
        num_items,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    HB = gl.cdiv(H, BLOCK_H)
    row_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    # The fetch cursor (slot loads and copies, NRAW + 1 tiles ahead of the decode) walks the
    # program's (item, tile) sequence. It keeps the current item's values, so a step is the
    # production kernel's slot load plus one compare; the item's values (two integer
    # divisions by the head-block count, the next lengths) are only computed where it
    # crosses into the next item, in a branch the whole partition takes together.
    sw0, cp0 = _item_lens(pid, num_items, HB, S, swa_lens_ptr, comp_lens_ptr, HAS_COMP, SPLIT)
    (c_swa_row, c_comp_row, c_swa, c_nw, c_comp, c_lo, c_n, c_end, nx_swa,
     nx_comp) = _item_setup(pid, sw0, cp0, G, num_items, HB, S, W, K, swa_ptr, stride_swa_t,
                            swa_lens_ptr, comp_ptr, stride_comp_t, comp_lens_ptr, HAS_COMP,
                            SPLIT)  # fmt: skip
    c_it = pid
    c_j = pid * 0
    sl_n = gl.zeros([BLOCK_N], gl.int64, row_l)
    ok_n = gl.zeros([BLOCK_N], gl.int1, row_l)
    isw_n = pid < 0
    for r in gl.static_range(NRAW + 1):
        # NRAW tiles copied, the slots of one more loaded
        if r > 0:
            _fetch(r - 1, isw_n, sl_n, ok_n, raw_smem, scl_smem, meta_smem, w_ptr,
                   w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT,
                   C_FMT)  # fmt: skip
        g_c = c_lo + c_j
        sl_n, ok_n = _tile_slots(g_c, c_nw, c_end, c_swa_row, c_swa, c_comp_row, c_comp,
                                 w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
        isw_n = g_c < c_nw
        c_j += 1
        if c_j >= c_n:
            c_it += G
            c_j = c_j * 0
            (c_swa_row, c_comp_row, c_swa, c_nw, c_comp, c_lo, c_n, c_end, nx_swa,
             nx_comp) = _item_setup(c_it, nx_swa, nx_comp, G, num_items, HB, S, W, K, swa_ptr,
                                    stride_swa_t, swa_lens_ptr, comp_ptr, stride_comp_t,
                                    comp_lens_ptr, HAS_COMP, SPLIT)  # fmt: skip

    # the decode side walks the same items; their lengths are loaded one item ahead
    d_swa, d_comp = sw0, cp0
    g = pid * 0  # the program's tiles before this item
    for it in range(pid, num_items, G):
        _t, _hb, sp = _item_row(it, HB, S, SPLIT)
        _sw, n_w, _cl, lo, n, _end = _item_tiles(sp, d_swa, d_comp, W, K, S, HAS_COMP, SPLIT)
        w_left = n_w - lo  # the item's tiles j < w_left are window tiles
        d_swa, d_comp = _item_lens(it + G, num_items, HB, S, swa_lens_ptr, comp_lens_ptr,
                                   HAS_COMP, SPLIT)  # fmt: skip
        for j in range(0, n):
            i = g + j
            # slots of tile i + NRAW were loaded one step ago; load those of i + NRAW + 1
            sl_f = sl_n
            ok_f = ok_n
            isw_f = isw_n
            g_c = c_lo + c_j
            sl_n, ok_n = _tile_slots(g_c, c_nw, c_end, c_swa_row, c_swa, c_comp_row, c_comp,
                                     w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
            isw_n = g_c < c_nw
            c_j += 1
            if c_j >= c_n:
                c_it += G
                c_j = c_j * 0
                (c_swa_row, c_comp_row, c_swa, c_nw, c_comp, c_lo, c_n, c_end, nx_swa,
                 nx_comp) = _item_setup(c_it, nx_swa, nx_comp, G, num_items, HB, S, W, K,
                                        swa_ptr, stride_swa_t, swa_lens_ptr, comp_ptr,
                                        stride_comp_t, comp_lens_ptr, HAS_COMP,
                                        SPLIT)  # fmt: skip
            ks = i % KS
            rs = i % NRAW
            async_copy.wait_group(NRAW - 1)
            gl.thread_barrier()
            ok_i = meta_smem.index(rs).load(row_l) != 0
            # both consumers finished tile i - KS, the last reader of this stage
            mbarrier.wait(bars.index(KS + ks), ((i // KS) & 1) ^ 1, pred=i >= KS)
            if DROP != 1:
                for h in gl.static_range(2):
                    for k0 in gl.static_range(0, BLOCK_N, SUB):
                        if C_FMT == 3 or j < w_left:
                            x = _decode_sub(raw_smem.index(rs * 2 + h), scl_smem.index(rs),
                                            k0, W_FMT, h)  # fmt: skip
                        else:
                            x = _decode_sub(raw_smem.index(rs * 2 + h), scl_smem.index(rs),
                                            k0, C_FMT, h)  # fmt: skip
                        k_smem.index(ks * 2 + h).slice(k0, SUB).store(x)
            kval_smem.index(ks).store(ok_i.to(gl.int32))
            fence_async_shared()
            gl.thread_barrier()
            mbarrier.arrive(bars.index(ks), count=1)
            _fetch(i + NRAW, isw_f, sl_f, ok_f, raw_smem, scl_smem, meta_smem, w_ptr,
                   w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT,
                   C_FMT)  # fmt: skip
        g += n
    async_copy.wait_group(0)


@gluon.jit
def _share_p(p16, alpha, gj, p_smem, x_smem, bars, PF: gl.constexpr):
    """P and the rescale factor of the program's tile gj into buffer gj % 2 for consumer 1
    (once it consumed tile gj - 2's)."""
    ps = gj % 2
    mbarrier.wait(bars.index(PF + 2 + ps), ((gj // 2) & 1) ^ 1, pred=gj >= 2)
    p_smem.index(ps).store(p16)
    x_smem.index(ps).store(alpha)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(PF + ps), count=1)


@gluon.jit
def _consumer0(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem, x_smem,
               bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
               SPLIT: gl.constexpr):  # fmt: skip
    """Q.K^T of the whole tile, the online softmax, P (bf16) and the rescale factor to shared
    memory for consumer 1, P.V over channels [0, 256)."""
    (
        q_ptr,
        stride_qt,
        stride_qh,
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
        S,
        num_items,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    PF: gl.constexpr = 2 * KS
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    HB = gl.cdiv(H, BLOCK_H)
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    d_swa, d_comp = _item_lens(pid, num_items, HB, S, swa_lens_ptr, comp_lens_ptr, HAS_COMP,
                               SPLIT)  # fmt: skip
    g = pid * 0  # the program's tiles before this item
    k = pid * 0  # the program's items before this one
    # Q of the first item (the grid has at most one program per item)
    t0, hb0, _sp0 = _item_row(pid, HB, S, SPLIT)
    _copy_q(q_smem, q_ptr, t0, hb0, stride_qt, stride_qh, H)
    async_copy.commit_group()
    for it in range(pid, num_items, G):
        t, hb, sp = _item_row(it, HB, S, SPLIT)
        _sw, _nw, _cl, _lo, n, _end = _item_tiles(sp, d_swa, d_comp, W, K, S, HAS_COMP, SPLIT)
        d_swa, d_comp = _item_lens(it + G, num_items, HB, S, swa_lens_ptr, comp_lens_ptr,
                                   HAS_COMP, SPLIT)  # fmt: skip
        m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)
        l_i = gl.zeros([BLOCK_H], gl.float32, row_s)
        acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
        # this item's Q, copied by this partition (wait_group covers its own copies; the
        # barrier makes every thread's visible before the wgmma reads them)
        async_copy.wait_group(0)
        fence_async_shared()
        gl.thread_barrier()
        if DROP == 2:
            # timing only: wait for each tile and hand over an (unwritten) P, no products
            for j in range(0, n):
                gj = g + j
                ps = gj % 2
                mbarrier.wait(bars.index(gj % KS), (gj // KS) & 1)
                mbarrier.wait(bars.index(PF + 2 + ps), ((gj // 2) & 1) ^ 1, pred=gj >= 2)
                gl.thread_barrier()
                mbarrier.arrive(bars.index(PF + ps), count=1)
                mbarrier.arrive(bars.index(KS + gj % KS), count=1)
            gl.thread_barrier()
            if it + G < num_items:
                t_nx, hb_nx, _sp_nx = _item_row(it + G, HB, S, SPLIT)
                _copy_q(q_smem, q_ptr, t_nx, hb_nx, stride_qt, stride_qh, H)
                async_copy.commit_group()
        else:
            mbarrier.wait(bars.index(g % KS), (g // KS) & 1)
            s_cur = warpgroup_mma_wait(0, deps=[_qk(q_smem, k_smem, g % KS, mma_s)])
            for j in range(0, n - 1):
                gj = g + j
                js = gj % KS
                # Q.K^T of tile j + 1 runs on the tensor cores during this tile's softmax
                jn = (gj + 1) % KS
                mbarrier.wait(bars.index(jn), ((gj + 1) // KS) & 1)
                s_tok = _qk(q_smem, k_smem, jn, mma_s)
                p16, alpha, m_i, l_i = _softmax(s_cur, kval_smem.index(js), m_i, l_i, scale, mma_s)
                _share_p(p16, alpha, gj, p_smem, x_smem, bars, PF)
                alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, mma_o))
                tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2),
                                    acc * alpha_o[:, None], is_async=True)  # fmt: skip
                acc, s_cur = warpgroup_mma_wait(0, deps=[tok, s_tok])
                gl.thread_barrier()
                mbarrier.arrive(bars.index(KS + js), count=1)
            # every Q.K^T of this item is done, so Q is free: copy the next item's now, its
            # latency hidden behind this item's last softmax, P.V and epilogue (one Q buffer
            # fits shared memory). The producer never waits for Q: it runs on into the next item.
            # (every warp past its wait first: a warp's copies overwrite other warps' Q rows)
            gl.thread_barrier()
            if it + G < num_items:
                t_nx, hb_nx, _sp_nx = _item_row(it + G, HB, S, SPLIT)
                _copy_q(q_smem, q_ptr, t_nx, hb_nx, stride_qt, stride_qh, H)
                async_copy.commit_group()
            gl_ = g + n - 1
            js = gl_ % KS
            p16, alpha, m_i, l_i = _softmax(s_cur, kval_smem.index(js), m_i, l_i, scale, mma_s)
            _share_p(p16, alpha, gl_, p_smem, x_smem, bars, PF)
            alpha_o = gl.convert_layout(alpha, gl.SliceLayout(1, mma_o))
            tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2),
                                acc * alpha_o[:, None], is_async=True)  # fmt: skip
            acc = warpgroup_mma_wait(0, deps=[tok])
            gl.thread_barrier()
            mbarrier.arrive(bars.index(KS + js), count=1)

        oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_s)
        omask = oheads < H
        if SPLIT:
            # the slice's partial state for the combine kernel: (m, l) and acc, unnormalized
            pidx = (t * H + oheads) * S + sp
            gl.store(part_ml_ptr + pidx * 2, m_i, mask=omask)
            gl.store(part_ml_ptr + pidx * 2 + 1, l_i, mask=omask)
            _store_part(acc, part_o_ptr, t, H, hb, S, sp, 0, mma_o)
        else:
            # sink in the denominator only; the denominator to consumer 1 once it read the
            # previous item's
            has = m_i > -float("inf")
            m_safe_o = gl.where(has, m_i, 0.0)
            sink = gl.load(sink_ptr + oheads, mask=omask, other=0.0)
            denom = gl.where(has, l_i + gl.exp(sink - m_safe_o), 0.0)
            mbarrier.wait(bars.index(PF + 5), (k - 1) & 1, pred=k > 0)
            x_smem.index(2).store(denom)
            gl.thread_barrier()
            mbarrier.arrive(bars.index(PF + 4), count=1)
            lse = gl.where(has, m_safe_o + gl.log(gl.where(has, l_i, 1.0)), -float("inf"))
            gl.store(lse_ptr + t * stride_lt + oheads, lse, mask=omask)
            _store_out(acc, gl.convert_layout(denom, gl.SliceLayout(1, mma_o)), out_ptr, t,
                       stride_ot, stride_oh, hb, H, 0, mma_o)  # fmt: skip
        g += n
        k += 1
    return (g,)


@gluon.jit
def _store_part(acc, part_o_ptr, t, H, hb, S, sp, C: gl.constexpr, mma_o: gl.constexpr):
    """Channels [256 C, 256 C + 256) of the unnormalized fp32 accumulator into the partials
    (fp32 [T, H, S, D]) of slice sp."""
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, mma_o))
    oc = gl.arange(0, 256, layout=gl.SliceLayout(0, mma_o))
    pidx = (t * H + oheads) * S + sp
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
        S,
        num_items,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    PF: gl.constexpr = 2 * KS
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    HB = gl.cdiv(H, BLOCK_H)
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    d_swa, d_comp = _item_lens(pid, num_items, HB, S, swa_lens_ptr, comp_lens_ptr, HAS_COMP,
                               SPLIT)  # fmt: skip
    g = pid * 0
    k = pid * 0
    for it in range(pid, num_items, G):
        t, hb, sp = _item_row(it, HB, S, SPLIT)
        _sw, _nw, _cl, _lo, n, _end = _item_tiles(sp, d_swa, d_comp, W, K, S, HAS_COMP, SPLIT)
        d_swa, d_comp = _item_lens(it + G, num_items, HB, S, swa_lens_ptr, comp_lens_ptr,
                                   HAS_COMP, SPLIT)  # fmt: skip
        acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
        for j in range(0, n):
            gj = g + j
            js = gj % KS
            ps = gj % 2
            mbarrier.wait(bars.index(PF + ps), (gj // 2) & 1)
            if DROP != 2:
                alpha = x_smem.index(ps).load(row_o)
                tok = warpgroup_mma(p_smem.index(ps), k_smem.index(js * 2 + 1),
                                    acc * alpha[:, None], is_async=True)  # fmt: skip
                acc = warpgroup_mma_wait(0, deps=[tok])
            gl.thread_barrier()
            mbarrier.arrive(bars.index(PF + 2 + ps), count=1)
            mbarrier.arrive(bars.index(KS + js), count=1)
        if SPLIT:
            _store_part(acc, part_o_ptr, t, H, hb, S, sp, 1, mma_o)
        else:
            mbarrier.wait(bars.index(PF + 4), k & 1)
            denom = x_smem.index(2).load(row_o)
            gl.thread_barrier()
            mbarrier.arrive(bars.index(PF + 5), count=1)
            _store_out(acc, denom, out_ptr, t, stride_ot, stride_oh, hb, H, 1, mma_o)
        g += n
        k += 1


@gluon.jit
def _gluon_sparse_attn_kernel(
    q_ptr, stride_qt, stride_qh,  # bf16 q; strides in elements
    w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr, stride_swa_t, swa_lens_ptr, W,
    c_ptr, c_page_stride, c_page_size, c_num_slots, comp_ptr, stride_comp_t, comp_lens_ptr, K,
    sink_ptr, scale,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,  # bf16 out
    H,
    part_o_ptr, part_ml_ptr, num_splits,  # SPLIT: fp32 [T, H, splits, D], [T, H, splits, 2]
    num_items,  # T x head blocks (x num_splits with SPLIT); the grid may be smaller
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
    raw_smem = gl.allocate_shared_memory(gl.int32, [NRAW * 2, BLOCK_N, RW], plain)
    scl_smem = gl.allocate_shared_memory(gl.uint8, [NRAW, BLOCK_N, 32], plain)
    meta_smem = gl.allocate_shared_memory(gl.int32, [NRAW, BLOCK_N], plain1)
    kval_smem = gl.allocate_shared_memory(gl.int32, [KS, BLOCK_N], plain1)
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_H, BLOCK_N], p_lay)
    x_smem = gl.allocate_shared_memory(gl.float32, [3, BLOCK_H], plain1)
    # barriers: s K stage s filled; KS + s stage s released (2 arrivals); PF + b P buffer b
    # filled; PF + 2 + b P buffer b consumed; PF + 4 denominator stored; PF + 5 denominator
    # read (Q needs none: consumer 0 copies it itself)
    PF: gl.constexpr = 2 * KS
    bars = gl.allocate_shared_memory(gl.int64, [PF + 6, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(KS):
        mbarrier.init(bars.index(b), count=1)
    for b in gl.static_range(KS, PF):
        mbarrier.init(bars.index(b), count=2)
    for b in gl.static_range(PF, PF + 6):
        mbarrier.init(bars.index(b), count=1)
    fence_async_shared()
    gl.thread_barrier()
    a = (q_ptr, stride_qt, stride_qh, w_ptr, w_page_stride, w_page_size, w_num_slots, swa_ptr,
         stride_swa_t, swa_lens_ptr, W, c_ptr, c_page_stride, c_page_size, c_num_slots,
         comp_ptr, stride_comp_t, comp_lens_ptr, K, sink_ptr, scale, out_ptr, stride_ot,
         stride_oh, lse_ptr, stride_lt, H, part_o_ptr, part_ml_ptr, num_splits,
         num_items)  # fmt: skip
    # (the argument tuples are written out: a tuple bound to a name loses its constexprs)
    gl.warp_specialize(
        [
            (_consumer0, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem,
                          x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
            (_consumer1, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem,
                          x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
            (_producer, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kval_smem, p_smem,
                         x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
        ],
        [4, 4],
        [C1_REGS, PRODUCER_REGS],
    )  # fmt: skip
