"""The batch-invariant matmul's reduction plan: chosen from the weight's shape, never from M.

Every output element `out[m, n] = sum_k x[m, k] w[n, k]` is reduced the same way whatever the
row count: K is cut into `n_segs` segments of `seg_tiles` BLOCK_K-wide tiles; each segment is
an fp32 chain of tensor-core dot steps starting from zero. The segments are added in two
halves (`half_split`): the first `half` segments in ascending order to a zero fp32 total, the
others likewise to a second zero total, and the two totals are added last (with fewer than 4
segments there is one half, so this is the plain ascending sum). A tensor-parallel rank that
holds one half of K adds its own segments and sends one partial instead of one per segment.
A launch may run a row block's segments one after the other in one program, or one segment per
program with a fixed-order reduction afterwards (`split`); both perform the same fp32
operations in the same order, so the bits are equal (tested). Only that choice of parallelism
looks at M; the arithmetic is fixed by (N, K).

The output tile of a launch (`LaunchTile`: rows x columns per program, warps, pipeline
stages) is a speed choice that may look at M: every tile runs the same BLOCK_K-wide dot steps
in the same order for each output element, and the tensor cores compute an element's k-steps
the same way whatever the tile's M and N extent (measured on the H200 for every flash_mini and
flash_wide weight at 1..4096 rows, `scripts/matmul_tile_sweep.py`: all tiles with BLOCK_K 64
bitwise equal; a 128-wide K step is NOT, so BLOCK_K stays fixed). The `gpu` tests check
that property on the GPU they run on: a row alone (the decode tile) equals the same row in a
prefill-sized batch (a prefill tile), and every tile equals the decode tile.

Why segments at all: at decode sizes (M <= 64) one program per 64-column tile leaves most of
the GPU idle for narrow weights (a [256, 4096] weight is 4 programs, each a 64-step chain).
Segments give the launch `n_tiles * n_segs` programs to spread over.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

BLOCK_M = 64
"""Rows of the planning tile (the decode tile; `split` counts programs in these units)."""
BLOCK_N = 64
"""Columns of the planning tile: `n_tiles` and hence the segment count use it."""
BLOCK_K = 64
"""Width of one dot step: part of the arithmetic (segment boundaries are multiples of it)."""

TARGET_PROGRAMS = 256
"""Column tiles x segments a weight is cut into (two waves of the H200's 132 SMs; a constant,
so the bits do not depend on the GPU model)."""
MIN_SEG_TILES = 2
"""Shortest segment in K tiles (a one-tile chain would let the compiler fold the segment sum
into the dot's accumulator, which is a different rounding)."""
SPLIT_BELOW_PROGRAMS = 66
"""Run segments in parallel when a launch has fewer output tiles than this (half a wave of
132 SMs; measured on the H200: beyond it the workspace traffic and the second launch cost
more than the parallelism gains)."""
SPLIT_MIN_SEGS = 3
"""Two segments never paid for the reduction launch in the same measurements."""
LARGE_WEIGHT_ELEMENTS = 16 * 2**20
"""From this size on (32 MiB of bf16: flash_wide's projections and their TP=2 shards; no
flash_mini weight) a launch of fewer than LARGE_SPLIT_BELOW_PROGRAMS output tiles runs its
segments in parallel even with two segments: measured on the H200 at 64 rows (CUDA graphs,
`scripts/tp_comm_matmul.py`), split vs one program per tile: [5120, 8192] (4 segments, 80
tiles) 30.0 vs 55.8 us, [12288, 5120] (2, 192) 40.2 vs 45.8, the TP=2 shards [5120, 6144]
(2, 80) 31.0 vs 43.2, [6144, 5120] (2, 96) 28.3 vs 37.4, 4 x [1024, 4096] (2, 64) 15.0 vs
15.8: one program per tile leaves SMs idle or in a short second wave while a large weight
streams."""
LARGE_SPLIT_BELOW_PROGRAMS = 200
"""Output tiles below which a large weight's launch splits (the measured cases had <= 192)."""


@dataclass(frozen=True)
class LaunchTile:
    """The output tile one program computes, with its launch parameters (speed only)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


DECODE_TILE = LaunchTile(64, 64, 4, 3)
"""Decode batches (<= 64 rows) and split launches: many small programs."""
PREFILL_TILES = (LaunchTile(128, 128, 8, 3), LaunchTile(64, 128, 4, 4))
"""Larger batches, first that still fills the GPU (H200, `scripts/matmul_tile_sweep.py`, one
call: a flash_mini step's matmuls at 1,024 rows 1,719 -> 1,337 us, at 4,096 rows 5,506 ->
4,517 us; flash_wide's at 1,024 rows 14.6 -> 10.9 ms)."""
TILE_MIN_PROGRAMS = 132
"""Programs a prefill tile must give a launch (one per H200 SM); below, the next tile."""


def half_split(n_segs: int) -> int:
    """Segments in the first half of the two-level segment sum: `ceil(n_segs / 2)` from 4
    segments on, else `n_segs` (one chain). A function of the segment count alone."""
    return -(-n_segs // 2) if n_segs >= 4 else n_segs


@dataclass(frozen=True)
class MatmulPlan:
    """How one weight `[groups, n, k]` is reduced (all fields derive from that shape)."""

    n: int
    k: int
    groups: int
    n_tiles: int
    """Column tiles per group."""
    k_tiles: int
    seg_tiles: int
    n_segs: int
    halves: bool = True
    """False: the segments form one ascending chain (a tensor-parallel rank's own half of a
    larger weight's K, `linear.linear_chain`); True: the two halves of `half_split`."""

    @property
    def half(self) -> int:
        """Segments in the first half of the segment sum (`half_split`; all when not halves)."""
        return half_split(self.n_segs) if self.halves else self.n_segs

    def split(self, m: int) -> bool:
        """Whether a launch over `m` rows runs its segments in parallel (speed only: the
        bits are the same either way)."""
        m_tiles = -(-m // BLOCK_M)
        tiles = m_tiles * self.groups * self.n_tiles
        if self.n_segs >= SPLIT_MIN_SEGS and tiles < SPLIT_BELOW_PROGRAMS:
            return True
        large = self.groups * self.n * self.k >= LARGE_WEIGHT_ELEMENTS
        return large and self.n_segs >= 2 and tiles < LARGE_SPLIT_BELOW_PROGRAMS

    def tile(self, m: int, split: bool) -> LaunchTile:
        """The output tile of a launch over `m` rows (speed only: every tile gives the same
        bits). Split launches and decode batches use `DECODE_TILE`; larger batches the first
        of `PREFILL_TILES` that gives at least `TILE_MIN_PROGRAMS` programs."""
        if split or m <= BLOCK_M:
            return DECODE_TILE
        for t in PREFILL_TILES:
            if -(-m // t.block_m) * self.groups * -(-self.n // t.block_n) >= TILE_MIN_PROGRAMS:
                return t
        return DECODE_TILE


@cache
def plan_matmul(n: int, k: int, groups: int = 1, *, segments: bool = True) -> MatmulPlan:
    """Plan for a weight of `groups` blocks `[n, k]`. `segments=False`: one segment, i.e. the
    earlier kernel (the benchmark's baseline; a different rounding, not for the model)."""
    if min(n, k, groups) <= 0:
        raise ValueError(f"weight shape must be positive, got groups={groups}, n={n}, k={k}")
    n_tiles = -(-n // BLOCK_N)
    k_tiles = -(-k // BLOCK_K)
    n_segs = 1
    if segments:
        wanted = -(-TARGET_PROGRAMS // (groups * n_tiles))
        n_segs = max(1, min(wanted, k_tiles // MIN_SEG_TILES))
    seg_tiles = -(-k_tiles // n_segs)
    n_segs = -(-k_tiles // seg_tiles)
    return MatmulPlan(n, k, groups, n_tiles, k_tiles, seg_tiles, n_segs)
