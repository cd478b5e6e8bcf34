"""Issue 12, seventh round: offline sm_90a report of a Gluon logits kernel (no GPU needed).

Compiles `_gluon_logits_kernel` of the package (or of a lab copy, `--module PATH`) for the
bench's geometry (Hi 32, page 64, group maxima on, f32 output) with Triton's bundled ptxas and
prints registers, spills, shared memory, ptxas warnings and the SASS of every loop (static
instruction counts per iteration and thread, by opcode).

    python packages/ds41-indexer/scripts/issue12/gluon7_sass.py [--module PATH] [--maxnreg R]
        [--set NAME=VALUE ...] [--sass FILE] [--ttgir FILE]
        [--ptx FILE]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
PTRS = {"q_ptr": "*bf16", "w_ptr": "*fp32", "cache_ptr": "*u8", "bt_ptr": "*i32",
        "req_ptr": "*i32", "pos_ptr": "*i32", "cand_ptr": "*u8", "out_ptr": "*fp32",
        "gmax_ptr": "*i32", "path_ptr": "*i8"}  # fmt: skip
NOT_DIV16 = {
    "ratio",
    "entry_base",
    "n_cols",
    "n_req",
    "bt_cols",
    "num_pages",
    "cand_cols",
    "path_cols",
}


def loops(
    sass: str, markers: tuple[str, ...] = ("HGMMA", "LDGSTS")
) -> list[tuple[str, int, collections.Counter[str]]]:
    """The smallest loop holding each marker opcode: (marker, instructions, opcode counts)."""
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    bodies = []
    for a, text in ins:
        m = re.search(r"BRA\s+`?\(?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) <= a:
            lo = int(m.group(1), 16)
            bodies.append((lo, a, [t for b, t in ins if lo <= b <= a]))
    out = []
    for mk in markers:
        hold = [b for b in bodies if any(mk in t for t in b[2])]
        # the smallest loops first, then every loop that overlaps none taken (the retry
        # branches of mbarrier waits sit out of line and make larger, overlapping "loops")
        inner: list[tuple[int, int, list[str]]] = []
        for b in sorted(hold, key=lambda b: len(b[2])):
            if not any(b[0] <= o[1] and o[0] <= b[1] for o in inner):
                inner.append(b)
        for _lo, _hi, body in inner:
            ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for t in body)
            out.append((mk, len(body), ops))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", default=None)
    ap.add_argument("--maxnreg", type=int, default=None)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--sass", default=None)
    ap.add_argument("--ttgir", default=None, help="write the kernel's TTGIR here")
    ap.add_argument("--ptx", default=None, help="write the kernel's PTX here")
    a = ap.parse_args()
    if a.module:
        spec = importlib.util.spec_from_file_location("lab_kernel", a.module)
        assert spec is not None and spec.loader is not None
        gk = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gk)
    else:
        from ds41_indexer.ops.logits import gluon_kernels as gk
    fn = gk._gluon_logits_kernel
    cx: dict[str, object] = {"HI": 32, "HI_PAD": 32, "PAGE_SIZE": 64, "HAS_CAND": False,
                             "OUT_BF16": False, "HAS_GMAX": True,
                             "STAGES": gk.GLUON_STAGES, "TILES": 16, "NC": 1,
                             "CONSUMER_REGS": 80, "PFAC": False, "LIM": False,
                             "PREGS": getattr(gk, "GLUON_PRODUCER_REGS", 24)}  # fmt: skip
    for kv in a.set:
        k, v = kv.split("=")
        cx[k] = int(v) if v.lstrip("-").isdigit() else (v == "True")
    cx = {k: v for k, v in cx.items() if k in fn.arg_names}
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        sig[name] = "constexpr" if name in cx else PTRS.get(name, "i32")
        if sig[name] != "constexpr" and name not in NOT_DIV16:
            attrs[(i,)] = [["tt.divisibility", 16]]
    maxnreg = a.maxnreg or gk.GLUON_MAXNREG
    nw = getattr(gk, "GLUON_NUM_WARPS", 4)
    c = triton.compile(GluonASTSource(fn, sig, cx, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": nw, "maxnreg": maxnreg})  # fmt: skip
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(c.asm["cubin"])
    sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", f.name],
                          capture_output=True, text=True).stdout  # fmt: skip
    ptx = f.name + ".ptx"
    with open(ptx, "w") as g:
        g.write(c.asm["ptx"])
    regs = re.findall(r"\.maxnreg \d+|setmaxnreg\.\w+\.sync\.aligned\.u32\s+\d+", c.asm["ptx"])
    print("ptx regs:", [" ".join(r.split()) for r in regs])
    pv = subprocess.run([os.path.join(BIN, "ptxas"), "-v", "-arch=sm_90a", ptx, "-o",
                         f.name + ".o"], capture_output=True, text=True)  # fmt: skip
    os.unlink(f.name)
    if a.sass:
        with open(a.sass, "w") as g:
            g.write(sass)
    for path, key in ((a.ttgir, "ttgir"), (a.ptx, "ptx")):
        if path:
            with open(path, "w") as g:
                g.write(c.asm[key])
    print(f"maxnreg {maxnreg} shared {c.metadata.shared} warps {c.metadata.num_warps}")
    keep = ("Used", "arn", "erial", "spill")
    lines = [x[:160] for x in pv.stderr.splitlines() if any(k in x for k in keep)]
    print("ptxas:", " | ".join(lines))
    for mk, n, ops in loops(sass):
        print(f"{mk} loop {n:4d}: " + " ".join(f"{k}:{v}" for k, v in ops.most_common(30)))


if __name__ == "__main__":
    main()
