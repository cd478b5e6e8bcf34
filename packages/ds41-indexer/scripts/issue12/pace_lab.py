"""Issue 12, twenty-second session: programs of an SM paced to equal progress.

The twenty-first session's timeline (`timeline.py`) showed that at 64 x 32K the four programs
an SM runs end at 46 / 48 / 55 / 63 us on average: the warp schedulers favour the programs
placed first, so the last-placed run their final ~15 us alone or in pairs, at 2.7-3.6 tiles a
us against ~4.6 with four. Every program has the same work (64 tiles), so if the four kept
equal progress they would all run at the four-program rate to the end (~58 us by that rate).

This lab copy of the production kernel (`ops/logits/gluon_kernels.py`, edited as text at
import, so it follows the production source) paces its producer. Each program adds itself to
its SM's word in global memory (programs * 2^20 + tiles, `red.relaxed.gpu`) and, every
`mask + 1` tiles, its progress. At each checkpoint it compares its progress with the SM's
mean and, if it is more than `slack` tiles ahead, its producer sleeps `ns` nanoseconds
(`nanosleep`) before the next tile: its consumer drains the ring and the programs behind get
the issue slots. Kind "d" reads the word at a checkpoint and uses it at the next (the read's
latency passes under the tiles between); kind "b" reads it and waits. At its end a program
takes its counts back out, so the words are zero after every launch (checked). The arithmetic
is the production kernel's: the logits must be its bits (checked at every size and variant).

On the H200 (`--run`): bits, then CUDA-graph medians of the production kernel and the paced
lab copy at several (mask, slack, ns) settings (runtime arguments: one compile), then with
`--stamps` the timeline's stamps of the paced copy (the programs' end times by their rank on
their SM). `--compile` compiles both lab copies for sm_90a offline (no GPU).

    python packages/ds41-indexer/scripts/issue12/pace_lab.py --compile
    python packages/ds41-indexer/scripts/issue12/pace_lab.py --run [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from types import ModuleType

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import timeline  # noqa: E402
from timeline import _edit  # noqa: E402

PACE_SLOTS = 1024  # one int32 word for each %smid (below %nsmid, which may exceed the SMs)
# (kind, mask, slack, ns); kind "d": the SM's word read at a checkpoint and used at the next,
# "b": read and waited for (measured first, in call 2, with two words an SM: 2.6-4.5% slower
# with no sleeps at 64 x 32K); mask -1: no checkpoints; OFF: checkpoints, no sleeps
NONE = ("d", -1, 0, 0)
OFF = ("d", 3, 1 << 19, 0)
VARIANTS = (NONE, OFF, ("d", 3, 2, 500), ("d", 3, 1, 500), ("d", 3, 2, 1000), ("d", 7, 2, 1000),
            ("d", 7, 4, 1000), ("d", 1, 2, 300), ("b", 7, 2, 1000), ("b", 15, 2, 1000),
            ("b", 15, 4, 2000))  # fmt: skip
STAMPED = (NONE, ("d", 3, 2, 500), ("d", 3, 2, 1000))

PACE_FN = """

@gluon.jit
def _smid():
    return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _red_add(ptr, v):
    # lane 0 of the (one-warp) producer adds v to the int32 at ptr, not waiting for it
    return gl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 l; mov.u32 l, %laneid; setp.eq.u32 p, l, 0; "
        "@p red.relaxed.gpu.global.add.s32 [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [ptr, v], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _ld_relaxed(ptr):
    return gl.inline_asm_elementwise("ld.relaxed.gpu.global.s32 $0, [$1];", "=r,l", [ptr],
                                     dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _sm_word(pace_ptr, pace_ns):
    # this SM's word as a tensor a lane (zero offsets the compiler cannot fold: 0 <= ns < 2^30):
    # read as a scalar, the word would go to a uniform register at once, waiting for the read
    # there rather than at the next checkpoint
    lane = gl.arange(0, 32, layout=gl.BlockedLayout([1], [32], [1], [0]))
    return pace_ptr + _smid() + lane * (pace_ns >> 30)


@gluon.jit
def _sleep_if(excess, ns):
    return gl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $1, 0; @p nanosleep.u32 $2; mov.u32 $0, 0; }",
        "=r,r,r", [excess, ns], dtype=gl.int32, is_pure=False, pack=1)

