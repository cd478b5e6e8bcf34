# mypy: disable-error-code="no-untyped-def"
"""Hopper (sm_90a) Gluon kernel of the paged indexer logits, MXFP4 keys, fp16 path.

Contract: the spans of the Triton kernel (`triton_kernels.py`, `SPAN` = 16 tiles of 64
entries): program (t, j) scores row t against TILES / SPAN spans from span j * TILES / SPAN,
on the fp16 path of the module docstring there, with the same operands, the same tensor-core
instruction shape (m64 n HI_PAD k16, keys as the register A operand, the folded queries in
shared memory as B, low nibbles then high nibbles, K ascending), the same ReLU, head weights,
head-sum tree (the reduction of one accumulator layout) and power-of-two factors, so the logits
it writes are the Triton fast path's bits. It scores every span on the fast path first and
records, per span, whether that was the right path (the row's queries and every visible key's
scale bytes of the span in the fast path's range: the test of `_span_in_fast_range` and
`_fold_queries`). A visible key the producer did not read (its page is outside the cache) is
zero-filled, so its scale bytes are out of range too (the consumer looks up no page). After the
program's tiles, consumer 0 scores the spans that failed the test again on the Triton kernel's
general path (`_general_spans`: exact bf16 keys, the unscaled queries, the same instruction
shape and head-sum tree; its loads read nothing outside the cache), over the fast path's
stores. So every span ends with the bits the Triton kernel alone gives, in one launch; `path`
records the path of each span (1 fp16, 2 general) for the tests.

Structure (warp specialized; why: the Triton loop is bound by its serial per-tile chain of
cp.async waits, barriers and waited tensor-core groups, not by memory or the decode):
- producer (1 warp beside one consumer warpgroup, a warpgroup beside two: `_producer_warps`;
  the same values either way): first the page of every tile of the program (one block-table
  load for all of them, kept in shared memory: no tile's requests wait on a global load); then
  per tile, waits for a free ring stage, then one cp.async gather of the tile's 4,096 key bytes
  (one page block: a tile lies in one page) into the stage, completing on the stage's mbarrier
  (one asynchronous arrival per thread); the tile's 256 scale bytes are loaded into its
  registers (2 keys a lane on one warp, a key a lane pair on four) at the same time. Then, for
  the previous tile, per
  key: the four fp16x2 block factors 2^(d + 15) (d = scale byte - the key's largest byte mk,
  built as fp32 exponent bits and converted to fp16: exact on the fast path's range, the Triton
  kernel's factor), the key's fp32 factor 2^(clamp(mk, 10, 250) - 136) and the span's range
  test on its visible keys (`_span_in_fast_range`), once a key where the 4 consumer lanes
  sharing a key's row would each do it; the factors go into the stage beside the key bytes and
  the producer arrives on the stage's mbarrier once more (32 x warps + 1 arrivals). The
  ring's stage, phase and span of tile i are `i & (STAGES - 1)`, `i >> log2(STAGES)` and
  `i >> log2(SPAN)`: the tile index is never negative, and the signed `%` and `//` kept sign
  fix-ups (the producer's tile loop 158 -> 146 instructions; H200, twenty-sixth session: 64 x
  32K 0.5-0.7% faster, 32 x 32K 3.6%). The range bits stay in
  its registers and reach consumer 0 once, at the end (shared memory and an mbarrier).
  Tiles past the row's visible entries or with a page outside the cache are masked (zero-fill,
  nothing read). The key bytes land swizzled (16-byte block b of entry e in slot
  b ^ ((e >> 1) & 3)), so the consumer's 2-byte loads meet no bank conflicts.
- consumers (NC warpgroups, 1 or 2; consumer c takes tiles c, c + NC, ...): consumer 0 folds
  the row's queries into shared memory once (the others wait on an mbarrier), then per tile
  each waits for its stage, loads the packed bytes (two ldmatrix: the byte pairs of a block are
  in the Triton kernel's operand order, `_key_byte` there, which puts a thread's four bytes of
  a block side by side), its keys' factor words and fp32 factors, releases the stage (one
  barrier of its 4 warps), decodes, runs the two tensor-core products and the epilogue (mask,
  store, group maximum). The loop is unrolled by the ring's STAGES, so a tile's stage and
  barrier addresses are constants. The column masks are int32 compares of the tile's rows against
  tile-relative bounds (written on the columns, the compiler widens them to 64 bits).
- the group maxima: each warp's largest logit of its 16 entries goes to a register slot per
  tile (NaN-propagating maximum); the keys and the maximum over the 4 warps are taken once
  every 32 tiles and each consumer stores its own tiles' maxima (no shared memory, barrier or
  key conversion per tile, where the Triton kernel has all three).
- a program takes TILES = 16, 32, 64 or 128 tiles (one to eight spans; one path decision per
  span, from the producer's range bits and the row's query test; the bits of one program are
  one int32, so at most 512 tiles); `gluon_launch.gluon_config` picks the shape.
- the general path (rare: scales or queries outside the fp16 path's range) runs in consumer 0
  once both consumers are done (mbarrier xbar 2 with two), with plain loads and one
  synchronous product a 32-channel scale block, its bf16 queries in the fp16 path's query
  buffers (free by then).
With one consumer, four programs share an SM (64 registers a thread at launch: the consumer
runs with 104), so one program's waits are covered by the others' work; with two, two programs
(the consumers run with 88 and 80), which lowers the latency of a grid of few programs (one
row). Measured on the H200: BENCHMARKS.md, issue 12, sixth, seventh, ninth and thirteenth
rounds; the factors in the producer: the package README, tenth session (256 x 1M: 9.32 -> 8.10
ms); the pages loaded once: BENCHMARKS.md, issue 12, fourteenth session (256 x 1M logits
1.4-3.3% faster, 64 x 32K unchanged; the producer's tile loop 172 -> 158 instructions); the
general path in the kernel, no Triton launch after it: the same section (fused one row at 1M
3.2-3.9 us faster, the rest unchanged within the spread).

Programmatic dependent launch (`ds41_cache.ops.launch`, constexpr GDC): the first statement
waits for the previous kernel of the stream and lets the next launch be placed, in the default
warps before `warp_specialize` starts the other partitions.
"""

