"""Count the kernel launches of one decode step of the runner's model, on the CPU.

    TRITON_INTERPRET=1 python scripts/count_launches.py [--preset flash_mini] [--batch 1,64]
        [--context 256] [--mode bi] [--gpu-dispatch]

Runs one `Model.forward` decode step (every row at position `--context`, synthetic cache
history as `benchmarks/profile_step.py`) with the Triton backend under the interpreter and
counts every Triton kernel launch by kernel name (the matmul's two kernels are counted without
being run: `SKIPPED`). The counts are those of the GPU step (the same dispatch decisions: the
matmul plan looks at M and the weight's shape only; on sm_90 the Hopper Gluon attention kernel
replaces the Triton one, one launch either way). Torch ops between launches are not counted.

Calls that pass `backend="auto"` (or nothing) take the torch path on CPU tensors, so without
`--gpu-dispatch` their kernels are missing from the count (the window cache's insert, the step's
RoPE tables, parts of the indexer's paged top-k); `--gpu-dispatch` resolves "auto" to Triton as
on CUDA tensors (`ds41_cache.backend.resolve_backend` patched in every loaded module), which is
the launch sequence of the GPU step.
Figures only: timing needs the H200 (`benchmarks/profile_step.py`).
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
from triton.runtime.interpreter import InterpretedFunction

from ds41_runner.bench import _fill_synthetic_history
from ds41_runner.model import KVState, Model, ModelConfig

LAUNCHES: Counter[str] = Counter()

SKIPPED = ("matmul_kernel", "reduce_segments_kernel")
"""Counted but not executed (their float outputs stay as allocated): the interpreter spends
minutes in them, and a decode step's launch sequence does not depend on values (it is what a
CUDA graph replays)."""
_run = InterpretedFunction.run


def _counted_run(self: Any, *args: Any, **kwargs: Any) -> Any:
    LAUNCHES[self.fn.__name__] += 1
    if self.fn.__name__ in SKIPPED:
        return None
    return _run(self, *args, **kwargs)


def count_step(preset: str, b: int, n: int, mode: str) -> Counter[str]:
    dev = torch.device("cpu")
    cfg = ModelConfig.preset(preset)
    ps = 64
    kv = KVState(cfg, kv_dtype="nvfp4_ds_mla", max_requests=b, max_tokens_per_request=n + 8,
                 num_pages=b * (-(-(n + 8) // ps)) + 1, page_size=ps, device=dev)  # fmt: skip
    for r in range(b):
        kv.reserve(r, n + 8)
    _fill_synthetic_history(kv, seed=0)
    with torch.no_grad():
        model = Model(cfg, mode=mode, backend="triton", device=dev, seed=0)
    tok = torch.randint(0, cfg.vocab_size, (b,), generator=torch.Generator().manual_seed(0))
    req = torch.arange(b, dtype=torch.int32)
    pos = torch.full((b,), n, dtype=torch.int32)
    LAUNCHES.clear()
    model.forward(tok, req, pos, kv, validate=False)
    return Counter(LAUNCHES)


def gpu_dispatch() -> None:
    """Resolve `backend="auto"` to Triton as on CUDA tensors (see the module doc)."""
    import sys

    import ds41_cache.backend as be

    orig = be.resolve_backend

    def resolve(backend: str, device: torch.device) -> Any:
        return "triton" if backend == "auto" else orig(backend, device)

    for mod in list(sys.modules.values()):
        if getattr(mod, "resolve_backend", None) is orig:
            mod.resolve_backend = resolve  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--preset", default="flash_mini")
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--mode", default="bi")
    ap.add_argument("--gpu-dispatch", action="store_true", help="count as on CUDA tensors")
    args = ap.parse_args(argv)
    if args.gpu_dispatch:
        gpu_dispatch()
    InterpretedFunction.run = _counted_run  # type: ignore[method-assign]
    for b in (int(v) for v in args.batch.split(",")):
        launches = count_step(args.preset, b, args.context, args.mode)
        how = " gpu-dispatch" if args.gpu_dispatch else ""
        print(f"{args.preset} mode={args.mode} batch={b} context={args.context}{how}: "
              f"{sum(launches.values())} Triton launches")  # fmt: skip
        for name, c in sorted(launches.items(), key=lambda kv_: (-kv_[1], kv_[0])):
            print(f"  {c:5d}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
