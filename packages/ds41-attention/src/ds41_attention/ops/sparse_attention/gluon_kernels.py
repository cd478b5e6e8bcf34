# mypy: disable-error-code="no-untyped-def"
"""Hopper (sm_90a) Gluon kernel of SPEC section 8: the batch-invariant path (and, in split
mode, the fast path), warp specialized.

Contract (as the Triton kernel's): each (row, head block of 64) is walked by one program, in
the fixed order of its keys (window ascending, then compressed ascending) in tiles of
BLOCK_N = 32, no split over keys, configuration fixed for (H, D) (in persistent mode a program
walks several of them one after another, each with the same arithmetic); records are decoded
in the kernel (no gathered bf16 copy); a row's bits do not depend on the other rows.

Structure (after FlashMLA's sm90 sparse kernels, written for this layout; three warpgroups,
`gl.warp_specialize`, registers re-balanced to 208 / 184 / 112). The decode of a tile is
split between two warpgroups by halves of D: the producer decodes channels [0, 256),
consumer 1 channels [256, 512), the half it then uses as V (H200, twenty-third session:
with the producer's slot loads moved off its chain, 1.3-2.0% faster at T >= 132 than one
decoding warpgroup, same bits; the decode split alone measured neutral: the producer's
slot-table loads, waited for in the iteration that issued them, then bounded a tile).
- producer (4 warps): gathers the records (data and scale bytes) of the tiles NRAW ahead with
  16-byte cp.async into a raw ring (the slot indices one tile further ahead, loaded an
  iteration before their validity is worked out, so the loads' latency runs during that
  iteration; the caches' page sizes are constexprs, so a record's page and offset divide by
  a constant, a shift for a power of two); keys outside the row or with a bad slot are
  masked copies, which zero-fill, so they decode to zeros. When a tile's bytes landed it
  says so on the slot's landed mbarrier, decodes channels [0, 256) into the bf16 K stage
  (NVMMA-swizzled shared memory, KS stages, two halves of D in channel order), waits until
  consumer 1 holds the slot's other half (the slot's loaded mbarrier), issues the next copies
  into the slot and arrives on the stage's filled mbarrier; beside the stage it writes the
  tile's validity as a bf16 bias tile for consumer 0's Q.K^T. It also copies Q once, by
  cp.async before anything else; in invariant mode the slot indices of the first three
  tiles are loaded beside the row's lengths (which columns a tile holds follows from them),
  so a program's first gathers wait for one global load, not three in a row. Idle at its
  program's end (invariant mode), it prefetches into L2 the Q rows, slot-table rows and
  lengths of the program an SM count later in launch order, the one the GPU most likely
  starts next on a free SM, so that program's first loads hit L2 (H200, eighteenth session:
  1-2% faster at T >= 264, neutral below).
- consumer 0 (4 warps, a 64x256 fp32 accumulator for channels [0, 256)): Q.K^T of the whole
  tile (wgmma from shared memory; the product of tile j + 1 is issued before the softmax of
  tile j so the tensor cores run during it; the last tile is peeled off the loop, so no
  product is issued after it; a 17th k-step of each product, Q's bias tile times the stage's,
  adds +0 for a valid key and -inf for an invalid one, so the softmax loads no validity:
  H200, twenty-fourth session: 3.2-3.8% faster at every T, same bits), the online softmax
  in base 2 (the launcher passes the scale times log2(e), so a score's weight is one FMA and
  one ex2: consumer 0's tile loop 537 -> 453 instructions; H200, twenty-fifth session: within
  1% at T >= 132, 0.5-5% faster in the pair kernel), P (bf16) and the rescale factor into
  shared memory for consumer 1 (double buffered), P.V over its half with P from registers;
  it writes lse and the denominators for consumer 1.
- consumer 1 (4 warps, channels [256, 512)): decodes channels [256, 512) of tile j + KS - 1
  (loads the slot's bytes once the producer says they landed, hands the slot back, waits
  for the K stage, decodes, arrives on the stage's filled mbarrier), then for tile j the
  rescale and P.V with P loaded into registers (so consumer 0 needs no proxy fence before
  handing P over; the same bits as P read by the wgmma from shared memory).
A K stage is filled by two arrivals (the producer's half, consumer 1's half) and free again
when both consumers arrived on its released mbarrier. The output is acc /
denominator as div.full.f32 computes it, from one reciprocal per head (bitwise the same as
the per-element division sequence, ~4 fewer instructions per element). Each consumer stages
its bf16 half in the Q half it no longer reads and stores it in 16-byte row pieces: stored
straight from the accumulator's layout (4-byte pieces, 8 heads a warp store) the queue of
stores throttled each program's end (Nsight Compute, seventeenth session: 7-12% of the
kernel's time at every T).

Split mode (constexpr SPLIT, the fast path; grid (T, head blocks, S)): program sp walks the
contiguous slice [sp n / S, (sp + 1) n / S) of its row's n tiles with the same pipeline and
stores its unnormalized fp32 accumulator and (max, sum) as partials for the combine kernel
(not batch invariant: the slices follow S, which the launcher picks from T). In invariant
mode the slice is [0, n): the arithmetic is the one the kernel had before split mode.

Persistent mode (constexpr PERSISTENT, the invariant path once the (row, head block) items
outnumber the SMs; launcher `gluon_launch.persistent_programs`): one program an SM walks items
p, p + SMs, ... in the one-item grid's launch order, with the same partitions' work per item
(`_producer_items`, `_consumer0_items`, `_consumer1_items` over the shared walks
`_produce_tiles`, `_c0_walk`, `_c1_walk`), so every row gets the one-item grid's bits. The raw
slots, K stages and P buffers run on across a program's items by ring index: the producer
gathers and decodes the next item's first tiles, and consumer 1 decodes half 1 of its first
KS - 1, while the consumers finish the current item; an item's last NRAW tiles start no
copies (the ring's next slots are the next item's). Each consumer stores its output half by
one bulk tensor store (TMA, [T, H, D] descriptor, heads past H clipped) from the Q half it no
longer reads; consumer 0 then loads the next item's Q by TMA, half 0 at once and half 1 once
consumer 1's store has read it (Q-free barrier). The next item's lengths are loaded at an
item's start and used at its end. Measured on the H200 (twenty-eighth session): 0.942-0.952
of the one-item grid's time at T = 1024 (282.8-283.7 us = 302.8-303.8 TFLOP/s), 0.933-0.947
at 2112 / 4096; within one wave the lab kernel took 1.026-1.034 (its bookkeeping, nothing to
overlap), hence the launcher's rule. The one-item, split and pair kernels compile to the SASS
they had before this mode existed (offline, but for the parameter offsets).

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

Programmatic dependent launch (`ds41_cache.ops.launch`, constexpr GDC): the first statement
waits for the previous kernel of the stream and lets the next launch be placed; the default
warps execute it before `warp_specialize` starts the other partitions, so no partition reads
global memory before the wait.

Only D = 512 (the V4.1 geometry) is supported; the Triton kernel serves every other shape.
`packages/ds41-attention/scripts/gluon_lab.py` is a copy with profiling switches (stage
drops, stage counts) for A/B runs; the previous kernel is `scripts/gluon_v1.py` at commit
1de3a18.
"""

import math

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ds41_cache.ops.launch import gluon_enter_dependent

GLUON_D = 512
GLUON_BLOCK_H = 64
GLUON_BLOCK_N = 32
GLUON_NUM_WARPS = 4
GLUON_KSTAGES = 3  # K stages (2 when a cache holds bf16 records: their raw ring is larger)
GLUON_RAW_STAGES = 2
# Register split: the launch caps every thread at GLUON_MAXNREG (12 warps x 32 x 168 fit the
# 64K register file); the partitions re-balance with setmaxnreg: consumer 1 to 184 (its
# accumulator and half a tile's bytes; at 176 it spills), the producer to 112 (it decodes one
# half; at 104 it spills), and Triton gives the default partition (consumer 0) what is left:
# 208 (at 200 it spills). Offline compiles of the format pairs: no spills except the mxfp8 +
# bf16 pair, which the runner does not build. Two things this split depends on (twenty-third
# session, offline): consumer 1's prologue and loop decode from one call site (two call sites
# made LLVM hoist thread-index arithmetic above the partitions, where ptxas spilled it), and
# it decodes its half in two 16-key steps (one 32-key step spills at 184).
GLUON_MAXNREG = 168
D = gl.constexpr(GLUON_D)
BLOCK_H = gl.constexpr(GLUON_BLOCK_H)
BLOCK_N = gl.constexpr(GLUON_BLOCK_N)
NRAW = gl.constexpr(GLUON_RAW_STAGES)
# A tile's 32 keys are decoded in one step per half of D: measured 3-5% faster than two 16-key
# steps (more independent work for the producer's one warp per scheduler; H200
# attention_s7_call2)
LOG2E = gl.constexpr(math.log2(math.e))
LN2 = gl.constexpr(math.log(2.0))
C1_REGS = gl.constexpr(184)
PRODUCER_REGS = gl.constexpr(112)