import triton.language as tl
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

GLUON_BLOCK_N = 64
GLUON_SPAN = 16  # tiles per fast/general decision (the Triton kernel's TILES)
GLUON_STAGES = 4  # ring stages (5,376 bytes each: key bytes, factor words, key factors)
GLUON_NUM_WARPS = 4
# Registers: every thread of the 8 warps (a 1-warp producer occupies a warpgroup) is capped
# at GLUON_MAXNREG, the producer drops to PRODUCER_REGS and the consumer gets the rest (2 *
# 64 - 24 = 104, no spills), so 65,536 / (256 * GLUON_MAXNREG) = 4 programs fit an SM (80: 3
# programs, 6-7% slower on the H200; 96 with 3 stages: 2 programs, ~35% slower).
GLUON_MAXNREG = 64
GLUON_PRODUCER_REGS = 24
# With two consumer warpgroups (12 warps at 64 registers: 2 programs an SM) the second one runs
# with GLUON_CONSUMER_REGS and the first with the rest (3 * 64 - 80 - 24 = 88): at 72 each (56
# at launch, 3 programs an SM) ptxas spills and serializes the tensor-core steps.
GLUON_CONSUMER_REGS = 80
PRODUCER_REGS = gl.constexpr(GLUON_PRODUCER_REGS)
BLOCK_N = gl.constexpr(GLUON_BLOCK_N)
SPAN = gl.constexpr(GLUON_SPAN)
DI = gl.constexpr(128)  # channels (MXFP4: 64 data bytes and 4 scale bytes per entry)
ROW_WORDS = gl.constexpr(16)  # int32 words of one entry's data
BF16_MAX = gl.constexpr(3.3895313892515355e38)  # finite logits saturate here in bf16 output


@gluon.constexpr_function
def _log2(n):
    return n.bit_length() - 1


@gluon.constexpr_function
def _producer_warps(nc):
    """The producer's warps beside NC consumer warpgroups: one beside one (four programs an
    SM, whose issue slots every instruction shares: the fewest instructions win; a warpgroup
    there is 11-13% slower), a warpgroup beside two (two programs an SM, bound by each
    program's latency: 2 copies and one key's factors a thread, 7-9% faster at one to four
    rows than one warp; H200, twenty-sixth session)."""
    return 1 if nc == 1 else 4


@gluon.constexpr_function
def _copy_layout(pw):
    # int32 [64 entries, 16 words] of key bytes: 16-byte copies, 8 a thread on one warp
    return gl.BlockedLayout([1, 4], [8, 4], [pw, 1], [1, 0])


@gluon.constexpr_function
def _scale_layout(pw):
    # int32 [64 keys, 4 scale bytes]: 2 keys a lane on one warp, a key a lane pair on four
    if pw == 1:
        return gl.BlockedLayout([2, 4], [32, 1], [1, 1], [1, 0])
    return gl.BlockedLayout([1, 2], [16, 2], [pw, 1], [1, 0])


@gluon.constexpr_function
def _replicated_layout(pw):
    # a one-element tensor every thread of the producer holds (no lane or warp reduces it)
    return gl.DistributedLinearLayout([], [[0]] * 5, [[0]] * _log2(pw), [], [1])


@gluon.constexpr_function
def _raw_layout():
    # int16 [64 entries, 4 blocks, 8 operand pairs]: the registers of the wgmma A operand (m64
    # k16, 4 warps): thread (warp w, lane 4g + l) holds entries 16w + g and 16w + g + 8, operand
    # pairs l and l + 4 of every block (K 2l, 2l + 1, 2l + 8, 2l + 9 of the block's k16 step;
    # memory bytes 4l..4l + 3, `_raw_smem_layout`); pair l + 4 is the register next to pair l
    # (one 4-byte word: ldmatrix), so join + reshape is the A layout up to a register order.
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 4], [8, 0, 0], [0, 1, 0], [0, 2, 0]],
        lane_bases=[[0, 0, 1], [0, 0, 2], [1, 0, 0], [2, 0, 0], [4, 0, 0]],
        warp_bases=[[16, 0, 0], [32, 0, 0]],
        block_bases=[],
        shape=[64, 4, 8],
    )


@gluon.constexpr_function
def _data_smem_layout():
    # int32 [64 entries, 16 words]: the 16-byte block b of entry e lies in slot b ^ ((e >> 1) & 3)
    # of its row, so the 8 entries one consumer load reads (16w + g, g < 8) fall in 8 distinct
    # 16-byte bank groups (unswizzled, rows 64 bytes apart share 2: 4-way bank conflicts)
    return gl.SwizzledSharedLayout(4, 2, 4, [1, 0])


@gluon.constexpr_function
def _raw_smem_layout():
    # the same bytes as int16 [64, 4 blocks, 8 operand pairs] (offset bits -> [entry, block,
    # pair]): operand pair 4b + a at memory pair 2a + b of its block (the Triton kernel's
    # `_pair_at`)
    return gl.SharedLinearLayout(
        offset_bases=[[0, 0, 4], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 2, 0], [1, 0, 0],
                      [2, 1, 0], [4, 2, 0], [8, 0, 0], [16, 0, 0], [32, 0, 0]],
    )  # fmt: skip


