"""Probe (engine, eleventh session): what programmatic dependent launch (PDL) saves per kernel
boundary in a CUDA graph of small dependent launches, the shape of a decode step (~300 kernels
of 2-20 us, each reading the previous one's output).

    python scripts/pdl_chain_probe.py [--launches 200] [--json PATH]     # H200

A chain of `--launches` Triton launches, each `y = x * a + b` over the previous launch's output
(ping-pong buffers), captured in one CUDA graph, in four ways:
- `plain`: ordinary launches (each waits for the previous kernel to finish and flush);
- `wait`: `launch_pdl=True` and `griddepcontrol.wait` first in every program (no early trigger:
  the next launch is released when the kernel ends);
- `wait_trig`: as `wait`, then `griddepcontrol.launch_dependents` right after the wait (the next
  kernel's programs are placed while this one runs and wait for it);
- `trig_wait`: the trigger before the wait.
Every variant's final buffer must equal `plain`'s bit for bit (a launch that read its input
before the previous one finished would differ: every step changes every element). Timed: graph
replay, microseconds per launch, at 64 and 512 programs per launch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

VARIANTS = {
    "plain": (False, False, False),
    "wait": (True, False, False),
    "wait_trig": (True, True, False),
    "trig_wait": (True, False, True),
}


@triton.jit
def affine_kernel(
    x_ptr, y_ptr, n, a, b,
    BLOCK: tl.constexpr, WAIT: tl.constexpr, TRIG_AFTER: tl.constexpr, TRIG_BEFORE: tl.constexpr,
):  # fmt: skip
    if TRIG_BEFORE:
        gdc_launch_dependents()
    if WAIT:
        gdc_wait()
    if TRIG_AFTER:
        gdc_launch_dependents()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok)
    tl.store(y_ptr + offs, x * a + b, mask=ok)


def chain(bufs: list[torch.Tensor], launches: int, variant: str, block: int) -> None:
    wait, trig_after, trig_before = VARIANTS[variant]
    n = bufs[0].numel()
    grid = (triton.cdiv(n, block),)
    for i in range(launches):
        x, y = bufs[i % 2], bufs[(i + 1) % 2]
        affine_kernel[grid](
            x, y, n, 1.0001 + 1e-6 * (i % 7), 0.5 - 0.01 * (i % 5),
            BLOCK=block, WAIT=wait, TRIG_AFTER=trig_after, TRIG_BEFORE=trig_before,
            num_warps=4, launch_pdl=wait,
        )  # fmt: skip


def run(variant: str, programs: int, launches: int, replays: int) -> tuple[float, torch.Tensor]:
    block = 1024
    n = programs * block
    seed = torch.Generator(device="cpu").manual_seed(0)
    init = torch.randn(n, generator=seed).cuda()
    bufs = [init.clone(), torch.empty_like(init)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain(bufs, launches, variant, block)  # compile outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain(bufs, launches, variant, block)
    bufs[0].copy_(init)
    graph.replay()
    torch.cuda.synchronize()
    result = bufs[launches % 2].clone()
    for _ in range(3):
        graph.replay()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return 1000.0 * start.elapsed_time(end) / (replays * launches), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--launches", type=int, default=200)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--programs", default="64,512")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    ok = True
    for programs in (int(p) for p in args.programs.split(",")):
        ref = None
        row: dict[str, float | int | bool] = {"programs": programs}
        for variant in VARIANTS:
            us, result = run(variant, programs, args.launches, args.replays)
            same = ref is None or torch.equal(result.view(torch.int32), ref.view(torch.int32))
            ref = result if ref is None else ref
            ok &= bool(same)
            row[variant] = us
            row[f"{variant}_same"] = bool(same)
        rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("| programs | " + " | ".join(f"{v} us/launch" for v in VARIANTS) + " |")
    print("|--:|" + "--:|" * len(VARIANTS))
    for row in rows:
        cells = [f"{row[v]:.2f}{'' if row[f'{v}_same'] else ' (DIFFERS)'}" for v in VARIANTS]
        print(f"| {row['programs']} | " + " | ".join(cells) + " |")
    print("bits: " + ("every variant == plain" if ok else "MISMATCH"))
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
