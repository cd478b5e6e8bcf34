"""Stage-drop profile of the invariant attention kernel: where a key tile's time goes.

    PYTHONPATH=packages/ds41-cache/src:packages/ds41-attention/src \
        python3 packages/ds41-attention/scripts/stage_drop.py [--rows 1,64,1024,4096] [--json F]

Times (CUDA-graph replay, median) the default invariant config on the V4.1-Flash geometry
with one stage removed at a time (the kernel's DROP switch, see `_sparse_attn_kernel`): the
decode (codes used raw, no scales), the QK product, the PV product. The time a variant saves
against the full kernel is that stage's cost as the kernel overlaps it (the stages overlap, so
the savings need not add up to the total). The record loads cannot be dropped this way: codes
synthesized in registers (from the addresses) took 4-7x longer than loading them (H200).
DROP > 0 outputs are meaningless; the full kernel is checked against the float64 reference
first. With TRITON_INTERPRET=1 it runs on the CPU on the tiny geometry, untimed (a dry run of
the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch

from ds41_attention.bench import FLASH, TINY, make_problem, time_graph
from ds41_attention.ops.sparse_attention.launch import default_config, launch_sparse_attention
from ds41_attention.ops.sparse_attention.naive import reference_sparse_attention

VARIANTS = {
    0: "full kernel",
    1: "no decode (raw codes)",
    2: "no QK product",
    3: "no PV product",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", default="1,64,1024,4096")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dry = os.environ.get("TRITON_INTERPRET") == "1"
    dev = torch.device("cpu" if dry else "cuda")
    geo = TINY if dry else FLASH
    rows_list = [int(r) for r in args.rows.split(",")]
    if dry:
        rows_list = [2]

    p = make_problem(geo, 8, dev, seed=1)
    out, _ = launch_sparse_attention(*p.args())
    ref, _ = reference_sparse_attention(*p.args())
    rel = float((out.double() - ref).norm() / ref.norm())
    assert rel < 1e-2, f"full kernel off the float64 reference: {rel:.2e}"

    results = []
    for rows in rows_list:
        prob = make_problem(geo, rows, dev, seed=2)
        base = None
        for drop, name in VARIANTS.items():

            def fn(drop: int = drop, prob: Any = prob) -> None:
                launch_sparse_attention(*prob.args(), profile_drop=drop)

            fn()
            sec = time_graph(fn, dev, reps=20)
            us = None if sec is None else sec * 1e6
            if drop == 0:
                base = us
            saved = None if us is None or base is None else base - us
            results.append(
                {"rows": rows, "drop": drop, "variant": name, "us": us, "saved_us": saved}
            )
            shown = "-" if us is None else f"{us:10.1f} us"
            share = (
                ""
                if saved is None or not base
                else f"  saves {saved:9.1f} us ({saved / base:5.1%})"
            )
            print(f"rows {rows:5d}  {name:26s} {shown}{share}", flush=True)
        if base:
            tflops = geo.flop_per_row * rows / (base * 1e-6) / 1e12
            block_n = default_config(geo.heads, geo.dim).block_n
            tiles = -(-geo.window // block_n) + -(-geo.topk // block_n)
            per_sm = -(-rows // torch.cuda.get_device_properties(dev).multi_processor_count)
            print(f"rows {rows:5d}  full kernel {tflops:.1f} TFLOP/s; "
                  f"{base / (per_sm * tiles):.2f} us per key tile per SM")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