@gluon.jit
def _e2m1_pair_f16(raw, fac):
    """Packed e2m1 byte pairs (int16) and the fp16x2 factor (int32, same shape) -> (low
    nibbles, high nibbles) as int32 fp16x2 words: the Triton kernel's `_e2m1_pair_f16`."""
    return gl.inline_asm_elementwise(
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
        dtype=(gl.int32, gl.int32),
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _f16x2_dup(bits):
    """int32 fp32 bits -> int32 fp16x2 word holding the value rounded to fp16 in both halves."""
    return gl.inline_asm_elementwise(
        "cvt.rn.f16x2.f32 $0, $1, $1;",
        "=r,r",
        [bits],
        dtype=gl.int32,
        is_pure=True,
        pack=1,
    )


@gluon.jit
def _f16x2_halves(w):
    """int32 fp16x2 words -> (low half, high half) fp16 (register moves only)."""
    return gl.inline_asm_elementwise(
        "mov.b32 {$0, $1}, $2;",
        "=h,=h,r",
        [w],
        dtype=(gl.float16, gl.float16),
        is_pure=True,
        pack=1,
    )


@gluon.jit
def _pow2_bits(e):
    """2**e as fp32 for an int32 tensor e in [-126, 127] (exponent bits)."""
    return ((e + 127) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _score_to_key(x):
    """The top-k's order-preserving uint32 key of an fp32 score (-0.0 ties +0.0)."""
    x = gl.where(x == 0.0, 0.0, x)
    b = x.to(gl.uint32, bitcast=True)
    neg = (b >> 31) != 0
    return gl.where(neg, b ^ 0xFFFFFFFF, b | 0x80000000)


@gluon.jit
def _bit_or(a, b):
    return a | b


@gluon.jit
def _max_nan(a, b):
    return gl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@gluon.jit
def _row_state(req_ptr, pos_ptr, ratio, n_req, bt_stride_r):
    """(t, n_vis, r_at) of this program's row: a request id outside the table is a padding
    row (nothing visible, nothing read)."""
    t = gl.program_id(0).to(gl.int64)
    r = gl.load(req_ptr + t)
    p = gl.load(pos_ptr + t)
    live = (r >= 0) & (r < n_req)
    n_vis = gl.where(live, (p + 1) // ratio, 0)
    r_at = gl.where(live, r, 0).to(gl.int64) * bt_stride_r
    return t, n_vis, r_at


@gluon.jit
def _program_pages(page_smem, bt_ptr, r_at, entry_base, c_first, n_cols, n_vis, bt_cols,
                   num_pages, PAGE_SIZE: gl.constexpr, TILES: gl.constexpr,
                   PW: gl.constexpr):  # fmt: skip
    """Producer: the page of each of the program's TILES tiles into page_smem, -1 for a tile
    with no visible entry or whose page is outside the cache (a tile lies in one page:
    PAGE_SIZE and entry_base are multiples of 64). One block-table load for all tiles, so no
    tile waits for a global load before its key bytes are requested."""
    tl_lay: gl.constexpr = gl.BlockedLayout([1], [32], [PW], [0])
    c0 = c_first + gl.arange(0, TILES, layout=tl_lay) * BLOCK_N
    col = (entry_base + c0) // PAGE_SIZE
    live = (c0 < n_cols) & (entry_base + c0 < n_vis) & (col < bt_cols)
    page = gl.load(bt_ptr + r_at + col, mask=live, other=-1)
    ok = live & (page >= 0) & (page < num_pages)
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    page_smem._reinterpret(gl.int32, [TILES], flat).store(gl.where(ok, page, -1))
    gl.thread_barrier()


@gluon.jit
def _tile_page(page_smem, i, PW: gl.constexpr):
    """(page clamped to >= 0, whether tile i is read) from `_program_pages`."""
    page = gl.max(page_smem.index(i).load(_replicated_layout(PW)), axis=0)
    return gl.maximum(page, 0).to(gl.int64), page >= 0


@gluon.jit
def _pf_issue(i, page, ok, c_first, entry_base, wptr, pw, data_smem, ready, empty, rows, words,
              keys, dl: gl.constexpr, PAGE_SIZE: gl.constexpr,
              STAGES: gl.constexpr):  # fmt: skip
    """Producer, tile i (its page and whether it is read, from `_tile_page`): its scale
    words into registers (returned; not waited for), then, once the stage is free, the cp.async
    gather of its key bytes (arriving on `ready`)."""
    s = i & (STAGES - 1)
    c0 = c_first + i * BLOCK_N
    off = (entry_base + c0) % PAGE_SIZE
    base = page * pw
    sw = gl.load(wptr + (base + PAGE_SIZE * ROW_WORDS + off) + keys, mask=ok, other=0)
    mbarrier.wait(empty.index(s), ((i >> _log2(STAGES)) & 1) ^ 1, pred=i >= STAGES)
    dptr = wptr + (base + off * ROW_WORDS) + rows[:, None] * ROW_WORDS + words[None, :]
    mask = gl.full([BLOCK_N, ROW_WORDS], 1, gl.int1, dl) & ok
    async_copy.async_copy_global_to_shared(data_smem.index(s), dptr, mask=mask)
    async_copy.mbarrier_arrive(ready.index(s), increment_count=False)
    return sw


@gluon.jit
def _pf_finish(i, sw, pbad, c_first, lim, fac_smem, mult_smem, ready, keys, nib,
               STAGES: gl.constexpr):  # fmt: skip
    """Producer, tile i (its scale words `sw`): the keys' fp16x2 block factors and fp32
    key factors into the stage, the range bits into `pbad` (returned), then the producer's
    arrival on the stage's `ready` barrier: once a key, where the 4 consumer lanes sharing it
    would each do it."""
    s = i & (STAGES - 1)
    sc = (sw[:, None] >> (nib[None, :] * 8)) & 0xFF
    mk = gl.max(sc, axis=1)
    mn = gl.min(sc, axis=1)
    # the factor 2^(d + 15), d = sc - mk, as fp32 bits, then converted to fp16: exact for the
    # fast path's d in [-32, 0]; spans with d < -32 are flagged
    fac_smem.index(s).store(_f16x2_dup(((sc - mk[:, None]) + 142) << 23))
    # the keys' common factor 2^(mk - 136): exact (a power of two on a normal fp32)
    mult_smem.index(s).store(((gl.minimum(gl.maximum(mk, 10), 250) - 9) << 23).to(
        gl.float32, bitcast=True))  # fmt: skip
    valid = keys < lim - (c_first + i * BLOCK_N)
    # the span's range test on its visible keys; a tile the producer did not read (no page in
    # the cache) is zero-filled, so its largest scale byte 0 is out of range
    out_of_range = (mn < mk - 32) | (mk < 10) | (mk > 250)
    pbad = pbad | ((valid & out_of_range).to(gl.int32) << (i >> _log2(SPAN)))
    gl.thread_barrier()
    mbarrier.arrive(ready.index(s), count=1)
    return pbad


@gluon.jit
def _producer(a, data_smem, fac_smem, mult_smem, ready, empty, xbar, flag_smem, page_smem,
              PAGE_SIZE: gl.constexpr, STAGES: gl.constexpr, TILES: gl.constexpr,
              PW: gl.constexpr):  # fmt: skip
    (
        _q_ptr,
        _w_ptr,
        cache_ptr,
        bt_ptr,
        req_ptr,
        pos_ptr,
        _cand_ptr,
        _out_ptr,
        _gmax_ptr,
        _path_ptr,
        ratio,
        entry_base,
        n_cols,
        _q_stride_t,
        _q_stride_h,
        _w_stride_t,
        n_req,
        bt_cols,
        bt_stride_r,
        num_pages,
        page_stride,
        _cand_stride_t,
        _cand_cols,
        _out_stride_t,
        _gmax_stride_t,
        _path_stride_t,
        _path_cols,
    ) = a
    _t, n_vis, r_at = _row_state(req_ptr, pos_ptr, ratio, n_req, bt_stride_r)
    c_first = gl.program_id(1) * TILES * BLOCK_N
    # the visible columns of the row: < lim (as the consumers)
    lim = gl.minimum(n_cols, n_vis - entry_base)
    # PW warps: [64 entries, 16 words] of data as 16-byte copies, and [64 keys, 4 scale bytes]
    # (the keys' scale words, loaded one tile ahead)
    dl: gl.constexpr = _copy_layout(PW)
    kl: gl.constexpr = _scale_layout(PW)
    rows = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, dl))
    words = gl.arange(0, ROW_WORDS, layout=gl.SliceLayout(0, dl))
    keys = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kl))
    nib = gl.arange(0, 4, layout=gl.SliceLayout(0, kl))
    wptr = cache_ptr.to(gl.pointer_type(gl.int32))
    pw = page_stride // 4
    # bit k of key slot e: a visible key of span k is outside the fast path's range
    pbad = gl.zeros([BLOCK_N], gl.int32, gl.SliceLayout(1, kl))
    # tile i's key bytes are issued before tile i - 1's factors are computed, so the scale
    # words' load latency is covered by a tile
    _program_pages(page_smem, bt_ptr, r_at, entry_base, c_first, n_cols, n_vis, bt_cols,
                   num_pages, PAGE_SIZE, TILES, PW)  # fmt: skip
    page, ok = _tile_page(page_smem, 0, PW)
    sw = _pf_issue(0, page, ok, c_first, entry_base, wptr, pw, data_smem, ready, empty, rows,
                   words, keys, dl, PAGE_SIZE, STAGES)  # fmt: skip
    for i in range(1, TILES):
        page, ok = _tile_page(page_smem, i, PW)
        nxt = _pf_issue(i, page, ok, c_first, entry_base, wptr, pw, data_smem, ready, empty,
                        rows, words, keys, dl, PAGE_SIZE, STAGES)  # fmt: skip
        pbad = _pf_finish(i - 1, sw, pbad, c_first, lim, fac_smem, mult_smem, ready, keys, nib,
                          STAGES)  # fmt: skip
        sw = nxt
    pbad = _pf_finish(TILES - 1, sw, pbad, c_first, lim, fac_smem, mult_smem, ready, keys, nib,
                      STAGES)  # fmt: skip
    # the range bits to consumer 0, once
    pbits = gl.reduce(pbad, 0, _bit_or)
    fl1: gl.constexpr = gl.BlockedLayout([4 // PW], [32], [PW], [0])
    flag_smem.store(gl.zeros([128], gl.int32, fl1) + pbits)
    gl.thread_barrier()
    mbarrier.arrive(xbar.index(1), count=1)


@gluon.jit
def _fold_queries(q_ptr, w_ptr, t, q_stride_t, q_stride_h, w_stride_t, q_smem, q2_smem,
                  HI: gl.constexpr, HI_PAD: gl.constexpr, mma: gl.constexpr,
                  STORE: gl.constexpr):  # fmt: skip
    """The row's queries into q_smem (fp16 [2, HI_PAD, 64]: even channels, odd channels; only
    with STORE), each head scaled by 2^-e_h so its largest |q| lies in [2^14, 2^15); returns
    the head weights times 2^e_h (f32 [HI_PAD] in the accumulator's column layout) and whether
    every scaled query is exact in fp16 with e_h in range: the Triton kernel's `_fold_queries`."""
    ql: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    h = gl.arange(0, HI_PAD, layout=gl.SliceLayout(1, ql))
    hm = h < HI
    d = gl.arange(0, DI // 2, layout=gl.SliceLayout(0, ql))
    # operand column d holds the channels of key byte `byte` (the Triton kernel's `_key_byte`,
    # restated: a Gluon kernel cannot call a Triton function; the gpu tests compare the bits)
    kp = (d // 2) % 8
    byte = (d // 16) * 16 + 2 * (2 * (kp % 4) + kp // 4) + d % 2
    at = q_ptr + t * q_stride_t + h[:, None] * q_stride_h + 2 * byte[None, :]
    qe = gl.load(at, mask=hm[:, None], other=0.0).to(gl.float32)
    qo = gl.load(at + 1, mask=hm[:, None], other=0.0).to(gl.float32)
    amax = gl.maximum(gl.max(gl.abs(qe), axis=1), gl.max(gl.abs(qo), axis=1))
    ex = ((amax.to(gl.int32, bitcast=True) >> 23) & 0xFF) - 127
    ex = gl.where(amax == 0.0, 14, ex)
    in_range = (ex >= -100) & (ex <= 100)
    eh = gl.where(in_range, ex - 14, 0)
    qs = _pow2_bits(-eh)[:, None]
    qe = qe * qs
    qo = qo * qs
    qe16 = qe.to(gl.float16)
    qo16 = qo.to(gl.float16)
    exact = (qe16.to(gl.float32) == qe) & (qo16.to(gl.float32) == qo)
    bad = gl.sum((~exact).to(gl.int32), axis=1) + (~in_range).to(gl.int32)
    q_ok = gl.sum(bad, axis=0) == 0
    if STORE:
        q_smem.store(qe16)
        q2_smem.store(qo16)
    w = gl.load(w_ptr + t * w_stride_t + h, mask=hm, other=0.0)
    wf = gl.convert_layout(w * _pow2_bits(eh), gl.SliceLayout(0, mma))
    return wf, q_ok


@gluon.jit
def _e2m1_f32(n):
    """e2m1 nibbles (low 4 bits of int32) -> fp32: `ds41_cache.ops.codec.triton_jit.e2m1_to_f32`
    restated (a Gluon kernel cannot call a Triton function)."""
    n = n & 15
    e = (n >> 1) & 3
    m = n & 1
    normal = (((e + 126) << 23) | (m << 22)).to(gl.float32, bitcast=True)
    mag = gl.where(e == 0, m.to(gl.float32) * 0.5, normal)
    return (mag.to(gl.int32, bitcast=True) | ((n & 8) << 28)).to(gl.float32, bitcast=True)


@gluon.jit
def _ue8m0_f32(b):
    """ue8m0 scale bytes (int32) -> 2^(b - 127): `triton_jit.ue8m0_to_f32` restated."""
    return gl.where(b == 0, 5.877471754111438e-39, (b << 23).to(gl.float32, bitcast=True))


@gluon.jit
def _mask_and_store(logit, valid, entries, at, in_row, cand_row, cand_cols,
                    HAS_CAND: gl.constexpr, OUT_BF16: gl.constexpr):  # fmt: skip
    """A tile's logits -> -inf where not visible (`valid`) or outside the candidates, stored at
    `at` where `in_row` (f32, or bf16 bits saturated at the finite range); returns them."""
    keep = valid
    if HAS_CAND:
        cm = gl.load(cand_row + entries, mask=valid & (entries < cand_cols), other=0)
        keep = keep & (cm != 0)
    logit = gl.where(keep, logit, float("-inf"))
    if OUT_BF16:
        lb = gl.where(logit == float("-inf"), logit,
                      gl.minimum(gl.maximum(logit, -BF16_MAX), BF16_MAX))  # fmt: skip
        b = lb.to(gl.uint32, bitcast=True)
        rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        gl.store(at, rounded.to(gl.int16), mask=in_row)
    else:
        gl.store(at, logit, mask=in_row)
    return logit


@gluon.jit
def _general_spans(bits, q_ptr, w_ptr, cache_ptr, bt_ptr, cand_ptr, out_ptr, gmax_ptr, t, r_at,
                   n_vis, entry_base, n_cols, c_first, q_stride_t, q_stride_h, w_stride_t,
                   bt_cols, num_pages, page_stride, cand_stride_t, cand_cols, out_stride_t,
                   gmax_stride_t, q_smem, q2_smem, HI: gl.constexpr, HI_PAD: gl.constexpr,
                   PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr, OUT_BF16: gl.constexpr,
                   HAS_GMAX: gl.constexpr, TILES: gl.constexpr, mma: gl.constexpr):  # fmt: skip
    """Consumer 0, after the program's tiles: the spans whose bit is set in `bits` scored again
    on the Triton kernel's general path (`_general_tiles` / `_tile_exact` there): keys decoded
    exactly through fp32 to bf16, bf16 products against the unscaled queries in one chain of
    tensor-core steps over the 128 channels ascending (the Triton dot's m64 n HI_PAD k16 steps:
    four products of one 32-channel scale block each), ReLU, the unscaled head weights and the
    same head-sum tree; pages outside the cache read as zero keys. Rare (scales or queries
    outside the fp16 path's range), so plain loads, no ring."""
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    row: gl.constexpr = gl.SliceLayout(1, mma)
    # the row's bf16 queries, one [HI_PAD, 32] buffer per scale block, in the fp16 path's query
    # buffers (free once every consumer has scored its tiles: the same bytes)
    qg_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HI_PAD, 32], gl.bfloat16)
    qg01 = q_smem._reinterpret(gl.bfloat16, [2, HI_PAD, 32], qg_lay)
    qg23 = q2_smem._reinterpret(gl.bfloat16, [2, HI_PAD, 32], qg_lay)
    ql: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])
    h = gl.arange(0, HI_PAD, layout=gl.SliceLayout(1, ql))
    dq = gl.arange(0, 32, layout=gl.SliceLayout(0, ql))
    gl.thread_barrier()
    for b in gl.static_range(DI // 32):
        qv = gl.load(q_ptr + t * q_stride_t + h[:, None] * q_stride_h + (32 * b + dq)[None, :],
                     mask=(h < HI)[:, None], other=0.0)  # fmt: skip
        if b < 2:
            qg01.index(b).store(qv.to(gl.bfloat16))
        else:
            qg23.index(b - 2).store(qv.to(gl.bfloat16))
    fence_async_shared()
    gl.thread_barrier()
    hw = gl.arange(0, HI_PAD, layout=gl.SliceLayout(0, mma))
    w = gl.load(w_ptr + t * w_stride_t + hw, mask=hw < HI, other=0.0)
    # one tile's key bytes of one scale block: [64 entries, 16 bytes], and its scale bytes
    kl: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    er = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kl))
    jb = gl.arange(0, 16, layout=gl.SliceLayout(0, kl))
    lane_rows = gl.arange(0, BLOCK_N, layout=row)
    zero = gl.zeros([BLOCK_N, HI_PAD], gl.float32, mma)
    out_row = out_ptr + t * out_stride_t
    for sp in range(TILES // SPAN):
        if ((bits >> sp) & 1) != 0:
            for i in range(SPAN):
                c0 = c_first + (sp * SPAN + i) * BLOCK_N
                # the tile's page (a tile lies in one page) and its readable entries
                pcol = (entry_base + c0) // PAGE_SIZE
                plive = (pcol < bt_cols) & (entry_base + c0 < n_vis) & (c0 < n_cols)
                page = gl.load(bt_ptr + r_at + pcol, mask=plive, other=-1)
                ok = (page >= 0) & (page < num_pages)
                cols_k = c0 + er
                readable = (cols_k < n_cols) & (entry_base + cols_k < n_vis) & ok
                off = (entry_base + cols_k) % PAGE_SIZE
                base = gl.where(ok, page, 0).to(gl.int64) * page_stride
                row_at = base + off * (DI // 2)
                scale_at = base + PAGE_SIZE * (DI // 2) + off * (DI // 32)
                acc = zero
                for b in gl.static_range(DI // 32):
                    byte = gl.load(cache_ptr + row_at[:, None] + (16 * b + jb)[None, :],
                                   mask=readable[:, None], other=0).to(gl.int32)  # fmt: skip
                    sc = gl.load(cache_ptr + scale_at + b, mask=readable, other=127).to(gl.int32)
                    # element 2j is byte j's low nibble, 2j + 1 its high nibble
                    vals = gl.reshape(gl.join(_e2m1_f32(byte), _e2m1_f32(byte >> 4)),
                                      [BLOCK_N, 32])  # fmt: skip
                    scale = gl.convert_layout(_ue8m0_f32(sc), gl.SliceLayout(1, vals.type.layout))
                    kb = gl.convert_layout((vals * scale[:, None]).to(gl.bfloat16), a_op)
                    if b < 2:
                        acc = warpgroup_mma(kb, qg01.index(b).permute((1, 0)), acc)
                    else:
                        acc = warpgroup_mma(kb, qg23.index(b - 2).permute((1, 0)), acc)
                logit = gl.sum(gl.maximum(acc, 0.0) * w[None, :], axis=1)
                cols = c0 + lane_rows
                valid = (cols < n_cols) & (entry_base + cols < n_vis)
                logit = _mask_and_store(logit, valid, entry_base + cols, out_row + cols,
                                        cols < n_cols, cand_ptr + t * cand_stride_t, cand_cols,
                                        HAS_CAND, OUT_BF16)  # fmt: skip
                if HAS_GMAX:
                    # the tile is one group of the top-k's first pass
                    gk = gl.max(gl.where(valid, _score_to_key(logit), 0), axis=0)
                    gl.store(gmax_ptr + t * gmax_stride_t + c0 // BLOCK_N,
                             gk.to(gl.int32, bitcast=True), mask=c0 < n_cols)  # fmt: skip


@gluon.jit
def _consume(a, data_smem, fac_smem, mult_smem, q_smem, q2_smem, ready, empty, xbar,
             flag_smem, HI: gl.constexpr, HI_PAD: gl.constexpr, PAGE_SIZE: gl.constexpr,
             HAS_CAND: gl.constexpr,
             OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr, STAGES: gl.constexpr,
             TILES: gl.constexpr, CID: gl.constexpr, NC: gl.constexpr):  # fmt: skip
    """Consumer CID of NC (one warpgroup): tiles CID, CID + NC, ... of the program; consumer 0
    then scores the spans outside the fp16 path's range again on the general path (the
    producer's range bits and the row's query test) and stores each span's path (`path_ptr`)."""
    (
        q_ptr,
        w_ptr,
        cache_ptr,
        bt_ptr,
        req_ptr,
        pos_ptr,
        cand_ptr,
        out_ptr,
        gmax_ptr,
        path_ptr,
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
        path_stride_t,
        path_cols,
    ) = a
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HI_PAD, 16]
    )
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    rl: gl.constexpr = _raw_layout()
    scl: gl.constexpr = gl.SliceLayout(2, rl)
    row: gl.constexpr = gl.SliceLayout(1, mma)
    t, n_vis, r_at = _row_state(req_ptr, pos_ptr, ratio, n_req, bt_stride_r)
    j = gl.program_id(1)
    c_first = j * TILES * BLOCK_N
    # consumer 0 folds the queries into shared memory; the others wait for them
    wf, q_ok = _fold_queries(q_ptr, w_ptr, t, q_stride_t, q_stride_h, w_stride_t, q_smem,
                             q2_smem, HI, HI_PAD, mma, CID == 0)  # fmt: skip
    if CID == 0:
        fence_async_shared()
        gl.thread_barrier()
        if NC > 1:
            mbarrier.arrive(xbar.index(0), count=1)
    else:
        mbarrier.wait(xbar.index(0), 0)
    qlo = q_smem.permute((1, 0))
    qhi = q2_smem.permute((1, 0))
    out_row = out_ptr + t * out_stride_t
    lane_rows = gl.arange(0, BLOCK_N, layout=row)
    zero = gl.zeros([BLOCK_N, HI_PAD], gl.float32, mma)
    # a column is visible iff it is < min(n_cols, n_vis - entry_base)
    lim = gl.minimum(n_cols, n_vis - entry_base)
    gml: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
    slot = gl.arange(0, 32, layout=gl.SliceLayout(0, gml))
    gslots = gl.zeros([4, 32], gl.float32, gml)
    # the first entry of each warp's 16 (the rows of gslots)
    warp_row = gl.arange(0, 4, layout=gl.SliceLayout(1, gml)) * (BLOCK_N // 4)
    # blocks of BT tiles: the group maxima of a block are stored after it (register slots)
    BT: gl.constexpr = TILES if TILES < 32 else 32
    for b0 in range(0, TILES, BT):
        # the ring stage of each tile is a constant of the unrolled body (BT is a multiple of
        # STAGES * NC), so the barrier and stage addresses need no arithmetic per tile
        for i0 in range(b0, b0 + BT, STAGES * NC):
            for k in gl.static_range(STAGES):
                i = i0 + (k * NC + CID)
                s = (k * NC + CID) % STAGES
                c0 = c_first + i * BLOCK_N
                mbarrier.wait(ready.index(s), (i >> _log2(STAGES)) & 1)
                raw = data_smem.index(s)._reinterpret(gl.int16, [BLOCK_N, 4, 8], _raw_smem_layout())
                raw = raw.load(rl)
                # the producer's factors: 4 fp16x2 words a key (2 x 16 bytes a thread) and the keys'
                # fp32 factors
                fac = fac_smem.index(s).load(scl)
                kfac = mult_smem.index(s).load(row)
                gl.thread_barrier()
                mbarrier.arrive(empty.index(s), count=1)
                fac = gl.expand_dims(fac, 2).broadcast_to([BLOCK_N, 4, 8])
                lw, hw = _e2m1_pair_f16(raw, fac)
                l0, l1 = _f16x2_halves(lw)
                h0, h1 = _f16x2_halves(hw)
                lo = gl.convert_layout(gl.reshape(gl.join(l0, l1), [BLOCK_N, DI // 2]), a_op)
                hi = gl.convert_layout(gl.reshape(gl.join(h0, h1), [BLOCK_N, DI // 2]), a_op)
                # the Triton kernel's two dots: the same instructions in the same order, issued
                # back to back (one wait)
                acc = warpgroup_mma(lo, qlo, zero, is_async=True)
                acc = warpgroup_mma(hi, qhi, acc, is_async=True)
                acc = warpgroup_mma_wait(0, deps=[acc])
                logit = gl.sum(gl.maximum(acc, 0.0) * wf[None, :], axis=1)
                logit = logit * kfac
                # the visible columns (< n_cols and < n_vis - entry_base) and those of the row
                # (< n_cols) as int32 compares of the tile's rows against tile-relative bounds
                # (written on the columns, the compiler widens the column vector to 64 bits)
                valid = lane_rows < lim - c0
                in_row = lane_rows < n_cols - c0
                logit = _mask_and_store(logit, valid, entry_base + c0 + lane_rows,
                                        out_row + c0 + lane_rows, in_row,
                                        cand_ptr + t * cand_stride_t, cand_cols, HAS_CAND,
                                        OUT_BF16)  # fmt: skip
                if HAS_GMAX:
                    # each warp's largest logit of its 16 entries, kept in register slot i - b0
                    # (lanes hold the slots); keys, visibility and the maximum over the warps come
                    # once after the block, so no barrier and no key conversion is needed per tile
                    lw = gl.reduce(gl.reshape(logit, [4, BLOCK_N // 4]), 1, _max_nan)
                    kw = gl.convert_layout(lw, gl.SliceLayout(1, gml))
                    gslots = gl.where(slot[None, :] == i - b0, kw[:, None], gslots)
        if HAS_GMAX:
            # this consumer's tiles of the block (slot i - b0 holds tile i's maxima): the key of
            # a warp's largest logit is its largest key (the key order is the logits' order,
            # NaN above all as the NaN-propagating maximum keeps it; the entries past the
            # visible ones hold -inf), 0 for a warp with no visible entry (its first entry is
            # not visible: the visible entries are a prefix), then the maxima over the warps
            first = c_first + (b0 + slot[None, :]) * BLOCK_N + warp_row[:, None]
            gk = gl.max(gl.where(first < lim, _score_to_key(gslots), 0), axis=0)
            g = c_first // BLOCK_N + b0 + slot
            gkeep = (slot < BT) & (slot % NC == CID) & (g * BLOCK_N < n_cols)
            gl.store(gmax_ptr + t * gmax_stride_t + g, gk.to(gl.int32, bitcast=True),
                     mask=gkeep)  # fmt: skip
    if CID == 0:
        # the range bits are the producer's, handed over once at its end
        fl: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        mbarrier.wait(xbar.index(1), 0)
        bits = gl.max(flag_smem.load(fl), axis=0)
        bits = gl.where(q_ok, bits, (1 << (TILES // SPAN)) - 1)
        if NC > 1:
            # consumer 1's stores come before the general path's stores over them
            mbarrier.wait(xbar.index(2), 0)
        if bits != 0:
            _general_spans(bits, q_ptr, w_ptr, cache_ptr, bt_ptr, cand_ptr, out_ptr, gmax_ptr, t,
                           r_at, n_vis, entry_base, n_cols, c_first, q_stride_t, q_stride_h,
                           w_stride_t, bt_cols, num_pages, page_stride, cand_stride_t,
                           cand_cols, out_stride_t, gmax_stride_t, q_smem, q2_smem, HI, HI_PAD,
                           PAGE_SIZE, HAS_CAND, OUT_BF16, HAS_GMAX, TILES, mma)  # fmt: skip
        sp = gl.arange(0, 32, layout=gl.SliceLayout(0, gml))
        col = j * (TILES // SPAN) + sp
        # 1: the span's logits are the fp16 path's, 2: the general path's
        gl.store(path_ptr + t * path_stride_t + col, (1 + ((bits >> sp) & 1)).to(gl.int8),
                 mask=(sp < TILES // SPAN) & (col < path_cols))  # fmt: skip
    else:
        gl.thread_barrier()
        mbarrier.arrive(xbar.index(2), count=1)


@gluon.jit
def _consumer_main(a, data_smem, fac_smem, mult_smem, q_smem, q2_smem, ready, empty,
                   xbar, flag_smem, HI: gl.constexpr, HI_PAD: gl.constexpr,
                   PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr, OUT_BF16: gl.constexpr,
                   HAS_GMAX: gl.constexpr, STAGES: gl.constexpr, TILES: gl.constexpr,
                   NC: gl.constexpr):  # fmt: skip
    _consume(a, data_smem, fac_smem, mult_smem, q_smem, q2_smem, ready, empty, xbar,
             flag_smem, HI, HI_PAD, PAGE_SIZE, HAS_CAND, OUT_BF16, HAS_GMAX, STAGES, TILES, 0,
             NC)  # fmt: skip


@gluon.jit
def _consumer_worker(a, data_smem, fac_smem, mult_smem, q_smem, q2_smem, ready, empty,
                     xbar, flag_smem, HI: gl.constexpr, HI_PAD: gl.constexpr,
                     PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr, OUT_BF16: gl.constexpr,
                     HAS_GMAX: gl.constexpr, STAGES: gl.constexpr, TILES: gl.constexpr,
                     NC: gl.constexpr):  # fmt: skip
    _consume(a, data_smem, fac_smem, mult_smem, q_smem, q2_smem, ready, empty, xbar,
             flag_smem, HI, HI_PAD, PAGE_SIZE, HAS_CAND, OUT_BF16, HAS_GMAX, STAGES, TILES, 1,
             NC)  # fmt: skip


@gluon.jit
def _gluon_logits_kernel(
    q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr, gmax_ptr, path_ptr,
    ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t, n_req, bt_cols, bt_stride_r,
    num_pages, page_stride, cand_stride_t, cand_cols, out_stride_t, gmax_stride_t,
    path_stride_t, path_cols,
    HI: gl.constexpr, HI_PAD: gl.constexpr, PAGE_SIZE: gl.constexpr, HAS_CAND: gl.constexpr,
    OUT_BF16: gl.constexpr, HAS_GMAX: gl.constexpr, STAGES: gl.constexpr, TILES: gl.constexpr,
    NC: gl.constexpr, CONSUMER_REGS: gl.constexpr, GDC: gl.constexpr = False,
):  # fmt: skip
    gluon_enter_dependent(GDC)
    PW: gl.constexpr = _producer_warps(NC)
    # the ring's stage, phase and span of a tile are masks and shifts of its index
    gl.static_assert((STAGES & (STAGES - 1)) == 0, "STAGES must be a power of two")
    gl.static_assert((SPAN & (SPAN - 1)) == 0, "SPAN must be a power of two")
    plain1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HI_PAD, DI // 2], gl.float16)
    data_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, ROW_WORDS],
                                          _data_smem_layout())  # fmt: skip
    # the producer's factors, a stage each: fp16x2 words [64 keys, 4 blocks] and the keys' fp32
    # factors
    fac_smem = gl.allocate_shared_memory(gl.int32, [STAGES, BLOCK_N, 4],
                                         gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))  # fmt: skip
    mult_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_N], plain1)
    q_smem = gl.allocate_shared_memory(gl.float16, [HI_PAD, DI // 2], q_lay)
    q2_smem = gl.allocate_shared_memory(gl.float16, [HI_PAD, DI // 2], q_lay)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(STAGES):
        # one asynchronous arrival per producer thread (the key bytes) and one of the producer
        # (the factors); one arrival of the consumer
        mbarrier.init(ready.index(b), count=32 * PW + 1)
        mbarrier.init(empty.index(b), count=1)
    # xbar 0: the queries are in shared memory, 2: consumer 1 has stored its tiles (NC = 2 only:
    # an mbarrier initialized and never used would share its bytes with later scratch memory,
    # which PTX leaves undefined); 1: the producer's range bits are in flag_smem
    xbar = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
    if NC > 1:
        mbarrier.init(xbar.index(0), count=1)
        mbarrier.init(xbar.index(2), count=1)
    mbarrier.init(xbar.index(1), count=1)
    flag_smem = gl.allocate_shared_memory(gl.int32, [128], plain1)
    # the producer's page of each tile (`_program_pages`)
    page_smem = gl.allocate_shared_memory(gl.int32, [TILES, 1], plain1)
    fence_async_shared()
    gl.thread_barrier()
    a = (q_ptr, w_ptr, cache_ptr, bt_ptr, req_ptr, pos_ptr, cand_ptr, out_ptr, gmax_ptr,
         path_ptr, ratio, entry_base, n_cols, q_stride_t, q_stride_h, w_stride_t, n_req,
         bt_cols, bt_stride_r, num_pages, page_stride, cand_stride_t, cand_cols, out_stride_t,
         gmax_stride_t, path_stride_t, path_cols)  # fmt: skip
    # (constexprs stay constexprs only when the argument tuples are written in place)
    if NC == 1:
        gl.warp_specialize(
            [
                (_consumer_main, (a, data_smem, fac_smem, mult_smem, q_smem, q2_smem,
                                  ready, empty, xbar, flag_smem, HI, HI_PAD, PAGE_SIZE,
                                  HAS_CAND, OUT_BF16, HAS_GMAX, STAGES, TILES, NC)),
                (_producer, (a, data_smem, fac_smem, mult_smem, ready, empty, xbar, flag_smem,
                             page_smem, PAGE_SIZE, STAGES, TILES, PW)),
            ],
            [PW],
            [PRODUCER_REGS],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (_consumer_main, (a, data_smem, fac_smem, mult_smem, q_smem, q2_smem,
                                  ready, empty, xbar, flag_smem, HI, HI_PAD, PAGE_SIZE,
                                  HAS_CAND, OUT_BF16, HAS_GMAX, STAGES, TILES, NC)),
                (_consumer_worker, (a, data_smem, fac_smem, mult_smem, q_smem, q2_smem,
                                    ready, empty, xbar, flag_smem, HI, HI_PAD, PAGE_SIZE,
                                    HAS_CAND, OUT_BF16, HAS_GMAX, STAGES, TILES, NC)),
                (_producer, (a, data_smem, fac_smem, mult_smem, ready, empty, xbar, flag_smem,
                             page_smem, PAGE_SIZE, STAGES, TILES, PW)),
            ],
            [4, PW],
            [CONSUMER_REGS, PRODUCER_REGS],
        )  # fmt: skip
