"""Issue 12, twelfth session: the fused call's segment selections overlapped with the scoring.

Times, in one process and bench-style (CUDA-graph replay medians, `ds41_indexer.bench._time`),
the fused `paged_index_topk` of

- `main`: the package at a3217eb (`paged_main.py`, one scratch buffer, selections in line),
- `overlap`: `paged_overlap.py` (two buffers, selections of all but the last segment on a side
  stream; the package at 31533a3, where call 1 ran this script with it as the package),
- `seg2`: main with segments twice the default (2 instead of 4 at 256 x 1M; 512 MB scratch:
  the package since, `package` below),
- `both`: overlap with segments twice the default (2 x 512 MB),
- `ovl_half`: overlap with segments half the default (8 segments; 2 x 128 MB = main's memory),
- `ovl_prio`: overlap with a high-priority side stream,
- `package`: this package (added after call 1; main with `SCRATCH_BYTES` 512 MB),

plus the fused call's scoring alone and selections alone (`bench.fused_stages`) at the default
and the doubled segment, at 256 x 1M, 256 x 128K, 64 x 128K, 64 x 32K and 1 x 128K (the key
cache is built once, for 256 rows of 1M; the shorter contexts use the first pages of each row's
table). Every variant's eager output and graph-replay output must equal main's eager output
(`torch.equal`), and main must equal `index_topk(index_logits(...))`: exit 1 otherwise. At
256 x 1M main and overlap are also timed eagerly (one call a sample, no graph), where a
stream's priority is honoured (a graph replay runs its nodes at the launching stream's
priority unless instantiated with per-node priorities, which torch does not ask for).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import paged_main
import paged_overlap

import ds41_indexer.bench as bench
from ds41_indexer import index_logits, index_topk, paged_index_topk
from ds41_indexer import paged as paged_mod
from ds41_indexer.ops.logits.naive import visible_entries
from ds41_indexer.ops.topk import triton_kernels as tk

SIZES = ((1 << 20, 256), (1 << 17, 256), (1 << 17, 64), (1 << 15, 64), (1 << 17, 1))


def graph_out(fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    """`fn` captured (after a warm-up on a side stream) and replayed once; its output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    out.fill_(-7)
    graph.replay()
    torch.cuda.synchronize()
    res = out.clone()
    del graph
    return res


def eager_ms(fn: Callable[[], object], iters: int) -> float:
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)  # the host queues the whole call before it starts
        a.record()
        fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b))
    return statistics.median(samples)


def stages_ms(args: tuple, scratch_bytes: int, iters: int) -> tuple[float, float]:
    """The fused call's scoring alone and selections alone (`bench.fused_stages`) with the
    package's scratch bound set to `scratch_bytes`."""
    old = paged_mod.SCRATCH_BYTES
    paged_mod.SCRATCH_BYTES = scratch_bytes
    try:
        f_logits, f_select = bench.fused_stages(*args, bench.TOPK)
        return bench._time(f_logits, DEV, iters), bench._time(f_select, DEV, iters)
    finally:
        paged_mod.SCRATCH_BYTES = old


