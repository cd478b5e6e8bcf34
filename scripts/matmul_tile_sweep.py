"""Tile shapes for the batch-invariant matmul: does the tile change the bits, and which is fastest?

    python scripts/matmul_tile_sweep.py [--rows 1,64,1024,4096] [--json PATH] [--workers 12]

A lab script (not part of the package). For the flash_mini weights and the large flash_wide
ones it launches the package's `matmul_kernel` with other tile shapes (BLOCK_M, BLOCK_N,
BLOCK_K, warps, stages) while keeping the plan's K segments (the segment boundaries in K and
the two-halves sum are the plan's; a BLOCK_K of 128 runs each segment as half as many
128-wide dot steps), checks every variant bitwise against the production launch on the same
operands (one program and split), and times each (CUDA-graph replay over operand copies that
miss the L2) beside cuBLAS. Compiles are warmed first in a process pool.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from ds41_runner.matmul_bench import COLD_BYTES, GRAPH_CALLS, Shape, flash_mini_shapes
from ds41_runner.model import ModelConfig
from ds41_runner.ops.matmul.plan import BLOCK_K, MatmulPlan, plan_matmul
from ds41_runner.ops.matmul.triton_kernels import (
    launch_matmul,
    matmul_kernel,
    reduce_segments_kernel,
)


@dataclass(frozen=True)
class Tile:
    bm: int
    bn: int
    bk: int
    warps: int
    stages: int

    @property
    def name(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}w{self.warps}s{self.stages}"


TILES = [
    Tile(64, 64, 64, 4, 3),  # production
    Tile(64, 128, 64, 4, 4),
    Tile(128, 64, 64, 4, 4),
    Tile(128, 128, 64, 8, 3),
    Tile(128, 128, 64, 4, 4),
    Tile(128, 128, 128, 8, 3),
    Tile(128, 256, 64, 8, 3),
    Tile(64, 256, 64, 4, 3),
]


def shapes() -> list[Shape]:
    seen: set[tuple[int, int, int]] = set()
    out: list[Shape] = []
    mini = flash_mini_shapes(ModelConfig.preset("flash_mini"))
    wide = [
        s
        for s in flash_mini_shapes(ModelConfig.preset("flash_wide"))
        if s.groups * s.n * s.k >= 4 * 2**20 and s.name != "lm_head"
    ]
    for s in mini + [Shape("wide " + s.name, s.groups, s.n, s.k, s.uses) for s in wide]:
        key = (s.groups, s.n, s.k)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def launch_tile(
    x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, plan: MatmulPlan, t: Tile, split: bool
) -> torch.Tensor | None:
    """The plan's arithmetic with tile `t`; None where `t.bk` does not divide a segment."""
    m = x.shape[0]
    g, n, k = w.shape
    seg_len = plan.seg_tiles * BLOCK_K
    if seg_len % t.bk:
        return None
    seg_tiles = seg_len // t.bk
    n_tiles = -(-n // t.bn)
    ncols = g * n
    split = split and plan.n_segs > 1
    ws = (
        torch.empty((plan.n_segs, m, ncols), dtype=torch.float32, device=x.device) if split else out
    )
    half_iter = 0 if split or plan.half >= plan.n_segs else plan.half * seg_tiles
    grid = (triton.cdiv(m, t.bm), g * n_tiles, plan.n_segs if split else 1)
    matmul_kernel[grid](
        x, w, out, ws, m, n, k, n_tiles, ncols,
        x.stride(0), x.stride(1), x.stride(2), w.stride(0), w.stride(1), w.stride(2),
        out.stride(0), out.stride(1), m * ncols,
        BLOCK_M=t.bm, BLOCK_N=t.bn, BLOCK_K=t.bk,
        SEG_TILES=seg_tiles, N_ITER=seg_tiles * (1 if split else plan.n_segs),
        SPLIT=split, HALF_ITER=half_iter, UPCAST=False, IEEE_FP32=False,
        num_warps=t.warps, num_stages=t.stages,
    )  # fmt: skip
    if split:
        reduce_segments_kernel[(triton.cdiv(m * ncols, 1024),)](
            ws, out, m, ncols, m * ncols, out.stride(0), out.stride(1),
            N_SEGS=plan.n_segs, HALF=plan.half, BLOCK=1024, num_warps=4,
        )  # fmt: skip
    return out


def operands(s: Shape, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(m * 7919 + s.n * 31 + s.k)
    x = (torch.randn(m, s.groups, s.k, generator=g) * 2).to(torch.bfloat16).cuda()
    w = (torch.randn(s.groups, s.n, s.k, generator=g) / s.k**0.5).to(torch.bfloat16).cuda()
    return x, w


def warm(job: tuple[Shape, Tile]) -> str:
    s, t = job
    x, w = operands(s, 3)
    plan = plan_matmul(s.n, s.k, s.groups)
    out = torch.empty(3, s.groups * s.n, device="cuda")
    for split in (False, True):
        launch_tile(x, w, out, plan, t, split)
    torch.cuda.synchronize()
    return f"{s.name} {t.name}"


def graph_us(fn, reps: int = 5) -> float:  # type: ignore[no-untyped-def]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(GRAPH_CALLS):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        for i in range(GRAPH_CALLS):
            fn(i)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        gr.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / GRAPH_CALLS)
    return sorted(times)[len(times) // 2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="1,64,1024,4096")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--workers", type=int, default=12)
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    todo = [(s, t) for s in shapes() for t in TILES]
    t0 = time.time()
    import multiprocessing as mp

    with ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as pool:
        for i, name in enumerate(pool.map(warm, todo)):
            if i % 20 == 0:
                print(f"[warm {i + 1}/{len(todo)}] {name} ({time.time() - t0:.0f} s)", flush=True)
    print(f"compiled {len(todo)} in {time.time() - t0:.0f} s", flush=True)
    results = []
    mismatches = []
    for s in shapes():
        plan = plan_matmul(s.n, s.k, s.groups)
        for m in rows:
            if s.name.startswith("wide ") and m > 1024:
                continue
            x, w = operands(s, m)
            ref = torch.full((m, s.groups * s.n), float("nan"), device="cuda")
            launch_matmul(x, w, ref, plan, upcast=False, ieee_fp32=False, split=False)
            per_call = 2 * (w.numel() + x.numel())
            n_copies = max(1, min(GRAPH_CALLS, -(-COLD_BYTES // per_call)))
            xs = [x] + [x.clone() for _ in range(n_copies - 1)]
            wss = [w] + [w.clone() for _ in range(n_copies - 1)]
            outb = torch.empty(m, s.groups * s.n, dtype=torch.bfloat16, device="cuda")
            row = {
                "name": s.name, "g": s.groups, "n": s.n, "k": s.k, "m": m, "uses": s.uses,
                "segs": plan.n_segs, "seg_tiles": plan.seg_tiles, "auto_split": plan.split(m),
            }  # fmt: skip

            def cub(i: int, xs=xs, wss=wss, n_copies=n_copies, s=s) -> object:  # type: ignore[no-untyped-def]
                xi, wi = xs[i % n_copies], wss[i % n_copies]
                if s.groups == 1:
                    return torch.matmul(xi[:, 0], wi[0].T)
                return torch.bmm(xi.transpose(0, 1), wi.transpose(1, 2))

            row["cublas"] = graph_us(cub)
            for t in TILES:
                for split in (False, True):
                    if split and plan.n_segs == 1:
                        continue
                    got = torch.full_like(ref, float("nan"))
                    if launch_tile(x, w, got, plan, t, split) is None:
                        continue
                    if not torch.equal(got, ref):
                        diff = (got - ref).abs().max().item()
                        mismatches.append((s.name, m, t.name, split, diff))

                    def call(  # type: ignore[no-untyped-def]
                        i: int, t=t, split=split, xs=xs, wss=wss, n=n_copies, o=outb, p=plan
                    ) -> object:
                        c = i % n
                        return launch_tile(xs[c], wss[c], o, p, t, split)

                    row[f"{t.name}{'/split' if split else ''}"] = graph_us(call)
            results.append(row)
            best = min((v, k) for k, v in row.items() if isinstance(v, float) and k != "cublas")
            prod = row[TILES[0].name + ("/split" if plan.split(m) else "")]
            print(f"{s.name:28s} m={m:5d} prod {prod:7.1f} best {best[0]:7.1f} ({best[1]}) "
                  f"cublas {row['cublas']:7.1f}", flush=True)  # fmt: skip
    # fp32 (IEEE, the compressor's projections) bits across tiles, one shape
    s = Shape("wkv_c fp32", 1, 512, 1024)
    plan = plan_matmul(s.n, s.k, 1)
    for m in (64, 1024):
        x, w = operands(s, m)
        x, w = x.float(), w.float()
        ref = torch.full((m, 512), float("nan"), device="cuda")
        launch_matmul(x, w, ref, plan, upcast=False, ieee_fp32=True, split=False)
        for t in TILES[1:4]:
            got = torch.full_like(ref, float("nan"))
            mm = x.shape[0]
            grid = (triton.cdiv(mm, t.bm), -(-512 // t.bn), 1)
            matmul_kernel[grid](
                x, w, got, got, mm, 512, 1024, -(-512 // t.bn), 512,
                x.stride(0), x.stride(1), x.stride(2), w.stride(0), w.stride(1), w.stride(2),
                got.stride(0), got.stride(1), 0, BLOCK_M=t.bm, BLOCK_N=t.bn, BLOCK_K=64,
                SEG_TILES=plan.seg_tiles, N_ITER=plan.seg_tiles * plan.n_segs, SPLIT=False,
                HALF_ITER=0 if plan.half >= plan.n_segs else plan.half * plan.seg_tiles,
                UPCAST=False, IEEE_FP32=True, num_warps=t.warps, num_stages=t.stages,
            )  # fmt: skip
            if not torch.equal(got, ref):
                mismatches.append((s.name, m, t.name, False, (got - ref).abs().max().item()))
    print(f"\nbit mismatches vs production tile: {len(mismatches)}")
    for mm_ in mismatches[:40]:
        print("  MISMATCH", mm_)
    # summary: per tile, step totals (uses-weighted) per m for mini shapes and wide shapes
    print("\n| set | rows | cuBLAS | " + " | ".join(t.name for t in TILES) + " | best per shape |")
    print("|---|--:|--:|" + "--:|" * len(TILES) + "--:|")
    for prefix in ("mini", "wide"):
        for m in rows:
            sel = [
                r
                for r in results
                if r["m"] == m and r["name"].startswith("wide ") == (prefix == "wide")
            ]
            cub = sum(r["uses"] * r["cublas"] for r in sel)
            cells = []
            for t in TILES:
                tot = 0.0
                for r in sel:
                    cand = [r[k] for k in (t.name, t.name + "/split") if k in r]
                    tot += r["uses"] * (min(cand) if cand else float("nan"))
                cells.append(f"{tot:.0f}")
            best = sum(
                r["uses"] * min(v for k, v in r.items() if isinstance(v, float) and k != "cublas")
                for r in sel
            )
            print(f"| {prefix} | {m} | {cub:.0f} | " + " | ".join(cells) + f" | {best:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": results, "mismatches": mismatches}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
