"""One GPU call: variants of the lab kernel (`gluon_lab.py`: K-stage count, stage drops) checked
against float64 and for row invariance, then timed beside the production kernels.

    PYTHONPATH=packages/ds41-cache/src:packages/ds41-attention/src \
        python3 packages/ds41-attention/scripts/gluon_profile.py [--rows 1,64,1024,4096] \
        [--variants pipe,ks3] [--check pipe] [--tile-sweep] [--json F]

Variants (`--variants`, see `main`): pipe = the production settings; ks3 = without the Q.K^T
look-ahead; stage drops (timing only, their outputs are meaningless): *drop1 = no decode,
*drop2 = no products / softmax, *drop3 = no record copies. The time a drop saves bounds what
that stage costs on the critical path. `--tile-sweep` times rows of 4..20 tiles (per-tile
cost vs fixed cost of a program). A table of kernel times (graph replay, us) is printed last.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import sys
import tempfile
from types import ModuleType
from typing import Any

import torch

from ds41_attention.bench import FLASH, make_problem, time_graph
from ds41_attention.ops.sparse_attention.gluon_launch import (
    launch_gluon_sparse_attention,
    launch_with,
)
from ds41_attention.ops.sparse_attention.launch import launch_sparse_attention
from ds41_attention.ops.sparse_attention.naive import reference_sparse_attention

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from attn_helpers import max_abs_entry, random_cache, random_q, random_sink, random_slots

CUDA = torch.device("cuda")
LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gluon_lab.py")
TMP = tempfile.mkdtemp(prefix="gluon_lab_")


def load_variant(name: str, **consts: int) -> ModuleType:
    """A copy of gluon_lab.py with module constants replaced (`NAME = gl.constexpr(v)`)."""
    with open(LAB) as f:
        src = f.read()
    for k, v in consts.items():
        src, n = re.subn(rf"^{k} = gl\.constexpr\([^)]*\)", f"{k} = gl.constexpr({v})", src,
                         flags=re.M)  # fmt: skip
        assert n == 1, k
    path = os.path.join(TMP, f"gluon_lab_{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"gluon_lab_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def launch_lab(mod: ModuleType, *args):
    """A `gluon_lab.py` variant launched exactly as the production kernel is."""
    return launch_with(mod._gluon_sparse_attn_kernel, {"maxnreg": mod.GLUON_MAXNREG}, *args)


def _problem(wfmt: str, cfmt: str | None, rows: int, h: int, seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    wc = random_cache(wfmt, 512, 64, 16, g, device=CUDA)
    ss, sl = random_slots(rows, 128, wc.num_slots, g)
    if cfmt is None:
        comp: tuple = (None, None, None)
    else:
        cc = random_cache(cfmt, 512, 64, 40, g, device=CUDA)
        cs, cl = random_slots(rows, 512, cc.num_slots, g)
        comp = (cc, cs.to(CUDA), cl.to(CUDA))
    q = random_q(rows, h, 512, g).to(CUDA)
    return (q, wc, ss.to(CUDA), sl.to(CUDA), *comp, random_sink(h, g).to(CUDA), 512**-0.5)


def check(impls: dict[str, Any], quick: bool = False) -> bool:
    ok_all = True
    if not impls:
        return True
    cases = [("mxfp8", "nvfp4", 64), ("mxfp8", "mxfp8", 64), ("mxfp8", "bf16", 64),
             ("bf16", "nvfp4", 64), ("mxfp8", None, 64), ("bf16", "bf16", 64),
             ("mxfp8", "nvfp4", 128), ("mxfp8", "nvfp4", 16)]  # fmt: skip
    if quick:
        cases = cases[:1]
    for wfmt, cfmt, h in cases:
        args = _problem(wfmt, cfmt, 24, h, seed=3)
        ref, rlse = reference_sparse_attention(*args)
        vmax = max_abs_entry(args[1])
        if args[4] is not None:
            vmax = max(vmax, max_abs_entry(args[4]))
        line = f"{wfmt}+{cfmt} h{h}:"
        for name, f in impls.items():
            o, lse = f(*args)
            torch.cuda.synchronize()
            err = (o.double() - ref).abs()
            tol = 2.0**-8 * ref.abs() + 2.0**-8 * vmax
            excess = (err - 2.0**-9 * ref.abs()).clamp(min=0).max().item() / vmax
            fin = torch.isfinite(rlse)
            lse_ok = torch.equal(fin, torch.isfinite(lse)) and torch.allclose(
                lse.double()[fin], rlse[fin], rtol=1e-5, atol=1e-4
            )
            alone = all(
                torch.equal(f(*[a[i : i + 1] if isinstance(a, torch.Tensor) and a.ndim >= 1
                               and a.shape[0] == 24 else a for a in args])[0][0], o[i])
                for i in (0, 7, 23)
            )  # fmt: skip
            good = bool((err <= tol).all()) and lse_ok and alone and bool(o.isfinite().all())
            ok_all &= good or name == "triton"
            verdict = "OK" if good else "FAIL"
            line += f" {name}: {verdict} excess/vmax {excess:.2e} lse {lse_ok} alone {alone};"
        print(line, flush=True)
    # graph replay == eager, bigger batch invariance (rows alone vs in 300)
    p = make_problem(FLASH, 300, CUDA, seed=5)
    for name, f in impls.items():
        if name == "triton":
            continue
        o, lse = f(*p.args())
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            f(*p.args())
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            og, lg = f(*p.args())
        g.replay()
        torch.cuda.synchronize()
        geq = torch.equal(og, o) and torch.equal(lg, lse)
        a = p.args()
        alone = all(
            torch.equal(f(*[x[i : i + 1] if isinstance(x, torch.Tensor) and x.ndim >= 1
                           and x.shape[0] == 300 else x for x in a])[0][0], o[i])
            for i in (0, 150, 299)
        )  # fmt: skip
        ok_all &= geq and alone
        print(f"{name}: graph==eager {geq} alone==in300 {alone}", flush=True)
    return ok_all


def bench(impls: dict[str, Any], rows_list: list[int], only: dict[str, list[int]]) -> list[dict]:
    res = []
    for rows in rows_list:
        p = make_problem(FLASH, rows, CUDA, seed=rows)
        row: dict = {"T": rows}
        for name, f in impls.items():
            if name in only and rows not in only[name]:
                continue
            gt = time_graph(functools.partial(f, *p.args()), CUDA, 20 if rows < 1024 else 10)
            assert gt is not None
            row[f"{name}_us"] = gt * 1e6
            row[f"{name}_tflops"] = FLASH.flop_per_row * rows / gt / 1e12
        res.append(row)
        print(json.dumps(row), flush=True)
        del p
        torch.cuda.empty_cache()
    return res


def tile_sweep(impls: dict[str, Any], rows_list: tuple[int, ...] = (1, 132)) -> list[dict]:
    """Time rows of 4 + k / 32 tiles (window 128, compressed length k): the slope is the
    per-tile time of one program, the intercept its fixed cost (launch, Q, first loads,
    epilogue)."""
    res = []
    for rows in rows_list:
        p = make_problem(FLASH, rows, CUDA, seed=rows)
        for k in (0, 128, 256, 384, 512):
            p.comp_lens.fill_(k)
            row: dict = {"T": rows, "tiles": 4 + k // 32}
            for name, f in impls.items():
                gt = time_graph(functools.partial(f, *p.args()), CUDA, 20)
                assert gt is not None
                row[f"{name}_us"] = gt * 1e6
            res.append(row)
            print(json.dumps(row), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", default="1,64,1024,4096")
    ap.add_argument("--json", default=None)
    ap.add_argument("--variants", default="pipe,ks3,pipe_drop1,pipe_drop2,pipe_drop3")
    ap.add_argument("--check", default="pipe", help="implementations checked before timing")
    ap.add_argument("--quick", default="", help="implementations checked on one case only")
    ap.add_argument("--no-baselines", action="store_true", help="skip the production kernels")
    ap.add_argument("--tile-sweep", action="store_true", help="also time rows of 4..20 tiles")
    a = ap.parse_args()
    spec: dict[str, dict[str, int]] = {
        "ks3": {"PIPE": 0}, "ks2": {"PIPE": 0, "KSTAGES_MAIN": 2},
        "drop1": {"PIPE": 0, "DROP": 1}, "drop2": {"PIPE": 0, "DROP": 2},
        "drop3": {"PIPE": 0, "DROP": 3}, "nraw3": {"PIPE": 0, "NRAW_MAIN": 3},
        "pipe": {}, "pipe2": {"KSTAGES_MAIN": 2}, "pipe_nraw3": {"NRAW_MAIN": 3},
        "pipe_sub32": {"SUB": 32},
        "pipe_drop1": {"DROP": 1}, "pipe_drop2": {"DROP": 2}, "pipe_drop3": {"DROP": 3},
    }  # fmt: skip
    impls: dict[str, Any] = {}
    if not a.no_baselines:
        impls = {"triton": launch_sparse_attention, "gluon": launch_gluon_sparse_attention}
    names = a.variants.split(",")
    for n in names:
        impls[n] = functools.partial(launch_lab, load_variant(n, **spec[n]))
    ok = check({k: v for k, v in impls.items() if k in a.check.split(",")})
    ok &= check({k: v for k, v in impls.items() if k in a.quick.split(",")}, quick=True)
    print("CHECK", "PASS" if ok else "FAIL", flush=True)
    rows = [int(r) for r in a.rows.split(",")]
    only = {n: [r for r in rows if r in (1, 4096)] for n in names if "drop" in n}
    res = bench(impls, rows, only)
    sweep = tile_sweep(impls) if a.tile_sweep else []
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": res, "tile_sweep": sweep}, f, indent=1)
    print("| T | " + " | ".join(impls) + " |")
    for r in res:
        cells = " | ".join(
            f"{r[n + '_us']:.1f} ({r[n + '_tflops']:.0f})" if n + "_us" in r else "-" for n in impls
        )
        print(f"| {r['T']} | {cells} |")


if __name__ == "__main__":
    main()
