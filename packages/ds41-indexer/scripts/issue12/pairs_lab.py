"""Issue 12, twenty-first session: the lab kernels of `pairs_kernels.py` against the production
Gluon logits kernel on one H200. `--kernel pairs` (measured): one program an SM of four
producer/consumer pairs taking spans as they come. `--kernel rowclaim` (measured in the
twenty-second session): the production layout whose programs take their row's spans from a
per-row counter.

Checks first, bitwise against the production kernel (logits, group maxima, each span's path):
the Gluon tests' scenarios (`tests/test_gluon_logits.py`: mixed requests with padding rows,
bf16 output, candidates, 128-entry pages, the scale-range edges with general-path spans and
+inf / NaN rows, ratio 4) and the bench's caches. Then CUDA-graph medians of both kernels
(logits only, as the bench's logits column), launch hidden and not, one table.

    python packages/ds41-indexer/scripts/issue12/pairs_lab.py [--kernel rowclaim] [--json out.json]
    python packages/ds41-indexer/scripts/issue12/pairs_lab.py --once 64x32768:t[:g][:s]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial

import torch

from ds41_indexer import bench
from ds41_indexer.ops.logits import gluon_launch as gl_launch
from ds41_indexer.ops.logits.triton_kernels import TILE

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import pairs_kernels as pk  # noqa: E402
import timeline  # noqa: E402

SIZES = ((64, 32768), (32, 32768), (256, 32768), (8, 131072), (64, 131072), (256, 131072),
         (64, 1048576), (256, 1048576))  # fmt: skip
PAIRS_MAXNREG = 80
PAIRS_CONSUMER_REGS = 104
# `--kernel`: "pairs" (`_pairs_kernel`, one program an SM) or "rowclaim" (`_rowclaim_kernel`:
# the production layout with per-row span counters)
KERNEL = "pairs"
ROWCLAIM_MAXNREG = 64  # as the production kernel: 4 programs an SM, the consumer at 104


def launch_pairs(q, w, cache, table, req, pos, ratio, out, cand=None, *, gmax=None,  # type: ignore[no-untyped-def]
                 entry_base=0, programs=None, module=pk, extra=0):  # fmt: skip
    """The lab kernel with the production launcher's arguments; returns the paths (int8)."""
    t, hi, _di = q.shape
    n = out.shape[1]
    spans = -(-n // (TILE[0] * TILE[1]))
    paths = torch.full((t, max(spans, 1)), -1, dtype=torch.int8, device=q.device)
    n_spans = t * spans
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    c = cand if cand is not None else out
    if KERNEL == "rowclaim":
        # programs a row: one wave of four an SM, at most one a span
        per_row = programs or max(1, min(spans, (4 * sms) // t))
        claim = torch.zeros(t, dtype=torch.int32, device=q.device)
        module._rowclaim_kernel[(t, per_row)](
            q, w, cache.storage, table, req, pos,
            c.view(torch.uint8) if cand is not None else req,
            out.view(torch.int16) if out.dtype == torch.bfloat16 else out,
            gmax if gmax is not None else req, paths, claim,
            ratio, entry_base, n, q.stride(0), q.stride(1), w.stride(0),
            table.shape[0], table.shape[1], table.stride(0), cache.num_pages,
            cache.page_stride,
            c.stride(0) if cand is not None else 0, cand.shape[1] if cand is not None else 0,
            out.stride(0), gmax.stride(0) if gmax is not None else 0, paths.stride(0),
            -1, spans,  # n_spans < 0: the spans of each program's row
            HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
            HAS_CAND=cand is not None, OUT_BF16=out.dtype == torch.bfloat16,
            HAS_GMAX=gmax is not None, STAGES=pk.PAIRS_STAGES,
            num_warps=pk.PAIRS_NUM_WARPS, maxnreg=ROWCLAIM_MAXNREG,
        )  # fmt: skip
        launch_pairs.claim = claim  # type: ignore[attr-defined]
        return paths
    g = min(programs or sms, n_spans)
    claim = torch.zeros(g + g * extra, dtype=torch.int32, device=q.device)
    module._pairs_kernel[(g,)](
        q, w, cache.storage, table, req, pos,
        c.view(torch.uint8) if cand is not None else req,
        out.view(torch.int16) if out.dtype == torch.bfloat16 else out,
        gmax if gmax is not None else req, paths, claim,
        ratio, entry_base, n, q.stride(0), q.stride(1), w.stride(0),
        table.shape[0], table.shape[1], table.stride(0), cache.num_pages, cache.page_stride,
        c.stride(0) if cand is not None else 0, cand.shape[1] if cand is not None else 0,
        out.stride(0), gmax.stride(0) if gmax is not None else 0, paths.stride(0),
        n_spans, spans,
        HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
        HAS_CAND=cand is not None, OUT_BF16=out.dtype == torch.bfloat16,
        HAS_GMAX=gmax is not None, STAGES=pk.PAIRS_STAGES, CONSUMER_REGS=PAIRS_CONSUMER_REGS,
        num_warps=pk.PAIRS_NUM_WARPS, maxnreg=PAIRS_MAXNREG,
    )  # fmt: skip
    launch_pairs.claim = claim  # type: ignore[attr-defined]
    return paths


def stamped_module():  # type: ignore[no-untyped-def]
    """pairs_kernels with PAIR_STAMPS on (a copy under a temporary name)."""
    import importlib.util
    import tempfile

    with open(pk.__file__) as f:
        src = f.read().replace(
            "PAIR_STAMPS = gl.constexpr(False)", "PAIR_STAMPS = gl.constexpr(True)"
        )
    path = os.path.join(tempfile.mkdtemp(), "pairs_stamped.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("pairs_stamped", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["pairs_stamped"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def stamp_report(claim: torch.Tensor, g: int) -> None:
    """Per pair: spans, the consumer's time a span, its gaps, the producer's page latency."""
    import statistics

    st = claim[g:].view(g, 4, 40, 6).cpu().long()
    base = int(st[..., 0][st[..., 1] != 0].min())

    def rel(x: torch.Tensor) -> torch.Tensor:
        return ((x - base) % (1 << 32)).double() / 1e3

    counts, dur, gaps, pages, ends = [], [], [], [], []
    for c in range(g):
        for p in range(4):
            n = int((st[c, p, :, 1] != 0).sum())
            counts.append(n)
            if n == 0:
                continue
            s0, s1 = rel(st[c, p, :n, 0]), rel(st[c, p, :n, 1])
            dur += (s1 - s0).tolist()
            gaps += (s0[1:] - s1[:-1]).tolist()
            pages += (rel(st[c, p, :n, 4]) - rel(st[c, p, :n, 3])).tolist()
            ends.append(float(s1[-1]))
    q = lambda v: [round(x, 2) for x in statistics.quantiles(v, n=10)[::4]] if len(v) > 2 else v
    print("spans a pair", sorted(set(counts)), "mean", statistics.mean(counts))
    print("consumer us a span (p10/p50/p90)", q(dur))
    print("gap between a pair's spans", q(gaps))
    print("producer row+pages us", q(pages))
    print("pair end us", q(ends), "max", max(ends))
    first = rel(st[..., 0][st[..., 1] != 0])
    print("first span start min/max", float(first.min()), float(first.max()))


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32) if x.dtype == torch.float32 else x.view(torch.int16)


def check_scenarios() -> list[dict[str, object]]:
    import test_gluon_logits as tg

    dev = torch.device("cuda")
    rows = []
    for case in ("mixed", "mixed bf16", "mixed candidates", "page 128", "edges", "ratio 4"):
        if case == "edges":
            sc, q, w, req, pos = tg._edges(41)
        else:
            sc, q, w, req, pos = tg._mixed(42, 64, page_size=128 if case == "page 128" else 64)
        dtype = torch.bfloat16 if case == "mixed bf16" else torch.float32
        cand = torch.rand(q.shape[0], 2900, device=dev) < 0.5 if "cand" in case else None
        ratio = 4 if case == "ratio 4" else 1
        n = sc.block_table.shape[1] * sc.cache.page_size
        t = q.shape[0]
        args = (q, w, sc.cache, sc.block_table, req, pos, ratio)
        outs, gms, paths = [], [], []
        for k in range(2):
            out = torch.full((t, n), 5.0 + k, device=dev).to(dtype)
            gm = torch.full((t, -(-n // 64)), 9 + k, dtype=torch.int32, device=dev)
            if k == 0:
                p = gl_launch.launch_gluon_logits(*args, out, cand, gmax=gm)
            else:
                p = launch_pairs(*args, out, cand, gmax=gm)
            outs.append(out)
            gms.append(gm)
            paths.append(p)
        ok = (torch.equal(_bits(outs[0]), _bits(outs[1])) and torch.equal(gms[0], gms[1])
              and torch.equal(paths[0], paths[1]))  # fmt: skip
        general = int((paths[1] == 2).sum())
        rows.append({"case": case, "bitwise": ok, "general_spans": general})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def once(spec: str) -> None:
    """One launch of the lab kernel at one size (a hang shows here), then its bits."""
    flags = spec.split(":")[1:]
    dims = [int(v) for v in spec.split(":")[0].split("x")]
    t, ctx = dims[0], dims[1]
    dev = torch.device("cuda")
    args = timeline.bench_inputs(t, ctx)
    ref = torch.full((t, ctx), float("nan"), device=dev)
    out = torch.full((t, ctx), float("nan"), device=dev)
    gl_launch.launch_gluon_logits(*args, ref)
    torch.cuda.synchronize()
    gm = torch.zeros(t, ctx // 64, dtype=torch.int32, device=dev) if "g" in flags else None
    progs = dims[2] if len(dims) > 2 else None
    paths = launch_pairs(*args, out, gmax=gm, programs=progs)
    torch.cuda.synchronize()
    if "s" in flags:
        mod = stamped_module()
        for _ in range(2):
            launch_pairs(*args, out, gmax=gm, programs=progs, module=mod, extra=4 * 40 * 6)
        torch.cuda.synchronize()
        claim = launch_pairs.claim  # type: ignore[attr-defined]
        stamp_report(claim, int(claim.numel()) // (1 + 4 * 40 * 6))
    if "t" in flags:
        fn = partial(launch_pairs, *args, out, gmax=gm)
        print("graph us", bench._time(fn, dev, 5) * 1e3, flush=True)
    print(spec, "done, bitwise", torch.equal(_bits(ref), _bits(out)),
          "paths", sorted(set(paths.flatten().tolist())), flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--sizes", default=",".join(f"{t}x{c}" for t, c in SIZES))
    ap.add_argument("--json", default=None)
    ap.add_argument("--once", default=None, help="ROWSxCONTEXT[xPROGRAMS]: one launch, bits")
    ap.add_argument("--kernel", choices=("pairs", "rowclaim"), default="pairs")
    a = ap.parse_args()
    global KERNEL
    KERNEL = a.kernel
    dev = torch.device("cuda")
    if a.once:
        once(a.once)
        return
    report: dict[str, object] = {"checks": check_scenarios()}
    timings = []
    for spec in a.sizes.split(","):
        t, ctx = (int(v) for v in spec.split("x"))
        args = timeline.bench_inputs(t, ctx)
        ref = torch.full((t, ctx), float("nan"), device=dev)
        out = torch.full((t, ctx), float("nan"), device=dev)
        gm_r = torch.zeros(t, ctx // 64, dtype=torch.int32, device=dev)
        gm_o = torch.ones(t, ctx // 64, dtype=torch.int32, device=dev)
        gl_launch.launch_gluon_logits(*args, ref, gmax=gm_r)
        launch_pairs(*args, out, gmax=gm_o)
        same = torch.equal(_bits(ref), _bits(out)) and torch.equal(gm_r, gm_o)
        line: dict[str, object] = {"rows": t, "context": ctx, "bitwise": same}
        for name, fn in (("production", partial(gl_launch.launch_gluon_logits, *args, ref)),
                         ("lab", partial(launch_pairs, *args, out))):  # fmt: skip
            bench.LAUNCH_HIDDEN = False
            line[name] = bench._time(fn, dev, a.iters) * 1e3
            bench.LAUNCH_HIDDEN = True
            line[name + "_hidden"] = bench._time(fn, dev, a.iters) * 1e3
        timings.append(line)
        print(json.dumps(line), flush=True)
        del args, ref, out
        torch.cuda.empty_cache()
    report["timings"] = timings
    print("\nlogits us, CUDA-graph median (launch hidden); TB/s of key bytes hidden")
    print(f"{'rows x context':>16} {'production':>16} {KERNEL:>16} {'ratio':>6} {'TB/s':>11} bits")
    for r in timings:
        nb = r["rows"] * r["context"] * 68  # type: ignore[operator]
        p, ph, n, nh = r["production"], r["production_hidden"], r["lab"], r["lab_hidden"]
        print(
            f"{r['rows']:>6} x {r['context']:>7} {p:7.1f} ({ph:7.1f}) {n:7.1f} ({nh:7.1f}) "  # type: ignore[str-format]
            f"{nh / ph:6.3f} {nb / ph / 1e6:5.2f}/{nb / nh / 1e6:5.2f} {r['bitwise']}"
        )  # type: ignore[operator]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
