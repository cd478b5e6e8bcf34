"""Which ds41 source lines launch a flash_mini decode step's torch-op kernels, and their time.

    python scripts/op_sites.py [--batch 64] [--context 4096] [--mode bi] [--top 40]

`benchmarks/profile_step.py --sites` needs Python stacks from torch.profiler, which torch 2.11
did not record on the H200. This script labels every torch op itself: a TorchDispatchMode
wraps each op in a `record_function` named after the op and the innermost ds41 frame, and
the profiler's device time per label is the kernel time of that call site (views skipped).
"""

from __future__ import annotations

import argparse
import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

from ds41_runner.bench import _fill_synthetic_history
from ds41_runner.model import KVState, Model, ModelConfig

VIEW_OPS = ("aten.detach", "aten.view", "aten._unsafe_view", "aten.t.", "aten.unsqueeze",
            "aten.squeeze", "aten.as_strided", "aten.expand", "aten.permute", "aten.transpose",
            "aten.slice", "aten.select.int", "aten.alias", "aten.reshape", "aten.lift_fresh",
            "aten.empty", "aten.split", "aten.unbind")  # fmt: skip


def call_site() -> str:
    for f in reversed(traceback.extract_stack()):
        if "ds41_" in f.filename and "op_sites" not in f.filename:
            return f"{f.filename.split('src/')[-1]}:{f.lineno} {f.name}"
    return "?"


class LabelOps(TorchDispatchMode):
    """Runs every non-view torch op inside `record_function("SITE <op> @ <file:line>")`."""

    def __torch_dispatch__(
        self, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        name = str(func)
        if name.startswith(VIEW_OPS):
            return func(*args, **(kwargs or {}))
        with record_function(f"SITE {name} @ {call_site()}"):
            return func(*args, **(kwargs or {}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--mode", default="bi")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    dev = torch.device("cuda")
    cfg = ModelConfig.preset("flash_mini")
    b, n = args.batch, args.context
    kv = KVState(cfg, kv_dtype="nvfp4_ds_mla", max_requests=b, max_tokens_per_request=n + 8,
                 num_pages=b * (-(-(n + 8) // 64)) + 1, page_size=64, device=dev)  # fmt: skip
    for r in range(b):
        kv.reserve(r, n + 8)
    _fill_synthetic_history(kv, seed=0)
    model = Model(cfg, mode=args.mode, device=dev, seed=0)
    tok = torch.randint(0, cfg.vocab_size, (b,)).to(dev)
    req = torch.arange(b, dtype=torch.int32, device=dev)
    pos = torch.full((b,), n, dtype=torch.int32, device=dev)
    for _ in range(2):
        model.forward(tok, req, pos, kv, validate=False)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with LabelOps():
            for _ in range(args.steps):
                model.forward(tok, req, pos, kv, validate=False)
        torch.cuda.synchronize()
    rows: dict[str, tuple[float, float]] = {}
    for ev in prof.key_averages():
        # a label appears twice (the host range and its device annotation): keep the smaller
        # device time, the kernels' own (the annotation spans gaps between them as well)
        if ev.key.startswith("SITE "):
            us, n_calls = ev.device_time_total / args.steps, ev.count / args.steps
            if ev.key not in rows or us < rows[ev.key][0]:
                rows[ev.key] = (us, n_calls)
    print(f"flash_mini mode={args.mode} batch={b} context={n}: torch-op kernel time by call "
          f"site, {sum(us for us, _ in rows.values()):.0f} us/step in all")  # fmt: skip
    for key, (us, n_calls) in sorted(rows.items(), key=lambda kv_: -kv_[1][0])[: args.top]:
        print(f"{us:8.1f} us x{n_calls:4.0f}  {key[5:][:140]}")


if __name__ == "__main__":
    main()
