"""GPU timing of the compressor's step (torch path vs the two-launch Triton path) and of the
row RMSNorm kernel's rows-per-program, each as a replayed CUDA graph (the engine's decode
step is one), CUDA-event medians: `python packages/ds41-cache/scripts/compress_bench.py
[--json PATH]`. Also checks the two compressor paths give the same bits on these inputs."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from functools import partial

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from ds41_cache.compressor import Compressor
from ds41_cache.ops.norm.triton_kernels import launch_rms_norm

D = 512  # V4.1-Flash latent width
EPS = 1e-6


def graph_us(fn: Callable[[], object], reps: int = 50, inner: int = 20) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / inner)
    return float(statistics.median(times))


@triton.jit
def _exp_kernel(x_ptr, approx_ptr, precise_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=0.0)
    tl.store(approx_ptr + offs, tl.math.exp(x), mask=ok)
    tl.store(precise_ptr + offs, libdevice.exp(x), mask=ok)


def exp_mismatches(dev: torch.device) -> dict[str, object]:
    """16.8M arguments in [-40, 0] (the pooling's range): how many of each Triton exp's
    results differ from torch.exp's."""
    g = torch.Generator(device=dev).manual_seed(1)
    x = -torch.rand(1 << 24, device=dev, generator=g) * 40
    approx, precise = torch.empty_like(x), torch.empty_like(x)
    _exp_kernel[(triton.cdiv(x.numel(), 1024),)](x, approx, precise, x.numel(), BLOCK=1024)
    ref = torch.exp(x)
    return {
        "op": "exp vs torch.exp",
        "rows": x.numel(),
        "tl.math.exp differs": int((approx != ref).sum()),
        "libdevice.exp differs": int((precise != ref).sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    rows: list[dict[str, object]] = [exp_mismatches(dev)]
    g = torch.Generator(device=dev).manual_seed(0)
    for ratio in (1, 2):
        for t in (1, 64, 4096):
            kv = torch.randn(t, D, device=dev, generator=g) * 3
            score = torch.randn(t, D, device=dev, generator=g) * 4 if ratio == 2 else None
            w = torch.rand(D, device=dev, generator=g) + 0.5
            req = (torch.arange(t, device=dev) % 64).to(torch.int32)
            pos = (torch.arange(t, device=dev) // 64 + 7).to(torch.int32)
            res: dict[str, object] = {"op": f"compressor ratio {ratio}", "rows": t}
            outs = []
            for backend in ("torch", "triton"):
                comp = Compressor(ratio, D, 64, device=dev)
                step = partial(
                    comp.forward, kv, score, req, pos, w, EPS, validate=False, backend=backend
                )
                outs.append(step())
                res[f"{backend}_us"] = graph_us(step)
            res["same_bits"] = all(torch.equal(a, b) for a, b in zip(*outs, strict=True))
            rows.append(res)
    for d in (128, 512):
        for t in (64, 4096):
            x = torch.randn(t, d, device=dev, generator=g)
            w = torch.rand(d, device=dev, generator=g) + 0.5
            out = torch.empty(t, d, dtype=torch.bfloat16, device=dev)
            res = {"op": f"rms_norm D {d}", "rows": t}
            ref = launch_rms_norm(x, w, EPS, out.clone())
            for bm in (1, 2, 4, 8):
                res[f"block_m {bm} us"] = graph_us(partial(launch_rms_norm, x, w, EPS, out, bm))
                assert torch.equal(out, ref), bm
            rows.append(res)
    for r in rows:
        cells = (f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
        print("  ".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
