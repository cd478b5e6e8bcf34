"""Per-loop instruction and shared-memory counts of a warp-specialized kernel's SASS (offline).

    python packages/ds41-attention/scripts/sass_loops.py DIR_OR_FILE... [--min 40] [--ops]

Reads the `.sass` files `ptxas_report.py --sass DIR` writes. A loop is a label and the last
backward branch to it; its body is what lies between them (out-of-line blocks, such as
mbarrier try-wait retries, are not in it). Each loop is attributed to the partition whose
`USETMAXREG` (setmaxnreg) precedes it, named by that register count (with the production
split: 208 consumer 0, 168 consumer 1, 128 the producer). Printed per loop: instructions,
the no-op `@!PT LDS RZ, [RZ]` fillers ptxas places after cp.async among them, branches inside
the body, and shared-memory traffic per thread (LDS / STS / LDSM / STSM bytes, cp.async bytes
written) and per warpgroup (wgmma operands read from shared memory by descriptor). A body
with a branch executes only one side of it per iteration: compile per format pair (e.g.
window-only kernels, C_FMT = 3) to get branch-free bodies, or `--paths` (each path through
the body: its instruction count). `--ops` adds the opcode histogram.
"""

from __future__ import annotations

import collections
import os
import re
import sys

LINE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?P<ins>.*?)\s*;?\s*$")
LABEL = re.compile(r"^(?P<l>\.L_x_\d+):")
BRA = re.compile(r"BRA(?:\.U)?\s+`\((?P<l>\.L_x_\d+)\)")
SETMAX = re.compile(
    r"USETMAXREG\.(?:TRY_ALLOC|DEALLOC)\.CTAPOOL\s+(?:UP\d+,\s*)?0x(?P<n>[0-9a-f]+)"
)
WIDTH = {"128": 16, "64": 8, "U8": 1, "S8": 1, "U16": 2, "S16": 2}
HGMMA = re.compile(r"HGMMA\.64x(?P<n>\d+)x(?P<k>\d+)\.F32\.BF16\s+\S+,\s*(?P<a>\S+)")


def parse(path: str) -> list[tuple[str | None, str]]:
    """[(label or None, instruction text)] in order."""
    out: list[tuple[str | None, str]] = []
    label = None
    with open(path) as f:
        for raw in f:
            m = LABEL.match(raw.strip())
            if m:
                label = m.group("l")
                continue
            m = LINE.match(raw)
            if m:
                out.append((label, m.group("ins")))
                label = None
    return out


def _smem_bytes(ins: str) -> tuple[str, int] | None:
    """(kind, bytes per thread) of a shared-memory instruction."""
    body = ins.split()
    op = body[1] if body[0].startswith("@") else body[0]
    if body[0] == "@!PT":
        return None
    base, *mods = op.split(".")
    if base in ("LDS", "STS"):
        w = 4
        for m in mods:
            w = WIDTH.get(m, w)
        return base, w
    if base in ("LDSM", "STSM"):
        n = 1
        for m in mods:
            if m in ("2", "4"):
                n = int(m)
        return base, 4 * n
    if base == "LDGSTS":
        w = 4
        for m in mods:
            w = WIDTH.get(m, w)
        return "LDGSTS", w
    return None


