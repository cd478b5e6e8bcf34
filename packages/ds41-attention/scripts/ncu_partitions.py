"""Where a warp-specialized kernel's warps spend their time, per partition, from Nsight
Compute's per-instruction stall samples (offline; the GPU run only records them).

On the H200 (Firecracker machines, where ncu reads the counters):

    ncu --clock-control none --set full --import-source no -k regex:_gluon_sparse_attn_kernel \
        --launch-skip 2 --launch-count 1 -o prof python3 driver.py
    ncu --import prof.ncu-rep --page source --print-source sass --csv > prof_sass.csv

then here: `python packages/ds41-attention/scripts/ncu_partitions.py prof_sass.csv [--warps
4,4,4]`, `--warps` the warps of each partition in the order their code lies in the SASS (the
default: the attention kernels' three warpgroups; the indexer's logits kernel: e.g. 4,1).

A partition is the code after a `USETMAXREG.TRY_ALLOC` (setmaxnreg) up to the next one,
named by the count it asks for (production one-CTA kernel: 168 consumer 1, 128 the producer,
then 256 the default partition, consumer 0, which settles at 208 inside); the out-of-line
mbarrier retry loops after the last EXIT are their own group. Within a partition,
instructions are grouped by how often they executed per program (per CTA): the tile loop's
body runs once a tile, the prologue and epilogue once a program. Printed per group: its share
of the partition's samples and the top stall reasons, in ncu's names: long_sb (a global load
or an mbarrier try-wait), lg (the global load / store queue full), barrier (a named
barrier), short_sb (a shared-memory result), selected (issuing). Samples are taken per warp
at a fixed interval, so a group's share of a partition's samples is its share of that
partition's warps' lifetime.
"""

from __future__ import annotations

import argparse
import collections
import csv
import re

SETMAX = re.compile(r"USETMAXREG\.(?:TRY_ALLOC|DEALLOC)\.CTAPOOL\s+(?:UP\d+,\s*)?0x([0-9a-f]+)")


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def partitions(rows: list[list[str]], src: int) -> list[tuple[str, int, int]]:
    """(name, first row, end row) of each partition: a TRY_ALLOC opens one, and so does a
    DEALLOC below the workers' base count (the kernel's first DEALLOC: a worker partition
    that asks for fewer registers than the base gives them back instead of allocating); the
    last EXIT closes the partitions and opens the retry loops."""
    starts: list[tuple[str, int]] = [("entry", 0)]
    last_exit = max(i for i, r in enumerate(rows) if "EXIT" in r[src])
    base = None
    for i, r in enumerate(rows):
        m = SETMAX.search(r[src])
        if not m:
            continue
        n = int(m.group(1), 16)
        if "TRY_ALLOC" in r[src]:
            starts.append((f"setmaxnreg {n}", i))
        elif base is None:
            base = n
        elif n < base:
            starts.append((f"setmaxnreg {n}", i))
    starts.append(("retry loops", last_exit + 1))
    ends = [a for _, a in starts[1:]] + [len(rows)]
    return [(n, a, b) for (n, a), b in zip(starts, ends, strict=True)]


def main(path: str, warps: list[int]) -> None:
    with open(path) as f:
        table = list(csv.reader(f))
    hdr, rows = table[1], table[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    src, ex = ix["Source"], ix["Instructions Executed"]
    samp = ix["Warp Stall Sampling (All Samples)"]
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(_num(r[samp]) for r in rows)
    # the kernel's first instruction runs once a warp of the CTA
    programs = _num(rows[0][ex]) / sum(warps)
    print(f"{path}: {len(rows)} instructions, {total:.0f} samples, {programs:.0f} programs")
    k = 0
    for name, a, b in partitions(rows, src):
        if name.startswith("setmaxnreg"):
            k += 1
        # a partition's code runs once a warp of it: per program, programs x its warps
        per_prog = programs * (warps[min(k, len(warps)) - 1] if k > 0 else sum(warps))
        groups: dict[float, dict[str, float]] = collections.defaultdict(
            lambda: collections.defaultdict(float)
        )
        for r in rows[a:b]:
            g = groups[round(_num(r[ex]) / per_prog, 2)]
            g["samples"] += _num(r[samp])
            for s in stalls:
                g[s[6:]] += _num(r[ix[s]])
        part = sum(g["samples"] for g in groups.values())
        if part == 0:
            continue
        print(f"\n{name} (rows {a}-{b}): {part / total * 100:.1f}% of all samples")
        for times, g in sorted(groups.items(), key=lambda kv: -kv[1]["samples"])[:6]:
            if g["samples"] == 0:
                continue
            top = sorted(((k, v) for k, v in g.items() if k != "samples"), key=lambda kv: -kv[1])[
                :3
            ]
            why = ", ".join(f"{k} {v / g['samples'] * 100:.0f}%" for k, v in top)
            print(f"  runs {times:6.2f} a program: {g['samples'] / part * 100:5.1f}%  ({why})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--warps", default="4,4,4", help="warps of each partition, in SASS order")
    a = ap.parse_args()
    main(a.csv, [int(w) for w in a.warps.split(",")])
