"""Offline resource report of the attention kernels for sm_90a (no GPU needed).

Compiles the Triton `_sparse_attn_kernel` per config and the Gluon kernel for the V4.1-Flash
geometry (mxfp8 window, nvfp4 compressed, D=512) with Triton's bundled ptxas and prints
registers, spill bytes and shared memory:
`python packages/ds41-attention/scripts/ptxas_report.py "64,64,8,1;64,32,8,1" [--gluon]
[--split] [--persistent] [--pair] [--sass DIR]`. Config fields: block_h, block_n, num_warps,
num_stages. `--module PATH` compiles the Gluon kernel of a lab copy (e.g. a lab file restored
from history) instead. `--split` also compiles the Gluon kernel's split (fast-path) variant,
`--persistent` its persistent variant (several items a program, Q and the output by TMA),
`--pair` the pair kernel (two CTAs a row, compiled for one CTA as its launcher does); `--sass
DIR` writes each kernel's SASS (nvdisasm) and PTX there, e.g. to diff two versions of a kernel
(`scripts/sass_loops.py` counts each partition's loop); `--pairs 01,03,13` picks the (window,
compressed) format pairs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from ds41_attention.ops.sparse_attention.launch import KernelConfig
from ds41_attention.ops.sparse_attention.triton_kernels import _sparse_attn_kernel

POINTERS = {"q_ptr": "*i32", "w_ptr": "*u8", "w16_ptr": "*i16", "w32_ptr": "*i32",
            "swa_ptr": "*i32", "swa_lens_ptr": "*i32", "c_ptr": "*u8", "c16_ptr": "*i16",
            "c32_ptr": "*i32", "comp_ptr": "*i32", "comp_lens_ptr": "*i32",
            "sink_ptr": "*fp32", "out_ptr": "*i32", "lse_ptr": "*fp32", "part_o_ptr": "*fp32",
            "part_ml_ptr": "*fp32", "scale_log2": "fp32"}  # fmt: skip
# integer arguments the launcher's values do not make divisible by 16
NOT_DIV16 = {"H", "W", "K", "w_num_slots", "c_num_slots", "num_splits", "num_items", "scale_log2",
             "n_rows"}  # fmt: skip


def _box_type(shape: str, rank: int) -> str:
    """Triton's signature type of a bf16 tensor descriptor with a 128-byte-swizzled box."""
    return (f"tensordesc<bf16[{shape}],NVMMASharedLayout(swizzle_byte_width=128, "
            f"element_bitwidth=16, rank={rank}, transposed=False, fp4_padded=False, "
            "cga_layout=[])>")  # fmt: skip


# the persistent variant's descriptors as the launcher builds them: Q as [T H, D] in [64, 256]
# boxes, the output as [T, H, D] in [1, 64, 256] boxes
DESCRIPTORS = {"q_desc": _box_type("64, 256", 2), "out_desc": _box_type("1, 64, 256", 3)}


def signature(fn, constexprs: dict[str, int | bool]):
    """(signature, attrs) of `fn` as the launchers specialize it on the V4.1 geometry:
    pointers, strides and page sizes divisible by 16. Without these attributes ptxas sees
    scalar loads and reports other registers and spills than the real kernel. The page sizes,
    constexprs of the Gluon kernels, are added to `constexprs` in place (the bench's 64) so
    the caller's compile sees them."""
    for prm in fn.params:
        if prm.is_constexpr and prm.name.endswith("page_size"):
            constexprs.setdefault(prm.name, 64)
    sig = {}
    attrs: dict[tuple[int], list[list[object]]] = {}
    for i, name in enumerate(fn.arg_names):
        sig[name] = "constexpr" if name in constexprs else POINTERS.get(name, "i32")
        if sig[name] != "constexpr" and name not in NOT_DIV16:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, attrs


