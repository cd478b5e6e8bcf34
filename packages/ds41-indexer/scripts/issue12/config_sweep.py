"""Issue 12, thirteenth session: the Gluon logits program shape (consumer warpgroups, tiles) by
call size, timed on the H200 as `ds41_indexer.bench` times its logits column (CUDA-graph
replay, median), launch included and launch hidden. Every shape's logits are checked bitwise
against the default shape's (the shape never changes bits). Prints a table; `--json` saves it.

    python packages/ds41-indexer/scripts/issue12/config_sweep.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch

from ds41_indexer import bench
from ds41_indexer.ops.logits import gluon_launch as gl_launch
from ds41_indexer.ops.logits.triton_kernels import TILE

SIZES = ((32, 32768), (64, 32768), (128, 32768), (256, 32768), (8, 131072), (64, 131072),
         (16, 1048576))  # fmt: skip
CONFIGS = ((1, 16), (1, 32), (1, 64), (1, 128))


def logits(q, w, cache, table, req, pos, out, config):  # type: ignore[no-untyped-def]
    args = (q, w, cache, table, req, pos, 1)
    gl_launch.launch_gluon_logits(*args, out, config=config)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    rows_out = []
    for ctx in sorted({c for _, c in SIZES}):
        cache, table = bench.make_cache(max(r for r, c in SIZES if c == ctx), ctx, dev, gen)
        for t in [r for r, c in SIZES if c == ctx]:
            q = torch.randn(t, bench.HI, bench.DI, device=dev, generator=gen).mul(2).round()
            q = q.to(torch.bfloat16)
            w = torch.randn(t, bench.HI, device=dev, generator=gen)
            req = torch.arange(t, dtype=torch.int32, device=dev)
            pos = torch.full((t,), ctx - 1, dtype=torch.int32, device=dev)
            spans = -(-ctx // (TILE[0] * TILE[1]))  # spans of the launcher's grid rule
            default = gl_launch.gluon_config(t, spans)
            ref = logits(q, w, cache, table[:t], req, pos, torch.empty(t, ctx, device=dev),
                         default)  # fmt: skip
            line = {"rows": t, "context": ctx, "default": list(default)}
            for cfg in CONFIGS:
                out = torch.full((t, ctx), float("nan"), device=dev)
                fn = partial(logits, q, w, cache, table[:t], req, pos, out, cfg)
                fn()
                same = torch.equal(out.view(torch.int32), ref.view(torch.int32))
                bench.LAUNCH_HIDDEN = False
                ms = bench._time(fn, dev, a.iters)
                bench.LAUNCH_HIDDEN = True
                ms_h = bench._time(fn, dev, a.iters)
                line[f"{cfg[0]}x{cfg[1]}"] = {"us": ms * 1e3, "us_hidden": ms_h * 1e3,
                                              "bitwise": same}  # fmt: skip
                if not same:
                    raise SystemExit(f"config {cfg} differs at {t} x {ctx}")
            rows_out.append(line)
            del q, w, ref
        del cache, table
    head = "rows x context  default " + " ".join(f"{c[0]}x{c[1]:<3}  (hid)  " for c in CONFIGS)
    print(head)
    for r in rows_out:
        cell = [r[f"{c[0]}x{c[1]}"] for c in CONFIGS]
        cells = " ".join(f"{x['us']:6.1f} ({x['us_hidden']:6.1f})" for x in cell)
        print(f"{r['rows']:4d} x {r['context']:8d}  {r['default'][0]}x{r['default'][1]:<4} {cells}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows_out, f, indent=1)


if __name__ == "__main__":
    main()
