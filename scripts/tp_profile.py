"""Where a tensor-parallel decode step goes: torch.profiler at TP=1 (rank 0) and TP=N (rank 0).

    torchrun --standalone --nproc-per-node=2 scripts/tp_profile.py [--model flash_wide]
        [--batch 64] [--context 4096] [--steps 3] [--out OUT.txt]

Runs the runner's real step (`tp_bench`'s `_Step`: `Model.pick`, the vocabulary-parallel
sampling head, every row at temperature 1; `--head forward` for the full log-prob rows;
mode=bi, nvfp4_ds_mla, synthetic history as `ds41_runner.tp_bench`) and reports, per TP
degree, the GPU kernel time of one decode step in two cuts:

- by kernel kind (from the kernel name): linear (the invariant matmul and its segment
  reduction), attention, indexer, cache writes / index building, norms, collectives (NCCL),
  small kernels (everything else: torch elementwise, copies, index ops);
- by model region (eager launches only: each kernel is charged to the innermost region that
  launched it, regions marked here with `record_function` around the model's own functions,
  nothing in the model changes): embed, attention projections (q/kv/o), attention kernel,
  compressor, indexer, MLP, norms + residual (outside the blocks), LM head + log-softmax /
  sampling.

Also the CUDA-graph step time (median of 10 replays). Kernel times at TP=N include the time a
collective waits for the other rank. A measurement script: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

KINDS = [
    ("collective", ("nccl",)),
    ("linear", ("matmul_kernel", "reduce_segments", "gemm", "nvjet", "cutlass", "gemv")),
    ("attention", ("sparse_attn", "_combine_kernel", "attn")),
    ("indexer", ("logits", "group_max", "group_select", "select_row", "fold_queries", "topk")),
    ("cache/indices", ("insert_kernel", "encode_kernel", "sparse_paged_indices", "gather_kernel")),
    ("norm/softmax", ("rmsnorm", "log_softmax")),
]


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "small"


REGION_PREFIX = "tp_region::"


def _wrap(owner: Any, attr: str, region: str) -> None:
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def wrapped(*a: Any, **kw: Any) -> Any:
        with record_function(REGION_PREFIX + region):
            return fn(*a, **kw)

    setattr(owner, attr, wrapped)


def instrument() -> None:
    """Mark the model's regions (script-local monkeypatching; the model code is unchanged)."""
    from ds41_runner.model import layers, model
    from ds41_runner.parallel import model as pmodel

    _wrap(layers, "_compress", "compressor")
    _wrap(layers, "_index_topk", "indexer")
    _wrap(layers, "attention_block", "attention proj")
    _wrap(layers, "mlp_block", "mlp")
    model.attention_block = layers.attention_block  # the names model.py imported
    model.mlp_block = layers.mlp_block
    _wrap(model, "log_softmax", "lm head")
    _wrap(model, "vocab_pick", "lm head")
    for cls in (model.Model, pmodel.TPModel):
        _wrap(cls, "_embed", "embed")
        _wrap(cls, "_lm_head", "lm head")
        _wrap(cls, "_local_logits", "lm head")


