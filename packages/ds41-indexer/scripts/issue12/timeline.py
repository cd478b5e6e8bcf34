"""Issue 12, twenty-first session: where a one-wave logits launch spends its time.

Builds a lab copy of the production Gluon logits kernel (`ops/logits/gluon_kernels.py`, edited
as text at import, so it follows the production source) that writes `%globaltimer` stamps per
program: the producer's start, its block-table load done, its tile loop done; the consumer's
start, its query fold done, the first tile ready, its tile loop done, its end; and the SM it ran
on. On the H200 (`--run`) it launches the lab kernel at the given sizes, checks its logits
bitwise against the production kernel's, and prints the stamps' distribution relative to the
launch's first stamp (the launch ramp, the start chain, the steady tiles, the drain), plus the
production kernel's CUDA-graph time at the same sizes for scale. `--compile` only compiles the
lab kernel for sm_90a offline (no GPU).

    python packages/ds41-indexer/scripts/issue12/timeline.py --compile
    python packages/ds41-indexer/scripts/issue12/timeline.py --run [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from functools import partial
from types import ModuleType

HERE = os.path.dirname(os.path.abspath(__file__))
STAMPS = ("p_start", "p_pages", "p_done", "c_start", "c_folded", "c_first", "c_done", "c_end")
SMID = 15
QUANTS = (0.0, 0.5, 0.9, 1.0)
SPANS = (("p_start", "p_pages"), ("c_start", "c_folded"), ("c_start", "c_first"),
         ("c_first", "c_done"), ("c_done", "c_end"), ("p_start", "p_done"))  # fmt: skip
STAMP_FN = """

@gluon.jit
def _clk():
    return gl.inline_asm_elementwise("mov.u32 $0, %clock;", "=r", [], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _stamp(stamp_ptr, k: gl.constexpr):
    now = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64,
                                    is_pure=False, pack=1)
    p = gl.program_id(0) * gl.num_programs(1) + gl.program_id(1)
    gl.store(stamp_ptr + p.to(gl.int64) * 16 + k, now)
    if k == 3:
        sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32,
                                       is_pure=False, pack=1)
        gl.store(stamp_ptr + p.to(gl.int64) * 16 + 15, sm.to(gl.int64))


@gluon.jit
def _cnt(stamp_ptr, k: gl.constexpr, v):
    p = gl.program_id(0) * gl.num_programs(1) + gl.program_id(1)
    gl.store(stamp_ptr + p.to(gl.int64) * 16 + k, v.to(gl.int64))

