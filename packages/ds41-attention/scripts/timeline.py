"""Issue 11, twenty-seventh session: where a one-CTA program's time goes, by `%globaltimer`.

Builds a lab copy of the one-CTA Gluon kernel (`ops/sparse_attention/gluon_kernels.py` as of
commit BASE, edited as text at import; same arithmetic) that writes `%globaltimer` stamps per
program and the SM it ran on. BASE is the last production kernel the stamps' anchors fit: from
the twenty-eighth session production runs a persistent grid past one wave, and its one-item
grid, refactored around walks shared with the persistent partitions, compiles to BASE's SASS
(offline, but for the parameter offsets). The lab kernel is launched by BASE's own launcher
(`lab_tree.sh DEST --base BASE`; run from a clone: the copy is read with git):

    k_start   the kernel's first statement after the dependent-launch wait (default warps)
    p_start   the producer partition's start
    p_q       the producer's arrival on Q's barrier (Q landed, tiles 0 and 1 gathered)
    p_first   the producer's arrival on tile 0's filled barrier
    p_loop    the producer's tile loop done
    p_end     the producer's end (after its L2 prefetch and last wait_group)
    c0_start  consumer 0's start
    c0_q      consumer 0 past Q's barrier and tile 0's filled barrier
    c0_first  consumer 0 holds tile 0's scores
    c0_loop   consumer 0's last P.V done (tile loop and the peeled last tile)
    c0_end    consumer 0's output stored
    c1_start  consumer 1's start
    c1_loop   consumer 1's last P.V done
    c1_end    consumer 1's output stored
    c0_denom  consumer 0's arrival with the denominators for consumer 1
    c0_staged consumer 0's bf16 output half in shared memory (before its global stores)
    c1_staged consumer 1's, likewise
    c1_denom  consumer 1 past its wait for the denominators

On the H200 (`--run`) it launches the lab kernel at the given row counts (invariant mode,
mxfp8 window + nvfp4 compressed, `bench.make_problem` inputs), checks its outputs bitwise
against the production kernel's (past one wave its persistent grid), times both by CUDA-graph
replay with the launch hidden, and prints per program span medians (10th and 90th percentiles
in brackets), the turnover between programs on an SM (one's last stamp to the next one's
k_start), the cycle (one k_start to the next on the SM) and each SM's busy fraction. `--patch`
stamps a lab patch under scripts/lab/ instead, with the patches it is a step on, applied to the
first one's `Base:` commit (`lab_tree.sh`) and launched by that copy's launcher; its bits are
checked against production's too; a persistent lab kernel (`lab/persistent_items_s27*.patch`)
is stamped per item (`lab_source_items`), except the TMA ones (`_tma_q`, `_tma_qo`), whose
launches take tensor descriptors the stamped launch does not pass. `--compile` compiles the lab
kernel for sm_90a offline (no GPU) and prints ptxas's registers and spills.

    python packages/ds41-attention/scripts/timeline.py --compile
    python packages/ds41-attention/scripts/timeline.py --run [--rows 132,1024,4096] [--json F]
        [--patch packages/ds41-attention/scripts/lab/NAME.patch]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from types import ModuleType
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
STAMPS = ("k_start", "p_start", "p_q", "p_first", "p_loop", "p_end", "c0_start", "c0_q",
          "c0_first", "c0_loop", "c0_end", "c1_start", "c1_loop", "c1_end", "c0_denom",
          "c0_staged", "c1_staged", "c1_denom")  # fmt: skip
SLOTS = 32
SMID = SLOTS - 1
SPANS = (
    ("k_start", "p_start"),
    ("k_start", "c0_start"),
    ("p_start", "p_q"),
    ("p_q", "p_first"),
    ("p_first", "p_loop"),
    ("p_loop", "p_end"),
    ("c0_start", "c0_q"),
    ("c0_q", "c0_first"),
    ("c0_first", "c0_loop"),
    ("c0_loop", "c0_end"),
    ("c0_loop", "c0_denom"),
    ("c0_denom", "c0_staged"),
    ("c0_staged", "c0_end"),
    ("c1_loop", "c1_denom"),
    ("c1_denom", "c1_staged"),
    ("c1_staged", "c1_end"),
    ("c1_loop", "c1_end"),
    ("c0_end", "c1_end"),
    ("k_start", "c0_first"),
)
STAMP_FN = f"""
SLOTS = gl.constexpr({SLOTS})
SMID = gl.constexpr({SMID})

