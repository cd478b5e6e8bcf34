# mypy: disable-error-code="no-untyped-def"
"""Lab copy of the production Gluon kernel (issue 11, ninth session, helper attn9b; not
production, not run on a GPU yet): the producer gathers each tile's records straight into
registers (16-byte `ld.global` of the data words, byte loads of the scales, one tile ahead;
slot indices two tiles ahead) and decodes them from there, as FlashMLA's producer does,
instead of cp.async into a raw ring in shared memory and a shared-memory read back. What it
removes per 32-key tile: the raw ring's shared-memory writes and reads (MXFP8 ~18 + ~21 KB,
NVFP4 ~10 + ~12 KB per tile in production's SASS), the layout conversions of the copies'
addresses through shared memory and their barriers (8 -> 3 `BAR` a tile), `wait_group`; the
raw ring's 32 KB (64 KB with bf16 records) of shared memory (so `KSTAGES` 4 fits every
format pair). What it costs: more integer instructions per tile (each thread computes the
addresses of its 4 keys, replicated over 16 lanes; zero-fill of masked loads), registers
(two tiles' records live in the producer), the first compressed tile's load latency once a
program unless HANDOVER peels the last window tile off its loop (the window and compressed
phases carry registers of different types).

Arithmetic: the decode is production's instruction for instruction on the same bytes (the
inline PTX takes int32 words two at a time, so that loop-carried records stay one register
per word), zeros for masked keys as production's zero-filling copies, same tiles, stages'
order, consumers unchanged: the outputs are production's bit for bit by construction (check:
`gluon_profile.py --variants lab9 --bits lab9:gluon`). Same signature and launch as
production (`gluon_profile.py --variants lab9[_<spec>][_sN]`, `LAB9_SPECS`). bf16 records
are loaded at decode time (no register prefetch: 64 registers a tile).

The production kernel's notes follow.

Hopper (sm_90a) Gluon kernel of SPEC section 8: the batch-invariant path (and, in split
mode, the fast path), warp specialized.

Contract (as the Triton kernel's): one program per (row, head block of 64) walks that row's
keys in the fixed order (window ascending, then compressed ascending) in tiles of BLOCK_N = 32,
no split over keys, configuration fixed for (H, D); records are decoded in the kernel (no
gathered bf16 copy); a row's bits do not depend on the other rows.

Structure (after FlashMLA's sm90 sparse kernels, written for this layout; three warpgroups,
`gl.warp_specialize`, registers re-balanced to 208 / 168 / 128):
- producer (4 warps): gathers the records (data and scale bytes) of the tiles NRAW ahead with
  16-byte cp.async into a raw ring (the slot indices one tile further ahead); keys outside the
  row or with a bad slot are masked copies, which zero-fill, so they decode to zeros. It
  decodes each tile into bf16 K tiles in NVMMA-swizzled shared memory (KS stages, two halves
  of D in channel order) and signals the stage's mbarrier. It also copies Q once, by cp.async
  before anything else; in invariant mode the slot indices of the first three tiles are
  loaded beside the row's lengths (which columns a tile holds follows from them), so a
  program's first gathers wait for one global load, not three in a row.
- consumer 0 (4 warps, a 64x256 fp32 accumulator for channels [0, 256)): Q.K^T of the whole
  tile (wgmma from shared memory; the product of tile j + 1 is issued before the softmax of
  tile j so the tensor cores run during it; the last tile is peeled off the loop, so no
  product is issued after it), the online softmax, P (bf16) and the rescale factor into
  shared memory for consumer 1 (double buffered), P.V over its half with P from registers;
  it writes lse and the denominators for consumer 1.
- consumer 1 (4 warps, channels [256, 512)): rescale, P.V with P from shared memory.
A K stage is free again when both consumers arrived on its mbarrier. The output is acc /
denominator as div.full.f32 computes it, from one reciprocal per head (bitwise the same as
the per-element division sequence, ~4 fewer instructions per element).

Split mode (constexpr SPLIT, the fast path; grid (T, head blocks, S)): program sp walks the
contiguous slice [sp n / S, (sp + 1) n / S) of its row's n tiles with the same pipeline and
stores its unnormalized fp32 accumulator and (max, sum) as partials for the combine kernel
(not batch invariant: the slices follow S, which the launcher picks from T). In invariant
mode the slice is [0, n): the arithmetic is the one the kernel had before split mode.

Decode (every product exact in bf16, SPEC section 4), integer and bf16x2 instructions only
(inline PTX; the conversion instructions e4m3x2 -> f16x2 and f32 -> bf16x2 issue at a quarter
of the integer rate): a code's sign, exponent and mantissa bits are placed straight into a
bf16 field by PRMT (sign replicated), a shift and a mask, which is the value times 2^-120
(e4m3) or 2^-126 (e2m1), bf16 subnormals included; one bf16x2 multiply by that power of two
and one by the block scale (ue8m0 scales built as bf16 bits, byte 0 = 2^-127 as the bf16
subnormal; NVFP4's e4m3 scales converted once per block). Every step is exact, so the
decoded tiles, hence the outputs, are bitwise those of the previous decode (hardware
conversions), except for the e4m3 NaN codes, which no cache holds. Measured: 1-3% less time
per tile than the conversions (the producer is bound by its dependent chains more than by
issue); 32 keys per step instead of 16 another 3-5%.

Only D = 512 (the V4.1 geometry) is supported; the Triton kernel serves every other shape.
`packages/ds41-attention/scripts/gluon_lab.py` is a copy with profiling switches (stage
drops, stage counts) for A/B runs; the previous kernel is `scripts/gluon_v1.py` at commit
1de3a18.
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
GLUON_NUM_WARPS = 4
GLUON_KSTAGES = 3  # K stages, every format pair (no raw ring: 4 fit too, `KSTAGES`)
# Register split: the launch caps every thread at GLUON_MAXNREG (12 warps x 32 x 168 fit the
# 64K register file); the partitions re-balance with setmaxnreg: consumer 1 to 168, the
# producer to 128, and Triton gives the default partition (consumer 0) what is left: 208
# (at 136 / 200 the ninth session's consumer 0, with its last tile peeled off the loop, made
# ptxas spill a shared address that the producer's loop then reloaded every tile; at 128 /
# 208 nothing spills, offline compile of every format pair)
GLUON_MAXNREG = 168
D = gl.constexpr(GLUON_D)
HALF = gl.constexpr(GLUON_D // 2)
BLOCK_H = gl.constexpr(GLUON_BLOCK_H)
BLOCK_N = gl.constexpr(GLUON_BLOCK_N)
KSTAGES = gl.constexpr(GLUON_KSTAGES)
# 1: the decode layout gives each thread 64 channels of one key (per-key work on 4 lanes);
# 0: production's 16 channels of 4 keys (per-key work on 16 lanes, 4 keys a thread)
ONE_KEY = gl.constexpr(1)
# 1: the last window tile prefetches the first compressed tile's records; 0: they are loaded
# after the window tiles (their latency exposed once a program)
HANDOVER = gl.constexpr(1)
SUB = gl.constexpr(32)  # keys decoded per step: 32 measured 3-5% faster than 16 (more independent
# work per step for the producer's one warp per scheduler; no spills, H200 attention_s7_call2)
C1_REGS = gl.constexpr(168)
PRODUCER_REGS = gl.constexpr(128)


@gluon.jit
def _tile_slots(i, n_w, end, swa_row, swa_len, comp_row, comp_len, w_slots, c_slots,
                HAS_COMP: gl.constexpr, layout: gl.constexpr):  # fmt: skip
    """(slot int64 clamped to >= 0, validity) of the keys of the row's tile i, in `layout`;
    tiles from `end` on are masked (the program's slice of the row ends there)."""
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
    valid = ok & (slots >= 0) & (i < end)
    return gl.maximum(slots, 0).to(gl.int64), valid


@gluon.jit
def _first_slots(i, n_w, end, w_spec, c0, c1, c2, swa_len, comp_len, w_slots, c_slots,
                 HAS_COMP: gl.constexpr, layout: gl.constexpr):  # fmt: skip
    """`_tile_slots` of the row's tile i <= 2 (invariant mode) from slot vectors loaded
    before the row's lengths were known: `w_spec` the window slots of tile i (columns < W),
    c0 / c1 / c2 those of the row's compressed tiles 0 / 1 / 2 (columns < K). The same
    (slot, validity) as `_tile_slots`, without its loads waiting for the lengths."""
    offs = gl.arange(0, BLOCK_N, layout=layout)
    jw = i * BLOCK_N + offs
    in_w = jw < swa_len
    slots = gl.where(in_w, w_spec, -1)
    ok = in_w & (slots < w_slots)
    if HAS_COMP:
        ci = i - n_w
        jc = ci * BLOCK_N + offs
        in_c = (jc >= 0) & (jc < comp_len)
        sc = gl.where(in_c, gl.where(ci == 0, c0, gl.where(ci == 1, c1, c2)), -1)
        slots = gl.where(in_c, sc, slots)
        ok = ok | (in_c & (sc < c_slots))
    valid = ok & (slots >= 0) & (i < end)
    return gl.maximum(slots, 0).to(gl.int64), valid


@gluon.jit
def _spec_load(row, i, n, layout: gl.constexpr):
    """Slot vector of columns [i BLOCK_N, (i + 1) BLOCK_N) of a slot table row of n columns
    (-1 past its end), loaded without the row's length."""
    cols = i * BLOCK_N + gl.arange(0, BLOCK_N, layout=layout)
    return gl.load(row + cols, mask=cols < n, other=-1)


@gluon.constexpr_function
def _kstages(w_fmt, c_fmt):
    # no raw ring: every format pair has room for KSTAGES K stages (Q 64 KB + 32 KB a stage)
    return int(KSTAGES)


@gluon.jit
def _page_magic(page_size):
    """floor((2^32 - 1) / page_size) (uint32), once per program: `_rec_offsets` divides by
    page_size with a multiply-high and one correction instead of a division sequence."""
    return gl.full([], 0xFFFFFFFF, gl.uint32) // page_size.to(gl.uint32)


@gluon.jit
def _rec_offsets(slots, page_stride, page_size, magic, FMT: gl.constexpr):
    """(data byte offset, scale byte offset) of each key's record (int64, the slots' layout):
    a page holds page_size records' data, then their scale bytes (SPEC section 4). The slot
    is < 2^31; q = umulhi(slot, magic) is the quotient or one less (magic < 2^32 / ps by less
    than 1, slot / 2^32 < 1/2), one correction makes it exact."""
    su = slots.to(gl.uint32)
    psu = page_size.to(gl.uint32)
    q = gl.umulhi(su, magic)
    r = su - q * psu
    fix = r >= psu
    q = gl.where(fix, q + 1, q)
    r = gl.where(fix, r - psu, r)
    base = q.to(gl.int64) * page_stride
    off = r.to(gl.int64)
    if FMT == 0:
        drow = base + off * D
        srow = base + page_size * D + off * (D // 32)
    elif FMT == 1:
        drow = base + off * (D // 2)
        srow = base + page_size * (D // 2) + off * (D // 16)
    else:
        drow = base + off * (2 * D)
        srow = drow
    return drow, srow


@gluon.constexpr_function
def _mx_scale_layout():
    # [SUB, 8] ue8m0 scales of one half (MXFP8, blocks of 32 channels) for the decode layout's
    # channels: ONE_KEY, 2 adjacent ones per thread (one 2-byte load); else one per thread
    if ONE_KEY:
        return gl.SliceLayout(2, gl.BlockedLayout([1, 2, 32], [8, 4, 1], [4, 1, 1], [2, 1, 0]))
    return gl.SliceLayout(2, gl.BlockedLayout([1, 1, 16], [2, 8, 2], [4, 1, 1], [2, 1, 0]))


@gluon.constexpr_function
def _fp_scale_layout():
    # [SUB, 16] e4m3 scales of one half (NVFP4, blocks of 16 channels): ONE_KEY, 4 adjacent ones
    # per thread (one 4-byte load); else one per thread
    if ONE_KEY:
        return gl.SliceLayout(2, gl.BlockedLayout([1, 4, 16], [8, 4, 1], [4, 1, 1], [2, 1, 0]))
    return gl.SliceLayout(2, gl.BlockedLayout([1, 1, 16], [2, 16, 1], [4, 1, 1], [2, 1, 0]))


@gluon.constexpr_function
def _key_layout():
    # [BLOCK_N] per-key values (slots, validity) in the rows of the decode layouts (4 keys a
    # thread, each warp's 2 keys a row replicated over its 16 lanes): the loads' addresses
    # need no layout conversion (a shared-memory round trip and barriers each)
    return gl.SliceLayout(1, _mx_word_layout())


@gluon.constexpr_function
def _mx_word_layout():
    # [SUB, 64] int32 words of one half of MXFP8 records, the decode layout's bytes: ONE_KEY,
    # 16 words (64 channels) per thread, else 4 (16 channels)
    if ONE_KEY:
        return gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
    return gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])


@gluon.constexpr_function
def _fp_word_layout():
    # [SUB, 32] int32 words of one half of NVFP4 records: ONE_KEY, 8 words (64 channels) per
    # thread, else 2 (16 channels)
    if ONE_KEY:
        return gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])
    return gl.BlockedLayout([1, 2], [2, 16], [4, 1], [1, 0])


