# mypy: disable-error-code="no-untyped-def"
"""Triton kernels of SPEC section 8: sparse MQA attention with sink over paged records.

One program owns one (row, head block[, output-channel tile][, key split]). It walks the
row's key list in a fixed order (window entries ascending, then compressed entries ascending)
in tiles of BLOCK_N entries; each tile is decoded once from its paged records into registers
and reused by every head of the block: S = Q @ K^T and O += P @ K (K = V = the latent).
Without a split the program writes the final row (the batch-invariant kernel); with splits
it writes (acc, m, l) partials that `_combine_kernel` merges (the fast path, whose split
count depends on the batch).

Channels are handled as two halves (even, odd): see `_decode_tile`.
Window and compressed tiles share one loop (one set of tensor-core descriptors: two loops
doubled the registers and spilled); the slots of tile i+1 are loaded while tile i is decoded
and multiplied, which takes one dependent memory round trip off every tile.
"""

import triton
import triton.language as tl

from ds41_cache.ops.codec.triton_jit import e2m1_to_f32, e4m3_to_f32, ue8m0_to_f32


@triton.jit
def _e4m3(b, HW_FP8: tl.constexpr):
    if HW_FP8:
        # Hopper converts e4m3 natively; identical values to the integer decode.
        return b.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        return e4m3_to_f32(b)