class _AttnMarked:
    """Wraps the runtime's attention component in a region."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.batch_invariant = getattr(inner, "batch_invariant", False)

    def __call__(self, *a: Any, **kw: Any) -> Any:
        with record_function(REGION_PREFIX + "attention kernel"):
            return self.inner(*a, **kw)


def _region_of(ev: Any) -> str:
    p = ev
    while p is not None:
        if p.name.startswith(REGION_PREFIX):
            return str(p.name[len(REGION_PREFIX) :])
        p = p.cpu_parent
    return "norms/residual/other"


def _trace_kernels(prof: Any, steps: int) -> list[tuple[str, float, str]]:
    """(kernel name, us per step, region) of every GPU kernel/memcpy/memset in the trace.

    A kernel's region: the innermost `record_function` range (CPU side) around the launch
    call with the kernel's correlation id (runtime or driver API: Triton launches are driver
    calls); failing that, the innermost GPU-side annotation range around the kernel."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    cpu_ranges: list[tuple[float, float, str]] = []
    gpu_ranges: list[tuple[float, float, str]] = []
    launch_ts: dict[int, float] = {}
    kernels = []
    for e in events:
        cat, name = e.get("cat", ""), e.get("name", "")
        if e.get("ph") != "X":
            continue
        if name.startswith(REGION_PREFIX):
            rng = (float(e["ts"]), float(e["ts"]) + float(e["dur"]), name[len(REGION_PREFIX) :])
            (gpu_ranges if cat == "gpu_user_annotation" else cpu_ranges).append(rng)
        elif cat in ("cuda_runtime", "cuda_driver"):
            corr = e.get("args", {}).get("correlation")
            if corr is not None:
                launch_ts[int(corr)] = float(e["ts"])
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            kernels.append(e)

    def innermost(ranges: list[tuple[float, float, str]], t: float) -> str | None:
        best = None
        for lo, hi, r in ranges:
            if lo <= t <= hi and (best is None or hi - lo < best[0]):
                best = (hi - lo, r)
        return None if best is None else best[1]

    out = []
    for k in kernels:
        corr = k.get("args", {}).get("correlation")
        region = None
        if corr is not None and int(corr) in launch_ts:
            region = innermost(cpu_ranges, launch_ts[int(corr)])
        if region is None and gpu_ranges:
            region = innermost(gpu_ranges, float(k["ts"]))
        out.append((str(k["name"]), float(k["dur"]) / steps, region or "norms/residual/other"))
    return out


