"""One GPU call: variants of the lab kernel (`gluon_lab.py`: K-stage count, stage drops) checked
against float64 and for row invariance, then timed beside the production kernels.

    PYTHONPATH=packages/ds41-cache/src:packages/ds41-attention/src \
        python3 packages/ds41-attention/scripts/gluon_profile.py [--rows 1,64,1024,4096] \
        [--variants pipe,ks3] [--check pipe] [--tile-sweep] [--split] [--bits pipe] \
        [--baselines triton,gluon] [--json F]

Variants (`--variants`, see `main`): pipe = the non-persistent kernel's settings; ks3 = without
the Q.K^T look-ahead; stage drops (timing only, their outputs are meaningless): *drop1 = no
decode, *drop2 = no products / softmax, *drop3 = no record copies, *drop4 = one CTA's share of a
two-CTA D split (half the decode, half of Q.K^T, half of P.V; no exchange). The time a drop
saves bounds what that stage costs on the critical path. split1 = one CTA a row with Q.K^T as
two half-D products added, split2 = the two-CTA D split itself (clusters of two, partial
scores pushed two tiles ahead through distributed shared memory with a release arrive),
split2a = the same with `st.async` pushes, split2a_ks4 / split2a_la3 = four K stages / and
three tiles ahead (`--bits split2a:split1` checks that a split gives split1's bits).
The pair kernel's lab copy (`gluon_pair.py`, variants pair / pair_ks4 / pairq / pairq_ks4,
launched by a `launch_pair` here) is retired: at commit 4f6f547; production holds its QREG
design (`gluon_pair_kernels.py`, timed by `ds41_attention.bench` as `gluon` beside
`gluon_1cta`).
`--tile-sweep` times rows of 4..20 tiles (per-tile cost vs fixed cost of a program; the
production kernel and `pipe` when timed).
`--bits pipe`: the production kernel must give bitwise the outputs of the lab variant `pipe`
(the non-persistent kernel, one program per item). `--sweep-rows` sets the tile sweep's row counts.
`--split`: the fast (split) path's checks (planner split at T = 1, 8, 64; with `--check
...,split` also forced split counts 2, 7, 32 through `check`) and its times at small T against
forced split counts, the invariant kernel and the Triton split path. `--hidden
IMPLS` times those again with the host's launch latency hidden
(`ds41_attention.bench.LAUNCH_HIDDEN`: a GPU busy wait ahead of each sample), rows and tile
sweep, beside a graph of one empty kernel timed both ways. `--files NAME=PATH` adds a kernel
file with the production signature as variant NAME: the lab copies measured and retired (64-key
tiles `gluon_chunked.py`, the eighth session's switches `gluon_lab8.py`, records in registers
`gluon_lab9.py`) are in the history at commit 5c8c4c0, e.g. `git show
5c8c4c0:packages/ds41-attention/scripts/gluon_lab9.py > /tmp/lab9.py` then `--files
lab9=/tmp/lab9.py` (their module-constant variants need that commit's gluon_profile.py; the
persistent grid `gluon_persist.py` had its own launcher there too). A table of kernel times
(graph replay, us) and the sweeps' least-squares fits (us per tile, fixed us) are printed last.
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

import ds41_attention.bench as attn_bench
from ds41_attention.bench import FLASH, make_problem, time_graph
from ds41_attention.ops.sparse_attention.gluon_launch import (
    kernel_args,
    launch_gluon_fast,
    launch_gluon_sparse_attention,
    launch_with,
)
from ds41_attention.ops.sparse_attention.launch import launch_sparse_attention
from ds41_attention.ops.sparse_attention.naive import reference_sparse_attention

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from attn_helpers import max_abs_entry, random_cache, random_q, random_sink, random_slots

CUDA = torch.device("cuda")
LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gluon_lab.py")
# variants of the production kernel itself (`prod_<spec>`): its module constants replaced
PROD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "ds41_attention",
                    "ops", "sparse_attention", "gluon_kernels.py")  # fmt: skip
PROD_SPECS: dict[str, dict[str, int]] = {
    "sub16": {"SUB": 16},  # 16 keys decoded per step (32 in production since attn7)
    # (nraw3, a raw ring of 3 tiles, measured 1-4% slower in attn7, no longer compiles: the
    # ninth session's prologue fetches tiles 0 and 1 by hand and asserts NRAW == 2)
    "p120": {"PRODUCER_REGS": 120},  # consumer 0 gets 216 registers (128 / 208 since attn9)
    "p136": {"PRODUCER_REGS": 136},  # the split before attn9 (200 for consumer 0)
}
TMP = tempfile.mkdtemp(prefix="gluon_lab_")


def load_variant(name: str, path: str = LAB, **consts: int) -> ModuleType:
    """A copy of gluon_lab.py (or `path`) with module constants replaced (`NAME =
    gl.constexpr(v)`)."""
    with open(path) as f:
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


def _lab_launch_args(mod: ModuleType, args: tuple) -> tuple:
    """(out, lse, kernel args, format constexprs, grid, launch options) of a lab launch."""
    q = args[0]
    t_rows, h, d = q.shape
    out = torch.empty((t_rows, h, d), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((t_rows, h), dtype=torch.float32, device=q.device)
    a, fmts = kernel_args(*args, out, lse)
    grid = (t_rows, -(-h // mod.GLUON_BLOCK_H))
    opts = {"num_warps": mod.GLUON_NUM_WARPS, "maxnreg": mod.GLUON_MAXNREG}
    return out, lse, a, fmts, grid, opts


def launch_lab(mod: ModuleType, *args):
    """A `gluon_lab.py` variant (invariant path only: its signature ends at `H`) launched as
    the production kernel's invariant path is."""
    out, lse, a, fmts, grid, opts = _lab_launch_args(mod, args)
    mod._gluon_sparse_attn_kernel[grid](*a, **fmts, **opts)
    return out, lse