def report(
    cfg: KernelConfig | None,
    d: int = 512,
    w_fmt: int = 0,
    c_fmt: int = 1,
    split: bool = False,
    sass_dir: str | None = None,
    module: str | None = None,
    pair: bool = False,
    persistent: bool = False,
) -> str:
    """Resources of the Triton kernel at `cfg`, or of the Gluon kernel when `cfg` is None (the
    pair kernel with `pair`, compiled for one CTA as its launcher does, XBASE = 0)."""
    if cfg is None and pair:
        from triton.experimental.gluon._runtime import GluonASTSource

        from ds41_attention.ops.sparse_attention import gluon_pair_kernels as gp

        cx: dict[str, int | bool] = {"W_FMT": w_fmt, "C_FMT": c_fmt, "XBASE": 0}
        sig, attrs = signature(gp._gluon_pair_attn_kernel, cx)
        sig["q_ptr"] = sig["out_ptr"] = "*bf16"
        src = GluonASTSource(gp._gluon_pair_attn_kernel, sig, cx, attrs)
        opts: dict[str, int] = {"num_warps": gp.PAIR_NUM_WARPS, "maxnreg": gp.PAIR_MAXNREG}
    elif cfg is None:
        from triton.experimental.gluon._runtime import GluonASTSource

        from ds41_attention.ops.sparse_attention import gluon_kernels as gk

        if module:
            import importlib.util

            spec = importlib.util.spec_from_file_location("lab_kernel", module)
            assert spec is not None and spec.loader is not None
            gk = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(gk)

        cx = {"W_FMT": w_fmt, "C_FMT": c_fmt}
        names = gk._gluon_sparse_attn_kernel.arg_names
        if "SPLIT" in names:
            cx["SPLIT"] = split
        if "PERSISTENT" in names:
            cx["PERSISTENT"] = persistent
            if not persistent:  # the launcher passes no descriptors to the one-item grid
                cx["q_desc"] = cx["out_desc"] = None
        sig, attrs = signature(gk._gluon_sparse_attn_kernel, cx)
        sig["q_ptr"] = sig["out_ptr"] = "*bf16"  # the Gluon kernel reads / writes bf16
        if persistent:
            sig.update(DESCRIPTORS)
            for i, name in enumerate(names):
                if name in DESCRIPTORS:
                    attrs.pop((i,), None)
        src = GluonASTSource(gk._gluon_sparse_attn_kernel, sig, cx, attrs)
        opts = {"num_warps": gk.GLUON_NUM_WARPS, "maxnreg": gk.GLUON_MAXNREG}
    else:
        cx = {"D": d, "BLOCK_H": cfg.block_h, "BLOCK_N": cfg.block_n, "W_FMT": w_fmt,
              "C_FMT": c_fmt, "SPLIT": False, "UPCAST": False, "HW_FP8": True,
              "num_splits": 1}  # fmt: skip
        sig, attrs = signature(_sparse_attn_kernel, cx)
        src = ASTSource(_sparse_attn_kernel, sig, cx, attrs)
        opts = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(k.asm["ptx"])
        res = subprocess.run(
            [ptxas, "-v", "--gpu-name=sm_90a", path, "-o", os.path.join(tmp, "k.cubin")],
            capture_output=True,
            text=True,
            check=True,
        )
        if sass_dir:
            nvdisasm = os.path.join(os.path.dirname(ptxas), "nvdisasm")
            sass = subprocess.run([nvdisasm, "-c", os.path.join(tmp, "k.cubin")],
                                  capture_output=True, text=True, check=True).stdout  # fmt: skip
            os.makedirs(sass_dir, exist_ok=True)
            name = "gluon_split" if split else ("gluon" if cfg is None else "triton")
            name = "gluon_pair" if pair else "gluon_persistent" if persistent else name
            with open(os.path.join(sass_dir, f"{name}_{w_fmt}{c_fmt}.sass"), "w") as f:
                f.write(sass)
            with open(os.path.join(sass_dir, f"{name}_{w_fmt}{c_fmt}.ptx"), "w") as f:
                f.write(k.asm["ptx"])
    regs = re.search(r"Used (\d+) registers", res.stderr)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", res.stderr)
    stack = re.search(r"(\d+) bytes stack frame", res.stderr)
    # ptxas warnings, e.g. C7513 (wgmma serialized: a pipelined product made synchronous)
    warnings = sorted({line.split("warning :")[-1].strip()[:120]
                       for line in res.stderr.splitlines() if "warning" in line})  # fmt: skip
    kind = "gluon pair" if pair else "gluon split" if split else "gluon"
    kind = "gluon persistent" if persistent else kind
    return (
        "".join(f"  ptxas warning: {w}\n" for w in warnings) + f"{cfg or kind} "
        f"fmt {w_fmt}{c_fmt}: "
        f"regs {regs.group(1) if regs else '?'} "
        f"stack {stack.group(1) if stack else '?'} "
        f"spill st/ld {spill.group(1) if spill else '?'}/{spill.group(2) if spill else '?'} "
        f"smem {k.metadata.shared}"
    )


if __name__ == "__main__":
    argv = sys.argv[1:]
    sass = argv[argv.index("--sass") + 1] if "--sass" in argv else None
    module = argv[argv.index("--module") + 1] if "--module" in argv else None
    pair_arg = argv[argv.index("--pairs") + 1] if "--pairs" in argv else None
    args = [a for a in argv if not a.startswith("--") and a not in (sass, module, pair_arg)]
    spec = args[0] if args else ""
    for c in filter(None, spec.split(";")):
        print(report(KernelConfig(*(int(v) for v in c.split(","))), sass_dir=sass), flush=True)
    # `--pairs 03,13`: other (window, compressed) format pairs, e.g. window-only kernels (C_FMT
    # 3), whose producer loop has no format branch (1 = NVFP4 as a window format: offline only)
    pairs = ((0, 1), (0, 0), (0, 2), (2, 2), (0, 3))
    if "--pairs" in argv:
        pairs = tuple((int(p[0]), int(p[1])) for p in argv[argv.index("--pairs") + 1].split(","))
    if "--gluon" in argv:
        for wf, cf in pairs:
            print(report(None, w_fmt=wf, c_fmt=cf, sass_dir=sass, module=module), flush=True)
            if "--split" in argv:
                print(report(None, w_fmt=wf, c_fmt=cf, split=True, sass_dir=sass, module=module),
                      flush=True)  # fmt: skip
            if "--persistent" in argv:
                print(report(None, w_fmt=wf, c_fmt=cf, sass_dir=sass, module=module,
                             persistent=True), flush=True)  # fmt: skip
            if "--pair" in argv:
                print(report(None, w_fmt=wf, c_fmt=cf, sass_dir=sass, pair=True), flush=True)
