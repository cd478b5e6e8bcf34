# mypy: disable-error-code="no-untyped-def"
"""Issue 12, tenth session, second round (helper idx10b): offline sm_90a figures of the
persistent-grid lab kernel (`gluon12_kernels.py`, `PERSIST`, `DYN`), no GPU needed.

Compiles the package's Gluon kernel at every one-consumer program shape, the lab kernel with
PERSIST off (must be the package's SASS: compared instruction for instruction, addresses and
parameter offsets aside) and on with items of 16 to 128 tiles (static shares and DYN), for the
bench's geometry (Hi 32, page 64, group maxima, f32 out), and prints registers, spills, shared
memory, the SASS instructions per tile of the consumer and producer loops
(`gluon10_sass.report`) and, for the persistent kernel, the static instructions of its item
loop outside the tile loop (consumer / producer; the query fold included, which runs once a
row change). Then the work per program slot of the package's grid and of the persistent one
(static shares, items of 32 and 16 tiles) at the bench's shapes (132 SMs x 4 programs).

    python packages/ds41-indexer/scripts/issue12/gluon12_sass.py [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gluon7_sass import NOT_DIV16, PTRS  # noqa: E402

NOT_DIV16.add("n_rows")
PTRS["ctr_ptr"] = "*i32"
from gluon10_sass import load, report  # noqa: E402

SLOTS = 132 * 4
SHAPES = [(64, 32768), (64, 131072), (256, 131072), (256, 1048576), (32, 32768), (8, 131072),
          (1, 1048576), (256, 262144)]  # fmt: skip


def _norm(sass: str) -> list[str]:
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            out.append(re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[P]", m.group(1)))
    return out


def _loop_bodies(sass: str) -> list[tuple[int, int, list[str]]]:
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
    return bodies


def item_loops(sass: str) -> dict[str, tuple[int, int]]:
    """(tile loop, item loop) instruction counts of the consumer (HGMMA) and producer (LDGSTS):
    the smallest loop holding the marker, and the smallest loop strictly holding it that holds
    no marker of the other role and, for the consumer, the query fold's 2-byte loads (so not
    the loop over blocks of 32 tiles; the retry branches of mbarrier waits sit out of line and
    make larger, overlapping or role-crossing "loops", which this leaves out)."""
    bodies = _loop_bodies(sass)
    out = {}
    for mk, other, role in (("HGMMA", "LDGSTS", "consumer"), ("LDGSTS", "HGMMA", "producer")):
        hold = sorted((b for b in bodies if any(mk in t for t in b[2])), key=lambda b: len(b[2]))
        inner = hold[0]
        outer = [
            b
            for b in hold
            if b[0] < inner[0]
            and inner[1] < b[1]
            and not any(other in t for t in b[2])
            and (role == "producer" or any("LDG.E.U16" in t for t in b[2]))
        ]
        out[role] = (len(inner[2]), len(outer[0][2]) if outer else 0)
    return out


def fold_block(sass: str) -> int:
    """Instructions of the largest forward-branched block in the consumer's item loop: the
    query fold (skipped when the row does not change)."""
    bodies = _loop_bodies(sass)
    hold = sorted((b for b in bodies if any("HGMMA" in t for t in b[2])), key=lambda b: len(b[2]))
    inner = hold[0]
    outer = next(
        b
        for b in hold
        if b[0] < inner[0] and inner[1] < b[1] and any("LDG.E.U16" in t for t in b[2])
    )
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2).strip()))
    seg = [(a, t) for a, t in ins if outer[0] <= a <= outer[1] and not inner[0] <= a <= inner[1]]
    best = 0
    for a, t in seg:
        m = re.search(r"BRA\s+`?\(?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) > a:
            tgt = int(m.group(1), 16)
            n = sum(1 for b, _ in seg if a < b < tgt)
            if any("LDG.E.U16" in x for b, x in seg if a < b < tgt):
                best = max(best, n)
    return best


def grid_rows(lines: list[str]) -> None:
    import math

    def cfg(rows: int, spans: int) -> tuple[int, int]:  # the package's gluon_config
        p = rows * spans
        if p <= 256:
            return 2, 16
        if p >= 65536:
            return 1, 128
        if p >= 4096:
            return 1, 64
        if p >= 1024:
            return 1, 32
        return 1, 16

    lines.append("")
    lines.append(f"# work per program slot ({SLOTS} = 132 SMs x 4): spans S = rows x ctx / 1024;")
    lines.append("# package: programs of T/16 spans, waves = programs / slots; per slot: the most")
    lines.append(
        "# programs (each with its fixed cost) and spans a slot runs; persistent with items"
    )
    lines.append(
        "# of T32 / T16: P = min(items, slots) programs, one a slot, the most spans a slot"
    )
    lines.append("# runs (ceil(items / P) items)")
    lines.append(f"{'rows x ctx':>14s} {'S':>7s} {'package':>15s} {'waves':>6s} "
                 f"{'progs/slot':>10s} {'spans/slot':>10s} | {'P':>4s} {'T32 spans':>9s} "
                 f"{'T16 spans':>9s} {'S / slots':>9s}")  # fmt: skip
    for rows, ctx in SHAPES:
        spans = ctx // 1024
        s = rows * spans
        nc, t = cfg(rows, spans)
        progs = rows * math.ceil(spans / (t // 16))
        per = math.ceil(progs / SLOTS)
        i32 = rows * math.ceil(spans / 2)
        p = min(i32, SLOTS)
        lines.append(f"{rows:>5d} x {ctx:>7d} {s:>7d} {f'NC{nc} T{t} {progs}':>15s} "
                     f"{progs / SLOTS:6.2f} {per:>10d} {per * t // 16:>10d} | {p:>4d} "
                     f"{2 * math.ceil(i32 / p):>9d} {math.ceil(s / min(s, SLOTS)):>9d} "
                     f"{s / SLOTS:9.2f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    pkg = load(None)
    lab = load(os.path.join(HERE, "gluon12_kernels.py"))
    lines = [
        "# offline sm_90a SASS (gluon12_sass.py): Hi 32, page 64, group maxima, f32 out, launch",
        "# cap 64 registers; consumer / producer: SASS instructions per tile in the tile loop (per",
        "# thread / lane); per tile: 4 x consumer + producer warp-instructions; item loop: the",
        "# persistent kernel's static instructions in its item loop outside the tile loop,",
        "# consumer (every item + the query fold's block, run on a row change) / producer;",
        "# spill st/ld: ptxas's bytes; in loop: STL/LDL in the tile loop",
        f"{'variant':24s} {'consumer':>8s} {'producer':>8s} {'per tile':>8s} {'item loop':>13s} "
        f"{'regs (setmaxnreg)':>18s} {'spill st/ld':>11s} {'in loop':>7s} {'shared':>6s}",
    ]
    print("\n".join(lines), flush=True)
    variants = [(f"package NC1 T{t}", pkg, {"TILES": t}) for t in (16, 32, 64, 128)]
    # (every constexpr given: GluonASTSource does not apply the signature's defaults)
    off = {"PERSIST": False, "DYN": False}
    variants += [(f"lab PERSIST off T{t}", lab, {"TILES": t, **off}) for t in (16, 32)]
    for dyn in (False, True):
        name = "lab PERSIST DYN" if dyn else "lab PERSIST"
        variants += [
            (f"{name} T{t}", lab, {"TILES": t, "PERSIST": True, "DYN": dyn})
            for t in (16, 32, 64, 128)
        ]
    sass: dict[str, str] = {}
    for name, mod, extra in variants:
        r = report(mod, {"NC": 1, **extra})
        sass[name] = r["sass"]  # type: ignore[assignment]
        item = "-"
        if extra.get("PERSIST"):
            sl = item_loops(r["sass"])  # type: ignore[arg-type]
            c_in, c_out = sl["consumer"]
            p_in, p_out = sl["producer"]
            fb = fold_block(r["sass"])  # type: ignore[arg-type]
            item = f"{c_out - c_in - fb}+{fb}/{p_out - p_in}"
        cons = "/".join(str(x) for x in r["consumer_loop"])  # type: ignore[attr-defined]
        prod = "/".join(str(x) for x in r["producer_loop"])  # type: ignore[attr-defined]
        lsp = "/".join(str(x) for x in r["consumer_loop_spill_ops"])  # type: ignore[attr-defined]
        ser = " SERIALIZED" if r["serialized_wgmma"] else ""
        line = (f"{name:24s} {cons:>8s} {prod:>8s} {r['warp_instr_per_tile']:8.0f} {item:>13s} "
                f"{r['setmaxnreg']!s:>18s} {r['spill_st_ld']!s:>11s} {lsp:>7s} "
                f"{r['shared']:6d}{ser}")  # fmt: skip
        print(line, flush=True)
        lines.append(line)
    for t in (16, 32):
        same = _norm(sass[f"package NC1 T{t}"]) == _norm(sass[f"lab PERSIST off T{t}"])
        lines.append(
            f"# lab PERSIST off T{t} == package NC1 T{t}, instruction for instruction: {same}"
        )
    n0 = len(lines)
    grid_rows(lines)
    print("\n".join(lines[n0 - 2 :]), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
