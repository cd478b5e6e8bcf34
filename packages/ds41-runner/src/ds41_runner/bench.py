"""End-to-end runner benchmark: decode and prefill throughput, the price of batch invariance.

    python -m ds41_runner.bench [--json PATH] [--markdown PATH] [--plot PATH] [--smoke]

For `model=flash_mini` on the GPU it times, in one run, every pair of
`mode` {bi, fast} x `graph` {eager, cuda_graph} x `kv_dtype` {nvfp4_ds_mla, fp8_ds_mla}
for batch sizes {1, 8, 32, 64, 128, 256} at contexts {4K, 32K}:
- decode: one decode row per request at position `context + step`, the model's real forward
  (all layers, indexer top-k over the whole context, window + compressed attention);
- prefill: one request, a chunk of `--prefill-chunk` rows appended to a `context` history.
The history is synthetic: cache pages hold valid encoded rows copied across the pool (decode
cost depends on how many entries are read, not on their values), so a 32K context needs no
32K-token prefill of every request. Reported: decode tokens/s, per-step latency (median, p90),
prefill tokens/s, peak GPU memory, cache bytes per token, and the BI/fast time ratio.
`--smoke` runs a seconds-long CPU version (tiny model, torch backend) for the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ds41_cache.insert import insert

from .model import KVState, Model, ModelConfig


@dataclass
class Point:
    """One measured configuration."""

    kv_dtype: str
    mode: str
    graph: str
    context: int
    batch: int
    step_ms_median: float
    step_ms_p90: float
    decode_tok_s: float
    peak_gib: float
    cache_bytes_per_token: float
    prefill_tok_s: float | None = None


def _fill_synthetic_history(kv: KVState, seed: int) -> None:
    """Write valid encoded rows into page 0 of every cache, then copy it over the pool."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    caches = list(kv.window) + list(kv.comp.values()) + list(kv.index_keys.values())
    for cache in caches:
        rows = torch.randn(cache.page_size, cache.dim, generator=gen).to(cache.device)
        slots = torch.arange(cache.page_size, device=cache.device)
        insert(cache, rows.to(torch.bfloat16), slots)
        cache.storage[1:].copy_(cache.storage[0].expand_as(cache.storage[1:]))


