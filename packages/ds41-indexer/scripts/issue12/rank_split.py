"""Issue 12, twenty-first session: does a one-wave logits launch lose its time to the programs an
SM runs finishing at different times? (`timeline.py` found the four programs of an SM ending at
~46, 48, 55 and 63 us at 64 x 32K, the later-placed ones starved.)

Lab copies of the stamped kernel (`timeline.lab_source`) whose 8 programs of a row take unequal
numbers of spans, more for the programs placed first (`--splits`: span counts of programs j = 0..7,
summing to the row's 32 spans at 32K). A span's logits do not depend on the program that scores
it, so every split writes the production kernel's bits (checked). Prints, per split, the graph
time (launch hidden and not), the stamped span and the programs' mean end by their rank on an SM.

    python packages/ds41-indexer/scripts/issue12/rank_split.py [--splits 4,4,4,4,4,4,4,4:5,5,...]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from functools import partial
from types import ModuleType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timeline

SPLIT_FN = """

@gluon.jit
def _split(j):
    # (first span, span count) of program j of a row: 4 bits a program in SPLIT_PACKED
    start = j * 0
    for k in gl.static_range(8):
        start += ((SPLIT_PACKED >> (4 * k)) & 15) * (j > k).to(gl.int32)
    return start, (SPLIT_PACKED >> (4 * j)) & 15

