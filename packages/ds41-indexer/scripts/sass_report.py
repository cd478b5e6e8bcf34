"""Offline sm_90 report of the indexer kernels (no GPU needed): registers, spills, shared memory
and the SASS instructions of each tile loop, from Triton's own compiler and the cuobjdump it
ships. Used for issue 12 (where the logits' time goes, before a GPU call).

    python packages/ds41-indexer/scripts/sass_report.py [--json out.json]

Instruction counts are static: per loop iteration and thread (a 4-warp program runs 4 warps of
them per 64-entry tile). At the H200's 4 warp-instructions per clock per SM, 132 SMs and
~1.98 GHz, W warp-instructions per entry bound the rate at 1045e9 / W entries/s (x 68 B of
MXFP4 key per entry for GB/s) when memory and issue overlap perfectly.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def compile_sm90(fn, signature, constexprs, div16, num_warps):  # type: ignore[no-untyped-def]
    sig = dict(signature) | {c: "constexpr" for c in constexprs}
    names = list(sig)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in div16}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(c.asm["cubin"])
    sass = subprocess.run(
        [os.path.join(BIN, "cuobjdump"), "-sass", f.name], capture_output=True, text=True
    ).stdout
    res = subprocess.run(
        [os.path.join(BIN, "cuobjdump"), "-res-usage", f.name], capture_output=True, text=True
    ).stdout
    os.unlink(f.name)
    regs = int(re.search(r"REG:(\d+)", res).group(1))  # type: ignore[union-attr]
    stack = int(re.search(r"STACK:(\d+)", res).group(1))  # type: ignore[union-attr]
    return c, sass, regs, stack


def loops(sass: str, marker: str | None) -> list[dict[str, object]]:
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    out = []
    for a, text in ins:
        m = re.search(r"BRA\s+`?\(?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) <= a:
            body = [t for b, t in ins if int(m.group(1), 16) <= b <= a]
            if marker is None or any(marker in t for t in body):
                ops = collections.Counter(
                    re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in body
                )
                out.append({"instructions": len(body), "top": dict(ops.most_common(12))})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    from ds41_indexer.ops.logits import triton_kernels as lk
    from ds41_indexer.ops.topk import triton_kernels as tk

    block_n, tiles, warps, stages = lk.TILE
    ptrs = ("q_ptr", "w_ptr", "cache_ptr", "bt_ptr", "req_ptr", "pos_ptr", "cand_ptr", "out_ptr")
    sig = dict.fromkeys(ptrs, "*i32") | {"q_ptr": "*bf16", "w_ptr": "*fp32", "cache_ptr": "*u8"}
    sig |= {"cand_ptr": "*u8", "out_ptr": "*fp32", "gmax_ptr": "*i32"}
    ints = "ratio entry_base n_cols q_stride_t q_stride_h w_stride_t n_req bt_cols bt_stride_r"
    ints += " num_pages page_stride cand_stride_t cand_cols out_stride_t gmax_stride_t"
    sig |= dict.fromkeys(ints.split(), "i32")
    div16 = [*ptrs, "gmax_ptr", "page_stride", "q_stride_t", "q_stride_h", "out_stride_t"]
    report = {}
    for gmax in (False, True):
        ce = dict(HI=32, HI_PAD=32, DI=128, DATA_BYTES=64, SCALE_BYTES=4, PAGE_SIZE=64)
        ce |= dict(IN_PAGE=True, FMT=0, HAS_CAND=False, OUT_BF16=False, HAS_GMAX=gmax)
        ce |= dict(UPCAST=False, BLOCK_N=block_n, TILES=tiles, STAGES=stages)
        ce |= {"TILES_P2": triton.next_power_of_2(tiles)}
        c, sass, regs, stack = compile_sm90(lk._paged_logits_kernel, sig, ce, div16, warps)
        fast = loops(sass, "HGMMA")[0]
        report[f"logits gmax={gmax}"] = {
            "registers": regs,
            "spill_bytes": stack,
            "shared_bytes": c.metadata.shared,
            "fast_loop": fast,
            "warp_instructions_per_entry": fast["instructions"] * warps / block_n,  # type: ignore[operator]
        }
    sel_sig = dict.fromkeys(
        ["score_ptr", "gmax_ptr", "nvis_ptr", "ckey_ptr", "cidx_ptr", "gid_ptr", "out_ptr"], "*i32"
    )
    sel_sig |= {"score_ptr": "*fp32"}
    sel_sig |= dict.fromkeys(
        [
            "n_cols",
            "entry_base",
            "score_stride_t",
            "gmax_stride_t",
            "c_stride_t",
            "gid_stride_t",
            "out_stride_t",
            "k",
        ],
        "i32",
    )
    k_pad, chunk = 512, 4096
    batch = tk.gather_batch(chunk)
    ce = dict(HAS_RUN=True, FINAL=True, K_PAD=k_pad, BATCH=batch, NGB=min(chunk, 4096))
    ce |= {"CCAP": triton.next_power_of_2(k_pad + batch)}
    c, sass, regs, stack = compile_sm90(tk._group_select_kernel, sel_sig, ce, ["score_ptr"], 8)
    report["group select"] = {
        "registers": regs,
        "spill_bytes": stack,
        "shared_bytes": c.metadata.shared,
    }
    split_sig = dict.fromkeys(
        [
            "score_ptr",
            "gmax_ptr",
            "nvis_ptr",
            "ckey_ptr",
            "cidx_ptr",
            "gid_ptr",
            "meta_ptr",
            "done_ptr",
            "out_ptr",
        ],
        "*i32",
    )
    split_sig |= {"score_ptr": "*fp32"}
    split_sig |= dict.fromkeys(
        [
            "n_cols",
            "score_stride_t",
            "gmax_stride_t",
            "c_stride_p",
            "gid_stride_t",
            "out_stride_t",
            "k",
        ],
        "i32",
    )
    for prune in (True, False):
        ce = dict(S=8, PRUNE=prune, K_PAD=k_pad, BATCH=batch, NGB=min(chunk, 4096), CHUNK=chunk)
        ce |= {"CCAP": triton.next_power_of_2(k_pad + batch) if prune else k_pad}
        c, sass, regs, stack = compile_sm90(tk._split_select_kernel, split_sig, ce, [], 8)
        report[f"split select prune={prune}"] = {
            "registers": regs,
            "spill_bytes": stack,
            "shared_bytes": c.metadata.shared,
        }
    row_sig = dict.fromkeys(["score_ptr", "nvis_ptr", "out_ptr"], "*i32") | {"score_ptr": "*fp32"}
    row_sig |= dict.fromkeys(["n_cols", "score_stride_t", "out_stride_t", "k"], "i32")
    c, sass, regs, stack = compile_sm90(
        tk._select_row_kernel, row_sig, dict(CHUNK=chunk, K_PAD=k_pad), [], 8
    )
    report["one-chunk rows"] = {
        "registers": regs,
        "spill_bytes": stack,
        "shared_bytes": c.metadata.shared,
        "barriers": sass.count("BAR.SYNC"),
    }
    for name, r in report.items():
        print(name, json.dumps(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