def _time(fn: Callable[[], Any], device: torch.device, iters: int, warmup: int) -> list[float]:
    """Per-call milliseconds (CUDA events on GPU, wall clock on CPU)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()  # type: ignore[no-untyped-call]
            fn()
            end.record()  # type: ignore[no-untyped-call]
            end.synchronize()  # type: ignore[no-untyped-call]
            out.append(float(start.elapsed_time(end)))
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


def _p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]


def _decode_ms(
    model: Model,
    kv: KVState,
    *,
    context: int,
    batch: int,
    graph: str,
    iters: int,
    warmup: int,
) -> list[float]:
    """Milliseconds per decode step of `batch` rows (requests 0..batch-1) at `context`."""
    device = kv.device
    req = torch.arange(batch, dtype=torch.int32, device=device)
    tok = torch.randint(0, model.vocab_size, (batch,)).to(device)
    # A few positions in rotation, all already reserved: the step re-writes its own rows.
    positions = [
        torch.full((batch,), context + i, dtype=torch.int32, device=device) for i in range(4)
    ]
    step = [0]
    static_pos = positions[0].clone()
    replay = _capture_forward(model, kv, tok, req, static_pos) if graph == "cuda_graph" else None

    def one_step() -> None:
        pos = positions[step[0] % len(positions)]
        step[0] += 1
        if replay is not None:
            static_pos.copy_(pos)
            replay()
        else:
            model.forward(tok, req, pos, kv, validate=False)

    return _time(one_step, device, iters, warmup)


def _capture_forward(
    model: Model, kv: KVState, tok: torch.Tensor, req: torch.Tensor, pos: torch.Tensor
) -> Callable[[], None]:
    """A CUDA graph of `model.forward` on these static inputs; returns its replay."""
    kv.flush()
    side = torch.cuda.Stream(device=kv.device)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(kv.device))
    with torch.cuda.stream(side):
        for _ in range(2):
            model.forward(tok, req, pos, kv, validate=False)
    torch.cuda.current_stream(kv.device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.forward(tok, req, pos, kv, validate=False)
    return graph.replay


def _prefill_ms(
    model: Model, kv: KVState, *, req: int, context: int, rows: int, iters: int
) -> list[float]:
    """Milliseconds for one request appending `rows` prefill rows to a `context` history."""
    device = kv.device
    tok = torch.randint(0, model.vocab_size, (rows,)).to(device)
    reqs = torch.full((rows,), req, dtype=torch.int32, device=device)
    pos = torch.arange(context, context + rows, dtype=torch.int32, device=device)
    return _time(lambda: model.forward(tok, reqs, pos, kv, validate=False), device, iters, 1)


def run(
    cfg: ModelConfig,
    *,
    device: torch.device,
    backend: str,
    kv_dtypes: list[str],
    modes: list[str],
    graphs: list[str],
    contexts: list[int],
    batches: list[int],
    page_size: int,
    iters: int,
    warmup: int,
    prefill_chunk: int,
    progress: Callable[[str], None] = print,
    checkpoint: Callable[[list[Point]], None] | None = None,
) -> list[Point]:
    points: list[Point] = []
    failures: list[str] = []
    models = {m: Model(cfg, mode=m, backend=backend, device=device, seed=0) for m in modes}
    max_b = max(batches)
    for kv_dtype in kv_dtypes:
        for ctx in contexts:
            tokens_per_req = ctx + 4 + prefill_chunk
            pages_per_req = -(-tokens_per_req // page_size)
            kv = KVState(
                cfg,
                kv_dtype=kv_dtype,
                max_requests=max_b + 1,
                max_tokens_per_request=tokens_per_req,
                num_pages=pages_per_req * (max_b + 1) + 1,
                page_size=page_size,
                device=device,
            )
            # Page by page, round robin: every request's pages are scattered over the pool as
            # in a long-running server, not one contiguous run (the best case for gathers).
            for upto in range(page_size, tokens_per_req + page_size, page_size):
                for r in range(max_b + 1):
                    kv.reserve(r, min(upto, tokens_per_req))
            _fill_synthetic_history(kv, seed=ctx)
            for mode in modes:
                model = models[mode]
                pre = _prefill_ms(
                    model, kv, req=max_b, context=ctx, rows=prefill_chunk, iters=max(2, iters // 4)
                )
                prefill_tok_s = prefill_chunk / statistics.median(pre) * 1e3
                for graph in graphs:
                    if graph == "cuda_graph" and device.type != "cuda":
                        continue
                    for b in batches:
                        progress(f"{kv_dtype} ctx={ctx} mode={mode} graph={graph} batch={b}")
                        if device.type == "cuda":
                            torch.cuda.reset_peak_memory_stats(device)
                        try:
                            ms = _decode_ms(
                                model,
                                kv,
                                context=ctx,
                                batch=b,
                                graph=graph,
                                iters=iters,
                                warmup=warmup,
                            )
                        except Exception as exc:  # keep measuring the other points
                            if not failures:
                                traceback.print_exc()
                            failures.append(f"{kv_dtype}/{mode}/{graph}/ctx{ctx}/b{b}: {exc!r}")
                            if device.type == "cuda":
                                torch.cuda.synchronize(device)
                            continue
                        med = statistics.median(ms)
                        peak = (
                            torch.cuda.max_memory_allocated(device) / 2**30
                            if device.type == "cuda"
                            else 0.0
                        )
                        points.append(
                            Point(
                                kv_dtype,
                                mode,
                                graph,
                                ctx,
                                b,
                                med,
                                _p90(ms),
                                b / med * 1e3,
                                peak,
                                kv.bytes_per_token(ctx),
                                prefill_tok_s,
                            )
                        )
                        if checkpoint is not None:
                            checkpoint(points)
            del kv
            if device.type == "cuda":
                torch.cuda.empty_cache()
    for f in failures:
        progress(f"FAILED {f}")
    return points


def ratios(points: list[Point]) -> list[dict[str, Any]]:
    """BI/fast step-time ratio for every (kv_dtype, graph, context, batch)."""
    index = {(p.kv_dtype, p.mode, p.graph, p.context, p.batch): p for p in points}
    out = []
    for (kvd, mode, graph, ctx, b), p in index.items():
        fast = index.get((kvd, "fast", graph, ctx, b))
        if mode == "bi" and fast is not None:
            out.append(
                {
                    "kv_dtype": kvd,
                    "graph": graph,
                    "context": ctx,
                    "batch": b,
                    "bi_over_fast": p.step_ms_median / fast.step_ms_median,
                }
            )
    return out


def table_head(env: dict[str, str], columns: list[str]) -> list[str]:
    """Markdown lines: the environment, then a table header with `columns`."""
    head = ", ".join(f"{k} {v}" for k, v in env.items())
    return [f"Environment: {head}", "", f"| {' | '.join(columns)} |", "|---" * len(columns) + "|"]


def markdown(points: list[Point], env: dict[str, str]) -> str:
    lines = table_head(
        env,
        ["kv_dtype", "mode", "graph", "context", "batch", "step ms (median)", "p90",
         "decode tok/s", "prefill tok/s", "peak GiB", "cache B/token"],
    )  # fmt: skip
    for p in points:
        pre = f"{p.prefill_tok_s:,.0f}" if p.prefill_tok_s else "-"
        lines.append(
            f"| {p.kv_dtype} | {p.mode} | {p.graph} | {p.context} | {p.batch} | "
            f"{p.step_ms_median:.3f} | {p.step_ms_p90:.3f} | {p.decode_tok_s:,.0f} | {pre} | "
            f"{p.peak_gib:.1f} | {p.cache_bytes_per_token:.0f} |"
        )
    rs = ratios(points)
    if rs:
        lines += [
            "",
            "| kv_dtype | graph | context | batch | BI / fast time |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['kv_dtype']} | {r['graph']} | {r['context']} | {r['batch']} | "
            f"{r['bi_over_fast']:.2f} |"
            for r in rs
        ]
    return "\n".join(lines) + "\n"


def plot(points: list[Point], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    contexts = sorted({p.context for p in points})
    fig, axes = plt.subplots(1, len(contexts), figsize=(6 * len(contexts), 4.5), squeeze=False)
    for ax, ctx in zip(axes[0], contexts, strict=True):
        keys = sorted({(p.kv_dtype, p.mode, p.graph) for p in points if p.context == ctx})
        for key in keys:
            ps = [p for p in points if (p.kv_dtype, p.mode, p.graph) == key and p.context == ctx]
            ax.plot(
                [p.batch for p in ps], [p.decode_tok_s for p in ps], marker="o", label="/".join(key)
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size (decode rows)")
        ax.set_ylabel("decode tokens/s")
        ax.set_title(f"flash_mini decode, context {ctx}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def environment(device: torch.device) -> dict[str, str]:
    import subprocess

    import triton

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        commit = ""
    commit = os.environ.get("DS41_COMMIT", commit)  # the GPU machine gets no .git
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "commit": commit or "?",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--smoke", action="store_true", help="seconds-long CPU run (tiny model)")
    parser.add_argument("--batches", default="1,8,32,64,128,256")
    parser.add_argument("--contexts", default="4096,32768")
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args(argv)
    if args.smoke:
        device = torch.device("cpu")
        cfg = ModelConfig.preset("tiny")
        kw: dict[str, Any] = dict(
            backend="torch",
            contexts=[24],
            batches=[1, 2],
            page_size=8,
            iters=2,
            warmup=1,
            prefill_chunk=4,
            graphs=["eager"],
        )
    else:
        if not torch.cuda.is_available():
            parser.error("needs a CUDA device (use --smoke on the CPU)")
        device = torch.device("cuda")
        cfg = ModelConfig.preset("flash_mini")
        kw = dict(
            backend="auto",
            contexts=[int(c) for c in args.contexts.split(",")],
            batches=[int(b) for b in args.batches.split(",")],
            page_size=64,
            iters=args.iters,
            warmup=3,
            prefill_chunk=1024,
            graphs=["eager", "cuda_graph"],
        )
    env = environment(device)

    def write(points: list[Point]) -> None:
        if args.json:
            payload = {"env": env, "points": [asdict(p) for p in points], "ratios": ratios(points)}
            args.json.write_text(json.dumps(payload, indent=1))
        if args.markdown:
            args.markdown.write_text(markdown(points, env))

    points = run(
        cfg,
        checkpoint=write,
        device=device,
        kv_dtypes=["nvfp4_ds_mla", "fp8_ds_mla"],
        modes=["bi", "fast"],
        progress=lambda s: print(f"[bench] {s}", flush=True),
        **kw,
    )
    print(markdown(points, env))
    write(points)
    if args.plot:
        plot(points, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