"""


def split_source(counts: list[int]) -> str:
    """The stamped lab kernel with program j of a row taking counts[j] spans (TILES = 128 is
    only the capacity: page table and masks; the loops run the program's own tiles)."""
    e = timeline._edit
    src = timeline.lab_source()
    packed = sum(c << (4 * j) for j, c in enumerate(counts))
    src = e(src, "\n\n@gluon.constexpr_function\ndef _raw_layout():",
            f"\nSPLIT_PACKED = gl.constexpr({packed})\n" + SPLIT_FN
            + "@gluon.constexpr_function\ndef _raw_layout():")  # fmt: skip
    ours = (
        "    sp0, nsp = _split({})\n    c_first = sp0 * SPAN * BLOCK_N\n    n_tiles = nsp * SPAN\n"
    )
    src = e(src, "    c_first = gl.program_id(1) * TILES * BLOCK_N\n",
            ours.format("gl.program_id(1)"))  # fmt: skip
    src = e(src, "    for i in range(1, TILES):\n", "    for i in range(1, n_tiles):\n")
    src = e(src, "    pbad = _pf_finish(TILES - 1, sw,", "    pbad = _pf_finish(n_tiles - 1, sw,")
    src = e(src, "    c_first = j * TILES * BLOCK_N\n", ours.format("j"))
    bt = "    BT: gl.constexpr = TILES if TILES < 32 else 32\n    for b0 in range(0, TILES, BT):\n"
    src = e(src, bt,
            "    BT: gl.constexpr = 16\n    for b0 in range(0, n_tiles, BT):\n")  # fmt: skip
    src = e(src, "(1 << (TILES // SPAN)) - 1)", "(1 << nsp) - 1)")
    src = e(src, "        col = j * (TILES // SPAN) + sp\n", "        col = sp0 + sp\n")
    src = e(src, "mask=(sp < TILES // SPAN) & (col < path_cols))",
            "mask=(sp < nsp) & (col < path_cols))")  # fmt: skip
    return src


def split_module(counts: list[int]) -> ModuleType:
    name = "split_" + "_".join(map(str, counts))
    path = os.path.join(tempfile.mkdtemp(prefix="ds41_split_"), name + ".py")
    with open(path, "w") as f:
        f.write(split_source(counts))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def rank_ends(stamps: list[list[int]]) -> list[float]:
    """Mean end (us from the first stamp) of an SM's programs by their end order, over the SMs
    with the most programs."""
    base = min(min(p[: len(timeline.STAMPS)]) for p in stamps)
    end = timeline.STAMPS.index("c_end")
    per_sm: dict[int, list[float]] = {}
    for p in stamps:
        per_sm.setdefault(p[timeline.SMID], []).append((p[end] - base) / 1e3)
    most = max(len(v) for v in per_sm.values())
    full = [sorted(v) for v in per_sm.values() if len(v) == most]
    return [statistics.mean(v[k] for v in full) for k in range(most)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--splits", default="4,4,4,4,4,4,4,4:5,5,5,4,4,3,3,3:6,5,5,4,4,3,3,2")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch

    from ds41_indexer import bench
    from ds41_indexer.ops.logits import gluon_kernels as gk
    from ds41_indexer.ops.logits import gluon_launch as gl_launch
    from ds41_indexer.ops.logits.triton_kernels import TILE

    t, ctx = a.rows, a.context
    dev = torch.device("cuda")
    q, w, cache, table, req, pos, _ratio = timeline.bench_inputs(t, ctx)
    spans = -(-ctx // (TILE[0] * TILE[1]))
    ref = torch.full((t, ctx), float("nan"), device=dev)
    cfg = gl_launch.gluon_config(t, spans)
    prod = partial(gl_launch.launch_gluon_logits, q, w, cache, table, req, pos, 1, ref,
                   config=cfg)  # fmt: skip
    prod()
    report: list[dict[str, object]] = []
    bench.LAUNCH_HIDDEN = False
    us = bench._time(prod, dev, a.iters) * 1e3
    bench.LAUNCH_HIDDEN = True
    us_h = bench._time(prod, dev, a.iters) * 1e3
    report.append({"split": "production", "config": list(cfg), "us": us, "us_hidden": us_h})
    print(json.dumps(report[-1]), flush=True)
    for spec in a.splits.split(":"):
        counts = [int(c) for c in spec.split(",")]
        if len(counts) != 8 or sum(counts) != spans:
            raise SystemExit(f"a split is 8 span counts summing to {spans}, got {counts}")
        lab = split_module(counts)
        out = torch.full((t, ctx), float("nan"), device=dev)
        stamps = torch.zeros(t * 8, 16, dtype=torch.int64, device=dev)
        paths = torch.empty((t, spans), dtype=torch.int8, device=dev)

        def launch(lab: ModuleType = lab, out: torch.Tensor = out,
                   stamps: torch.Tensor = stamps, paths: torch.Tensor = paths) -> None:  # fmt: skip
            lab._gluon_logits_kernel[(t, 8)](
                q, w, cache.storage, table, req, pos, req, out, req, paths, stamps,
                1, 0, ctx, q.stride(0), q.stride(1), w.stride(0),
                table.shape[0], table.shape[1], table.stride(0),
                cache.num_pages, cache.page_stride, 0, 0,
                out.stride(0), 0, paths.stride(0), spans,
                HI=bench.HI, HI_PAD=bench.HI, PAGE_SIZE=cache.page_size, HAS_CAND=False,
                OUT_BF16=False, HAS_GMAX=False, STAGES=gk.GLUON_STAGES, TILES=128,
                NC=1, CONSUMER_REGS=gk.GLUON_CONSUMER_REGS,
                num_warps=gk.GLUON_NUM_WARPS, maxnreg=gk.GLUON_MAXNREG,
            )  # fmt: skip

        for _ in range(3):
            launch()
        torch.cuda.synchronize()
        same = torch.equal(out.view(torch.int32), ref.view(torch.int32))
        ends = rank_ends(stamps.cpu().tolist())
        bench.LAUNCH_HIDDEN = False
        us = bench._time(launch, dev, a.iters) * 1e3
        bench.LAUNCH_HIDDEN = True
        us_h = bench._time(launch, dev, a.iters) * 1e3
        report.append({"split": counts, "bitwise": same, "us": us, "us_hidden": us_h,
                       "rank_ends": ends})  # fmt: skip
        print(json.dumps(report[-1]), flush=True)
    gb = t * ctx * 68 / 1e3
    print(f"\n{t} x {ctx}: graph us (launch hidden), TB/s hidden, SM ranks' mean end (us)")
    for r in report:
        ends = r.get("rank_ends", [])
        print(
            f"{r['split']!s:28s} {r['us']:6.1f} ({r['us_hidden']:6.1f})  "  # type: ignore[str-format]
            f"{gb / r['us_hidden'] / 1e3:5.2f}  {r.get('bitwise', '')}  "  # type: ignore[operator]
            + " ".join(f"{x:5.1f}" for x in ends)
        )  # type: ignore[attr-defined]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
