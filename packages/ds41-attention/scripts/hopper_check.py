"""One GPU call: the Gluon kernel (and the variant in gluon_half_variant.py) against the
float64 reference and the Triton kernel, then timed beside it (CUDA-graph replay) on the
V4.1-Flash geometry; `--rows ""` skips the timing.

    PYTHONPATH=packages/ds41-cache/src:packages/ds41-attention/src \
        python3 packages/ds41-attention/scripts/hopper_check.py [--rows 1,64,1024,4096] [--json F]

Prints the error of each implementation against float64 (max |err| / max|entry|), whether a
row alone equals the row in the batch, and a table of kernel times last.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

import torch

from ds41_attention.bench import FLASH, make_problem, time_graph
from ds41_attention.ops.sparse_attention.gluon_launch import launch_gluon_sparse_attention
from ds41_attention.ops.sparse_attention.launch import launch_sparse_attention
from ds41_attention.ops.sparse_attention.naive import reference_sparse_attention

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))
from attn_helpers import max_abs_entry, random_cache, random_q, random_sink, random_slots
from gluon_half_variant import launch_gluon_half

CUDA = torch.device("cuda")
GLUON = {"gluon": launch_gluon_sparse_attention, "gluon_half": launch_gluon_half}
IMPLS = {"triton": launch_sparse_attention, **GLUON}


def _problem(wfmt: str, cfmt: str | None, rows: int, seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    wc = random_cache(wfmt, 512, 64, 16, g, device=CUDA)
    ss, sl = random_slots(rows, 128, wc.num_slots, g)
    if cfmt is None:
        comp: tuple = (None, None, None)
    else:
        cc = random_cache(cfmt, 512, 64, 40, g, device=CUDA)
        cs, cl = random_slots(rows, 512, cc.num_slots, g)
        comp = (cc, cs.to(CUDA), cl.to(CUDA))
    q = random_q(rows, 64, 512, g).to(CUDA)
    return (q, wc, ss.to(CUDA), sl.to(CUDA), *comp, random_sink(64, g).to(CUDA), 512**-0.5)


def check() -> None:
    for wfmt, cfmt in [("mxfp8", "nvfp4"), ("mxfp8", "mxfp8"), ("mxfp8", "bf16"),
                       ("bf16", "nvfp4"), ("mxfp8", None)]:  # fmt: skip
        args = _problem(wfmt, cfmt, 24, seed=3)
        ref, _ = reference_sparse_attention(*args)
        vmax = max_abs_entry(args[1])
        if args[4] is not None:
            vmax = max(vmax, max_abs_entry(args[4]))
        line = f"{wfmt}+{cfmt}:"
        outs = {}
        for name, f in IMPLS.items():
            o, l = f(*args)
            torch.cuda.synchronize()
            outs[name] = (o, l)
            err = (o.double() - ref).abs()
            excess = (err - 2.0**-9 * ref.abs()).clamp(min=0).max().item() / vmax
            alone = all(
                torch.equal(f(*[a[i : i + 1] if isinstance(a, torch.Tensor) and a.ndim >= 1
                               and a.shape[0] == 24 else a for a in args])[0][0], o[i])
                for i in (0, 7, 23)
            )  # fmt: skip
            nan = bool(o.isnan().any())
            line += f" {name}: excess/vmax {excess:.2e} nan {nan} alone==batch {alone};"
        for name in GLUON:
            d = (outs[name][0].float() - outs["triton"][0].float()).abs().max().item()
            line += f" max|{name}-triton| {d:.3e}"
        print(line, flush=True)


def bench(rows_list: list[int]) -> list[dict]:
    res = []
    for rows in rows_list:
        p = make_problem(FLASH, rows, CUDA, seed=rows)
        row: dict = {"T": rows}
        args = p.args()
        for name, f in IMPLS.items():
            g = time_graph(functools.partial(f, *args), CUDA, 20 if rows < 1024 else 10)
            assert g is not None
            row[f"{name}_us"] = g * 1e6
            row[f"{name}_tflops"] = FLASH.flop_per_row * rows / g / 1e12
        res.append(row)
        print(row, flush=True)
        del p, args
        torch.cuda.empty_cache()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", default="1,64,1024,4096")
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip-check", action="store_true")
    a = ap.parse_args()
    if not a.skip_check:
        check()
    if not a.rows:
        return
    res = bench([int(r) for r in a.rows.split(",")])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print("| T | " + " | ".join(f"{n} us | {n} TFLOP/s" for n in IMPLS) + " |")
    for r in res:
        cells = " | ".join(f"{r[n + '_us']:.1f} | {r[n + '_tflops']:.1f}" for n in IMPLS)
        print(f"| {r['T']} | {cells} |")


if __name__ == "__main__":
    main()
