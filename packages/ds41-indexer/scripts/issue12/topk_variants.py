"""Issue 12, second round: top-k strategies on one H200 in one process, each checked bitwise
against the torch reference, then timed as CUDA-graph replays (median).

Variants: the threshold search (the package's bitwise search vs an interpolating bracket, with
one joint reduction a step `interp` or three `sep`; copies of the module with the search
swapped in), the strategy for rows past one chunk (`split`: slices + merge; `group`: one
program per row), the single-chunk kernel's warps at 4K, and the fused call (split vs group)
at 1 and 64 rows. `--cpu`: an interpreter smoke run of this script (tiny sizes).
usage: python topk_variants.py [--json OUT] [--contexts ...] [--rows ...] [--iters N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from functools import partial

import torch

import ds41_indexer.ops.topk.triton_kernels as tk
from ds41_cache.outputs import empty
from ds41_indexer import index_logits, index_topk, paged_index_topk
from ds41_indexer.bench import DI, HI, RATIO, TOPK, _time, make_cache
from ds41_indexer.ops.logits.naive import visible_entries

INTERP_SRC = '''
JOINT = tl.constexpr(JOINT_VALUE)


@triton.jit
def _count_min_max(a_cnt, a_min, a_max, b_cnt, b_min, b_max):
    return a_cnt + b_cnt, tl.minimum(a_min, b_min), tl.maximum(a_max, b_max)


@triton.jit
def _threshold_interp(key, valid, kk, n_valid, lo, hi):
    """The kk-th largest valid key (uint32 [C]), known to lie in [lo, hi] with at least kk valid
    keys >= lo (n_valid of them in all). A bracket [L, H) of the answer (at least kk keys >= L,
    fewer than kk >= H) shrinks each step by one joint reduction at a probe c: the count of
    keys >= c, the smallest key >= c (the new L when the count is >= kk) and the largest key
    < c (plus one: the new H otherwise), so both ends jump over empty key ranges. c is
    interpolated from the bracket's counts on even steps and is its midpoint on odd steps, so
    the bracket at least halves every two steps; it ends at H = L + 1, L the answer."""
    big = tl.full((), 0xFFFFFFFF, tl.uint32)
    zero = tl.zeros((), tl.uint32)
    lo64 = lo.to(tl.int64)
    hi64 = hi.to(tl.int64) + 1
    c_lo = n_valid
    c_hi = tl.zeros((), tl.int32)
    step = 0
    while (hi64 - lo64 > 1) & (kk > 0):
        span = hi64 - lo64
        if step % 2 == 0:
            frac = (c_lo - kk).to(tl.float32) / tl.maximum(c_lo - c_hi, 1).to(tl.float32)
            c = lo64 + 1 + (frac * (span - 2).to(tl.float32)).to(tl.int64)
        else:
            c = lo64 + span // 2
        c = tl.minimum(tl.maximum(c, lo64 + 1), hi64 - 1)
        ge = valid & (key >= c.to(tl.uint32))
        if JOINT:
            cnt, mn, mx = tl.reduce(
                (ge.to(tl.int32), tl.where(ge, key, big), tl.where(valid & ~ge, key, zero)),
                0,
                _count_min_max,
            )
        else:
            cnt = tl.sum(ge.to(tl.int32), axis=0)
            mn = tl.min(tl.where(ge, key, big), axis=0)
            mx = tl.max(tl.where(valid & ~ge, key, zero), axis=0)
        if cnt >= kk:
            lo64 = mn.to(tl.int64)
            c_lo = cnt
        else:
            hi64 = mx.to(tl.int64) + 1
            c_hi = cnt
        step += 1
    return lo64.to(tl.uint32)


'''
"""The interpolating search (not in the package): JOINT = one tuple reduction a step, else three
built-in reductions (the interpreter's choice: it runs a combine function element by element)."""

SEARCH_CALL = "    thr = _threshold_in(key, valid, kk, lo, hi, 0)\n"
REGION_DEF = "@triton.jit\ndef _select_region("


def interp_edits(joint: bool) -> list[tuple[str, str]]:
    return [
        (SEARCH_CALL, "    thr = _threshold_interp(key, valid, kk, n_valid, lo, hi)\n"),
        (REGION_DEF, INTERP_SRC.replace("JOINT_VALUE", str(joint)) + "\n\n" + REGION_DEF),
    ]


def variant(name: str, edits: list[tuple[str, str]]):
    """A copy of the top-k module with the edits (old, new) applied (a file: Triton reads kernel
    sources)."""
    with open(tk.__file__) as f:
        src = f.read()
    for old, new in edits:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    path = os.path.join(tempfile.mkdtemp(), f"tk_{name}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"tk_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def tie_heavy(t: int, n: int, seed: int, dev: torch.device) -> torch.Tensor:
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(t, n, device=dev, generator=g)
    kind = torch.arange(t, device=dev)[:, None] % 4
    levels = x.mul(2).round().div(2)
    collapsed = (1 + x * 1e-3).to(torch.bfloat16).float()
    zeros = torch.where(x < 0, -0.0, 0.0) + torch.where(x > 1.5, float("-inf"), 0.0)
    return torch.where(
        kind == 0, x, torch.where(kind == 1, levels, torch.where(kind == 2, collapsed, zeros))
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--contexts", default="4096,32768,131072,1048576")
    ap.add_argument("--rows", default="1,64,256")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--cpu", action="store_true", help="interpreter smoke run of this script")
    a = ap.parse_args()
    dev = torch.device("cpu" if a.cpu else "cuda")
    mods = {
        "bitwise": tk,
        "interp": variant("interp", interp_edits(not a.cpu)),
        "sep": variant("sep", interp_edits(False)),
    }
    res: list[dict[str, object]] = []
    bad = 0

    def rec(**kw: object) -> None:
        res.append(kw)
        print(
            " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in kw.items()),
            flush=True,
        )

    # correctness on tie-heavy rows (both searches, both strategies)
    tie_sizes = ((2, 5000),) if a.cpu else ((4, 4096), (6, 40000), (4, 131072), (2, (1 << 20) + 77))
    for t, n in tie_sizes:
        x = tie_heavy(t, n, t + n, dev)
        g = torch.Generator(device=dev).manual_seed(n)
        nv = torch.randint(0, n + 1, (t,), device=dev, dtype=torch.int32, generator=g)
        nv[0] = n
        if t > 2:
            nv[1] = 300
        for k in (1, 512):
            ref = index_topk(x, nv, k, backend="torch")
            for name, m in mods.items():
                for split in (True, False) if name != "sep" else (True,):
                    ok = torch.equal(m.index_topk_triton(x, nv, k, empty, split=split), ref)
                    bad += not ok
                    if not ok:
                        print("FAIL ties", t, n, k, name, split, flush=True)
    print(f"tie checks done, failures {bad}", flush=True)

    gen = torch.Generator(device=dev).manual_seed(0)
    rows = tuple(int(v) for v in a.rows.split(","))
    for ctx in (int(v) for v in a.contexts.split(",")):
        cache, table = make_cache(max(rows), ctx, dev, gen)
        for t in rows:
            q = torch.randn(t, HI, DI, device=dev, generator=gen).mul(2).round().to(torch.bfloat16)
            w = torch.randn(t, HI, device=dev, generator=gen)
            req = torch.arange(t, dtype=torch.int32, device=dev)
            pos = torch.full((t,), ctx - 1, dtype=torch.int32, device=dev)
            args = (q, w, cache, table[:t], req, pos, RATIO)
            scores = index_logits(*args)
            nv = visible_entries(req, pos, RATIO)
            ref = index_topk(scores, nv, TOPK, backend="torch")
            for name, m in mods.items():
                if name == "sep" and t > 1:
                    continue
                for strat in ("rows",) if ctx <= 4096 else ("split", "group"):
                    fn = partial(
                        m.index_topk_triton, scores, nv, TOPK, empty, split=strat == "split"
                    )
                    ok = torch.equal(fn(), ref)
                    bad += not ok
                    rec(
                        stage="topk",
                        ctx=ctx,
                        rows=t,
                        search=name,
                        strat=strat,
                        ms=_time(fn, dev, a.iters),
                        ok=ok,
                    )
                if ctx <= 4096 and t == 1:
                    out = torch.empty(t, TOPK, dtype=torch.int32, device=dev)
                    for nw in (4, 16):
                        sel = partial(
                            m._select_row_kernel[(t,)],
                            scores,
                            nv,
                            out,
                            ctx,
                            scores.stride(0),
                            out.stride(0),
                            TOPK,
                            CHUNK=4096,
                            K_PAD=512,
                            num_warps=nw,
                        )
                        sel()
                        ok = torch.equal(out, ref)
                        bad += not ok
                        rec(
                            stage="topk",
                            ctx=ctx,
                            rows=t,
                            search=name,
                            strat=f"rows_w{nw}",
                            ms=_time(sel, dev, a.iters),
                            ok=ok,
                        )
            del scores
            if t <= 64:
                for strat in ("split", "group"):
                    keep = tk.SPLIT_MAX_ROWS
                    tk.SPLIT_MAX_ROWS = keep if strat == "split" else 0
                    fn = partial(paged_index_topk, *args, TOPK, validate=False)
                    ok = torch.equal(fn(), ref)
                    bad += not ok
                    rec(
                        stage="fused",
                        ctx=ctx,
                        rows=t,
                        search="bitwise",
                        strat=strat,
                        ms=_time(fn, dev, a.iters),
                        ok=ok,
                    )
                    tk.SPLIT_MAX_ROWS = keep
        del cache, table
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(
                    {"device": str(dev), "results": res, "failures": bad},
                    f,
                    indent=1,
                )
    print(f"\nfailures: {bad}")
    keys = sorted({(r["stage"], r["ctx"], r["rows"]) for r in res})
    for st, c, t in keys:
        cells = {
            (r["search"], r["strat"]): r["ms"]
            for r in res
            if (r["stage"], r["ctx"], r["rows"]) == (st, c, t)
        }
        print(
            f"{st:5} {c:>8} {t:>4} | "
            + " ".join(f"{n}/{s}={v * 1e3:.1f}us" for (n, s), v in sorted(cells.items()))
        )


if __name__ == "__main__":
    main()
