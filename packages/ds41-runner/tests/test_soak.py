"""The soak runner (`python -m ds41_runner.soak`): a seconds-long run passes and writes its
report; a wrong result makes it fail (non-zero exit, the failure named in the JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds41_runner import soak


def test_smoke_run_passes_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    assert soak.main(["--smoke", "--seed", "3", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["ok"] and rep["requests"] == 12 and rep["failures"] == []
    assert rep["finished_length"] + rep["finished_stop"] + rep["aborted"] == rep["requests"]
    assert rep["checked"] >= 3 and rep["tokens"] > 0 and rep["steps"] > 0
    assert rep["invariance_failures"] == rep["leaks"] == rep["protocol_failures"] == 0


def test_a_wrong_result_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = soak.run_alone

    def off_by_one(eng: soak.Engine, spec: soak.Spec, n: int) -> tuple[list[int], list[float], str]:
        toks, lps, reason = real(eng, spec, n)
        return toks, [x + 1e-6 for x in lps], reason  # a tiny change must be caught

    monkeypatch.setattr(soak, "run_alone", off_by_one)
    out = tmp_path / "soak.json"
    rc = soak.main(["--requests", "2", "--seconds", "30", "--check-every", "1", "--json", str(out)])
    rep = json.loads(out.read_text())
    assert rc == 1 and not rep["ok"]
    assert rep["invariance_failures"] >= 1 and "request" in rep["failures"][0]


def test_bad_arguments_are_named() -> None:
    with pytest.raises(SystemExit):
        soak.parse_args(["--requests", "0"])