"""


def _edit(src: str, old: str, new: str, count: int = 1) -> str:
    if src.count(old) != count:
        raise SystemExit(f"anchor found {src.count(old)} times, expected {count}: {old!r}")
    return src.replace(old, new)


WAIT_SLOTS = ("c_ready_wait", "p_issue", "p_finish", "c_loop", "p_loop")
"""Cycle counts (`%clock`, per SM) a program sums with `--waits`, in stamp slots 8..12."""


def _add_waits(src: str) -> str:
    """Cycle counters: the consumer's waits for a ready stage and its tile loop; the producer's
    issue step (its wait for a free stage included), its finish step (its wait for the scale
    words included) and its tile loop."""
    c0 = 8
    src = _edit(src, "                mbarrier.wait(ready.index(s), (i // STAGES) & 1)\n",
                "                w0 = _clk()\n"
                "                mbarrier.wait(ready.index(s), (i // STAGES) & 1)\n"
                "                cwait += _clk() - w0\n")  # fmt: skip
    src = _edit(src, "    gslots = gl.zeros([4, 32], gl.float32, gml)\n",
                "    gslots = gl.zeros([4, 32], gl.float32, gml)\n"
                "    cwait = _clk() * 0\n    cl0 = _clk()\n")  # fmt: skip
    done = f"    if CID == 0:\n        _stamp(stamp_ptr, {STAMPS.index('c_done')})\n"
    src = _edit(src, done, f"    _cnt(stamp_ptr, {c0}, cwait)\n"
                f"    _cnt(stamp_ptr, {c0 + 3}, _clk() - cl0)\n" + done)  # fmt: skip
    loop = (
        "        nxt = _pf_issue(i, page, ok, c_first, entry_base, wptr, pw, data_smem, ready, "
        "empty,\n                        rows, words, keys, dl, PAGE_SIZE, STAGES)  # fmt: skip\n"
        "        pbad = _pf_finish(i - 1, sw, pbad, c_first, lim, fac_smem, mult_smem, ready, "
        "keys, nib,\n                          STAGES)  # fmt: skip\n"
    )
    timed = (
        "        k0 = _clk()\n" + loop.split("        pbad =")[0] + "        k1 = _clk()\n"
        "        pbad =" + loop.split("        pbad =")[1] + "        piss += k1 - k0\n"
        "        pfin += _clk() - k1\n"
    )
    src = _edit(src, loop, timed)
    head = "    for i in range(1, TILES):\n        page, ok = _tile_page(page_smem, i)\n"
    src = _edit(src, head, "    piss = _clk() * 0\n    pfin = piss\n    pl0 = _clk()\n" + head)
    src = _edit(src, "    # the range bits to consumer 0, once\n",
                f"    _cnt(stamp_ptr, {c0 + 1}, piss)\n    _cnt(stamp_ptr, {c0 + 2}, pfin)\n"
                f"    _cnt(stamp_ptr, {c0 + 4}, _clk() - pl0)\n"
                "    # the range bits to consumer 0, once\n")  # fmt: skip
    return src


def production_source() -> str:
    """The text of the production Gluon logits kernel's module."""
    from ds41_indexer.ops.logits import gluon_kernels

    with open(gluon_kernels.__file__) as f:
        return f.read()


def lab_source(waits: bool = False, src: str | None = None) -> str:
    """The production kernel's source (or `src`, an edited copy of it) with the stamps added
    (same arithmetic); with `waits`, the cycle counters of `_add_waits` too."""
    if src is None:
        src = production_source()
    s = STAMPS.index
    src = _edit(src, "\n\n@gluon.constexpr_function\ndef _raw_layout():",
                STAMP_FN + "@gluon.constexpr_function\ndef _raw_layout():")  # fmt: skip
    # one more pointer argument, through the kernel, its tuple and both partitions' unpacking
    src = _edit(src, "gmax_ptr, path_ptr,\n    ratio,",
                "gmax_ptr, path_ptr, stamp_ptr,\n    ratio,")  # fmt: skip
    src = _edit(src, "path_ptr, ratio, entry_base,", "path_ptr, stamp_ptr, ratio, entry_base,")
    for name in ("_path_ptr", "path_ptr"):
        src = _edit(src, f"        {name},\n        ratio,",
                    f"        {name},\n        stamp_ptr,\n        ratio,")  # fmt: skip
    # producer
    src = _edit(
        src,
        "    _t, n_vis, r_at = _row_state(",
        f"    _stamp(stamp_ptr, {s('p_start')})\n    _t, n_vis, r_at = _row_state(",
    )
    src = _edit(
        src,
        "    page, ok = _tile_page(page_smem, 0)\n",
        f"    _stamp(stamp_ptr, {s('p_pages')})\n    page, ok = _tile_page(page_smem, 0)\n",
    )
    src = _edit(
        src,
        "    # the range bits to consumer 0, once\n",
        f"    _stamp(stamp_ptr, {s('p_done')})\n    # the range bits to consumer 0, once\n",
    )
    # consumer (consumer 0 only: the lab runs one consumer warpgroup)
    src = _edit(src, "    mma: gl.constexpr = gl.NVMMADistributedLayout(\n        version=[3, 0], "
                "warps_per_cta=[4, 1], instr_shape=[16, HI_PAD, 16]\n    )\n    a_op",
                f"    if CID == 0:\n        _stamp(stamp_ptr, {s('c_start')})\n"
                "    mma: gl.constexpr = gl.NVMMADistributedLayout(\n        version=[3, 0], "
                "warps_per_cta=[4, 1], instr_shape=[16, HI_PAD, 16]\n    )\n    a_op")  # fmt: skip
    src = _edit(src, "    qlo = q_smem.permute((1, 0))\n",
                f"    if CID == 0:\n        _stamp(stamp_ptr, {s('c_folded')})\n"
                "        mbarrier.wait(ready.index(0), 0)\n"
                f"        _stamp(stamp_ptr, {s('c_first')})\n"
                "    qlo = q_smem.permute((1, 0))\n")  # fmt: skip
    src = _edit(src, "    if CID == 0:\n        # the range bits are the producer's",
                f"    if CID == 0:\n        _stamp(stamp_ptr, {s('c_done')})\n"
                "        # the range bits are the producer's")  # fmt: skip
    last = "mask=(sp < TILES // SPAN) & (col < path_cols))  # fmt: skip\n"
    src = _edit(src, last, last + f"        _stamp(stamp_ptr, {s('c_end')})\n")
    return _add_waits(src) if waits else src


