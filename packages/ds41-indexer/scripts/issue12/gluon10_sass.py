# mypy: disable-error-code="no-untyped-def,var-annotated"
"""Issue 12, ninth session, round 2 (helper idx9b): offline sm_90a comparison, no GPU needed.

Compiles the package's Gluon logits kernel (main) and the lab copy `gluon10_kernels.py` with
PFAC off (must match main instruction for instruction) and on (the producer computes the block
scale factors), for the bench's geometry (Hi 32, page 64, group maxima on, f32 output) at every
program shape `gluon_config` picks, and prints per shape: registers, spills, shared memory,
ptxas warnings and the static SASS instructions per loop iteration (one 64-entry tile) of the
consumer loop (per thread) and of the producer loop (per lane of its one warp), with the
program's warp-instructions per tile: NC consumer warpgroups' 4 warps each take every NC-th
tile, so a tile costs 4 x consumer + 1 x producer warp-instructions.

    python packages/ds41-indexer/scripts/issue12/gluon10_sass.py [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gluon7_sass import BIN, NOT_DIV16, PTRS, loops  # noqa: E402


def load(path: str | None):  # type: ignore[no-untyped-def]
    if path is None:
        from ds41_indexer.ops.logits import gluon_kernels

        return gluon_kernels
    spec = importlib.util.spec_from_file_location("gluon10_kernels", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def report(gk, sets: dict[str, object]) -> dict[str, object]:  # type: ignore[no-untyped-def]
    fn = gk._gluon_logits_kernel
    cx: dict[str, object] = {"HI": 32, "HI_PAD": 32, "PAGE_SIZE": 64, "HAS_CAND": False,
                             "OUT_BF16": False, "HAS_GMAX": True, "STAGES": gk.GLUON_STAGES,
                             "TILES": 16, "NC": 1, "CONSUMER_REGS": gk.GLUON_CONSUMER_REGS,
                             "PFAC": False, "PREGS": gk.GLUON_PRODUCER_REGS,
                             "LIM": False}  # fmt: skip
    cx |= sets
    cx = {k: v for k, v in cx.items() if k in fn.arg_names}
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        sig[name] = "constexpr" if name in cx else PTRS.get(name, "i32")
        if sig[name] != "constexpr" and name not in NOT_DIV16:
            attrs[(i,)] = [["tt.divisibility", 16]]
    c = triton.compile(GluonASTSource(fn, sig, cx, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": gk.GLUON_NUM_WARPS,
                                "maxnreg": gk.GLUON_MAXNREG})  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        cubin, ptx = os.path.join(d, "k.cubin"), os.path.join(d, "k.ptx")
        with open(cubin, "wb") as f:
            f.write(c.asm["cubin"])
        with open(ptx, "w") as g:
            g.write(c.asm["ptx"])
        sass = subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", cubin],
                              capture_output=True, text=True).stdout  # fmt: skip
        pv = subprocess.run([os.path.join(BIN, "ptxas"), "-v", "-arch=sm_90a", ptx, "-o",
                             os.path.join(d, "k.o")], capture_output=True, text=True)  # fmt: skip
    regs = re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)", c.asm["ptx"])
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", pv.stderr)
    found = loops(sass)
    cons = [n for mk, n, _ in found if mk == "HGMMA"]
    # spill instructions inside the consumer loops (each consumer warpgroup's loop)
    loop_spills = [sum(v for k, v in ops.items() if k.startswith(("STL", "LDL")))
                   for mk, _n, ops in found if mk == "HGMMA"]  # fmt: skip
    prod = [n for mk, n, _ in found if mk == "LDGSTS"]
    ncons = int(cx["NC"])  # type: ignore[call-overload]
    per_tile = 4 * sum(cons) / len(cons) + prod[0] if cons and prod else float("nan")
    return {
        "setmaxnreg": sorted({int(r) for _, r in regs}),
        "spill_st_ld": (int(spill.group(1)), int(spill.group(2))) if spill else None,
        "serialized_wgmma": "C7512" in pv.stderr or "C7515" in pv.stderr,
        "shared": c.metadata.shared,
        "consumer_loop": cons,
        "consumer_loop_spill_ops": loop_spills,
        "producer_loop": prod,
        "warp_instr_per_tile": per_tile,
        "nc": ncons,
        "ops": {mk: dict(ops) for mk, _n, ops in found},
        "sass": sass,
    }


SHAPES = [(1, 128), (1, 64), (1, 32), (1, 16), (2, 16)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="also write the table here")
    ap.add_argument("--sass-dir", default=None, help="write each variant's SASS here")
    a = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    main_k = load(None)
    lab = load(os.path.join(HERE, "gluon10_kernels.py"))
    lines = [
        "# offline sm_90a SASS (gluon10_sass.py): Hi 32, page 64, group maxima, f32 out,",
        "# launch cap 64 registers a thread;",
        "# consumer / producer: static SASS instructions per tile in the loop (per thread / lane);",
        "# per tile: 4 x consumer + producer warp-instructions (each consumer warpgroup's loop",
        "# runs on its own tiles); spill st/ld: ptxas's bytes (whole kernel); in loop: STL/LDL",
        "# instructions inside each consumer loop; LIM: the lab's int32 tile-relative masks",
        f"{'shape':10s} {'variant':24s} {'consumer':>9s} {'producer':>8s} {'per tile':>8s} "
        f"{'regs (setmaxnreg)':>22s} {'spill st/ld':>11s} {'in loop':>7s} {'shared':>6s}",
    ]
    print("\n".join(lines), flush=True)
    keep: dict[tuple[int, int, str], dict[str, object]] = {}
    for nc, tiles in SHAPES:
        variants: list[tuple[str, object, dict[str, object]]] = [
            ("main (package)", main_k, {}), ("lab, knobs off", lab, {}),
            ("lab LIM", lab, {"LIM": True})]  # fmt: skip
        knob_sets: tuple[dict[str, object], ...] = ({"PFAC": True}, {"PFAC": True, "LIM": True})
        for knobs in knob_sets:
            for pr in (24, 32):
                name = "lab " + "+".join(knobs) + f", PREGS {pr}"
                variants.append((name, lab, {**knobs, "PREGS": pr}))
        for name, mod, extra in variants:
            r = report(mod, {"NC": nc, "TILES": tiles, **extra})
            keep[(nc, tiles, name)] = r
            cons = "/".join(str(x) for x in r["consumer_loop"])  # type: ignore[attr-defined]
            prod = "/".join(str(x) for x in r["producer_loop"])  # type: ignore[attr-defined]
            ser = " SERIALIZED" if r["serialized_wgmma"] else ""
            lsp = "/".join(str(x) for x in r["consumer_loop_spill_ops"])  # type: ignore[attr-defined]
            line = (f"NC{nc} T{tiles:<4d} {name:24s} {cons:>9s} {prod:>8s} "
                    f"{r['warp_instr_per_tile']:8.0f} {r['setmaxnreg']!s:>22s} "
                    f"{r['spill_st_ld']!s:>11s} {lsp:>7s} {r['shared']:6d}{ser}")  # fmt: skip
            print(line, flush=True)
            lines.append(line)
            if a.sass_dir:
                tag = re.sub(r"[^A-Za-z0-9]+", "_", f"NC{nc}_T{tiles}_{name}").strip("_")
                with open(os.path.join(a.sass_dir, tag + ".sass"), "w") as f:
                    f.write(r["sass"])  # type: ignore[arg-type]
    lines.append("")
    lines.append("# opcode changes main -> lab (PREGS 24), per tile: consumer (a thread) and")
    lines.append("# producer (per lane) loops; opcodes whose count is unchanged are left out")
    for tiles, var in ((128, "PFAC"), (32, "PFAC"), (128, "PFAC+LIM")):
        ra = keep[(1, tiles, "main (package)")]
        rb = keep[(1, tiles, f"lab {var}, PREGS 24")]
        lines.append(f"## NC1 T{tiles}: main -> lab {var}")
        print(lines[-1], flush=True)
        for mk, role in (("HGMMA", "consumer"), ("LDGSTS", "producer")):
            ca = collections.Counter(ra["ops"][mk])  # type: ignore[index]
            cb = collections.Counter(rb["ops"][mk])  # type: ignore[index]
            ks = sorted(set(ca) | set(cb), key=lambda k: (cb[k] - ca[k], k))
            ch = " ".join(f"{k} {ca[k]}->{cb[k]}" for k in ks if ca[k] != cb[k])
            lines.append(f"NC1 T{tiles} {role} {sum(ca.values())}->{sum(cb.values())}: {ch}")
            print(lines[-1], flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
