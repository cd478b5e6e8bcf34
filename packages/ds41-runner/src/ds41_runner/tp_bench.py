"""Tensor-parallel benchmark: a decode and a prefill step at TP=1 and TP=N, and the time of
the step's communication.

    torchrun --standalone --nproc-per-node=2 -m ds41_runner.tp_bench [--model flash_wide]
        [--batch 64] [--context 4096] [--prefill 1024] [--json OUT]

TP=1 is the plain `Model` on rank 0's GPU (the other ranks wait); TP=N is `TPModel` on every
rank. Both draw their weights on the GPU (same seed: the same full weights). A step is the
model and the engine's head on a synthetic history (as `ds41_runner.bench`): decode =
`--batch` rows, one per request at position `--context`, each sampled; prefill = one request
appending `--prefill` rows, its last row sampled. `--head pick` (default) is `Model.pick`
(the vocabulary-parallel log-softmax and sampler: a few partials per row gathered); `--head
forward` returns those rows' full log-probs (the logits gathered: the step timed before).
NCCL runs with NCCL_PROTO=LL128 unless the environment sets it (`parallel.dist`). Times are
CUDA-graph replays (eager if capture fails; the table says which), CUDA-event medians on
rank 0. "comm" = the step's collectives (recorded during one step: same ops, shapes and
order) replayed alone in a graph on both ranks: the time a step spends communicating when
nothing overlaps it (mode=bi overlaps nothing: each gather feeds the next op).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .bench import _capture_forward, _fill_synthetic_history, _time
from .model import KVState, Model, ModelConfig
from .model.weights import init_weights
from .ops.vocab import RowSampling


def _kv(cfg: ModelConfig, args: argparse.Namespace, device: torch.device) -> KVState:
    page = 64
    tokens = args.context + 4 + args.prefill
    tokens = -(-tokens // page) * page
    reqs = args.batch + 1
    kv = KVState(
        cfg, kv_dtype=args.kv_dtype, max_requests=reqs, max_tokens_per_request=tokens,
        num_pages=(tokens // page) * reqs + 1, page_size=page, device=device,
    )  # fmt: skip
    for upto in range(page, tokens + page, page):
        for r in range(reqs):
            kv.reserve(r, min(upto, tokens))
    _fill_synthetic_history(kv, seed=args.context)
    return kv


def _step_inputs(
    model: Model, args: argparse.Namespace, kind: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    if kind == "decode":
        rows = args.batch
        req = torch.arange(rows, dtype=torch.int32)
        pos = torch.full((rows,), args.context, dtype=torch.int32)
    else:
        rows = args.prefill
        req = torch.full((rows,), args.batch, dtype=torch.int32)
        pos = torch.arange(args.context, args.context + rows, dtype=torch.int32)
    tok = torch.randint(0, model.vocab_size, (rows,), generator=g)
    return tok.to(device), req.to(device), pos.to(device)


class _Step:
    """The engine's step as the benchmark times it: `head="pick"` (default) runs `Model.pick`
    on the logit rows (every decode row; a prefill chunk's last row, as the engine samples)
    at `temperature` (the vocabulary-parallel head: partials gathered, no log-prob rows);
    `head="forward"` returns those rows' full log-probs (`Model.forward`, the logits gathered
    at TP > 1: the figures before the vocabulary-parallel head)."""

    def __init__(self, model: Model, kind: str, rows: int, head: str, temperature: float) -> None:
        self.model = model
        self.group = getattr(model, "group", None)
        self.head = head
        dev = model.device
        first = 0 if kind == "decode" else rows - 1
        self.rows = torch.arange(first, rows, dtype=torch.int64, device=dev)
        s = rows - first
        self.sampling = RowSampling(
            seeds=torch.arange(s, dtype=torch.int64, device=dev) + 1,
            positions=torch.full((s,), 7, dtype=torch.int32, device=dev),
            temperature=torch.full((s,), temperature, dtype=torch.float32, device=dev),
            targets=torch.full((s,), -1, dtype=torch.int64, device=dev),
        )

    def forward(self, tok: torch.Tensor, req: torch.Tensor, pos: torch.Tensor, kv: KVState,
                *, validate: bool = True) -> torch.Tensor:  # fmt: skip
        if self.head == "forward":
            return self.model.forward(tok, req, pos, kv, validate=validate, logit_rows=self.rows)
        got = self.model.pick(tok, req, pos, kv, self.sampling, logit_rows=self.rows,
                              validate=validate)  # fmt: skip
        return got.chosen


def _timed_step(
    model: Any, kv: KVState, inputs: tuple[torch.Tensor, ...], args: argparse.Namespace
) -> tuple[list[float], str]:
    tok, req, pos = inputs
    device = kv.device
    iters = args.iters
    if device.type == "cuda":
        try:
            replay = _capture_forward(model, kv, tok, req, pos)
            return _time(replay, device, iters, 2), "cuda_graph"
        except Exception:  # capture failed: eager (noted in the table)
            traceback.print_exc()
            torch.cuda.synchronize(device)

    def eager() -> None:
        model.forward(tok, req, pos, kv, validate=False)

    return _time(eager, device, iters, 2), "eager"


def _comm_ms(model: Any, kv: KVState, inputs: tuple[torch.Tensor, ...], iters: int) -> float:
    """Median ms of the step's collectives replayed alone (CUDA graph)."""
    group = model.group
    group.trace = []
    tok, req, pos = inputs
    model.forward(tok, req, pos, kv, validate=False)
    trace, group.trace = group.trace, None
    bufs = [torch.zeros(shape, dtype=dt, device=kv.device) for _, shape, dt in trace]

    def run() -> None:
        for (op, _, _), b in zip(trace, bufs, strict=True):
            if op == "all_gather":
                group.all_gather(b)
            else:
                group.all_reduce_sum(b)

    if kv.device.type != "cuda":
        return statistics.median(_time(run, kv.device, iters, 2))
    torch.cuda.synchronize(kv.device)

    side = torch.cuda.Stream(device=kv.device)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(kv.device))
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream(kv.device).wait_stream(side)
    fn: Callable[[], None] = run
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        fn = graph.replay
    except Exception:
        traceback.print_exc()
    return statistics.median(_time(fn, kv.device, iters, 2))