"""


def paced_source(src: str | None = None, deferred: bool = True) -> str:
    """The production kernel's source with the producer paced (see the module docstring); the
    kernel takes (pace_ptr, pace_mask, pace_slack, pace_ns) after path_cols. `deferred`: the
    SM's word is read at a checkpoint and used at the next (else read and waited for)."""
    if src is None:
        src = timeline.production_source()
    anchor = "\n\n@gluon.constexpr_function\ndef _raw_layout():"
    src = _edit(src, anchor, PACE_FN + anchor.lstrip("\n"))
    src = _edit(src, "    path_stride_t, path_cols,\n    HI: gl.constexpr,",
                "    path_stride_t, path_cols, pace_ptr, pace_mask, pace_slack, pace_ns,\n"
                "    HI: gl.constexpr,")  # fmt: skip
    src = _edit(src, "    a = (q_ptr,", "    pc = (pace_ptr, pace_mask, pace_slack, pace_ns)\n"
                "    a = (q_ptr,")  # fmt: skip
    src = _edit(src, "page_smem, PAGE_SIZE, STAGES, TILES)),",
                "page_smem, pc, PAGE_SIZE, STAGES, TILES)),", count=2)  # fmt: skip
    src = _edit(src, "def _producer(a, data_smem, fac_smem, mult_smem, ready, empty, xbar, "
                "flag_smem, page_smem,\n",
                "def _producer(a, data_smem, fac_smem, mult_smem, ready, empty, xbar, "
                "flag_smem, page_smem, pc,\n")  # fmt: skip
    start = "    c_first = gl.program_id(1) * TILES * BLOCK_N\n"
    src = _edit(src, start, start + (
        "    pace_ptr, pace_mask, pace_slack, pace_ns = pc\n"
        "    # one int32 an SM: programs * 2^20 + tiles (one read, one register); its address\n"
        "    # computed where used (the producer has 24 registers)\n"
        "    _red_add(pace_ptr + _smid(), 1 << 20)\n"
        "    contrib = pace_mask * 0\n"
        "    if DEFERRED:\n"
        "        word = _ld_relaxed(_sm_word(pace_ptr, pace_ns))\n"
    ))  # fmt: skip
    head = "    for i in range(1, TILES):\n        page, ok = _tile_page(page_smem, i)\n"
    src = _edit(src, head, (
        "    for i in range(1, TILES):\n"
        "        if (i & pace_mask) == 0:\n"
        "            if DEFERRED:\n"
        "                # the word read at the last checkpoint, after this program's count\n"
        "                act = word >> 20\n"
        "                _sleep_if(contrib * act - (word & 0xFFFFF) - pace_slack * act, pace_ns)\n"
        "                _red_add(pace_ptr + _smid(), pace_mask + 1)\n"
        "                contrib += pace_mask + 1\n"
        "                word = _ld_relaxed(_sm_word(pace_ptr, pace_ns))\n"
        "            else:\n"
        "                _red_add(pace_ptr + _smid(), pace_mask + 1)\n"
        "                contrib += pace_mask + 1\n"
        "                # waited for here: the producer runs STAGES tiles ahead\n"
        "                w = _ld_relaxed(pace_ptr + _smid())\n"
        "                act = w >> 20\n"
        "                _sleep_if(contrib * act - (w & 0xFFFFF) - pace_slack * act, pace_ns)\n"
        "        page, ok = _tile_page(page_smem, i)\n"
    ))  # fmt: skip
    end = "    # the range bits to consumer 0, once\n"
    src = _edit(src, end, "    _red_add(pace_ptr + _smid(), -contrib - (1 << 20))\n" + end)
    src = _edit(src, "PRODUCER_REGS = gl.constexpr(GLUON_PRODUCER_REGS)\n",
                "PRODUCER_REGS = gl.constexpr(GLUON_PRODUCER_REGS)\n"
                f"DEFERRED = gl.constexpr({deferred})\n")  # fmt: skip
    return src


def modules() -> dict[str, ModuleType]:
    """The lab kernels by kind: "d" the deferred read, "b" the blocking read, "s" the deferred
    read with the timeline's stamps."""
    srcs = {"d": paced_source(), "b": paced_source(deferred=False),
            "s": timeline.lab_source(src=paced_source())}  # fmt: skip
    return {k: timeline.lab_module(src=v, name=f"paced_{k}")[0] for k, v in srcs.items()}


