"""The batch-invariant matmul on the flash_mini weight shapes: segmented vs one segment vs cuBLAS.

    python -m ds41_runner.matmul_bench [--json PATH] [--markdown PATH] [--rows 1,8,64,256,4096]

For every weight of a flash_mini layer (and the LM head) and every row count it first checks,
on the same inputs, that the planned kernel is bitwise equal with its segments run in one
program and split over programs and with every launch tile, that a row alone equals the same
row inside the batch, and that the result is within the fp32-accumulation bound of a float64
reference; then it times (CUDA-graph replay of 20 calls that cycle through enough operand
copies to miss the L2, median): the planned kernel as `linear` launches it ("bi", with the
tile `plan.tile` picks), forced split and forced one-program variants, the one-segment plan
(the previous kernel: no K segments) and `torch.matmul` (cuBLAS, the fast mode). Bandwidth =
weight + activations + output bytes per call, against the SPEC section 10 copy ceiling
(~4.3 TB/s).
`--smoke` runs two small shapes under the CPU interpreter (correctness only, for the tests).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ds41_attention.bench import time_graph

from .bench import environment, table_head
from .model import ModelConfig
from .ops.matmul.naive import reference_matmul
from .ops.matmul.plan import DECODE_TILE, PREFILL_TILES, LaunchTile, MatmulPlan, plan_matmul
from .ops.matmul.triton_kernels import launch_matmul

COPY_CEILING_GBS = 4300.0
COLD_BYTES = 256 << 20
GRAPH_CALLS = 20


@dataclass
class Shape:
    name: str
    groups: int
    n: int
    k: int
    uses: int = 1
    """How many times one forward step multiplies by a weight of this shape."""


@dataclass
class Row:
    """One (shape, rows) measurement; times in microseconds."""

    name: str
    groups: int
    n: int
    k: int
    rows: int
    uses: int
    n_segs: int
    seg_tiles: int
    auto_split: bool
    tile: str
    """The launch tile `plan.tile` picks (rows x columns, warps, stages)."""
    bi_us: float
    split_us: float | None
    whole_us: float
    one_segment_us: float
    cublas_us: float
    bi_gbs: float


def flash_mini_shapes(cfg: ModelConfig) -> list[Shape]:
    """The weights a step of `cfg` multiplies by (SPEC section 1 roles), with their uses: one
    entry per launch, so the projections that share an input are one concatenated weight
    (`model.weights.LayerWeights`: `wq_a + wkv`, `w1 + w3`, `wkv_c + wgate_c`)."""
    hd = cfg.heads * cfg.head_dim
    plans = cfg.plans
    kv_src = [p for p in plans if p.is_kv_source]
    idx_src = sum(p.is_index_source for p in plans)
    every = cfg.n_layers
    d = cfg.head_dim
    shapes = [
        Shape("wq_a + wkv", 1, cfg.q_lora_rank + d, cfg.hidden, every),
        Shape("wq_b", 1, hd, cfg.q_lora_rank, every),
        Shape("wkv_c", 1, d, cfg.hidden, sum(p.ratio == 1 for p in kv_src)),
        Shape("wkv_c + wgate_c", 1, 2 * d, cfg.hidden, sum(p.ratio == 2 for p in kv_src)),
        Shape("wo_a (grouped)", cfg.o_groups, cfg.o_lora_rank, hd // cfg.o_groups, every),
        Shape("wo_b", 1, cfg.hidden, cfg.o_groups * cfg.o_lora_rank, every),
        Shape("w1 + w3", 1, 2 * cfg.mlp_hidden, cfg.hidden, every),
        Shape("w2", 1, cfg.hidden, cfg.mlp_hidden, every),
        Shape("wq_b_idx", 1, cfg.index_heads * cfg.index_head_dim, cfg.q_lora_rank, idx_src),
        Shape("wk_idx", 1, cfg.index_head_dim, cfg.head_dim, len(kv_src)),
        Shape("weights_proj", 1, cfg.index_heads, cfg.hidden, idx_src),
        Shape("lm_head", 1, cfg.vocab_size, cfg.hidden, 1),
    ]
    return [s for s in shapes if s.uses > 0]


def _operands(s: Shape, m: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(m * 7919 + s.n * 31 + s.k)
    x = (torch.randn(m, s.groups, s.k, generator=g) * 2).to(torch.bfloat16).to(device)
    w = (torch.randn(s.groups, s.n, s.k, generator=g) / s.k**0.5).to(torch.bfloat16).to(device)
    return x, w


def _run(
    x: torch.Tensor,
    w: torch.Tensor,
    plan: MatmulPlan,
    split: bool | None,
    interp: bool,
    tile: LaunchTile | None = None,
) -> torch.Tensor:
    """fp32 result written over a NaN-poisoned output (the checks)."""
    out = torch.full((x.shape[0], plan.groups * plan.n), float("nan"), device=x.device)
    return launch_matmul(x, w, out, plan, upcast=interp, ieee_fp32=interp, split=split, tile=tile)


def check(s: Shape, m: int, device: torch.device, interp: bool) -> None:
    """Raise AssertionError unless split == one program == every launch tile == row alone,
    and near float64."""
    x, w = _operands(s, m, device)
    plan = plan_matmul(s.n, s.k, s.groups)
    whole = _run(x, w, plan, False, interp)
    assert not whole.isnan().any(), f"{s.name} m={m}: unwritten output"
    if plan.n_segs > 1:
        split = _run(x, w, plan, True, interp)
        assert torch.equal(whole, split), f"{s.name} m={m}: split != one program"
    for tile in (DECODE_TILE, *PREFILL_TILES):
        other = _run(x, w, plan, False, interp, tile)
        assert torch.equal(whole, other), f"{s.name} m={m}: tile {tile} changes the bits"
    last = _run(x[-1:], w, plan, None, interp)
    assert torch.equal(last, whole[-1:]), f"{s.name} m={m}: row alone != row in batch"
    for gi in range(s.groups):
        xs, ws_ = x[:, gi].cpu(), w[gi].cpu()
        ref = reference_matmul(xs, ws_)
        bound = 2e-6 * s.k**0.5 * (xs.double().abs() @ ws_.double().abs().T) + 1e-30
        got = whole[:, gi * s.n : (gi + 1) * s.n].double().cpu()
        assert ((got - ref).abs() <= bound).all(), f"{s.name} m={m}: off the float64 bound"


def _graph_us(fn: Callable[[int], Any], device: torch.device) -> float:
    """Median microseconds per call of `fn(i)`, i = 0..GRAPH_CALLS-1, from one CUDA graph."""
    sec = time_graph(lambda: [fn(i) for i in range(GRAPH_CALLS)], device, reps=7)
    assert sec is not None
    return sec * 1e6 / GRAPH_CALLS


def measure(s: Shape, m: int, device: torch.device) -> Row:
    x, w = _operands(s, m, device)
    # Consecutive calls read different copies of the operands (>= COLD_BYTES in all), so the
    # weights stream from HBM as in a model step instead of staying in the 50 MB L2.
    per_call = 2 * (w.numel() + x.numel())
    n_copies = max(1, min(GRAPH_CALLS, -(-COLD_BYTES // per_call)))
    xs = [x] + [x.clone() for _ in range(n_copies - 1)]
    ws = [w] + [w.clone() for _ in range(n_copies - 1)]
    # A bf16 output, as `linear` writes it; nothing but the matmul runs inside a timed call.
    out = torch.empty(m, s.groups * s.n, dtype=torch.bfloat16, device=device)
    plan = plan_matmul(s.n, s.k, s.groups)
    flat = plan_matmul(s.n, s.k, s.groups, segments=False)

    def variant(p: MatmulPlan, split: bool | None) -> Callable[[int], Any]:
        def call(i: int) -> Any:
            c = i % n_copies
            return launch_matmul(xs[c], ws[c], out, p, upcast=False, ieee_fp32=False, split=split)

        return call

    def cublas(i: int) -> Any:
        xi, wi = xs[i % n_copies], ws[i % n_copies]
        if s.groups == 1:
            return torch.matmul(xi[:, 0], wi[0].T)
        return torch.bmm(xi.transpose(0, 1), wi.transpose(1, 2))

    bi = _graph_us(variant(plan, None), device)
    nbytes = per_call + 2 * m * s.groups * s.n
    return Row(
        s.name, s.groups, s.n, s.k, m, s.uses, plan.n_segs, plan.seg_tiles, plan.split(m),
        tile=_tile_name(plan.tile(m, plan.split(m))),
        bi_us=bi,
        split_us=_graph_us(variant(plan, True), device) if plan.n_segs > 1 else None,
        whole_us=_graph_us(variant(plan, False), device),
        one_segment_us=_graph_us(variant(flat, False), device),
        cublas_us=_graph_us(cublas, device),
        bi_gbs=nbytes / bi / 1e3,
    )  # fmt: skip


def _tile_name(t: LaunchTile) -> str:
    return f"{t.block_m}x{t.block_n} w{t.num_warps} s{t.num_stages}"


def markdown(rows: list[Row], env: dict[str, str]) -> str:
    lines = table_head(
        env,
        ["weight", "G x N x K", "rows", "segs x tiles", "split", "tile", "bi us", "split us",
         "one-program us", "no-segments us", "cuBLAS us", "bi / cuBLAS", "bi GB/s", "% of copy"],
    )  # fmt: skip
    for r in rows:
        sp = f"{r.split_us:.1f}" if r.split_us is not None else "-"
        lines.append(
            f"| {r.name} | {r.groups}x{r.n}x{r.k} | {r.rows} | {r.n_segs}x{r.seg_tiles} | "
            f"{'yes' if r.auto_split else 'no'} | {r.tile} | {r.bi_us:.1f} | {sp} | "
            f"{r.whole_us:.1f} | "
            f"{r.one_segment_us:.1f} | {r.cublas_us:.1f} | {r.bi_us / r.cublas_us:.2f} | "
            f"{r.bi_gbs:,.0f} | {r.bi_gbs / COPY_CEILING_GBS:.0%} |"
        )
    return "\n".join(lines) + "\n"


def step_totals(rows: list[Row]) -> list[dict[str, Any]]:
    """Per row count: summed microseconds of one step's matmuls (bf16 timings throughout; the
    compressor's projections really run in fp32)."""
    totals: dict[int, dict[str, float]] = {}
    for r in rows:
        mult = r.uses
        t = totals.setdefault(r.rows, {"bi": 0.0, "no_segments": 0.0, "cublas": 0.0})
        t["bi"] += mult * r.bi_us
        t["no_segments"] += mult * r.one_segment_us
        t["cublas"] += mult * r.cublas_us
    return [{"rows": m, **t} for m, t in sorted(totals.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--rows", default="1,8,64,128,256,1024,4096")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, checks only")
    args = parser.parse_args(argv)
    if args.smoke:
        from ds41_cache.backend import interpreter_active

        if not interpreter_active():
            parser.error("--smoke needs TRITON_INTERPRET=1 set before triton is imported")
        device = torch.device("cpu")
        for shape in (Shape("narrow", 1, 40, 520), Shape("grouped", 3, 24, 260)):
            for m in (1, 70):
                check(shape, m, device, interp=True)
                print(f"[matmul] {shape.name} rows={m}: bitwise split == whole == alone, ok")
        return 0
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device (use --smoke on the CPU)")
    device = torch.device("cuda")
    cfg = ModelConfig.preset("flash_mini")
    rows_list = [int(m) for m in args.rows.split(",")]
    results: list[Row] = []
    for shape in flash_mini_shapes(cfg):
        for m in rows_list:
            check(shape, m, device, interp=False)
            results.append(measure(shape, m, device))
            print(f"[matmul] {shape.name} rows={m}: {results[-1].bi_us:.1f} us", flush=True)
    env = environment(device)
    table = markdown(results, env)
    totals = step_totals(results)
    table += "\n| rows | step matmuls bi us | no-segments us | cuBLAS us | bi / cuBLAS |\n"
    table += "|---|---|---|---|---|\n"
    for t in totals:
        table += (
            f"| {t['rows']} | {t['bi']:.0f} | {t['no_segments']:.0f} | {t['cublas']:.0f} | "
            f"{t['bi'] / t['cublas']:.2f} |\n"
        )
    print(table)
    if args.json:
        payload = {"env": env, "rows": [asdict(r) for r in results], "step_totals": totals}
        args.json.write_text(json.dumps(payload, indent=1))
    if args.markdown:
        args.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