@gluon.jit
def _load_rec(st_ptr, page_stride, page_size, magic, slots, valid, FMT: gl.constexpr):
    """One tile's records straight into registers (no shared memory): (data words of channels
    [0, 256), data words of [256, 512), their scale bytes, scale bytes of [256, 512)) in the
    layouts the decode works in (data as int32 words: a loop-carried uint8 tensor would take a
    register per byte); the loads are not waited for here (the decode of the next
    step is their first use). Keys not valid load zeros, as the production kernel's masked
    copies zero-fill, so they decode to +0. bf16 records (FMT 2) return their offsets and
    validity and are loaded by the decode (64 registers a tile would not fit twice)."""
    drow, srow = _rec_offsets(slots, page_stride, page_size, magic, FMT)
    lay: gl.constexpr = _dec_layout()
    if FMT == 0:
        lw: gl.constexpr = _mx_word_layout()
        r = gl.convert_layout(drow // 4, gl.SliceLayout(1, lw))
        v = gl.convert_layout(valid, gl.SliceLayout(1, lw))
        c = gl.arange(0, 64, layout=gl.SliceLayout(0, lw))
        p = st_ptr.to(gl.pointer_type(gl.int32)) + r[:, None] + c[None, :]
        d0 = gl.load(p, mask=v[:, None], other=0)
        d1 = gl.load(p + 64, mask=v[:, None], other=0)
        sl: gl.constexpr = _mx_scale_layout()
        sr = gl.convert_layout(srow, gl.SliceLayout(1, sl))
        vs = gl.convert_layout(valid, gl.SliceLayout(1, sl))
        sc = gl.arange(0, 8, layout=gl.SliceLayout(0, sl))
        ps = st_ptr + sr[:, None] + sc[None, :]
        s0 = gl.load(ps, mask=vs[:, None], other=0)
        s1 = gl.load(ps + 8, mask=vs[:, None], other=0)
    elif FMT == 1:
        lb: gl.constexpr = _fp_word_layout()
        r = gl.convert_layout(drow // 4, gl.SliceLayout(1, lb))
        v = gl.convert_layout(valid, gl.SliceLayout(1, lb))
        c = gl.arange(0, 32, layout=gl.SliceLayout(0, lb))
        p = st_ptr.to(gl.pointer_type(gl.int32)) + r[:, None] + c[None, :]
        d0 = gl.load(p, mask=v[:, None], other=0)
        d1 = gl.load(p + 32, mask=v[:, None], other=0)
        sl1: gl.constexpr = _fp_scale_layout()
        sr = gl.convert_layout(srow, gl.SliceLayout(1, sl1))
        vs = gl.convert_layout(valid, gl.SliceLayout(1, sl1))
        sc = gl.arange(0, 16, layout=gl.SliceLayout(0, sl1))
        ps = st_ptr + sr[:, None] + sc[None, :]
        s0 = gl.load(ps, mask=vs[:, None], other=0)
        s1 = gl.load(ps + 16, mask=vs[:, None], other=0)
    else:
        d0 = gl.convert_layout(drow // 2, gl.SliceLayout(1, lay))
        d1 = d0
        s0 = gl.convert_layout(valid, gl.SliceLayout(1, lay))
        s1 = s0
    return d0, d1, s0, s1


@gluon.constexpr_function
def _dec_layout():
    # [SUB, 256] bf16: ONE_KEY, 64 consecutive channels of one key per thread (a key's per-key
    # work, addresses and slots, is done by 4 lanes, not 16); else 16 (production's layout)
    if ONE_KEY:
        return gl.BlockedLayout([1, 64], [8, 4], [4, 1], [1, 0])
    return gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])


@gluon.constexpr_function
def _q_layout():
    # Q's copy: [64, 256] bf16, 16 consecutive channels per thread (production's)
    return gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])