@gluon.jit
def _stamp(stamp_ptr, k: gl.constexpr):
    now = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64,
                                    is_pure=False, pack=1)
    p = gl.program_id(0) * gl.num_programs(1) + gl.program_id(1)
    gl.store(stamp_ptr + p.to(gl.int64) * SLOTS + k, now)
    if k == 0:
        sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32,
                                       is_pure=False, pack=1)
        gl.store(stamp_ptr + p.to(gl.int64) * SLOTS + SMID, sm.to(gl.int64))


@gluon.jit
def _stamp_at(stamp_ptr, k):
    now = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64,
                                    is_pure=False, pack=1)
    p = gl.program_id(0) * gl.num_programs(1) + gl.program_id(1)
    gl.store(stamp_ptr + p.to(gl.int64) * SLOTS + k, now)

"""


def _edit_any(src: str, pairs: list[tuple[str, str]]) -> str:
    """`_edit` with the first of the (anchor, replacement) pairs whose anchor occurs once."""
    for old, new in pairs:
        if src.count(old) == 1:
            return src.replace(old, new)
    raise SystemExit(f"no anchor found once: {[o for o, _ in pairs]!r}")


def _edit(src: str, old: str, new: str, count: int = 1) -> str:
    if src.count(old) != count:
        raise SystemExit(f"anchor found {src.count(old)} times, expected {count}: {old!r}")
    return src.replace(old, new)


BASE = "33216ad"
"""The commit whose one-CTA kernel the stamps' anchors fit (the last before the persistent grid)."""

COPY = "ds41_attention_timeline"


def package_copy(patch: str | None) -> str:
    """A copy of the attention package as of BASE, or with a lab patch's chain applied
    (`lab_tree.sh`), importable as COPY; returns its directory."""
    parent = tempfile.mkdtemp(prefix="ds41_attn_timeline_")
    dest = os.path.join(parent, COPY)
    args = [os.path.basename(patch).removesuffix(".patch")] if patch else ["--base", BASE]
    subprocess.run(["bash", os.path.join(HERE, "lab_tree.sh"), dest, *args], check=True)
    sys.path.insert(0, parent)
    return dest


def copy_source(dest: str) -> str:
    """The text of a package copy's Gluon kernel module."""
    with open(os.path.join(dest, "ops", "sparse_attention", "gluon_kernels.py")) as f:
        return f.read()