def tma_box_layouts() -> tuple[gl.NVMMASharedLayout, gl.NVMMASharedLayout]:
    """Shared layouts of the persistent mode's TMA boxes: Q as [64, 256] boxes of a [T H, D]
    descriptor (the layout of a Q half), the output as [1, 64, 256] boxes of a [T, H, D] one
    (the same bytes, `_as_box`)."""
    return (
        gl.NVMMASharedLayout.get_default_for([GLUON_BLOCK_H, 256], gl.bfloat16),
        gl.NVMMASharedLayout.get_default_for([1, GLUON_BLOCK_H, 256], gl.bfloat16),
    )


@gluon.jit
def _tile_slot_loads(i, n_w, swa_row, swa_len, comp_row, comp_len, HAS_COMP: gl.constexpr,
                     layout: gl.constexpr):  # fmt: skip
    """The slot-table loads of the row's tile i, in `layout`: (window slots, compressed
    slots), -1 in the columns the tile does not take from that table."""
    offs = gl.arange(0, BLOCK_N, layout=layout)
    jw = i * BLOCK_N + offs
    ws = gl.load(swa_row + jw, mask=jw < swa_len, other=-1)
    if HAS_COMP:
        jc = (i - n_w) * BLOCK_N + offs
        cs = gl.load(comp_row + jc, mask=(jc >= 0) & (jc < comp_len), other=-1)
    else:
        cs = ws
    return ws, cs


@gluon.jit
def _tile_slots_of(i, n_w, end, ws, cs, swa_len, comp_len, w_slots, c_slots,
                   HAS_COMP: gl.constexpr, layout: gl.constexpr):  # fmt: skip
    """(slot int64 clamped to >= 0, validity) of the keys of the row's tile i from its
    `_tile_slot_loads`; tiles from `end` on are masked (the program's slice of the row ends
    there)."""
    offs = gl.arange(0, BLOCK_N, layout=layout)
    jw = i * BLOCK_N + offs
    in_w = jw < swa_len
    slots = ws
    ok = in_w & (ws < w_slots)
    if HAS_COMP:
        jc = (i - n_w) * BLOCK_N + offs
        in_c = (jc >= 0) & (jc < comp_len)
        slots = gl.where(in_c, cs, slots)
        ok = ok | (in_c & (cs < c_slots))
    valid = ok & (slots >= 0) & (i < end)
    return gl.maximum(slots, 0).to(gl.int64), valid


@gluon.jit
def _tile_slots(i, n_w, end, swa_row, swa_len, comp_row, comp_len, w_slots, c_slots,
                HAS_COMP: gl.constexpr, layout: gl.constexpr):  # fmt: skip
    """(slot int64 clamped to >= 0, validity) of the keys of the row's tile i, in `layout`;
    tiles from `end` on are masked (the program's slice of the row ends there)."""
    ws, cs = _tile_slot_loads(i, n_w, swa_row, swa_len, comp_row, comp_len, HAS_COMP, layout)
    return _tile_slots_of(i, n_w, end, ws, cs, swa_len, comp_len, w_slots, c_slots, HAS_COMP,
                          layout)  # fmt: skip


