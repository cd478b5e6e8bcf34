"""`python -m ds41_indexer.bench`: the fused paged indexer top-k at V4.1-Flash geometry.

Index heads Hi=32, Di=128, mxfp4 keys, k=512, ratio 1. Every row is a decode row of its own
request at the last position of a `context`-entry key cache, so each row reads `context * 68`
key bytes from HBM (no sharing between rows). Per size it reports three stages, each captured in
a CUDA graph and timed over replays (median): the logits alone (`index_logits`, fp32 `[T, N]`),
the top-k alone (`index_topk` on those logits) and the fused call (`paged_index_topk`), plus
key-cache GB/s of the logits and of the fused call and their ratio to the copy ceiling. The
fused call is also split into its two stages, each timed alone: the logits kernel writing the
scores and group maxima (`f.logits`), and the group selection (`f.select`).
`--smoke` runs tiny contexts on the CPU (torch backend) so a test can exercise the script.
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    topk_ms: float
    key_gb: float
    logits_gbs: float
    gbs: float
    ratio_to_copy: float
    tflops: float
    f_logits_ms: float = 0.0
    f_select_ms: float = 0.0
    check: str = "-"


LAUNCH_HIDDEN = False
"""How `_time` times a CUDA-graph replay. False (the default, the figures of BENCHMARKS.md):
each sample submits the replay to an idle GPU, so a short graph's figure includes the host's
launch latency (an empty kernel reads ~10-15 us this way on the H200, varying between
processes). True (`--launch-hidden`): a `torch.cuda._sleep` keeps the GPU busy until the replay
is queued, so a sample is the graph's GPU time alone, as inside a larger captured graph (the
runner's decode step)."""
SLEEP_CYCLES = 400_000
"""GPU cycles of the busy wait ahead of a launch-hidden sample (~200 us at 1.98 GHz)."""


def _time(fn: Callable[[], object], device: torch.device, iters: int) -> float:
    """Median ms of `fn`: on CUDA one CUDA-graph replay per sample (no host overhead between
    the graph's nodes; see `LAUNCH_HIDDEN` for the launch itself)."""
    fn()  # warm-up (and JIT compile)
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) * 1e3 / iters
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        stop = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        if LAUNCH_HIDDEN:
            torch.cuda._sleep(SLEEP_CYCLES)  # type: ignore[no-untyped-call]
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()  # type: ignore[no-untyped-call]
        samples.append(float(start.elapsed_time(stop)))
    del graph
    return statistics.median(samples)


def launch_floor(device: torch.device, iters: int) -> float:
    """Median ms of a replayed graph of one one-element torch kernel, timed as the stages are."""
    x = torch.ones(1, device=device)
    return _time(partial(torch.mul, x, 2.0), device, iters)


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
            fused = _time(partial(paged_index_topk, *args, TOPK, validate=False), device, iters)
            logits = _time(partial(index_logits, *args, validate=False), device, iters)
            scores = index_logits(*args)
            n_vis = visible_entries(req, pos, RATIO)
            topk = _time(partial(index_topk, scores, n_vis, TOPK, validate=False), device, iters)
            del scores
            f_logits, f_select = fused_stages(*args, TOPK)
            f_logits_ms = _time(f_logits, device, iters) if device.type == "cuda" else 0.0
            f_select_ms = _time(f_select, device, iters) if device.type == "cuda" else 0.0
            key_bytes = t * ctx * cache.layout.bytes_per_token
            gbs = key_bytes / (fused * 1e-3) / 1e9
            flops = 2.0 * t * ctx * HI * DI
            out.append(
                Result(
                    ctx,
                    t,
                    fused,
                    logits,
                    topk,
                    key_bytes / 1e9,
                    key_bytes / (logits * 1e-3) / 1e9,
                    gbs,
                    gbs / COPY_CEILING_GBS,
                    flops / (fused * 1e-3) / 1e12,
                    f_logits_ms,
                    f_select_ms,
                    check_rows(*args, TOPK) if check else "-",
                )
            )
            print(_row(out[-1]), flush=True)
        del cache, table
    return out


HEADER = (
    f"{'context':>9} {'rows':>5} {'logits ms':>10} {'top-k ms':>10} {'fused ms':>10} "
    f"{'f.logits':>9} {'f.select':>9} {'key GB':>8} {'logit GB/s':>10} {'fused GB/s':>10} "
    f"{'/copy':>6} {'TFLOP/s':>8} {'check':>6}"
)