@triton.jit
def _store_bf16(ptrs, x, mask, UPCAST: tl.constexpr):
    """Store fp32 `x` rounded to bf16 (nearest-even).

    The interpreter's fp32->bf16 cast truncates, so there the rounding is done on the bits
    and `ptrs` point into an int16 view of the output.
    """
    if UPCAST:
        bits = x.to(tl.int32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        tl.store(ptrs, (bits >> 16).to(tl.int16), mask=mask)
    else:
        tl.store(ptrs, x.to(tl.bfloat16), mask=mask)


@triton.jit
def _bf16_bits(x, UPCAST: tl.constexpr):
    """bf16 bit pattern (int32 in [0, 65535]) of fp32 `x`, rounded to nearest-even.

    The interpreter's fp32->bf16 cast truncates, so there the rounding is done on the bits.
    """
    if UPCAST:
        bits = x.to(tl.int32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        return (bits >> 16) & 0xFFFF
    else:
        return x.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF


@triton.jit
def _split_words(w, UPCAST: tl.constexpr):
    """int32 words holding bf16 pairs -> (low halves, high halves), fp32 or bf16."""
    ev = (w << 16).to(tl.float32, bitcast=True)
    od = (w & -65536).to(tl.float32, bitcast=True)
    if not UPCAST:
        ev = ev.to(tl.bfloat16)
        od = od.to(tl.bfloat16)
    return ev, od


@triton.jit
def _expand_groups(x, BLOCK_N: tl.constexpr, G: tl.constexpr, E: tl.constexpr):
    """[BLOCK_N, G] per-group values -> [BLOCK_N, G * E], each repeated over its E columns.

    Expanding the small scale tensor (instead of shaping the data as [BLOCK_N, G, E]) lets the
    data keep its load layout all the way to the shared-memory store."""
    return tl.reshape(tl.broadcast_to(x[:, :, None], [BLOCK_N, G, E]), [BLOCK_N, G * E])


@triton.jit
def _decode_tile(
    st_ptr,
    st16_ptr,
    st32_ptr,
    page_stride,
    page_size,
    slots,
    valid,
    FMT: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HW_FP8: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Entries of `slots` (int64, >= 0) as (even channels, odd channels), each [BLOCK_N, D/2].

    Splitting by channel parity lets every format decode straight from contiguous loads
    (one byte holds channels 2i, 2i+1 in NVFP4; one 16-bit word in MXFP8; one 32-bit word in
    bf16) without interleaving registers. Rows with `valid` False read nothing.
    fp32 under the interpreter, bf16 on the GPU: every decoded value and every code x scale
    product is exact in bf16 (SPEC section 4).
    """
    page = slots // page_size
    off = slots % page_size
    base = page * page_stride
    # validity travels as an integer: expanding a loop-carried i1 vector trips Triton 3.6's
    # layout inference on the GPU
    vrow = valid.to(tl.int32)
    vmask = vrow[:, None] != 0
    if FMT == 0:
        # [BLOCK_N, D/2] 16-bit words; a ue8m0 scale byte covers 16 words (32 channels)
        c = tl.arange(0, D // 2)
        row16 = tl.multiple_of((base + off * D) // 2, 8)
        w = tl.load(st16_ptr + row16[:, None] + c[None, :], mask=vmask, other=0)
        srow = base + page_size * D + off * (D // 32)
        sb = tl.load(st_ptr + srow[:, None] + tl.arange(0, D // 32)[None, :], mask=vmask, other=127)
        lo = (w & 0xFF).to(tl.uint8)
        hi = ((w >> 8) & 0xFF).to(tl.uint8)
        if UPCAST:
            sc = _expand_groups(ue8m0_to_f32(sb), BLOCK_N, D // 32, 16)
            ev = _e4m3(lo, HW_FP8) * sc
            od = _e4m3(hi, HW_FP8) * sc
        else:
            sc = _expand_groups(ue8m0_to_f32(sb).to(tl.bfloat16), BLOCK_N, D // 32, 16)
            ev = _e4m3(lo, HW_FP8).to(tl.bfloat16) * sc
            od = _e4m3(hi, HW_FP8).to(tl.bfloat16) * sc
    elif FMT == 1:
        # [BLOCK_N, D/2] bytes; an e4m3 scale covers 8 bytes (16 channels)
        c = tl.arange(0, D // 2)
        row = tl.multiple_of(base + off * (D // 2), 16)
        b = tl.load(st_ptr + row[:, None] + c[None, :], mask=vmask, other=0).to(tl.int32)
        srow = base + page_size * (D // 2) + off * (D // 16)
        sb = tl.load(st_ptr + srow[:, None] + tl.arange(0, D // 16)[None, :], mask=vmask, other=0)
        if UPCAST:
            sc = _expand_groups(_e4m3(sb, HW_FP8), BLOCK_N, D // 16, 8)
            ev = e2m1_to_f32(b) * sc
            od = e2m1_to_f32(b >> 4) * sc
        elif HW_FP8:
            # e2m1 code c (3 magnitude bits) as the e4m3 byte c << 2 is exactly c * 2^-6
            # (0.5 lands on the e4m3 subnormal 2^-7): the hardware converts it, the 2^6
            # moves into the scale. Every product is still exact in bf16.
            sc = _expand_groups((_e4m3(sb, HW_FP8) * 64.0).to(tl.bfloat16), BLOCK_N, D // 16, 8)
            lo = (((b & 8) << 4) | ((b & 7) << 2)).to(tl.uint8)
            hi = ((b & 0x80) | ((b & 0x70) >> 2)).to(tl.uint8)
            ev = lo.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16) * sc
            od = hi.to(tl.float8e4nv, bitcast=True).to(tl.bfloat16) * sc
        else:
            sc = _expand_groups(_e4m3(sb, HW_FP8).to(tl.bfloat16), BLOCK_N, D // 16, 8)
            ev = e2m1_to_f32(b).to(tl.bfloat16) * sc
            od = e2m1_to_f32(b >> 4).to(tl.bfloat16) * sc
    else:
        # bf16 records as 32-bit words: channel 2i in the low half, 2i+1 in the high half
        c = tl.arange(0, D // 2)
        row32 = tl.multiple_of((base + off * (2 * D)) // 4, 4)
        w = tl.load(st32_ptr + row32[:, None] + c[None, :], mask=vmask, other=0)
        ev, od = _split_words(w, UPCAST)
    return ev, od


@triton.jit
def _tile_slots(
    i,
    n_w,
    t,
    swa_len,
    comp_len,
    swa_ptr,
    stride_swa_t,
    comp_ptr,
    stride_comp_t,
    w_num_slots,
    c_num_slots,
    HAS_COMP: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Slots (int64, invalid -> 0) and validity of tile `i` of the row's combined key list.

    Tiles [0, n_w) hold window entries, the rest compressed entries; both candidate loads are
    masked so only the list the tile belongs to is read. Tiles past the end are all invalid.
    A slot outside [0, num_slots) of its cache is invalid (skipped), so no input makes the
    kernel read outside the caches, validated or not.
    """
    offs = tl.arange(0, BLOCK_N)
    jw = i * BLOCK_N + offs
    in_w = jw < swa_len
    slots = tl.load(swa_ptr + t * stride_swa_t + jw, mask=in_w, other=-1)
    ok = in_w & (slots < w_num_slots)
    if HAS_COMP:
        jc = (i - n_w) * BLOCK_N + offs
        in_c = (jc >= 0) & (jc < comp_len)
        sc = tl.load(comp_ptr + t * stride_comp_t + jc, mask=in_c, other=-1)
        slots = tl.where(in_c, sc, slots)
        ok = ok | (in_c & (sc < c_num_slots))
    valid = ok & (slots >= 0)
    return tl.maximum(slots, 0).to(tl.int64), valid


@triton.jit
def _tile_kv(
    i,
    n_w,
    slots,
    valid,
    w_ptr,
    w16_ptr,
    w32_ptr,
    w_page_stride,
    w_page_size,
    c_ptr,
    c16_ptr,
    c32_ptr,
    c_page_stride,
    c_page_size,
    W_FMT: tl.constexpr,
    C_FMT: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HW_FP8: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Decoded (even, odd) channels of tile `i` from the window or the compressed cache."""
    if C_FMT == 3:
        ev, od = _decode_tile(
            w_ptr,
            w16_ptr,
            w32_ptr,
            w_page_stride,
            w_page_size,
            slots,
            valid,
            W_FMT,
            D,
            BLOCK_N,
            HW_FP8,
            UPCAST,
        )
    else:
        if i < n_w:
            ev, od = _decode_tile(
                w_ptr,
                w16_ptr,
                w32_ptr,
                w_page_stride,
                w_page_size,
                slots,
                valid,
                W_FMT,
                D,
                BLOCK_N,
                HW_FP8,
                UPCAST,
            )
        else:
            ev, od = _decode_tile(
                c_ptr,
                c16_ptr,
                c32_ptr,
                c_page_stride,
                c_page_size,
                slots,
                valid,
                C_FMT,
                D,
                BLOCK_N,
                HW_FP8,
                UPCAST,
            )
    return ev, od


@triton.jit
def _attend_tile(
    q_ev, q_od, m_i, l_i, acc_ev, acc_od, k_ev, k_od, valid, scale, UPCAST: tl.constexpr
):
    """Online-softmax update of (m, l, acc) with one decoded key tile (channel halves).

    On the GPU P is rounded to bf16 for the tensor-core PV product; under the interpreter
    (UPCAST) everything stays fp32, because the interpreter's bf16 dot is unreliable.
    """
    if UPCAST:
        s = tl.dot(q_od, tl.trans(k_od), tl.dot(q_ev, tl.trans(k_ev)))
    else:
        s = tl.dot(
            q_od, tl.trans(k_od.to(tl.bfloat16)), tl.dot(q_ev, tl.trans(k_ev.to(tl.bfloat16)))
        )
    s = tl.where(valid[None, :], s * scale, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # A head with no valid key yet keeps m = -inf; shift by 0 so no inf - inf appears.
    m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if not UPCAST:
        p = p.to(tl.bfloat16)
        k_ev = k_ev.to(tl.bfloat16)
        k_od = k_od.to(tl.bfloat16)
    acc_ev = tl.dot(p, k_ev, acc_ev * alpha[:, None])
    acc_od = tl.dot(p, k_od, acc_od * alpha[:, None])
    return m_new, l_i, acc_ev, acc_od


@triton.jit
def _step(
    i,
    nslots,
    nvalid,
    q_ev,
    q_od,
    m_i,
    l_i,
    acc_ev,
    acc_od,
    scale,
    n_w,
    t,
    swa_len,
    comp_len,
    swa_ptr,
    stride_swa_t,
    comp_ptr,
    stride_comp_t,
    w_num_slots,
    c_num_slots,
    w_ptr,
    w16_ptr,
    w32_ptr,
    w_page_stride,
    w_page_size,
    c_ptr,
    c16_ptr,
    c32_ptr,
    c_page_stride,
    c_page_size,
    W_FMT: tl.constexpr,
    C_FMT: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HW_FP8: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """One key tile: prefetch the slots of tile i+1, decode tile i, update the softmax."""
    slots, valid = nslots, nvalid
    nslots, nvalid = _tile_slots(
        i + 1,
        n_w,
        t,
        swa_len,
        comp_len,
        swa_ptr,
        stride_swa_t,
        comp_ptr,
        stride_comp_t,
        w_num_slots,
        c_num_slots,
        C_FMT != 3,
        BLOCK_N,
    )
    k_ev, k_od = _tile_kv(
        i,
        n_w,
        slots,
        valid,
        w_ptr,
        w16_ptr,
        w32_ptr,
        w_page_stride,
        w_page_size,
        c_ptr,
        c16_ptr,
        c32_ptr,
        c_page_stride,
        c_page_size,
        W_FMT,
        C_FMT,
        D,
        BLOCK_N,
        HW_FP8,
        UPCAST,
    )
    m_i, l_i, acc_ev, acc_od = _attend_tile(
        q_ev, q_od, m_i, l_i, acc_ev, acc_od, k_ev, k_od, valid, scale, UPCAST
    )
    return nslots, nvalid, m_i, l_i, acc_ev, acc_od


@triton.jit
def _sparse_attn_kernel(
    q_ptr,
    stride_qt,
    stride_qh,  # q as int32 words; strides in bf16 elements (even)
    w_ptr,
    w16_ptr,
    w32_ptr,
    w_page_stride,
    w_page_size,
    w_num_slots,
    swa_ptr,
    stride_swa_t,
    swa_lens_ptr,
    W,
    c_ptr,
    c16_ptr,
    c32_ptr,
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
    part_o_ptr,
    part_ml_ptr,
    num_splits,
    H,
    D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    W_FMT: tl.constexpr,
    C_FMT: tl.constexpr,
    SPLIT: tl.constexpr,
    UPCAST: tl.constexpr,
    HW_FP8: tl.constexpr,
):
    # int64 row index: every offset derived from it (q, out, lse, slot tables, partials) is
    # int64, so T * H * D beyond 2^31 elements cannot overflow
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    sp = tl.program_id(2)
    heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = heads < H
    # even / odd channels of q, the accumulators and the output (see _decode_tile); q and
    # out are addressed as int32 words, each holding one (even, odd) bf16 pair
    cw = tl.arange(0, D // 2)
    hw = heads[:, None] * (stride_qh // 2)
    q_w = tl.load(q_ptr + t * (stride_qt // 2) + hw + cw[None, :], mask=hmask[:, None], other=0)
    q_ev, q_od = _split_words(q_w, UPCAST)

    HAS_COMP: tl.constexpr = C_FMT != 3
    # lengths clamped to the slot tables' widths: unvalidated inputs never read past them
    swa_len = tl.minimum(tl.maximum(tl.load(swa_lens_ptr + t), 0), W)
    n_w = tl.cdiv(swa_len, BLOCK_N)
    if HAS_COMP:
        comp_len = tl.minimum(tl.maximum(tl.load(comp_lens_ptr + t), 0), K)
    else:
        comp_len = swa_len * 0
    total = n_w + tl.cdiv(comp_len, BLOCK_N)
    if SPLIT:
        lo = sp * total // num_splits
        hi = (sp + 1) * total // num_splits
    else:
        lo = total * 0
        hi = total

    m_i = tl.full([BLOCK_H], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc_ev = tl.zeros([BLOCK_H, D // 2], tl.float32)
    acc_od = tl.zeros([BLOCK_H, D // 2], tl.float32)
    nslots, nvalid = _tile_slots(
        lo,
        n_w,
        t,
        swa_len,
        comp_len,
        swa_ptr,
        stride_swa_t,
        comp_ptr,
        stride_comp_t,
        w_num_slots,
        c_num_slots,
        HAS_COMP,
        BLOCK_N,
    )
    # One loop over the row's tiles in the fixed order: window ascending, then compressed.
    # The body is `_step`; the interpreter cannot iterate `range` over loaded scalars, so it
    # runs the same body in a while loop.
    if UPCAST:
        i = lo
        while i < hi:
            nslots, nvalid, m_i, l_i, acc_ev, acc_od = _step(
                i,
                nslots,
                nvalid,
                q_ev,
                q_od,
                m_i,
                l_i,
                acc_ev,
                acc_od,
                scale,
                n_w,
                t,
                swa_len,
                comp_len,
                swa_ptr,
                stride_swa_t,
                comp_ptr,
                stride_comp_t,
                w_num_slots,
                c_num_slots,
                w_ptr,
                w16_ptr,
                w32_ptr,
                w_page_stride,
                w_page_size,
                c_ptr,
                c16_ptr,
                c32_ptr,
                c_page_stride,
                c_page_size,
                W_FMT,
                C_FMT,
                D,
                BLOCK_N,
                HW_FP8,
                UPCAST,
            )
            i += 1
    else:
        for i in range(lo, hi):
            nslots, nvalid, m_i, l_i, acc_ev, acc_od = _step(
                i,
                nslots,
                nvalid,
                q_ev,
                q_od,
                m_i,
                l_i,
                acc_ev,
                acc_od,
                scale,
                n_w,
                t,
                swa_len,
                comp_len,
                swa_ptr,
                stride_swa_t,
                comp_ptr,
                stride_comp_t,
                w_num_slots,
                c_num_slots,
                w_ptr,
                w16_ptr,
                w32_ptr,
                w_page_stride,
                w_page_size,
                c_ptr,
                c16_ptr,
                c32_ptr,
                c_page_stride,
                c_page_size,
                W_FMT,
                C_FMT,
                D,
                BLOCK_N,
                HW_FP8,
                UPCAST,
            )

    if SPLIT:
        pidx = (t * H + heads) * num_splits + sp
        prow = part_o_ptr + pidx[:, None] * D + 2 * cw[None, :]
        tl.store(prow, acc_ev, mask=hmask[:, None])
        tl.store(prow + 1, acc_od, mask=hmask[:, None])
        tl.store(part_ml_ptr + pidx * 2, m_i, mask=hmask)
        tl.store(part_ml_ptr + pidx * 2 + 1, l_i, mask=hmask)
    else:
        has = m_i > -float("inf")
        m_safe = tl.where(has, m_i, 0.0)
        sink = tl.load(sink_ptr + heads, mask=hmask, other=0.0)
        # The sink joins the denominator only; +inf sink gives 0, -inf a plain softmax.
        denom = l_i + tl.exp(sink - m_safe)
        o_ev = tl.where(has[:, None], acc_ev / denom[:, None], 0.0)
        o_od = tl.where(has[:, None], acc_od / denom[:, None], 0.0)
        lse = tl.where(has, m_safe + tl.log(tl.where(has, l_i, 1.0)), -float("inf"))
        words = _bf16_bits(o_ev, UPCAST) | (_bf16_bits(o_od, UPCAST) << 16)
        o_rows = out_ptr + t * (stride_ot // 2) + heads[:, None] * (stride_oh // 2)
        tl.store(o_rows + cw[None, :], words, mask=hmask[:, None])
        tl.store(lse_ptr + t * stride_lt + heads, lse, mask=hmask)


@triton.jit
def _combine_kernel(
    part_o_ptr,
    part_ml_ptr,
    num_splits,
    sink_ptr,
    out_ptr,
    stride_ot,
    stride_oh,
    lse_ptr,
    stride_lt,
    H,
    D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Merge the split partials (acc, m, l) of one (row, head) and apply the sink."""
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    sp = tl.arange(0, BLOCK_S)
    smask = sp < num_splits
    cols = tl.arange(0, D)
    pidx = (t * H + h) * num_splits + sp
    m = tl.load(part_ml_ptr + pidx * 2, mask=smask, other=-float("inf"))
    l = tl.load(part_ml_ptr + pidx * 2 + 1, mask=smask, other=0.0)
    mx = tl.max(m, 0)
    has = mx > -float("inf")
    m_safe = tl.where(has, mx, 0.0)
    w = tl.exp(m - m_safe)
    l_tot = tl.sum(w * l, 0)
    parts = tl.load(part_o_ptr + pidx[:, None] * D + cols[None, :], mask=smask[:, None], other=0.0)
    acc = tl.sum(w[:, None] * parts, 0)
    sink = tl.load(sink_ptr + h)
    denom = l_tot + tl.exp(sink - m_safe)
    o = tl.where(has, acc / denom, 0.0)
    lse = tl.where(has, m_safe + tl.log(tl.where(has, l_tot, 1.0)), -float("inf"))
    _store_bf16(out_ptr + t * stride_ot + h * stride_oh + cols, o, cols < D, UPCAST)
    tl.store(lse_ptr + t * stride_lt + h, lse)
