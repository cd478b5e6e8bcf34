"""Issue 12 before/after in one process: `ds41_indexer_old` (the package before the change, a
copy under another name) and `ds41_indexer` on the same sizes, caches and CUDA-graph timing."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import ds41_indexer_old.bench as old_bench  # type: ignore[import-not-found]
import torch

import ds41_indexer.bench as new_bench


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--contexts", default="4096,32768,131072,1048576")
    ap.add_argument("--rows", default="1,8,64,256")
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--skip-old", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda")
    rows = tuple(int(v) for v in a.rows.split(","))
    out: dict[str, object] = {"device": torch.cuda.get_device_name(), "old": [], "new": []}
    olds: list[dict[str, object]] = []
    news: list[dict[str, object]] = []
    print(new_bench.HEADER, flush=True)
    for ctx in (int(v) for v in a.contexts.split(",")):
        if not a.skip_old:
            print("-- before", flush=True)
            olds += [asdict(r) for r in old_bench.run((ctx,), rows, dev, a.iters)]
            torch.cuda.empty_cache()
        print("-- after", flush=True)
        news += [asdict(r) for r in new_bench.run((ctx,), rows, dev, a.iters, check=True)]
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
