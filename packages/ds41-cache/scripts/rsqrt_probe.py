"""Lab probe (GPU): is Triton's `tl.math.rsqrt` bit for bit torch's CUDA `torch.rsqrt`, and is
`1 / tl.sqrt` (as the runner's RMSNorm computes it)? Run before relying on either for a kernel
that must reproduce a torch path (`ops/norm/`).

    python packages/ds41-cache/scripts/rsqrt_probe.py

Inputs: every fp32 exponent from 2^-126 to 2^127 with random mantissas, 2^24 values, plus
the normal-range values an RMSNorm root takes (`ms + eps`, eps = 1e-20 and 1e-6). Prints the
count of mismatching results per variant.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rsqrt_kernel(x_ptr, a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=1.0)
    tl.store(a_ptr + offs, tl.math.rsqrt(x), mask=ok)
    tl.store(b_ptr + offs, 1.0 / tl.sqrt(x), mask=ok)


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    n = 1 << 24
    mant = torch.randint(0, 1 << 23, (n,), generator=g, device="cuda", dtype=torch.int32)
    expo = torch.randint(1, 255, (n,), generator=g, device="cuda", dtype=torch.int32)
    x = ((expo << 23) | mant).view(torch.float32)
    roots = torch.rand(n, generator=g, device="cuda") * torch.logspace(-20, 20, n, device="cuda")
    for name, v in (("all normal exponents", x), ("rms roots (1e-20 .. 1e20)", roots + 1e-20)):
        a, b = torch.empty_like(v), torch.empty_like(v)
        _rsqrt_kernel[(triton.cdiv(n, 1024),)](v, a, b, n, BLOCK=1024, enable_fp_fusion=False)
        ref = torch.rsqrt(v)
        bits = ref.view(torch.int32)
        for label, got in (("tl.math.rsqrt", a), ("1 / tl.sqrt", b)):
            diff = int((got.view(torch.int32) != bits).sum())
            print(f"{name:28s} {label:14s} vs torch.rsqrt: {diff} of {n} differ")


if __name__ == "__main__":
    main()