DEV = torch.device("cuda")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=21)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sizes", default=None, help="context:rows pairs, comma-separated")
    a = ap.parse_args()
    sizes = SIZES
    if a.sizes:
        sizes = tuple(tuple(int(x) for x in p.split(":")) for p in a.sizes.split(","))  # type: ignore[misc]
    gen = torch.Generator(device=DEV).manual_seed(0)
    max_ctx = max(c for c, _ in sizes)
    max_rows = max(r for _, r in sizes)
    t0 = time.time()
    cache, table = bench.make_cache(max_rows, max_ctx, DEV, gen)
    torch.cuda.synchronize()
    print(f"cache {max_rows} x {max_ctx}: {time.time() - t0:.1f} s", flush=True)
    lo, hi = torch.cuda.Stream.priority_range()
    prio = torch.cuda.Stream(priority=hi)
    print(f"stream priorities (low, high) = ({lo}, {hi})", flush=True)
    ok = True
    results = []
    for ctx, t in sizes:
        pages = ctx // bench.PAGE_SIZE
        q = torch.randn(t, bench.HI, bench.DI, device=DEV, generator=gen).mul(2).round()
        q = q.to(torch.bfloat16)
        w = torch.randn(t, bench.HI, device=DEV, generator=gen)
        req = torch.arange(t, dtype=torch.int32, device=DEV)
        pos = torch.full((t,), ctx - 1, dtype=torch.int32, device=DEV)
        args = (q, w, cache, table[:t, :pages].contiguous(), req, pos, bench.RATIO)
        k_pad = tk.k_pad_of(bench.TOPK)
        ch = tk.default_chunk(k_pad)
        seg = paged_main.segment_for(t, ctx, ch)  # main's segment
        n_seg = -(-ctx // seg)

        def ovl_prio(*x, **kw) -> torch.Tensor:
            had = paged_overlap._SIDE.get(DEV)
            paged_overlap._SIDE[DEV] = prio
            try:
                return paged_overlap.paged_index_topk(*x, **kw)
            finally:
                if had is None:
                    del paged_overlap._SIDE[DEV]
                else:
                    paged_overlap._SIDE[DEV] = had

        variants: dict[str, Callable[[], torch.Tensor]] = {
            "main": partial(paged_main.paged_index_topk, *args, bench.TOPK, validate=False),
            "overlap": partial(paged_overlap.paged_index_topk, *args, bench.TOPK, validate=False),
            "package": partial(paged_index_topk, *args, bench.TOPK, validate=False),
        }
        if n_seg > 1:
            variants["seg2"] = partial(
                paged_main.paged_index_topk, *args, bench.TOPK, validate=False, segment=2 * seg
            )
            variants["both"] = partial(
                paged_overlap.paged_index_topk, *args, bench.TOPK, validate=False, segment=2 * seg
            )
            variants["ovl_half"] = partial(
                paged_overlap.paged_index_topk, *args, bench.TOPK, validate=False, segment=seg // 2
            )
            variants["ovl_prio"] = partial(ovl_prio, *args, bench.TOPK, validate=False)
        ref = variants["main"]()
        nv = visible_entries(req, pos, bench.RATIO)
        logits = index_logits(*args)
        unfused_ok = torch.equal(ref, index_topk(logits, nv, bench.TOPK))
        del logits
        checks = {"main==unfused": unfused_ok}
        for name, fn in variants.items():
            checks[f"{name} eager"] = torch.equal(fn(), ref)
            checks[f"{name} graph"] = torch.equal(graph_out(fn), ref)
        bad = [k for k, v in checks.items() if not v]
        ok = ok and not bad
        print(
            f"{ctx:>8} x {t:>3}: seg {seg} ({n_seg} segments); checks "
            f"{'ok' if not bad else 'FAIL ' + ', '.join(bad)}",
            flush=True,
        )
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(a.rounds):
            for name, fn in variants.items():
                times[name].append(bench._time(fn, DEV, a.iters))
        row = {
            "context": ctx,
            "rows": t,
            "segment": seg,
            "segments": n_seg,
            "checks_ok": not bad,
            "graph_ms": {k: v for k, v in times.items()},
        }
        if n_seg > 1:
            fl, fs = stages_ms(args, paged_main.SCRATCH_BYTES, a.iters)
            fl2, fs2 = stages_ms(args, 2 * paged_main.SCRATCH_BYTES, a.iters)
            row["stages_ms"] = {"score": fl, "select": fs, "score_seg2": fl2, "select_seg2": fs2}
            row["eager_ms"] = {
                name: eager_ms(variants[name], a.iters)
                for name in ("main", "overlap", "ovl_prio", "package")
            }
        results.append(row)
        print(json.dumps(row), flush=True)
    print("\nfused ms, CUDA-graph medians (one entry per round); stages: the fused call's")
    print("scoring alone / selections alone at the default segment and at twice it")
    for r in results:
        g = r["graph_ms"]
        line = "  ".join(f"{k} {'/'.join(f'{x:.4f}' for x in v)}" for k, v in g.items())
        print(f"{r['context']:>8} x {r['rows']:>3} ({r['segments']} seg): {line}")
        if "stages_ms" in r:
            s = r["stages_ms"]
            print(
                f"{'':>16} stages: score {s['score']:.4f} select {s['select']:.4f} | "
                f"seg2 score {s['score_seg2']:.4f} select {s['select_seg2']:.4f}"
            )
            e = r["eager_ms"]
            print(f"{'':>16} eager: " + "  ".join(f"{k} {v:.4f}" for k, v in e.items()))
    print("ALL CHECKS OK" if ok else "CHECK FAILED")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