def lab_source(src: str) -> str:
    """A one-CTA kernel module's source (BASE's or a lab patch's) with the stamps."""
    if "def _producer_items(" in src:
        return lab_source_items(src)
    s = STAMPS.index
    src = _edit(src, "\n\n@gluon.jit\ndef _tile_slot_loads(",
                STAMP_FN + "\n@gluon.jit\ndef _tile_slot_loads(")  # fmt: skip
    # one more pointer argument, through the kernel, its tuple and the partitions' unpacking
    src = _edit(src, "    part_o_ptr, part_ml_ptr, num_splits,  # SPLIT",
                "    part_o_ptr, part_ml_ptr, num_splits, stamp_ptr,  # SPLIT")  # fmt: skip
    src = _edit(src, "part_o_ptr, part_ml_ptr, num_splits)  # fmt: skip",
                "part_o_ptr, part_ml_ptr, num_splits, stamp_ptr)  # fmt: skip")  # fmt: skip
    src = _edit(src, "        num_splits,\n    ) = a\n",
                "        num_splits,\n        stamp_ptr,\n    ) = a\n", count=3)  # fmt: skip
    src = _edit(
        src,
        "    gluon_enter_dependent(GDC)\n",
        f"    gluon_enter_dependent(GDC)\n    _stamp(stamp_ptr, {s('k_start')})\n",
    )
    # producer
    src = _edit(
        src,
        "    gl.static_assert(NRAW == 2,",
        f"    _stamp(stamp_ptr, {s('p_start')})\n    gl.static_assert(NRAW == 2,",
    )
    src = _edit(src, "    mbarrier.arrive(bars.index(0), count=1)\n\n    for i in range(0, n):\n",
                "    mbarrier.arrive(bars.index(0), count=1)\n"
                f"    _stamp(stamp_ptr, {s('p_q')})\n\n    for i in range(0, n):\n")  # fmt: skip
    src = _edit(src, "        mbarrier.arrive(bars.index(1 + ks), count=1)\n    if not SPLIT:\n",
                "        mbarrier.arrive(bars.index(1 + ks), count=1)\n"
                f"        if i == 0:\n            _stamp(stamp_ptr, {s('p_first')})\n"
                f"    _stamp(stamp_ptr, {s('p_loop')})\n    if not SPLIT:\n")  # fmt: skip
    src = _edit(src, "    async_copy.wait_group(0)\n\n\n@gluon.jit\ndef _qk(",
                f"    async_copy.wait_group(0)\n    _stamp(stamp_ptr, {s('p_end')})\n\n\n"
                "@gluon.jit\ndef _qk(")  # fmt: skip
    # consumer 0
    src = _edit(src, "    PF: gl.constexpr = _p_bars(KS)\n    m_i = gl.full(",
                f"    _stamp(stamp_ptr, {s('c0_start')})\n"
                "    PF: gl.constexpr = _p_bars(KS)\n    m_i = gl.full(")  # fmt: skip
    src = _edit(src, "    mbarrier.wait(bars.index(0), 0)\n    mbarrier.wait(bars.index(1), 0)\n",
                "    mbarrier.wait(bars.index(0), 0)\n    mbarrier.wait(bars.index(1), 0)\n"
                f"    _stamp(stamp_ptr, {s('c0_q')})\n")  # fmt: skip
    first = ("kbias_smem, 0,\n                                                    mma_s)])"
             "  # fmt: skip\n")  # fmt: skip
    src = _edit(src, first, first + f"    _stamp(stamp_ptr, {s('c0_first')})\n")
    last = ("    acc = warpgroup_mma_wait(0, deps=[tok])\n    gl.thread_barrier()\n"
            "    mbarrier.arrive(bars.index(1 + KS + js), count=1)\n\n    oheads")  # fmt: skip
    src = _edit(
        src,
        last,
        last.replace("\n\n    oheads", f"\n    _stamp(stamp_ptr, {s('c0_loop')})\n\n    oheads"),
    )
    src = _edit(src, "mbarrier.arrive(bars.index(PF + 4), count=1)\n",
                "mbarrier.arrive(bars.index(PF + 4), count=1)\n"
                f"        _stamp(stamp_ptr, {s('c0_denom')})\n")  # fmt: skip
    # both consumers' stores: the output half staged in shared memory
    src = _edit(src, "def _store_out(acc, denom, stage, out_ptr, t, stride_ot, stride_oh, hb, H, "
                "col0):",
                "def _store_out(acc, denom, stage, out_ptr, t, stride_ot, stride_oh, hb, H, col0,\n"
                "               stamp_ptr):")  # fmt: skip
    staged = ("    stage.store(gl.where(denom[:, None] > 0.0, q, 0.0).to(gl.bfloat16))\n"
              "    gl.thread_barrier()\n")  # fmt: skip
    assert s("c1_staged") == s("c0_staged") + 1
    src = _edit(src, staged, staged + f"    _stamp_at(stamp_ptr, {s('c0_staged')} + col0 // 256)\n")
    src = _edit(src, "hb, H, 0)  # fmt: skip", "hb, H, 0, stamp_ptr)  # fmt: skip")
    src = _edit(src, "hb, H, 256)\n", "hb, H, 256, stamp_ptr)\n")
    src = _edit(src, "hb, H, 0, stamp_ptr)  # fmt: skip\n    return (m_i,)",
                f"hb, H, 0, stamp_ptr)  # fmt: skip\n        _stamp(stamp_ptr, {s('c0_end')})\n"
                "    return (m_i,)")  # fmt: skip
    # consumer 1
    src = _edit(src, "        mbarrier.wait(bars.index(PF + 4), 0)\n",
                "        mbarrier.wait(bars.index(PF + 4), 0)\n"
                f"        _stamp(stamp_ptr, {s('c1_denom')})\n")  # fmt: skip
    src = _edit(
        src,
        "    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)\n    # half 1 of tiles",
        f"    _stamp(stamp_ptr, {s('c1_start')})\n"
        "    acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)\n    # half 1 of tiles",
    )
    src = _edit(
        src,
        "    if SPLIT:\n        _store_part(acc, part_o_ptr, t, H, hb, num_splits, 1, mma_o)",
        f"    _stamp(stamp_ptr, {s('c1_loop')})\n"
        "    if SPLIT:\n        _store_part(acc, part_o_ptr, t, H, hb, num_splits, 1, mma_o)",
    )
    src = _edit(src, "out_ptr, t, stride_ot, stride_oh, hb, H, 256, stamp_ptr)\n",
                "out_ptr, t, stride_ot, stride_oh, hb, H, 256, stamp_ptr)\n"
                f"        _stamp(stamp_ptr, {s('c1_end')})\n")  # fmt: skip
    return src


