"""ModelConfig: presets, derived roles, and validation errors naming the field."""

import dataclasses

import pytest

from ds41_runner.model import ModelConfig, Role


def test_tiny_matches_spec_table_and_roles():
    c = ModelConfig.preset("tiny")
    assert (c.hidden, c.heads, c.head_dim, c.rope_dim, c.window) == (64, 4, 64, 16, 8)
    assert (c.index_heads, c.index_head_dim, c.index_topk) == (2, 32, 4)
    assert c.n_layers == 10 and c.scale == 64**-0.5
    roles = [p.role for p in c.plans]
    assert roles == [
        Role.SWA,
        Role.SWA,
        Role.FULL,
        Role.REUSE,
        Role.REINDEX,
        Role.FULL,
        Role.REUSE,
        Role.REINDEX,
        Role.REUSE,
        Role.SWA,
    ]
    p = c.plans
    assert p[4].kv_source == 2 and not p[4].masked_by_candidates  # candidate source is later
    assert p[5].candidate_source and p[7].masked_by_candidates and p[7].kv_source == 5
    assert p[8].topk_source == 7 and p[6].topk_source == 5 and p[3].topk_source == 2


def test_flash_presets():
    mini = ModelConfig.preset("flash_mini")
    assert (mini.heads, mini.head_dim, mini.rope_dim, mini.window) == (64, 512, 64, 128)
    assert (mini.index_heads, mini.index_head_dim, mini.index_topk) == (32, 128, 512)
    assert (mini.candidate_topk_blocks, mini.candidate_block_size) == (2048, 8)
    roles = {p.role for p in mini.plans}
    assert roles == {Role.SWA, Role.FULL, Role.REUSE, Role.REINDEX}
    assert mini.ratios_in_use == (1, 2)
    assert any(p.masked_by_candidates for p in mini.plans)
    flash = ModelConfig.preset("flash")
    assert flash.n_layers == 40 and flash.hidden == 5120
    assert flash.compress_ratios == (0, 0) + (2,) * 18 + (1,) * 20
    assert [p.layer for p in flash.plans if p.role is Role.FULL] == [2, 8, 14, 20]
    assert [p.layer for p in flash.plans if p.role is Role.REINDEX] == [24, 28, 32, 36]
    assert all(p.masked_by_candidates for p in flash.plans if p.role is Role.REINDEX)
    with pytest.raises(ValueError, match="preset must be one of"):
        ModelConfig.preset("huge")


def test_round_trip_through_dict():
    c = ModelConfig.preset("flash_mini")
    d = c.to_dict()
    assert isinstance(d["compress_ratios"], list)
    assert ModelConfig(**d) == c


BAD = [
    (dict(hidden=0), "hidden must be a positive int"),
    (dict(heads=2.5), "heads must be a positive int"),
    (dict(head_dim=48), "head_dim must be a power of two"),
    (dict(index_head_dim=96), "index_head_dim must be a power of two"),
    (dict(rope_dim=15), "rope_dim must be even"),
    (dict(rope_dim=128), "rope_dim must be even and <= "),
    (dict(o_groups=3), "o_groups must divide heads"),
    (dict(rope_theta=1.0), "rope_theta must be a finite number > 1"),
    (dict(yarn_factor=-1.0), "yarn_factor must be"),
    (dict(yarn_beta_fast=0.5), "yarn_beta_fast must exceed"),
    (dict(rms_norm_eps=0.0), "rms_norm_eps must lie in"),
    (dict(softmax_scale=-1.0), "softmax_scale"),
    (dict(compressor_capacity=6), "compressor_capacity must be a power of two"),
    (dict(compress_ratios=(0, 0, 4, 2, 2, 1, 1, 1, 1, 0)), r"compress_ratios\[2\] must be one of"),
    (dict(compress_ratios=()), "compress_ratios must name at least one layer"),
    (
        dict(compress_ratios=(0, 0, 2, 1, 2, 1, 1, 1, 1, 0)),
        r"compress_ratios\[3\] = 1 must equal the ratio of its kv source layer 2",
    ),
    (
        dict(compress_ratios=(0, 2, 2, 2, 2, 1, 1, 1, 1, 0)),
        r"compress_ratios\[1\] = 2 but no kv source",
    ),
    (dict(kv_source_layer_ids=(5, 2)), "kv_source_layer_ids must be strictly ascending"),
    (dict(kv_source_layer_ids=(2, 12)), r"kv_source_layer_ids must lie in \[0, 10\)"),
    (
        dict(kv_source_layer_ids=(0, 2, 5)),
        "kv_source_layer_ids names layer 0 whose compress ratio is 0",
    ),
    (
        dict(index_source_layer_ids=(4, 5, 7)),
        "kv_source_layer_ids: layer 2 must also be in index_source_layer_ids",
    ),
    (dict(candidate_source_layer_id=4), "candidate_source_layer_id must be a Full layer"),
    (dict(candidate_source_layer_id=2, index_source_layer_ids=(2, 4, 5)), None),
]


@pytest.mark.parametrize("change,msg", BAD)
def test_validation_names_the_field(change, msg):
    c = (
        dataclasses.replace(ModelConfig(), **change)
        if "compress_ratios" not in change
        else ModelConfig(**change)
    )
    if msg is None:
        c.validate()  # a valid variant: the candidate source at layer 2
        return
    with pytest.raises(ValueError, match=msg):
        c.validate()


def test_reindex_after_candidate_must_read_its_kv_source():
    # Layer 7 (Reindex, kv source 5) follows candidate source 2 of a different kv source.
    c = ModelConfig(candidate_source_layer_id=2)
    with pytest.raises(ValueError, match="Reindex layer 7 follows the candidate source 2"):
        c.validate()
    ok = ModelConfig(candidate_source_layer_id=2, index_source_layer_ids=(2, 4, 5)).validate()
    assert ok.plans[4].masked_by_candidates and ok.plans[7].topk_source == 5