@gluon.jit
def _first_slots(i, n_w, end, w_spec, c0, c1, c2, swa_len, comp_len, w_slots, c_slots,
                 HAS_COMP: gl.constexpr, layout: gl.constexpr):  # fmt: skip
    """`_tile_slots` of the row's tile i <= NRAW (invariant mode) from slot vectors loaded
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
    # bf16 records need a raw ring twice as large: two K stages then fit shared memory
    return 2 if 2 in (int(w_fmt), int(c_fmt)) else GLUON_KSTAGES


@gluon.constexpr_function
def _p_bars(ks):
    # index of P buffer 0's filled barrier, after Q's and the K stages' (the layout is listed in
    # `_gluon_sparse_attn_kernel`; the pair kernel's hand-off uses the same indices)
    return 2 + 2 * int(ks)


@gluon.constexpr_function
def _raw_landed_bar(ks):
    # index of raw slot 0's landed barrier: after the P buffers' and the denominator's
    return _p_bars(ks) + 5


@gluon.constexpr_function
def _raw_loaded_bar(ks):
    # index of raw slot 0's loaded-by-consumer-1 barrier
    return _raw_landed_bar(ks) + GLUON_RAW_STAGES


@gluon.constexpr_function
def _qfree_bar(ks):
    # persistent mode: index of the Q-free barrier (consumer 1's output store has read Q half 1)
    return _raw_loaded_bar(ks) + GLUON_RAW_STAGES


@gluon.constexpr_function
def _qtma_bar(ks):
    # persistent mode: index of the barrier a later item's Q lands on (TMA, both halves)
    return _qfree_bar(ks) + 1


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
    # [BLOCK_N, 256] bf16: 16 consecutive channels of one key per thread
    return gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])


@gluon.jit
def _e4m3_bf16(b):
    """e4m3 bytes -> bf16, exact, with integer ops only (no conversion-pipe instructions).

    PRMT spreads two bytes into two 16-bit fields with their sign bits replicated upwards;
    a shift by 4 and a mask leave `sign << 15 | (byte & 0x7F) << 4`: the e4m3 exponent and
    mantissa land in the bf16 exponent and mantissa fields unbiased, which is the e4m3 value
    times 2^-120 for normal and subnormal codes alike (bf16 subnormals); one bf16x2 multiply
    by 2^120 (exact) gives the value."""
    return gl.inline_asm_elementwise(
        "{ .reg .b32 t, k; mov.b32 k, 0x7B807B80;"
        " prmt.b32 t, $2, 0, 0x9180; shl.b32 t, t, 4; and.b32 t, t, 0x87F087F0;"
        " mul.rn.bf16x2 $0, t, k;"
        " prmt.b32 t, $2, 0, 0xB3A2; shl.b32 t, t, 4; and.b32 t, t, 0x87F087F0;"
        " mul.rn.bf16x2 $1, t, k; }",
        "=r,=r,r",
        [b],
        dtype=gl.bfloat16,
        is_pure=True,
        pack=4,
    )


@gluon.jit
def _e2m1_bf16(b):
    """NVFP4 bytes (element 2i in the low nibble, 2i + 1 in the high one), four at a time ->
    (elements 0..3, elements 4..7) of each group of four bytes as bf16, exact, integer ops.

    Each 16-bit field is built from a byte holding the code in its high nibble (the word
    shifted left by 4 for the low nibbles, the word itself for the high ones) with the sign
    replicated upwards by PRMT; a shift by 2 and a mask leave `sign << 15 | magnitude << 6`:
    the e2m1 exponent and mantissa in the bf16 fields unbiased, the value times 2^-126
    (code 1 = 0.5 as a bf16 subnormal); one bf16x2 multiply by 2^126 (exact) gives it."""
    return gl.inline_asm_elementwise(
        "{ .reg .b32 a, t, k; mov.b32 k, 0x7E807E80; shl.b32 a, $4, 4;"
        " prmt.b32 t, a, $4, 0xC480; shl.b32 t, t, 2; and.b32 t, t, 0x81C081C0;"
        " mul.rn.bf16x2 $0, t, k;"
        " prmt.b32 t, a, $4, 0xD591; shl.b32 t, t, 2; and.b32 t, t, 0x81C081C0;"
        " mul.rn.bf16x2 $1, t, k;"
        " prmt.b32 t, a, $4, 0xE6A2; shl.b32 t, t, 2; and.b32 t, t, 0x81C081C0;"
        " mul.rn.bf16x2 $2, t, k;"
        " prmt.b32 t, a, $4, 0xF7B3; shl.b32 t, t, 2; and.b32 t, t, 0x81C081C0;"
        " mul.rn.bf16x2 $3, t, k; }",
        "=r,=r,=r,=r,r",
        [b],
        dtype=(gl.bfloat16, gl.bfloat16),
        is_pure=True,
        pack=4,
    )


@gluon.jit
def _load_sub(raw, scl, FMT: gl.constexpr, C: gl.constexpr, K0: gl.constexpr = 0,
              NK: gl.constexpr = GLUON_BLOCK_N):  # fmt: skip
    """The shared-memory loads of channels [256 C, 256 C + 256) of the tile's keys K0 ..
    K0 + NK - 1: (code bytes, scale bytes) in the decode layouts; for bf16 records both are
    the values."""
    lay: gl.constexpr = _dec_layout()
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    NB: gl.constexpr = raw.shape[0] * raw.shape[1] * 4  # bytes of the ring slot
    if FMT == 0:
        l3: gl.constexpr = gl.BlockedLayout([1, 1, 16], [2, 8, 2], [4, 1, 1], [2, 1, 0])
        sv = scl._reinterpret(gl.uint8, [BLOCK_N * 2, 16], plain).slice(K0, NK)
        sb = sv.slice(C * 8, 8, dim=1).load(gl.SliceLayout(2, l3))
        b = raw._reinterpret(gl.uint8, [NB // 256, 256], plain).slice(K0, NK).load(lay)
    elif FMT == 1:
        l3b: gl.constexpr = gl.BlockedLayout([1, 1, 16], [2, 16, 1], [4, 1, 1], [2, 1, 0])
        sb = scl.slice(K0, NK).slice(C * 16, 16, dim=1).load(gl.SliceLayout(2, l3b))
        lb: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
        b = raw._reinterpret(gl.uint8, [NB // 128, 128], plain).slice(K0, NK).load(lb)
    else:
        b = raw._reinterpret(gl.bfloat16, [NB // 512, 256], plain).slice(K0, NK).load(lay)
        sb = b
    return b, sb


@gluon.jit
def _decode_loaded(b, sb, FMT: gl.constexpr, NK: gl.constexpr = GLUON_BLOCK_N):
    """bf16 [NK, 256] from `_load_sub`'s bytes of NK keys, exact (SPEC section 4). Invalid
    keys were zero-filled by their masked copies (data and scale bytes), so they decode to
    zeros."""
    lay: gl.constexpr = _dec_layout()
    if FMT == 0:
        s16 = gl.where(sb == 0, 0x40, sb.to(gl.int16) << 7).to(gl.bfloat16, bitcast=True)
        s3 = gl.expand_dims(s16, 2).broadcast_to([NK, 8, 32])
        scp = gl.convert_layout(gl.reshape(s3, [NK, 256]), lay, assert_trivial=True)
        x = _e4m3_bf16(b) * scp
    elif FMT == 1:
        s1 = sb.to(gl.float8e4nv, bitcast=True).to(gl.float32).to(gl.bfloat16)
        s3b = gl.expand_dims(s1, 2).broadcast_to([NK, 16, 16])
        scp1 = gl.convert_layout(gl.reshape(s3b, [NK, 256]), lay, assert_trivial=True)
        lo4, hi4 = _e2m1_bf16(b)
        # groups of 8 channels: elements 0..3 from lo4, 4..7 from hi4 (each thread keeps its
        # registers: the result is the decode layout without data movement)
        j = gl.join(gl.reshape(lo4, [NK, 32, 4]), gl.reshape(hi4, [NK, 32, 4]))
        f = gl.reshape(gl.permute(j, [0, 1, 3, 2]), [NK, 256])
        x = gl.convert_layout(f, lay, assert_trivial=True) * scp1
    else:
        x = b
    return x


@gluon.jit
def _decode_sub(raw, scl, FMT: gl.constexpr, C: gl.constexpr):
    """bf16 [BLOCK_N, 256]: channels [256 C, 256 C + 256) of the tile's keys, decoded from the
    raw ring slot `raw` and its scale bytes `scl` in one step (SPEC section 4)."""
    b, sb = _load_sub(raw, scl, FMT, C)
    return _decode_loaded(b, sb, FMT)


@gluon.jit
def _decode_half0_fetch(raw_smem, rs, scl_smem, k_smem, ks, i, f_tile, fetch, n_w, sl_f, ok_f,
                        meta_smem, bars, w_ptr, w_page_stride, w_page_size, c_ptr,
                        c_page_stride, c_page_size, FMT: gl.constexpr, W_FMT: gl.constexpr,
                        C_FMT: gl.constexpr, KS: gl.constexpr,
                        FETCH_PAST_END: gl.constexpr):  # fmt: skip
    """The producer's share of ring index i: decode channels [0, 256) of ring slot rs (format
    FMT) into K stage ks and start the copies of ring index i + NRAW (the row's tile f_tile)
    into the same slot, once every producer thread holds half 0's bytes (a barrier) and
    consumer 1 holds half 1's (its arrival on the slot's loaded barrier). Unless
    FETCH_PAST_END, only where `fetch` (else an empty copy group keeps the per-tile
    wait_group counts). The wait sits between the decode and the copies: before the decode,
    the two would be one block of code, and their interleaved chains spill at 112
    registers."""
    b0, s0 = _load_sub(raw_smem.index(rs * 2), scl_smem.index(rs), FMT, 0)
    gl.thread_barrier()
    k_smem.index(ks * 2).store(_decode_loaded(b0, s0, FMT))
    # a static branch for FETCH_PAST_END: `FETCH_PAST_END or fetch` is a runtime value, and its
    # branch changed the one-item kernel's code (spills; offline compile, twenty-eighth session)
    if FETCH_PAST_END:  # noqa: SIM114
        mbarrier.wait(bars.index(_raw_loaded_bar(KS) + rs), (i // NRAW) & 1)
        _fetch(i + NRAW, f_tile, n_w, sl_f, ok_f, raw_smem, scl_smem, meta_smem, w_ptr,
               w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT,
               C_FMT)  # fmt: skip
    elif fetch:
        mbarrier.wait(bars.index(_raw_loaded_bar(KS) + rs), (i // NRAW) & 1)
        _fetch(i + NRAW, f_tile, n_w, sl_f, ok_f, raw_smem, scl_smem, meta_smem, w_ptr,
               w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT,
               C_FMT)  # fmt: skip
    else:
        async_copy.commit_group()


@gluon.jit
def _decode_half1(raw_smem, scl_smem, k_smem, bars, i, KS: gl.constexpr, FMT: gl.constexpr):
    """Consumer 1's share of tile i: channels [256, 512) of ring slot i % NRAW (format FMT)
    into K stage i % KS. The bytes are loaded once the producer says the slot landed; the
    slot is handed back (its copies for tile i + NRAW may start) as soon as every consumer 1
    thread holds them, before the wait for the K stage. The bytes of both 16-key steps are
    loaded first (a shared load stays after an earlier shared store); each step is decoded
    and stored on its own, so half the decoded registers are live at once."""
    rs = i % NRAW
    ks = i % KS
    mbarrier.wait(bars.index(_raw_landed_bar(KS) + rs), (i // NRAW) & 1)
    HK: gl.constexpr = BLOCK_N // 2
    ba, sa = _load_sub(raw_smem.index(rs * 2 + 1), scl_smem.index(rs), FMT, 1, 0, HK)
    bb, sb = _load_sub(raw_smem.index(rs * 2 + 1), scl_smem.index(rs), FMT, 1, HK, HK)
    gl.thread_barrier()
    mbarrier.arrive(bars.index(_raw_loaded_bar(KS) + rs), count=1)
    # both consumers finished tile i - KS, the last reader of this stage
    mbarrier.wait(bars.index(1 + KS + ks), ((i // KS) & 1) ^ 1, pred=i >= KS)
    dst = k_smem.index(ks * 2 + 1)
    dst.slice(0, HK).store(_decode_loaded(ba, sa, FMT, HK))
    dst.slice(HK, HK).store(_decode_loaded(bb, sb, FMT, HK))


@gluon.jit
def _c1_decode(i, lo, n_w, raw_smem, scl_smem, k_smem, bars, W_FMT: gl.constexpr,
               C_FMT: gl.constexpr, KS: gl.constexpr):  # fmt: skip
    """Consumer 1 decodes half 1 of the program's tile i (the row's tile lo + i) and arrives
    on the K stage's filled barrier (the producer's half 0 is the other arrival)."""
    if C_FMT == 3 or lo + i < n_w:
        _decode_half1(raw_smem, scl_smem, k_smem, bars, i, KS, W_FMT)
    else:
        _decode_half1(raw_smem, scl_smem, k_smem, bars, i, KS, C_FMT)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(1 + i % KS), count=1)


@gluon.jit
def _fetch(i, g, n_w, sl, ok, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT: gl.constexpr,
           C_FMT: gl.constexpr):  # fmt: skip
    """Start the copies of the program's tile i (the row's tile g) into ring slot i % NRAW;
    record the keys' validity."""
    rs = i % NRAW
    if C_FMT == 3 or g < n_w:
        _issue_copy(raw_smem, rs, scl_smem.index(rs), w_ptr, w_page_stride, w_page_size, sl,
                    ok, W_FMT)  # fmt: skip
    else:
        _issue_copy(raw_smem, rs, scl_smem.index(rs), c_ptr, c_page_stride, c_page_size, sl,
                    ok, C_FMT)  # fmt: skip
    meta_smem.index(rs).store(ok.to(gl.int32))
    async_copy.commit_group()


@gluon.jit
def _raw_lengths(t, swa_lens_ptr, comp_lens_ptr, HAS_COMP: gl.constexpr):
    """Row t's (window, compressed) lengths as stored (0 for the compressed one without a
    compressed cache)."""
    sw = gl.load(swa_lens_ptr + t)
    if HAS_COMP:
        cl = gl.load(comp_lens_ptr + t)
    else:
        cl = sw * 0
    return sw, cl


@gluon.jit
def _row_tiles(sw, cl, W, K):
    """(window length, window tiles, compressed length, tiles) of a row from its
    `_raw_lengths`, each length clamped to its table's width."""
    swa_len = gl.minimum(gl.maximum(sw, 0), W)
    n_w = gl.cdiv(swa_len, BLOCK_N)
    comp_len = gl.minimum(gl.maximum(cl, 0), K)
    return swa_len, n_w, comp_len, n_w + gl.cdiv(comp_len, BLOCK_N)


