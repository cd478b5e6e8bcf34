"""Benchmark: `python -m ds41_attention.bench [--json PATH] [--plot PATH] [--smoke] [--sweep]`.

V4.1-Flash geometry (H=64, D=512, W=128 MXFP8 window + K=512 NVFP4 compressed entries per
row), T in {1, 8, 64, 256, 1024, 4096}. Paths: the batch-invariant Triton kernel, the
batch-invariant Hopper Gluon kernel (where it runs), the fast split-KV path as dispatched (on
sm_90 the Gluon split path, with the Triton split path beside it as `fast_triton`), and a
torch baseline (gather + decode + dense softmax). Times are CUDA-event medians, eager and in
CUDA-graph replay (host clock medians in `--smoke`, the CPU mode on the tiny geometry); the
table shows graph replay (kernel time) where measured. Targets (reported, never asserted):
see BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ds41_cache import PagedCache
from ds41_cache.backend import interpreter_active

from .ops.sparse_attention.naive import reference_sparse_attention
from .ops.sparse_attention.records import gather_decode
from .sparse_attention import sparse_attention

FLOOR_NS_PER_ROW = 106.0
"""SPEC section 10: tensor-core floor per decode row and layer on the H200."""
FLASH_ROWS = (1, 8, 64, 256, 1024, 4096)


@dataclass(frozen=True)
class Geometry:
    heads: int
    dim: int
    window: int
    topk: int
    page_size: int
    comp_fmt: str

    @property
    def flop_per_row(self) -> float:
        # QK and PV over every window and compressed entry
        return 4.0 * self.heads * self.dim * (self.window + self.topk)

    @property
    def kv_bytes_per_row(self) -> float:
        w = self.dim + self.dim // 32
        c = {"nvfp4": self.dim // 2 + self.dim // 16, "mxfp8": w, "bf16": 2 * self.dim}
        return float(self.window * w + self.topk * c[self.comp_fmt])


FLASH = Geometry(heads=64, dim=512, window=128, topk=512, page_size=64, comp_fmt="nvfp4")
TINY = Geometry(heads=4, dim=64, window=8, topk=16, page_size=16, comp_fmt="nvfp4")


def _fill_cache(cache: PagedCache, gen: torch.Generator) -> None:
    """Random valid records: e4m3 codes without NaN, moderate scales."""
    dev = cache.device
    data = cache.data_view()
    scales = cache.scale_view()
    raw = torch.randint(0, 256, data.shape, generator=gen, dtype=torch.int32, device="cpu")
    if cache.fmt == "mxfp8":
        raw = torch.where((raw & 0x7F) == 0x7F, raw - 1, raw)
        data.copy_(raw.to(torch.uint8).to(dev))
        sb = torch.randint(118, 123, scales.shape, generator=gen, device="cpu")
    else:
        data.copy_(raw.to(torch.uint8).to(dev))
        sb = torch.randint(0x10, 0x48, scales.shape, generator=gen, device="cpu")
    scales.copy_(sb.to(torch.uint8).to(dev))


@dataclass
class Problem:
    q: torch.Tensor
    window: PagedCache
    swa_slots: torch.Tensor
    swa_lens: torch.Tensor
    comp: PagedCache
    comp_slots: torch.Tensor
    comp_lens: torch.Tensor
    sink: torch.Tensor
    scale: float

    def args(self) -> tuple[Any, ...]:
        return (
            self.q,
            self.window,
            self.swa_slots,
            self.swa_lens,
            self.comp,
            self.comp_slots,
            self.comp_lens,
            self.sink,
            self.scale,
        )


def make_problem(geo: Geometry, rows: int, device: torch.device, seed: int = 0) -> Problem:
    """Full rows (every window and compressed entry valid), distinct windows per row."""
    gen = torch.Generator().manual_seed(seed)
    wslots = rows * geo.window
    window = PagedCache.allocate(
        "mxfp8", geo.dim, geo.page_size, -(-wslots // geo.page_size), device=device
    )
    cslots = max(4 * geo.topk, 131072 if device.type == "cuda" else 0)
    comp = PagedCache.allocate(
        geo.comp_fmt, geo.dim, geo.page_size, -(-cslots // geo.page_size), device=device
    )
    _fill_cache(window, gen)
    _fill_cache(comp, gen)
    swa = torch.arange(wslots, dtype=torch.int32).view(rows, geo.window)
    cs = torch.randint(0, comp.num_slots, (rows, geo.topk), generator=gen).sort(dim=1).values
    q = torch.randn(rows, geo.heads, geo.dim, generator=gen).to(torch.bfloat16)
    sink = torch.randn(geo.heads, generator=gen)
    return Problem(
        q.to(device),
        window,
        swa.to(device),
        torch.full((rows,), geo.window, dtype=torch.int32, device=device),
        comp,
        cs.to(torch.int32).to(device),
        torch.full((rows,), geo.topk, dtype=torch.int32, device=device),
        sink.to(device),
        geo.dim**-0.5,
    )


def torch_dense(p: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """Baseline: gather + decode every entry to bf16, dense bf16 GEMMs, fp32 softmax."""
    t, _h, d = p.q.shape
    kv = torch.cat(
        [
            gather_decode(p.window, p.swa_slots).view(t, -1, d),
            gather_decode(p.comp, p.comp_slots).view(t, -1, d),
        ],
        dim=1,
    )
    s = torch.bmm(p.q, kv.transpose(1, 2)).float() * p.scale
    n = torch.arange(kv.shape[1], device=kv.device)
    w = p.swa_slots.shape[1]
    valid = torch.where(n < w, n[None] < p.swa_lens[:, None], (n[None] - w) < p.comp_lens[:, None])
    valid &= torch.cat([p.swa_slots, p.comp_slots], dim=1) >= 0
    s = s.masked_fill(~valid[:, None, :], -math.inf)
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    o = torch.bmm((e / (l + torch.exp(p.sink[None, :, None] - m))).to(torch.bfloat16), kv)
    return o, (m + torch.log(l)).squeeze(-1)


LAUNCH_HIDDEN = False
"""How `time_fn` times on the GPU. False (the default, the figures of BENCHMARKS.md): each
sample submits `fn` to an idle GPU, so the figure includes the host's launch latency (a graph
of one empty kernel reads ~10 us or more this way on the H200, as the indexer's bench found).
True (`--launch-hidden`): a `torch.cuda._sleep` keeps the GPU busy until `fn` is queued, so a
sample of a graph replay is the graph's GPU time alone, as inside a larger captured graph (the
runner's decode step)."""
SLEEP_CYCLES = 400_000
"""GPU cycles of the busy wait ahead of a launch-hidden sample (~200 us at 1.98 GHz)."""


