"""Offline resource report of the attention kernel for sm_90 (no GPU needed).

Compiles `_sparse_attn_kernel` for the V4.1-Flash geometry (mxfp8 window, nvfp4 compressed,
D=512) with Triton's bundled ptxas and prints registers, spill bytes and shared memory per
config: `python packages/ds41-attention/scripts/ptxas_report.py "64,64,8,1,1;64,64,8,1,2"`.
Config fields: block_h, block_n, num_warps, num_stages[, d_tiles].
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

from ds41_attention.ops.sparse_attention.launch import KernelConfig, kernel_signature
from ds41_attention.ops.sparse_attention.triton_kernels import _sparse_attn_kernel


def report(cfg: KernelConfig, d: int = 512, w_fmt: int = 0, c_fmt: int = 1) -> str:
    sig, constexprs, attrs = kernel_signature(cfg, d, w_fmt, c_fmt)
    src = ASTSource(_sparse_attn_kernel, sig, constexprs, attrs)
    opts: dict[str, int] = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
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
    regs = re.search(r"Used (\d+) registers", res.stderr)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", res.stderr)
    stack = re.search(r"(\d+) bytes stack frame", res.stderr)
    return (
        f"{cfg}: regs {regs.group(1) if regs else '?'} "
        f"stack {stack.group(1) if stack else '?'} "
        f"spill st/ld {spill.group(1) if spill else '?'}/{spill.group(2) if spill else '?'} "
        f"smem {k.metadata.shared}"
    )


if __name__ == "__main__":
    spec = sys.argv[1] if len(sys.argv) > 1 else "64,64,8,1,1"
    for c in spec.split(";"):
        print(report(KernelConfig(*(int(v) for v in c.split(",")))), flush=True)
