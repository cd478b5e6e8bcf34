"""Where a flash_mini decode step spends its GPU time, mode=bi against mode=fast.

    python benchmarks/profile_step.py [--batch 1,64] [--context 4096] [--steps 5] [--top 8]
                                      [--sites 0] [--graph-replays 0]

Runs the runner's real forward on a synthetic history (as `ds41_runner.bench` does) and prints,
per mode and batch, the GPU kernels ranked by total device time over `--steps` decode steps
(torch.profiler), grouped into stages: linear layers, attention, indexer, cache writes, other.
`--sites N` also lists the N torch ops with the most kernel time of their own, by the ds41
source line that called them (where the "other" kernels come from). `--graph-replays N` also
captures the step in a CUDA graph (as `ds41_runner.bench` does) and times N back-to-back
replays: the replay's wall time per step beside the eager steps' kernel time shows how much of
a replayed step is not kernel time (launch gaps between the ~300 kernels, and their prologues).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from ds41_runner.bench import _capture_forward, _fill_synthetic_history
from ds41_runner.model import KVState, Model, ModelConfig

STAGES = {
    "matmul": "linear",
    "gemm": "linear",
    "gemv": "linear",
    "cutlass": "linear",
    "nvjet": "linear",  # cuBLAS (mode=fast)
    "splitk": "linear",
    "reduce_segments": "linear",  # the invariant matmul's fixed-order segment sum
    "sparse_attn": "attention",
    "attention": "attention",
    "combine": "attention",
    "logits": "indexer",
    "topk": "indexer",
    "merge": "indexer",
    "stage1": "indexer",
    "select": "indexer",
    "insert": "cache write",
    "quant": "cache write",
}


def stage_of(name: str) -> str:
    low = name.lower()
    for key, stage in STAGES.items():
        if key in low:
            return stage
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=8, help="kernels listed per run")
    ap.add_argument("--sites", type=int, default=0, help="torch ops listed by call site")
    ap.add_argument("--graph-replays", type=int, default=0, help="time N graph replays")
    args = ap.parse_args()
    dev = torch.device("cuda")
    cfg = ModelConfig.preset("flash_mini")
    batches = [int(b) for b in args.batch.split(",")]
    kv = KVState(
        cfg,
        kv_dtype="nvfp4_ds_mla",
        max_requests=max(batches),
        max_tokens_per_request=args.context + 8,
        num_pages=max(batches) * (-(-(args.context + 8) // 64)) + 1,
        page_size=64,
        device=dev,
    )
    for r in range(max(batches)):
        kv.reserve(r, args.context + 8)
    _fill_synthetic_history(kv, seed=0)
    for mode in ("bi", "fast"):
        model = Model(cfg, mode=mode, device=dev, seed=0)
        for b in batches:
            tok = torch.randint(0, cfg.vocab_size, (b,)).to(dev)
            req = torch.arange(b, dtype=torch.int32, device=dev)
            pos = torch.full((b,), args.context, dtype=torch.int32, device=dev)
            for _ in range(3):
                model.forward(tok, req, pos, kv, validate=False)
            torch.cuda.synchronize()
            acts = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if args.sites else [])
            with profile(activities=acts, with_stack=args.sites > 0) as prof:
                for _ in range(args.steps):
                    model.forward(tok, req, pos, kv, validate=False)
                torch.cuda.synchronize()
            per_stage: dict[str, float] = defaultdict(float)
            rows = []
            for ev in prof.key_averages():
                if ev.device_type != DeviceType.CUDA:
                    continue
                us = ev.device_time_total / args.steps
                if us <= 0:
                    continue
                per_stage[stage_of(ev.key)] += us
                rows.append((us, ev.count // args.steps, ev.key[:70]))
            total = sum(per_stage.values())
            head = f"mode={mode} batch={b} context={args.context}"
            print(f"\n== {head}: {total:.0f} us of kernels/step")
            for stage, us in sorted(per_stage.items(), key=lambda kv_: -kv_[1]):
                print(f"   {stage:12s} {us:9.0f} us  {us / total:6.1%}")
            for us, n, name in sorted(rows, reverse=True)[: args.top]:
                print(f"   {us:9.0f} us  x{n:<4d} {name}")
            if args.sites:
                print_sites(prof, args.steps, args.sites)
            if args.graph_replays:
                us = graph_replay_us(model, kv, tok, req, pos, args.graph_replays)
                gap = us - total
                print(f"   graph replay  {us:9.0f} us/step wall ({gap:+.0f} us beside the kernels)")


def graph_replay_us(
    model: Model,
    kv: KVState,
    tok: torch.Tensor,
    req: torch.Tensor,
    pos: torch.Tensor,
    replays: int,
) -> float:
    """Wall microseconds per replay of the step's CUDA graph, `replays` back to back."""
    replay = _capture_forward(model, kv, tok, req, pos)
    for _ in range(3):
        replay()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()  # type: ignore[no-untyped-call]
    for _ in range(replays):
        replay()
    end.record()  # type: ignore[no-untyped-call]
    end.synchronize()  # type: ignore[no-untyped-call]
    return 1000.0 * float(start.elapsed_time(end)) / replays


def print_sites(prof: profile, steps: int, top: int) -> None:
    """The torch ops with the most kernel time of their own, by the innermost ds41 frame."""
    sites: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for ev in prof.key_averages(group_by_stack_n=12):
        us = ev.self_device_time_total / steps
        if ev.device_type != DeviceType.CPU or us <= 0 or not ev.key.startswith("aten::"):
            continue
        frame = next((f for f in ev.stack if "ds41_" in f), "(no stack recorded)")
        site = sites[(frame.split("src/")[-1][:60], ev.key)]
        site[0] += us
        site[1] += ev.count / steps
    print("   kernel time by torch op and call site (us/step, calls/step):")
    for (frame, op), (us, n) in sorted(sites.items(), key=lambda kv_: -kv_[1][0])[:top]:
        print(f"   {us:9.0f} us  x{n:<5.0f} {op:28s} {frame}")


if __name__ == "__main__":
    main()
