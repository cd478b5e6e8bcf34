"""The Hydra app end to end: through compose (in process) and through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    cfg = ds41_runner.compose(SMALL + ["chunk_size=3", "workload.shared_prefix_len=3"])
    report = app.run(cfg, tmp_path)
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
    env = {k: v for k, v in os.environ.items() if k != "DS41_CONFIG_DIR"}
    sweep = tmp_path / "sweep"
    out = subprocess.run(
        [sys.executable, "-m", "ds41_runner", "-m", *SMALL, "workload.num_requests=1",
         "kv_dtype=fp8_ds_mla", "chunk_size=2,16", "plot=false", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "invariance" in out.stdout
    reports = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/report.json"))]
    assert sorted(r["chunk_size"] for r in reports) == [2, 16]
    assert {(r["mode"], r["kv_dtype"]) for r in reports} == {("bi", "fp8_ds_mla")}
    assert all(r["invariance"]["passed"] for r in reports)


def test_cli_rejects_bad_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys, "argv", ["ds41-run", "chunk_size=0", f"hydra.run.dir={tmp_path}"])
    with pytest.raises(SystemExit) as exc:
        app.main()
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "chunk_size must be a positive" in err