ITEM_STAMP_FN = """

@gluon.jit
def _stamp_w(stamp_ptr, w, k: gl.constexpr):
    now = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64,
                                    is_pure=False, pack=1)
    gl.store(stamp_ptr + w.to(gl.int64) * SLOTS + k, now)
    if k == 0:
        sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32,
                                       is_pure=False, pack=1)
        gl.store(stamp_ptr + w.to(gl.int64) * SLOTS + SMID, sm.to(gl.int64))

"""


def lab_source_items(src: str) -> str:
    """Stamps per item (slot row w) in a persistent lab kernel (`persistent_items_s27.patch`:
    `_producer_items`, `_consumer0_items`, `_consumer1_items`): k_start and c0_start = consumer
    0 begins the item, p_start / p_q / p_first / p_loop = the producer begins it / has issued
    its first two tiles' copies / filled its tile 0 / done its loop (p_end = p_loop); the
    consumers' stamps as in the one-item kernel (c1_end after the Q-free arrival)."""
    s = STAMPS.index
    src = _edit(src, "\n\n@gluon.jit\ndef _tile_slot_loads(",
                STAMP_FN + ITEM_STAMP_FN + "\n@gluon.jit\ndef _tile_slot_loads(")  # fmt: skip
    src = _edit(src, "    part_o_ptr, part_ml_ptr, num_splits, n_rows,  # SPLIT",
                "    part_o_ptr, part_ml_ptr, num_splits, n_rows, stamp_ptr,  # SPLIT")  # fmt: skip
    src = _edit(src, "part_o_ptr, part_ml_ptr, num_splits, n_rows)  # fmt: skip",
                "part_o_ptr, part_ml_ptr, num_splits, n_rows, stamp_ptr)  # fmt: skip")  # fmt: skip
    src = _edit(
        src,
        "        num_splits,\n        _n_rows,\n    ) = a\n",
        "        num_splits,\n        _n_rows,\n        stamp_ptr,\n    ) = a\n",
        count=3,
    )
    src = _edit(src, "        n_rows,\n    ) = a\n",
                "        n_rows,\n        stamp_ptr,\n    ) = a\n", count=3)  # fmt: skip
    src = _edit(src, "        t, hb = _item_rc(w, n_rows)\n        if k == 0:\n"
                "            _copy_q(",
                "        t, hb = _item_rc(w, n_rows)\n"
                f"        _stamp_w(stamp_ptr, w, {s('p_start')})\n"
                "        if k == 0:\n            _copy_q(")  # fmt: skip
    src = _edit(src, "        if k == 0:\n            qbias = ",
                f"        _stamp_w(stamp_ptr, w, {s('p_q')})\n"
                "        if k == 0:\n            qbias = ")  # fmt: skip
    src = _edit(src, "            mbarrier.arrive(bars.index(1 + ks), count=1)\n        g += n\n",
                "            mbarrier.arrive(bars.index(1 + ks), count=1)\n"
                f"            if i == 0:\n                _stamp_w(stamp_ptr, w, {s('p_first')})\n"
                f"        _stamp_w(stamp_ptr, w, {s('p_loop')})\n"
                f"        _stamp_w(stamp_ptr, w, {s('p_end')})\n        g += n\n")  # fmt: skip
    src = _edit(
        src,
        '        m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)\n',
        f"        _stamp_w(stamp_ptr, w, {s('k_start')})\n"
        f"        _stamp_w(stamp_ptr, w, {s('c0_start')})\n"
        '        m_i = gl.full([BLOCK_H], -float("inf"), gl.float32, row_s)\n',
    )
    src = _edit(src, "        mbarrier.wait(bars.index(1 + g % KS), (g // KS) & 1)\n",
                "        mbarrier.wait(bars.index(1 + g % KS), (g // KS) & 1)\n"
                f"        _stamp_w(stamp_ptr, w, {s('c0_q')})\n")  # fmt: skip
    src = _edit(
        src,
        "g % KS, mma_s)])  # fmt: skip\n",
        f"g % KS, mma_s)])  # fmt: skip\n        _stamp_w(stamp_ptr, w, {s('c0_first')})\n",
    )
    src = _edit(src, "        mbarrier.arrive(bars.index(1 + KS + js), count=1)\n        oheads",
                "        mbarrier.arrive(bars.index(1 + KS + js), count=1)\n"
                f"        _stamp_w(stamp_ptr, w, {s('c0_loop')})\n        oheads")  # fmt: skip
    c0_end = f"        _stamp_w(stamp_ptr, w, {s('c0_end')})\n"
    a0, a1 = "hb, H, 0)  # fmt: skip\n", "stride_oh, hb, H, 0)\n"
    src = _edit_any(src, [(a0 + "        g += n", a0 + c0_end + "        g += n"),
                          (a1, a1 + c0_end)])  # fmt: skip
    c1_start = f"        _stamp_w(stamp_ptr, w, {s('c1_start')})\n"
    acc1 = "        acc = gl.zeros([BLOCK_H, 256], gl.float32, mma_o)\n"
    b0, b1 = "        for j in range(-LA, n):", "        # the item's first LA"
    src = _edit_any(src, [(acc1 + b0, c1_start + acc1 + b0),
                          (acc1 + b1, c1_start + acc1 + b1)])  # fmt: skip
    src = _edit(src, "        mbarrier.wait(bars.index(PF + 4), k & 1)\n",
                f"        _stamp_w(stamp_ptr, w, {s('c1_loop')})\n"
                "        mbarrier.wait(bars.index(PF + 4), k & 1)\n"
                f"        _stamp_w(stamp_ptr, w, {s('c1_denom')})\n")  # fmt: skip
    # consumer 1's item ends at its loop's last statements (the last of the three partitions)
    head, tail = src.rsplit("        g += n\n        k += 1\n", 1)
    return (head + f"        _stamp_w(stamp_ptr, w, {s('c1_end')})\n"
            "        g += n\n        k += 1\n" + tail)  # fmt: skip