def _measure(model: Model, args: argparse.Namespace, tp: int) -> dict[str, Any]:
    device = model.device
    kv = _kv(model.cfg, args, device)
    out: dict[str, Any] = {"tp": tp}
    for kind in ("decode", "prefill"):
        inputs = _step_inputs(model, args, kind, device)
        rows = inputs[0].shape[0]
        step_model = _Step(model, kind, rows, args.head, args.temperature)
        ms, how = _timed_step(step_model, kv, inputs, args)
        out[kind] = {"ms": statistics.median(ms), "ms_min": min(ms), "how": how}
        if tp > 1:
            out[kind]["comm_ms"] = _comm_ms(step_model, kv, inputs, args.iters)
        if kind == "decode" and args.compare_forward and args.head == "pick":
            # The same decode step ending in the full log-prob rows (the logits gathered at
            # TP > 1): the head's share, measured in this process.
            fwd = _Step(model, kind, rows, "forward", args.temperature)
            ms, how = _timed_step(fwd, kv, inputs, args)
            out["decode_forward"] = {"ms": statistics.median(ms), "ms_min": min(ms), "how": how}
            if tp > 1:
                out["decode_forward"]["comm_ms"] = _comm_ms(fwd, kv, inputs, args.iters)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        out["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    del kv
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="flash_wide")
    p.add_argument("--mode", default="bi")
    p.add_argument("--kv-dtype", default="nvfp4_ds_mla")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--prefill", type=int, default=1024)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument(
        "--head",
        choices=("pick", "forward"),
        default="pick",
        help="pick: the engine's sampling head (vocabulary partials); forward: full log-probs",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="of every logit row (pick)")
    p.add_argument(
        "--compare-forward",
        action="store_true",
        help="also time the decode step with --head forward in the same process",
    )
    p.add_argument("--timeout-s", type=float, default=240.0)
    p.add_argument("--json", default=None)
    p.add_argument(
        "--skip-tp1",
        action="store_true",
        help="time TP=N only (e.g. a second run under other NCCL settings)",
    )
    args = p.parse_args(argv)

    from .parallel.dist import init_tensor_parallel, shutdown
    from .parallel.model import TPModel

    world = int(os.environ.get("WORLD_SIZE", "1"))
    kind = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke run (gloo, torch)
    group = init_tensor_parallel(world, kind, args.timeout_s) if world > 1 else None
    rank = 0 if group is None else group.rank
    # After the group is made: init_tensor_parallel defaults NCCL_PROTO (parallel.dist).
    proto = os.environ.get("NCCL_PROTO", "(NCCL's choice)") if kind == "cuda" else "-"
    device = torch.device("cuda", torch.cuda.current_device()) if kind == "cuda" else None
    device = device or torch.device("cpu")
    backend = "triton" if kind == "cuda" else "torch"
    cfg = ModelConfig.preset(args.model)
    res: dict[str, Any] = {"model": args.model, "mode": args.mode, "kv_dtype": args.kv_dtype,
                           "batch": args.batch, "context": args.context,
                           "prefill_rows": args.prefill, "head": args.head,
                           "temperature": args.temperature, "runs": [],
                           "nccl_proto": proto}  # fmt: skip
    try:
        if rank == 0 and not args.skip_tp1:
            w = init_weights(cfg, device, draw_device=device)
            one = Model(cfg, mode=args.mode, backend=backend, device=device, weights=w)
            del w
            res["runs"].append(_measure(one, args, 1))
            if args.json:
                Path(args.json).write_text(json.dumps(res, indent=2))
            del one
            if kind == "cuda":
                torch.cuda.empty_cache()
            print(json.dumps(res["runs"][-1]), flush=True)
        if group is not None:
            dist.barrier()
            if kind == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            tp_model = TPModel(cfg, group=group, mode=args.mode, backend=backend,
                               draw_device=device)  # fmt: skip
            res["runs"].append(_measure(tp_model, args, world))
            dist.barrier()
    finally:
        if group is not None:
            shutdown()
    if rank == 0:
        _report(res)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


