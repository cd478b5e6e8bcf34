"""Run reports: the rich table, report.json, report.md, the PNG plot, and a sweep's summary."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def invariance_line(inv: dict[str, Any]) -> str:
    """`N/N requests bitwise equal`, or the count and the max |diff| otherwise."""
    n, total = inv["equal"], inv["checked"]
    line = f"{n}/{total} requests bitwise equal"
    if n != total:
        line += f" (max |diff| {inv['max_abs_diff']:.3g}"
        if inv.get("token_mismatches"):
            line += f", {inv['token_mismatches']} with different tokens"
        line += ")"
    return line


def invariance_scope(report: dict[str, Any]) -> str:
    """What a PASS of the invariance check proves on this device and backend, and where
    `mode=fast` breaks invariance (SPEC section 9)."""
    on_gpu = str(report["device"]).startswith("cuda")
    backend = report["backend"]
    fast_breaks = (
        "mode=fast breaks invariance on the GPU only: split-KV attention, cuBLAS matmuls and "
        "bf16 indexer logits make a row's bits depend on the batch"
    )
    if not on_gpu and backend == "torch":
        return (
            "CPU torch path: every row is computed on its own (row-wise), so it is invariant in "
            "both modes; a PASS proves the engine (scheduling, chunking, prefix cache, "
            f"preemption, sampling) and the references, not the GPU kernels. {fast_breaks}."
        )
    if not on_gpu:
        return (
            "CPU Triton interpreter: runs the kernels' code, but with other constexpr branches "
            "than the GPU (fp32 upcasts); a PASS proves the harness and the kernels' row "
            f"ownership, the GPU run is the real check. {fast_breaks}."
        )
    graph = " and CUDA-graph replay" if report.get("graph") == "cuda_graph" else ""
    if report["mode"] == "bi":
        return (
            "GPU Triton kernels in batch-invariant mode: a PASS proves bitwise equality over "
            f"batch composition, chunking, prefill vs decode rows, prefix hits{graph} for this "
            f"workload. {fast_breaks}."
        )
    return (
        "GPU, mode=fast: split-KV attention, cuBLAS matmuls and bf16 indexer logits are in "
        "use, so DIFF rows are expected here; run mode=bi for the invariant path."
    )


def summary_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    s = report["summary"]
    rows = [
        (
            "model / mode / kv_dtype",
            f"{report['model_name']} / {report['mode']} / {report['kv_dtype']}",
        ),
        (
            "device / backend / graph",
            f"{report['device']} / {report['backend']} / {report['graph']}",
        ),
        ("requests", f"{s['requests_ok']}/{s['requests']} ok"),
        ("tokens generated", str(s["generated_tokens"])),
        ("forward rows: prefill / decode", f"{s['prefill_rows']} / {s['decode_rows']}"),
        ("steps / chunk_size", f"{s['steps']} / {report['chunk_size']}"),
        ("wall time (batched)", f"{s['seconds']:.2f} s"),
        ("tokens/s (generated)", f"{s['tokens_per_s']:.1f}"),
        ("rows/s (all forward rows)", f"{s['rows_per_s']:.1f}"),
        ("cache bytes per token", f"{s['cache_bytes_per_token']:.1f} (context {s['context_len']})"),
        ("preemptions / prefix-hit tokens", f"{s['preemptions']} / {s['prefix_hit_tokens']}"),
        ("CUDA-graph replays", str(s.get("graph_replays", 0))),
    ]
    inv = report.get("invariance")
    if inv is not None:
        rows.append(("invariance: batched vs alone", invariance_line(inv["alone"])))
        rows.append(("invariance: batched vs score", invariance_line(inv["score"])))
        rows.append(("invariance check", "PASS" if inv["passed"] else "FAIL"))
    return rows


def print_table(report: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="ds41 run", show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value")
    for k, v in summary_rows(report):
        style = None
        if k == "invariance check":
            style = "green" if v == "PASS" else "red"
        table.add_row(k, v, style=style)
    console.print(table)
    if report.get("invariance") is not None:
        console.print(f"what the check proves: {invariance_scope(report)}", highlight=False)
    per = Table(title="requests", show_header=True, header_style="bold")
    for col in (
        "req",
        "prompt",
        "new",
        "arrival",
        "temp",
        "preempt",
        "prefix hit",
        "alone",
        "score",
    ):
        per.add_column(col)
    for r in report["requests"]:
        per.add_row(
            str(r["index"]), str(r["prompt_len"]), str(len(r["tokens"])), str(r["arrival"]),
            f"{r['temperature']:g}", str(r["preemptions"]), str(r["prefix_hit_tokens"]),
            _mark(r.get("alone_equal")), _mark(r.get("score_equal")),
        )  # fmt: skip
    console.print(per)


def _mark(v: bool | None) -> str:
    return "-" if v is None else ("equal" if v else "DIFF")


def _strict_json(x: Any) -> Any:
    # Strict JSON has no inf/nan: write them as strings ("inf" = tokens differed).
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _strict_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_strict_json(v) for v in x]
    return x


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(_strict_json(report), indent=2, allow_nan=False) + "\n")


def write_markdown(report: dict[str, Any], path: Path) -> None:
    lines = ["# ds41 run report", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in summary_rows(report)]
    if report.get("invariance") is not None:
        lines += ["", f"What the check proves: {invariance_scope(report)}"]
    lines += [
        "",
        "## Requests",
        "",
        "| req | prompt | new tokens | arrival | temperature | preemptions | prefix hit | "
        "alone | score | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["requests"]:
        lines.append(
            f"| {r['index']} | {r['prompt_len']} | {len(r['tokens'])} | {r['arrival']} | "
            f"{r['temperature']:g} | {r['preemptions']} | {r['prefix_hit_tokens']} | "
            f"{_mark(r.get('alone_equal'))} | {_mark(r.get('score_equal'))} | "
            f"{r.get('error') or ''} |"
        )
    lines += ["", "## Config", "", "```yaml", report["config_yaml"].rstrip(), "```", ""]
    path.write_text("\n".join(lines))


def _verdict(r: dict[str, Any]) -> str:
    if r.get("error"):
        return "error"
    if r.get("alone_equal") is None:
        return "unchecked"
    return "equal" if r.get("alone_equal") and r.get("score_equal") else "DIFF"


_VERDICT_COLOR = {"equal": "tab:green", "DIFF": "tab:red", "error": "tab:red", "unchecked": "gray"}


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Three panels: each request's rows per step (prefill chunks, decode tokens, arrival,
    prefix hit, preemptions, invariance verdict); the rows of every step against the
    chunk_size budget (CUDA-graph replays hatched); tokens generated per request over wall time.

    The per-request panels need the engine's per-step entries (`StepRecord.entries`); without
    them they say so.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    steps = report["steps"]
    reqs = report["requests"]
    have_entries = any(s.get("entries") for s in steps)
    fig = plt.figure(figsize=(12, 7.5))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.25, 1])
    ax_t = fig.add_subplot(grid[0, :])
    ax_r = fig.add_subplot(grid[1, 0])
    ax_w = fig.add_subplot(grid[1, 1])
    inv = report.get("invariance")
    verdict = "" if inv is None else (" - invariance PASS" if inv["passed"] else " - FAIL")
    fig.suptitle(
        f"ds41 run: {report['model_name']} / {report['mode']} / {report['kv_dtype']} on "
        f"{report['device']} ({report['backend']}, {report['graph']}){verdict}",
        fontsize=11,
    )

    # Panel 1: per-request timeline.
    if have_entries:
        for s in steps:
            for req, rows, sampled in s["entries"]:
                prefill = rows > 1 or not sampled
                color = "tab:blue" if prefill else "tab:green"
                hatch = "//" if s["graph"] else None
                ax_t.barh(req, 1.0, left=s["step"] - 0.5, height=0.6, color=color,
                          hatch=hatch, edgecolor="white", linewidth=0.3)  # fmt: skip
                if prefill and rows > 1:
                    ax_t.text(s["step"], req, str(rows), ha="center", va="center", fontsize=6,
                              color="white")  # fmt: skip
                if sampled:
                    ax_t.plot(s["step"] + 0.35, req, marker="|", color="black", markersize=7)
        last = max((s["step"] for s in steps), default=0)
        for r in reqs:
            i = r["index"]
            ax_t.plot(r["arrival"] - 0.5, i, marker=">", color="gray", markersize=5)
            notes = []
            if r["prefix_hit_tokens"]:
                notes.append(f"prefix hit {r['prefix_hit_tokens']}")
            if r["preemptions"]:
                notes.append(f"preempted x{r['preemptions']}")
            if notes:
                ax_t.text(last + 1.2, i, ", ".join(notes), va="center", fontsize=7)
        ax_t.set_xlim(-1, last + 6)
        ax_t.legend(
            handles=[
                Patch(color="tab:blue", label="prefill chunk (rows written inside)"),
                Patch(color="tab:green", label="decode row"),
                Patch(facecolor="white", edgecolor="gray", hatch="//", label="CUDA-graph replay"),
            ],
            loc="lower center", bbox_to_anchor=(0.5, 0.99), fontsize=7, ncols=3, frameon=False,
        )  # fmt: skip
    else:
        ax_t.text(0.5, 0.5, "per-request timeline needs the engine's StepRecord.entries",
                  ha="center", va="center", transform=ax_t.transAxes)  # fmt: skip
    ax_t.set_yticks([r["index"] for r in reqs])
    ax_t.set_yticklabels([f"req {r['index']}: {_verdict(r)}" for r in reqs], fontsize=7)
    for label, r in zip(ax_t.get_yticklabels(), reqs, strict=True):
        label.set_color(_VERDICT_COLOR[_verdict(r)])
    ax_t.invert_yaxis()
    ax_t.set_xlabel("engine step (| = token sampled, > = arrival)")
    ax_t.set_title("each request's rows per step; label = batched vs alone/score verdict",
                   fontsize=9, pad=26)  # fmt: skip

    # Panel 2: rows per step against the budget.
    xs = [s["step"] for s in steps]
    if have_entries:
        pre = [sum(n for _, n, smp in s["entries"] if n > 1 or not smp) for s in steps]
    else:
        pre = [0 if s["decode_only"] else s["rows"] for s in steps]
    dec = [s["rows"] - p for s, p in zip(steps, pre, strict=True)]
    hatches = ["//" if s["graph"] else None for s in steps]
    ax_r.bar(xs, pre, width=0.9, color="tab:blue", label="prefill rows")
    bars = ax_r.bar(xs, dec, bottom=pre, width=0.9, color="tab:green", label="decode rows")
    for b, h in zip(bars, hatches, strict=True):
        if h:
            b.set_hatch(h)
    ax_r.axhline(report["chunk_size"], color="gray", linestyle="--", linewidth=1,
                 label=f"chunk_size = {report['chunk_size']} (row budget per step)")  # fmt: skip
    ax_r.set_ylim(0, max([report["chunk_size"], *(s["rows"] for s in steps)]) * 1.3)
    ax_r.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_r.set_xlabel("engine step")
    ax_r.set_ylabel("rows in the step's forward")
    replays = report["summary"].get("graph_replays", 0)
    ax_r.set_title(f"rows per step ({replays} CUDA-graph replays, hatched)", fontsize=9)
    ax_r.legend(fontsize=7, loc="upper right")

    # Panel 3: tokens per request over wall time.
    if have_entries:
        t = 0.0
        count: dict[int, int] = {}
        series: dict[int, tuple[list[float], list[int]]] = {}
        for s in steps:
            t += s["seconds"]
            for req, _, sampled in s["entries"]:
                if sampled:
                    count[req] = count.get(req, 0) + 1
                    xs_r, ys_r = series.setdefault(req, ([], []))
                    xs_r.append(t)
                    ys_r.append(count[req])
        for r in reqs:
            if r["index"] in series:
                xs_r, ys_r = series[r["index"]]
                ax_w.step(xs_r, ys_r, where="post", color=_VERDICT_COLOR[_verdict(r)],
                          alpha=0.8, linewidth=1)  # fmt: skip
                ax_w.text(xs_r[-1], ys_r[-1], f" {r['index']}", fontsize=7, va="bottom")
        ax_w.set_xlabel("wall time of the batched run (s)")
    else:
        ax_w.text(0.5, 0.5, "needs StepRecord.entries", ha="center", va="center",
                  transform=ax_w.transAxes)  # fmt: skip
    ax_w.set_ylabel("tokens generated")
    s = report["summary"]
    ax_w.set_title(f"tokens per request over time ({s['tokens_per_s']:.1f} tokens/s overall; "
                   "green = invariant)", fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# A `-m` sweep: one row per job.

SWEEP_COLUMNS = ("job", "mode", "kv_dtype", "chunk", "device / backend", "tokens/s", "steps",
                 "prefill / decode rows", "preempt", "prefix hit", "graph replays",
                 "invariance")  # fmt: skip


def sweep_rows(jobs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, ...]]:
    """One row of SWEEP_COLUMNS per job (label = the job's overrides)."""
    rows: list[tuple[str, ...]] = []
    for label, r in jobs:
        s = r["summary"]
        inv = r.get("invariance")
        verdict = "-"
        if inv is not None:
            a = inv["alone"]
            verdict = f"{'PASS' if inv['passed'] else 'FAIL'} ({a['equal']}/{a['checked']})"
        rows.append((
            label, r["mode"], r["kv_dtype"], str(r["chunk_size"]),
            f"{r['device']} / {r['backend']}", f"{s['tokens_per_s']:.1f}", str(s["steps"]),
            f"{s['prefill_rows']} / {s['decode_rows']}", str(s["preemptions"]),
            str(s["prefix_hit_tokens"]), str(s.get("graph_replays", 0)), verdict,
        ))  # fmt: skip
    return rows


def print_sweep_table(jobs: list[tuple[str, dict[str, Any]]], console: Console) -> None:
    table = Table(title=f"ds41 sweep: {len(jobs)} jobs", header_style="bold")
    for col in SWEEP_COLUMNS:
        table.add_column(col)
    for row in sweep_rows(jobs):
        style = "red" if "FAIL" in row[-1] else None
        table.add_row(*row, style=style)
    console.print(table)


def write_sweep(jobs: list[tuple[str, dict[str, Any]]], sweep_dir: Path) -> None:
    """summary.json, summary.md and summary.png (tokens/s per job, colored by verdict)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    rows = sweep_rows(jobs)
    data = [
        {"job": label, **{k: r[k] for k in ("mode", "kv_dtype", "chunk_size", "device",
                                             "backend", "graph", "summary", "invariance")}}
        for label, r in jobs
    ]  # fmt: skip
    (sweep_dir / "summary.json").write_text(
        json.dumps(_strict_json(data), indent=2, allow_nan=False) + "\n"
    )
    lines = ["# ds41 sweep summary", "", "| " + " | ".join(SWEEP_COLUMNS) + " |",
             "|" + "---|" * len(SWEEP_COLUMNS)]  # fmt: skip
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if jobs:
        lines += ["", f"What the check proves: {invariance_scope(jobs[0][1])}", ""]
    (sweep_dir / "summary.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(jobs) + 2), 4.2))
    colors = [
        "gray" if r.get("invariance") is None
        else ("tab:green" if r["invariance"]["passed"] else "tab:red")
        for _, r in jobs
    ]  # fmt: skip
    tps = [r["summary"]["tokens_per_s"] for _, r in jobs]
    ax.bar(range(len(jobs)), tps, color=colors)
    for i, row in enumerate(rows):
        ax.text(i, tps[i], row[-1], ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(jobs)))
    ax.set_xticklabels([label.replace(" ", "\n") for label, _ in jobs], fontsize=7)
    ax.set_ylabel("generated tokens/s (batched run)")
    ax.set_title("sweep: throughput per job (green: invariance PASS, red: FAIL)", fontsize=10)
    fig.tight_layout()
    fig.savefig(sweep_dir / "summary.png", dpi=100)
    plt.close(fig)
