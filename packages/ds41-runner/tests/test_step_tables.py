"""A step's RoPE tables, computed once and shared (`StepContext.cos_sin`, `entry_cos_sin`),
give the layers exactly the bits of tables computed per call: the caches the step writes and
its log-probs are bitwise those of a step whose inserts compute their own tables."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ds41_runner.model import KVState, Model, ModelConfig, layers

# Two kv-source layers at ratio 2 (1, 2) share one step's entry tables; layer 3 has ratio 1.
CFG = dataclasses.replace(
    ModelConfig.preset("tiny"),
    compress_ratios=(0, 2, 2, 1, 1, 0),
    kv_source_layer_ids=(1, 2, 3),
    index_source_layer_ids=(1, 2, 3, 4),
    candidate_source_layer_id=3,
).validate()


def _step(device: str) -> tuple[torch.Tensor, KVState]:
    model = Model(CFG, backend="triton", device=device)
    kv = KVState(
        CFG, kv_dtype="nvfp4_ds_mla", max_requests=2, max_tokens_per_request=8, num_pages=4,
        page_size=4, device=device,
    )  # fmt: skip
    kv.reserve(0, 5)
    kv.reserve(1, 3)
    g = torch.Generator().manual_seed(8)
    tok = torch.randint(0, CFG.vocab_size, (9,), generator=g).to(device)
    # two requests, a padding row between them; odd and even positions (ratio-2 emits on odd)
    req = torch.tensor([0, 0, 0, 0, 0, -1, 1, 1, 1], dtype=torch.int32, device=device)
    pos = torch.tensor([0, 1, 2, 3, 4, 0, 0, 1, 2], dtype=torch.int32, device=device)
    return model.forward(tok, req, pos, kv), kv


def _storages(kv: KVState) -> list[torch.Tensor]:
    caches = list(kv.comp.values()) + list(kv.index_keys.values()) + list(kv.window)
    return [c.storage for c in caches if c is not None]


@pytest.mark.interpreter
@pytest.mark.slow
def test_shared_step_tables_give_the_bits_of_per_call_tables(device, monkeypatch):
    calls = []
    real = layers.rope_cos_sin

    def counted(positions: torch.Tensor, freqs: torch.Tensor):  # type: ignore[no-untyped-def]
        calls.append(positions.shape)
        return real(positions, freqs)

    monkeypatch.setattr(layers, "rope_cos_sin", counted)
    # the entries' tables come with their slots (`ops.entries`: in its kernel on CUDA)
    entry_tables = []
    real_entries = layers.entry_slots_positions

    def counted_entries(*args, **kw):  # type: ignore[no-untyped-def]
        entry_tables.append(kw.get("freqs") is not None)
        return real_entries(*args, **kw)

    monkeypatch.setattr(layers, "entry_slots_positions", counted_entries)
    out, kv = _step(device)
    # the rows' tables once per frequency class (0, 1), the entries' once per compress
    # ratio (2, 1), not per layer
    assert len(calls) == 2
    assert entry_tables == [True, False, True]  # kv sources 1, 2 (ratio 2), 3 (ratio 1)
    # The reference: no shared entry tables, so `insert` computes its own from the positions
    # (the path before the tables were shared).
    monkeypatch.setattr(layers.StepContext, "entry_cos_sin", lambda self, m, e, f: None)
    ref_out, ref_kv = _step(device)
    assert torch.isfinite(out).all()
    assert torch.equal(out, ref_out)
    got, ref = _storages(kv), _storages(ref_kv)
    assert len(got) == len(ref) > 3
    for a, b in zip(got, ref, strict=True):
        assert torch.equal(a, b)
    assert all(bool(s.any()) for s in got)  # every cache was written
