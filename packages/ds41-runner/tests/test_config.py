"""Structured configs: composition, overrides, validation errors, config discovery."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

import ds41_runner
from ds41_runner.app_config import (
    RunConfig,
    config_dir,
    resolve_kv_dtype,
    validate,
)


def test_default_composes_and_validates() -> None:
    cfg = ds41_runner.compose([])
    v = validate(cfg)
    assert isinstance(v.run, RunConfig)
    assert v.run.mode.name == "bi" and v.run.kv_dtype.name == "auto"
    assert v.run.graph.name == "eager" and v.run.workload.name == "small"
    assert v.model.vocab_size > 0 and v.model.heads == cfg.model.heads


def test_group_swaps_and_field_overrides() -> None:
    cfg = ds41_runner.compose(
        ["kv_dtype=fp8_ds_mla", "chunk_size=16", "mode=fast", "graph=cuda_graph",
         "workload=shared_prefix", "model.window=16", "graph.batch_sizes=[1,4]"]
    )  # fmt: skip
    assert cfg.kv_dtype.name == "fp8_ds_mla" and cfg.chunk_size == 16
    assert cfg.mode.name == "fast" and cfg.graph.name == "cuda_graph"
    assert list(cfg.graph.batch_sizes) == [1, 4]
    assert cfg.workload.shared_prefix_len == 32 and cfg.model.window == 16
    assert validate(cfg).model.window == 16


@pytest.mark.parametrize(
    ("kv", "mode", "expected"),
    [("auto", "bi", "nvfp4_ds_mla"), ("auto", "fast", "fp8_ds_mla"), ("bf16", "bi", "bf16")],
)
def test_auto_kv_dtype(kv: str, mode: str, expected: str) -> None:
    assert resolve_kv_dtype(kv, mode) == expected


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("chunk_size=0", "chunk_size must be a positive"),
        ("page_size=-4", "page_size must be a positive"),
        ("device=tpu", "device must be one of"),
        ("backend=cuda", "backend must be one of"),
        ("max_tokens_per_request=50", "multiple of page_size"),
        ("workload.prompt_len_max=2", "prompt_len_max must be >= prompt_len_min"),
        ("workload.max_new_tokens=0", "workload.max_new_tokens must be a positive"),
        ("workload.temperatures=[]", "temperatures must not be empty"),
        ("workload.arrivals=[0,1]", "arrivals must have num_requests"),
        ("graph.batch_sizes=[4,2]", "strictly increasing"),
        ("model.heads=0", "heads must be a positive int"),
        ("model.compress_ratios=[0,3]", "compress_ratios"),
        ("+model.not_a_field=1", "unknown fields"),
        ("max_tokens_per_request=16", "exceeds max_tokens_per_request"),
        ("page_size=3 max_tokens_per_request=63", "multiple of every compress ratio"),
        ("model.max_position=256", "max_tokens_per_request must be <= model.max_position"),
        # Appended keys the schema does not have used to be dropped without a word.
        ("+foo=1", r"unknown config keys \['foo'\]"),
        ("+workload.bar=2", r"unknown config keys \['workload.bar'\]"),
        # Named the field, not "invalid literal for int()".
        ("model.kv_source_layer_ids=abc", "model.kv_source_layer_ids must be a list of ints"),
        ("model.compress_ratios=[0,x]", "model.compress_ratios must be a list of ints"),
        ("model.heads=x", "model.heads must be a positive int"),
        # The cache needs whole compressor groups per page with or without the prefix cache
        # (used to pass compose and fail in Engine.from_config).
        (
            "page_size=3 max_tokens_per_request=63 prefix_cache=false",
            r"page_size must be a multiple of every compress ratio in use \[1, 2\] \(e.g. 2\)",
        ),
        # Refused up front with the bytes it would need (used to die with a bare MemoryError).
        ("num_pages=1000000000", "num_pages = 1000000000 needs .* GiB of paged cache"),
    ],
)
def test_bad_values_fail_at_compose_naming_the_field(override: str, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        ds41_runner.compose(override.split())


def test_type_errors_and_unknown_options() -> None:
    with pytest.raises(ConfigCompositionException):
        ds41_runner.compose(["chunk_size=abc"])
    with pytest.raises(MissingConfigException):
        ds41_runner.compose(["kv_dtype=fp4"])
    with pytest.raises(ConfigCompositionException):
        ds41_runner.compose(["no_such_field=1"])


def test_config_dir_is_the_repository_configs() -> None:
    d = config_dir()
    assert d is not None and (d / "config.yaml").is_file()
    # The typed node accepts exactly the documented choices.
    assert OmegaConf.structured(RunConfig).chunk_size == 32


def test_compose_works_from_another_cwd_and_without_configs(tmp_path: Path) -> None:
    # A fresh interpreter in an unrelated directory: once with the repo configs found from the
    # package location, once with discovery disabled (options served from ConfigStore).
    code = (
        "import sys, ds41_runner.app_config as C\n"
        "if sys.argv[1] == 'none':\n"
        "    C.config_dir = lambda: None\n"
        "cfg = C.compose(['chunk_size=7', 'mode=fast', 'workload=tiny'])\n"
        "print(C.config_dir(), cfg.chunk_size, cfg.mode.name, cfg.model.vocab_size)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DS41_CONFIG_DIR"}
    for mode in ("repo", "none"):
        out = subprocess.run(
            [sys.executable, "-W", "error::UserWarning", "-c", code, mode],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        where, chunk, m, vocab = out.stdout.split()
        assert (where == "None") == (mode == "none")
        assert (chunk, m) == ("7", "fast") and int(vocab) > 0


def test_built_in_fallback_options_match_the_yaml_files() -> None:
    # Installed without the repository, ConfigStore serves these; they must not drift.
    from ds41_runner.app_config import (
        GRAPHS,
        KV_DTYPES,
        MODEL_PRESETS,
        MODES,
        WORKLOADS,
        GraphConfig,
        KvDtypeConfig,
        ModeConfig,
        WorkloadConfig,
    )
    from ds41_runner.model import ModelConfig

    d = config_dir()
    assert d is not None
    cases = [("workload", n, WorkloadConfig, w) for n, w in WORKLOADS.items()]
    cases += [("kv_dtype", n, KvDtypeConfig, KvDtypeConfig(name=n)) for n in KV_DTYPES]
    cases += [("mode", n, ModeConfig, ModeConfig(name=n)) for n in MODES]
    cases += [("graph", n, GraphConfig, GraphConfig(name=n)) for n in GRAPHS]
    for group, name, schema, built_in in cases:
        from_yaml = OmegaConf.merge(
            OmegaConf.structured(schema), OmegaConf.load(d / group / f"{name}.yaml")
        )
        assert from_yaml == OmegaConf.structured(built_in), f"{group}/{name}"
    for name in MODEL_PRESETS:
        path = d / "model" / f"{name}.yaml"
        if path.is_file():
            node = OmegaConf.load(path)
            assert ds41_runner.app_config.build_model_config(node) == ModelConfig.preset(name), name


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8_ds_mla", "nvfp4_ds_mla"])
def test_cache_bytes_estimate_matches_the_allocation(kv_dtype: str) -> None:
    # The estimate behind the num_pages check, against the storage KVState really allocates.
    from ds41_runner.app_config import cache_bytes
    from ds41_runner.model import KVState

    v = validate(ds41_runner.compose([f"kv_dtype={kv_dtype}", "num_pages=6", "page_size=4",
                                      "max_tokens_per_request=64", "workload=tiny"]))  # fmt: skip
    kv = KVState(v.model, kv_dtype=kv_dtype, max_requests=v.run.max_requests,
                 max_tokens_per_request=64, num_pages=6, page_size=4)  # fmt: skip
    caches = [*kv.window, *kv.comp.values(), *kv.index_keys.values()]
    assert cache_bytes(v.run, v.model) == sum(c.storage.numel() for c in caches)


def test_num_pages_limit_names_the_largest_that_fits() -> None:
    from ds41_runner.app_config import cache_bytes, device_memory_bytes

    v = validate(ds41_runner.compose(["device=cpu"]))
    _, have = device_memory_bytes("cpu")
    per_page = cache_bytes(v.run, v.model) // v.run.num_pages
    limit = have // per_page
    ds41_runner.compose(["device=cpu", f"num_pages={limit}"])  # fits: accepted
    with pytest.raises(ValueError, match=f"num_pages must be <= {limit}"):
        ds41_runner.compose(["device=cpu", f"num_pages={limit + 1}"])