@gluon.jit
def _item_tiles(sw, cl, W, K):
    """(window tiles, tile count) of an item in invariant mode from its row's `_raw_lengths`:
    at least one (all-masked) tile, as `_row_lengths` gives it."""
    _swa_len, n_w, _comp_len, total = _row_tiles(sw, cl, W, K)
    return n_w, gl.maximum(total, 1)


@gluon.jit
def _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, num_splits, HAS_COMP: gl.constexpr,
                 SPLIT: gl.constexpr):  # fmt: skip
    """(window length, window tiles, compressed length, first tile, tile count, end tile) of
    this program: the row's tiles [0, total), or with SPLIT the contiguous slice
    [sp total / S, (sp + 1) total / S) of split sp = program_id(2) of S = num_splits."""
    sw, cl = _raw_lengths(t, swa_lens_ptr, comp_lens_ptr, HAS_COMP)
    swa_len, n_w, comp_len, total = _row_tiles(sw, cl, W, K)
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
def _copy_q(q_smem, q_ptr, t, stride_qt, stride_qh, hb, H):
    """cp.async the program's Q (heads hb x 64 .. + 64, heads >= H zero-filled) as two [64, 256]
    halves in channel order into `q_smem`, in a copy group of its own."""
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


@gluon.jit
def _first_tiles(t, swa_row, comp_row, swa_lens_ptr, W, comp_lens_ptr, K, w_num_slots,
                 c_num_slots, HAS_COMP: gl.constexpr, layout: gl.constexpr):  # fmt: skip
    """Invariant mode's row lengths `_row_lengths` (first tile 0), the (slot, validity) of
    tiles 0 and 1 and the slot vectors of tile 2 (`_tile_slot_loads`' pair, for
    `_tile_slots_of`), whose loads run beside the lengths, not after them: the window columns
    of tiles 0..2 and the compressed columns of compressed tiles 0..2 (which of them a tile
    holds follows from the window length)."""
    w0 = _spec_load(swa_row, 0, W, layout)
    w1 = _spec_load(swa_row, 1, W, layout)
    w2 = _spec_load(swa_row, 2, W, layout)
    if HAS_COMP:
        c0 = _spec_load(comp_row, 0, K, layout)
        c1 = _spec_load(comp_row, 1, K, layout)
        c2 = _spec_load(comp_row, 2, K, layout)
    else:
        c0 = w0
        c1 = w0
        c2 = w0
    swa_len, n_w, comp_len, lo, n, end = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K, 1,
                                                      HAS_COMP, False)  # fmt: skip
    sl_0, ok_0 = _first_slots(0, n_w, end, w0, c0, c1, c2, swa_len, comp_len, w_num_slots,
                              c_num_slots, HAS_COMP, layout)  # fmt: skip
    sl_1, ok_1 = _first_slots(1, n_w, end, w1, c0, c1, c2, swa_len, comp_len, w_num_slots,
                              c_num_slots, HAS_COMP, layout)  # fmt: skip
    # tile 2 as `_tile_slot_loads` gives it (its validity is worked out where it is used)
    ci = 2 - n_w
    cs_2 = gl.where(ci == 0, c0, gl.where(ci == 1, c1, c2))
    return swa_len, n_w, comp_len, lo, n, end, sl_0, ok_0, sl_1, ok_1, w2, cs_2


@gluon.jit
def _l2_prefetch(addr):
    """prefetch.global.L2 of each address (int64); returns a dummy."""
    return gl.inline_asm_elementwise(
        "prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [addr],
        dtype=gl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _prefetch_next_item(q_ptr, stride_qt, stride_qh, swa_ptr, stride_swa_t, W, swa_lens_ptr,
                        comp_ptr, stride_comp_t, K, comp_lens_ptr, t, hb, H,
                        HAS_COMP: gl.constexpr):  # fmt: skip
    """Into L2: the Q rows, slot-table rows and lengths of the program the GPU most likely
    starts next, an SM count after this one in launch order (program (t, hb) is
    number hb T + t), so that program's first loads hit L2. A hint: no value changes."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    lane = gl.arange(0, 128, layout=lay)
    nsm = gl.max(gl.inline_asm_elementwise("mov.u32 $0, %nsmid;", "=r,r", [lane],
                                           dtype=gl.int32, is_pure=True, pack=1), 0)  # fmt: skip
    rows = gl.num_programs(0)
    nxt = hb * rows + t.to(gl.int32) + nsm
    if nxt < rows * gl.num_programs(1):
        _prefetch_item(q_ptr, stride_qt, stride_qh, swa_ptr, stride_swa_t, W, swa_lens_ptr,
                       comp_ptr, stride_comp_t, K, comp_lens_ptr, (nxt % rows).to(gl.int64),
                       nxt // rows, H, HAS_COMP)  # fmt: skip


@gluon.jit
def _prefetch_item(q_ptr, stride_qt, stride_qh, swa_ptr, stride_swa_t, W, swa_lens_ptr,
                   comp_ptr, stride_comp_t, K, comp_lens_ptr, t2, hb2, H,
                   HAS_COMP: gl.constexpr):  # fmt: skip
    """Into L2: the Q rows, slot-table rows and lengths of item (row t2, head block hb2)."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    q_lay: gl.constexpr = gl.BlockedLayout([4], [32], [4], [0])
    lane = gl.arange(0, 128, layout=lay)
    # Q: 64 heads x 1 KB = 512 lines of 128 B, four a thread (heads past H read head H - 1's)
    line = gl.arange(0, 512, layout=q_lay)
    head = hb2 * BLOCK_H + line // 8
    qa = q_ptr + t2 * stride_qt + gl.minimum(head, H - 1) * stride_qh + (line % 8) * 64
    _l2_prefetch(qa.to(gl.int64))
    # the slot-table rows (a line a thread, repeated past the row's end) and the lengths
    sa = swa_ptr + t2 * stride_swa_t + gl.maximum(gl.minimum(lane * 32, W - 1), 0)
    _l2_prefetch(sa.to(gl.int64))
    _l2_prefetch((swa_lens_ptr + t2 + lane * 0).to(gl.int64))
    if HAS_COMP:
        ca = comp_ptr + t2 * stride_comp_t + gl.maximum(gl.minimum(lane * 32, K - 1), 0)
        _l2_prefetch(ca.to(gl.int64))
        _l2_prefetch((comp_lens_ptr + t2 + lane * 0).to(gl.int64))


@gluon.jit
def _publish_q(qbias_smem, bars):
    """Q's bias tile for the validity k-step (`_qk_masked`: 1 in column 0, zeros elsewhere),
    then, once Q's copy group (the oldest of the 3 in flight, issued before the first two
    tiles' records) landed, the arrival that publishes both to the consumers (barrier 0)."""
    bias_l: gl.constexpr = gl.BlockedLayout([1, 16], [32, 1], [4, 1], [1, 0])
    col0 = gl.arange(0, 16, layout=gl.SliceLayout(0, bias_l)) == 0
    qbias = gl.full([BLOCK_H, 16], 0.0, gl.float32, bias_l) + gl.where(col0, 1.0, 0.0)[None, :]
    qbias_smem.store(qbias.to(gl.bfloat16))
    async_copy.wait_group(2)
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(0), count=1)


