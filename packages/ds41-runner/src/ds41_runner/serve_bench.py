"""End-to-end serving benchmark: the engine a user calls, not `model.forward`.

    python -m ds41_runner.serve_bench [--json F] [--markdown F] [--smoke]

Workload (the engine issue's): `model=flash_mini graph=cuda_graph kv_dtype=nvfp4_ds_mla
chunk_size=1024`, 64 requests with prompts of 200-900 random tokens, 48 new tokens each, all
arriving at once ("burst") and as a Poisson stream ("poisson"); `mode=bi` and `mode=fast` in
one run. Per point: output and total tokens/s, time to first token and inter-token latency
(p50/p99, from the moments `Engine.step()` returns each token), host time per decode step, and
the GPU-busy fraction = kernel time (union of the kernels' intervals, `torch.profiler`) over
wall time, measured in a second, profiled pass of the same workload. `--smoke` runs a small
version on the CPU (tiny model) so the script itself is tested.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.autograd import DeviceType  # type: ignore[attr-defined]

from .engine import Engine
from .model import KVState, Model, ModelConfig


@dataclass(frozen=True)
class Workload:
    name: str
    num_requests: int
    prompt_min: int
    prompt_max: int
    new_tokens: int
    rate: float | None = None
    """Poisson arrival rate (requests/s); None: every request arrives at t = 0."""


@dataclass(frozen=True)
class Setup:
    preset: str
    kv_dtype: str
    chunk_size: int
    page_size: int
    max_requests: int
    max_tokens_per_request: int
    num_pages: int
    device: str
    graph: str


@dataclass
class Point:
    mode: str
    workload: str
    requests: int
    prompt_tokens: int
    generated_tokens: int
    wall_s: float
    output_tok_s: float
    total_tok_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    steps: int
    graph_steps: int
    decode_steps: int
    host_ms_per_decode_step: float
    host_ms_per_step: float
    gpu_busy: float | None = None
    kernel_s: float | None = None
    profiled_wall_s: float | None = None
    failed: int = 0
    notes: list[str] = field(default_factory=list)


def _pct(xs: Sequence[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def make_prompts(w: Workload, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [
        [rng.randrange(vocab) for _ in range(rng.randint(w.prompt_min, w.prompt_max))]
        for _ in range(w.num_requests)
    ]


def arrival_times(w: Workload, seed: int = 1) -> list[float]:
    if w.rate is None:
        return [0.0] * w.num_requests
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(w.num_requests):
        t += rng.expovariate(w.rate)
        out.append(t)
    return out


def build_engine(setup: Setup, mode: str) -> Engine:
    cfg = ModelConfig.preset(setup.preset)
    device = torch.device(setup.device)
    model = Model(cfg, mode=mode, device=device)
    kv = KVState(
        cfg,
        kv_dtype=setup.kv_dtype if not (mode == "fast" and setup.kv_dtype == "auto") else "bf16",
        max_requests=setup.max_requests,
        max_tokens_per_request=setup.max_tokens_per_request,
        num_pages=setup.num_pages,
        page_size=setup.page_size,
        device=device,
    )
    return Engine(model, kv, chunk_size=setup.chunk_size, graph=setup.graph)


def serve(
    eng: Engine, prompts: list[list[int]], arrivals: list[float], new_tokens: int
) -> tuple[float, dict[int, float], dict[int, list[float]]]:
    """Add each request at its arrival time and step until all finish. Returns the wall time,
    each request's add time and the times its tokens came back."""
    order = sorted(range(len(prompts)), key=lambda i: arrivals[i])
    added: dict[int, float] = {}
    token_times: dict[int, list[float]] = {}
    ids: dict[int, int] = {}
    start = time.perf_counter()
    nxt = 0
    while nxt < len(order) or eng.has_unfinished():
        now = time.perf_counter() - start
        while nxt < len(order) and arrivals[order[nxt]] <= now:
            i = order[nxt]
            nxt += 1
            rid = eng.add_request(prompts[i], max_new_tokens=new_tokens, seed=i)
            ids[rid] = i
            added[i] = time.perf_counter() - start
        if not eng.has_unfinished():
            time.sleep(max(0.0, arrivals[order[nxt]] - (time.perf_counter() - start)))
            continue
        outs = eng.step()
        t = time.perf_counter() - start
        for out in outs:
            if out.new_token_ids and out.request_id in ids:
                token_times.setdefault(ids[out.request_id], []).extend([t] * len(out.new_token_ids))
    if eng.device.type == "cuda":
        torch.cuda.synchronize(eng.device)
    return time.perf_counter() - start, added, token_times


def _kernel_seconds(prof: torch.profiler.profile) -> float:
    """Union of the CUDA kernels' [start, end) intervals, in seconds."""
    spans = []
    for ev in prof.events():  # type: ignore[no-untyped-call]
        if ev.device_type == DeviceType.CUDA and ev.time_range.elapsed_us() > 0:
            spans.append((ev.time_range.start, ev.time_range.end))
    spans.sort()
    total, cur_s, cur_e = 0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total / 1e6


def warm_engine(setup: Setup, mode: str) -> Engine:
    """An engine with every graph captured and every kernel compiled (one small real run)."""
    eng = build_engine(setup, mode)
    eng.warmup()
    w = Workload("warmup", 4, 8, 64, 4)
    serve(eng, make_prompts(w, eng.vocab_size, seed=99), [0.0] * 4, 4)
    return eng


