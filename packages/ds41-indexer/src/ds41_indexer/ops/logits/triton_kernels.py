# mypy: allow-untyped-defs, allow-incomplete-defs, allow-untyped-calls
"""Paged indexer logits in Triton (SPEC section 6).

One program scores one row against `TILES` tiles of `BLOCK_N` consecutive entries: it resolves
the entries' pages through the row's block table, runs the keys x queries product on the tensor
cores (keys as the M side, fp32 accumulation), applies ReLU, scales by the head weights and
reduces over heads in the fixed tree order of one tile shape; with `gmax` it also writes each
GROUP of entries' largest order-preserving key (the top-k's first pass).

MXFP4 keys (the fp16 path). A key's block b holds e2m1 codes times 2^(s_b - 127) (ue8m0 byte
s_b); let m = max_b s_b. A nibble placed as the e4m3 byte `sign << 7 | mag << 2` is exactly its
e2m1 value times 2^-6; the hardware converts e4m3 pairs to fp16 and one packed multiply by
2^(s_b - m + 15) gives fp16 keys k' = k * 2^(136 - m), exact while s_b >= m - 32 (subnormal fp16
down to 2^-24). The queries are split the same way, even channels (low nibbles) and odd ones
(high nibbles), in the operand order of the keys' bytes (`_key_byte`: the byte pairs of a block
permuted so that a Hopper operand thread's four bytes are adjacent), and each head h is scaled
by a power of two 2^-e_h that puts its largest |q| in [2^14, 2^15), exact in fp16 when no
query element is more than ~2^32 below its head's largest. The products `k' . q'` (two fp16
tensor-core dots of Di/2 channels, fp32 accumulation) are the true ones times
2^(136 - m - e_h): ReLU commutes with that power of two, the head weights take 2^e_h
(w' = w * 2^e_h) and the key's factor 2^(m - 136) multiplies the head sum, so the result is
the fp32 evaluation of the same sum (a power-of-two scale commutes with rounding in the normal
range). A program whose queries or keys fall outside these ranges (checked before its tiles:
largest scale byte in [10, 250], every byte >= largest - 32) scores its tiles on the general
path: keys decoded exactly through fp32 to bf16, bf16 products with the unscaled queries. fp8
keys always take the general path (e4m3 times the power-of-two row scale, exact in bf16).

Memory: a tile inside one page (the page size a multiple of BLOCK_N) needs one block-table entry;
the program loads its tiles' entries once, so no load in the tile loop feeds an address and the
loop pipeline (num_stages) keeps the key bytes of the next tiles in flight (multi-buffered in
shared memory) while a tile is decoded and multiplied.

There is one tile shape (`TILE`), on every device and for every row count, and the path choice
is per program of TILES * BLOCK_N entries at fixed entry offsets, so a row's logits are the same
whether it runs alone, in a large prefill or as a decode row. Under the interpreter (`UPCAST`)
the same algebra runs in fp32 (integer decode, IEEE fp32 dots): the CPU tests prove the tiling,
masking, paging, decode and scaling, not the GPU's bits.

With `validate=False` the wrapper checks no values; the kernel still reads only inside the
tensors it is given: a request id outside the block table, a table column past its width and a
page outside the cache read nothing (those keys count as zero).
"""

import torch
import triton
import triton.language as tl

from ds41_cache.backend import interpreter_active
from ds41_cache.ops.codec.triton_jit import e2m1_to_f32, e4m3_to_f32, ue8m0_to_f32
from ds41_cache.ops.launch import dependent_launch, enter_dependent
from ds41_cache.paged import PagedCache

from ..topk.triton_kernels import GROUP, _score_to_key

FMT_MXFP4 = 0
FMT_FP8 = 1
BF16_MAX = tl.constexpr(3.3895313892515355e38)


