"""`python -m ds41_indexer.bench`: the fused paged indexer top-k at V4.1-Flash geometry.

Index heads Hi=32, Di=128, mxfp4 keys, k=512, ratio 1. Every row is a decode row of its own
request at the last position of a `context`-entry key cache, so each row reads `context * 68`
key bytes from HBM (no sharing between rows). Reports the fused time, the unfused logits-only
time, key-cache GB/s of the fused path and its ratio to the measured copy ceiling.
`--smoke` runs tiny contexts on the CPU (torch backend) so a test can exercise the script.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial

import torch

from ds41_cache.paged import PagedCache

from .logits import index_logits
from .ops.logits.naive import visible_entries
from .paged import paged_index_topk
from .topk import index_topk

HI, DI, TOPK, RATIO = 32, 128, 512, 1
PAGE_SIZE = 64
COPY_CEILING_GBS = 4300.0
"""Measured H200 copy bandwidth (SPEC section 10), GB/s."""
CONTEXTS = (4096, 32768, 131072, 1048576)
ROWS = (1, 8, 64, 256)


@dataclass
class Result:
    context: int
    rows: int
    fused_ms: float
    logits_ms: float
    key_gb: float
    gbs: float
    ratio_to_copy: float
    tflops: float
    check: str = "-"


def _time(fn: Callable[[], object], device: torch.device, iters: int) -> float:
    fn()  # warm-up (and JIT compile)
    if device.type == "cuda":
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        stop = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        torch.cuda.synchronize()
        return float(start.elapsed_time(stop)) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1e3 / iters


def make_cache(
    n_req: int, context: int, device: torch.device, gen: torch.Generator
) -> tuple[PagedCache, torch.Tensor]:
    """Random mxfp4 keys (scale bytes near 1.0) in shuffled pages; block table int32 [R, P]."""
    pages_per_req = -(-context // PAGE_SIZE)
    num_pages = n_req * pages_per_req
    cache = PagedCache.allocate("mxfp4", DI, PAGE_SIZE, num_pages, device=device)
    data = cache.data_view()
    data.copy_(torch.randint(0, 256, data.shape, dtype=torch.uint8, device=device, generator=gen))
    sc = cache.scale_view()
    sc.copy_(torch.randint(120, 128, sc.shape, dtype=torch.uint8, device=device, generator=gen))
    perm = torch.randperm(num_pages, device=device, generator=gen).to(torch.int32)
    return cache, perm.view(n_req, pages_per_req)


def check_rows(
    q: torch.Tensor,
    w: torch.Tensor,
    cache: PagedCache,
    table: torch.Tensor,
    req: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    k: int,
) -> str:
    """Fused == unfused, and the first and last rows alone == in the batch (bitwise)."""
    fused = paged_index_topk(q, w, cache, table, req, pos, ratio, k)
    logits = index_logits(q, w, cache, table, req, pos, ratio)
    ok = torch.equal(fused, index_topk(logits, visible_entries(req, pos, ratio), k))
    for i in (0, q.shape[0] - 1):
        s = slice(i, i + 1)
        one = paged_index_topk(q[s], w[s], cache, table, req[s], pos[s], ratio, k)
        ok = ok and torch.equal(one, fused[s])
    return "ok" if ok else "FAIL"


def run(
    contexts: tuple[int, ...],
    rows: tuple[int, ...],
    device: torch.device,
    iters: int,
    check: bool = False,
) -> list[Result]:
    gen = torch.Generator(device=device).manual_seed(0)
    out = []
    for ctx in contexts:
        cache, table = make_cache(max(rows), ctx, device, gen)
        for t in rows:
            q = torch.randn(t, HI, DI, device=device, generator=gen).mul(2).round()
            q = q.to(torch.bfloat16)
            w = torch.randn(t, HI, device=device, generator=gen)
            req = torch.arange(t, dtype=torch.int32, device=device)
            pos = torch.full((t,), ctx - 1, dtype=torch.int32, device=device)
            args = (q, w, cache, table[:t], req, pos, RATIO)
            n_it = iters if ctx * t <= (1 << 24) else max(2, iters // 3)
            fused = _time(partial(paged_index_topk, *args, TOPK, validate=False), device, n_it)
            logits = _time(partial(index_logits, *args, validate=False), device, n_it)
            key_bytes = t * ctx * cache.layout.bytes_per_token
            gbs = key_bytes / (fused * 1e-3) / 1e9
            flops = 2.0 * t * ctx * HI * DI
            out.append(
                Result(
                    ctx,
                    t,
                    fused,
                    logits,
                    key_bytes / 1e9,
                    gbs,
                    gbs / COPY_CEILING_GBS,
                    flops / (fused * 1e-3) / 1e12,
                    check_rows(*args, TOPK) if check else "-",
                )
            )
            print(_row(out[-1]), flush=True)
        del cache, table
    return out


HEADER = (
    f"{'context':>9} {'rows':>5} {'fused ms':>10} {'logits ms':>10} {'key GB':>8} "
    f"{'GB/s':>8} {'/copy':>6} {'TFLOP/s':>8} {'check':>6}"
)


def _row(r: Result) -> str:
    return (
        f"{r.context:>9} {r.rows:>5} {r.fused_ms:>10.3f} {r.logits_ms:>10.3f} {r.key_gb:>8.3f} "
        f"{r.gbs:>8.1f} {r.ratio_to_copy:>6.2f} {r.tflops:>8.1f} {r.check:>6}"
    )


def main(argv: list[str] | None = None) -> list[Result]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run (torch backend)")
    ap.add_argument("--json", type=str, default=None, help="write the results as JSON here")
    ap.add_argument("--contexts", type=str, default=None, help="comma-separated entry counts")
    ap.add_argument("--rows", type=str, default=None, help="comma-separated row counts")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--check", action="store_true", help="also check fused == unfused per size")
    args = ap.parse_args(argv)
    if args.smoke:
        device = torch.device("cpu")
        contexts: tuple[int, ...] = (64, 200)
        rows: tuple[int, ...] = (1, 2)
        iters = 1
    else:
        if not torch.cuda.is_available():
            raise SystemExit("the benchmark needs a CUDA device; use --smoke on the CPU")
        device = torch.device("cuda")
        contexts, rows, iters = CONTEXTS, ROWS, args.iters
    if args.contexts:
        contexts = tuple(int(v) for v in args.contexts.split(","))
    if args.rows:
        rows = tuple(int(v) for v in args.rows.split(","))
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    from .ops.logits.triton_kernels import tile_config

    print(
        f"ds41_indexer bench on {name}: Hi={HI} Di={DI} mxfp4 k={TOPK} ratio={RATIO} "
        f"logits tile (BLOCK_N, TILES, warps, KEYS_M)={tile_config(device)}"
    )
    print(HEADER)
    results = run(contexts, rows, device, iters, check=args.check)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "results": [asdict(r) for r in results]}, f, indent=2)
    return results


if __name__ == "__main__":
    main()