@gluon.jit
def _e4m3_words(w):
    """MXFP8 data words (int32 [SUB, 64], 4 e4m3 codes each) -> 4 bf16 tensors [SUB, 64],
    exact, integer ops only: production's `_e4m3_bf16` instruction for instruction, on two
    words per call (pack 2), so that each output register holds two adjacent channels: output
    k of the word pair (2p, 2p + 1) holds channels 8p + 2k (element 2p) and 8p + 2k + 1
    (element 2p + 1). PRMT spreads two bytes into two 16-bit fields with their sign bits
    replicated, a shift by 4 and a mask leave `sign << 15 | (byte & 0x7F) << 4`, the value
    times 2^-120; one bf16x2 multiply by 2^120 (exact) gives it."""
    return gl.inline_asm_elementwise(
        "{ .reg .b32 t, k; mov.b32 k, 0x7B807B80;"
        " prmt.b32 t, $4, 0, 0x9180; shl.b32 t, t, 4; and.b32 t, t, 0x87F087F0;"
        " mul.rn.bf16x2 $0, t, k;"
        " prmt.b32 t, $4, 0, 0xB3A2; shl.b32 t, t, 4; and.b32 t, t, 0x87F087F0;"
        " mul.rn.bf16x2 $1, t, k;"
        " prmt.b32 t, $5, 0, 0x9180; shl.b32 t, t, 4; and.b32 t, t, 0x87F087F0;"
        " mul.rn.bf16x2 $2, t, k;"
        " prmt.b32 t, $5, 0, 0xB3A2; shl.b32 t, t, 4; and.b32 t, t, 0x87F087F0;"
        " mul.rn.bf16x2 $3, t, k; }",
        "=r,=r,=r,=r,r,r",
        [w],
        dtype=(gl.bfloat16, gl.bfloat16, gl.bfloat16, gl.bfloat16),
        is_pure=True,
        pack=2,
    )


