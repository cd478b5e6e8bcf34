# mypy: disable-error-code="no-untyped-def,no-untyped-call"
"""Issue 12, ninth session, round 2 (helper idx9b): the lab kernel `gluon10_kernels.py` with
the block scale factors computed by the producer (PFAC) against the package's Gluon kernel on
one H200, CUDA-graph medians (the bench's `_time`). Written offline; not yet run on a GPU.

Launch interface: the retired `gluon9_lab.py`'s (at commit ec60708): `launch(gk, cfg, ...)`,
cfg keys T tiles, NC consumer warpgroups, S stages, R register cap, GMAX, and the lab knobs
PFAC and PREGS.

Checks first (every one must print ok=True; the script exits 1 otherwise):
- flags: on scale bytes at and past the fast path's range (one key of a tile 32 / 33 below
  its largest byte, largest bytes 9 / 10 / 250 / 251), rows whose queries leave the range,
  pages -1 and past the cache, a padding row, rows ending mid-tile and mid-span: at every
  program shape, the lab kernel's `done` flags == the package kernel's, and after the Triton
  pass over them its logits and group maxima == the Triton kernel alone (bitwise).
Then timings at the bench's sizes: the package's dispatched call (`paged_logits_gpu`: Gluon
kernel at `gluon_config`'s shape + the Triton pass over its flags) against the same with the
lab kernel, then single launches of each program shape; every timed result is compared
bitwise with the Triton kernel (`same`: logits, group maxima, every span done).

    python packages/ds41-indexer/scripts/issue12/gluon10_lab.py --json out.json
        [--sizes 64:32768,...] [--iters 7] [--quick] [--launch-hidden] [--no-flags]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from functools import partial

import torch

from ds41_indexer import bench
from ds41_indexer.ops.logits import gluon_kernels as prod
from ds41_indexer.ops.logits.gluon_launch import gluon_config, paged_logits_gpu
from ds41_indexer.ops.logits.triton_kernels import TILE, paged_logits_triton

DEV = torch.device("cuda")
HERE = os.path.dirname(os.path.abspath(__file__))
KNOBS = ("PFAC", "PREGS", "LIM")


def load_lab():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "gluon10_kernels", os.path.join(HERE, "gluon10_kernels.py")
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = mod  # type: ignore[union-attr]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def launch(gk, cfg, q, w, cache, table, req, pos, ratio, out, gmax):  # type: ignore[no-untyped-def]
    """One Gluon launch (as `launch_gluon_logits`, no candidates, f32 out); returns `done`."""
    t, hi, _ = q.shape
    n = out.shape[1]
    spans = -(-n // (TILE[0] * TILE[1]))
    done = torch.empty((t, spans), dtype=torch.int8, device=q.device)
    tiles = cfg.get("T", 32)
    extra = {k: cfg[k] for k in KNOBS if k in cfg}
    gk._gluon_logits_kernel[(t, -(-n // (TILE[0] * tiles)))](
        q, w, cache.storage, table, req, pos, req, out, gmax, done,
        ratio, 0, n, q.stride(0), q.stride(1), w.stride(0),
        table.shape[0], table.shape[1], table.stride(0), cache.num_pages, cache.page_stride,
        0, 0, out.stride(0), gmax.stride(0), done.stride(0), spans,
        HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
        HAS_CAND=False, OUT_BF16=False, HAS_GMAX=cfg.get("GMAX", True), STAGES=cfg.get("S", 4),
        TILES=tiles, NC=cfg.get("NC", 1), CONSUMER_REGS=gk.GLUON_CONSUMER_REGS, num_warps=4,
        maxnreg=cfg.get("R", 64), **extra,
    )  # fmt: skip
    return done


def dispatched(gk, cfg, q, w, cache, table, req, pos, ratio, out, gmax):  # type: ignore[no-untyped-def]
    """`paged_logits_gpu` with kernel module gk: the Gluon launch at `gluon_config`'s shape,
    then the Triton pass over its flags."""
    spans = -(-out.shape[1] // (TILE[0] * TILE[1]))
    nc, tiles = gluon_config(q.shape[0], spans)
    done = launch(gk, {**cfg, "NC": nc, "T": tiles}, q, w, cache, table, req, pos, ratio, out,
                  gmax)  # fmt: skip
    paged_logits_triton(q, w, cache, table, req, pos, ratio, out, gmax=gmax, done=done)
    return None


def setup(rows: int, ctx: int, gen: torch.Generator):  # type: ignore[no-untyped-def]
    cache, table = bench.make_cache(rows, ctx, DEV, gen)
    q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round().to(torch.bfloat16)
    w = torch.randn(rows, 32, device=DEV, generator=gen)
    req = torch.arange(rows, dtype=torch.int32, device=DEV)
    pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=DEV)
    return cache, table, q, w, req, pos


SHAPES = [(1, 16), (1, 32), (1, 64), (1, 128), (2, 16), (2, 32)]


def flag_checks(lab, gen: torch.Generator) -> bool:  # type: ignore[no-untyped-def]
    """The lab kernel's flags == the package kernel's on range edges and bad pages, and the
    Triton pass over them gives the Triton kernel's bits; returns whether all held."""
    rows, ctx = 12, 32768
    cache, table, q, w, req, pos = setup(rows, ctx, gen)
    sv = cache.scale_view()  # uint8 [pages, 64 entries, 4 blocks]
    edits = {  # (row, page column, entry in page): 4 scale bytes
        (0, 0, 5): (140, 108, 120, 130),  # exactly 32 apart: fast
        (0, 17, 63): (150, 117, 130, 140),  # 33 apart, one key of its tile: general
        (1, 2, 0): (250, 218, 240, 250),  # largest byte 250: fast
        (1, 40, 31): (251, 240, 240, 240),  # above 250: general
        (2, 3, 9): (10, 10, 10, 12),  # smallest byte 10: fast
        (2, 100, 48): (9, 9, 9, 9),  # below 10: general
        (3, 511, 63): (9, 9, 9, 9),  # the row's last visible key: general
    }
    for (r, col, e), v in edits.items():
        sv[int(table[r, col]), e] = torch.tensor(v, dtype=torch.uint8, device=DEV)
    pos[3] = ctx - 1
    pos[4] = 64 * 16 * 3 - 2  # ends mid-tile, mid-span
    pos[5] = 12345
    table[6, 5] = -1  # a page missing inside the visible range
    table[7, 9] = cache.num_pages + 3  # past the cache
    table[8, 100:] = -1
    req[9] = -1  # padding row
    q = q.clone()
    q[10, 5, 0] = 2.0**20  # a head spanning 2^40: not exact in fp16 after scaling
    q[10, 5, 1:] = q[10, 5, 1:] * 2.0**-20
    q[11] = 0  # all-zero queries
    args = (q, w, cache, table, req, pos, 1)
    ref = torch.empty(rows, ctx, device=DEV)
    gm_ref = torch.empty(rows, ctx // 64, dtype=torch.int32, device=DEV)
    paged_logits_triton(*args, ref, gmax=gm_ref)
    ok_all = True
    for nc, tiles in SHAPES:
        res = []
        for gk, extra in (
            (prod, {}),
            (lab, {"PFAC": True}),
            (lab, {"LIM": True}),
            (lab, {"PFAC": True, "LIM": True}),
        ):
            out = torch.full((rows, ctx), 7.0, device=DEV)
            gm = torch.full_like(gm_ref, 7)
            done = launch(gk, {"NC": nc, "T": tiles, **extra}, *args, out, gm)
            flags = done.clone()
            paged_logits_triton(*args, out, gmax=gm, done=done)
            same = torch.equal(out.view(torch.int32), ref.view(torch.int32))
            res.append((flags, same and torch.equal(gm, gm_ref)))
        flags_eq = all(torch.equal(res[0][0], r[0]) for r in res[1:])
        ok = flags_eq and all(r[1] for r in res)
        ok_all &= ok
        print(f"flags NC{nc} T{tiles}: ok={ok} flags main == lab PFAC, LIM, PFAC+LIM: "
              f"{[torch.equal(res[0][0], r[0]) for r in res[1:]]} final bits main, lab...: "
              f"{[r[1] for r in res]} spans left to Triton: {int((res[0][0] == 0).sum())} of "
              f"{res[0][0].numel()}", flush=True)  # fmt: skip
    return ok_all


def plan(lab, rows: int, spans: int):  # type: ignore[no-untyped-def]
    """(name, launch) pairs at one size: the dispatched call (main, then the lab kernel with
    each knob set), then single Gluon launches of the program shape `gluon_config` picks and
    its neighbours. PFL: PFAC + LIM (both bit-neutral: the production candidate)."""
    nc, tiles = gluon_config(rows, spans)
    pfl = {"PFAC": True, "LIM": True}
    p = [
        ("dispatched, main", None),  # paged_logits_gpu
        ("dispatched, lab PFAC+LIM", partial(dispatched, lab, pfl)),
        ("dispatched, lab PFAC", partial(dispatched, lab, {"PFAC": True})),
        ("dispatched, lab LIM", partial(dispatched, lab, {"LIM": True})),
        ("dispatched, lab off", partial(dispatched, lab, {})),
        (f"main NC{nc} T{tiles}", partial(launch, prod, {"NC": nc, "T": tiles})),
        (f"lab PFL NC{nc} T{tiles}", partial(launch, lab, {"NC": nc, "T": tiles, **pfl})),
    ]
    if nc == 1:
        for t in (32, 64, 128):
            if t != tiles:
                p.append((f"lab PFL NC1 T{t}", partial(launch, lab, {"T": t, **pfl})))
        cfg = {"T": tiles, "PREGS": 32, **pfl}
        p.append((f"lab PFL T{tiles} PREGS32", partial(launch, lab, cfg)))
        p.append((f"lab PFL T{tiles} S6", partial(launch, lab, {"T": tiles, "S": 6, **pfl})))
    else:
        p.append(("dispatched, lab PFL PREGS32", partial(dispatched, lab, {"PREGS": 32, **pfl})))
        pf32 = {"PREGS": 32, "PFAC": True}
        p.append(("dispatched, lab PFAC PREGS32", partial(dispatched, lab, pf32)))
        p.append(("lab PFL NC1 T16", partial(launch, lab, {"T": 16, **pfl})))
    return p


def mismatch_report(out, ref, gm, gm_ref) -> str:  # type: ignore[no-untyped-def]
    """Where a result differs from the Triton kernel's: counts, rows, spans, a few values."""
    span = TILE[0] * TILE[1]
    d_out = out.view(torch.int32) != ref.view(torch.int32)
    d_gm = gm != gm_ref
    msg = f"logits differ {int(d_out.sum())}, group maxima differ {int(d_gm.sum())}"
    if bool(d_out.any()):
        r, c = d_out.nonzero(as_tuple=True)
        spans = torch.unique(r * (out.shape[1] // span + 1) + c // span)
        msg += (f"; rows {sorted(set(r.tolist()))[:12]}, {spans.numel()} spans, first cols "
                f"{c[:6].tolist()}; got {out[r[:4], c[:4]].tolist()} ref "
                f"{ref[r[:4], c[:4]].tolist()}")  # fmt: skip
    if bool(d_gm.any()):
        r, c = d_gm.nonzero(as_tuple=True)
        msg += (f"; gmax rows {sorted(set(r.tolist()))[:12]} groups {c[:6].tolist()} got "
                f"{gm[r[:4], c[:4]].tolist()} ref {gm_ref[r[:4], c[:4]].tolist()}")  # fmt: skip
    return msg


def run_size(lab, size: str, gen: torch.Generator, iters: int, quick: bool,
             res: dict[str, object]) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """Times the plan at one size (rows:context) into res; each result checked bitwise."""
    rows, ctx = (int(x) for x in size.split(":"))
    cache, table, q, w, req, pos = setup(rows, ctx, gen)
    args = (q, w, cache, table, req, pos, 1)
    nbytes = rows * ctx * 68
    ref = torch.empty(rows, ctx, device=DEV)
    out = torch.empty(rows, ctx, device=DEV)
    gm_ref = torch.empty(rows, ctx // 64, dtype=torch.int32, device=DEV)
    gm = torch.empty_like(gm_ref)
    paged_logits_triton(*args, ref, gmax=gm_ref)
    spans = -(-ctx // (TILE[0] * TILE[1]))
    variants = plan(lab, rows, spans)
    if quick:
        variants = variants[:2]
    for name, fn in variants:
        call = (partial(paged_logits_gpu, *args, out, gmax=gm) if fn is None
                else partial(fn, *args, out, gm))  # fmt: skip
        try:
            out.fill_(1.0)
            gm.fill_(1)
            # paged_logits_gpu returns the logits, not flags: only a lab launch's flags count
            result = call()
            done = result if fn is not None else None
            same = (
                torch.equal(out.view(torch.int32), ref.view(torch.int32))
                and torch.equal(gm, gm_ref)
                and (done is None or bool(done.all()))
            )
            if not same:
                print(f"{size} {name}: {mismatch_report(out, ref, gm, gm_ref)}", flush=True)
            ms = bench._time(call, DEV, iters)
        except Exception as e:  # a variant that fails is reported, not fatal
            print(f"{size} {name} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        gbs = nbytes / ms / 1e6
        res[f"{size} {name}"] = {"ms": ms, "gbs": gbs, "same": same}
        print(f"{size:>12} {name:30s} {ms:9.4f} ms {gbs:6.0f} GB/s same={same}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--sizes", default="256:1048576,64:131072,64:32768,256:131072,1:131072")
    ap.add_argument("--quick", action="store_true", help="the dispatched pair only")
    ap.add_argument("--launch-hidden", action="store_true", help="bench.LAUNCH_HIDDEN timing")
    ap.add_argument("--no-flags", action="store_true", help="skip the flag checks")
    a = ap.parse_args()
    bench.LAUNCH_HIDDEN = a.launch_hidden
    gen = torch.Generator(device=DEV).manual_seed(0)
    lab = load_lab()
    res: dict[str, object] = {"device": torch.cuda.get_device_name()}
    res["flags_ok"] = True if a.no_flags else flag_checks(lab, gen)
    for size in a.sizes.split(","):
        run_size(lab, size, gen, a.iters, a.quick, res)
        torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    bad = [k for k, v in res.items() if isinstance(v, dict) and v.get("same") is False]
    print(f"flags ok: {res['flags_ok']}; timed results not bitwise the Triton kernel's: {bad}")
    sys.exit(0 if res["flags_ok"] and not bad else 1)


if __name__ == "__main__":
    main()