def measure(eng: Engine, mode: str, w: Workload, *, profile: bool, progress: bool) -> Point:
    prompts = make_prompts(w, eng.vocab_size)
    arrivals = arrival_times(w)
    eng.clear_prefix_cache()  # random prompts: no hits across passes either
    eng.stats = type(eng.stats)()
    wall, added, times = serve(eng, prompts, arrivals, w.new_tokens)
    recs = eng.stats.records
    ttft = [(times[i][0] - added[i]) * 1e3 for i in times]
    itl = [(b - a) * 1e3 for ts in times.values() for a, b in itertools.pairwise(ts)]
    generated = sum(len(ts) for ts in times.values())
    prompt_tokens = sum(len(p) for p in prompts)
    decode = [r.seconds * 1e3 for r in recs if r.decode_only]
    point = Point(
        mode=mode,
        workload=w.name,
        requests=w.num_requests,
        prompt_tokens=prompt_tokens,
        generated_tokens=generated,
        wall_s=wall,
        output_tok_s=generated / wall,
        total_tok_s=(generated + prompt_tokens) / wall,
        ttft_p50_ms=_pct(ttft, 0.5),
        ttft_p99_ms=_pct(ttft, 0.99),
        itl_p50_ms=_pct(itl, 0.5),
        itl_p99_ms=_pct(itl, 0.99),
        steps=len(recs),
        graph_steps=sum(r.graph for r in recs),
        decode_steps=len(decode),
        host_ms_per_decode_step=statistics.mean(decode) if decode else float("nan"),
        host_ms_per_step=statistics.mean(r.seconds * 1e3 for r in recs) if recs else float("nan"),
        failed=eng.stats.failed,
    )
    if profile and eng.device.type == "cuda":
        eng.clear_prefix_cache()
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            pwall, _, _ = serve(eng, prompts, arrivals, w.new_tokens)
        point.kernel_s = _kernel_seconds(prof)
        point.profiled_wall_s = pwall
        point.gpu_busy = point.kernel_s / pwall
    if progress:
        busy = f"{point.gpu_busy:.0%}" if point.gpu_busy is not None else "-"
        print(
            f"  {mode:4s} {w.name:8s} {point.output_tok_s:9.0f} out tok/s  "
            f"ttft p50 {point.ttft_p50_ms:7.1f} ms  itl p50 {point.itl_p50_ms:6.1f} ms  "
            f"host/decode step {point.host_ms_per_decode_step:5.2f} ms  gpu busy {busy}",
            flush=True,
        )
    return point


def markdown(points: list[Point]) -> str:
    head = (
        "| mode | workload | out tok/s | total tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms "
        "| host ms / decode step | graph steps | GPU busy |\n"
        "|---|---|--:|--:|--:|--:|--:|--:|--:|\n"
    )
    rows = []
    for p in points:
        busy = f"{p.gpu_busy:.0%}" if p.gpu_busy is not None else "-"
        rows.append(
            f"| {p.mode} | {p.workload} | {p.output_tok_s:,.0f} | {p.total_tok_s:,.0f} | "
            f"{p.ttft_p50_ms:.1f} / {p.ttft_p99_ms:.1f} | {p.itl_p50_ms:.2f} / {p.itl_p99_ms:.2f} "
            f"| {p.host_ms_per_decode_step:.2f} | {p.graph_steps}/{p.steps} | {busy} |"
        )
    bi = {p.workload: p for p in points if p.mode == "bi"}
    fast = {p.workload: p for p in points if p.mode == "fast"}
    ratios = [f"{w}: {fast[w].output_tok_s / bi[w].output_tok_s:.2f}" for w in bi if w in fast]
    tail = (
        f"\n\nBI/fast time (fast over bi output tok/s): {', '.join(ratios)}\n" if ratios else "\n"
    )
    return head + "\n".join(rows) + tail


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None)
    ap.add_argument("--modes", default="bi,fast")
    ap.add_argument("--rate", type=float, default=16.0, help="Poisson arrivals per second")
    ap.add_argument("--workloads", default="burst,poisson", help="which of burst,poisson")
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU (a test)")
    args = ap.parse_args(argv)
    chosen = args.workloads.split(",")
    if not set(chosen) <= {"burst", "poisson"}:  # "" splits to [""], refused here too
        ap.error(f"--workloads must be a comma list of burst, poisson; got {args.workloads!r}")
    if args.smoke:
        setup = Setup("tiny", "nvfp4_ds_mla", 32, 16, 8, 128, 256, "cpu", "eager")
        workloads = [Workload("burst", 3, 5, 12, 2), Workload("poisson", 3, 5, 12, 2, rate=400.0)]
    else:
        if not torch.cuda.is_available():
            raise SystemExit("serve_bench needs a CUDA device (or --smoke)")
        setup = Setup("flash_mini", "nvfp4_ds_mla", 1024, 64, 64, 1024, 2048, "cuda", "cuda_graph")
        workloads = [
            Workload("burst", 64, 200, 900, 48),
            Workload("poisson", 64, 200, 900, 48, rate=args.rate),
        ]
    workloads = [w for w in workloads if w.name in chosen]
    print(f"serve_bench: {asdict(setup)}", flush=True)
    points = []
    for mode in args.modes.split(","):
        eng = warm_engine(setup, mode)
        points += [measure(eng, mode, w, profile=True, progress=True) for w in workloads]
        del eng
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    table = markdown(points)
    print(table)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(
            {"setup": asdict(setup), "workloads": [asdict(w) for w in workloads],
             "points": [asdict(p) for p in points]}, indent=1))  # fmt: skip
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
