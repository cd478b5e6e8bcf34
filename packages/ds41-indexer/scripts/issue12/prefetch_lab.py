"""Issue 12, twenty-second session: the producer prefetches its next pages into L2.

The twenty-first session measured 64 x 32K 3.5% faster when every row reads the same
(L2-resident) keys, while a program alone on its SM gains nothing from it: with four programs
an SM the key reads' latency is partly exposed. The producer's ring is STAGES = 4 tiles deep.
This lab copy of the production kernel (`ops/logits/gluon_kernels.py`, edited as text at
import, so it follows the production source) lets the producer reach further ahead without
shared memory: every `mask + 1` tiles its lanes read the program's page list and prefetch into
L2 (`cp.async.bulk.prefetch.L2`, one instruction a page: the whole page, key bytes and scales)
the pages of the tiles `dist` to `dist + mask` ahead of the current one (at the start, tiles
STAGES to `dist + mask`). `dist = 0` turns it off. Prefetches change no value: the logits must
be the production kernel's bits (checked at every size and setting).

On the H200 (`--run`): bits, then CUDA-graph medians (launch hidden) of the production kernel
and the lab copy at several (mask, dist). `--compile` builds the lab copy offline for sm_90a.

    python packages/ds41-indexer/scripts/issue12/prefetch_lab.py --compile
    python packages/ds41-indexer/scripts/issue12/prefetch_lab.py --run [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from types import ModuleType

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import timeline  # noqa: E402

# (mask, dist): every mask + 1 tiles, the pages of tiles dist .. dist + mask ahead
VARIANTS = ((7, 0), (7, 4), (7, 8), (7, 16), (15, 8), (15, 16), (3, 4), (3, 8))

PREFETCH_FN = """

@gluon.jit
def _prefetch_pages(page_smem, base_ptr, lo, hi, TILES: gl.constexpr):
    # the program's page list (int32 [TILES], -1: not read) across the producer's lanes; the
    # pages of tiles [lo, hi) into L2, one bulk prefetch a page
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    pages = page_smem._reinterpret(gl.int32, [TILES], flat).load(lay)
    tiles = gl.arange(0, TILES, layout=lay)
    want = (tiles >= lo) & (tiles < hi) & (pages >= 0)
    ptrs = base_ptr + gl.maximum(pages, 0).to(gl.int64) * PAGE_BYTES
    gl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.s32 p, $2, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], PAGE_BYTES; mov.u32 $0, 0; }",
        "=r,l,r", [ptrs, want.to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)

"""


def prefetch_source(src: str | None = None) -> str:
    """The production kernel's source with the producer's L2 prefetches; the kernel takes
    (pf_mask, pf_dist) after path_cols."""
    if src is None:
        src = timeline.production_source()
    anchor = "\n\n@gluon.constexpr_function\ndef _raw_layout():"
    src = timeline._edit(src, anchor, PREFETCH_FN + anchor.lstrip("\n"))
    src = timeline._edit(src, "    path_stride_t, path_cols,\n    HI: gl.constexpr,",
                         "    path_stride_t, path_cols, pf_mask, pf_dist,\n"
                         "    HI: gl.constexpr,")  # fmt: skip
    src = timeline._edit(src, "    a = (q_ptr,", "    pc = (pf_mask, pf_dist)\n    a = (q_ptr,")
    src = timeline._edit(src, "page_smem, PAGE_SIZE, STAGES, TILES)),",
                         "page_smem, pc, PAGE_SIZE, STAGES, TILES)),", count=2)  # fmt: skip
    src = timeline._edit(src, "def _producer(a, data_smem, fac_smem, mult_smem, ready, empty, "
                         "xbar, flag_smem, page_smem,\n",
                         "def _producer(a, data_smem, fac_smem, mult_smem, ready, empty, "
                         "xbar, flag_smem, page_smem, pc,\n")  # fmt: skip
    first = "    page, ok = _tile_page(page_smem, 0)\n"
    src = timeline._edit(src, first, (
        "    pf_mask, pf_dist = pc\n"
        "    if pf_dist > 0:\n"
        "        _prefetch_pages(page_smem, cache_ptr, STAGES, pf_dist + pf_mask + 1, TILES)\n"
    ) + first)  # fmt: skip
    head = "    for i in range(1, TILES):\n        page, ok = _tile_page(page_smem, i)\n"
    src = timeline._edit(src, head, (
        "    for i in range(1, TILES):\n"
        "        if (pf_dist > 0) & ((i & pf_mask) == 0):\n"
        "            lo = i + pf_dist\n"
        "            _prefetch_pages(page_smem, cache_ptr, lo, lo + pf_mask + 1, TILES)\n"
        "        page, ok = _tile_page(page_smem, i)\n"
    ))  # fmt: skip
    return src


def lab_source(page_stride: int) -> str:
    """`prefetch_source` with the cache's page stride (bytes: a page's key bytes and scale
    words, a multiple of 16) as the address step and the prefetch size."""
    if page_stride % 16:
        raise ValueError(f"page_stride must be a multiple of 16 bytes, got {page_stride}")
    return prefetch_source().replace("PAGE_BYTES", str(page_stride))


def compile_offline() -> None:
    import gluon7_sass

    _mod, path = timeline.lab_module(src=lab_source(4352), name="prefetch_offline")
    gluon7_sass.NOT_DIV16.update(("pf_mask", "pf_dist"))
    sys.argv = ["gluon7_sass.py", "--module", path, "--set", "TILES=64"]
    gluon7_sass.main()


def run(sizes: list[tuple[int, int]], iters: int,
        variants: list[tuple[int, int]]) -> list[dict[str, object]]:  # fmt: skip
    mods: dict[int, ModuleType] = {}

    def labs_for(args: tuple, t: int, ctx: int) -> tuple[dict[str, object], list]:  # type: ignore[type-arg]
        stride = args[2].page_stride
        if stride not in mods:
            mods[stride] = timeline.lab_module(src=lab_source(stride), name=f"pf_{stride}")[0]
        labs = [("lab {}/{}".format(*v), partial(timeline.launch_lab_copy, mods[stride], args,
                                                  tail=v)) for v in variants]  # fmt: skip
        return {"page_stride": stride}, labs

    return timeline.run_sizes(sizes, iters, labs_for)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--sizes", default="64x32768,32x32768,256x32768,64x131072,64x1048576")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--variants", default="", help="mask/dist,...; default VARIANTS")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.compile:
        compile_offline()
    if a.run:
        sizes = timeline.parse_sizes(a.sizes)
        variants = [tuple(int(x) for x in v.split("/")) for v in a.variants.split(",") if v]
        rep = run(sizes, a.iters, variants or list(VARIANTS))  # type: ignore[arg-type]
        timeline.finish_labs(rep, "mask/dist", a.json)


if __name__ == "__main__":
    main()
