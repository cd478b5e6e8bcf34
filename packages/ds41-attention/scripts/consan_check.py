"""Triton's concurrency sanitizer (ConSan) over the Gluon kernel, on the H200.

`compute-sanitizer --tool racecheck` does not follow the Gluon kernel's synchronization
(a partition barrier, then one thread's `mbarrier.arrive`; waits by parity), so it reports
hazards on every shared-memory hand-off between the producer and the consumers. ConSan
instruments the kernel at the Triton IR level and models mbarriers, named barriers, cp.async
and wgmma commit groups: a real race or a missing wait is a device-side assertion.

    TRITON_INSTRUMENTATION_MODE=consan python packages/ds41-attention/scripts/consan_check.py

Runs every (window format, compressed format) the kernel specializes on, full and ragged
rows, and checks each output against the float64 reference with the `gpu` tests' bound (the
instrumentation must not change what the kernel computes).
"""

from __future__ import annotations

import os
import sys

import torch

if os.environ.get("TRITON_INSTRUMENTATION_MODE") != "consan":
    sys.exit("set TRITON_INSTRUMENTATION_MODE=consan before starting (it is read at import)")

import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from attn_helpers import max_abs_entry
from test_gpu import _problem

from ds41_attention import reference_sparse_attention
from ds41_attention.ops.sparse_attention.gluon_launch import (
    launch_gluon_sparse_attention,
)

CUDA = torch.device("cuda")


def _scratch(size: int, alignment: int, stream: object) -> torch.Tensor:
    # ConSan keeps its shadow state in global scratch memory the launcher allocates.
    del alignment, stream
    return torch.empty(size, dtype=torch.int8, device=CUDA)


def main() -> int:
    triton.set_allocator(_scratch)
    cases = [
        (rows, wfmt, cfmt, k, full)
        for wfmt in ("mxfp8", "bf16")
        for cfmt in ("nvfp4", "mxfp8", "bf16")
        for rows, k, full in ((3, 512, False), (2, 512, True))
    ] + [(4, "mxfp8", "nvfp4", 0, False), (2, "mxfp8", "nvfp4", 2048, True)]
    for i, (rows, wfmt, cfmt, k, full) in enumerate(cases):
        args = _problem(64, 512, 128, k, rows, cfmt, 100 + i, wfmt=wfmt, lens_full=full)
        out, _ = launch_gluon_sparse_attention(*args)
        torch.cuda.synchronize()
        ref, _ = reference_sparse_attention(*args)
        vmax = max(max_abs_entry(args[1]), max_abs_entry(args[4]) if k else 0.0)
        err = (out.double() - ref).abs()
        ok = bool((err <= 2.0**-8 * ref.abs() + 2.0**-8 * vmax).all())
        print(f"consan: rows {rows} window {wfmt} compressed {cfmt} k {k} full {full}: "
              f"{'clean' if ok else 'WRONG OUTPUT'} (max err {err.max().item():.3g})",
              flush=True)  # fmt: skip
        if not ok:
            return 1
    print(f"consan: {len(cases)} launches, no race or barrier error reported")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
