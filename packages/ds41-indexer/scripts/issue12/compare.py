"""Issue 12 before/after in one process: `ds41_indexer_old` (the package before the change, a
copy under another name) and `ds41_indexer` on the same sizes, caches and CUDA-graph timing.
`--sizes 4096:1,32768:64` picks (context, rows) pairs instead of the contexts x rows grid;
`--floor` first times CUDA-graph replays of one and of two empty Triton kernels (what any
one- or two-launch stage costs at least under this timing). `--launch-hidden` times every replay
behind a GPU busy wait (`ds41_indexer.bench.LAUNCH_HIDDEN`), for both packages: the old package's
`_time` is replaced by this package's, so both always share one timing. `--skip-old` times
this package alone (no `ds41_indexer_old` needed)."""

from __future__ import annotations

import argparse
import importlib
import json
from dataclasses import asdict

import torch
import triton
import triton.language as tl

import ds41_indexer.bench as new_bench


@triton.jit
def _empty_kernel(x_ptr):
    if tl.program_id(0) < 0:
        tl.store(x_ptr, 0)


def launch_floor(iters: int) -> dict[str, float]:
    """Median ms of a CUDA-graph replay holding one / two empty kernel launches."""
    x = torch.zeros(1, device="cuda")

    def one() -> None:
        _empty_kernel[(1,)](x)

    def two() -> None:
        one()
        one()

    dev = torch.device("cuda")
    return {
        "one_launch_ms": new_bench._time(one, dev, iters),
        "two_launches_ms": new_bench._time(two, dev, iters),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--contexts", default="4096,32768,131072,1048576")
    ap.add_argument("--rows", default="1,8,64,256")
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--sizes", default=None, help="context:rows pairs, comma-separated")
    ap.add_argument("--skip-old", action="store_true")
    ap.add_argument("--floor", action="store_true")
    ap.add_argument("--launch-hidden", action="store_true")
    a = ap.parse_args()
    new_bench.LAUNCH_HIDDEN = a.launch_hidden
    if not a.skip_old:
        # the package before the change, staged under another name (README); not needed with
        # --skip-old
        old_bench = importlib.import_module("ds41_indexer_old.bench")
        old_bench._time = new_bench._time
    dev = torch.device("cuda")
    rows = tuple(int(v) for v in a.rows.split(","))
    if a.sizes:
        pairs = [tuple(int(x) for x in v.split(":")) for v in a.sizes.split(",")]
        plan = [(c, (r,)) for c, r in pairs]
    else:
        plan = [(int(c), rows) for c in a.contexts.split(",")]
    out: dict[str, object] = {
        "device": torch.cuda.get_device_name(),
        "launch_hidden": a.launch_hidden,
        "old": [],
        "new": [],
    }
    if a.floor:
        out["floor"] = launch_floor(max(a.iters, 20))
        print("graph replay floor (ms):", out["floor"], flush=True)
    olds: list[dict[str, object]] = []
    news: list[dict[str, object]] = []
    print(new_bench.HEADER, flush=True)
    for ctx, sel in plan:
        if not a.skip_old:
            print("-- before", flush=True)
            olds += [asdict(r) for r in old_bench.run((ctx,), sel, dev, a.iters)]
            torch.cuda.empty_cache()
        print("-- after", flush=True)
        news += [asdict(r) for r in new_bench.run((ctx,), sel, dev, a.iters, check=True)]
        torch.cuda.empty_cache()
        out["old"], out["new"] = olds, news
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    print("\ncontext rows | logits ms old -> new (GB/s) | top-k ms | fused ms | f.logits f.select")
    by_size = {(r["context"], r["rows"]): r for r in olds}
    for r in news:
        o = by_size.get((r["context"], r["rows"]), {})

        def old(key: str, o: dict[str, object] = o) -> str:
            return f"{o[key]:.4f}" if key in o else "-"

        print(
            f"{r['context']:>8} {r['rows']:>4} | {old('logits_ms')} -> {r['logits_ms']:.4f} "
            f"({r['logits_gbs']:.0f}) | {old('topk_ms')} -> {r['topk_ms']:.4f} | "
            f"{old('fused_ms')} -> {r['fused_ms']:.4f} | {r['f_logits_ms']:.4f} "
            f"{r['f_select_ms']:.4f} {r['check']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
