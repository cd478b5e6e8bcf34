# mypy: allow-untyped-defs, allow-incomplete-defs
"""The SwiGLU gate in one launch (the torch path in `naive.py` takes six).

It reads and writes bf16 as raw 16-bit patterns and rounds with integer ops (`ds41_cache`'s
codec helpers), so it is exact under the CPU interpreter as on the GPU, and it launches with
`enable_fp_fusion=False`: every product is rounded on its own, as torch rounds it, never folded
into an FMA. (The in-place RoPE kernel lives in `ds41_cache.ops.rope`.)
"""

import torch
import triton
import triton.language as tl

from ds41_cache.ops.codec.triton_jit import bf16_bits_to_f32, f32_to_bf16_store_bits
from ds41_cache.ops.launch import dependent_launch, enter_dependent

SWIGLU_BLOCK = 1024


@triton.jit
def swiglu_gate_kernel(
    a_ptr, b_ptr, out_ptr, F, stride_a, stride_b, stride_o, BLOCK: tl.constexpr,
    GDC: tl.constexpr = False,
):  # fmt: skip
    """Program (row, column block): elementwise, so the bits do not depend on the layout."""
    enter_dependent(GDC)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < F
    a = bf16_bits_to_f32(tl.load(a_ptr + row * stride_a + cols, mask=ok, other=0)).to(tl.float64)
    b = bf16_bits_to_f32(tl.load(b_ptr + row * stride_b + cols, mask=ok, other=0))
    # silu as torch evaluates it for float64: x / (1 + exp(-x)), then one rounding to fp32
    gate = (a / (1.0 + tl.exp(-a))).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, f32_to_bf16_store_bits(gate * b), mask=ok)


def launch_swiglu_gate(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """`a`, `b`, `out`: bf16 `[M, F]` with unit column stride, any row stride (`a` and `b`
    may be the two column halves of one `[M, 2F]` projection)."""
    m, f = a.shape
    block = min(SWIGLU_BLOCK, triton.next_power_of_2(f))
    swiglu_gate_kernel[(m, triton.cdiv(f, block))](
        a.view(torch.int16), b.view(torch.int16), out.view(torch.int16), f,
        a.stride(0), b.stride(0), out.stride(0),
        BLOCK=block, num_warps=4, enable_fp_fusion=False,
        **dependent_launch(a.device),
    )  # fmt: skip
    return out