def lab_module(waits: bool = False, src: str | None = None,
               name: str = "timeline_kernels") -> tuple[ModuleType, str]:  # fmt: skip
    """The module of `src` (default: `lab_source(waits)`) written to a temporary file."""
    path = os.path.join(tempfile.mkdtemp(prefix="ds41_timeline_"), name + ".py")
    with open(path, "w") as f:
        f.write(lab_source(waits) if src is None else src)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod, path


def compile_offline(waits: bool) -> None:
    sys.path.insert(0, HERE)
    import gluon7_sass

    _mod, path = lab_module(waits)
    gluon7_sass.PTRS["stamp_ptr"] = "*i64"
    sys.argv = ["gluon7_sass.py", "--module", path, "--set", "TILES=64"]
    gluon7_sass.main()


def _pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * (len(ys) - 1) + 0.5))]


def _stamp_report(stamps: list[list[int]], tiles: int) -> dict[str, object]:
    """The stamps' distribution (us from the launch's first stamp; min, median, p90, max)."""
    base = min(min(p[: len(STAMPS)]) for p in stamps)
    rel = {k: [(p[i] - base) / 1e3 for p in stamps] for i, k in enumerate(STAMPS)}
    row: dict[str, object] = {k: [_pct(rel[k], q) for q in QUANTS] for k in STAMPS}
    for a, b in SPANS:
        d = [y - x for x, y in zip(rel[a], rel[b], strict=True)]
        row[f"{a}->{b}"] = [_pct(d, q) for q in QUANTS]
    per_sm: dict[int, int] = {}
    for p in stamps:
        per_sm[p[SMID]] = per_sm.get(p[SMID], 0) + 1
    row["programs_per_sm"] = sorted(set(per_sm.values()))
    row["sms"] = len(per_sm)
    row["span_us"] = max(rel["c_end"])
    row["us_per_tile"] = row["c_first->c_done"][1] / tiles  # type: ignore[index]
    if any(p[8] for p in stamps):
        # cycle counters (--waits): per tile, min / median / p90 / max over the programs
        for i, k in enumerate(WAIT_SLOTS):
            row[f"cycles/tile {k}"] = [_pct([p[8 + i] / tiles for p in stamps], q) for q in QUANTS]
    return row


def bench_inputs(t: int, ctx: int, hot: bool = False):  # type: ignore[no-untyped-def]
    """The bench's logits inputs on the GPU, seed 0: (q, w, cache, table, req, pos, ratio 1),
    one request of `ctx` visible entries a row; `hot`: every row reads request 0's keys."""
    import torch

    from ds41_indexer import bench

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    cache, table = bench.make_cache(t, ctx, dev, gen)
    q = torch.randn(t, bench.HI, bench.DI, device=dev, generator=gen).mul(2).round()
    q = q.to(torch.bfloat16)
    w = torch.randn(t, bench.HI, device=dev, generator=gen)
    if hot:
        req = torch.zeros(t, dtype=torch.int32, device=dev)
    else:
        req = torch.arange(t, dtype=torch.int32, device=dev)
    pos = torch.full((t,), ctx - 1, dtype=torch.int32, device=dev)
    return q, w, cache, table, req, pos, 1