def lab_module(src: str, name: str = "attn_timeline_kernels") -> tuple[ModuleType, str]:
    """The module of `lab_source(src)` written to a temporary file."""
    path = os.path.join(tempfile.mkdtemp(prefix="ds41_attn_timeline_"), name + ".py")
    with open(path, "w") as f:
        f.write(lab_source(src))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod, path


def compile_offline(src: str) -> None:
    sys.path.insert(0, HERE)
    import ptxas_report

    _mod, path = lab_module(src)
    ptxas_report.POINTERS["stamp_ptr"] = "*i64"
    ptxas_report.NOT_DIV16.add("n_rows")  # the persistent labs' row count
    print(ptxas_report.report(None, module=path))


class _WithStamps:
    """A kernel handle that appends the stamp buffer to each launch's positional arguments."""

    def __init__(self, kernel: Any, stamps: Any, rows: int | None = None) -> None:
        self.kernel, self.stamps, self.rows = kernel, stamps, rows

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kw: Any) -> Any:
            if self.rows is None:
                return self.kernel[grid](*args, self.stamps, **kw)
            # a persistent lab kernel: min(items, SMs) programs and the row count
            import torch

            items = grid[0] * grid[1]
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            return self.kernel[(min(items, sms), 1, 1)](*args, self.rows, self.stamps, **kw)

        return launch


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _pct(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * (len(ys) - 1) + 0.5))] if ys else float("nan")


