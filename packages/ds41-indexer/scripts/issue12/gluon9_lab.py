"""Issue 12, ninth session: Gluon logits kernel variants on one H200 (CUDA-graph medians).

The lab kernel `gluon9_kernels.py` is the package's `gluon_kernels.py` (main a09d0a3) with
knobs (constexpr, default off = the package's kernel):
- TILES any multiple of 16 up to 512 (the group maxima are stored every 32 tiles);
- LEAN: the consumer does not look up the tile's page (one global load a tile less); a tile
  the producer did not read is zero-filled, so its scale bytes are out of range and its span
  is flagged for the Triton kernel (same bits, more rescoring only where pages are missing);
- WSMEM: the head weights read from shared memory in each tile's epilogue (8 registers less);
- SPLIT: the low-nibble product waited on before the high nibbles are decoded (16 registers
  less at the peak);
and the launch's register cap R (64: 4 programs an SM; 48: 5, the consumer at 72).

Every variant writes logits and group maxima, launched as `launch_gluon_logits` does, and is
compared bitwise with the Triton kernel (`same`: logits, group maxima, every span done). A
missing-page scenario checks LEAN's flags: the Gluon kernel, then the Triton pass over its
flags, bitwise equal to the Triton kernel alone.

    python packages/ds41-indexer/scripts/issue12/gluon9_lab.py --json out.json
    python packages/ds41-indexer/scripts/issue12/gluon9_lab.py --profile   # one size, for ncu
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
from ds41_indexer.ops.logits.gluon_launch import paged_logits_gpu
from ds41_indexer.ops.logits.triton_kernels import TILE, paged_logits_triton

DEV = torch.device("cuda")
HERE = os.path.dirname(os.path.abspath(__file__))


def load_lab():  # type: ignore[no-untyped-def]
    f = os.path.join(HERE, "gluon9_kernels.py")
    spec = importlib.util.spec_from_file_location("gluon9_kernels", f)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = mod  # type: ignore[union-attr]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def launch(gk, cfg, q, w, cache, table, req, pos, ratio, out, gmax):  # type: ignore[no-untyped-def]
    """One Gluon launch; cfg: tiles T, registers R, stages S, nc, and the lab kernel's knobs."""
    t, hi, _ = q.shape
    n = out.shape[1]
    spans = -(-n // (TILE[0] * TILE[1]))
    done = torch.empty((t, spans), dtype=torch.int8, device=q.device)
    tiles = cfg.get("T", 32)
    knobs = ("LEAN", "WSMEM", "SPLIT", "DIAG", "GMAXF")
    extra = {k: cfg[k] for k in knobs if k in cfg}
    gk._gluon_logits_kernel[(t, -(-n // (TILE[0] * tiles)))](
        q, w, cache.storage, table, req, pos, req, out, gmax, done,
        ratio, 0, n, q.stride(0), q.stride(1), w.stride(0),
        table.shape[0], table.shape[1], table.stride(0), cache.num_pages, cache.page_stride,
        0, 0, out.stride(0), gmax.stride(0), done.stride(0), spans,
        HI=hi, HI_PAD=max(16, 1 << (hi - 1).bit_length()), PAGE_SIZE=cache.page_size,
        HAS_CAND=False, OUT_BF16=False, HAS_GMAX=cfg.get("GMAX", True), STAGES=cfg.get("S", 4),
        TILES=tiles, NC=cfg.get("NC", 1), CONSUMER_REGS=80, num_warps=4,
        maxnreg=cfg.get("R", 64), **extra,
    )  # fmt: skip
    return done


def setup(rows: int, ctx: int, gen: torch.Generator):  # type: ignore[no-untyped-def]
    cache, table = bench.make_cache(rows, ctx, DEV, gen)
    q = torch.randn(rows, 32, 128, device=DEV, generator=gen).mul(2).round().to(torch.bfloat16)
    w = torch.randn(rows, 32, device=DEV, generator=gen)
    req = torch.arange(rows, dtype=torch.int32, device=DEV)
    pos = torch.full((rows,), ctx - 1, dtype=torch.int32, device=DEV)
    return cache, table, q, w, req, pos


L1 = {"LEAN": True}
MISSING = [
    ("T128 lean", {"T": 128, **L1}),
    ("T32 lean", {"T": 32, **L1}),
    ("T16 lean", {"T": 16, **L1}),
    ("T128 lean R48 wsmem split", {"T": 128, "R": 48, "WSMEM": True, "SPLIT": True, **L1}),
    ("T128 lean gmaxf", {"T": 128, "GMAXF": True, **L1}),
    ("NC2 T32 lean", {"T": 32, "NC": 2, **L1}),
]
VARIANTS = [
    ("lab T32", {"T": 32}),
    ("lab T64", {"T": 64}),
    ("lab T128", {"T": 128}),
    ("lab T256", {"T": 256}),
    ("lab T128 lean", {"T": 128, **L1}),
    ("lab T64 lean", {"T": 64, **L1}),
    ("lab T128 lean S8", {"T": 128, "S": 8, **L1}),
    ("lab T128 lean gmaxf", {"T": 128, "GMAXF": True, **L1}),
    ("lab T128 lean split", {"T": 128, "SPLIT": True, **L1}),
    ("lab T128 lean R48 wsmem split", {"T": 128, "R": 48, "WSMEM": True, "SPLIT": True, **L1}),
    ("lab T64 lean R48 wsmem split", {"T": 64, "R": 48, "WSMEM": True, "SPLIT": True, **L1}),
    ("diag T128 lean +4 mma", {"T": 128, "DIAG": 1, **L1}),
    ("diag T128 lean no decode", {"T": 128, "DIAG": 2, **L1}),
    ("diag T128 lean no gmax", {"T": 128, "GMAX": False, **L1}),
]


def missing_pages(lab, gen: torch.Generator) -> None:  # type: ignore[no-untyped-def]
    """Pages -1 and past the cache inside the visible range, a padding row, rows at other
    positions: each LEAN variant + the Triton pass over its flags == the Triton kernel."""
    rows, ctx = 8, 32768
    cache, table, q, w, req, pos = setup(rows, ctx, gen)
    table[1, 5] = -1
    table[2, 9] = cache.num_pages + 3
    table[3, 100:] = -1
    req[4] = -1
    pos[5] = 12345
    pos[6] = 64 * 16 * 3 - 2
    args = (q, w, cache, table, req, pos, 1)
    ref = torch.empty(rows, ctx, device=DEV)
    gm_ref = torch.empty(rows, ctx // 64, dtype=torch.int32, device=DEV)
    paged_logits_triton(*args, ref, gmax=gm_ref)
    for name, cfg in MISSING:
        out = torch.full((rows, ctx), 7.0, device=DEV)
        gm = torch.full_like(gm_ref, 7)
        done = launch(lab, cfg, *args, out, gm)
        paged_logits_triton(*args, out, gmax=gm, done=done)
        same = torch.equal(out.view(torch.int32), ref.view(torch.int32)) and torch.equal(gm, gm_ref)
        print(f"missing pages {name}: same={same} flagged spans={int((done == 0).sum())}",
              flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--sizes", default="64:32768,64:131072,256:131072,256:1048576")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    gen = torch.Generator(device=DEV).manual_seed(0)
    if a.profile:
        cache, table, q, w, req, pos = setup(64, 131072, gen)
        out = torch.empty(64, 131072, device=DEV)
        gm = torch.empty(64, 131072 // 64, dtype=torch.int32, device=DEV)
        for _ in range(3):
            paged_logits_gpu(q, w, cache, table, req, pos, 1, out, gmax=gm)
        torch.cuda.synchronize()
        return
    lab = load_lab()
    from ds41_indexer.ops.logits import gluon_kernels as prod

    plan = [("prod T32", partial(launch, prod, {"T": 32}))]
    plan += [(name, partial(launch, lab, cfg)) for name, cfg in VARIANTS]
    res: dict[str, object] = {"device": torch.cuda.get_device_name()}
    missing_pages(lab, gen)
    for size in a.sizes.split(","):
        rows, ctx = (int(x) for x in size.split(":"))
        cache, table, q, w, req, pos = setup(rows, ctx, gen)
        args = (q, w, cache, table, req, pos, 1)
        nbytes = rows * ctx * 68
        ref = torch.empty(rows, ctx, device=DEV)
        out = torch.empty(rows, ctx, device=DEV)
        gm_ref = torch.empty(rows, ctx // 64, dtype=torch.int32, device=DEV)
        gm = torch.empty_like(gm_ref)
        paged_logits_triton(*args, ref, gmax=gm_ref)

        def rec(key: str, fn, same: object = None, size: str = size, nbytes: int = nbytes) -> None:  # type: ignore[no-untyped-def]
            ms = bench._time(fn, DEV, a.iters)
            gbs = nbytes / ms / 1e6
            res[f"{size} {key}"] = {"ms": ms, "gbs": gbs, "same": same}
            print(f"{size:>12} {key:34s} {ms:9.4f} ms {gbs:6.0f} GB/s same={same}", flush=True)

        def same_as_ref(done, got=(out, gm), want=(ref, gm_ref)) -> bool:  # type: ignore[no-untyped-def]
            return (
                torch.equal(got[0].view(torch.int32), want[0].view(torch.int32))
                and torch.equal(got[1], want[1])
                and (done is None or bool(done.all()))
            )

        out.fill_(1.0)
        gm.fill_(1)
        paged_logits_gpu(*args, out, gmax=gm)
        rec("pair (dispatched, main)", partial(paged_logits_gpu, *args, out, gmax=gm),
            same_as_ref(None))  # fmt: skip
        for name, fn in plan:
            try:
                out.fill_(1.0)
                gm.fill_(1)
                done = fn(*args, out, gm)  # type: ignore[operator]
                same = None if name.startswith("diag") else same_as_ref(done)
                rec(name, partial(fn, *args, out, gm), same)  # type: ignore[arg-type]
            except Exception as e:  # a variant that fails is reported, not fatal
                print(f"{size} {name} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        del cache, table, ref, out, gm, gm_ref
        torch.cuda.empty_cache()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
