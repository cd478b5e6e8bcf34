"""Issue 12, twenty-sixth session: the producer's ring arithmetic as masks and shifts.

The production logits kernel (`ops/logits/gluon_kernels.py`) takes a tile's ring stage and
barrier phase as `i % STAGES` and `(i // STAGES) & 1`, and its span as `i // SPAN`. `i` is a
signed int32, so LLVM keeps the sign fix-ups of a signed division (for `i - 1` in the
producer's finish step it narrows them to 8 and 16 bits: a dozen uniform instructions a tile).
The tile index is never negative and STAGES and SPAN are powers of two, so `i & (STAGES - 1)`,
`i >> log2(STAGES)` and `i >> log2(SPAN)` are the same values: the producer's tile loop goes
from 158 to 146 instructions (offline, sm_90a, 64 tiles, no group maxima), the consumer's is
unchanged. The logits must be the production kernel's bits (checked at every size).

    python packages/ds41-indexer/scripts/issue12/shift_lab.py --compile
    python packages/ds41-indexer/scripts/issue12/shift_lab.py --run [--json out.json]

Adopted in daf31b4 (the production kernel now has these edits, so they no longer apply:
the lab copy is the record of the measurement; run it against the kernel before, e.g. with
`git show 375d7b1:packages/ds41-indexer/src/ds41_indexer/ops/logits/gluon_kernels.py`
as the production module). BENCHMARKS.md, issue 12, twenty-sixth session.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import timeline  # noqa: E402


def shift_source(src: str | None = None) -> str:
    """The production kernel's source with the ring's stage, phase and span indices as masks
    and shifts."""
    if src is None:
        src = timeline.production_source()
    e = timeline._edit
    anchor = "\n\n@gluon.constexpr_function\ndef _raw_layout():"
    log2 = "\n\n@gluon.constexpr_function\ndef _log2(n):\n    return n.bit_length() - 1\n"
    src = e(src, anchor, log2 + anchor)
    src = e(src, "    s = i % STAGES\n", "    s = i & (STAGES - 1)\n", count=2)
    src = e(src, "((i // STAGES) & 1) ^ 1", "((i >> _log2(STAGES)) & 1) ^ 1")
    src = e(src, "<< (i // SPAN))", "<< (i >> _log2(SPAN)))")
    src = e(
        src,
        "mbarrier.wait(ready.index(s), (i // STAGES) & 1)",
        "mbarrier.wait(ready.index(s), (i >> _log2(STAGES)) & 1)",
    )
    return src


def compile_offline() -> None:
    import gluon7_sass

    _mod, path = timeline.lab_module(src=shift_source(), name="shift_offline")
    for tiles in ("64", "16"):
        sys.argv = ["gluon7_sass.py", "--module", path, "--set", f"TILES={tiles}",
                    "--set", "HAS_GMAX=False"]  # fmt: skip
        gluon7_sass.main()


def run(sizes: list[tuple[int, int]], iters: int) -> list[dict[str, object]]:
    lab = timeline.lab_module(src=shift_source(), name="shift")[0]
    return timeline.run_sizes(
        sizes,
        iters,
        lambda args, t, ctx: ({}, [("lab shift", partial(timeline.launch_lab_copy, lab, args))]),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--sizes", default="64x32768,64x32768,64x32768,32x32768,256x32768,"
                    "64x131072,1x131072,64x1048576")  # fmt: skip
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.compile:
        compile_offline()
    if a.run:
        sizes = timeline.parse_sizes(a.sizes)
        rep = run(sizes, a.iters)
        timeline.finish_labs(rep, "shift", a.json)


if __name__ == "__main__":
    main()