def lab_shape(t: int, ctx: int, cfg: tuple[int, int] | None = None):  # type: ignore[no-untyped-def]
    """(spans a row, program shape (consumers, tiles), grid) of a `t` x `ctx` logits launch:
    the production launcher's shape, or `cfg`."""
    from ds41_indexer.ops.logits import gluon_launch as gl_launch
    from ds41_indexer.ops.logits.triton_kernels import TILE

    spans = -(-ctx // (TILE[0] * TILE[1]))
    cfg = cfg or gl_launch.gluon_config(t, spans)
    return spans, cfg, (t, -(-ctx // (TILE[0] * cfg[1])))


def launch_lab_copy(mod: ModuleType, args: tuple, out, tail: tuple = (), stamps=None,  # type: ignore[no-untyped-def]
                    cfg: tuple[int, int] | None = None):  # fmt: skip
    """`_gluon_logits_kernel` of a lab copy `mod` with the production launcher's arguments for
    `bench_inputs`' `args` (logits only, fp32 `out` [T, N], no group maxima, the launcher's
    program shape or `cfg`), the stamp buffer after path_ptr when given, and the copy's own
    runtime arguments `tail` after path_cols. Returns the grid."""
    import torch

    from ds41_indexer import bench
    from ds41_indexer.ops.logits import gluon_kernels as gk

    q, w, cache, table, req, pos, ratio = args
    t, ctx = out.shape
    spans, cfg, grid = lab_shape(t, ctx, cfg)
    paths = torch.empty((t, spans), dtype=torch.int8, device=q.device)
    extra = (stamps,) if stamps is not None else ()
    mod._gluon_logits_kernel[grid](
        q, w, cache.storage, table, req, pos, req, out, req, paths, *extra,
        ratio, 0, ctx, q.stride(0), q.stride(1), w.stride(0),
        table.shape[0], table.shape[1], table.stride(0),
        cache.num_pages, cache.page_stride, 0, 0,
        out.stride(0), 0, paths.stride(0), spans, *tail,
        HI=bench.HI, HI_PAD=bench.HI, PAGE_SIZE=cache.page_size, HAS_CAND=False,
        OUT_BF16=False, HAS_GMAX=False, STAGES=gk.GLUON_STAGES, TILES=cfg[1],
        NC=cfg[0], CONSUMER_REGS=gk.GLUON_CONSUMER_REGS,
        num_warps=gk.GLUON_NUM_WARPS, maxnreg=gk.GLUON_MAXNREG,
    )  # fmt: skip
    return grid


def time_variants(args: tuple, ref, iters: int, labs: list, after=None) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The labs' timing protocol at one size: the production kernel's logits into `ref` (fp32
    [T, N]) and its CUDA-graph median (launch hidden), then for each `(key, launch)` of `labs`
    (`launch(out)` runs a lab copy into `out`) whether its logits are `ref`'s bits and its
    median, `after(key, row)` after each, and the production kernel's median again."""
    import torch

    from ds41_indexer import bench
    from ds41_indexer.ops.logits import gluon_launch as gl_launch

    dev = ref.device
    bench.LAUNCH_HIDDEN = True
    fn = partial(gl_launch.launch_gluon_logits, *args, ref)
    fn()
    row: dict[str, object] = {"production": bench._time(fn, dev, iters) * 1e3}
    for key, launch in labs:
        out = torch.full_like(ref, float("nan"))
        launch(out)
        torch.cuda.synchronize()
        row[key + " bitwise"] = torch.equal(out.view(torch.int32), ref.view(torch.int32))
        row[key] = bench._time(partial(launch, out), dev, iters) * 1e3
        if after is not None:
            after(key, row)
    row["production again"] = bench._time(fn, dev, iters) * 1e3
    return row


def run_sizes(sizes: list[tuple[int, int]], iters: int, labs_for) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    """The labs' protocol over `sizes` (rows, context): `bench_inputs` for each, then
    `labs_for(args, t, ctx)` -> (extra row fields, [(key, launch), ...]) timed against the
    production kernel by `time_variants`; each row is printed as JSON when done."""
    import torch

    report = []
    for t, ctx in sizes:
        args = bench_inputs(t, ctx)
        ref = torch.full((t, ctx), float("nan"), device="cuda")
        fields, labs = labs_for(args, t, ctx)
        row: dict[str, object] = {"rows": t, "context": ctx, **fields}
        row.update(time_variants(args, ref, iters, labs))
        report.append(row)
        print(json.dumps(row), flush=True)
        del args, ref
        torch.cuda.empty_cache()
    return report


def parse_sizes(spec: str) -> list[tuple[int, int]]:
    """ "64x32768,1x131072" -> [(64, 32768), (1, 131072)] (rows x context)."""
    return [(int(s.split("x")[0]), int(s.split("x")[1])) for s in spec.split(",") if s]


def finish_labs(rep: list[dict[str, object]], settings: str, json_path: str | None) -> None:
    """The labs' table (`print_lab_table`, bits checked) and, with `json_path`, the rows."""
    print_lab_table(rep, settings, (" bitwise",))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rep, f, indent=1)


def print_lab_table(rep: list[dict[str, object]], settings: str, checks: tuple[str, ...]) -> None:
    """The lab labs' table: per size, the production kernel's time and TB/s, then each `lab
    SETTING` row's time, ratio, TB/s and whether its `checks` (key suffixes) all hold."""
    print(f"\nlogits us, CUDA-graph median, launch hidden (lab {settings}; checks; TB/s)")
    for r in rep:
        nb = r["rows"] * r["context"] * 68  # type: ignore[operator]
        p = float(r["production"])  # type: ignore[arg-type]
        print(f"{r['rows']} x {r['context']}: production {p:.1f} "
              f"({nb / p / 1e6:.2f} TB/s), again {r['production again']:.1f}")  # fmt: skip
        for k, v in r.items():
            if k.startswith("lab ") and isinstance(v, float):
                ok = all(r[k + c] for c in checks)
                print(f"   {k:22s} {v:7.1f}  x{v / p:.3f}  {nb / v / 1e6:.2f} TB/s  ok {ok}")
            if k.startswith("stamps "):
                print(f"   {k}: {v}")


def _one_size(lab: ModuleType, t: int, ctx: int, iters: int, configs: list[tuple[int, int]],
              stamp_config: tuple[int, int] | None, hot: bool,
              waits: bool) -> dict[str, object]:  # fmt: skip
    import torch

    from ds41_indexer import bench
    from ds41_indexer.ops.logits import gluon_launch as gl_launch

    dev = torch.device("cuda")
    # hot: every row reads request 0's keys (L2-resident), to see what the DRAM costs
    args = bench_inputs(t, ctx, hot)
    q, w, cache, table, req, pos, _ratio = args
    _spans, cfg, grid = lab_shape(t, ctx, stamp_config)
    ref = torch.full((t, ctx), float("nan"), device=dev)

    def production(out: torch.Tensor, c: tuple[int, int]) -> None:
        gl_launch.launch_gluon_logits(q, w, cache, table, req, pos, 1, out, config=c)

    production(ref, cfg)
    # the lab kernel: the launcher's arguments with the stamp buffer after path_ptr
    out = torch.full((t, ctx), float("nan"), device=dev)
    stamps = torch.zeros(grid[0] * grid[1], 16, dtype=torch.int64, device=dev)
    for _ in range(3):  # compile, then warm caches as in a replayed step
        launch_lab_copy(lab, args, out, stamps=stamps, cfg=cfg)
    torch.cuda.synchronize()
    same = torch.equal(out.view(torch.int32), ref.view(torch.int32))
    row: dict[str, object] = {"rows": t, "context": ctx, "config": list(cfg), "hot": hot,
                              "waits": waits,
                              "programs": grid[0] * grid[1], "bitwise": same}  # fmt: skip
    row.update(_stamp_report(stamps.cpu().tolist(), cfg[1]))
    row["raw"] = stamps.cpu().tolist()
    bench.LAUNCH_HIDDEN = False
    row["graph_us"] = bench._time(partial(production, ref, cfg), dev, iters) * 1e3
    bench.LAUNCH_HIDDEN = True
    us_h = bench._time(partial(production, ref, cfg), dev, iters) * 1e3
    row["graph_us_hidden"] = us_h
    row["tb_s_hidden"] = t * ctx * 68 / (us_h * 1e-6) / 1e12
    # other program shapes of the production kernel at this size (graph time, hidden)
    for other in configs:
        o = torch.full((t, ctx), float("nan"), device=dev)
        row[f"cfg {other[0]}x{other[1]} us_hidden"] = (
            bench._time(partial(production, o, other), dev, iters) * 1e3
        )
        row[f"cfg {other[0]}x{other[1]} bitwise"] = torch.equal(o, ref)
    return row


def run(
    sizes: list[tuple[int, int, tuple[int, int] | None, bool]],
    iters: int,
    configs: list[tuple[int, int]],
    waits: bool = False,
) -> list[dict[str, object]]:
    import torch

    lab, _ = lab_module(waits)
    report = []
    for t, ctx, cfg, hot in sizes:
        row = _one_size(lab, t, ctx, iters, configs, cfg, hot, waits)
        report.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "raw"}), flush=True)
        torch.cuda.empty_cache()
    return report