def time_fn(fn: Callable[[], Any], device: torch.device, reps: int) -> float:
    """Median seconds of `fn` (CUDA events on the GPU, host clock on the CPU)."""
    fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            b = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            if LAUNCH_HIDDEN:
                torch.cuda._sleep(SLEEP_CYCLES)  # type: ignore[no-untyped-call]
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e-3)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return float(statistics.median(times))


def time_graph(fn: Callable[[], Any], device: torch.device, reps: int) -> float | None:
    """Median seconds of a CUDA-graph replay of `fn` (None off the GPU)."""
    if device.type != "cuda":
        return None
    s = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return time_fn(g.replay, device, reps)


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm().clamp(min=1e-30))


def run(
    geo: Geometry,
    rows_list: tuple[int, ...],
    device: torch.device,
    reps: int,
    smoke: bool,
    skip: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Time every path at each T: the Triton invariant kernel, the Hopper Gluon invariant path
    (where it runs: `gluon` as dispatched, `gluon_1cta` the one-CTA kernel alone), the fast
    split-KV path and the torch baseline; eager CUDA events and CUDA-graph replay (kernel
    time) on the GPU."""
    from .ops.sparse_attention.gluon_launch import gluon_supported, launch_gluon_sparse_attention
    from .ops.sparse_attention.launch import launch_sparse_attention

    results = []
    # Without a GPU the kernels need the interpreter; lacking that, smoke mode times torch.
    kernels = device.type == "cuda" or interpreter_active()
    triton_backend = "triton" if kernels else "torch"
    for rows in rows_list:
        p = make_problem(geo, rows, device, seed=rows)
        paths: dict[str, Callable[[], Any]] = {}
        if kernels:
            paths["invariant"] = functools.partial(launch_sparse_attention, *p.args())
        else:
            paths["invariant"] = functools.partial(
                sparse_attention, *p.args(), backend="torch", validate=False
            )
        if gluon_supported(p.q):
            # the invariant path as dispatched (the pair kernel while two SMs a row fit in one
            # wave) and the one-CTA kernel alone beside it (the same bits)
            paths["gluon"] = functools.partial(launch_gluon_sparse_attention, *p.args())
            paths["gluon_1cta"] = functools.partial(
                launch_gluon_sparse_attention, *p.args(), pair=False
            )
        paths["fast"] = functools.partial(
            sparse_attention,
            *p.args(),
            batch_invariant=False,
            backend=triton_backend,
            validate=False,
        )
        if "gluon" in paths:
            # on sm_90 the fast path is the Gluon split path; the Triton split path beside it
            paths["fast_triton"] = functools.partial(
                launch_sparse_attention, *p.args(), batch_invariant=False
            )
        paths["torch"] = functools.partial(torch_dense, p)
        for name in skip:
            paths.pop(name, None)
        # correctness on a few rows against the float64 reference
        sub = min(rows, 16)
        ref, _ = reference_sparse_attention(
            p.q[:sub],
            p.window,
            p.swa_slots[:sub],
            p.swa_lens[:sub],
            p.comp,
            p.comp_slots[:sub],
            p.comp_lens[:sub],
            p.sink,
            p.scale,
        )
        r = max(1, reps // 10) if rows >= 1024 else reps
        row: dict[str, Any] = {"T": rows}
        for name, f in paths.items():
            row[f"{name}_relerr"] = _rel_err(f()[0][:sub], ref)
            sec = time_fn(f, device, r if name != "torch" else max(1, r // 4))
            row[f"{name}_us"] = sec * 1e6
            g = time_graph(f, device, r) if name != "torch" else None
            row[f"{name}_graph_us"] = None if g is None else g * 1e6
            best = g if g is not None else sec
            row[f"{name}_tflops"] = geo.flop_per_row * rows / best / 1e12
            row[f"{name}_gbs"] = geo.kv_bytes_per_row * rows / best / 1e9
        bi = "gluon" if "gluon" in paths else "invariant"
        row["bi_path"] = bi
        row["bi_ns_per_row"] = _kernel_us(row, bi) * 1e3 / rows
        row["floor_ratio"] = row["bi_ns_per_row"] / FLOOR_NS_PER_ROW
        row["bi_over_fast"] = _kernel_us(row, bi) / _kernel_us(row, "fast")
        results.append(row)
        del p
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def _kernel_us(row: dict[str, Any], name: str) -> float:
    """The CUDA-graph replay time of a path where measured, else its eager time."""
    g = row.get(f"{name}_graph_us")
    return float(g if g is not None else row[f"{name}_us"])


def sweep(
    geo: Geometry,
    device: torch.device,
    rows_list: tuple[int, ...],
    reps: int,
    configs: list[tuple[int, ...]],
) -> list[dict[str, Any]]:
    """Time invariant-kernel tile configs (block_h, block_n, warps, stages) at fixed T."""
    from .ops.sparse_attention.launch import KernelConfig, launch_sparse_attention

    out = []
    for rows in rows_list:
        p = make_problem(geo, rows, device, seed=rows)
        base, _ = launch_sparse_attention(*p.args())
        for c in configs:
            cfg = KernelConfig(*c)
            f = functools.partial(launch_sparse_attention, *p.args(), config=cfg)
            try:
                o, _ = f()
                err = float((o.float() - base.float()).abs().max())
                g = time_graph(f, device, reps) if rows <= 256 else None
                sec = g if g is not None else time_fn(f, device, reps)
                out.append(
                    {
                        "T": rows,
                        "config": list(c),
                        "us": sec * 1e6,
                        "tflops": geo.flop_per_row * rows / sec / 1e12,
                        "maxdiff": err,
                    }
                )
            except Exception as e:  # report and keep sweeping
                out.append({"T": rows, "config": list(c), "error": repr(e)[:200]})
            print(out[-1], flush=True)
    return out


PATHS = ("invariant", "gluon", "gluon_1cta", "fast", "fast_triton", "torch")
"""The timed paths, in table order."""


def _plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [r["T"] for r in results]
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in PATHS:
        if f"{name}_tflops" not in results[0]:
            continue
        ax.plot(ts, [r[f"{name}_tflops"] for r in results], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows T")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("ds41 sparse attention (H=64, D=512, W=128 mxfp8 + K=512 nvfp4)")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _table(results: list[dict[str, Any]]) -> str:
    """Markdown table: kernel time (graph replay where measured) and TFLOP/s per path."""
    names = [n for n in PATHS if f"{n}_us" in results[0]]
    head = "| T | " + " | ".join(f"{n} us | {n} TFLOP/s" for n in names)
    head += " | BI/fast | err (BI) |"
    lines = [head, "|" + "---:|" * (2 * len(names) + 3)]
    for r in results:
        cells = [f"{_kernel_us(r, n):.1f} | {r[f'{n}_tflops']:.1f}" for n in names]
        lines.append(
            f"| {r['T']} | "
            + " | ".join(cells)
            + f" | {r['bi_over_fast']:.2f} | {r[r['bi_path'] + '_relerr']:.1e} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write results as JSON to this path")
    ap.add_argument("--plot", help="write a PNG of TFLOP/s vs T to this path")
    ap.add_argument("--smoke", action="store_true", help="tiny geometry on the CPU")
    ap.add_argument("--rows", help="comma-separated T values")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--sweep", action="store_true", help="also time tile configs")
    ap.add_argument("--skip", default="", help="comma-separated paths not to run")
    ap.add_argument(
        "--configs",
        default="64,32,8,1;64,64,8,1;64,64,8,2;64,128,8,1;32,64,4,1",
        help="sweep configs: block_h,block_n,num_warps,num_stages;...",
    )
    ap.add_argument(
        "--launch-hidden",
        action="store_true",
        help="time each sample behind a GPU busy wait (no host launch latency)",
    )
    a = ap.parse_args(argv)
    global LAUNCH_HIDDEN
    LAUNCH_HIDDEN = a.launch_hidden
    rows: tuple[int, ...]
    if a.smoke:
        geo, device, rows, reps = TINY, torch.device("cpu"), (1, 4), 2
    else:
        if not torch.cuda.is_available():
            raise SystemExit("the benchmark needs a CUDA device; use --smoke on the CPU")
        geo, device, rows, reps = FLASH, torch.device("cuda"), FLASH_ROWS, a.reps
    if a.rows:
        rows = tuple(int(x) for x in a.rows.split(","))
    skip = tuple(x for x in a.skip.split(",") if x)
    results = run(geo, rows, device, reps, a.smoke, skip)
    payload: dict[str, Any] = {"geometry": asdict(geo), "results": results,
                               "launch_hidden": LAUNCH_HIDDEN}  # fmt: skip
    if a.sweep and not a.smoke:
        cfgs = [tuple(int(v) for v in c.split(",")) for c in a.configs.split(";")]
        payload["sweep"] = sweep(geo, device, (1, 4096), max(5, reps // 5), cfgs)
    if device.type == "cuda":
        payload["device"] = torch.cuda.get_device_name(device)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(payload, f, indent=1)
    if a.plot:
        _plot(results, a.plot)
    print(_table(results))
    return results


if __name__ == "__main__":
    main()
