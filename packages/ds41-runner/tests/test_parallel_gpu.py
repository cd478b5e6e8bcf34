"""Tensor parallelism on two GPUs (NCCL, the Triton kernels): TP=2 == TP=1 bitwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.gpu
@pytest.mark.gpu2
def test_flash_mini_tp2_bitwise_tp1_both_kv_dtypes(tmp_path: Path) -> None:
    """flash_mini, mode=bi, nvfp4_ds_mla and fp8_ds_mla: the app's workload at parallel.tp=2
    (batched, alone, score: all bitwise equal) and every request's tokens and log-probs equal
    to the one-GPU run's; greedy and sampled requests with temperature, top-k and top-p
    (`--sampling`: the vocabulary partials of the Triton kernel, the full logits for the filtered
    steps) likewise: TP=2 batched == alone == score == TP=1."""
    env = dict(os.environ)
    # No NVLink multicast (it can take the host's shared GPUs out of service).
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    out = tmp_path / "result.json"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "ds41_runner.parallel.check", "--out", str(out),
        "--kv-dtypes", "nvfp4_ds_mla,fp8_ds_mla", "--sampling", "--",
        "model=flash_mini", "workload=tiny", "device=cuda", "parallel.timeout_s=120",
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=500, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    res = json.loads(out.read_text())
    assert [e["kv_dtype"] for e in res["bi"]] == ["nvfp4_ds_mla", "fp8_ds_mla"]
    for e in res["bi"]:
        assert e["tp_invariance"]["passed"], e
        assert e["vs_tp1"]["bitwise"], e
    sampled = res["sampling"]
    assert sampled["ok"], sampled
    for key in ("alone", "score", "vs_tp1"):
        assert sampled[key]["bitwise"] and sampled[key]["requests"] == 5, (key, sampled)