def report(stamps: list[list[int]]) -> dict[str, Any]:
    """Span statistics (us) of the programs' stamps: per span the median, 10th and 90th
    percentile; the programs' life (k_start to the last end stamp); per SM the gaps between
    one program's end and the next one's k_start, and the busy fraction of the launch."""
    idx = {n: i for i, n in enumerate(STAMPS)}
    progs = [r for r in stamps if r[idx["k_start"]] > 0]
    t0 = min(r[idx["k_start"]] for r in progs)
    out: dict[str, Any] = {"programs": len(progs)}
    spans = {}
    for a, b in SPANS:
        d = [(r[idx[b]] - r[idx[a]]) / 1e3 for r in progs]
        spans[f"{a}->{b}"] = (_med(d), _pct(d, 0.1), _pct(d, 0.9))
    out["spans"] = spans
    ends = ("p_end", "c0_end", "c1_end")
    life = [(max(r[idx[e]] for e in ends) - r[idx["k_start"]]) / 1e3 for r in progs]
    out["life"] = (_med(life), _pct(life, 0.1), _pct(life, 0.9))
    by_sm: dict[int, list[list[int]]] = {}
    for r in progs:
        by_sm.setdefault(r[SMID], []).append(r)
    gaps, busy, first_start, cycles = [], [], [], []
    t_end = max(max(r[idx[e]] for e in ends) for r in progs)
    for rs in by_sm.values():
        rs.sort(key=lambda r: r[idx["k_start"]])
        first_start.append((rs[0][idx["k_start"]] - t0) / 1e3)
        b = 0.0
        for x, y in itertools.pairwise(rs):
            gaps.append((y[idx["k_start"]] - max(x[idx[e]] for e in ends)) / 1e3)
            cycles.append((y[idx["k_start"]] - x[idx["k_start"]]) / 1e3)
        for r in rs:
            b += max(r[idx[e]] for e in ends) - r[idx["k_start"]]
        busy.append(b / (t_end - t0))
    out["sms"] = len(by_sm)
    out["per_sm_programs"] = (min(len(v) for v in by_sm.values()),
                              max(len(v) for v in by_sm.values()))  # fmt: skip
    out["turnover"] = (_med(gaps), _pct(gaps, 0.1), _pct(gaps, 0.9)) if gaps else None
    # k_start to the next k_start on the same SM: a program's (item's) share of the SM
    out["cycle"] = (_med(cycles), _pct(cycles, 0.1), _pct(cycles, 0.9)) if cycles else None
    out["first_start"] = (_med(first_start), _pct(first_start, 0.9), max(first_start))
    out["busy"] = (_med(busy), min(busy), max(busy))
    out["makespan_us"] = (t_end - t0) / 1e3
    return out


