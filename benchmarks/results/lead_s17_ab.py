"""Seventeenth session A/B (calls 2, 3): production (old, 91dec51, a copy of its package
imported as ds41_attention_old from .dev_lead/ab17) against the working tree (NEW): bits on
four format pairs (PHASE=bits), then graph-replay times in one process (PHASE=time). Call 2
ran it with three trees (main, L, LP: the producer's copy layouts), call 3 with two (the
output staged through shared memory). TREES="name:module,..." picks the packages (the first
is the reference), BITS_TREES the ones whose bits are compared."""

import functools
import importlib
import json
import os
import sys
import time

import torch

sys.path.insert(0, "packages/ds41-attention/tests")
sys.path.insert(0, os.environ.get("AB_DIR", ".dev_lead/ab17"))  # the renamed copies
from attn_helpers import random_cache, random_q, random_sink, random_slots

from ds41_attention import bench as B

CUDA = torch.device("cuda")
# name:module pairs; the first is the reference of the bits and of the ratios
TREES = dict(
    kv.split(":")
    for kv in os.environ.get("TREES", "old:ds41_attention_old,NEW:ds41_attention").split(",")
)
BITS_TREES = os.environ.get("BITS_TREES", ",".join(TREES)).split(",")
REF = next(iter(TREES))
MOD = ".ops.sparse_attention.gluon_launch"
launch = {
    k: importlib.import_module(v + MOD).launch_gluon_sparse_attention for k, v in TREES.items()
}


def problem(h, rows, wfmt, cfmt, seed, k=512, w=128):
    g = torch.Generator().manual_seed(seed)
    wc = random_cache(wfmt, 512, 64, max(4, rows * w // 64 // 4 + 2), g, device=CUDA)
    ss, sl = random_slots(rows, w, wc.num_slots, g)
    comp = (None, None, None)
    if cfmt:
        cc = random_cache(cfmt, 512, 64, max(8, 4 * k // 64 + 2), g, device=CUDA)
        cs, cl = random_slots(rows, k, cc.num_slots, g)
        comp = (cc, cs.to(CUDA), cl.to(CUDA))
    q = random_q(rows, h, 512, g).to(CUDA)
    return (q, wc, ss.to(CUDA), sl.to(CUDA), *comp, random_sink(h, g).to(CUDA), 512**-0.5)


def bits() -> None:
    bad = 0
    t0 = time.time()
    shapes = ((64, 1, 1), (64, 40, 2), (16, 33, 3), (128, 20, 4), (64, 150, 5), (64, 333, 6))
    for wfmt, cfmt in (("mxfp8", "nvfp4"), ("mxfp8", "mxfp8"), ("mxfp8", None), ("bf16", "nvfp4")):
        for h, rows, seed in shapes:
            a = problem(h, rows, wfmt, cfmt, seed)
            res = {}
            for name in BITS_TREES:
                f = launch[name]
                for pair in (False, True) if rows <= 66 else (False,):
                    o, lse = f(*a, pair=pair)
                    res[(name, pair)] = (o.clone(), lse.clone())
            ref = res[(REF, False)]
            for key, (o, lse) in res.items():
                if not (torch.equal(o, ref[0]) and torch.equal(lse, ref[1])):
                    bad += 1
                    print("BITS DIFFER", wfmt, cfmt, h, rows, key)
    print(f"bits: {'all equal' if bad == 0 else str(bad) + ' differ'} ({time.time() - t0:.0f} s)")


def times() -> None:
    rows_list = [int(x) for x in os.environ.get("ROWS", "1,64,132,1024,4096").split(",")]
    out = []
    for hidden in (True, False):
        B.LAUNCH_HIDDEN = hidden
        for T in rows_list:
            p = B.make_problem(B.FLASH, T, CUDA, seed=T)
            reps = 20 if T >= 1024 else 100
            for rnd in range(3):
                for name, f in launch.items():
                    for pair in (None, False) if T <= 66 else (False,):
                        fn = functools.partial(f, *p.args(), pair=pair)
                        us = B.time_graph(fn, CUDA, reps) * 1e6
                        out.append({"hidden": hidden, "T": T, "tree": name, "pair": pair,
                                    "round": rnd, "us": us})  # fmt: skip
            del p
            torch.cuda.empty_cache()
    with open(os.environ.get("OUT", "/tmp") + "/ab17.json", "w") as fh:
        json.dump(out, fh, indent=1)
    others = [n for n in TREES if n != REF]
    print(f"| launch | T | kernel | {REF} us | " + " | ".join(f"{n} us (/{REF})" for n in others)
          + f" | {others[-1]} TFLOP/s |")  # fmt: skip
    print("|--|--:|--|--:|" + "--:|" * (len(others) + 1))
    for hidden in (True, False):
        for T in rows_list:
            for pair in (None, False) if T <= 66 else (False,):
                m = {
                    n: min(
                        r["us"]
                        for r in out
                        if (r["hidden"], r["T"], r["tree"], r["pair"]) == (hidden, T, n, pair)
                    )
                    for n in TREES
                }
                kname = "dispatched (pair)" if pair is None else "one-CTA"
                tf = B.FLASH.flop_per_row * T / (m[others[-1]] * 1e-6) / 1e12
                mode = "hidden" if hidden else "default"
                cells = " | ".join(f"{m[n]:.1f} ({m[n] / m[REF]:.3f})" for n in others)
                print(f"| {mode} | {T} | {kname} | {m[REF]:.1f} | {cells} | {tf:.1f} |")


if __name__ == "__main__":
    bits() if os.environ.get("PHASE", "bits") == "bits" else times()
