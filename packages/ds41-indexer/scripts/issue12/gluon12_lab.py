# mypy: disable-error-code="no-untyped-def,no-untyped-call"
"""Issue 12, tenth session, second round (helper idx10b): the package's logits (and fused
logits + top-k) against the same calls on the persistent-grid lab kernel (`gluon12_kernels.py`,
`PERSIST`, through `gluon12_plugin.shim`), in one process on one H200, CUDA-graph medians (the
bench's `_time`).

- "this": the package's `paged_logits_gpu` (its kernel at its `gluon_config` shape + the
  Triton pass over the flags).
- "persist sT Pn" / "persist dT Pn": the same dispatch with the lab kernel: calls
  `gluon_config` gives one consumer run as one persistent launch of n programs (n = min(items,
  SMs x 4): one wave) over items of T tiles, each program taking its contiguous share ("s") or
  claiming items one at a time ("d", DYN), then the same Triton pass; two-consumer calls (few
  programs) run the package's kernel.
- "this @NC1 T128": the package's kernel at 8 spans a program (the cheap alternative where
  `gluon_config` gives 4: fewer programs, no persistent loop).
- "fused ...": `paged_index_topk` (validate=False) with the package's kernel and with the lab
  kernel, and its logits stage alone (`bench.fused_stages`: every segment's scores + group
  maxima), same output required.
Every timed logits result is compared bitwise with the Triton kernel alone (logits and group
maxima; `same`), every fused result with the package's; the script exits 1 on any mismatch.

    python packages/ds41-indexer/scripts/issue12/gluon12_lab.py [--json out.json]
        [--plan 64:32768,f256:1048576,...] [--iters 7] [--persist s32,d32,d64] [--launch-hidden]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gluon12_plugin as plug  # noqa: E402

from ds41_indexer import bench, paged_index_topk  # noqa: E402
from ds41_indexer.ops.logits import gluon_kernels as package_kernels  # noqa: E402
from ds41_indexer.ops.logits.gluon_launch import (  # noqa: E402
    gluon_config,
    launch_gluon_logits,
    paged_logits_gpu,
)
from ds41_indexer.ops.logits.triton_kernels import TILE, paged_logits_triton  # noqa: E402

DEV = torch.device("cuda")
# rows:context, in the order run (the most wanted first; "f": the fused call)
PLAN = ("64:32768,64:131072,256:1048576,f256:1048576,256:131072,128:32768,32:32768,1:1048576,"
        "f64:131072,f64:32768")  # fmt: skip


def persist_module(tag: str):  # type: ignore[no-untyped-def]
    """The lab stand-in for a variant "sT" / "dT": one wave of programs over items of T tiles,
    static shares or claimed (DYN)."""
    wave = plug.one_wave(DEV)
    return plug.shim(lambda _tiles, _dev: wave, int(tag[1:]), tag[0] == "d")


def this_at(config, q, w, cache, table, req, pos, ratio, out, gmax):
    """The package's kernel at program shape `config`, then the Triton pass."""
    done = launch_gluon_logits(q, w, cache, table, req, pos, ratio, out, gmax=gmax,
                               config=config)  # fmt: skip
    paged_logits_triton(q, w, cache, table, req, pos, ratio, out, gmax=gmax, done=done)


def on(mod, fn):  # type: ignore[no-untyped-def]
    """fn with `mod` as the launched Gluon module (restored after)."""

    def call(*a, **kw):  # type: ignore[no-untyped-def]
        plug.use(mod)
        try:
            return fn(*a, **kw)
        finally:
            plug.use(package_kernels)

    return call


def setup(rows: int, ctx: int, gen: torch.Generator):  # type: ignore[no-untyped-def]
    cache, table = bench.make_cache(rows, ctx, DEV, gen)
    q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round().to(torch.bfloat16)
    w = torch.randn(rows, 32, device=DEV, generator=gen)
    req = torch.arange(rows, dtype=torch.int32, device=DEV)
    pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=DEV)
    return cache, table, q, w, req, pos


def timed(mod, call, iters: int):  # type: ignore[no-untyped-def]
    """bench._time of `call` with `mod` launched (the graph is captured with it)."""
    plug.use(mod)
    try:
        return bench._time(call, DEV, iters)
    finally:
        plug.use(package_kernels)