def _print(rep: list[dict[str, object]]) -> None:
    print("\nus from the launch's first stamp: min / median / p90 / max")
    for r in rep:
        print(f"{r['rows']} x {r['context']}{' hot' if r['hot'] else ''} cfg {r['config']} "
              f"programs {r['programs']} "
              f"per SM {r['programs_per_sm']} bitwise {r['bitwise']}: "
              f"graph {r['graph_us']:.1f} us, hidden {r['graph_us_hidden']:.1f} us "
              f"({r['tb_s_hidden']:.2f} TB/s), stamped span {r['span_us']:.1f} us, "
              f"{r['us_per_tile']:.3f} us a tile")  # fmt: skip
        for k in (*STAMPS, *(f"{a}->{b}" for a, b in SPANS)):
            v = r[k]
            print(f"   {k:18s} " + " ".join(f"{x:7.2f}" for x in v))  # type: ignore[attr-defined]
        for k, v in r.items():
            if k.startswith(("cfg ", "cycles/")):
                print(f"   {k}: {v}")


def _size(spec: str) -> tuple[int, int, tuple[int, int] | None, bool]:
    """`ROWSxCONTEXT[:CONSUMERSxTILES][:hot]`, e.g. `64x32768`, `16x32768:1x64`, `64x32768:hot`."""
    parts = spec.split(":")
    t, ctx = (int(v) for v in parts[0].split("x"))
    cfg = None
    for p in parts[1:]:
        if p != "hot":
            c, n = (int(v) for v in p.split("x"))
            cfg = (c, n)
    return t, ctx, cfg, "hot" in parts[1:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--run", action="store_true")
    ap.add_argument("--sizes", default="64x32768,64x131072,64x16384,32x32768")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--configs", default="", help="e.g. 2x128,1x32: other shapes to time")
    ap.add_argument("--json", default=None)
    ap.add_argument("--waits", action="store_true", help="count the waits' cycles too")
    a = ap.parse_args()
    if a.compile:
        compile_offline(a.waits)
    if a.run:
        sizes = [_size(x) for x in a.sizes.split(",")]
        cfgs = [(int(x.split("x")[0]), int(x.split("x")[1])) for x in a.configs.split(",") if x]
        rep = run(sizes, a.iters, cfgs, a.waits)
        _print(rep)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
