"""Kernel launches of one decode step on the Triton backend, counted on the CPU.

    TRITON_INTERPRET=1 PYTHONPATH=<a tree's packages/*/src> python launch_count.py LABEL

Runs the `tiny` model's forward under the Triton interpreter with "auto" resolved as on a CUDA
device (Triton everywhere a GPU would take it), after a 9-token prefill of 4 requests, and
counts, for one 4-row decode step (`validate=False`, as the engine's graphs run it): torch ops
that launch a kernel on a GPU (views and allocations skipped, as `scripts/op_sites.py` skips
them) and Triton launches, by the innermost ds41 call site. A launch count, not a time: the
GPU's figures come from `benchmarks/profile_step.py`.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import traceback
from collections import Counter
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton.runtime.interpreter as interp
from torch.utils._python_dispatch import TorchDispatchMode

import ds41_cache.backend as backend_mod
from ds41_runner.model import KVState, Model, ModelConfig

VIEW_OPS = ("aten.detach", "aten.view", "aten._unsafe_view", "aten.t.", "aten.unsqueeze",
            "aten.squeeze", "aten.as_strided", "aten.expand", "aten.permute", "aten.transpose",
            "aten.slice", "aten.select.int", "aten.alias", "aten.reshape", "aten.lift_fresh",
            "aten.empty", "aten.split", "aten.unbind", "aten._local_scalar_dense",
            "aten.is_nonzero", "aten.sym_")  # fmt: skip
torch_ops: Counter[str] = Counter()
triton_launches: Counter[str] = Counter()
in_kernel = [0]


def call_site() -> str:
    for f in reversed(traceback.extract_stack()):
        if "ds41_" in f.filename and "launch_count" not in f.filename:
            return f"{f.filename.split('src/')[-1]}:{f.name}"
    return "?"


class CountOps(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not in_kernel[0] and not str(func).startswith(VIEW_OPS):
            torch_ops[call_site()] += 1
        return func(*args, **(kwargs or {}))


def patch() -> None:
    """Count interpreted Triton launches (not the torch ops the interpreter runs inside
    them), and resolve "auto" to Triton in every ds41 module, as on a CUDA device."""
    run = interp.InterpretedFunction.run

    def counted_run(self: Any, *a: Any, **k: Any) -> Any:
        triton_launches[call_site()] += 1
        in_kernel[0] += 1
        try:
            return run(self, *a, **k)
        finally:
            in_kernel[0] -= 1

    interp.InterpretedFunction.run = counted_run  # type: ignore[method-assign]
    for pkg in ("ds41_cache", "ds41_indexer", "ds41_attention", "ds41_runner"):
        path = importlib.import_module(pkg).__path__
        for m in pkgutil.walk_packages(path, pkg + "."):
            if not any(s in m.name for s in ("bench", "__main__", "app", "parallel", "soak")):
                importlib.import_module(m.name)
    resolve = backend_mod.resolve_backend

    def as_on_cuda(backend: str, device: torch.device) -> str:
        return resolve("triton" if backend == "auto" else backend, device)

    for name, mod in list(sys.modules.items()):
        if name.startswith("ds41_") and getattr(mod, "resolve_backend", None) is resolve:
            mod.resolve_backend = as_on_cuda  # type: ignore[attr-defined]


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "tree"
    patch()
    cfg = ModelConfig.preset("tiny")
    model = Model(cfg, backend="triton", device="cpu")
    kv = KVState(
        cfg, kv_dtype="nvfp4_ds_mla", max_requests=4, max_tokens_per_request=32, num_pages=40,
        page_size=4,
    )  # fmt: skip
    b, ctx = 4, 9
    g = torch.Generator().manual_seed(0)
    for r in range(b):
        kv.reserve(r, ctx + 1)
    req = torch.arange(b, dtype=torch.int32).repeat_interleave(ctx)
    pos = torch.arange(ctx, dtype=torch.int32).repeat(b)
    model.forward(torch.randint(0, cfg.vocab_size, (b * ctx,), generator=g), req, pos, kv)
    tok = torch.randint(0, cfg.vocab_size, (b,), generator=g)
    step_req = torch.arange(b, dtype=torch.int32)
    step_pos = torch.full((b,), ctx, dtype=torch.int32)  # odd: the ratio-2 layers emit
    torch_ops.clear()
    triton_launches.clear()
    with CountOps():
        model.forward(tok, step_req, step_pos, kv, validate=False)
    n_ops, n_tr = sum(torch_ops.values()), sum(triton_launches.values())
    print(f"{label}: tiny decode step, 4 rows: {n_ops} torch ops + {n_tr} Triton launches")
    for what, counts in (("torch ", torch_ops), ("triton", triton_launches)):
        for site, n in sorted(counts.items(), key=lambda kv_: -kv_[1])[:14]:
            print(f"   {n:4d} {what} {site}")


if __name__ == "__main__":
    main()
