"""Offline figures of the lab copy `gluon_lab9.py` against the production Gluon kernel (no GPU):
registers, spills and shared memory of each (ptxas for sm_90a), and per 32-key tile each
partition's loop in SASS (instructions, shared-memory bytes), for MXFP8 and NVFP4 tiles
(window-only kernels, C_FMT = 3, have branch-free producer loops) and the V4.1 pair
(MXFP8 window + NVFP4 compressed); then a numpy check of the lab decode's channel order
(the word-pair inline PTX outputs and the join / permute that reassemble them).

    PYTHONPATH=packages/ds41-cache/src:packages/ds41-attention/src \\
        python packages/ds41-attention/scripts/lab9_offline.py [--out FILE]
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptxas_report import report
from sass_loops import loops, parse, paths

HERE = os.path.dirname(os.path.abspath(__file__))
LAB9 = os.path.join(HERE, "gluon_lab9.py")
# lab variants (module constants replaced, as gluon_profile.py's LAB9_SPECS)
VARIANTS = {"lab9": {}, "lab9_nohand": {"HANDOVER": 0}, "lab9_k4": {"ONE_KEY": 0},
            "lab9_ks4": {"KSTAGES": 4},
            "lab9_ks4p136": {"KSTAGES": 4, "C1_REGS": 160, "PRODUCER_REGS": 136},
            "lab9_p136": {"C1_REGS": 160, "PRODUCER_REGS": 136}}  # fmt: skip
ROLE = {208: "consumer 0", 168: "consumer 1", 160: "consumer 1", 128: "producer",
        136: "producer"}  # fmt: skip
PAIRS = ((0, 1), (0, 0), (0, 2), (2, 2), (0, 3))


def _variant(tmp: str, name: str, consts: dict[str, int]) -> str:
    with open(LAB9) as f:
        src = f.read()
    for k, v in consts.items():
        src, n = re.subn(rf"^{k} = gl\.constexpr\([^)]*\)", f"{k} = gl.constexpr({v})", src,
                         flags=re.M)  # fmt: skip
        assert n == 1, k
    path = os.path.join(tmp, f"{name}.py")
    with open(path, "w") as f:
        f.write(src)
    return path


def _range(xs: list[float]) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def tile_counts(sass: str) -> dict[str, str]:
    """SASS instructions a tile executes in each partition's loop (paths through the loop
    body; a lab9 producer iteration runs two tiles: its full paths / 2), and the producer's
    shared-memory and global-load instructions per thread and tile. Producer paths are told
    apart by their opcodes: NVFP4 decode has F2FP (its e4m3 block scales), production's
    window / compressed copies 9 / 5 LDGSTS."""
    ins = parse(sass)
    res: dict[str, list[float]] = {}
    extra: dict[str, str] = {}
    for lp in loops(ins, 40):
        role = ROLE.get(lp["regs"] or 0, str(lp["regs"]))
        ps = paths(ins, lp["label"])
        if role != "producer":
            res.setdefault(role, []).extend(p["len"] for p in ps)
            continue
        top = max(p["ops"]["LDG"] + p["ops"]["LDGSTS"] for p in ps)
        for p in ps:
            ops = p["ops"]
            two = ops["LDGSTS"] == 0 and ops["LDG"] + ops["LDGSTS"] == top and top > 0
            per = 2 if two else 1
            if not two and ops["LDGSTS"] == 0:
                continue  # a lab9 phase's odd last tile
            kind = "NVFP4 tile" if ops["F2FP"] else "MXFP8 tile"
            if ops["LDGSTS"]:
                if ops["F2FP"] not in (0, 8) or ops["LDGSTS"] not in (5, 9):
                    continue  # infeasible (the two halves' format branches disagree)
                kind += ", MXFP8 fetch" if ops["LDGSTS"] == 9 else ", NVFP4 fetch"
            res.setdefault(f"producer {kind}", []).append(p["len"] / per)
            sm = [f"{k} {ops[k] / per:g}" for k in ("LDGSTS", "LDS", "LDSM", "STS", "STSM", "LDG",
                                                     "BAR", "LDL", "STL") if ops[k]]  # fmt: skip
            extra[f"producer {kind}"] = ", ".join(sm)
    out = {k: _range(v) for k, v in res.items()}
    for k, v in extra.items():
        out[k] += f" ({v})"
    return out


def kernel_rows(name: str, module: str | None, tmp: str, out: list[str]) -> None:
    """Resources of every format pair (and split mode of the V4.1 pair); per-tile counts of
    the MXFP8-only (03), NVFP4-as-window-only (13, offline only) and V4.1 (01) kernels."""
    res = []
    for wf, cf in PAIRS:
        d = os.path.join(tmp, f"{name}_{wf}{cf}")
        os.makedirs(d, exist_ok=True)
        line = report(None, w_fmt=wf, c_fmt=cf, sass_dir=d, module=module)
        res.append(f"{wf}{cf}: " + line.split(": ", 1)[1].replace("regs 168 ", ""))
        if (wf, cf) in ((0, 1), (0, 3)):
            for k, v in tile_counts(os.path.join(d, f"gluon_{wf}{cf}.sass")).items():
                out.append(f"  {name} ({wf}{cf}) {k}: {v}")
    d = os.path.join(tmp, f"{name}_13")
    os.makedirs(d, exist_ok=True)
    report(None, w_fmt=1, c_fmt=3, sass_dir=d, module=module)
    for k, v in tile_counts(os.path.join(d, "gluon_13.sass")).items():
        if k.startswith("producer"):
            out.append(f"  {name} (13) {k}: {v}")
    line = report(None, w_fmt=0, c_fmt=1, split=True, module=module)
    res.append("01 split: " + line.split(": ", 1)[1].replace("regs 168 ", ""))
    out.append(f"{name} resources: " + "; ".join(res))


def channel_order_check() -> list[str]:
    """The lab decode's tensor-level channel order, emulated: each byte (or nibble) labelled by
    its channel, the inline PTX's outputs per word pair as described in gluon_lab9.py, then
    the same join / permute / reshape; the result must be the channels in order."""
    sub = 4
    res = []
    # MXFP8: word w holds channels 4w .. 4w + 3 (byte b = channel 4w + b); pack 2 over words
    # (2p, 2p + 1) = A, B; output k: k = 0 (A0, A1), 1 (A2, A3), 2 (B0, B1), 3 (B2, B3)
    o = np.zeros((4, sub, 64), dtype=np.int64)
    for p in range(32):
        for k in range(4):
            word = 2 * p + k // 2
            for q in range(2):
                o[k, :, 2 * p + q] = 4 * word + 2 * (k % 2) + q

    def pairs(x: np.ndarray, s: int) -> np.ndarray:
        return x.reshape(sub, s // 2, 2)

    j = np.stack([np.stack([pairs(o[0], 64), pairs(o[1], 64)], -1),
                  np.stack([pairs(o[2], 64), pairs(o[3], 64)], -1)], -1)  # fmt: skip
    f = np.transpose(j, [0, 1, 4, 3, 2]).reshape(sub, 256)
    res.append(f"MXFP8 channel order: {bool((f == np.arange(256)).all())}")
    # NVFP4: word w holds channels 8w .. 8w + 7 (byte b: low nibble 2b, high nibble 2b + 1);
    # output 4 i + j of word pair (A, B): byte j of word i, low nibble (q = 0) then high (q = 1)
    o8 = np.zeros((8, sub, 32), dtype=np.int64)
    for p in range(16):
        for i in range(2):
            for jj in range(4):
                for q in range(2):
                    o8[4 * i + jj, :, 2 * p + q] = 8 * (2 * p + i) + 2 * jj + q
    j8 = np.stack([
        np.stack([np.stack([pairs(o8[0], 32), pairs(o8[1], 32)], -1),
                  np.stack([pairs(o8[2], 32), pairs(o8[3], 32)], -1)], -1),
        np.stack([np.stack([pairs(o8[4], 32), pairs(o8[5], 32)], -1),
                  np.stack([pairs(o8[6], 32), pairs(o8[7], 32)], -1)], -1),
    ], -1)  # fmt: skip
    f8 = np.transpose(j8, [0, 1, 5, 4, 3, 2]).reshape(sub, 256)
    res.append(f"NVFP4 channel order: {bool((f8 == np.arange(256)).all())}")
    return res


def main() -> None:
    argv = sys.argv[1:]
    out_path = argv[argv.index("--out") + 1] if "--out" in argv else None
    out: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        kernel_rows("production", None, tmp, out)
        for name, consts in VARIANTS.items():
            kernel_rows(name, _variant(tmp, name, consts), tmp, out)
    out += channel_order_check()
    text = "\n".join(out)
    print(text)
    if out_path:
        with open(out_path, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