@gluon.jit
def _produce_tiles(g, lo, n, n_w, end, ws_n, cs_n, swa_row, swa_len, comp_row, comp_len,
                   w_num_slots, c_num_slots, raw_smem, scl_smem, k_smem, meta_smem, kbias_smem,
                   bars, w_ptr, w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size,
                   W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
                   HAS_COMP: gl.constexpr, FETCH_PAST_END: gl.constexpr):  # fmt: skip
    """The producer's walk of one item: the row's tiles lo .. lo + n - 1 on ring indices
    g .. g + n - 1 (a ring index picks the raw slot, K stage and barrier phases), tiles lo and
    lo + 1 already fetched, (ws_n, cs_n) the slot loads of tile lo + NRAW. Each tile: wait for
    its records, say so to consumer 1, decode half 0 into its K stage, fetch the tile NRAW
    ahead into the slot, write the validity bias tile, arrive on the stage's filled barrier.
    FETCH_PAST_END: the last NRAW tiles fetch the (masked) tiles past the item; otherwise
    they fetch nothing, leaving the ring's next indices to the next item's first tiles."""
    row_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    bias_l: gl.constexpr = gl.BlockedLayout([1, 16], [32, 1], [4, 1], [1, 0])
    col0 = gl.arange(0, 16, layout=gl.SliceLayout(0, bias_l)) == 0
    for i in range(0, n):
        # the slot vectors of tile i + NRAW were loaded one iteration ago (their latency ran
        # during that iteration, off the producer's chain); load those of i + NRAW + 1
        sl_f, ok_f = _tile_slots_of(lo + i + NRAW, n_w, end, ws_n, cs_n, swa_len, comp_len,
                                    w_num_slots, c_num_slots, HAS_COMP, row_l)  # fmt: skip
        ws_n, cs_n = _tile_slot_loads(lo + i + NRAW + 1, n_w, swa_row, swa_len, comp_row,
                                      comp_len, HAS_COMP, row_l)  # fmt: skip
        gi = g + i
        ks = gi % KS
        rs = gi % NRAW
        async_copy.wait_group(NRAW - 1)
        gl.thread_barrier()
        # the slot's bytes landed (every producer thread's copies): consumer 1 may load half 1
        mbarrier.arrive(bars.index(_raw_landed_bar(KS) + rs), count=1)
        meta_i = meta_smem.index(rs).load(gl.SliceLayout(1, bias_l))
        # both consumers finished ring index gi - KS, the last reader of this stage
        mbarrier.wait(bars.index(1 + KS + ks), ((gi // KS) & 1) ^ 1, pred=gi >= KS)
        if C_FMT == 3 or lo + i < n_w:
            _decode_half0_fetch(raw_smem, rs, scl_smem, k_smem, ks, gi, lo + i + NRAW, i + NRAW < n,
                                n_w, sl_f, ok_f, meta_smem, bars, w_ptr, w_page_stride,
                                w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, W_FMT,
                                C_FMT, KS, FETCH_PAST_END)  # fmt: skip
        else:
            _decode_half0_fetch(raw_smem, rs, scl_smem, k_smem, ks, gi, lo + i + NRAW, i + NRAW < n,
                                n_w, sl_f, ok_f, meta_smem, bars, w_ptr, w_page_stride,
                                w_page_size, c_ptr, c_page_stride, c_page_size, C_FMT, W_FMT,
                                C_FMT, KS, FETCH_PAST_END)  # fmt: skip
        # the stage's validity k-step: column 0 is +0 for a valid key, -inf for an invalid one
        bad = col0[None, :] & (meta_i == 0)[:, None]
        kbias_smem.index(ks).store(gl.where(bad, -float("inf"), 0.0).to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(bars.index(1 + ks), count=1)


@gluon.jit
def _producer(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem, qbias_smem, p_smem,
              x_smem, bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
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
        _scale_log2,
        _out_ptr,
        _stride_ot,
        _stride_oh,
        _lse_ptr,
        _stride_lt,
        H,
        _part_o_ptr,
        _part_ml_ptr,
        num_splits,
        _n_rows,
        _q_desc,
        _out_desc,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    t = gl.program_id(0).to(gl.int64)
    hb = gl.program_id(1)
    row_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gl.static_assert(NRAW == 2, "the prologue fetches tiles 0 and 1 and keeps tile 2's slots")
    # Q as 2 [64, 256] halves in channel order, by cp.async in its own group, first: nothing it
    # waits for (the loop's first wait_group covers it; heads >= H zero-filled)
    _copy_q(q_smem, q_ptr, t, stride_qt, stride_qh, hb, H)
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
        ws_n, cs_n = _tile_slot_loads(lo + 2, n_w, swa_row, swa_len, comp_row, comp_len,
                                      HAS_COMP, row_l)  # fmt: skip
    else:
        # the slots of tiles 0..2 are loaded beside the lengths, not after them: the window
        # columns of tiles 0..2 and the compressed columns of compressed tiles 0..2 (which
        # of them a tile holds follows from the window length)
        swa_len, n_w, comp_len, lo, n, end, sl_0, ok_0, sl_1, ok_1, ws_n, cs_n = _first_tiles(
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
    _fetch(0, lo, n_w, sl_0, ok_0, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
    _fetch(1, lo + 1, n_w, sl_1, ok_1, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
           w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
    _publish_q(qbias_smem, bars)
    _produce_tiles(0, lo, n, n_w, end, ws_n, cs_n, swa_row, swa_len, comp_row, comp_len,
                   w_num_slots, c_num_slots, raw_smem, scl_smem, k_smem, meta_smem, kbias_smem,
                   bars, w_ptr, w_page_stride, w_page_size, c_ptr, c_page_stride, c_page_size,
                   W_FMT, C_FMT, KS, HAS_COMP, True)  # fmt: skip
    if not SPLIT:
        # idle from here to the program's end (the consumers' last tiles and stores)
        _prefetch_next_item(q_ptr, stride_qt, stride_qh, swa_ptr, stride_swa_t, W,
                            swa_lens_ptr, comp_ptr, stride_comp_t, K, comp_lens_ptr, t, hb, H,
                            HAS_COMP)  # fmt: skip
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
def _qk_masked(q_smem, k_smem, qbias_smem, kbias_smem, js, mma_s: gl.constexpr):
    """`_qk` of K stage js and, last, the validity k-step (Q's bias tile times the stage's):
    S + 0 = S exactly for a valid key, -inf for an invalid one (async token)."""
    s = _qk(q_smem, k_smem, js, mma_s)
    return warpgroup_mma(qbias_smem, kbias_smem.index(js).permute((1, 0)), s, is_async=True)


@gluon.jit
def _softmax(s, kval, m_i, l_i, scale_log2, mma_s: gl.constexpr):
    """Online softmax of one tile in base 2: (P bf16, rescale factor, new max, new sum). The
    running max is in units of log2: m = max(S) * scale_log2 (the softmax scale times
    log2(e)), so P = 2^(S scale_log2 - m) is one FMA and one ex2 a score. `kval` None: the
    invalid keys already score -inf (`_qk_masked`)."""
    if kval is not None:
        ok_j = kval.load(gl.SliceLayout(0, mma_s)) != 0
        s = gl.where(ok_j[None, :], s, -float("inf"))
    # rounding is monotone, so max(S) * scale_log2 is the max of the rounded products: one
    # multiply a head
    m_new = gl.maximum(m_i, gl.max(s, 1) * scale_log2)
    # a head with no valid key yet keeps m = -inf; shift by 0 so no inf - inf appears
    m_safe = gl.where(m_new == -float("inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_safe)
    p = gl.exp2(gl.fma(s, gl.full_like(s, scale_log2), -m_safe[:, None]))
    l_new = l_i * alpha + gl.sum(p, 1)
    return p.to(gl.bfloat16), alpha, m_new, l_new


@gluon.jit
def _sink_denom_lse(m_i, l_i, sink):
    """The softmax's end for a head: (denominator with the sink, natural-log lse), from the
    base-2 running max m_i and sum l_i; a head with no valid key gets (0, -inf)."""
    has = m_i > -float("inf")
    m_safe = gl.where(has, m_i, 0.0)
    denom = gl.where(has, l_i + gl.exp2(gl.fma(sink, gl.full_like(sink, LOG2E), -m_safe)), 0.0)
    lse = gl.where(has, (m_safe + gl.log2(gl.where(has, l_i, 1.0))) * LN2, -float("inf"))
    return denom, lse


@gluon.jit
def _softmax_handoff(s, j, kval, p_smem, x_smem, bars, m_i, l_i, scale_log2,
                     mma_s: gl.constexpr,
                     mma_o: gl.constexpr, PF: gl.constexpr,
                     ASYNC_READER: gl.constexpr):  # fmt: skip
    """Consumer 0's online softmax of its tile j and the hand-off of P (bf16) and the rescale
    factor (P buffer j % 2, free once the reader finished tile j - 2); returns (P, rescale
    factor in the accumulator's row layout, new max, new sum). A reader that takes P by wgmma
    from shared memory (the async proxy; ASYNC_READER) needs the proxy fence, one that loads
    it into registers does not."""
    p16, alpha, m_i, l_i = _softmax(s, kval, m_i, l_i, scale_log2, mma_s)
    ps = j % 2
    mbarrier.wait(bars.index(PF + 2 + ps), ((j // 2) & 1) ^ 1, pred=j >= 2)
    p_smem.index(ps).store(p16)
    x_smem.index(ps).store(alpha)
    if ASYNC_READER:
        fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(bars.index(PF + ps), count=1)
    return p16, gl.convert_layout(alpha, gl.SliceLayout(1, mma_o)), m_i, l_i


@gluon.jit
def _consumer0(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem, qbias_smem, p_smem,
               x_smem, bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
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
        scale_log2,
        out_ptr,
        stride_ot,
        stride_oh,
        lse_ptr,
        stride_lt,
        H,
        part_o_ptr,
        part_ml_ptr,
        num_splits,
        _n_rows,
        _q_desc,
        _out_desc,
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
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    _swa_len, _n_w, _comp_len, _lo, n, _end = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K,
                                                          num_splits, HAS_COMP, SPLIT)  # fmt: skip
    mbarrier.wait(bars.index(0), 0)
    acc, m_i, l_i = _c0_walk(q_smem, k_smem, qbias_smem, kbias_smem, p_smem, x_smem, bars, 0, n,
                             scale_log2, KS, mma_s, mma_o)  # fmt: skip
    if SPLIT:
        # the slice's partial state for the combine kernel: (m, l) with m in natural-log
        # units (the combine's), and acc, unnormalized
        oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_s)
        omask = oheads < H
        pidx = (t * H + oheads) * num_splits + gl.program_id(2)
        gl.store(part_ml_ptr + pidx * 2, m_i * LN2, mask=omask)
        gl.store(part_ml_ptr + pidx * 2 + 1, l_i, mask=omask)
        _store_part(acc, part_o_ptr, t, H, hb, num_splits, 0, mma_o)
    else:
        denom = _c0_denominators(m_i, l_i, sink_ptr, lse_ptr, t, stride_lt, hb, H, x_smem, bars,
                                 KS, row_s)  # fmt: skip
        # Q half 0 stages the output: this warpgroup's products have all completed
        _store_out(acc, gl.convert_layout(denom, gl.SliceLayout(1, mma_o)), q_smem.index(0),
                   out_ptr, t, stride_ot, stride_oh, hb, H, 0)  # fmt: skip
    return (m_i,)


@gluon.jit
def _c0_walk(q_smem, k_smem, qbias_smem, kbias_smem, p_smem, x_smem, bars, g, n, scale_log2,
             KS: gl.constexpr, mma_s: gl.constexpr, mma_o: gl.constexpr):  # fmt: skip
    """Consumer 0's walk of one item's n tiles on ring indices g .. g + n - 1 (Q published):
    Q.K^T of each tile (tile j + 1's issued before tile j's softmax, so the tensor cores run
    during it), the online softmax, P and the rescale factor to consumer 1, P.V over channels
    [0, 256); returns (acc, running max, running sum)."""
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    PF: gl.constexpr = _p_bars(KS)
    m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_H], gl.float32, row_s)
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
    mbarrier.wait(bars.index(1 + g % KS), (g // KS) & 1)
    s_cur = warpgroup_mma_wait(0, deps=[_qk_masked(q_smem, k_smem, qbias_smem, kbias_smem,
                                                    g % KS, mma_s)])  # fmt: skip
    for j in range(0, n - 1):
        gj = g + j
        js = gj % KS
        # Q.K^T of tile j + 1 runs on the tensor cores during this tile's softmax
        jn = (gj + 1) % KS
        mbarrier.wait(bars.index(1 + jn), ((gj + 1) // KS) & 1)
        s_tok = _qk_masked(q_smem, k_smem, qbias_smem, kbias_smem, jn, mma_s)
        p16, alpha_o, m_i, l_i = _softmax_handoff(s_cur, gj, None, p_smem, x_smem,
                                                  bars, m_i, l_i, scale_log2, mma_s, mma_o, PF,
                                                  False)  # fmt: skip
        tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2),
                            acc * alpha_o[:, None], is_async=True)  # fmt: skip
        acc, s_cur = warpgroup_mma_wait(0, deps=[tok, s_tok])
        gl.thread_barrier()
        mbarrier.arrive(bars.index(1 + KS + js), count=1)
    # the last tile: no look-ahead product (its tensor-core time would delay this P.V)
    jl = g + n - 1
    js = jl % KS
    p16, alpha_o, m_i, l_i = _softmax_handoff(s_cur, jl, None, p_smem, x_smem,
                                              bars, m_i, l_i, scale_log2, mma_s, mma_o, PF,
                                              False)  # fmt: skip
    tok = warpgroup_mma(gl.convert_layout(p16, p_op), k_smem.index(js * 2),
                        acc * alpha_o[:, None], is_async=True)  # fmt: skip
    acc = warpgroup_mma_wait(0, deps=[tok])
    gl.thread_barrier()
    mbarrier.arrive(bars.index(1 + KS + js), count=1)
    return acc, m_i, l_i


@gluon.jit
def _c0_denominators(m_i, l_i, sink_ptr, lse_ptr, t, stride_lt, hb, H, x_smem, bars,
                     KS: gl.constexpr, row_s: gl.constexpr):  # fmt: skip
    """Consumer 0's end of an item: the denominators with the sink (sink in the denominator
    only) to consumer 1 (barrier PF + 4) and the lse to global memory; returns the
    denominators."""
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=row_s)
    omask = oheads < H
    sink = gl.load(sink_ptr + oheads, mask=omask, other=0.0)
    denom, lse = _sink_denom_lse(m_i, l_i, sink)
    x_smem.index(2).store(denom)
    gl.thread_barrier()
    mbarrier.arrive(bars.index(_p_bars(KS) + 4), count=1)
    gl.store(lse_ptr + t * stride_lt + oheads, lse, mask=omask)
    return denom


@gluon.jit
def _rcp_approx(x):
    """rcp.approx.ftz.f32 (MUFU.RCP): the reciprocal inside div.full.f32's sequence."""
    return gl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x],
                                     dtype=gl.float32, is_pure=True, pack=1)  # fmt: skip


@gluon.jit
def _stage_bf16(acc, denom, stage):
    """acc / denom (fp32 [64, 256] in the P.V accumulator's layout) as bf16 into `stage`
    ([64, 256] bf16 shared memory), the division as `_store_out` states it."""
    ad = gl.abs(denom)
    c = gl.where(ad > 2.0**126, 0.25, gl.where(ad < 2.0**-126, 16777216.0, 1.0))
    r = _rcp_approx(denom * c)
    q = (acc * c[:, None]) * r[:, None]
    stage.store(gl.where(denom[:, None] > 0.0, q, 0.0).to(gl.bfloat16))


@gluon.jit
def _store_out_tma(acc, denom, stage, out_desc, t, hb, col0: gl.constexpr):
    """`_store_out` by one bulk tensor store: acc / denom as bf16 into `stage`, then the
    [64, 256] block to output channels [col0, col0 + 256) of the item's heads through the
    [T, H, D] descriptor `out_desc` (heads past H clipped by it); returns once the store has
    read `stage` (every thread past a barrier), so `stage` may be written again."""
    _stage_bf16(acc, denom, stage)
    fence_async_shared()
    gl.thread_barrier()
    tma.async_copy_shared_to_global(out_desc, [t.to(gl.int32), hb * BLOCK_H, col0],
                                    _as_box(stage))  # fmt: skip
    tma.store_wait(0)
    gl.thread_barrier()


@gluon.jit
def _as_box(half):
    """A [64, 256] bf16 Q or output half in shared memory as the [1, 64, 256] box of a
    [T, H, D] tensor descriptor (the same bytes and swizzle)."""
    lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([1, BLOCK_H, 256], gl.bfloat16)
    return half._reinterpret(gl.bfloat16, [1, BLOCK_H, 256], lay)


@gluon.jit
def _store_out(acc, denom, stage, out_ptr, t, stride_ot, stride_oh, hb, H, col0):
    """acc / denom (fp32 [64, 256] in the P.V accumulator's layout) as bf16 into output
    channels [col0, col0 + 256) of the program's heads, through `stage` (a [64, 256] bf16
    shared buffer no one reads any more: the Q half whose last product has completed).

    The division is div.full.f32's, from one reciprocal per head instead of one division
    sequence per element (bitwise the same): both operands scaled by 1/4 when |denom| >
    2^126, by 2^24 when |denom| < 2^-126, then acc * rcp.approx(denom). The staging turns
    the accumulator layout's 4-byte stores (a warp's store: 8 heads x 16 B, 64 per thread;
    the program's last microseconds went to the store queue's throttle) into 16-byte stores of
    whole rows (16 per thread)."""
    _stage_bf16(acc, denom, stage)
    gl.thread_barrier()
    st_l: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    o = stage.load(st_l)
    oheads = hb * BLOCK_H + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, st_l))
    oc = gl.arange(0, 256, layout=gl.SliceLayout(0, st_l))
    ptrs = out_ptr + t * stride_ot + oheads[:, None] * stride_oh + col0 + oc[None, :]
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
def _c1_walk(g, j0, n, lo, n_w, raw_smem, scl_smem, k_smem, p_smem, x_smem, bars,
             W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
             mma_o: gl.constexpr):  # fmt: skip
    """Consumer 1's walk of one item's n tiles (the row's tiles lo .. lo + n - 1) on ring
    indices g .. g + n - 1: in iteration j, half 1 of tile j + KS - 1's decode (before its
    wait for P: the stage it fills was released by tile j - 1), then for tile j the rescale
    and P.V over channels [256, 512); iterations from j0 (-(KS - 1): the item's first
    KS - 1 decodes first; 0: they were done before). Returns the accumulator."""
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    PF: gl.constexpr = _p_bars(KS)
    LA: gl.constexpr = KS - 1
    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)
    for j in range(j0, n):
        if j + LA < n:
            _c1_decode(g + j + LA, lo - g, n_w, raw_smem, scl_smem, k_smem, bars, W_FMT, C_FMT,
                       KS)  # fmt: skip
        if j >= 0:
            gj = g + j
            js = gj % KS
            ps = gj % 2
            mbarrier.wait(bars.index(PF + ps), (gj // 2) & 1)
            alpha = x_smem.index(ps).load(row_o)
            # P into registers (no proxy fence on consumer 0's side; the same bits as P taken
            # from shared memory by the wgmma, nineteenth session)
            p = p_smem.index(ps).load(p_op)
            tok = warpgroup_mma(p, k_smem.index(js * 2 + 1), acc * alpha[:, None],
                                is_async=True)  # fmt: skip
            acc = warpgroup_mma_wait(0, deps=[tok])
            gl.thread_barrier()
            mbarrier.arrive(bars.index(PF + 2 + ps), count=1)
            mbarrier.arrive(bars.index(1 + KS + js), count=1)
    return acc


@gluon.jit
def _consumer1(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem, qbias_smem, p_smem,
               x_smem, bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr, KS: gl.constexpr,
               SPLIT: gl.constexpr):  # fmt: skip
    """Half 1 of each tile's decode (a tile ahead of consumer 0's need), and P.V over
    channels [256, 512) with P and the rescale factor from consumer 0."""
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
        _scale_log2,
        out_ptr,
        stride_ot,
        stride_oh,
        _lse_ptr,
        _stride_lt,
        H,
        part_o_ptr,
        _part_ml_ptr,
        num_splits,
        _n_rows,
        _q_desc,
        _out_desc,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    t = gl.program_id(0).to(gl.int64)
    hb = gl.program_id(1)
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    _swa_len, n_w, _comp_len, lo, n, _end = _row_lengths(t, swa_lens_ptr, W, comp_lens_ptr, K,
                                                        num_splits, HAS_COMP, SPLIT)  # fmt: skip
    PF: gl.constexpr = _p_bars(KS)
    # half 1 of tiles 0 .. KS - 2 first
    acc = _c1_walk(0, -(KS - 1), n, lo, n_w, raw_smem, scl_smem, k_smem, p_smem, x_smem, bars,
                   W_FMT, C_FMT, KS, mma_o)  # fmt: skip
    if SPLIT:
        _store_part(acc, part_o_ptr, t, H, hb, num_splits, 1, mma_o)
    else:
        mbarrier.wait(bars.index(PF + 4), 0)
        denom = x_smem.index(2).load(row_o)
        # Q half 1 stages the output: consumer 0 sent the denominator after its last product
        _store_out(acc, denom, q_smem.index(1), out_ptr, t, stride_ot, stride_oh, hb, H, 256)


# ---- persistent mode ---------------------------------------------------------------------
# min(items, SMs) programs; program p takes the items p, p + P, ... (item w: row w % T, head
# block w // T, the one-item grid's launch order). The raw slots, K stages and P buffers run on
# across a program's items by ring index (an item's tiles take the indices after its
# predecessor's), so the producer gathers and decodes the next item's first tiles, and
# consumer 1 decodes half 1 of its first KS - 1, while the consumers finish the current one.
# Each item's arithmetic is the one-item partitions': every row gets the same bits whatever
# the grid.


@gluon.jit
def _item_rc(w, n_rows):
    """(row int64, head block) of item w."""
    return (w % n_rows).to(gl.int64), w // n_rows


@gluon.jit
def _producer_items(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem, qbias_smem,
                    p_smem, x_smem, bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr,
                    KS: gl.constexpr, SPLIT: gl.constexpr):  # fmt: skip
    """`_producer` over the program's items: Q by cp.async for the first item only (consumer 0
    loads the later items' Q by TMA); an item's first two gathers wait until consumer 1 has
    loaded the ring slots' previous tiles; the next item's Q rows, slot-table rows and lengths
    are prefetched into L2 at each item's start."""
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
        _scale_log2,
        _out_ptr,
        _stride_ot,
        _stride_oh,
        _lse_ptr,
        _stride_lt,
        H,
        _part_o_ptr,
        _part_ml_ptr,
        _num_splits,
        n_rows,
        _q_desc,
        _out_desc,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    row_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gl.static_assert(NRAW == 2, "an item's prologue fetches tiles 0 and 1, keeps tile 2's slots")
    n_prog = gl.num_programs(0)
    items = n_rows * gl.cdiv(H, BLOCK_H)
    g = gl.program_id(0) * 0  # the item's first ring index
    k = g  # the program's item count so far
    for w in range(gl.program_id(0), items, n_prog):
        t, hb = _item_rc(w, n_rows)
        if k == 0:
            _copy_q(q_smem, q_ptr, t, stride_qt, stride_qh, hb, H)
        swa_row = swa_ptr + t * stride_swa_t
        comp_row = comp_ptr + t * stride_comp_t
        swa_len, n_w, comp_len, _lo, n, end, sl_0, ok_0, sl_1, ok_1, ws_n, cs_n = _first_tiles(
            t, swa_row, comp_row, swa_lens_ptr, W, comp_lens_ptr, K, w_num_slots, c_num_slots,
            HAS_COMP, row_l,
        )  # fmt: skip
        # ring indices g and g + 1: their slots are free once consumer 1 loaded g - 2, g - 1
        for x in gl.static_range(NRAW):
            mbarrier.wait(bars.index(_raw_loaded_bar(KS) + (g + x) % NRAW),
                          (((g + x) // NRAW) & 1) ^ 1, pred=g + x >= NRAW)  # fmt: skip
        _fetch(g, 0, n_w, sl_0, ok_0, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
               w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
        _fetch(g + 1, 1, n_w, sl_1, ok_1, raw_smem, scl_smem, meta_smem, w_ptr, w_page_stride,
               w_page_size, c_ptr, c_page_stride, c_page_size, W_FMT, C_FMT)  # fmt: skip
        if k == 0:
            _publish_q(qbias_smem, bars)
        if w + n_prog < items:
            t2, hb2 = _item_rc(w + n_prog, n_rows)
            _prefetch_item(q_ptr, stride_qt, stride_qh, swa_ptr, stride_swa_t, W, swa_lens_ptr,
                           comp_ptr, stride_comp_t, K, comp_lens_ptr, t2, hb2, H,
                           HAS_COMP)  # fmt: skip
        _produce_tiles(g, 0, n, n_w, end, ws_n, cs_n, swa_row, swa_len, comp_row, comp_len,
                       w_num_slots, c_num_slots, raw_smem, scl_smem, k_smem, meta_smem,
                       kbias_smem, bars, w_ptr, w_page_stride, w_page_size, c_ptr,
                       c_page_stride, c_page_size, W_FMT, C_FMT, KS, HAS_COMP,
                       False)  # fmt: skip
        g += n
        k += 1
    async_copy.wait_group(0)


@gluon.jit
def _consumer0_items(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem, qbias_smem,
                     p_smem, x_smem, bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr,
                     KS: gl.constexpr, SPLIT: gl.constexpr):  # fmt: skip
    """`_consumer0` over the program's items. Its output half goes out by one bulk store
    (`_store_out_tma`); then it loads the next item's Q by TMA: half 0 at once (its own store
    has read it), half 1 once consumer 1's store has read that half (barrier Q free). The
    next item's lengths are loaded at the item's start, used at its end."""
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
        scale_log2,
        _out_ptr,
        _stride_ot,
        _stride_oh,
        lse_ptr,
        stride_lt,
        H,
        _part_o_ptr,
        _part_ml_ptr,
        _num_splits,
        n_rows,
        q_desc,
        out_desc,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    n_prog = gl.num_programs(0)
    items = n_rows * gl.cdiv(H, BLOCK_H)
    g = gl.program_id(0) * 0
    k = g
    t0, _hb0 = _item_rc(gl.program_id(0), n_rows)
    sw0, cl0 = _raw_lengths(t0, swa_lens_ptr, comp_lens_ptr, HAS_COMP)
    _n_w, n = _item_tiles(sw0, cl0, W, K)
    for w in range(gl.program_id(0), items, n_prog):
        t, hb = _item_rc(w, n_rows)
        has_next = w + n_prog < items
        t2, hb2 = _item_rc(gl.minimum(w + n_prog, items - 1), n_rows)
        sw2, cl2 = _raw_lengths(t2, swa_lens_ptr, comp_lens_ptr, HAS_COMP)
        if k == 0:
            mbarrier.wait(bars.index(0), 0)
        else:
            mbarrier.wait(bars.index(_qtma_bar(KS)), (k - 1) & 1)
        acc, m_i, l_i = _c0_walk(q_smem, k_smem, qbias_smem, kbias_smem, p_smem, x_smem, bars,
                                 g, n, scale_log2, KS, mma_s, mma_o)  # fmt: skip
        denom = _c0_denominators(m_i, l_i, sink_ptr, lse_ptr, t, stride_lt, hb, H, x_smem, bars,
                                 KS, row_s)  # fmt: skip
        _store_out_tma(acc, gl.convert_layout(denom, gl.SliceLayout(1, mma_o)),
                       q_smem.index(0), out_desc, t, hb, 0)  # fmt: skip
        # the next item's Q: rows t2 H + hb2 64 .. + 64 of the [T H, D] descriptor (past a
        # row's H heads the next row's heads, whose outputs are never stored). Two blocks: the
        # measured code (twenty-seventh session's lab; offline, one block drops the proxy
        # fence before half 1's load and compiles to other code)
        if has_next:
            mbarrier.expect(bars.index(_qtma_bar(KS)), 2 * BLOCK_H * 256 * 2)
            tma.async_copy_global_to_shared(
                q_desc,
                [t2.to(gl.int32) * H + hb2 * BLOCK_H, 0],
                bars.index(_qtma_bar(KS)),
                q_smem.index(0),
            )
        if has_next:
            mbarrier.wait(bars.index(_qfree_bar(KS)), k & 1)
            tma.async_copy_global_to_shared(
                q_desc,
                [t2.to(gl.int32) * H + hb2 * BLOCK_H, 256],
                bars.index(_qtma_bar(KS)),
                q_smem.index(1),
            )
        g += n
        k += 1
        _n_w2, n = _item_tiles(sw2, cl2, W, K)


@gluon.jit
def _consumer1_items(a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem, qbias_smem,
                     p_smem, x_smem, bars, W_FMT: gl.constexpr, C_FMT: gl.constexpr,
                     KS: gl.constexpr, SPLIT: gl.constexpr):  # fmt: skip
    """`_consumer1` over the program's items. Its output half goes out by one bulk store from
    Q half 1, which is then free for the next item's Q (barrier Q free); before its next
    item's first P it decodes half 1 of that item's first KS - 1 tiles."""
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
        _scale_log2,
        _out_ptr,
        _stride_ot,
        _stride_oh,
        _lse_ptr,
        _stride_lt,
        H,
        _part_o_ptr,
        _part_ml_ptr,
        _num_splits,
        n_rows,
        _q_desc,
        out_desc,
    ) = a
    HAS_COMP: gl.constexpr = C_FMT != 3
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 256, 16]
    )
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    PF: gl.constexpr = _p_bars(KS)
    LA: gl.constexpr = KS - 1
    n_prog = gl.num_programs(0)
    items = n_rows * gl.cdiv(H, BLOCK_H)
    g = gl.program_id(0) * 0
    k = g
    t0, _hb0 = _item_rc(gl.program_id(0), n_rows)
    sw0, cl0 = _raw_lengths(t0, swa_lens_ptr, comp_lens_ptr, HAS_COMP)
    n_w, n = _item_tiles(sw0, cl0, W, K)
    for w in range(gl.program_id(0), items, n_prog):
        t, hb = _item_rc(w, n_rows)
        has_next = w + n_prog < items
        t2, _hb2 = _item_rc(gl.minimum(w + n_prog, items - 1), n_rows)
        sw2, cl2 = _raw_lengths(t2, swa_lens_ptr, comp_lens_ptr, HAS_COMP)
        # the first item decodes its first LA tiles first; a later item's were decoded at the
        # previous item's end
        acc = _c1_walk(g, gl.where(k == 0, -LA, 0), n, 0, n_w, raw_smem, scl_smem, k_smem,
                       p_smem, x_smem, bars, W_FMT, C_FMT, KS, mma_o)  # fmt: skip
        mbarrier.wait(bars.index(PF + 4), k & 1)
        denom = x_smem.index(2).load(row_o)
        _store_out_tma(acc, denom, q_smem.index(1), out_desc, t, hb, 256)
        mbarrier.arrive(bars.index(_qfree_bar(KS)), count=1)
        n_w2, n2 = _item_tiles(sw2, cl2, W, K)
        if has_next:
            for x in gl.static_range(LA):
                if x < n2:
                    _c1_decode(g + n + x, -(g + n), n_w2, raw_smem, scl_smem, k_smem, bars,
                               W_FMT, C_FMT, KS)  # fmt: skip
        g += n
        k += 1
        n = n2
        n_w = n_w2


@gluon.jit
def _gluon_sparse_attn_kernel(
    q_ptr, stride_qt, stride_qh,  # bf16 q; strides in elements
    # the page sizes are constexprs: one compile per pair of cache page sizes
    w_ptr, w_page_stride, w_page_size: gl.constexpr, w_num_slots,
    swa_ptr, stride_swa_t, swa_lens_ptr, W,
    c_ptr, c_page_stride, c_page_size: gl.constexpr, c_num_slots,
    comp_ptr, stride_comp_t, comp_lens_ptr, K,
    sink_ptr, scale_log2,
    out_ptr, stride_ot, stride_oh, lse_ptr, stride_lt,  # bf16 out
    H,
    part_o_ptr, part_ml_ptr, num_splits,  # SPLIT: fp32 [T, H, splits, D], [T, H, splits, 2]
    n_rows, q_desc, out_desc,  # PERSISTENT: T; bf16 Q as [T H, D], the output as [T, H, D]
    W_FMT: gl.constexpr, C_FMT: gl.constexpr, SPLIT: gl.constexpr,
    PERSISTENT: gl.constexpr = False, GDC: gl.constexpr = False,
):  # fmt: skip
    gluon_enter_dependent(GDC)
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
    # the keys' validity as a 17th k-step of Q.K^T: column 0 of Q's bias tile is 1, column 0 of
    # a K stage's bias tile is 0 for a valid key and -inf for an invalid one (the rest zeros),
    # so S = Q.K^T + 0 exactly for a valid key and -inf for an invalid one (whose zero-filled
    # record gives Q.K^T = 0): the softmax needs no validity load
    b_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 16], gl.bfloat16)
    qb_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 16], gl.bfloat16)
    kbias_smem = gl.allocate_shared_memory(gl.bfloat16, [KS, BLOCK_N, 16], b_lay)
    qbias_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_H, 16], qb_lay)
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_H, BLOCK_N], p_lay)
    x_smem = gl.allocate_shared_memory(gl.float32, [3, BLOCK_H], plain1)
    # barriers: 0 Q stored; 1 + s K stage s filled; 1 + KS + s stage s released (2 arrivals);
    # PF + b P buffer b filled; PF + 2 + b P buffer b consumed; PF + 4 denominator stored;
    # PF + 5 + r raw slot r landed (producer); PF + 5 + NRAW + r raw slot r's half 1 loaded
    # (consumer 1); PERSISTENT: then Q free (consumer 1's output store has read Q half 1) and a
    # later item's Q landed (TMA). A K stage is filled by two arrivals: the producer's half 0,
    # consumer 1's half 1.
    PF: gl.constexpr = _p_bars(KS)
    NB: gl.constexpr = _qtma_bar(KS) + 1 if PERSISTENT else _raw_loaded_bar(KS) + NRAW
    bars = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    for b in gl.static_range(1, PF):
        mbarrier.init(bars.index(b), count=2)
    for b in gl.static_range(PF, NB):
        mbarrier.init(bars.index(b), count=1)
    fence_async_shared()
    gl.thread_barrier()
    # the page sizes reach the partitions as constants (a constexpr in this tuple does not
    # compile; `gl.full` gives a constant each partition rematerializes), so a record's page
    # and offset are a division by a constant, a shift for a power of two, not the runtime
    # division (I2F, MUFU.RCP, F2I and fix-ups) that was on the producer's chain (H200,
    # twentieth session: 0.7-1.2% faster at T >= 1024, same bits)
    w_ps = gl.full([], w_page_size, gl.int32)
    c_ps = gl.full([], c_page_size, gl.int32)
    a = (q_ptr, stride_qt, stride_qh, w_ptr, w_page_stride, w_ps, w_num_slots, swa_ptr,
         stride_swa_t, swa_lens_ptr, W, c_ptr, c_page_stride, c_ps, c_num_slots,
         comp_ptr, stride_comp_t, comp_lens_ptr, K, sink_ptr, scale_log2, out_ptr, stride_ot,
         stride_oh, lse_ptr, stride_lt, H, part_o_ptr, part_ml_ptr, num_splits, n_rows, q_desc,
         out_desc)  # fmt: skip
    # partitions: consumer 0 (the default, 4 warps), consumer 1 and the producer (4 warps each);
    # their arguments are spelled out in each tuple (a tuple held in a variable loses its
    # constexprs)
    if PERSISTENT:
        gl.warp_specialize([
            (_consumer0_items, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem,
                                qbias_smem, p_smem, x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
            (_consumer1_items, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem,
                                qbias_smem, p_smem, x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
            (_producer_items, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem,
                               qbias_smem, p_smem, x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
        ], [4, 4], [C1_REGS, PRODUCER_REGS])  # fmt: skip
    else:
        gl.warp_specialize([
            (_consumer0, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem,
                          qbias_smem, p_smem, x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
            (_consumer1, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem,
                          qbias_smem, p_smem, x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
            (_producer, (a, q_smem, k_smem, raw_smem, scl_smem, meta_smem, kbias_smem,
                         qbias_smem, p_smem, x_smem, bars, W_FMT, C_FMT, KS, SPLIT)),
        ], [4, 4], [C1_REGS, PRODUCER_REGS])  # fmt: skip
