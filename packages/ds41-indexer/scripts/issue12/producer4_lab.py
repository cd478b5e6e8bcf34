"""Issue 12, twenty-sixth session: the producer as a whole warpgroup (4 warps) instead of one.

The production logits kernel (`ops/logits/gluon_kernels.py`) runs its producer in one warp;
`warp_specialize` pads that partition to a warpgroup (the register re-balance works on whole
warpgroups), so warps 5-7 of every program sit at a barrier. If the SM hands a program's
warps to its four schedulers by warp index (warp w to scheduler w % 4), every program's
producer (warp 4) lands on scheduler 0, which then issues the tile loops of four producers
(~150 instructions a tile each) beside four consumer warps, while schedulers 1-3 issue only
consumer warps. This lab copy gives the producer the whole warpgroup: the key bytes' copies,
the scale words and the factors are spread over 128 threads (2 copies a thread instead of 8,
one key a lane pair instead of two keys a lane), so each scheduler issues one producer warp
of every program. Same registers (the warpgroup had 24 a thread already), same values: the
logits must be the production kernel's bits (checked at every size).

`--sched` also runs a probe that reports, for this launch shape (8 warps, 4 programs an SM),
which scheduler (`%warpid % 4`) each warp of each program ran on.

    python packages/ds41-indexer/scripts/issue12/producer4_lab.py --compile
    python packages/ds41-indexer/scripts/issue12/producer4_lab.py --run [--sched] [--json out.json]
    python packages/ds41-indexer/scripts/issue12/producer4_lab.py --launch-both 64x32768  (ncu)

Adopted in daf31b4 beside two consumer warpgroups only (`_producer_warps`); the edits apply
to the kernel before it (`git show 375d7b1:<path>`, path
`packages/ds41-indexer/src/ds41_indexer/ops/logits/gluon_kernels.py`). BENCHMARKS.md, issue
12, twenty-sixth session.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import timeline  # noqa: E402

PRODUCER_WARPS = (4,)


def producer4_source(src: str | None = None, pw: int = 4) -> str:
    """The production kernel's source with a `pw`-warp producer (2 or 4: layouts, the ready
    barrier's count, the partition's warps)."""
    if pw not in (2, 4):
        raise ValueError(f"pw must be 2 or 4, got {pw}")
    if src is None:
        src = timeline.production_source()
    e = timeline._edit
    # the page list and a tile's page: one value a thread over the warpgroup
    src = e(
        src,
        "    tl_lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])\n",
        f"    tl_lay: gl.constexpr = gl.BlockedLayout([1], [32], [{pw}], [0])\n",
    )
    # (every thread holds the one value: no lane or warp takes part in the reduction)
    src = e(
        src,
        "    one: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])\n",
        "    one: gl.constexpr = gl.DistributedLinearLayout([], [[0]] * 5, "
        f"[[0]] * {pw.bit_length() - 1}, [], [1])\n",
    )
    # the key bytes: [64 entries, 16 words] as 2 x 16-byte copies a thread; the scale bytes:
    # [64 keys, 4 bytes] as 2 bytes a thread (a key on a lane pair)
    src = e(
        src,
        "    dl: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [1, 1], [1, 0])\n",
        f"    dl: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [{pw}, 1], [1, 0])\n",
    )
    src = e(
        src,
        "    kl: gl.constexpr = gl.BlockedLayout([2, 4], [32, 1], [1, 1], [1, 0])\n",
        f"    kl: gl.constexpr = gl.BlockedLayout([1, 2], [16, 2], [{pw}, 1], [1, 0])\n",
    )
    src = e(
        src,
        "    fl1: gl.constexpr = gl.BlockedLayout([4], [32], [1], [0])\n",
        f"    fl1: gl.constexpr = gl.BlockedLayout([1], [32], [{pw}], [0])\n",
    )
    # one asynchronous arrival per producer thread and one of the producer
    src = e(
        src,
        "mbarrier.init(ready.index(b), count=33)",
        f"mbarrier.init(ready.index(b), count={32 * pw + 1})",
    )
    src = e(
        src,
        "            [1],\n            [PRODUCER_REGS],\n",
        f"            [{pw}],\n            [PRODUCER_REGS],\n",
    )
    src = e(
        src,
        "            [4, 1],\n            [CONSUMER_REGS, PRODUCER_REGS],\n",
        f"            [4, {pw}],\n            [CONSUMER_REGS, PRODUCER_REGS],\n",
    )
    return src


def compile_offline() -> None:
    import gluon7_sass

    _mod, path = timeline.lab_module(src=producer4_source(), name="producer4_offline")
    for tiles in ("64", "16"):
        sys.argv = ["gluon7_sass.py", "--module", path, "--set", f"TILES={tiles}"]
        gluon7_sass.main()


SCHED_PROBE = """
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def _spin(out_ptr, W: gl.constexpr, ROLE: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [W], [0])
    lane = gl.arange(0, 32 * W, layout=lay)
    # (%smid << 8) | %warpid of each thread (the input only ties the asm to the layout)
    ids = gl.inline_asm_elementwise(
        "{ .reg .u32 w, s; mov.u32 w, %warpid; mov.u32 s, %smid; shl.b32 s, s, 8; "
        "or.b32 $0, s, w; }", "=r,r", [lane], dtype=gl.int32, is_pure=False, pack=1)
    # 20 us on the SM, so the programs of an SM overlap
    t0 = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [lane],
                                   dtype=gl.int64, is_pure=False, pack=1)
    t = t0
    while gl.max(t - t0, axis=0) < 20000:
        t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [lane],
                                      dtype=gl.int64, is_pure=False, pack=1)
    pid = gl.program_id(0)
    gl.store(out_ptr + pid * 512 + ROLE * 256 + lane, ids)


