# mypy: disable-error-code="no-untyped-def"
"""Issue 12, tenth session (helper idx10): offline sm_90a comparison, no GPU needed.

Compiles a copy of main's Gluon logits kernel (`--main-kernel PATH`), the package's kernel
(the producer computes the block factors: PFAC + LIM of `gluon10_kernels.py`, no knobs) and the
lab copy at PFAC + LIM (which the package's kernel must match) for the bench's geometry at every
program shape, and prints registers, spills, shared memory and SASS instructions per tile
(`gluon10_sass.report`).

    python packages/ds41-indexer/scripts/issue12/gluon11_sass.py --main-kernel FILE [--out F]
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gluon10_sass import SHAPES, load, report  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--main-kernel", required=True)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    variants = [
        ("main", load(a.main_kernel), {}),
        ("package (this)", load(None), {}),
        ("lab PFAC+LIM", load(os.path.join(HERE, "gluon10_kernels.py")),
         {"PFAC": True, "LIM": True}),
    ]  # fmt: skip
    lines = [
        "# offline sm_90a SASS (gluon11_sass.py): Hi 32, page 64, group maxima, f32 out, launch",
        "# cap 64 registers; consumer / producer: SASS instructions per tile in the loop (per",
        "# thread / lane); per tile: 4 x consumer + producer warp-instructions; spill st/ld:",
        "# ptxas's bytes; in loop: STL/LDL inside each consumer loop",
        f"{'shape':10s} {'variant':16s} {'consumer':>9s} {'producer':>8s} {'per tile':>8s} "
        f"{'regs (setmaxnreg)':>22s} {'spill st/ld':>11s} {'in loop':>7s} {'shared':>6s}",
    ]
    print("\n".join(lines), flush=True)
    for nc, tiles in SHAPES:
        for name, mod, extra in variants:
            r = report(mod, {"NC": nc, "TILES": tiles, **extra})
            cons = "/".join(str(x) for x in r["consumer_loop"])  # type: ignore[attr-defined]
            prod = "/".join(str(x) for x in r["producer_loop"])  # type: ignore[attr-defined]
            lsp = "/".join(str(x) for x in r["consumer_loop_spill_ops"])  # type: ignore[attr-defined]
            ser = " SERIALIZED" if r["serialized_wgmma"] else ""
            line = (f"NC{nc} T{tiles:<4d} {name:16s} {cons:>9s} {prod:>8s} "
                    f"{r['warp_instr_per_tile']:8.0f} {r['setmaxnreg']!s:>22s} "
                    f"{r['spill_st_ld']!s:>11s} {lsp:>7s} {r['shared']:6d}{ser}")  # fmt: skip
            print(line, flush=True)
            lines.append(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