def compile_offline() -> None:
    import gluon7_sass

    for src in (paced_source(), paced_source(deferred=False),
                timeline.lab_source(src=paced_source())):  # fmt: skip
        _mod, path = timeline.lab_module(src=src, name="paced_offline")
        gluon7_sass.PTRS["stamp_ptr"] = "*i64"
        gluon7_sass.PTRS["pace_ptr"] = "*i32"
        gluon7_sass.NOT_DIV16.update(("pace_mask", "pace_slack", "pace_ns"))
        sys.argv = ["gluon7_sass.py", "--module", path, "--set", "TILES=64"]
        gluon7_sass.main()


def end_ranks(raw: list[list[int]]) -> dict[str, object]:
    """The programs' end (c_end, us from the launch's first stamp) by their rank on their SM
    (by start), averaged over the SMs that ran 4 and 3 programs; the last end."""
    s = timeline.STAMPS.index
    base = min(min(p[: len(timeline.STAMPS)]) for p in raw)
    by_sm: dict[int, list[tuple[int, float]]] = {}
    for p in raw:
        by_sm.setdefault(p[timeline.SMID], []).append(
            (p[s("c_start")], (p[s("c_end")] - base) / 1e3)
        )
    rep: dict[str, object] = {"last_end_us": max(e for v in by_sm.values() for _, e in v)}
    for n in (4, 3, 2, 1):
        sms = [sorted(v) for v in by_sm.values() if len(v) == n]
        if sms:
            rep[f"sms with {n}"] = len(sms)
            rep[f"end by rank ({n})"] = [
                round(sum(v[r][1] for v in sms) / len(sms), 1) for r in range(n)
            ]
            rep[f"latest SM end ({n})"] = round(max(max(e for _, e in v) for v in sms), 1)
    return rep


def run(sizes: list[tuple[int, int]], iters: int, variants: list[tuple[str, int, int, int]],
        stamps: bool) -> list[dict[str, object]]:  # fmt: skip
    import torch

    dev = torch.device("cuda")
    mods = modules()
    pace = torch.zeros(PACE_SLOTS, dtype=torch.int32, device=dev)

    def counters_zero(key: str, row: dict[str, object]) -> None:
        row[key + " counters zero"] = not bool(pace.any())
        pace.zero_()

    report = []
    for t, ctx in sizes:
        args = timeline.bench_inputs(t, ctx)
        ref = torch.full((t, ctx), float("nan"), device=dev)
        labs = [("lab {}:{}/{}/{}".format(*v),
                 partial(timeline.launch_lab_copy, mods[v[0]], args, tail=(pace, *v[1:])))
                for v in variants]  # fmt: skip
        row: dict[str, object] = {"rows": t, "context": ctx}
        row.update(timeline.time_variants(args, ref, iters, labs, counters_zero))
        if stamps:
            _spans, _cfg, grid = timeline.lab_shape(t, ctx)
            for v in STAMPED:
                out = torch.full((t, ctx), float("nan"), device=dev)
                st = torch.zeros(grid[0] * grid[1], 16, dtype=torch.int64, device=dev)
                for _ in range(3):
                    timeline.launch_lab_copy(mods["s"], args, out, (pace, *v[1:]), stamps=st)
                torch.cuda.synchronize()
                key = "stamps {}:{}/{}/{}".format(*v)
                row[key] = end_ranks(st.cpu().tolist())
                row[key]["bitwise"] = torch.equal(  # type: ignore[index]
                    out.view(torch.int32), ref.view(torch.int32)
                )
        report.append(row)
        print(json.dumps(row), flush=True)
        del args, ref
        torch.cuda.empty_cache()
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--sizes", default="64x32768,32x32768,16x32768,256x32768,64x131072")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--variants", default="", help="kind:mask/slack/ns,...; default VARIANTS")
    ap.add_argument("--stamps", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.compile:
        compile_offline()
    if a.run:
        sizes = timeline.parse_sizes(a.sizes)
        variants = [(v[0], *(int(x) for x in v[2:].split("/"))) for v in a.variants.split(",") if v]
        rep = run(sizes, a.iters, variants or list(VARIANTS), a.stamps)  # type: ignore[arg-type]
        timeline.print_lab_table(rep, "kind:mask/slack/ns", (" bitwise", " counters zero"))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
