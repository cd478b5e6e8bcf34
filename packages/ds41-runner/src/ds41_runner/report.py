"""Run reports: the rich table, report.json, report.md and the PNG plot."""

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


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Rows per step (prefill vs decode-only steps) and per-request invariance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = report["steps"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    xs = [s["step"] for s in steps]
    colors = ["tab:green" if s["decode_only"] else "tab:blue" for s in steps]
    ax1.bar(xs, [s["rows"] for s in steps], color=colors, width=1.0)
    ax1.axhline(report["chunk_size"], color="gray", linestyle="--", linewidth=1)
    ax1.set_xlabel("step")
    ax1.set_ylabel("rows in the forward")
    ax1.set_title("batch per step (blue: with prefill, green: decode only)")
    reqs = report["requests"]
    idx = [r["index"] for r in reqs]
    diffs = [r.get("max_abs_diff") or 0.0 for r in reqs]
    bar_colors = [
        "tab:green" if r.get("alone_equal") and r.get("score_equal") else "tab:red" for r in reqs
    ]
    ax2.bar(idx, [len(r["tokens"]) for r in reqs], color=bar_colors)
    ax2.set_xlabel("request")
    ax2.set_ylabel("generated tokens")
    worst = max(diffs) if diffs else 0.0
    ax2.set_title(f"invariance (green: bitwise equal; max |diff| {worst:.3g})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