@gluon.constexpr_function
def _e2m1_word_asm():
    # production's `_e2m1_bf16` sequence on each of two words ($8, $9): outputs 4 i + j hold
    # channels 8 i + 2 j, 8 i + 2 j + 1 of the word pair
    body = " { .reg .b32 a, t, k; mov.b32 k, 0x7E807E80;"
    for i, w in enumerate(("$8", "$9")):
        body += f" shl.b32 a, {w}, 4;"
        for j, sel in enumerate(("0xC480", "0xD591", "0xE6A2", "0xF7B3")):
            body += (f" prmt.b32 t, a, {w}, {sel}; shl.b32 t, t, 2; and.b32 t, t, 0x81C081C0;"
                     f" mul.rn.bf16x2 ${4 * i + j}, t, k;")  # fmt: skip
    return body + " }"


@gluon.jit
def _e2m1_words(w):
    """NVFP4 data words (int32 [SUB, 32], 8 e2m1 codes each, element 2i in the low nibble of
    byte i) -> 8 bf16 tensors [SUB, 32], exact, integer ops only (production's `_e2m1_bf16`,
    instruction for instruction, two words per call): output k of the word pair (2p, 2p + 1)
    holds channels 16p + 2k (element 2p) and 16p + 2k + 1 (element 2p + 1)."""
    return gl.inline_asm_elementwise(
        _e2m1_word_asm(),
        "=r,=r,=r,=r,=r,=r,=r,=r,r,r",
        [w],
        dtype=(gl.bfloat16,) * 8,
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _pairs(o, S: gl.constexpr):
    """[SUB, S] (element 2p + q) -> [SUB, S // 2, 2] (p, q)."""
    return gl.reshape(o, [SUB, S // 2, 2])


@gluon.jit
def _decode_regs(b, s, st_ptr, FMT: gl.constexpr, C: gl.constexpr):
    """bf16 [SUB, 256]: channels [256 C, 256 C + 256) of the tile's keys from the registers
    `_load_rec` filled (data b, scale bytes s); the production kernel's decode, instruction
    for instruction, on the same values, so the same bits (SPEC section 4)."""
    lay: gl.constexpr = _dec_layout()
    if FMT == 0:
        sb = s.to(gl.int16)
        s16 = gl.where(sb == 0, 0x40, sb << 7).to(gl.bfloat16, bitcast=True)
        s3 = gl.expand_dims(s16, 2).broadcast_to([SUB, 8, 32])
        scp = gl.convert_layout(gl.reshape(s3, [SUB, 256]), lay, assert_trivial=True)
        o0, o1, o2, o3 = _e4m3_words(b)
        # channel 8p + 2k + q from output k's element 2p + q: (p, q, k0, k1) -> (p, k1, k0, q)
        j = gl.join(
            gl.join(_pairs(o0, 64), _pairs(o1, 64)), gl.join(_pairs(o2, 64), _pairs(o3, 64))
        )
        f = gl.reshape(gl.permute(j, [0, 1, 4, 3, 2]), [SUB, 256])
        x = gl.convert_layout(f, lay, assert_trivial=True) * scp
    elif FMT == 1:
        s1 = s.to(gl.float8e4nv, bitcast=True).to(gl.float32).to(gl.bfloat16)
        s3b = gl.expand_dims(s1, 2).broadcast_to([SUB, 16, 16])
        scp1 = gl.convert_layout(gl.reshape(s3b, [SUB, 256]), lay, assert_trivial=True)
        o = _e2m1_words(b)
        # channel 16p + 2k + q from output k's element 2p + q: (p, q, k0, k1, k2) ->
        # (p, k2, k1, k0, q); each thread keeps its registers (no data movement)
        j = gl.join(
            gl.join(gl.join(_pairs(o[0], 32), _pairs(o[1], 32)),
                    gl.join(_pairs(o[2], 32), _pairs(o[3], 32))),
            gl.join(gl.join(_pairs(o[4], 32), _pairs(o[5], 32)),
                    gl.join(_pairs(o[6], 32), _pairs(o[7], 32))),
        )  # fmt: skip
        f = gl.reshape(gl.permute(j, [0, 1, 5, 4, 3, 2]), [SUB, 256])
        x = gl.convert_layout(f, lay, assert_trivial=True) * scp1
    else:
        # bf16 records: b = element offsets of the keys' records, s = their validity
        c = gl.arange(0, 256, layout=gl.SliceLayout(0, lay))
        wp = st_ptr.to(gl.pointer_type(gl.bfloat16))
        x = gl.load(wp + b[:, None] + (C * 256 + c)[None, :], mask=s[:, None], other=0.0)
    return x


@gluon.jit
def _store_tile(i, d0, d1, s0, s1, ok, st_ptr, k_smem, kval_smem, bars, FMT: gl.constexpr,
                KS: gl.constexpr):  # fmt: skip
    """Decode the program's tile i from registers into K stage i % KS (once both consumers
    released it) and signal the stage."""
    ks = i % KS
    # both consumers finished tile i - KS, the last reader of this stage
    mbarrier.wait(bars.index(1 + KS + ks), ((i // KS) & 1) ^ 1, pred=i >= KS)
    k_smem.index(ks * 2).store(_decode_regs(d0, s0, st_ptr, FMT, 0))
    k_smem.index(ks * 2 + 1).store(_decode_regs(d1, s1, st_ptr, FMT, 1))
    kval_smem.index(ks).store(ok.to(gl.int32))
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(1 + ks), count=1)


@gluon.jit
def _step(i, ip, d0, d1, s0, s1, sl_c, ok_c, sl_n, ok_n, lo, n_w, end, swa_row, swa_len,
          comp_row, comp_len, w_slots, c_slots, st_ptr, page_stride, page_size, magic,
          k_smem, kval_smem, bars, FMT: gl.constexpr, KS: gl.constexpr,
          HAS_COMP: gl.constexpr):  # fmt: skip
    """Program tile i of a phase whose records are prefetched up to tile ip: issue the loads
    of tile i + 1's records (if i + 1 < ip) and of tile i + 2's slot indices, then decode
    tile i (records loaded one step ago) into its K stage. Returns the state of step i + 1."""
    e0, e1, t0, t1 = _load_rec(
        st_ptr, page_stride, page_size, magic, sl_n, ok_n & (i + 1 < ip), FMT
    )
    sl_nn, ok_nn = _tile_slots(lo + i + 2, n_w, end, swa_row, swa_len, comp_row, comp_len,
                               w_slots, c_slots, HAS_COMP, _key_layout())  # fmt: skip
    _store_tile(i, d0, d1, s0, s1, ok_c, st_ptr, k_smem, kval_smem, bars, FMT, KS)
    return e0, e1, t0, t1, sl_n, ok_n, sl_nn, ok_nn


@gluon.jit
def _phase(i0, i1, ip, d0, d1, s0, s1, sl_c, ok_c, sl_n, ok_n, lo, n_w, end, swa_row, swa_len,
           comp_row, comp_len, w_slots, c_slots, st_ptr, page_stride, page_size, magic,
           k_smem, kval_smem, bars, FMT: gl.constexpr, KS: gl.constexpr,
           HAS_COMP: gl.constexpr):  # fmt: skip
    """The program's tiles [i0, i1), all of format FMT, tile i0's records already in
    (d0, d1, s0, s1), the records of the tiles before ip prefetched (ip = i1 + 1 when the
    phase's last tile is peeled off by the caller). Two steps per iteration, so the records
    of the next tile land in other registers than the ones decoded without a copy between
    iterations."""
    for i in range(i0, i1, 2):
        d0, d1, s0, s1, sl_c, ok_c, sl_n, ok_n = _step(
            i, ip, d0, d1, s0, s1, sl_c, ok_c, sl_n, ok_n, lo, n_w, end, swa_row, swa_len,
            comp_row, comp_len, w_slots, c_slots, st_ptr, page_stride, page_size, magic, k_smem,
            kval_smem, bars, FMT, KS, HAS_COMP)  # fmt: skip
        if i + 1 < i1:
            d0, d1, s0, s1, sl_c, ok_c, sl_n, ok_n = _step(
                i + 1, ip, d0, d1, s0, s1, sl_c, ok_c, sl_n, ok_n, lo, n_w, end, swa_row,
                swa_len, comp_row, comp_len, w_slots, c_slots, st_ptr, page_stride, page_size,
                magic, k_smem, kval_smem, bars, FMT, KS, HAS_COMP)  # fmt: skip
    return d0, d1, s0, s1, sl_c, ok_c, sl_n, ok_n


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
def _producer(a, q_smem, k_smem, kval_smem, p_smem, x_smem, bars, W_FMT: gl.constexpr,
              C_FMT: gl.constexpr, KS: gl.constexpr, SPLIT: gl.constexpr):  # fmt: skip
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
    # Q as 2 [64, 256] halves in channel order, by cp.async (the only copy group), first
    ql: gl.constexpr = _q_layout()
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
    if SPLIT:
        swa_len, n_w, comp_len, lo, n, end = _row_lengths(
            t, swa_lens_ptr, W, comp_lens_ptr, K, num_splits, HAS_COMP, SPLIT
        )
        # program tile i is the row's tile lo + i
        sl_0, ok_0 = _tile_slots(lo, n_w, end, swa_row, swa_len, comp_row, comp_len,
                                 w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
        sl_1, ok_1 = _tile_slots(lo + 1, n_w, end, swa_row, swa_len, comp_row, comp_len,
                                 w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
    else:
        # the slots of tiles 0 and 1 are loaded beside the lengths (production's prologue,
        # one tile shorter: records are loaded one tile ahead here, slots two)
        w0 = _spec_load(swa_row, 0, W, row_l)
        w1 = _spec_load(swa_row, 1, W, row_l)
        if HAS_COMP:
            c0 = _spec_load(comp_row, 0, K, row_l)
            c1 = _spec_load(comp_row, 1, K, row_l)
        else:
            c0 = w0
            c1 = w0
        swa_len, n_w, comp_len, lo, n, end = _row_lengths(
            t, swa_lens_ptr, W, comp_lens_ptr, K, num_splits, HAS_COMP, SPLIT
        )
        sl_0, ok_0 = _first_slots(0, n_w, end, w0, c0, c1, c1, swa_len, comp_len, w_num_slots,
                                  c_num_slots, HAS_COMP, row_l)  # fmt: skip
        sl_1, ok_1 = _first_slots(1, n_w, end, w1, c0, c1, c1, swa_len, comp_len, w_num_slots,
                                  c_num_slots, HAS_COMP, row_l)  # fmt: skip
    kl: gl.constexpr = _key_layout()
    sl_0 = gl.convert_layout(sl_0, kl)
    ok_0 = gl.convert_layout(ok_0, kl)
    sl_1 = gl.convert_layout(sl_1, kl)
    ok_1 = gl.convert_layout(ok_1, kl)
    # the program's tiles: [0, na) of the window's format, [na, n) of the compressed one
    if HAS_COMP:
        na = gl.minimum(gl.maximum(n_w - lo, 0), n)
    else:
        na = n
    # the first window tile's records (masked off when the program has none) before Q's wait
    w_magic = _page_magic(w_page_size)
    d0, d1, s0, s1 = _load_rec(w_ptr, w_page_stride, w_page_size, w_magic, sl_0,
                               ok_0 & (na > 0), W_FMT)  # fmt: skip
    async_copy.wait_group(0)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(0), count=1)
    # HANDOVER: the last window tile is peeled off the window loop, so that its step loads the
    # first compressed tile's records (registers of the other format) one tile ahead too
    if HAS_COMP and HANDOVER:
        na1 = gl.maximum(na - 1, 0)
    else:
        na1 = na
    d0, d1, s0, s1, sl_c, ok_c, sl_n, ok_n = _phase(
        0, na1, na, d0, d1, s0, s1, sl_0, ok_0, sl_1, ok_1, lo, n_w, end, swa_row, swa_len,
        comp_row, comp_len, w_num_slots, c_num_slots, w_ptr, w_page_stride, w_page_size,
        w_magic, k_smem, kval_smem, bars, W_FMT, KS, HAS_COMP)  # fmt: skip
    if HAS_COMP:
        c_magic = _page_magic(c_page_size)
        if HANDOVER:
            if na > 0:
                # the last window tile's step: the first compressed tile's records
                e0, e1, t0, t1 = _load_rec(c_ptr, c_page_stride, c_page_size, c_magic, sl_n,
                                           ok_n & (na < n), C_FMT)  # fmt: skip
                sl_nn, ok_nn = _tile_slots(lo + na + 1, n_w, end, swa_row, swa_len, comp_row,
                                           comp_len, w_num_slots, c_num_slots, HAS_COMP,
                                           _key_layout())  # fmt: skip
                _store_tile(na - 1, d0, d1, s0, s1, ok_c, w_ptr, k_smem, kval_smem, bars, W_FMT,
                            KS)  # fmt: skip
                sl_c = sl_n
                ok_c = ok_n
                sl_n = sl_nn
                ok_n = ok_nn
            else:
                e0, e1, t0, t1 = _load_rec(c_ptr, c_page_stride, c_page_size, c_magic, sl_c,
                                           ok_c & (na < n), C_FMT)  # fmt: skip
        else:
            # the first compressed tile's records loaded here, their latency exposed once per
            # program
            e0, e1, t0, t1 = _load_rec(c_ptr, c_page_stride, c_page_size, c_magic, sl_c,
                                       ok_c & (na < n), C_FMT)  # fmt: skip
        _phase(na, n, n, e0, e1, t0, t1, sl_c, ok_c, sl_n, ok_n, lo, n_w, end, swa_row, swa_len,
               comp_row, comp_len, w_num_slots, c_num_slots, c_ptr, c_page_stride, c_page_size,
               c_magic, k_smem, kval_smem, bars, C_FMT, KS, HAS_COMP)  # fmt: skip


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
def _softmax_handoff(s, j, kval, p_smem, x_smem, bars, m_i, l_i, scale, mma_s: gl.constexpr,
                     mma_o: gl.constexpr, PF: gl.constexpr):  # fmt: skip
    """Consumer 0's online softmax of its tile j and the hand-off of P (bf16) and the rescale
    factor to consumer 1 (P buffer j % 2, free once consumer 1 finished tile j - 2); returns
    (P, rescale factor in the accumulator's row layout, new max, new sum)."""
    ps = j % 2
    p16, alpha, m_i, l_i = _softmax(s, kval, m_i, l_i, scale, mma_s)
    mbarrier.wait(bars.index(PF + 2 + ps), ((j // 2) & 1) ^ 1, pred=j >= 2)
    p_smem.index(ps).store(p16)
    x_smem.index(ps).store(alpha)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(PF + ps), count=1)
    return p16, gl.convert_layout(alpha, gl.SliceLayout(1, mma_o)), m_i, l_i


@gluon.jit
def _consumer0(a, q_smem, k_smem, kval_smem, p_smem, x_smem,
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
    for j in range(0, n - 1):
        js = j % KS
        # Q.K^T of tile j + 1 runs on the tensor cores during this tile's softmax
        jn = (j + 1) % KS
        mbarrier.wait(bars.index(1 + jn), ((j + 1) // KS) & 1)
        s_tok = _qk(q_smem, k_smem, jn, mma_s)
        p16, alpha_o, m_i, l_i = _softmax_handoff(
            s_cur, j, kval_smem.index(js), p_smem, x_smem, bars, m_i, l_i, scale, mma_s, mma_o, PF
        )
        tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2),
                            acc * alpha_o[:, None], is_async=True)  # fmt: skip
        acc, s_cur = warpgroup_mma_wait(0, deps=[tok, s_tok])
        gl.thread_barrier()
        mbarrier.arrive(bars.index(1 + KS + js), count=1)
    # the last tile: no look-ahead product (its tensor-core time would delay this P.V)
    jl = n - 1
    js = jl % KS
    p16, alpha_o, m_i, l_i = _softmax_handoff(s_cur, jl, kval_smem.index(js), p_smem, x_smem,
                                              bars, m_i, l_i, scale, mma_s, mma_o, PF)  # fmt: skip
    tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2),
                        acc * alpha_o[:, None], is_async=True)  # fmt: skip
    acc = warpgroup_mma_wait(0, deps=[tok])
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
def _rcp_approx(x):
    """rcp.approx.ftz.f32 (MUFU.RCP): the reciprocal inside div.full.f32's sequence."""
    return gl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x],
                                     dtype=gl.float32, is_pure=True, pack=1)  # fmt: skip


@gluon.jit
def _store_out(acc, denom, out_ptr, t, stride_ot, stride_oh, hb, H, C: gl.constexpr,
               mma_o: gl.constexpr):  # fmt: skip
    # acc / denom exactly as div.full.f32 computes it, with one reciprocal per head instead of
    # one division sequence per element (bitwise the same): both operands scaled by 1/4 when
    # |denom| > 2^126, by 2^24 when |denom| < 2^-126, then acc * rcp.approx(denom)
    ad = gl.abs(denom)
    c = gl.where(ad > 2.0**126, 0.25, gl.where(ad < 2.0**-126, 16777216.0, 1.0))
    r = _rcp_approx(denom * c)
    q = (acc * c[:, None]) * r[:, None]
    o = gl.where(denom[:, None] > 0.0, q, 0.0).to(gl.bfloat16)
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
def _consumer1(a, q_smem, k_smem, kval_smem, p_smem, x_smem,
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
        alpha = x_smem.index(ps).load(row_o)
        tok = warpgroup_mma(p_smem.index(ps), k_smem.index(js * 2 + 1), acc * alpha[:, None],
                            is_async=True)  # fmt: skip
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
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 256], gl.bfloat16)
    k_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 256], gl.bfloat16)
    p_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], gl.bfloat16)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_H, 256], q_lay)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [2 * KS, BLOCK_N, 256], k_lay)
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
