"""The Hydra app end to end: through compose (in process) and through the CLI."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import ds41_runner
from ds41_runner import app

SMALL = [
    "device=cpu",
    "backend=torch",
    "workload=tiny",
    "workload.num_requests=2",
    "workload.max_new_tokens=2",
    "workload.prompt_len_max=6",
    "page_size=4",
    "num_pages=64",
    "max_requests=4",
    "max_tokens_per_request=16",
    "progress=false",
]


def test_run_through_compose_writes_reports(tmp_path: Path) -> None:
    cfg = ds41_runner.compose(
        [*SMALL, "chunk_size=3", "workload.shared_prefix_len=3", "progress=true"]
    )
    # Not a terminal (as under nox): progress comes as plain lines while the run goes.
    buf = io.StringIO()
    report = app.run(cfg, tmp_path, console=Console(file=buf, width=120))
    shown = buf.getvalue()
    assert "batched run: 4/4 tokens" in shown, shown
    assert "invariance checks (alone + score): 2/2 requests" in shown, shown
    assert shown.index("batched run") < shown.index("ds41 run")  # before the table
    assert "row-wise" in shown and "mode=fast breaks invariance on the GPU only" in shown
    for name in ("report.json", "report.md", "plot.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["invariance"]["passed"] is True
    assert data["invariance"]["alone"] == {
        "checked": 2, "equal": 2, "max_abs_diff": 0.0, "token_mismatches": 0
    }  # fmt: skip
    assert data["summary"]["generated_tokens"] == 4
    assert data["summary"]["cache_bytes_per_token"] > 0
    assert data["kv_dtype"] == "nvfp4_ds_mla" and data["chunk_size"] == 3
    assert all(len(r["tokens"]) == 2 for r in data["requests"])
    assert max(s["rows"] for s in data["steps"]) <= 3
    assert report["summary"] == data["summary"]
    md = (tmp_path / "report.md").read_text()
    assert "2/2 requests bitwise equal" in md
    assert "What the check proves: CPU torch path" in md
    # Per-step entries (request, rows, sampled) when the engine records them.
    if any(s["entries"] for s in data["steps"]):
        sampled = sum(smp for s in data["steps"] for _, _, smp in s["entries"])
        assert sampled == data["summary"]["generated_tokens"]
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_invariance_failure_exits_nonzero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Perturb `score` so the check must fail; mode=bi then exits with status 1.
    from ds41_runner.engine.engine import Engine

    real = Engine.score

    def broken(self, sequences, prompt_lens):  # type: ignore[no-untyped-def]
        return [[x + 1e-3 for x in row] for row in real(self, sequences, prompt_lens)]

    monkeypatch.setattr(Engine, "score", broken)
    argv = ["ds41-run", *SMALL, "workload.num_requests=1", "plot=false",
            f"hydra.run.dir={tmp_path}"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        app.main()
    assert exc.value.code == 1
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["invariance"]["passed"] is False
    assert data["invariance"]["score"]["max_abs_diff"] == pytest.approx(1e-3, rel=1e-3)
    assert "0/1 requests bitwise equal" in (tmp_path / "report.md").read_text()


def test_cli_multirun_sweep_swaps_configs(tmp_path: Path) -> None:
    # One interpreter (`python -m ds41_runner`), two jobs: groups swapped from the command line.
    # A fresh matplotlib config dir makes matplotlib build its font cache (and log about it).
    env = {k: v for k, v in os.environ.items() if k != "DS41_CONFIG_DIR"}
    env["MPLCONFIGDIR"] = str(tmp_path / "mpl")
    sweep = tmp_path / "sweep"
    out = subprocess.run(
        [sys.executable, "-m", "ds41_runner", "-m", *SMALL, "workload.num_requests=1",
         "kv_dtype=fp8_ds_mla", "chunk_size=2,16", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "invariance" in out.stdout
    reports = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/report.json"))]
    assert sorted(r["chunk_size"] for r in reports) == [2, 16]
    assert {(r["mode"], r["kv_dtype"]) for r in reports} == {("bi", "fp8_ds_mla")}
    assert all(r["invariance"]["passed"] for r in reports)
    # No library log lines in the run's output.
    assert "fontManager" not in out.stdout + out.stderr
    assert "matplotlib" not in out.stdout + out.stderr
    # The summary across the jobs: a table on stdout, json/md/png in the sweep dir.
    assert "ds41 sweep: 2 jobs" in out.stdout
    summary = json.loads((sweep / "summary.json").read_text())
    assert [j["chunk_size"] for j in summary] == [2, 16]
    assert [j["job"] for j in summary] == ["chunk_size=2", "chunk_size=16"]
    md = (sweep / "summary.md").read_text()
    assert md.count("PASS (1/1)") == 2
    assert (sweep / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("override", "message"),
    [("chunk_size=0", "chunk_size must be a positive"),
     ("+foo=1", "unknown config keys ['foo']")],
)  # fmt: skip
def test_cli_rejects_bad_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,  # type: ignore[no-untyped-def]
                                override: str, message: str) -> None:  # fmt: skip
    run_dir = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["ds41-run", override, f"hydra.run.dir={run_dir}"])
    with pytest.raises(SystemExit) as exc:
        app.main()
    assert exc.value.code == 1
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count(message) == 1  # printed once
    assert not run_dir.exists(), sorted(p.name for p in run_dir.rglob("*"))  # nothing left


def _fake_report(entries: bool, device: str = "cpu", backend: str = "torch",
                 mode: str = "bi") -> dict:  # type: ignore[type-arg]  # fmt: skip
    # Two requests: 0 prefills 5 rows in two chunks then decodes; 1 arrives later, preempted.
    steps = [
        (0, 3, False, [(0, 3, False)]),
        (1, 3, False, [(0, 2, True), (1, 1, False)]),
        (2, 3, False, [(0, 1, True), (1, 2, True)]),
        (3, 2, True, [(0, 1, True), (1, 1, True)]),
    ]
    return {
        "model_name": "tiny", "mode": mode, "kv_dtype": "bf16", "device": device,
        "backend": backend, "graph": "eager", "chunk_size": 3, "arrivals": [0, 1],
        "summary": {"tokens_per_s": 1.0, "graph_replays": 0},
        "invariance": {"passed": False},
        "requests": [
            {"index": 0, "arrival": 0, "tokens": [1, 2, 3], "prefix_hit_tokens": 0,
             "preemptions": 0, "alone_equal": True, "score_equal": True, "error": None},
            {"index": 1, "arrival": 1, "tokens": [4, 5], "prefix_hit_tokens": 2,
             "preemptions": 1, "alone_equal": False, "score_equal": True, "error": None},
        ],
        "steps": [
            {"step": a, "rows": b, "requests": len(e), "decode_only": c, "graph": False,
             "seconds": 0.1, "entries": [list(x) for x in e] if entries else []}
            for a, b, c, e in steps
        ],
    }  # fmt: skip


@pytest.mark.parametrize("entries", [True, False])
def test_plot_with_and_without_step_entries(tmp_path: Path, entries: bool) -> None:
    from ds41_runner import report as rep

    rep.write_plot(_fake_report(entries), tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_invariance_scope_names_what_the_check_proves() -> None:
    from ds41_runner.report import invariance_scope

    cpu = invariance_scope(_fake_report(True))
    assert "row-wise" in cpu and "invariant in both modes" in cpu and "not the GPU kernels" in cpu
    assert "split-KV attention, cuBLAS matmuls and bf16 indexer logits" in cpu
    interp = invariance_scope(_fake_report(True, backend="triton"))
    assert "interpreter" in interp
    gpu_bi = invariance_scope(_fake_report(True, device="cuda:0", backend="triton"))
    assert gpu_bi.startswith("GPU Triton kernels in batch-invariant mode")
    gpu_fast = invariance_scope(_fake_report(True, device="cuda:0", backend="triton", mode="fast"))
    assert "DIFF rows are expected" in gpu_fast