def loops(ins: list[tuple[str | None, str]], min_len: int) -> list[dict]:
    pos = {lab: i for i, (lab, _) in enumerate(ins) if lab}
    found: dict[str, int] = {}
    for i, (_lab, text) in enumerate(ins):
        m = BRA.search(text)
        # a loop's back edge is conditional; out-of-line retry blocks jump back unconditionally
        if m and text.startswith("@") and m.group("l") in pos and pos[m.group("l")] < i:
            found[m.group("l")] = i  # the last backward branch to the label
    res = []
    for lab, end in found.items():
        start = pos[lab]
        if end - start + 1 < min_len:
            continue
        regs = None
        for j in range(start, -1, -1):
            m = SETMAX.search(ins[j][1])
            if m:
                regs = int(m.group("n"), 16)
                break
        body = [t for _, t in ins[start : end + 1]]
        if any(t.startswith(("USETMAXREG", "EXIT")) for t in body):
            continue  # not a loop of one partition
        ops: collections.Counter[str] = collections.Counter()
        smem: collections.Counter[str] = collections.Counter()
        smem_n: collections.Counter[str] = collections.Counter()
        fillers = 0
        branches = 0
        wg_bytes = 0
        for t in body:
            parts = t.split()
            if parts[0] == "@!PT":
                fillers += 1
                continue
            op = parts[1] if parts[0].startswith("@") else parts[0]
            ops[op.split(".")[0]] += 1
            if op.startswith("BRA") and t is not body[-1]:
                branches += 1
            sb = _smem_bytes(t)
            if sb:
                smem[sb[0]] += sb[1]
                smem_n[sb[0]] += 1
            m = HGMMA.search(t)
            if m:
                n, k = int(m.group("n")), int(m.group("k"))
                wg_bytes += n * k * 2 + (0 if m.group("a").startswith("R") else 64 * k * 2)
        res.append({"label": lab, "regs": regs, "len": len(body) - fillers, "fillers": fillers,
                    "branches": branches, "ops": ops, "smem": smem, "smem_n": smem_n,
                    "wgmma_smem_bytes": wg_bytes})  # fmt: skip
    return res


def paths(ins: list[tuple[str | None, str]], label: str, limit: int = 4096) -> list[dict]:
    """Every path through the body of the loop at `label` (forward branches inside the body
    taken or not, from the label to its back edge; branches out of the body end a path, as
    retry blocks return to where they left): per path its instruction count (no-op fillers
    excluded) and opcode histogram, so that a body with format branches gives the count of
    each kind of tile."""
    pos = {lab: i for i, (lab, _) in enumerate(ins) if lab}
    start = pos[label]
    end = max(i for i, (_, t) in enumerate(ins)
              if (m := BRA.search(t)) and m.group("l") == label and i > start)  # fmt: skip
    out: list[dict] = []
    stack: list[tuple[int, int, collections.Counter[str]]] = [(start, 0, collections.Counter())]
    while stack and len(out) < limit:
        i, n, ops = stack.pop()
        while True:
            t = ins[i][1]
            parts = t.split()
            if parts[0] != "@!PT":
                n += 1
                ops[(parts[1] if parts[0].startswith("@") else parts[0]).split(".")[0]] += 1
            if i == end:
                out.append({"len": n, "ops": ops})
                break
            m = BRA.search(t)
            if m:
                tgt = pos.get(m.group("l"), -1)
                inside = start < tgt <= end
                if t.startswith("@"):
                    if inside and tgt > i:
                        stack.append((tgt, n, collections.Counter(ops)))
                elif inside and tgt > i:
                    i = tgt
                    continue
                elif not inside:
                    i += 1  # an out-of-line block that comes back here
                    continue
            i += 1
    return out


def report(path: str, min_len: int, show_ops: bool) -> None:
    print(f"== {os.path.basename(path)}")
    for lp in loops(parse(path), min_len):
        sm = ", ".join(f"{k} {lp['smem_n'][k]} x = {v} B" for k, v in sorted(lp["smem"].items()))
        print(f"  loop {lp['label']} (setmaxnreg {lp['regs']}): {lp['len']} instructions "
              f"(+{lp['fillers']} @!PT fillers), {lp['branches']} branches inside; "
              f"shared per thread: {sm or '-'}; wgmma operands from shared per warpgroup: "
              f"{lp['wgmma_smem_bytes']} B")  # fmt: skip
        if show_ops:
            print("    " + ", ".join(f"{k} {v}" for k, v in lp["ops"].most_common()))
        if "--paths" in sys.argv:
            ps = paths(parse(path), lp["label"])
            kinds = collections.Counter(p["len"] for p in ps)
            print(f"    paths: {len(ps)}, instructions per path: {dict(sorted(kinds.items()))}")


if __name__ == "__main__":
    argv = sys.argv[1:]
    min_len = int(argv[argv.index("--min") + 1]) if "--min" in argv else 40
    args = [a for a in argv if not a.startswith("--") and a != str(min_len)]
    for p in args:
        files = sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".sass")) \
            if os.path.isdir(p) else [p]  # fmt: skip
        for f in files:
            report(f, min_len, "--ops" in argv)