def _launch_cluster(mod: ModuleType, args: tuple, ctas_per_row: int, extra_bytes: int):
    """Launch a lab kernel in clusters of two CTAs with `extra_bytes` of shared memory past
    the compiled kernel's, at the constexpr XBASE. Triton compiles it for one CTA (its
    `num_ctas` path cannot lower these kernels' shared memory views); a first compile at XBASE
    = 0 gives the size, and since XBASE only appears in inline asm the second compile's
    allocation must come out the same, which is checked. Grid (T, head blocks) in clusters:
    Triton's launcher multiplies the first grid dimension by `num_ctas`, so the kernel sees
    T x ctas_per_row programs along it."""
    out, lse, a, fmts, grid, opts = _lab_launch_args(mod, args)
    kern = mod._gluon_sparse_attn_kernel
    sized = kern.warmup(*a, **fmts, XBASE=0, grid=grid, **opts)
    xbase = -(-sized.metadata.shared // 1024) * 1024
    k = kern.warmup(*a, **fmts, XBASE=xbase, grid=grid, **opts)
    if not getattr(k, "ds41_cluster_launch", False):
        if k.metadata.shared != sized.metadata.shared:
            raise RuntimeError("XBASE moved the shared-memory allocation")
        total = xbase + extra_bytes
        k.metadata = k.metadata._replace(shared=total)
        k.packed_metadata = (k.metadata.num_warps, ctas_per_row, total)  # clusters
        k.ds41_cluster_launch = True
    kern[grid](*a, **fmts, XBASE=xbase, **opts)
    return out, lse


def launch_lab_split(mod: ModuleType, *args):
    """A `gluon_lab.py` variant with SPLIT = 2: two CTAs a row, the exchange ring past the
    compiled kernel's shared memory."""
    return _launch_cluster(mod, args, 2, mod.exchange_ring_bytes())


def launch_prod_like(mod: ModuleType, *args, splits: int = 1):
    """A kernel with the production kernel's signature (a lab copy or a previous
    production file) launched as the production launcher does (`splits` > 1: split mode and
    the combine kernel)."""
    return launch_with(mod._gluon_sparse_attn_kernel, {"maxnreg": mod.GLUON_MAXNREG}, *args,
                       splits=splits)  # fmt: skip


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


def bits_unchanged(new: Any, old: Any, quick: bool = False) -> bool:
    """The production invariant kernel gives bitwise the outputs of `old` (the lab copy of the
    kernel before a change) on every check case at 24 rows (one item per program) and 333
    rows of random lengths, some 0 (x head blocks > 132 items: the persistent grid walks
    several items of different tile counts per program), and on 300 full rows."""
    ok = True
    cases = [("mxfp8", "nvfp4", 64), ("mxfp8", "mxfp8", 64), ("mxfp8", "bf16", 64),
             ("bf16", "nvfp4", 64), ("mxfp8", None, 64), ("bf16", "bf16", 64),
             ("mxfp8", "nvfp4", 128), ("mxfp8", "nvfp4", 16)]  # fmt: skip
    for wfmt, cfmt, h in cases[:1] if quick else cases:
        for rows in (24, 333):
            args = _problem(wfmt, cfmt, rows, h, seed=3 + rows)
            (o1, l1), (o2, l2) = new(*args), old(*args)
            same = torch.equal(o1, o2) and torch.equal(l1, l2)
            ok &= same
            print(f"bits {wfmt}+{cfmt} h{h} T={rows}: new == old {same}", flush=True)
    p = make_problem(FLASH, 300, CUDA, seed=5)
    (o1, l1), (o2, l2) = new(*p.args()), old(*p.args())
    same = torch.equal(o1, o2) and torch.equal(l1, l2)
    print(f"bits FLASH 300 rows: new == old {same}", flush=True)
    for cfmt in ("nvfp4", "mxfp8"):
        args = _extreme_scales(_problem("mxfp8", cfmt, 64, 64, seed=11))
        (o1, l1), (o2, l2) = new(*args), old(*args)
        # bit patterns (outputs may hold inf / NaN where a scale overflows bf16)
        same_x = torch.equal(o1.view(torch.int16), o2.view(torch.int16)) and torch.equal(
            l1.view(torch.int32), l2.view(torch.int32)
        )
        ok &= same_x
        print(f"bits mxfp8+{cfmt} every scale byte: new == old {same_x}", flush=True)
    return ok and same


def _extreme_scales(args: tuple) -> tuple:
    """The problem with every cache's scale bytes redrawn over a wide range (ue8m0 0..200:
    2^-127 .. 2^73, subnormal products and scales beyond 2^7, where a decode that folded the
    2^120 of its bit placement into the scale would overflow; NVFP4 e4m3 scales 0..0x7E)."""
    g = torch.Generator(device=CUDA).manual_seed(7)
    for c in (args[1], args[4]):
        if c is None or c.fmt == "bf16":
            continue
        sv = c.scale_view()
        top = 201 if c.fmt == "mxfp8" else 127
        sv.copy_(torch.randint(0, top, sv.shape, generator=g, device=CUDA).to(torch.uint8))
    return args


def _head(args: list, rows: int, t: int) -> list:
    """The first `rows` rows of a problem of `t` rows."""
    return [x[:rows] if i in (0, 2, 3, 5, 6) else x for i, x in enumerate(args)]


def split_checks() -> bool:
    """The fast path's planner split (not batch invariant): within the float64 tolerance at
    T = 1, 8, 64, rows without keys give zeros / -inf, and how often a row's bits differ
    between batch sizes (T = 1 vs 8 vs 64: different split counts)."""
    ok = True
    p = make_problem(FLASH, 64, CUDA, seed=9)
    a = list(p.args())
    a[3] = a[3].clone()
    a[6] = a[6].clone()
    a[3][5] = 0
    a[6][5] = 0  # row 5 without keys
    a[6][6] = 37  # row 6: window + 2 compressed tiles (empty slices at high split counts)
    ref, rlse = reference_sparse_attention(*_head(a, 8, 64))
    vmax = max(max_abs_entry(p.window), max_abs_entry(p.comp))
    outs = {}
    for rows in (1, 8, 64):
        o, lse = launch_gluon_fast(*_head(a, rows, 64))
        outs[rows] = o
        n = min(rows, 8)
        err = (o[:n].double() - ref[:n]).abs()
        good = bool((err <= 2.0**-8 * ref[:n].abs() + 2.0**-8 * vmax).all())
        fin = torch.isfinite(rlse[:n])
        good &= torch.equal(fin, torch.isfinite(lse[:n])) and torch.allclose(
            lse[:n].double()[fin], rlse[:n][fin], rtol=1e-5, atol=1e-4
        )
        if rows > 5:
            good &= bool((o[5] == 0).all()) and bool((lse[5] == -float("inf")).all())
        ok &= good
        print(f"fast T={rows}: within tolerance {good}", flush=True)
    d1 = int(not torch.equal(outs[1][0], outs[8][0]))
    d8 = sum(int(not torch.equal(outs[8][i], outs[64][i])) for i in range(8))
    print(f"fast not invariant: row 0 at T=1 vs T=8 differs {d1}; rows of T=8 vs T=64 that "
          f"differ {d8}/8", flush=True)  # fmt: skip
    return ok


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


def tile_sweep(impls: dict[str, Any], rows_list: tuple[int, ...] = (1, 132, 528)) -> list[dict]:
    """Time rows of 4 + k / 32 tiles (window 128, compressed length k): the slope is the
    per-tile time of one program, the intercept its fixed cost (launch, Q, first loads,
    epilogue); at T = 528 the persistent kernel walks 4 items per program, so its intercept
    / 4 is what an item costs beyond its tiles."""
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


def launch_floor() -> float:
    """Median us of a graph of one one-element kernel, timed as the kernels are."""
    x = torch.ones(1, device=CUDA)
    t = time_graph(functools.partial(torch.mul, x, 2.0), CUDA, 20)
    assert t is not None
    return round(t * 1e6, 2)


def _fits(sweep: list[dict]) -> dict[str, list[float]]:
    """Least-squares (us per tile, fixed us) of each implementation at each T of a sweep."""
    out: dict[str, list[float]] = {}
    for t in sorted({r["T"] for r in sweep}):
        rs = [r for r in sweep if r["T"] == t]
        for k in rs[0]:
            if not k.endswith("_us"):
                continue
            xs = [float(r["tiles"]) for r in rs]
            ys = [float(r[k]) for r in rs]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
            b = sxy / sum((x - mx) ** 2 for x in xs)
            out[f"{k[:-3]}@{t}"] = [round(b, 3), round(my - b * mx, 2)]
    return out


def split_sweep() -> list[dict]:
    """Graph-replay times (us) of the fast path at small T: the planner's split count, forced
    split counts, the invariant kernel and the Triton split path."""
    from ds41_attention.ops.sparse_attention.gluon_launch import plan_gluon_splits

    res = []
    sms = torch.cuda.get_device_properties(CUDA).multi_processor_count
    for rows in (1, 2, 4, 8, 16, 32, 64, 96, 128):
        p = make_problem(FLASH, rows, CUDA, seed=rows)
        fs: dict[str, Any] = {
            "invariant": functools.partial(launch_gluon_sparse_attention, *p.args()),
            "plan": functools.partial(launch_gluon_fast, *p.args()),
        }
        if rows in (1, 8, 64):
            fs["triton_split"] = functools.partial(
                launch_sparse_attention, *p.args(), batch_invariant=False
            )
        for s in (2, 3, 4, 5, 7, 10, 14, 20, 32):
            if s * rows <= 2 * sms:
                fs[f"s{s}"] = functools.partial(launch_gluon_fast, *p.args(), splits=s)
        row: dict = {"T": rows, "plan_splits": plan_gluon_splits(rows, 1, 20, sms)}
        for name, f in fs.items():
            gt = time_graph(f, CUDA, 30)
            assert gt is not None
            row[name] = round(gt * 1e6, 2)
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
    ap.add_argument("--baselines", default="triton,gluon",
                    help="production kernels timed beside the variants (or none)")  # fmt: skip
    ap.add_argument("--tile-sweep", action="store_true", help="also time rows of 4..20 tiles")
    ap.add_argument("--sweep", default="gluon,pipe", help="implementations the tile sweep times")
    ap.add_argument("--sweep-rows", default="1,132,528", help="row counts of the tile sweep")
    ap.add_argument("--split", action="store_true",
                    help="check the fast path (split counts 2, 7, 32 and the planner's) and "
                         "time split counts at small T")  # fmt: skip
    ap.add_argument("--bits", default="",
                    help="OLD (the production kernel must equal variant OLD) or NEW:OLD, "
                         "comma separated")  # fmt: skip
    ap.add_argument("--bits-quick", action="store_true", help="--bits on one format pair")
    ap.add_argument(
        "--old", default="", help="a previous production gluon_kernels.py, timed / checked as `old`"
    )
    ap.add_argument("--files", default="",
                    help="NAME=PATH,...: kernel files with the production signature (e.g. a "
                         "variant of gluon_kernels.py), timed / checked as NAME")  # fmt: skip
    ap.add_argument("--hidden", default="",
                    help="implementations timed again with the host's launch latency hidden "
                         "(rows and tile sweep; GPU busy wait ahead of each sample)")  # fmt: skip
    a = ap.parse_args()
    spec: dict[str, dict[str, int]] = {
        "ks3": {"PIPE": 0}, "ks2": {"PIPE": 0, "KSTAGES_MAIN": 2},
        "drop1": {"PIPE": 0, "DROP": 1}, "drop2": {"PIPE": 0, "DROP": 2},
        "drop3": {"PIPE": 0, "DROP": 3}, "nraw3": {"PIPE": 0, "NRAW_MAIN": 3},
        "pipe": {}, "pipe2": {"KSTAGES_MAIN": 2}, "pipe_nraw3": {"NRAW_MAIN": 3},
        "pipe_sub32": {"SUB": 32},
        "pipe_drop1": {"DROP": 1}, "pipe_drop2": {"DROP": 2}, "pipe_drop3": {"DROP": 3},
        "pipe_drop4": {"DROP": 4},
        "split1": {"SPLIT": 1}, "split2": {"SPLIT": 2, "C1_REGS": 24},
        "split2a": {"SPLIT": 2, "C1_REGS": 24, "XMODE": 1},
        "split2a_ks4": {"SPLIT": 2, "C1_REGS": 24, "XMODE": 1, "KSTAGES_MAIN": 4},
        "split2a_la3": {"SPLIT": 2, "C1_REGS": 24, "XMODE": 1, "KSTAGES_MAIN": 4, "XAHEAD": 3,
                        "XRING": 6},
    }  # fmt: skip
    prod = {"triton": launch_sparse_attention, "gluon": launch_gluon_sparse_attention}
    impls: dict[str, Any] = {n: prod[n] for n in a.baselines.split(",") if n in prod}
    names = a.variants.split(",")
    for n in names:
        if n == "old":
            impls[n] = functools.partial(launch_prod_like, load_variant("old", a.old))
        elif n.startswith("prod_"):
            impls[n] = functools.partial(launch_prod_like,
                                         load_variant(n, PROD, **PROD_SPECS[n[5:]]))  # fmt: skip
        elif re.fullmatch(r"gluon_s\d+", n):
            impls[n] = functools.partial(launch_gluon_fast, splits=int(n[7:]))
        elif n.startswith("split2"):
            impls[n] = functools.partial(launch_lab_split, load_variant(n, **spec[n]))
        else:
            impls[n] = functools.partial(launch_lab, load_variant(n, **spec[n]))
    for spec_f in filter(None, a.files.split(",")):
        fname, _, fpath = spec_f.partition("=")
        impls[fname] = functools.partial(launch_prod_like, load_variant(fname, fpath))
    split_impls: dict[str, Any] = {}
    if a.split and "split" in a.check.split(","):
        split_impls = {f"split{s}": functools.partial(launch_gluon_fast, splits=s)
                       for s in (2, 7, 32)}  # fmt: skip
    ok = True
    for pair in filter(None, a.bits.split(",")):
        new_name, _, old_name = pair.rpartition(":")
        new_f = impls[new_name] if new_name else launch_gluon_sparse_attention
        print(f"bits: {new_name or 'production'} vs {old_name}", flush=True)
        ok &= bits_unchanged(new_f, impls[old_name], a.bits_quick)
    ok &= check({k: v for k, v in impls.items() if k in a.check.split(",")} | split_impls)
    ok &= check({k: v for k, v in impls.items() if k in a.quick.split(",")}, quick=True)
    if a.split:
        ok &= split_checks()
    print("CHECK", "PASS" if ok else "FAIL", flush=True)
    rows = [int(r) for r in a.rows.split(",")]
    # stage drops at the ends of the range; drop4 (a D-split CTA's share) at every T
    only = {n: [r for r in rows if r in (1, 4096)] for n in names if re.search("drop[123]", n)}
    # forced grids and split counts are there for the bitwise checks only
    only |= {n: [] for n in names if re.search(r"_[gs]\d+$", n)}
    res = bench(impls, rows, only)
    swept = {n: impls[n] for n in a.sweep.split(",") if n in impls}
    sweep_rows = tuple(int(r) for r in a.sweep_rows.split(","))
    sweep = tile_sweep(swept, sweep_rows) if a.tile_sweep else []
    ssweep = split_sweep() if a.split else []
    hid = {n: impls[n] for n in a.hidden.split(",") if n in impls}
    hres: list[dict] = []
    hsweep: list[dict] = []
    floor = {"included": launch_floor()}
    if hid:
        attn_bench.LAUNCH_HIDDEN = True
        floor["hidden"] = launch_floor()
        print("launch hidden", flush=True)
        hres = bench(hid, rows, {})
        hsweep = tile_sweep(hid, sweep_rows) if a.tile_sweep else []
        attn_bench.LAUNCH_HIDDEN = False
    print(f"empty kernel graph, us: {json.dumps(floor)}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": res, "tile_sweep": sweep, "split_sweep": ssweep,
                       "hidden_rows": hres, "hidden_tile_sweep": hsweep, "empty_kernel_us": floor},
                      f, indent=1)  # fmt: skip
    print("| T | " + " | ".join(impls) + " |")
    for r in res:
        cells = " | ".join(
            f"{r[n + '_us']:.1f} ({r[n + '_tflops']:.0f})" if n + "_us" in r else "-" for n in impls
        )
        print(f"| {r['T']} | {cells} |")
    if hres:
        print("launch hidden: | T | " + " | ".join(hid) + " |")
        for r in hres:
            cells = " | ".join(f"{r[n + '_us']:.1f} ({r[n + '_tflops']:.0f})" for n in hid)
            print(f"| {r['T']} | {cells} |")
    for name, sw in (("tile sweep", sweep), ("tile sweep, launch hidden", hsweep)):
        fits = _fits(sw)
        if fits:
            print(f"{name}: us per tile + fixed: {json.dumps(fits)}")


if __name__ == "__main__":
    main()