def _row(r: Result) -> str:
    return (
        f"{r.context:>9} {r.rows:>5} {r.logits_ms:>10.4f} {r.topk_ms:>10.4f} {r.fused_ms:>10.4f} "
        f"{r.f_logits_ms:>9.4f} {r.f_select_ms:>9.4f} {r.key_gb:>8.3f} {r.logits_gbs:>10.1f} "
        f"{r.gbs:>10.1f} {r.ratio_to_copy:>6.2f} {r.tflops:>8.1f} {r.check:>6}"
    )


def fused_stages(
    q: torch.Tensor,
    w: torch.Tensor,
    cache: PagedCache,
    table: torch.Tensor,
    req: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    k: int,
) -> tuple[Callable[[], object], Callable[[], object]]:
    """The two stages of `paged_index_topk` on the Triton path as separate calls (the same
    segments, scratch and launches): scores (+ group maxima) of every segment, then the
    selection: one program per row (one chunk), the split selector (one segment) or the group
    selection of every segment (on the last segment's scores; the work is the same)."""
    from ds41_cache.outputs import empty

    from .ops.logits.gluon_launch import paged_logits_gpu
    from .ops.topk import triton_kernels as tk
    from .paged import segment_for

    t = q.shape[0]
    n_total = table.shape[1] * cache.page_size
    k_pad = tk.k_pad_of(k)
    ch = tk.default_chunk(k_pad)
    seg = segment_for(t, n_total, ch)
    width = min(seg, n_total)
    buf = empty((t, width), torch.float32, q.device)
    sp, scratch, gmax = tk.selection_scratch(t, n_total, seg, k_pad, ch, empty, q.device)
    out = empty((t, k), torch.int32, q.device)
    n_vis = visible_entries(req, pos, ratio)
    bases = range(0, n_total, seg)

    def logits() -> None:
        for base in bases:
            view = buf[:, : min(seg, n_total - base)]
            paged_logits_gpu(q, w, cache, table, req, pos, ratio, view, entry_base=base, gmax=gmax)

    def select() -> None:
        if n_total <= ch:
            tk.select_rows(buf, n_vis, k, k_pad, ch, out)
            return
        if sp is not None:
            tk.split_select(buf, n_vis, k, k_pad, ch, sp, out)
            return
        assert scratch is not None
        for base in bases:
            view = buf[:, : min(seg, n_total - base)]
            tk.group_select(
                view,
                n_vis,
                k,
                k_pad,
                ch,
                scratch,
                out,
                entry_base=base,
                has_run=base > 0,
                final=base + seg >= n_total,
            )

    return logits, select


def main(argv: list[str] | None = None) -> list[Result]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny CPU run (torch backend)")
    ap.add_argument("--json", type=str, default=None, help="write the results as JSON here")
    ap.add_argument("--contexts", type=str, default=None, help="comma-separated entry counts")
    ap.add_argument("--rows", type=str, default=None, help="comma-separated row counts")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--check", action="store_true", help="also check fused == unfused per size")
    ap.add_argument(
        "--launch-hidden",
        action="store_true",
        help="time each replay behind a GPU busy wait (its GPU time, without launch latency)",
    )
    args = ap.parse_args(argv)
    global LAUNCH_HIDDEN
    LAUNCH_HIDDEN = args.launch_hidden
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
    timing = "launch hidden" if LAUNCH_HIDDEN else "launch included"
    print(
        f"ds41_indexer bench on {name}: Hi={HI} Di={DI} mxfp4 k={TOPK} ratio={RATIO}, "
        f"CUDA-graph replays (median, {timing})"
    )
    floor = launch_floor(device, iters) if device.type == "cuda" else 0.0
    if device.type == "cuda":
        print(f"one one-element kernel, same timing: {floor * 1e3:.1f} us")
    print(HEADER)
    results = run(contexts, rows, device, iters, check=args.check)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": name,
                    "launch_hidden": LAUNCH_HIDDEN,
                    "floor_ms": floor,
                    "results": [asdict(r) for r in results],
                },
                f,
                indent=2,
            )
    return results


if __name__ == "__main__":
    main()