@gluon.jit
def _main_part(out_ptr):
    _spin(out_ptr, 4, 0)


@gluon.jit
def _worker_part(out_ptr, W: gl.constexpr):
    _spin(out_ptr, W, 1)


@gluon.jit
def probe_kernel(out_ptr, W: gl.constexpr):
    gl.warp_specialize([(_main_part, (out_ptr,)), (_worker_part, (out_ptr, W))], [W], [24])
"""


def sched_probe(programs: int = 528) -> dict[str, object]:
    """Which scheduler (%warpid % 4) each warp ran on, for a warp-specialized program of a
    4-warp default partition and a 1- or 4-warp worker (the logits kernel's shapes), 64
    registers a thread so four programs share an SM."""
    import torch

    mod, _path = timeline.lab_module(src=SCHED_PROBE, name="sched_probe")
    rep: dict[str, object] = {}
    for w in (1, 4):
        out = torch.full((programs, 512), -1, dtype=torch.int32, device="cuda")
        mod.probe_kernel[(programs,)](out, W=w, num_warps=4, maxnreg=64)
        torch.cuda.synchronize()
        ids = out.cpu()
        main_w = (ids[:, 0:128:32] & 0xFF) % 4  # the default partition's warps
        work_w = (ids[:, 256 : 256 + 32 * w : 32] & 0xFF) % 4  # the worker's warps
        sms = ids[:, 0] >> 8
        per_sm = torch.bincount(sms.long()).tolist()
        hist = torch.bincount(work_w.flatten().long(), minlength=4).tolist()
        rep[f"worker {w} warp(s)"] = {
            "default partition schedulers (first 3 programs)": main_w[:3].tolist(),
            "worker schedulers (first 8 programs)": work_w[:8].tolist(),
            "worker warps per scheduler (all programs)": hist,
            "programs per SM (max)": max(per_sm),
        }
    return rep


def run(sizes: list[tuple[int, int]], iters: int,
        warps: tuple[int, ...] = PRODUCER_WARPS) -> list[dict[str, object]]:  # fmt: skip
    mods = {w: timeline.lab_module(src=producer4_source(pw=w), name=f"producer{w}")[0]
            for w in warps}  # fmt: skip

    def labs_for(args: tuple, t: int, ctx: int) -> tuple[dict[str, object], list]:  # type: ignore[type-arg]
        cfg = timeline.lab_shape(t, ctx)[1]
        labs = [(f"lab producer{w}", partial(timeline.launch_lab_copy, m, args))
                for w, m in mods.items()]  # fmt: skip
        return {"config": list(cfg)}, labs

    return timeline.run_sizes(sizes, iters, labs_for)


def launch_both(t: int, ctx: int) -> None:
    """The production kernel and the lab copy at one size, twice each (for a profiler's
    `--launch-skip 2`: the second launch of each is the one measured)."""
    import torch

    lab = timeline.lab_module(src=producer4_source(), name="producer4")[0]
    args = timeline.bench_inputs(t, ctx)  # the 4-warp copy
    out = torch.empty((t, ctx), device="cuda")
    from ds41_indexer.ops.logits import gluon_launch as gl_launch

    for _ in range(2):
        gl_launch.launch_gluon_logits(*args, out)
    for _ in range(2):
        timeline.launch_lab_copy(lab, args, out)
    torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--sched", action="store_true")
    ap.add_argument("--sizes", default="64x32768,32x32768,16x32768,256x32768,64x131072,"
                    "1x131072,64x1048576,256x1048576")  # fmt: skip
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warps", default="4", help="producer warps of the lab copies: 2,4")
    ap.add_argument("--json", default=None)
    ap.add_argument("--launch-both", default=None, help="ROWSxCONTEXT: for a profiler")
    a = ap.parse_args()
    if a.launch_both:
        launch_both(*(int(v) for v in a.launch_both.split("x")))
    rep: dict[str, object] = {}
    if a.compile:
        compile_offline()
    if a.sched:
        rep["sched"] = sched_probe()
        print(json.dumps(rep["sched"], indent=1), flush=True)
    if a.run:
        sizes = timeline.parse_sizes(a.sizes)
        warps = tuple(int(w) for w in a.warps.split(","))
        rep["sizes"] = run(sizes, a.iters, warps)  # type: ignore[arg-type]
        timeline.print_lab_table(rep["sizes"], "producer4", (" bitwise",))  # type: ignore[arg-type]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