def _fmt3(v: Any) -> str:
    return "-" if v is None else f"{v[0]:.2f} [{v[1]:.2f}, {v[2]:.2f}]"


def run(rows: tuple[int, ...], reps: int, json_path: str | None, src: str) -> None:
    import importlib

    import torch

    from ds41_attention import bench as attn_bench
    from ds41_attention.bench import FLASH, make_problem, time_graph
    from ds41_attention.ops.sparse_attention.gluon_launch import launch_gluon_sparse_attention
    from ds41_cache.ops.launch import dependent_launch

    # the copy's own launcher: its kernel's signature
    launch_with = importlib.import_module(COPY + ".ops.sparse_attention.gluon_launch").launch_with

    mod, _path = lab_module(src)
    attn_bench.LAUNCH_HIDDEN = True
    dev = torch.device("cuda")
    results = {}
    for t in rows:
        p = make_problem(FLASH, t, dev)
        st = torch.zeros((t * (FLASH.heads // 64), SLOTS), dtype=torch.int64, device=dev)
        options = {"maxnreg": mod.GLUON_MAXNREG, **dependent_launch(dev)}
        persistent = hasattr(mod, "_producer_items")
        lab = _WithStamps(mod._gluon_sparse_attn_kernel, st, t if persistent else None)

        def run_lab(lab: Any = lab, options: dict[str, Any] = options, p: Any = p) -> Any:
            return launch_with(lab, options, *p.args())

        def run_prod(p: Any = p) -> Any:
            return launch_gluon_sparse_attention(*p.args(), pair=False)

        o_l, l_l = run_lab()
        o_p, l_p = run_prod()
        torch.cuda.synchronize()
        same = bool(torch.equal(o_l, o_p) and torch.equal(l_l, l_p))
        t_prod = time_graph(run_prod, dev, reps)
        t_lab = time_graph(run_lab, dev, reps)
        t_prod2 = time_graph(run_prod, dev, reps)
        st.zero_()
        torch.cuda._sleep(400_000)  # type: ignore[no-untyped-call]
        run_lab()
        torch.cuda.synchronize()
        rep = report(st.cpu().tolist())
        rep.update(bits_equal=same, prod_us=[t_prod * 1e6, t_prod2 * 1e6], lab_us=t_lab * 1e6)
        results[t] = rep
        print(
            f"\nT = {t}: bits equal {same}; production {t_prod * 1e6:.1f} / "
            f"{t_prod2 * 1e6:.1f} us, stamped lab {t_lab * 1e6:.1f} us (graph, launch hidden); "
            f"stamped launch makespan {rep['makespan_us']:.1f} us on {rep['sms']} SMs, "
            f"{rep['per_sm_programs'][0]}-{rep['per_sm_programs'][1]} programs an SM"
        )
        print(f"  life {_fmt3(rep['life'])}; turnover (end -> next k_start, same SM) "
              f"{_fmt3(rep['turnover'])}; cycle {_fmt3(rep['cycle'])}; "
              f"first start {_fmt3(rep['first_start'])}; "
              f"busy {_fmt3(rep['busy'])}")  # fmt: skip
        for k, v in rep["spans"].items():
            print(f"  {k:22s} {_fmt3(v)}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compile", action="store_true", help="offline sm_90a compile (no GPU)")
    ap.add_argument("--run", action="store_true", help="stamps and times on the GPU")
    ap.add_argument("--rows", default="132,1024,4096")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", default=None)
    ap.add_argument("--patch", default=None, help="a lab patch of the kernel to stamp instead")
    a = ap.parse_args()
    src = copy_source(package_copy(a.patch))
    if a.compile:
        compile_offline(src)
    if a.run:
        run(tuple(int(x) for x in a.rows.split(",")), a.reps, a.json, src)


if __name__ == "__main__":
    main()