def profile_steps(
    model: Any, kv: Any, inputs: tuple[torch.Tensor, ...], steps: int, sync: Any = None
) -> dict:
    """Kernel time of `steps` eager forwards; `sync()` (the ranks' barrier) runs inside the
    profile first, so the ranks start together; its kernels are left out."""
    tok, req, pos = inputs
    cuda = torch.cuda.is_available()
    for _ in range(3):
        model.forward(tok, req, pos, kv, validate=False)
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        if sync is not None:
            with record_function(REGION_PREFIX + "sync"):
                sync()
        for _ in range(steps):
            model.forward(tok, req, pos, kv, validate=False)
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        items = _trace_kernels(prof, steps)
    else:  # CPU smoke run: each leaf op's CPU time stands in for a kernel
        items = [
            (ev.name, ev.self_cpu_time_total / steps, _region_of(ev))
            for ev in prof.profiler.function_events
            if not ev.cpu_children and not ev.name.startswith(REGION_PREFIX)
        ]
    by_kind: dict[str, float] = defaultdict(float)
    by_region: dict[str, float] = defaultdict(float)
    cross: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    names: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    items = [it for it in items if it[2] != "sync"]
    for kname, us, region in items:
        kind = kind_of(kname)
        by_kind[kind] += us
        by_region[region] += us
        cross[region][kind] += us
        names[kname][0] += us
        names[kname][1] += 1
    total = sum(by_kind.values())
    top = sorted(((v[0], int(v[1]) // steps, n[:90]) for n, v in names.items()), reverse=True)
    return {
        "kernel_us": total,
        "kernels_per_step": len(items) // steps,
        "by_kind": dict(by_kind),
        "by_region": dict(by_region),
        "cross": {r: dict(v) for r, v in cross.items()},
        "top": top[:40],
    }


def graph_ms(model: Any, kv: Any, inputs: tuple[torch.Tensor, ...]) -> float:
    from ds41_runner.bench import _capture_forward, _time

    tok, req, pos = inputs
    if kv.device.type != "cuda":
        return float("nan")
    replay = _capture_forward(model, kv, tok, req, pos)
    return statistics.median(_time(replay, kv.device, 10, 3))


def fmt(tp: int, res: dict, step_ms: float) -> str:
    lines = [
        f"\n== TP={tp} (rank 0): graph step {step_ms:.3f} ms; eager kernel time "
        f"{res['kernel_us']:.0f} us/step in {res['kernels_per_step']} kernels"
    ]
    kinds = sorted(res["by_kind"], key=lambda k: -res["by_kind"][k])
    lines.append("by kernel kind:")
    for k in kinds:
        us = res["by_kind"][k]
        lines.append(f"   {k:18s} {us:9.0f} us  {us / res['kernel_us']:6.1%}")
    lines.append("by model region (columns: kernel kinds, us/step):")
    lines.append("   " + f"{'region':22s}{'total':>8s}" + "".join(f"{k[:10]:>11s}" for k in kinds))
    for r in sorted(res["by_region"], key=lambda r: -res["by_region"][r]):
        row = res["cross"][r]
        cells = "".join(f"{row.get(k, 0.0):11.0f}" for k in kinds)
        lines.append(f"   {r:22s}{res['by_region'][r]:8.0f}{cells}")
    lines.append("top kernels (us/step, launches/step):")
    for us, n, name in res["top"][:25]:
        lines.append(f"   {us:9.1f} us  x{n:<4d} {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="flash_wide")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", default=None)
    p.add_argument("--head", choices=("pick", "forward"), default="pick")
    args = p.parse_args(argv)

    import torch.distributed as dist

    from ds41_runner.model import Model, ModelConfig
    from ds41_runner.model.weights import init_weights
    from ds41_runner.parallel.dist import init_tensor_parallel, shutdown
    from ds41_runner.parallel.model import TPModel
    from ds41_runner.tp_bench import _kv, _Step, _step_inputs

    instrument()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    kind = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke run (gloo, torch)
    group = init_tensor_parallel(world, kind, 300.0) if world > 1 else None
    rank = 0 if group is None else group.rank
    device = torch.device("cuda", torch.cuda.current_device()) if kind == "cuda" else None
    device = device or torch.device("cpu")
    backend = "triton" if kind == "cuda" else "torch"
    cfg = ModelConfig.preset(args.model)
    ns = argparse.Namespace(context=args.context, prefill=0, batch=args.batch,
                            kv_dtype="nvfp4_ds_mla")  # fmt: skip
    text = [f"{args.model} mode=bi nvfp4_ds_mla decode {args.batch} rows at context "
            f"{args.context}, {args.steps} profiled eager steps, head {args.head}"]  # fmt: skip
    out: dict[str, Any] = {}
    try:
        models: list[tuple[int, Any]] = []
        if rank == 0:
            w = init_weights(cfg, device, draw_device=device)
            models.append((1, Model(cfg, mode="bi", backend=backend, device=device, weights=w)))
            del w
        for tp, model in models:
            model.runtime.attention = _AttnMarked(model.runtime.attention)
            kv = _kv(cfg, ns, device)
            inputs = _step_inputs(model, ns, "decode", device)
            step = _Step(model, "decode", args.batch, args.head, 1.0)
            res = profile_steps(step, kv, inputs, args.steps)
            ms = graph_ms(step, kv, inputs)
            out[f"tp{tp}"] = {**res, "graph_ms": ms}
            text.append(fmt(tp, res, ms))
            print(text[-1], flush=True)
            del kv
        models.clear()
        if kind == "cuda":
            torch.cuda.empty_cache()
        if group is not None:
            dist.barrier()
            tpm = TPModel(cfg, group=group, mode="bi", backend=backend, draw_device=device)
            tpm.runtime.attention = _AttnMarked(tpm.runtime.attention)
            kv = _kv(cfg, ns, device)
            inputs = _step_inputs(tpm, ns, "decode", device)

            def sync() -> None:
                dist.barrier()
                if kind == "cuda":
                    torch.cuda.synchronize()

            step = _Step(tpm, "decode", args.batch, args.head, 1.0)
            res = profile_steps(step, kv, inputs, args.steps, sync)
            ms = graph_ms(step, kv, inputs)
            if rank == 0:
                out[f"tp{world}"] = {**res, "graph_ms": ms}
                text.append(fmt(world, res, ms))
                print(text[-1], flush=True)
            dist.barrier()
    finally:
        if group is not None:
            shutdown()
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(text) + "\n")
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
