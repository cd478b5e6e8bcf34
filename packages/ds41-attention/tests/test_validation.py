"""Bad input raises a clear error naming the argument, before anything is launched."""

from __future__ import annotations

import math

import pytest
import torch
from test_sparse_attention import make_args

import ds41_attention.ops.sparse_attention.launch as tk
from ds41_attention import sparse_attention


@pytest.fixture
def args():
    return list(make_args(3, 4, 8, 16, seed=1))


@pytest.fixture(autouse=True)
def _no_launch(monkeypatch):
    """Any launch during these tests is a failure: validation must come first."""

    def boom(*a, **k):
        raise AssertionError("kernel launched despite invalid input")

    monkeypatch.setattr(tk, "launch_sparse_attention", boom)


def _call(a, **kw):
    return sparse_attention(*a, backend=kw.pop("backend", "triton"), **kw)


@pytest.mark.parametrize(
    "idx,value,exc,match",
    [
        (0, lambda a: a[0].float(), TypeError, "q must be bf16"),
        (0, lambda a: a[0][0], ValueError, r"q must have shape \[T, H, D\]"),
        (0, lambda a: a[0][..., :48], ValueError, "power of two"),
        (2, lambda a: a[2].long(), TypeError, "swa_slots must be int32"),
        (2, lambda a: a[2][:2], ValueError, r"swa_slots must have shape \[3, 8\]"),
        (3, lambda a: a[3][:2], ValueError, r"swa_lens must have shape \[3\]"),
        (5, lambda a: a[5].long(), TypeError, "comp_slots must be int32"),
        (6, lambda a: a[6][None], ValueError, r"comp_lens must have shape \[3\]"),
        (7, lambda a: a[7].double(), TypeError, "sink must be a float32"),
        (7, lambda a: a[7][:3], ValueError, r"sink must have shape \[4\]"),
        (8, lambda a: float("nan"), ValueError, "scale must be a positive finite float"),
        (8, lambda a: 0.0, ValueError, "scale must be a positive finite float"),
        (8, lambda a: -0.125, ValueError, r"float \(e.g. D \*\* -0.5\), got -0.125"),
        (5, lambda a: None, ValueError, "given together"),
    ],
)
def test_bad_types_and_shapes(args, idx, value, exc, match):
    args[idx] = value(args)
    with pytest.raises(exc, match=match):
        _call(args)


def test_cache_mismatches(args):
    from attn_helpers import random_cache

    g = torch.Generator().manual_seed(2)
    bad = list(args)
    bad[1] = random_cache("nvfp4", 64, 16, 2, g)
    with pytest.raises(ValueError, match=r"window_cache.fmt must be one of \('mxfp8', 'bf16'\)"):
        _call(bad)
    bad = list(args)
    bad[4] = random_cache("nvfp4", 128, 16, 2, g)
    with pytest.raises(ValueError, match=r"comp_cache\.dim must equal q.s head dim 64"):
        _call(bad)
    bad = list(args)
    bad[1] = "not a cache"
    with pytest.raises(TypeError, match=r"window_cache must be a ds41_cache\.PagedCache"):
        _call(bad)


def test_slots_out_of_range(args):
    bad = list(args)
    bad[2] = bad[2].clone()
    bad[2][1, 0] = bad[1].num_slots
    with pytest.raises(IndexError, match=r"swa_slots must lie in \[-1, 31\]"):
        _call(bad)
    bad = list(args)
    bad[5] = bad[5].clone()
    bad[5][0, 3] = -2
    with pytest.raises(IndexError, match="comp_slots must lie in"):
        _call(bad)


def test_lengths_inconsistent_with_slot_width(args):
    bad = list(args)
    bad[3] = torch.tensor([1, 9, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"swa_lens must lie in \[0, 8\] \(at most W = 8\)"):
        _call(bad)
    bad = list(args)
    bad[6] = torch.tensor([17, 0, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"comp_lens must lie in \[0, 16\] \(at most K = 16\)"):
        _call(bad)
    bad = list(args)
    bad[3] = torch.tensor([-1, 0, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match="swa_lens must lie in"):
        _call(bad)


def test_device_mismatch_and_bad_backend(args):
    bad = list(args)
    bad[7] = bad[7].to("meta")
    with pytest.raises(ValueError, match="sink must be on cpu"):
        _call(bad)
    with pytest.raises(ValueError, match="backend must be one of"):
        _call(args, backend="cuda")


def test_validate_false_skips_value_checks_only(args):
    bad = list(args)
    bad[0] = bad[0].float()
    with pytest.raises(TypeError, match="q must be bf16"):
        _call(bad, validate=False)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_q_raises(args, bad):
    args[0] = args[0].clone()
    args[0][1, 2, 3] = bad
    for backend in ("torch", "triton"):
        with pytest.raises(ValueError, match="q must be finite"):
            _call(args, backend=backend)


def test_nan_sink_raises_but_infinite_sink_is_allowed(args):
    args[7] = args[7].clone()
    args[7][1] = math.nan
    for backend in ("torch", "triton"):
        with pytest.raises(ValueError, match="sink must not be NaN"):
            _call(args, backend=backend)
    args[7][1] = math.inf
    args[7][2] = -math.inf
    sparse_attention(*args, backend="torch")  # the documented +-inf sink semantics