def _report(res: dict[str, Any]) -> None:
    runs = {r["tp"]: r for r in res["runs"]}
    print(f"\n{res['model']} mode={res['mode']} {res['kv_dtype']} decode batch {res['batch']} "
          f"at context {res['context']}, prefill {res['prefill_rows']} rows; head "
          f"{res['head']} (temperature {res['temperature']}), "
          f"NCCL_PROTO {res['nccl_proto']}")  # fmt: skip
    print("| step | TP | ms (median) | vs TP=1 | comm ms | comm share | timed as |")
    print("|---|--:|--:|--:|--:|--:|---|")
    kinds = ["decode", "prefill"]
    if any("decode_forward" in r for r in runs.values()):
        kinds.insert(1, "decode_forward")
    for kind in kinds:
        base = runs.get(1, {}).get(kind, {}).get("ms")
        for tp, r in sorted(runs.items()):
            if kind not in r:
                continue
            s = r[kind]
            ratio = f"{s['ms'] / base:.2f}x" if base else "-"
            comm = s.get("comm_ms")
            share = f"{comm / s['ms']:.0%}" if comm else "-"
            c = f"{comm:.3f}" if comm else "-"
            print(f"| {kind} | {tp} | {s['ms']:.3f} | {ratio} | {c} | {share} | {s['how']} |")


if __name__ == "__main__":
    sys.exit(main())
