"""Compile the fused small kernels and the kernels they replace for sm_90 on a machine without
a GPU (Triton's own ptxas; no device needed) and compare what decides their bits:

- the norms whose reduction is `tl.sum` (layout-dependent): `rmsnorm_pair_kernel` against two
  `rmsnorm_kernel`s (flash_mini 256 + 512), `embed_rmsnorm_kernel` against
  `residual_rmsnorm_kernel` without a delta, and `residual_rmsnorm_kernel` against
  `rmsnorm_kernel` (the final norm) at 1024 / 5120: the register layouts and the multiset of
  float instructions (FMA contractions and shuffles included) must match;
- the kernels launched without FMA contraction (`index_queries_kernel`,
  `norm_insert_kernel`): no `fma` in their PTX; `entry_slots_kernel`'s tables against
  `rope_tables_kernel`: the same instructions per element.
Pointers and integer arguments get the divisibility-by-16 hints the launches get. Exits 1 on a
mismatch. The GPU `gpu` tests check the bits themselves.

    python scripts/fused_ptx_check.py      # TRITON_INTERPRET unset
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections import Counter
from typing import Any

os.environ.pop("TRITON_INTERPRET", None)

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

FLOAT_OPS = (
    "fma",
    "mul",
    "add",
    "sub",
    "div",
    "sqrt",
    "rsqrt",
    "rcp",
    "max",
    "min",
    "shfl",
    "cvt",
    "neg",
    "abs",
    "setp",
    "selp",
)


def compile_k(
    fn: Any,
    sig: dict[str, str],
    consts: dict[str, Any],
    div16: list[str],
    num_warps: int = 4,
    fp_fusion: bool = True,
) -> Any:
    names = list(inspect.signature(fn.fn).parameters)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    sig = dict(sig) | {c: "constexpr" for c in consts}
    src = ASTSource(fn, sig, constexprs=consts, attrs=attrs)
    opts = {"num_warps": num_warps, "enable_fp_fusion": fp_fusion}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def fops(k: Any) -> Counter[str]:
    """The float / convert / shuffle instructions of the PTX (opcodes with modifiers)."""
    out: Counter[str] = Counter()
    for line in k.asm["ptx"].splitlines():
        t = line.strip().split()
        if t and t[0].startswith("@"):
            t = t[1:]
        if not t or t[0].startswith(("//", ".", "$")):
            continue
        op = t[0]
        if op.split(".")[0] in FLOAT_OPS and (".f32" in op or ".f64" in op or "shfl" in op):
            out[op] += 1
    return out


def layouts(k: Any) -> list[str]:
    return sorted(set(re.findall(r"#ttg\.blocked<\{[^}]*\}>", k.asm["ttgir"])))


def main() -> int:
    from ds41_cache.ops.rope.triton_kernels import rope_tables_kernel
    from ds41_indexer.ops.keys.triton_kernels import norm_insert_kernel
    from ds41_indexer.ops.queries.triton_kernels import index_queries_kernel
    from ds41_runner.ops.rowwise.triton_kernels import (
        embed_rmsnorm_kernel,
        entry_slots_kernel,
        residual_rmsnorm_kernel,
        rmsnorm_kernel,
        rmsnorm_pair_kernel,
    )

    ok = True

    def check(name: str, cond: bool) -> None:
        nonlocal ok
        ok &= cond
        print(f"{'ok  ' if cond else 'FAIL'} {name}")

    rsig = {
        "x_ptr": "*bf16",
        "w_ptr": "*bf16",
        "out_ptr": "*bf16",
        "D": "i32",
        "stride_x": "i32",
        "stride_o": "i32",
        "eps": "fp32",
    }
    rdiv = ["x_ptr", "w_ptr", "out_ptr", "D", "stride_x", "stride_o"]

    def rms(block: int, warps: int) -> Any:
        return compile_k(rmsnorm_kernel, rsig, {"BLOCK_D": block, "GDC": True}, rdiv, warps)

    a, b = rms(256, 4), rms(512, 4)
    order = [
        "x1_ptr",
        "w1_ptr",
        "out1_ptr",
        "D1",
        "stride_x1",
        "stride_o1",
        "x2_ptr",
        "w2_ptr",
        "out2_ptr",
        "D2",
        "stride_x2",
        "stride_o2",
    ]
    psig = {n: ("*bf16" if n.endswith("_ptr") else "i32") for n in order} | {"eps": "fp32"}
    pair = compile_k(
        rmsnorm_pair_kernel, psig, {"BLOCK_D1": 256, "BLOCK_D2": 512, "GDC": True}, order
    )
    check(
        "rmsnorm_pair: layouts of the two rmsnorm_kernels",
        layouts(pair) == sorted(set(layouts(a) + layouts(b))),
    )
    check(
        "rmsnorm_pair: float instructions = the two rmsnorm_kernels'",
        fops(pair) == fops(a) + fops(b),
    )

    ressig = {
        "x_ptr": "*bf16",
        "delta_ptr": "*bf16",
        "w_ptr": "*bf16",
        "sum_ptr": "*i16",
        "out_ptr": "*bf16",
        "first_ptr": "*i64",
        "stage": "i32",
        "D": "i32",
        "stride_x": "i32",
        "stride_d": "i32",
        "stride_s": "i32",
        "stride_o": "i32",
        "eps": "fp32",
    }
    resdiv = [
        "x_ptr",
        "delta_ptr",
        "w_ptr",
        "sum_ptr",
        "out_ptr",
        "first_ptr",
        "D",
        "stride_x",
        "stride_d",
        "stride_s",
        "stride_o",
    ]
    esig = {
        "tok_ptr": "*i64",
        "req_ptr": "*i32",
        "emb_ptr": "*bf16",
        "w_ptr": "*bf16",
        "x_ptr": "*bf16",
        "out_ptr": "*bf16",
        "first_ptr": "*i64",
        "stage": "i32",
        "V": "i32",
        "D": "i32",
        "stride_e": "i32",
        "stride_x": "i32",
        "stride_o": "i32",
        "eps": "fp32",
    }
    ediv = [
        "tok_ptr",
        "req_ptr",
        "emb_ptr",
        "w_ptr",
        "x_ptr",
        "out_ptr",
        "first_ptr",
        "V",
        "D",
        "stride_e",
        "stride_x",
        "stride_o",
    ]
    for d, block, warps in ((1024, 1024, 4), (5120, 8192, 8)):
        r = rms(block, warps)
        flags = {"BLOCK_D": block, "MARK": True, "NORM": True, "GDC": True}
        res = compile_k(residual_rmsnorm_kernel, ressig, flags | {"HAS_DELTA": True}, resdiv, warps)
        res0 = compile_k(
            residual_rmsnorm_kernel, ressig, flags | {"HAS_DELTA": False}, resdiv, warps
        )
        emb = compile_k(
            embed_rmsnorm_kernel, esig, {"BLOCK_D": block, "MARK": True, "GDC": True}, ediv, warps
        )
        check(
            f"embed_rmsnorm {d}: layouts and float instructions = residual_rmsnorm no-delta",
            layouts(emb) == layouts(res0) and fops(emb) == fops(res0),
        )
        extra = fops(res) - fops(r)  # the bf16 add, the NaN-aware rounding, the mark's max
        check(
            f"final norm {d}: residual_rmsnorm holds rmsnorm_kernel's instructions and layout "
            f"(+ {dict(extra)})",
            layouts(res) == layouts(r)
            and not (fops(r) - fops(res))
            and fops(res)["fma.rn.f32"] == fops(r)["fma.rn.f32"],
        )

    qsig = {
        "x_ptr": "*i16",
        "cos_ptr": "*fp32",
        "sin_ptr": "*fp32",
        "out_ptr": "*i16",
        "rot_ptr": "*i16",
        "N": "i32",
        "stride_t": "i32",
        "w_ptr": "*fp32",
        "wout_ptr": "*fp32",
        "NW": "i32",
        "w_scale": "fp32",
        "Q_PROGRAMS": "i32",
    }
    q = compile_k(
        index_queries_kernel,
        qsig,
        {
            "HEADS": 32,
            "D": 128,
            "HALF_R": 32,
            "QB": 32,
            "NG": 4,
            "NGROUPS": 4,
            "BN": 16,
            "X_BF16": True,
            "ROT": False,
            "W_BLOCK": 1024,
            "W_BF16": False,
            "GDC": True,
        },
        ["x_ptr", "cos_ptr", "sin_ptr", "out_ptr", "rot_ptr", "stride_t", "w_ptr", "wout_ptr"],
        fp_fusion=False,
    )
    check("index_queries_kernel: no FMA", not any(k.startswith("fma") for k in fops(q)))
    ksig = {
        "x_ptr": "*i16",
        "w_ptr": "*i16",
        "normed_ptr": "*i16",
        "slot_ptr": "*i64",
        "cos_ptr": "*fp32",
        "sin_ptr": "*fp32",
        "storage_ptr": "*u8",
        "N": "i32",
        "stride_x": "i32",
        "eps": "fp32",
        "num_slots": "i32",
        "page_stride": "i32",
    }
    k = compile_k(
        norm_insert_kernel,
        ksig,
        {
            "PS": 64,
            "D": 128,
            "LOG2_D": 7,
            "R": 64,
            "DATA_BYTES": 128,
            "SCALE_BYTES": 4,
            "FMT": 3,
            "QB": 32,
            "NG": 4,
            "NGROUPS": 4,
            "BN": 16,
            "X_BF16": True,
            "W_BF16": True,
            "GDC": True,
        },
        [
            "x_ptr",
            "w_ptr",
            "normed_ptr",
            "slot_ptr",
            "cos_ptr",
            "sin_ptr",
            "storage_ptr",
            "stride_x",
            "num_slots",
            "page_stride",
        ],
        fp_fusion=False,
    )
    check("norm_insert_kernel: no FMA", not any(k_.startswith("fma") for k_ in fops(k)))
    es = {
        "bt_ptr": "*i32",
        "bt_stride0": "i32",
        "bt_stride1": "i32",
        "num_req": "i32",
        "num_cols": "i32",
        "req_ptr": "*i32",
        "entry_ptr": "*i64",
        "emit_ptr": "*u8",
        "slots_ptr": "*i64",
        "epos_ptr": "*i32",
        "freqs_ptr": "*fp32",
        "cos_ptr": "*fp32",
        "sin_ptr": "*fp32",
        "T": "i32",
        "ratio": "i32",
    }
    # 128 rows x 32 pairs per program (4 warps) against rope_tables' 32 x 32: 4x the elements
    e = compile_k(
        entry_slots_kernel,
        es,
        {"PAGE": 64, "BLOCK": 128, "HALF_R": 32, "BLOCK_P": 32, "TABLES": True, "GDC": True},
        [
            "bt_ptr",
            "req_ptr",
            "entry_ptr",
            "emit_ptr",
            "slots_ptr",
            "epos_ptr",
            "freqs_ptr",
            "cos_ptr",
            "sin_ptr",
        ],
    )
    t = compile_k(
        rope_tables_kernel,
        {
            "pos_ptr": "*i32",
            "freqs_ptr": "*fp32",
            "cos_ptr": "*fp32",
            "sin_ptr": "*fp32",
            "N": "i32",
        },
        {"HALF_R": 32, "BLOCK_N": 32, "BLOCK_P": 32, "GDC": True},
        ["pos_ptr", "freqs_ptr", "cos_ptr", "sin_ptr"],
    )
    # (the int32 -> fp32 conversion of the position is per row, not per element: left out)
    fe, ft = fops(e), fops(t)
    check(
        "entry_slots_kernel: the tables' float instructions = 4 x rope_tables_kernel's",
        all(fe[op] == 4 * n for op, n in ft.items() if op != "cvt.rn.f32.s32")
        and set(fe) == set(ft),
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
