# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False, check-untyped-defs=False
"""Lab (engine, tenth session, eng10): the split matmul's segment reduction without a second
launch. Not production: a copy of `ops/matmul/triton_kernels.matmul_kernel`'s split path with
the reduction in the same launch, checked bitwise against production and timed beside it.

    # H200, one call (~60-100 s, mostly ~90 compiles): bits, then graph-replay times; the
    # table is printed last; exit 1 on a bits mismatch
    python scripts/matmul_fused_reduce_lab.py [--rows 1,64] [--json PATH]
    # H200: the eighth session's failing tests' comparison, on production's kernel
    python scripts/matmul_fused_reduce_lab.py --s8
    # CPU, Triton interpreter (small shapes, bits only)
    TRITON_INTERPRET=1 python scripts/matmul_fused_reduce_lab.py --cpu
    # CPU, no GPU: registers / spills / SASS loads and atomics of every kernel for sm_90a
    python scripts/matmul_fused_reduce_lab.py --ptxas

Design (the runner README's "lab: fused reduction" paragraph says why):
- Program (m, t, z) of a split launch runs segment z of output tile (m, t) exactly as the
  production split launch does and stores its fp32 chain in the workspace `[S, M, NCOLS]`.
- It then takes a ticket from the tile's arrival counter: a CTA barrier (every thread's
  store issued), one `atom.add.acq_rel.gpu` (release: the CTA's chains are visible GPU-wide
  before the ticket; acquire: the last arriver sees every other program's chain). Nobody waits:
  a program that is not last exits.
- The tile's last arriver (ticket S - 1) adds the S chains in production's order
  (`reduce_segments_kernel`: from a zero total, ascending within `[0, HALF)` and `[HALF, S)`,
  then the two totals), rounds to the output dtype and puts the counter back to zero (the
  next launch on the stream, or the next graph replay, finds zeros; nothing outside the kernel
  resets them). Same fp32 operations in the same order as split + `reduce_segments_kernel`,
  which equal the one-program launch: the same bits.
- Unlike the eighth session's version (c93da55, replayed here as variant `c93`), the last
  arriver reduces only the tile's valid rows, in `RED_ROWS`-row chunks, with the segment loop
  unrolled (`tl.static_range`) so that all of a chunk's chain loads are in flight at once
  instead of one L2 round trip per segment; variants `lab_n32` / `lab_n16` also cut the
  launch's output tile to 64 x 32 / 64 x 16 (two / four times the reducing programs per
  launch, each reading a half / a quarter of the chains; the segment plan is unchanged, and
  whether the narrower wgmma tiles keep the bits is part of the check).

Variants timed (CUDA-graph replay of 20 calls cycling through >= 256 MB of operand copies, as
`ds41_runner.matmul_bench` times): `prod` = production split launch + reduce_segments_kernel,
`one` = production one-program launch, `c93`, `lab`, `lab_n32`, `lab_n16`, and `prod_pdl`:
still two launches (the split path of this kernel with `FUSE=False` + a copy of
`reduce_segments_kernel` behind `griddepcontrol.wait`, launched with programmatic dependent
launch), i.e. what hiding the second launch's latency alone would give, same arithmetic.
Every variant's bits are checked against the one-program launch before any timing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from ds41_runner.ops.matmul.plan import BLOCK_K, DECODE_TILE, LaunchTile, MatmulPlan, plan_matmul
from ds41_runner.ops.matmul.triton_kernels import REDUCE_BLOCK, launch_matmul

COUNTER_SLOTS = 4096
"""Arrival counters per buffer (one buffer per launch site; a decode split launch has < 200
tiles)."""
RED_ROWS = 16
"""Rows of the tile the last arriver reduces at a time (chunks past M are skipped)."""
COLD_BYTES = 256 << 20
GRAPH_CALLS = 20
LAB_TILES = {"c93": DECODE_TILE, "lab": DECODE_TILE, "lab_n32": LaunchTile(64, 32, 4, 3),
             "lab_n16": LaunchTile(64, 16, 4, 3)}  # fmt: skip
VARIANTS = ("prod", "prod_pdl", "one", "c93", "lab", "lab_n32", "lab_n16")
FAILED: set[str] = set()
"""Variants that failed a bits or counter check in this run (named in the table's last line;
never picked as the best lab variant)."""


# M is never specialized (one compiled kernel per weight shape, as in production).
@triton.jit(do_not_specialize=["M"])
def fused_split_kernel(
    x_ptr, w_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K, N_TILES, NCOLS,
    stride_xm, stride_xg, stride_xk, stride_wg, stride_wn, stride_wk, stride_om, stride_on,
    stride_ws,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SEG_TILES: tl.constexpr, N_SEGS: tl.constexpr, HALF: tl.constexpr,
    SERIAL: tl.constexpr, RED_ROWS: tl.constexpr, FUSE: tl.constexpr, PDL: tl.constexpr,
    UPCAST: tl.constexpr, IEEE_FP32: tl.constexpr,
):  # fmt: skip
    if PDL:
        # `prod_pdl` only (FUSE=False): let the reduction launch be scheduled now; it waits
        # (griddepcontrol.wait) for this whole grid and its memory before reading a chain.
        gdc_launch_dependents()
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    g = pid_n // N_TILES
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid_n % N_TILES) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    xg = x_ptr + g * stride_xg
    wg = w_ptr + g * stride_wg
    cols = g * N + rn
    mask = m_ok[:, None] & n_ok[None, :]
    # --- production's split path, unchanged: segment program_id(2), one chain from zero ---
    first = tl.program_id(2) * SEG_TILES
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, SEG_TILES):
        k0 = (first + i) * BLOCK_K
        k_ok = (k0 + rk) < K
        a = tl.load(
            xg + rm[:, None] * stride_xm + (k0 + rk)[None, :] * stride_xk,
            mask=m_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        b = tl.load(
            wg + rn[None, :] * stride_wn + (k0 + rk)[:, None] * stride_wk,
            mask=n_ok[None, :] & k_ok[:, None],
            other=0.0,
        )
        if UPCAST:
            prod = a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :]
            acc += tl.sum(prod, axis=1)
        elif IEEE_FP32:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        if i % SEG_TILES == SEG_TILES - 1:
            total += acc
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ws_tile = ws_ptr + rm[:, None] * NCOLS + cols[None, :]
    tl.store(ws_tile + tl.program_id(2) * stride_ws, total, mask=mask)
    # FUSE=False: production's split launch (`prod_pdl`: reduce_pdl_kernel adds the chains).
    if FUSE:
        # --- arrival: every thread's store is issued before the barrier; the ticket's acq_rel
        # atomic (one per program) publishes the CTA's chain and, for the last arriver, acquires
        # the others' chains. Nobody waits. ---
        tl.debug_barrier()
        tile = pid_m * tl.num_programs(1) + pid_n
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == N_SEGS - 1:
            if SERIAL:
                # The eighth session's reduction (c93da55): the whole 64-row tile, a rolled loop
                # (one chain load, then its add, per segment).
                red = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for seg in range(0, HALF):
                    red += tl.load(ws_tile + seg * stride_ws, mask=mask, other=0.0,
                                   cache_modifier=".cg")  # fmt: skip
                if HALF < N_SEGS:
                    second = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                    for seg in range(HALF, N_SEGS):
                        second += tl.load(ws_tile + seg * stride_ws, mask=mask, other=0.0,
                                          cache_modifier=".cg")  # fmt: skip
                    red = red + second
                tl.store(
                    out_ptr + rm[:, None] * stride_om + cols[None, :] * stride_on,
                    red.to(out_ptr.dtype.element_ty),
                    mask=mask,
                )
            else:
                # Valid rows only, RED_ROWS at a time; the segment loops unrolled so that a
                # chunk's chain loads are all issued before the adds that consume them (the adds
                # stay in production's order).
                rr = tl.arange(0, RED_ROWS)
                for c in tl.static_range(0, BLOCK_M // RED_ROWS):
                    row0 = pid_m * BLOCK_M + c * RED_ROWS
                    if row0 < M:
                        r = row0.to(tl.int64) + rr
                        cmask = (r < M)[:, None] & n_ok[None, :]
                        src = ws_ptr + r[:, None] * NCOLS + cols[None, :]
                        red = tl.zeros((RED_ROWS, BLOCK_N), dtype=tl.float32)
                        for seg in tl.static_range(0, HALF):
                            red += tl.load(src + seg * stride_ws, mask=cmask, other=0.0,
                                           cache_modifier=".cg")  # fmt: skip
                        if HALF < N_SEGS:
                            second = tl.zeros((RED_ROWS, BLOCK_N), dtype=tl.float32)
                            for seg in tl.static_range(HALF, N_SEGS):
                                second += tl.load(src + seg * stride_ws, mask=cmask, other=0.0,
                                                  cache_modifier=".cg")  # fmt: skip
                            red = red + second
                        tl.store(
                            out_ptr + r[:, None] * stride_om + cols[None, :] * stride_on,
                            red.to(out_ptr.dtype.element_ty),
                            mask=cmask,
                        )
            # Zero for the next launch on this stream / the next graph replay (kernels on a
            # stream run in order, so no later program of this launch touches the counter).
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")


@triton.jit(do_not_specialize=["M"])
def reduce_pdl_kernel(
    ws_ptr, out_ptr, M, NCOLS, stride_ws, stride_om, stride_on,
    N_SEGS: tl.constexpr, HALF: tl.constexpr, BLOCK: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    """`reduce_segments_kernel` with a `griddepcontrol.wait` first (launched with programmatic
    dependent launch after the split matmul: the launch overlaps the matmul's tail)."""
    if GDC:
        gdc_wait()
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < M * NCOLS
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for seg in range(0, HALF):
        total += tl.load(ws_ptr + seg * stride_ws + offs, mask=ok, other=0.0)
    if HALF < N_SEGS:
        second = tl.zeros((BLOCK,), dtype=tl.float32)
        for seg in range(HALF, N_SEGS):
            second += tl.load(ws_ptr + seg * stride_ws + offs, mask=ok, other=0.0)
        total = total + second
    m = offs // NCOLS
    c = offs % NCOLS
    tl.store(out_ptr + m * stride_om + c * stride_on, total.to(out_ptr.dtype.element_ty), mask=ok)


def new_counters(device: torch.device) -> torch.Tensor:
    """A zeroed counter buffer for one launch site (allocated outside any graph capture)."""
    return torch.zeros(COUNTER_SLOTS, dtype=torch.int32, device=device)


def launch_fused(
    x: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    plan: MatmulPlan,
    counters: torch.Tensor,
    *,
    serial: bool,
    tile: LaunchTile = DECODE_TILE,
    upcast: bool = False,
    ieee_fp32: bool = False,
    pdl: bool | None = None,
) -> torch.Tensor:
    """Production's split launch with the reduction in the same launch: `x: [M, G, K]`,
    `w: [G, N, K]`, `out: [M, G * N]` (written in place). Needs `plan.n_segs > 1`.
    `pdl` not None: no fused reduction; `reduce_pdl_kernel` in a second launch, with
    programmatic dependent launch when `pdl` is True (the `prod_pdl` comparator)."""
    m = x.shape[0]
    g, n, k = w.shape
    assert plan.n_segs > 1
    n_tiles = -(-n // tile.block_n)
    ncols = g * n
    ws = torch.empty((plan.n_segs, m, ncols), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(m, tile.block_m), g * n_tiles, plan.n_segs)
    assert grid[0] * grid[1] <= counters.numel()
    fused_split_kernel[grid](
        x, w, out, ws, counters, m, n, k, n_tiles, ncols,
        x.stride(0), x.stride(1), x.stride(2), w.stride(0), w.stride(1), w.stride(2),
        out.stride(0), out.stride(1), m * ncols,
        BLOCK_M=tile.block_m, BLOCK_N=tile.block_n, BLOCK_K=BLOCK_K,
        SEG_TILES=plan.seg_tiles, N_SEGS=plan.n_segs, HALF=plan.half,
        SERIAL=serial, RED_ROWS=RED_ROWS, FUSE=pdl is None, PDL=bool(pdl),
        UPCAST=upcast, IEEE_FP32=ieee_fp32, num_warps=tile.num_warps, num_stages=tile.num_stages,
    )  # fmt: skip
    if pdl is not None:
        reduce_pdl_kernel[(triton.cdiv(m * ncols, REDUCE_BLOCK),)](
            ws, out, m, ncols, m * ncols, out.stride(0), out.stride(1),
            N_SEGS=plan.n_segs, HALF=plan.half, BLOCK=REDUCE_BLOCK, GDC=pdl, num_warps=4,
            **({"launch_pdl": True} if pdl else {}),
        )  # fmt: skip
    return out


def operands(groups: int, n: int, k: int, m: int, device: torch.device, seed: int):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(m, groups, k, generator=g) * 2).to(torch.bfloat16).to(device)
    w = (torch.randn(groups, n, k, generator=g) / k**0.5).to(torch.bfloat16).to(device)
    return x, w


def run_variant(
    name: str,
    x: torch.Tensor,
    w: torch.Tensor,
    out: torch.Tensor,
    plan: MatmulPlan,
    counters: torch.Tensor,
    interp: bool,
) -> torch.Tensor:
    kw: dict[str, Any] = {"upcast": interp, "ieee_fp32": interp}
    if name == "prod":
        return launch_matmul(x, w, out, plan, split=True, **kw)
    if name == "one":
        return launch_matmul(x, w, out, plan, split=False, **kw)
    if name == "prod_pdl":
        # PDL needs the GPU; under the interpreter the same two kernels run plainly.
        return launch_fused(x, w, out, plan, counters, serial=False, pdl=not interp, **kw)
    tile = LAB_TILES[name]
    return launch_fused(x, w, out, plan, counters, serial=name == "c93", tile=tile, **kw)


def check_bits(
    label: str,
    groups: int,
    n: int,
    k: int,
    m: int,
    device: torch.device,
    interp: bool,
    dtype: torch.dtype,
    log: Callable[[str], None],
) -> bool:
    """Every variant (twice: the counters must be back at zero) == the one-program launch,
    each written over a NaN-poisoned output; the counters all zero afterwards."""
    x, w = operands(groups, n, k, m, device, seed=m * 7919 + n * 31 + k)
    plan = plan_matmul(n, k, groups)
    counters = new_counters(device)
    outs: dict[str, torch.Tensor] = {}
    ok = True
    for rep in range(2):
        for v in VARIANTS:
            out = torch.full((m, groups * n), float("nan"), dtype=dtype, device=device)
            outs[f"{v}#{rep}"] = run_variant(v, x, w, out, plan, counters, interp)
    ref = outs["one#0"]
    if ref.isnan().any():
        log(f"  {label} m={m}: the one-program launch left NaN")
        ok = False
    bad = [key for key, o in outs.items() if not torch.equal(o, ref)]
    if bad:
        ok = False
        worst = max((outs[b].float() - ref.float()).abs().nan_to_num(float("inf")).max().item()
                    for b in bad)  # fmt: skip
        log(f"  {label} m={m}: MISMATCH {bad} (max |diff| {worst:.3g})")
        FAILED.update(b.split("#")[0] for b in bad)
    if int(counters.count_nonzero()) != 0:
        ok = False
        log(f"  {label} m={m}: counters not back at zero ({int(counters.count_nonzero())})")
        FAILED.add("counters")
    return ok


def check_graph(
    label: str, groups: int, n: int, k: int, m: int, device: torch.device,
    log: Callable[[str], None],
) -> bool:  # fmt: skip
    """Each fused variant captured in a CUDA graph (two launches per graph, one counter
    buffer), fresh inputs copied in before each of three replays: every output == the eager
    one-program launch on those inputs (the counters reset themselves between launches and
    replays; nothing else touches them)."""
    plan = plan_matmul(n, k, groups)
    x, w = operands(groups, n, k, m, device, seed=5)
    ok = True
    for v in ("c93", "lab", "lab_n32", "lab_n16"):
        counters = new_counters(device)
        xs = torch.empty_like(x)
        outs = [torch.empty(m, groups * n, dtype=torch.bfloat16, device=device) for _ in "ab"]
        xs.copy_(x)

        def step(
            v: str = v, xs: torch.Tensor = xs, outs: list[torch.Tensor] = outs,
            cnt: torch.Tensor = counters,
        ) -> None:  # fmt: skip
            for o in outs:
                run_variant(v, xs, w, o, plan, cnt, False)

        st = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            step()
        torch.cuda.current_stream().wait_stream(st)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        for rep in range(3):
            xi, _ = operands(groups, n, k, m, device, seed=100 + rep)
            xs.copy_(xi)
            for o in outs:
                o.fill_(float("nan"))
            graph.replay()
            ref = torch.empty_like(outs[0])
            launch_matmul(xi, w, ref, plan, upcast=False, ieee_fp32=False, split=False)
            if not all(torch.equal(o, ref) for o in outs):
                log(f"  {label} m={m}: {v} graph replay {rep} != eager one-program launch")
                FAILED.add(v)
                ok = False
        torch.cuda.synchronize()
        if int(counters.count_nonzero()) != 0:
            log(f"  {label} m={m}: {v} counters not zero after the replays")
            FAILED.add(v)
            ok = False
    return ok


def graph_us(fn: Callable[[int], Any], device: torch.device) -> float:
    from ds41_attention.bench import time_graph

    sec = time_graph(lambda: [fn(i) for i in range(GRAPH_CALLS)], device, reps=7)
    assert sec is not None
    return sec * 1e6 / GRAPH_CALLS


def time_shape(groups: int, n: int, k: int, m: int, device: torch.device) -> dict[str, float]:
    x, w = operands(groups, n, k, m, device, seed=1)
    per_call = 2 * (w.numel() + x.numel())
    n_copies = max(1, min(GRAPH_CALLS, -(-COLD_BYTES // per_call)))
    xs = [x] + [x.clone() for _ in range(n_copies - 1)]
    ws = [w] + [w.clone() for _ in range(n_copies - 1)]
    out = torch.empty(m, groups * n, dtype=torch.bfloat16, device=device)
    plan = plan_matmul(n, k, groups)
    counters = new_counters(device)
    res: dict[str, float] = {}
    # prod_pdl last: if a programmatic launch cannot be captured here, the others are timed.
    for v in sorted(VARIANTS, key=lambda v: v == "prod_pdl"):

        def call(i: int, v: str = v) -> Any:
            c = i % n_copies
            return run_variant(v, xs[c], ws[c], out, plan, counters, False)

        try:
            res[v] = graph_us(call, device)
        except Exception as e:  # recorded as NaN, named in the log
            print(f"  {v}: graph timing failed: {type(e).__name__}: {e}", flush=True)
            torch.cuda.synchronize()
            res[v] = float("nan")
    return res


def s8_diagnosis(device: torch.device, log: Callable[[str], None]) -> None:
    """What the eighth session's failing `interpreter` tests compared when run compiled on a
    GPU (no TRITON_INTERPRET): the upcast (interpreter-only) arithmetic of production's kernel,
    split and not, against `grouped_linear`'s tensor-core launch (what the test asserts), and
    the c93 replay in the same upcast arithmetic (the eighth session's first assert)."""
    from ds41_runner.ops.linear import grouped_linear

    for groups, n, k in ((1, 72, 600), (3, 24, 260)):
        try:
            g = torch.Generator().manual_seed(13 + k)
            x = (torch.randn(70, groups, k, generator=g) * 2).to(torch.bfloat16).to(device)
            w = (torch.randn(groups, n, k, generator=g) / k**0.5).to(torch.bfloat16).to(device)
            plan = plan_matmul(n, k, groups)
            counters = new_counters(device)
            up: dict[str, torch.Tensor] = {}
            for name in ("one", "prod", "c93"):
                out = torch.full((70, groups * n), float("nan"), device=device)
                up[name] = run_variant(name, x, w, out, plan, counters, True)
            api = grouped_linear(x, w, backend="triton", out_dtype=torch.float32)
            same = ", ".join(f"{v} {torch.equal(up[v], up['one'])}" for v in ("prod", "c93"))
            log(
                f"  s8 test case ({groups}, {n}, {k}): upcast path == upcast one program: {same}; "
                f"tensor-core API == upcast one program (the test's assert): "
                f"{torch.equal(api, up['one'])} ({int((api != up['one']).sum())} of {api.numel()} "
                f"differ)"
            )
        except Exception as e:  # a diagnosis: report and go on
            log(f"  s8 test case ({groups}, {n}, {k}): {type(e).__name__}: {str(e)[:300]}")


def best_lab(r: dict[str, Any]) -> str:
    """The fastest fused lab variant (not the c93 replay) against production, e.g. `0.83
    (lab_n32)`."""
    cands = [v for v in ("lab", "lab_n32", "lab_n16") if v not in FAILED] or ["lab"]
    name = min(cands, key=lambda v: r[v])
    return f"{r[name] / r['prod']:.2f} ({name})"


def gpu_main(rows: list[int], json_path: Path | None, log: Callable[[str], None]) -> int:
    from ds41_runner.matmul_bench import flash_mini_shapes
    from ds41_runner.model import ModelConfig

    device = torch.device("cuda")
    log(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    shapes = flash_mini_shapes(ModelConfig.preset("flash_mini"))
    ok = True
    results: list[dict[str, Any]] = []
    log("== bits: prod split and every lab variant (each twice) == one program (bf16 out)")
    for s in shapes:
        plan = plan_matmul(s.n, s.k, s.groups)
        if plan.n_segs < 2:
            log(f"  {s.name}: one segment, no split launch")
            continue
        for m in rows:
            ok &= check_bits(s.name, s.groups, s.n, s.k, m, device, False, torch.bfloat16, log)
        ok &= check_graph(s.name, s.groups, s.n, s.k, max(rows), device, log)
    log(f"== bits {'ok' if ok else 'FAILED'}")
    log("== graph replay, us per call (20 calls, >= 256 MB of operand copies)")
    for s in shapes:
        plan = plan_matmul(s.n, s.k, s.groups)
        if plan.n_segs < 2:
            continue
        for m in rows:
            t = time_shape(s.groups, s.n, s.k, m, device)
            results.append({"name": s.name, "groups": s.groups, "n": s.n, "k": s.k, "rows": m,
                            "uses": s.uses, "n_segs": plan.n_segs, "auto_split": plan.split(m),
                            **t})  # fmt: skip
            log(f"  {s.name} m={m}: " + ", ".join(f"{v} {t[v]:.2f}" for v in VARIANTS))
    if json_path is not None:
        json_path.write_text(json.dumps({"ok": ok, "rows": results}, indent=1))
    head = "| weight | G x N x K | rows | segs | uses | " + " | ".join(VARIANTS)
    lines = [head + " | best lab / prod |", "|---" * (6 + len(VARIANTS)) + "|"]
    step: dict[int, dict[str, float]] = {}
    for r in results:
        lines.append(
            f"| {r['name']} | {r['groups']}x{r['n']}x{r['k']} | {r['rows']} | {r['n_segs']} | "
            f"{r['uses']} | " + " | ".join(f"{r[v]:.2f}" for v in VARIANTS) + f" | {best_lab(r)} |"
        )
        if r["auto_split"]:
            tot = step.setdefault(r["rows"], dict.fromkeys(VARIANTS, 0.0))
            for v in VARIANTS:
                tot[v] += r["uses"] * r[v]
    lines.append("")
    lines.append("Per decode step, the launches that split (sum of uses x us):")
    lines.append("")
    lines.append("| rows | " + " | ".join(VARIANTS) + " | best lab / prod |")
    lines.append("|---" * (2 + len(VARIANTS)) + "|")
    for m, tot in sorted(step.items()):
        lines.append(
            f"| {m} | " + " | ".join(f"{tot[v]:.1f}" for v in VARIANTS) + f" | {best_lab(tot)} |"
        )
    lines.append(f"bits: {'ok' if ok else 'MISMATCH, failed: ' + ', '.join(sorted(FAILED))}")
    print("\n".join(lines), flush=True)
    return 0 if ok else 1


def cpu_main(log: Callable[[str], None]) -> int:
    """Bits under the Triton interpreter: small shapes with 1..4 tiles and 2..8 segments (two
    halves and one chain), partial row chunks, a partial last K tile."""
    device = torch.device("cpu")
    ok = True
    cases = (
        (1, 72, 600, 70), (3, 24, 260, 5), (1, 40, 520, 1), (2, 48, 384, 33), (1, 64, 1024, 20),
    )  # fmt: skip
    for groups, n, k, m in cases:
        plan = plan_matmul(n, k, groups)
        label = f"({groups}, {n}, {k}) segs {plan.n_segs} half {plan.half}"
        for dt in (torch.float32, torch.bfloat16):
            good = check_bits(label, groups, n, k, m, device, True, dt, log)
            log(f"  {label} m={m} {dt}: {'ok' if good else 'MISMATCH'}")
            ok &= good
    print(f"cpu interpreter bits: {'ok' if ok else 'MISMATCH'}", flush=True)
    return 0 if ok else 1


def ptxas_main(log: Callable[[str], None]) -> int:
    """Offline (no GPU): compile production's split matmul + reduce kernel, the c93 replay and
    the lab kernels for sm_90a with Triton's ptxas; print registers, spills, shared memory and
    the global loads / atomics in each kernel's SASS."""
    import re
    import subprocess
    import tempfile

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ds41_runner.ops.matmul.triton_kernels import matmul_kernel, reduce_segments_kernel

    bindir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    ptr = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*bf16", "ws_ptr": "*fp32",
           "cnt_ptr": "*i32"}  # fmt: skip
    # As the launches specialize them: unit strides are constants, M is never specialized,
    # the other integers (multiples of 16 for every flash_mini weight) divisible by 16.
    ones = {"stride_xk", "stride_wk", "stride_on"}

    def compile_one(fn, cx: dict[str, Any], warps: int, stages: int) -> str:
        sig: dict[str, str] = {}
        attrs: dict[tuple[int, ...], list[list[object]]] = {}
        cx = dict(cx)
        for i, name in enumerate(fn.arg_names):
            if name in ones and "stride_xk" in fn.arg_names:
                cx[name] = 1
            if name in cx:
                sig[name] = "constexpr"
                continue
            sig[name] = ptr.get(name, "i32")
            if name != "M":
                attrs[(i,)] = [["tt.divisibility", 16]]
        src = ASTSource(fn, sig, cx, attrs)
        kern = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps, "num_stages": stages})  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            ptx = os.path.join(tmp, "k.ptx")
            cubin = os.path.join(tmp, "k.cubin")
            with open(ptx, "w") as f:
                f.write(kern.asm["ptx"])
            cmd = [os.path.join(bindir, "ptxas"), "-v", "--gpu-name=sm_90a", ptx, "-o", cubin]
            res = subprocess.run(cmd, capture_output=True, text=True, check=True)
            sass = subprocess.run([os.path.join(bindir, "nvdisasm"), "-c", cubin],
                                  capture_output=True, text=True, check=True).stdout  # fmt: skip
        regs = re.search(r"Used (\d+) registers", res.stderr)
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", res.stderr)
        ldg = len(re.findall(r"\bLDG\.", sass))
        atom = len(re.findall(r"\b(?:ATOMG|ATOM|RED)\.", sass))
        fence = len(re.findall(r"\b(?:MEMBAR|FENCE)\.", sass))
        return (f"regs {regs.group(1) if regs else '?'}, spill st/ld "
                f"{spill.group(1) if spill else '?'}/{spill.group(2) if spill else '?'}, "
                f"smem {kern.metadata.shared} B, SASS: {ldg} LDG, {atom} atomics, "
                f"{fence} fences")  # fmt: skip

    from ds41_runner.matmul_bench import flash_mini_shapes
    from ds41_runner.model import ModelConfig

    seen: set[tuple[int, int, int]] = set()
    for s in flash_mini_shapes(ModelConfig.preset("flash_mini")):
        plan = plan_matmul(s.n, s.k, s.groups)
        key = (plan.seg_tiles, plan.n_segs, plan.half)
        if plan.n_segs < 2 or key in seen:
            continue
        seen.add(key)
        t = DECODE_TILE
        log(f"{s.name} ({s.groups}x{s.n}x{s.k}): {plan.n_segs} segments of {plan.seg_tiles} "
            f"K tiles, half {plan.half}")  # fmt: skip
        common = {"BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "BLOCK_K": BLOCK_K,
                  "SEG_TILES": plan.seg_tiles, "UPCAST": False, "IEEE_FP32": False}  # fmt: skip
        prod_cx = {**common, "N_ITER": plan.seg_tiles, "SPLIT": True, "HALF_ITER": 0}
        log("  prod matmul_kernel (split): "
            + compile_one(matmul_kernel, prod_cx, t.num_warps, t.num_stages))  # fmt: skip
        red_cx = {"N_SEGS": plan.n_segs, "HALF": plan.half, "BLOCK": REDUCE_BLOCK,
                  "stride_on": 1}  # fmt: skip
        log("  prod reduce_segments_kernel: " + compile_one(reduce_segments_kernel, red_cx, 4, 1))
        pdl_cx = {**common, "N_SEGS": plan.n_segs, "HALF": plan.half, "SERIAL": False,
                  "RED_ROWS": RED_ROWS, "FUSE": False, "PDL": True}  # fmt: skip
        log("  prod_pdl fused_split_kernel (FUSE=False): "
            + compile_one(fused_split_kernel, pdl_cx, t.num_warps, t.num_stages))  # fmt: skip
        log("  prod_pdl reduce_pdl_kernel: "
            + compile_one(reduce_pdl_kernel, {**red_cx, "GDC": True}, 4, 1))  # fmt: skip
        for name, tile in LAB_TILES.items():
            serial = name == "c93"
            cx = {**common, "BLOCK_N": tile.block_n, "N_SEGS": plan.n_segs, "HALF": plan.half,
                  "SERIAL": serial, "RED_ROWS": RED_ROWS, "FUSE": True, "PDL": False}  # fmt: skip
            log(f"  {name} fused_split_kernel: "
                + compile_one(fused_split_kernel, cx, tile.num_warps, tile.num_stages))  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="Triton interpreter, small shapes, bits")
    p.add_argument("--ptxas", action="store_true", help="offline sm_90a resource report")
    p.add_argument("--rows", default="1,64")
    p.add_argument("--s8", action="store_true",
                   help="GPU: replay the eighth session's failing interpreter tests' comparison "
                   "on production's kernel, then exit")  # fmt: skip
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    if args.ptxas:
        return ptxas_main(log)
    if args.cpu:
        if os.environ.get("TRITON_INTERPRET") != "1":
            p.error("--cpu needs TRITON_INTERPRET=1 set before triton is imported")
        return cpu_main(log)
    if not torch.cuda.is_available():
        p.error("needs a CUDA device (or --cpu under TRITON_INTERPRET=1)")
    if args.s8:
        s8_diagnosis(torch.device("cuda"), log)
        return 0
    return gpu_main([int(r) for r in args.rows.split(",")], args.json, log)


if __name__ == "__main__":
    sys.exit(main())