def run_size(size: str, gen: torch.Generator, iters: int, res: dict[str, object],
             persist: dict[str, object]) -> None:  # fmt: skip
    rows, ctx = (int(x) for x in size.split(":"))
    cache, table, q, w, req, pos = setup(rows, ctx, gen)
    args = (q, w, cache, table, req, pos, 1)
    nbytes = rows * ctx * 68
    ref = torch.empty(rows, ctx, device=DEV)
    out = torch.empty(rows, ctx, device=DEV)
    gm_ref = torch.empty(rows, ctx // 64, dtype=torch.int32, device=DEV)
    gm = torch.empty_like(gm_ref)
    paged_logits_triton(*args, ref, gmax=gm_ref)
    spans = -(-ctx // (TILE[0] * TILE[1]))
    nc, tiles = gluon_config(rows, spans)
    plan: list[tuple[str, object, object]] = [(f"this NC{nc} T{tiles}", package_kernels, None)]
    if nc == 1:
        wave = plug.one_wave(DEV)
        for tag, mod in persist.items():
            n = min(rows * -(-spans // (int(tag[1:]) // 16)), wave)
            plan.append((f"persist {tag} P{n}", mod, None))
        if tiles == 64:
            plan.append(("this @NC1 T128", package_kernels, partial(this_at, (1, 128))))
    for name, mod, fn in plan:
        call = (partial(paged_logits_gpu, *args, out, gmax=gm) if fn is None
                else partial(fn, *args, out, gm))  # type: ignore[operator]  # fmt: skip
        try:
            out.fill_(1.0)
            gm.fill_(1)
            on(mod, call)()
            same = torch.equal(out.view(torch.int32), ref.view(torch.int32)) and torch.equal(
                gm, gm_ref
            )
            ms = timed(mod, call, iters)
        except Exception as e:  # a variant that fails is reported, not fatal
            print(f"{size} {name} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            res[f"{size} {name}"] = {"failed": str(e)[:300], "same": False}
            continue
        gbs = nbytes / ms / 1e6
        res[f"{size} {name}"] = {"ms": ms, "gbs": gbs, "same": same}
        print(f"{size:>12} {name:20s} {ms:9.4f} ms {gbs:6.0f} GB/s same={same}", flush=True)


def run_fused(size: str, gen: torch.Generator, iters: int, res: dict[str, object],
              persist: dict[str, object]) -> None:  # fmt: skip
    rows, ctx = (int(x) for x in size.split(":"))
    cache, table, q, w, req, pos = setup(rows, ctx, gen)
    args = (q, w, cache, table, req, pos, 1)
    nbytes = rows * ctx * 68
    ref = paged_index_topk(*args, bench.TOPK, validate=False)
    variants = [("this", package_kernels), *((f"persist {t}", m) for t, m in persist.items())]
    for name, mod in variants:
        call = partial(paged_index_topk, *args, bench.TOPK, validate=False)
        try:
            same = torch.equal(on(mod, call)(), ref)
            ms = timed(mod, call, iters)
            f_logits, f_select = bench.fused_stages(*args, bench.TOPK)
            ms_l = timed(mod, f_logits, iters)
            ms_s = timed(mod, f_select, iters) if name == "this" else float("nan")
        except Exception as e:
            print(f"fused {size} {name} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            res[f"fused {size} {name}"] = {"failed": str(e)[:300], "same": False}
            continue
        res[f"fused {size} {name}"] = {"ms": ms, "f_logits_ms": ms_l, "f_select_ms": ms_s,
                                       "same": same}  # fmt: skip
        print(f"{'fused ' + size:>18} {name:12s} {ms:9.4f} ms ({nbytes / ms / 1e6:5.0f} GB/s) "
              f"f.logits {ms_l:9.4f} f.select {ms_s:8.4f} same={same}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--plan", default=PLAN, help="rows:context,... ('f' prefix: fused call)")
    ap.add_argument(
        "--persist", default="s32,d32,d64", help="variants: s (static) or d (DYN) + item tiles"
    )
    ap.add_argument("--launch-hidden", action="store_true", help="bench.LAUNCH_HIDDEN timing")
    a = ap.parse_args()
    bench.LAUNCH_HIDDEN = a.launch_hidden
    gen = torch.Generator(device=DEV).manual_seed(0)
    persist = {t: persist_module(t) for t in a.persist.split(",") if t}
    plug.counters(torch.device("cuda", torch.cuda.current_device()))  # before any capture
    res: dict[str, object] = {"device": torch.cuda.get_device_name(), "hidden": a.launch_hidden,
                              "one_wave": plug.one_wave(DEV)}  # fmt: skip
    for size in a.plan.split(","):
        if size.startswith("f"):
            run_fused(size[1:], gen, a.iters, res, persist)
        elif size:
            run_size(size, gen, a.iters, res, persist)
        torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    bad = [k for k, v in res.items() if isinstance(v, dict) and v.get("same") is False]
    print(f"results not bitwise the reference's: {bad}")
    sys.exit(0 if not bad else 1)


if __name__ == "__main__":
    main()