@triton.jit
def _decode_keys(
    cache_ptr,
    row_at,
    scale_at,
    valid,
    DI: tl.constexpr,
    FMT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Index-key rows of one tile -> [BLOCK_N, DI], exact: fp32 when UPCAST (interpreter), else
    bf16 (the tensor-core operand). Masked rows load zero bytes and decode to zeros."""
    m2 = valid[:, None]
    if FMT == 0:
        # Packed e2m1: byte i holds element 2i (low nibble) and 2i+1 (high nibble).
        half = tl.arange(0, DI // 2)
        byte = tl.load(cache_ptr + row_at[:, None] + half[None, :], mask=m2, other=0).to(tl.int32)
        blk = tl.arange(0, DI // 32)
        sc = tl.load(cache_ptr + scale_at[:, None] + blk[None, :], mask=m2, other=127)
        vals = tl.reshape(tl.join(e2m1_to_f32(byte), e2m1_to_f32(byte >> 4)), (BLOCK_N, DI))
        scale = ue8m0_to_f32(sc)[:, :, None]
        k = tl.reshape(tl.reshape(vals, (BLOCK_N, DI // 32, 32)) * scale, (BLOCK_N, DI))
    else:
        d = tl.arange(0, DI)
        byte = tl.load(cache_ptr + row_at[:, None] + d[None, :], mask=m2, other=0)
        b0 = tl.load(cache_ptr + scale_at, mask=valid, other=0).to(tl.int32)
        b1 = tl.load(cache_ptr + scale_at + 1, mask=valid, other=0).to(tl.int32)
        b2 = tl.load(cache_ptr + scale_at + 2, mask=valid, other=0).to(tl.int32)
        b3 = tl.load(cache_ptr + scale_at + 3, mask=valid, other=0).to(tl.int32)
        scale = (b0 | (b1 << 8) | (b2 << 16) | (b3 << 24)).to(tl.float32, bitcast=True)
        # The row scale is a power of two (SPEC section 4): e4m3 times it is exact in bf16.
        k = e4m3_to_f32(byte) * scale[:, None]
    if not UPCAST:
        k = k.to(tl.bfloat16)
    return k


@triton.jit
def _e2m1_pair_f16(raw, fac):
    """Packed e2m1 byte pairs int16 and an fp16x2 factor (as int32, same shape) -> (even, odd)
    int32 fp16x2 words: the low nibbles of the element's two bytes times the factor, then the
    high nibbles.

    A nibble (sign, 3 magnitude bits) placed as the e4m3 byte `sign << 7 | mag << 2` is exactly
    its e2m1 value times 2^-6 (code 1 lands on the e4m3 subnormal 2^-7); the hardware converts
    e4m3 pairs to fp16 and one packed multiply applies the factor (exact: see the kernel). Two
    elements share one 32-bit register, so each bit operation places four nibbles."""
    return tl.inline_asm_elementwise(
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
        dtype=(tl.int32, tl.int32),
        is_pure=True,
        pack=2,
    )


@triton.jit
def _f16x2_halves(w):
    """int32 fp16x2 words -> (low half, high half) fp16 (register moves only)."""
    return tl.inline_asm_elementwise(
        "mov.b32 {$0, $1}, $2;",
        "=h,=h,r",
        [w],
        dtype=(tl.float16, tl.float16),
        is_pure=True,
        pack=1,
    )


@triton.jit
def _e2m1_pair_f32(raw, fac):
    """Interpreter twin of `_e2m1_pair_f16`: the same e4m3 placement decoded with integer ops
    to fp32, times the factor (fp32)."""
    b = raw.to(tl.int32)
    lo = ((b & 8) << 4) | ((b & 7) << 2)
    hi = (b & 0x80) | ((b & 0x70) >> 2)
    return e4m3_to_f32(lo) * fac, e4m3_to_f32(hi) * fac


@triton.jit
def _pair_at(pair):
    """Memory pair (2 bytes) of a block that holds operand pair `pair` (0..7): the pairs a
    tensor-core operand thread takes, p and p + 4 (K 2p, 2p + 1, 2p + 8, 2p + 9 of a k16 step),
    are adjacent bytes 4p..4p + 3, so the Gluon kernel reads a tile with `ldmatrix`."""
    return 2 * (pair % 4) + pair // 4


@triton.jit
def _key_byte(k):
    """Key byte (its low nibble: the even channel, high nibble: the odd) at operand column k of
    the fp16 path's two dots: blocks of 16 bytes in order, pairs permuted by `_pair_at`."""
    return (k // 16) * 16 + 2 * _pair_at((k // 2) % 8) + k % 2


@triton.jit
def _pow2_bits(e):
    """2**e as fp32 for an int32 tensor e in [-126, 127] (exponent bits)."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _fold_queries(q_ptr, w_ptr, t, q_stride_t, q_stride_h, w_stride_t, HI, HI_PAD, DI, UPCAST):
    """The row's queries as two [DI/2, HI_PAD] operands (even, odd channels), each head scaled
    by 2^-e_h so its largest |q| lies in [2^14, 2^15), fp16 on the GPU; the head weights times
    2^e_h (f32 [HI_PAD]); and whether every scaled query is exact in fp16 with e_h in range."""
    h = tl.arange(0, HI_PAD)
    hm = h < HI
    # operand column k holds the even (qe) and odd (qo) channel of key byte _key_byte(k)
    at = q_ptr + t * q_stride_t + h[:, None] * q_stride_h + 2 * _key_byte(tl.arange(0, DI // 2))
    qe = tl.load(at, mask=hm[:, None], other=0.0).to(tl.float32)
    qo = tl.load(at + 1, mask=hm[:, None], other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(qe), axis=1), tl.max(tl.abs(qo), axis=1))
    ex = ((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    ex = tl.where(amax == 0.0, 14, ex)
    in_range = (ex >= -100) & (ex <= 100)
    eh = tl.where(in_range, ex - 14, 0)
    qs = _pow2_bits(-eh)[:, None]
    qe = qe * qs
    qo = qo * qs
    qe16 = qe.to(tl.float16)
    qo16 = qo.to(tl.float16)
    exact = (qe16.to(tl.float32) == qe) & (qo16.to(tl.float32) == qo)
    bad = tl.sum((~exact).to(tl.int32), axis=1) + (~in_range).to(tl.int32)
    q_ok = tl.sum(bad, axis=0) == 0
    w = tl.load(w_ptr + t * w_stride_t + h, mask=hm, other=0.0)
    wf = w * _pow2_bits(eh)
    if UPCAST:
        return tl.trans(qe), tl.trans(qo), wf, q_ok
    return tl.trans(qe16), tl.trans(qo16), wf, q_ok


@triton.jit
def _load_mxfp4_tile(cache_ptr, row_at, scale_at, readable, DI: tl.constexpr):
    """Raw MXFP4 keys of one tile: (packed byte pairs int16 [BLOCK_N, DI/32, 8], operand pair
    p of a block read from its memory pair `_pair_at(p)`; ue8m0 scale bytes uint8 [BLOCK_N,
    DI/32]); rows not readable load zeros (scale byte 127).

    The data is read in 2-byte elements: a thread's tensor-core operand holds consecutive pairs
    of channels (two bytes of one key), so an element is one of its operand's halves and no
    byte has to be moved between registers after the shared-memory load."""
    NB: tl.constexpr = DI // 32
    blk = tl.arange(0, NB)
    pair = tl.arange(0, 8)
    # row_at is even: rows are DI/2 bytes apart inside a page whose stride is a multiple of 16
    base = cache_ptr.to(tl.pointer_type(tl.int16))
    raw = tl.load(
        base + (row_at // 2)[:, None, None] + (blk * 8)[None, :, None] + pair[None, None, :],
        mask=readable[:, None, None],
        other=0,
    )
    # contiguous loads, then operand pair p = 4b + a takes memory pair 2a + b (`_pair_at`)
    n: tl.constexpr = raw.shape[0]
    raw = tl.reshape(tl.permute(tl.reshape(raw, (n, NB, 4, 2)), (0, 1, 3, 2)), (n, NB, 8))
    sc = tl.load(cache_ptr + scale_at[:, None] + blk[None, :], mask=readable[:, None], other=127)
    return raw, sc


@triton.jit
def _mxfp4_tile_fast(
    raw, sc, qlo, qhi, wf, DI: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST: tl.constexpr
):
    """Logits (before masking) of one tile of MXFP4 keys (`_load_mxfp4_tile`) on the fp16 path
    -> f32 [BLOCK_N] (the caller has checked the scales' range); see the module docstring."""
    NB: tl.constexpr = DI // 32
    sc = sc.to(tl.int32)
    mk = tl.max(sc, axis=1)
    d = sc - mk[:, None]
    # factor 2^(d + 15) in fp16 (d in [-32, 0]: normal down to 2^-14, then subnormal)
    e = tl.maximum(d + 15, -24)
    fbits = tl.where(e >= -14, (e + 15) << 10, 1 << (e + 24))
    if UPCAST:
        fac = tl.broadcast_to(_pow2_bits(e)[:, :, None], (BLOCK_N, NB, 8))
        b = raw.to(tl.int32) & 0xFFFF
        lo0, hi0 = _e2m1_pair_f32(b & 0xFF, fac)
        lo1, hi1 = _e2m1_pair_f32(b >> 8, fac)
        lo = tl.reshape(tl.join(lo0, lo1), (BLOCK_N, DI // 2))
        hi = tl.reshape(tl.join(hi0, hi1), (BLOCK_N, DI // 2))
        s = tl.dot(lo, qlo, input_precision="ieee")
        s = tl.dot(hi, qhi, s, input_precision="ieee")
    else:
        # the factor in both halves of an fp16x2 word
        fac = tl.broadcast_to((fbits | (fbits << 16))[:, :, None], (BLOCK_N, NB, 8))
        lw, hw = _e2m1_pair_f16(raw, fac)
        lo = tl.reshape(tl.join(*_f16x2_halves(lw)), (BLOCK_N, DI // 2))
        hi = tl.reshape(tl.join(*_f16x2_halves(hw)), (BLOCK_N, DI // 2))
        s = tl.dot(lo, qlo)
        s = tl.dot(hi, qhi, s)
    logit = tl.sum(tl.maximum(s, 0.0) * wf[None, :], axis=1)
    # the keys' common factor 2^(mk - 136): exact (a power of two on a normal fp32)
    return logit * ((tl.minimum(tl.maximum(mk, 10), 250) - 9) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _tile_cols(entry_base, c0, n_cols, n_vis, BLOCK_N: tl.constexpr):
    """Columns c0 + [0, BLOCK_N) -> (cols, valid: the entry is scored)."""
    cols = c0 + tl.arange(0, BLOCK_N)
    return cols, (cols < n_cols) & (entry_base + cols < n_vis)


@triton.jit
def _tile_pages(
    bt_ptr,
    r_at,
    entry_base,
    c0,
    n_cols,
    n_vis,
    bt_cols,
    PAGE_SIZE: tl.constexpr,
    IN_PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Block-table entries of the tile at column c0: one int32 page when the tile lies inside
    one page (IN_PAGE: PAGE_SIZE and entry_base multiples of BLOCK_N), else int32 [BLOCK_N];
    -1 where nothing is read."""
    if IN_PAGE:
        col = (entry_base + c0) // PAGE_SIZE
        live = (col < bt_cols) & (entry_base + c0 < n_vis) & (c0 < n_cols)
        page = tl.load(bt_ptr + r_at + col, mask=live, other=-1)
    else:
        cols, valid = _tile_cols(entry_base, c0, n_cols, n_vis, BLOCK_N)
        col = (entry_base + cols) // PAGE_SIZE
        page = tl.load(bt_ptr + r_at + col, mask=valid & (col < bt_cols), other=-1)
    return page


@triton.jit
def _tile_addr(
    page,
    entry_base,
    c0,
    n_cols,
    n_vis,
    num_pages,
    page_stride,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """(readable: the key bytes may be read, row_at / scale_at: int64 byte offsets of the
    tile's data rows and scale rows). Pages outside the cache are never read (zero keys)."""
    cols, valid = _tile_cols(entry_base, c0, n_cols, n_vis, BLOCK_N)
    entries = entry_base + cols
    ok = (page >= 0) & (page < num_pages)
    readable = valid & ok
    off = entries % PAGE_SIZE
    page_base = tl.where(ok, page, 0).to(tl.int64) * page_stride
    row_at = page_base + off * DATA_BYTES
    scale_at = page_base + PAGE_SIZE * DATA_BYTES + off * SCALE_BYTES
    return readable, row_at, scale_at


@triton.jit
def _tile_rows(
    bt_ptr,
    r_at,
    entry_base,
    c0,
    n_cols,
    n_vis,
    bt_cols,
    num_pages,
    page_stride,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    IN_PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Tile at column c0 of one row -> (cols, valid, readable, row_at, scale_at)."""
    page = _tile_pages(
        bt_ptr, r_at, entry_base, c0, n_cols, n_vis, bt_cols, PAGE_SIZE, IN_PAGE, BLOCK_N
    )
    readable, row_at, scale_at = _tile_addr(
        page,
        entry_base,
        c0,
        n_cols,
        n_vis,
        num_pages,
        page_stride,
        DATA_BYTES,
        SCALE_BYTES,
        PAGE_SIZE,
        BLOCK_N,
    )
    cols, valid = _tile_cols(entry_base, c0, n_cols, n_vis, BLOCK_N)
    return cols, valid, readable, row_at, scale_at


@triton.jit
def _span_in_fast_range(
    cache_ptr,
    bt_ptr,
    r_at,
    entry_base,
    c_first,
    n_cols,
    n_vis,
    bt_cols,
    num_pages,
    page_stride,
    DI: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
    TILES_P2: tl.constexpr,
):
    """Whether every readable key of the program's TILES tiles has its ue8m0 scale bytes in the
    fp16 path's range: largest byte mk in [10, 250], every byte >= mk - 32. One gather of the
    span's pages, one of its scale rows (no loop: two dependent loads in all)."""
    NB: tl.constexpr = DI // 32
    span = tl.arange(0, TILES_P2 * BLOCK_N)
    cols = c_first + span
    entries = entry_base + cols
    valid = (span < TILES * BLOCK_N) & (cols < n_cols) & (entries < n_vis)
    col = entries // PAGE_SIZE
    page = tl.load(bt_ptr + r_at + col, mask=valid & (col < bt_cols), other=-1)
    readable = valid & (page >= 0) & (page < num_pages)
    off = entries % PAGE_SIZE
    scale_at = page.to(tl.int64) * page_stride + PAGE_SIZE * DATA_BYTES + off * SCALE_BYTES
    blk = tl.arange(0, NB)
    sc = tl.load(cache_ptr + scale_at[:, None] + blk[None, :], mask=readable[:, None], other=127)
    sc = sc.to(tl.int32)
    mk = tl.max(sc, axis=1)
    bad = (tl.min(sc, axis=1) < mk - 32) | (mk < 10) | (mk > 250)
    return tl.max(bad.to(tl.int32), axis=0) == 0


@triton.jit
def _paged_logits_kernel(
    q_ptr,
    w_ptr,
    cache_ptr,
    bt_ptr,
    req_ptr,
    pos_ptr,
    cand_ptr,
    out_ptr,
    gmax_ptr,
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
    HI: tl.constexpr,
    HI_PAD: tl.constexpr,
    DI: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    IN_PAGE: tl.constexpr,
    FMT: tl.constexpr,
    HAS_CAND: tl.constexpr,
    OUT_BF16: tl.constexpr,
    HAS_GMAX: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
    TILES_P2: tl.constexpr,
    STAGES: tl.constexpr,
    GDC: tl.constexpr = False,
):
    enter_dependent(GDC)
    # program (t, j): row t, span j
    _paged_logits_span(
        tl.program_id(1), q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr,
        gmax_ptr, ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t, n_req,
        bt_cols, bt_stride_r, num_pages, page_stride, cand_stride_t, cand_cols, out_stride_t,
        gmax_stride_t, HI, HI_PAD, DI, DATA_BYTES, SCALE_BYTES, PAGE_SIZE, IN_PAGE, FMT,
        HAS_CAND, OUT_BF16, HAS_GMAX, UPCAST, BLOCK_N, TILES, TILES_P2, STAGES,
    )  # fmt: skip


@triton.jit
def _paged_logits_span(
    j,
    q_ptr,
    w_ptr,
    cache_ptr,
    bt_ptr,
    req_ptr,
    pos_ptr,
    cand_ptr,
    out_ptr,
    gmax_ptr,
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
    HI: tl.constexpr,
    HI_PAD: tl.constexpr,
    DI: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    IN_PAGE: tl.constexpr,
    FMT: tl.constexpr,
    HAS_CAND: tl.constexpr,
    OUT_BF16: tl.constexpr,
    HAS_GMAX: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
    TILES_P2: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Program (t, j) of the kernel's contract (module doc): row t, span j."""
    t = tl.program_id(0).to(tl.int64)
    r = tl.load(req_ptr + t)
    p = tl.load(pos_ptr + t)
    # A request id outside the table is a padding row (validate=False reads nothing for it).
    live = (r >= 0) & (r < n_req)
    n_vis = tl.where(live, (p + 1) // ratio, 0)
    r_at = tl.where(live, r, 0).to(tl.int64) * bt_stride_r
    out_row = out_ptr + t * out_stride_t
    gmax_row = gmax_ptr + t * gmax_stride_t
    c_first = j * TILES * BLOCK_N
    # Programs past the row's visible entries (a wide block table) only write -inf.
    live_span = entry_base + c_first < n_vis
    if FMT == 0:
        # The row's folded queries and head weights, prepared once for TILES key tiles; the
        # fp16 path runs when the queries and every key's scales are in its range.
        qlo, qhi, wf, q_ok = _fold_queries(
            q_ptr, w_ptr, t, q_stride_t, q_stride_h, w_stride_t, HI, HI_PAD, DI, UPCAST
        )
        in_range = _span_in_fast_range(
            cache_ptr,
            bt_ptr,
            r_at,
            entry_base,
            c_first,
            n_cols,
            n_vis,
            bt_cols,
            num_pages,
            page_stride,
            DI,
            DATA_BYTES,
            SCALE_BYTES,
            PAGE_SIZE,
            BLOCK_N,
            TILES,
            TILES_P2,
        )
        fast = live_span & q_ok & in_range
        if IN_PAGE:
            tix = tl.arange(0, TILES_P2)
            pcol = (entry_base + c_first) // PAGE_SIZE + tix * BLOCK_N // PAGE_SIZE
            pages = tl.load(
                bt_ptr + r_at + pcol,
                mask=(tix < TILES)
                & (pcol < bt_cols)
                & (c_first + tix * BLOCK_N < n_cols)
                & (entry_base + c_first + tix * BLOCK_N < n_vis),
                other=-1,
            )
        if fast:
            for i in tl.range(TILES, num_stages=STAGES):
                c0 = c_first + i * BLOCK_N
                if IN_PAGE:
                    # the page of tile i from the program's pages, loaded once: no load in the loop
                    # feeds an address, so the key loads of later tiles are issued ahead
                    page = tl.sum(tl.where(tl.arange(0, TILES_P2) == i, pages, 0), axis=0)
                else:
                    page = _tile_pages(
                        bt_ptr,
                        r_at,
                        entry_base,
                        c0,
                        n_cols,
                        n_vis,
                        bt_cols,
                        PAGE_SIZE,
                        IN_PAGE,
                        BLOCK_N,
                    )
                readable, row_at, scale_at = _tile_addr(
                    page,
                    entry_base,
                    c0,
                    n_cols,
                    n_vis,
                    num_pages,
                    page_stride,
                    DATA_BYTES,
                    SCALE_BYTES,
                    PAGE_SIZE,
                    BLOCK_N,
                )
                raw, sc = _load_mxfp4_tile(cache_ptr, row_at, scale_at, readable, DI)
                logit = _mxfp4_tile_fast(raw, sc, qlo, qhi, wf, DI, BLOCK_N, UPCAST)
                cols, valid = _tile_cols(entry_base, c0, n_cols, n_vis, BLOCK_N)
                _finish_tile(
                    out_row,
                    gmax_row,
                    cand_ptr,
                    t,
                    cand_stride_t,
                    cand_cols,
                    entry_base,
                    c0,
                    cols,
                    logit,
                    valid,
                    n_cols,
                    HAS_CAND,
                    OUT_BF16,
                    HAS_GMAX,
                    BLOCK_N,
                )
        else:
            _general_tiles(
                q_ptr,
                w_ptr,
                cache_ptr,
                bt_ptr,
                cand_ptr,
                out_row,
                gmax_row,
                t,
                live_span,
                r_at,
                entry_base,
                c_first,
                n_cols,
                n_vis,
                q_stride_t,
                q_stride_h,
                w_stride_t,
                bt_cols,
                num_pages,
                page_stride,
                cand_stride_t,
                cand_cols,
                HI,
                HI_PAD,
                DI,
                DATA_BYTES,
                SCALE_BYTES,
                PAGE_SIZE,
                IN_PAGE,
                FMT,
                HAS_CAND,
                OUT_BF16,
                HAS_GMAX,
                UPCAST,
                BLOCK_N,
                TILES,
            )
    else:
        _general_tiles(
            q_ptr,
            w_ptr,
            cache_ptr,
            bt_ptr,
            cand_ptr,
            out_row,
            gmax_row,
            t,
            live_span,
            r_at,
            entry_base,
            c_first,
            n_cols,
            n_vis,
            q_stride_t,
            q_stride_h,
            w_stride_t,
            bt_cols,
            num_pages,
            page_stride,
            cand_stride_t,
            cand_cols,
            HI,
            HI_PAD,
            DI,
            DATA_BYTES,
            SCALE_BYTES,
            PAGE_SIZE,
            IN_PAGE,
            FMT,
            HAS_CAND,
            OUT_BF16,
            HAS_GMAX,
            UPCAST,
            BLOCK_N,
            TILES,
        )


@triton.jit
def _general_tiles(
    q_ptr,
    w_ptr,
    cache_ptr,
    bt_ptr,
    cand_ptr,
    out_row,
    gmax_row,
    t,
    live_span,
    r_at,
    entry_base,
    c_first,
    n_cols,
    n_vis,
    q_stride_t,
    q_stride_h,
    w_stride_t,
    bt_cols,
    num_pages,
    page_stride,
    cand_stride_t,
    cand_cols,
    HI: tl.constexpr,
    HI_PAD: tl.constexpr,
    DI: tl.constexpr,
    DATA_BYTES: tl.constexpr,
    SCALE_BYTES: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    IN_PAGE: tl.constexpr,
    FMT: tl.constexpr,
    HAS_CAND: tl.constexpr,
    OUT_BF16: tl.constexpr,
    HAS_GMAX: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TILES: tl.constexpr,
):
    """The program's tiles on the general path (`_tile_exact`), or -inf past the row's
    visible entries."""
    if live_span:
        for i in range(TILES):
            c0 = c_first + i * BLOCK_N
            cols, valid, readable, row_at, scale_at = _tile_rows(
                bt_ptr,
                r_at,
                entry_base,
                c0,
                n_cols,
                n_vis,
                bt_cols,
                num_pages,
                page_stride,
                DATA_BYTES,
                SCALE_BYTES,
                PAGE_SIZE,
                IN_PAGE,
                BLOCK_N,
            )
            logit = _tile_exact(
                q_ptr,
                w_ptr,
                t,
                q_stride_t,
                q_stride_h,
                w_stride_t,
                cache_ptr,
                row_at,
                scale_at,
                readable,
                HI,
                HI_PAD,
                DI,
                FMT,
                BLOCK_N,
                UPCAST,
            )
            _finish_tile(
                out_row,
                gmax_row,
                cand_ptr,
                t,
                cand_stride_t,
                cand_cols,
                entry_base,
                c0,
                cols,
                logit,
                valid,
                n_cols,
                HAS_CAND,
                OUT_BF16,
                HAS_GMAX,
                BLOCK_N,
            )
    else:
        for i in range(TILES):
            cols = c_first + i * BLOCK_N + tl.arange(0, BLOCK_N)
            logit = tl.full((BLOCK_N,), float("-inf"), tl.float32)
            _store_logits(out_row, cols, logit, cols < n_cols, OUT_BF16)
            if HAS_GMAX:
                _store_group_max(gmax_row, c_first + i * BLOCK_N, logit, cols < 0, n_cols, BLOCK_N)


@triton.jit
def _finish_tile(
    out_row,
    gmax_row,
    cand_ptr,
    t,
    cand_stride_t,
    cand_cols,
    entry_base,
    c0,
    cols,
    logit,
    valid,
    n_cols,
    HAS_CAND: tl.constexpr,
    OUT_BF16: tl.constexpr,
    HAS_GMAX: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Mask (-inf past n(p) and outside the candidates), store the logits and group maxima."""
    keep = valid
    if HAS_CAND:
        entries = entry_base + cols
        c = tl.load(
            cand_ptr + t * cand_stride_t + entries, mask=valid & (entries < cand_cols), other=0
        )
        keep = keep & (c != 0)
    logit = tl.where(keep, logit, float("-inf"))
    _store_logits(out_row, cols, logit, cols < n_cols, OUT_BF16)
    if HAS_GMAX:
        _store_group_max(gmax_row, c0, logit, valid, n_cols, BLOCK_N)


@triton.jit
def _tile_exact(
    q_ptr,
    w_ptr,
    t,
    q_stride_t,
    q_stride_h,
    w_stride_t,
    cache_ptr,
    row_at,
    scale_at,
    valid,
    HI: tl.constexpr,
    HI_PAD: tl.constexpr,
    DI: tl.constexpr,
    FMT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Logits (before masking) of one tile on the general path: keys decoded exactly through
    fp32, bf16 products against the unscaled queries -> f32 [BLOCK_N]."""
    h = tl.arange(0, HI_PAD)
    hm = h < HI
    d = tl.arange(0, DI)
    q = tl.load(
        q_ptr + t * q_stride_t + h[:, None] * q_stride_h + d[None, :], mask=hm[:, None], other=0.0
    )
    w = tl.load(w_ptr + t * w_stride_t + h, mask=hm, other=0.0)
    k = _decode_keys(cache_ptr, row_at, scale_at, valid, DI, FMT, BLOCK_N, UPCAST)
    if UPCAST:
        s = tl.dot(k, tl.trans(q.to(tl.float32)), input_precision="ieee")
    else:
        s = tl.dot(k, tl.trans(q.to(tl.bfloat16)))
    return tl.sum(tl.maximum(s, 0.0) * w[None, :], axis=1)


@triton.jit
def _store_group_max(gmax_row, c0, logit, valid, n_cols, BLOCK_N: tl.constexpr):
    """Per GROUP entries: the largest order-preserving key of the visible entries (0 when none),
    the first pass of the top-k (`ops/topk`)."""
    key = tl.where(valid, _score_to_key(logit), 0)
    gk = tl.max(tl.reshape(key, (BLOCK_N // GROUP, GROUP)), axis=1)
    g = c0 // GROUP + tl.arange(0, BLOCK_N // GROUP)
    tl.store(gmax_row + g, gk.to(tl.int32, bitcast=True), mask=g * GROUP < n_cols)


@triton.jit
def _store_logits(row_ptr, cols, logit, mask, OUT_BF16: tl.constexpr):
    if OUT_BF16:
        logit = tl.where(
            logit == float("-inf"), logit, tl.minimum(tl.maximum(logit, -BF16_MAX), BF16_MAX)
        )
        # Round to nearest even on the bits (exact under the interpreter too); out is int16.
        b = logit.to(tl.uint32, bitcast=True)
        rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        tl.store(row_ptr + cols, rounded.to(tl.int16), mask=mask)
    else:
        tl.store(row_ptr + cols, logit, mask=mask)


TILE = (64, 16, 4, 4)
"""(BLOCK_N, TILES, num_warps, num_stages): a program scores BLOCK_N * TILES entries of one row,
preparing the row's query once; with num_stages > 1 the key loads of later tiles are issued
ahead (multi-buffered in shared memory) when a tile lies inside one page. One shape on
every device (the interpreter runs the GPU's tiles and head reduction tree) and for every row
count."""

COMPILED_BLOCK_N = 64
"""The compiled kernel's keys per tile. Measured on the H200 (eleventh session): 32- and 16-key
tiles give wrong logits on every row compiled (the interpreter's tests pass them), 64-key tiles
with 1 or 16 tiles a program and 1 or 4 stages are right; the cause is not known, so other
tiles are refused when compiled."""


def paged_logits_triton(
    q: torch.Tensor,
    weights: torch.Tensor,
    cache: PagedCache,
    block_table: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    out: torch.Tensor,
    candidates: torch.Tensor | None = None,
    *,
    entry_base: int = 0,
    upcast: bool = False,
    gmax: torch.Tensor | None = None,
) -> torch.Tensor:
    """Fill `out` [T, n] (f32 or bf16) with logits of entries `entry_base + [0, n)`; with `gmax`
    (int32 [T, >= ceil(n / GROUP)]) also each group's largest order-preserving key (the first
    pass of the top-k; needs a tile that is a multiple of GROUP and `entry_base % GROUP == 0`).
    `upcast`: the interpreter's fp32 arithmetic (its fp16 is unreliable); only the interpreter
    runs it (compiled, the variant's fp32 and fp16 query tiles do not unify), so callers pass
    `interpreter_active()`."""
    if upcast and not interpreter_active():
        raise ValueError(
            "upcast=True is the Triton interpreter's fp32 path (TRITON_INTERPRET=1); compiled "
            "kernels take upcast=False"
        )
    block_n, tiles, warps, stages = TILE
    if block_n != COMPILED_BLOCK_N and not interpreter_active():
        raise ValueError(
            f"TILE[0] (keys per tile) must be {COMPILED_BLOCK_N} for the compiled kernel, got "
            f"{block_n}; other tiles run under the Triton interpreter only"
        )
    t = q.shape[0]
    n = out.shape[1]
    if t == 0 or n == 0:
        return out
    if gmax is not None and (block_n % GROUP.value or entry_base % GROUP.value):
        raise ValueError("gmax needs a tile and an entry base that are multiples of GROUP")
    # The grid's second dimension is capped at 65535 programs: very long rows go in pieces.
    span = MAX_GRID_Y * block_n * tiles
    for c0 in range(0, n, span):
        _launch(
            q,
            weights,
            cache,
            block_table,
            req_idx,
            pos,
            ratio,
            out[:, c0 : c0 + span],
            candidates,
            entry_base + c0,
            upcast,
            block_n,
            tiles,
            warps,
            stages,
            gmax[:, c0 // GROUP.value :] if gmax is not None else None,
        )
    return out


MAX_GRID_Y = 65535


def _launch(
    q,
    weights,
    cache,
    block_table,
    req_idx,
    pos,
    ratio,
    out,
    candidates,
    entry_base,
    upcast,
    block_n,
    tiles,
    warps,
    stages,
    gmax,
):
    t, hi, di = q.shape
    n = out.shape[1]
    cand = candidates if candidates is not None else out
    grid = (t, triton.cdiv(n, block_n * tiles))
    _paged_logits_kernel[grid](
        q,
        weights,
        cache.storage,
        block_table,
        req_idx,
        pos,
        cand.view(torch.uint8) if candidates is not None else cand,
        out.view(torch.int16) if out.dtype == torch.bfloat16 else out,
        gmax if gmax is not None else req_idx,
        ratio,
        entry_base,
        n,
        q.stride(0),
        q.stride(1),
        weights.stride(0),
        block_table.shape[0],
        block_table.shape[1],
        block_table.stride(0),
        cache.num_pages,
        cache.page_stride,
        cand.stride(0),
        candidates.shape[1] if candidates is not None else 0,
        out.stride(0),
        gmax.stride(0) if gmax is not None else 0,
        HI=hi,
        HI_PAD=max(16, triton.next_power_of_2(hi)),
        DI=di,
        DATA_BYTES=cache.data_bytes,
        SCALE_BYTES=cache.scale_bytes,
        PAGE_SIZE=cache.page_size,
        IN_PAGE=cache.page_size % block_n == 0 and entry_base % block_n == 0,
        FMT=FMT_MXFP4 if cache.fmt == "mxfp4" else FMT_FP8,
        HAS_CAND=candidates is not None,
        OUT_BF16=out.dtype == torch.bfloat16,
        HAS_GMAX=gmax is not None,
        UPCAST=upcast,
        BLOCK_N=block_n,
        TILES=tiles,
        TILES_P2=triton.next_power_of_2(tiles),
        STAGES=stages,
        num_warps=warps,
        **dependent_launch(q.device),
    )
