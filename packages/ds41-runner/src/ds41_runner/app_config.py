"""The Hydra app's schema: structured configs of the ds41 runner and `compose()`.

The model's own geometry is `ds41_runner.model.config.ModelConfig`; this module holds the run
(the model node, cache formats, mode, graphs, workload, cache geometry). Every group option
(`kv_dtype/`, `mode/`, `graph/`, `workload/`) merges into a typed node of `RunConfig`, so
omegaconf rejects a wrongly typed value; `validate()` then instantiates the
dataclasses, whose `__post_init__` checks ranges and choices, rejects keys the schema does not
know, builds the model's `ModelConfig` from the `model` node, checks the cache geometry against
the model (page size vs compress ratios) and estimates the cache bytes against the device's
memory. `compose()` runs both, so a bad config fails at compose time with a message naming the
field and the expected value, before any tensor is allocated.

Configs live in the top-level `configs/` of the repository. When that directory cannot be found
(the package installed elsewhere) the same options are served from Hydra's ConfigStore.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from .model import ModelConfig

KV_DTYPES: tuple[str, ...] = ("bf16", "fp8_ds_mla", "nvfp4_ds_mla", "auto")
MODES: tuple[str, ...] = ("bi", "fast")
GRAPHS: tuple[str, ...] = ("eager", "cuda_graph")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
BACKENDS: tuple[str, ...] = ("auto", "torch", "triton")
MODEL_PRESETS: tuple[str, ...] = ("tiny", "flash_mini", "flash_wide", "flash")
CONFIG_DIR_ENV = "DS41_CONFIG_DIR"


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def _positive(name: str, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")


@dataclass
class KvDtypeConfig:
    """Cache formats (SPEC section 4); `auto` = nvfp4_ds_mla under mode=bi, fp8_ds_mla else."""

    name: str = "auto"

    def __post_init__(self) -> None:
        _choice("kv_dtype.name", self.name, KV_DTYPES)


@dataclass
class ModeConfig:
    """`bi`: batch-invariant kernels (SPEC section 9); `fast`: the fast paths."""

    name: str = "bi"

    def __post_init__(self) -> None:
        _choice("mode.name", self.name, MODES)


@dataclass
class GraphConfig:
    """`cuda_graph` captures one whole-step graph per bucket of rows (`batch_sizes`; empty =
    `ds41_runner.engine.default_buckets(chunk_size)`: 1, 2, 4 .. 512, then multiples of 256 up
    to the token budget); any mix of prefill and decode rows up to a bucket replays it."""

    name: str = "eager"
    batch_sizes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        _choice("graph.name", self.name, GRAPHS)
        for b in self.batch_sizes:
            _positive("graph.batch_sizes[*]", b)
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError(
                f"graph.batch_sizes must be strictly increasing, got {list(self.batch_sizes)}"
            )


@dataclass
class ParallelConfig:
    """Tensor parallelism (`ds41_runner.parallel`): `tp` ranks, one process each, launched by
    `torchrun --nproc-per-node=tp -m ds41_runner parallel.tp=tp ...`; `timeout_s` bounds
    every collective, so a rank that dies makes the others fail instead of hang."""

    name: str = "default"
    tp: int = 1
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp <= 0:
            raise ValueError(f"parallel.tp must be a positive integer, got {self.tp!r}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(
                f"parallel.timeout_s must be a finite number > 0, got {self.timeout_s}"
            )


@dataclass
class WorkloadConfig:
    """Synthetic prompts: request i arrives at step `arrivals[i]` (or `i * arrival_interval`).

    Prompt lengths are drawn uniformly from [prompt_len_min, prompt_len_max] with `seed`;
    the first `shared_prefix_len` tokens are common to every prompt (exercises the prefix
    cache). Temperatures cycle over `temperatures`; request i samples with seed `seed + i`.
    """

    name: str = "small"
    num_requests: int = 6
    prompt_len_min: int = 4
    prompt_len_max: int = 32
    shared_prefix_len: int = 0
    max_new_tokens: int = 6
    temperatures: list[float] = field(default_factory=lambda: [0.0, 0.8])
    seed: int = 0
    arrival_interval: int = 2
    arrivals: list[int] | None = None

    def __post_init__(self) -> None:
        _positive("workload.num_requests", self.num_requests)
        _positive("workload.prompt_len_min", self.prompt_len_min)
        if self.prompt_len_max < self.prompt_len_min:
            raise ValueError(
                f"workload.prompt_len_max must be >= prompt_len_min = {self.prompt_len_min}, "
                f"got {self.prompt_len_max}"
            )
        if not 0 <= self.shared_prefix_len <= self.prompt_len_min:
            raise ValueError(
                f"workload.shared_prefix_len must lie in [0, prompt_len_min = "
                f"{self.prompt_len_min}], got {self.shared_prefix_len}"
            )
        _positive("workload.max_new_tokens", self.max_new_tokens)
        if not self.temperatures:
            raise ValueError("workload.temperatures must not be empty")
        for t in self.temperatures:
            if not t >= 0.0:
                raise ValueError(f"workload.temperatures must be >= 0, got {t}")
        if self.arrival_interval < 0:
            raise ValueError(f"workload.arrival_interval must be >= 0, got {self.arrival_interval}")
        if self.arrivals is not None:
            if len(self.arrivals) != self.num_requests:
                raise ValueError(
                    f"workload.arrivals must have num_requests = {self.num_requests} entries, "
                    f"got {len(self.arrivals)}"
                )
            if any(a < 0 for a in self.arrivals):
                raise ValueError(f"workload.arrivals must be >= 0, got {list(self.arrivals)}")


@dataclass
class RunConfig:
    """The whole run. `model` holds `ModelConfig` fields (written by `configs/model/`)."""

    model: Any = None
    kv_dtype: KvDtypeConfig = field(default_factory=KvDtypeConfig)
    mode: ModeConfig = field(default_factory=ModeConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    chunk_size: int = 32
    device: str = "auto"
    backend: str = "auto"
    seed: int = 0
    page_size: int = 16
    num_pages: int = 512
    max_requests: int = 16
    max_tokens_per_request: int = 512
    prefix_cache: bool = True
    overlap: bool = True
    """Plan and launch step n+1 while the device runs step n (results one step later)."""
    check_invariance: bool = True
    plot: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        _positive("chunk_size", self.chunk_size)
        _choice("device", self.device, DEVICES)
        _choice("backend", self.backend, BACKENDS)
        _positive("page_size", self.page_size)
        _positive("num_pages", self.num_pages)
        _positive("max_requests", self.max_requests)
        _positive("max_tokens_per_request", self.max_tokens_per_request)
        if self.max_tokens_per_request % self.page_size:
            raise ValueError(
                f"max_tokens_per_request must be a multiple of page_size = {self.page_size}, "
                f"got {self.max_tokens_per_request}"
            )
        if self.graph.name == "cuda_graph" and self.device == "cpu":
            raise ValueError("graph=cuda_graph needs device=cuda or device=auto, got device=cpu")
        need = self.workload.prompt_len_max + self.workload.max_new_tokens
        if need > self.max_tokens_per_request:
            raise ValueError(
                f"workload.prompt_len_max + workload.max_new_tokens = {need} exceeds "
                f"max_tokens_per_request = {self.max_tokens_per_request}"
            )


def resolve_kv_dtype(kv_dtype: str, mode: str) -> str:
    """`auto` -> nvfp4_ds_mla under mode=bi, fp8_ds_mla under mode=fast (SPEC section 4)."""
    _choice("kv_dtype", kv_dtype, KV_DTYPES)
    _choice("mode", mode, MODES)
    if kv_dtype != "auto":
        return kv_dtype
    return "nvfp4_ds_mla" if mode == "bi" else "fp8_ds_mla"


def build_model_config(node: Any) -> ModelConfig:
    """The model helper's `ModelConfig` from a config node (mapping of its fields).

    A node that names a `preset` starts from `ModelConfig.preset(preset)` and overrides the
    other given fields. Raises ValueError naming the field on a bad value.
    """
    from .model import ModelConfig

    if node is None:
        raise ValueError("model must be set (e.g. model=tiny)")
    raw = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    if not isinstance(raw, dict):
        raise ValueError(f"model must be a mapping of ModelConfig fields, got {type(raw)}")
    known = _field_names(ModelConfig)
    data: dict[str, Any] = {str(k): v for k, v in raw.items()}
    preset = data.pop("preset", None)
    if "name" not in known:  # a display name some model configs carry
        data.pop("name", None)
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise ValueError(f"model has unknown fields {unknown}; ModelConfig fields: {sorted(known)}")
    for name in _TUPLE_FIELDS:
        if name in data:
            data[name] = _int_list(f"model.{name}", data[name])
    try:
        if preset is not None:
            cfg = dataclasses.replace(ModelConfig.preset(str(preset)), **data)
        else:
            cfg = ModelConfig(**data)
        cfg.validate()
    except ValueError as exc:
        msg = str(exc)
        raise ValueError(msg if msg.startswith("model") else f"model.{msg}") from None
    return cfg


_TUPLE_FIELDS = ("compress_ratios", "kv_source_layer_ids", "index_source_layer_ids")


def _int_list(name: str, value: Any) -> list[int]:
    """A list of ints from a config value; ValueError naming `name` otherwise."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} must be a list of ints (e.g. [2, 5]), got {value!r}")
    bad = [x for x in value if isinstance(x, bool) or not isinstance(x, int)]
    if bad:
        raise ValueError(f"{name} must be a list of ints (e.g. [2, 5]), got {list(value)!r}")
    return [int(x) for x in value]


def _field_names(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@dataclass
class Validated:
    """A composed config after validation: the typed run and the model config."""

    run: RunConfig
    model: ModelConfig


def validate(cfg: DictConfig) -> Validated:
    """Check a composed config completely; raise ValueError/TypeError naming the field.

    Rejects keys the schema does not know (`+foo=1`), instantiates the dataclasses (running
    every `__post_init__` check), builds the ModelConfig, checks the cache geometry against it
    and estimates the cache's bytes against the device's memory (`check_cache_memory`).
    """
    unknown = unknown_keys(cfg, RunConfig)
    if unknown:
        raise ValueError(
            f"unknown config keys {unknown}; the schema (RunConfig) has "
            f"{sorted(_field_names(RunConfig))}"
        )
    run = OmegaConf.to_object(cfg)
    if not isinstance(run, RunConfig):
        raise TypeError(f"config must be a RunConfig node, got {type(run).__name__}")
    model = build_model_config(cfg.model)
    # Every kv-source compressor writes whole groups into a page (KVState, SPEC section 5) and a
    # cached prefix ends on a page boundary, so the page size must be a multiple of each ratio
    # in use, whether or not the prefix cache is on.
    bad = [m for m in model.ratios_in_use if run.page_size % m]
    if bad:
        lcm = math.lcm(*model.ratios_in_use)
        raise ValueError(
            f"page_size must be a multiple of every compress ratio in use "
            f"{list(model.ratios_in_use)} (e.g. {lcm * max(1, run.page_size // lcm)}), "
            f"got {run.page_size}"
        )
    if run.max_tokens_per_request > model.max_position:
        raise ValueError(
            f"max_tokens_per_request must be <= model.max_position = {model.max_position}, "
            f"got {run.max_tokens_per_request}"
        )
    check_cache_memory(run, model)
    from .parallel.checks import check_parallel

    check_parallel(run, model)
    return Validated(run, model)


def unknown_keys(node: Any, schema: type) -> list[str]:
    """Dotted names of the keys of `node` that the dataclass `schema` (recursively) lacks.

    Hydra's `+key=value` appends keys that the structured schema would otherwise drop without a
    word; `model` is an open mapping checked by `build_model_config`, `hydra` is Hydra's own.
    """
    if not isinstance(node, DictConfig):
        return []
    hints = typing.get_type_hints(schema)
    out: list[str] = []
    for key in node:
        name = str(key)
        if name == "hydra" and schema is RunConfig:
            continue
        if name not in hints:
            out.append(name)
            continue
        sub = hints[name]
        if dataclasses.is_dataclass(sub) and isinstance(sub, type):
            out += [f"{name}.{k}" for k in unknown_keys(node.get(name), sub)]
    return sorted(out)


def cache_bytes(run: RunConfig, model: ModelConfig) -> int:
    """Bytes the paged caches of `KVState` allocate for this run (all layers, all kinds).

    Per page: one window cache per layer, and per kv-source layer its compressed cache and its
    index-key cache, each page padded to `PAGE_ALIGN` bytes (SPEC section 4).
    """
    from ds41_cache.formats import row_layout
    from ds41_cache.paged import default_page_stride

    from .model.kv import COMPRESSED_FORMAT, INDEX_KEY_FORMAT, WINDOW_FORMAT

    kv = resolve_kv_dtype(run.kv_dtype.name, run.mode.name)

    def page(fmt: str, dim: int) -> int:
        return default_page_stride(row_layout(fmt, dim), run.page_size)

    per_page = model.n_layers * page(WINDOW_FORMAT[kv], model.head_dim)
    per_page += len(model.kv_source_layer_ids) * (
        page(COMPRESSED_FORMAT[kv], model.head_dim) + page(INDEX_KEY_FORMAT, model.index_head_dim)
    )
    return per_page * run.num_pages


def device_memory_bytes(device: str) -> tuple[str, int]:
    """(resolved device name, its total memory in bytes) for `device` in DEVICES."""
    import torch

    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if torch.cuda.is_available():
            return "cuda", int(torch.cuda.get_device_properties(0).total_memory)
        return "cuda", 0  # resolve_device names the problem when the engine is built
    return "cpu", int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def check_cache_memory(run: RunConfig, model: ModelConfig) -> None:
    """Refuse a cache geometry whose pages alone exceed the device's memory (names num_pages)."""
    need = cache_bytes(run, model)
    where, have = device_memory_bytes(run.device)
    if have <= 0 or need <= have:
        return
    per_page = need // run.num_pages
    raise ValueError(
        f"num_pages = {run.num_pages} needs {_gib(need)} of paged cache ({per_page} bytes per "
        f"page of {run.page_size} tokens over {model.n_layers} layers), more than the {where} "
        f"memory of {_gib(have)}: num_pages must be <= {have // per_page}"
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


# ---------------------------------------------------------------------------------------------
# Config discovery and registration


def config_dir() -> Path | None:
    """The `configs/` directory: $DS41_CONFIG_DIR, else the repository's, else None."""
    env = os.environ.get(CONFIG_DIR_ENV)
    if env:
        path = Path(env).resolve()
        if not (path / "config.yaml").is_file():
            raise FileNotFoundError(f"{CONFIG_DIR_ENV}={env} holds no config.yaml")
        return path
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "configs"
        if (candidate / "config.yaml").is_file() and (candidate / "kv_dtype").is_dir():
            return candidate
    return None


_DEFAULTS: list[Any] = [
    "_run_schema",
    {"model": "tiny"},
    {"kv_dtype": "auto"},
    {"mode": "bi"},
    {"graph": "eager"},
    {"workload": "small"},
    {"parallel": "default"},
    "_self_",
]

_registered = False


def register_configs() -> None:
    """Store the schema and every built-in option missing from `configs/` in ConfigStore.

    With the repository's `configs/` the YAML files win (they are the documented configs);
    options without a file (all of them when the package is installed elsewhere) are served
    from here, so `compose()` and the app work from any working directory.
    """
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="_run_schema", node=RunConfig)
    directory = config_dir()

    def missing(group: str | None, name: str) -> bool:
        if directory is None:
            return True
        sub = directory / group if group else directory
        return not (sub / f"{name}.yaml").is_file()

    options: list[tuple[str, str, Any]] = []
    options += [("kv_dtype", n, KvDtypeConfig(name=n)) for n in KV_DTYPES]
    options += [("mode", n, ModeConfig(name=n)) for n in MODES]
    options += [("graph", n, GraphConfig(name=n)) for n in GRAPHS]
    options += [("workload", n, w) for n, w in WORKLOADS.items()]
    options += [("parallel", "default", ParallelConfig())]
    try:
        from .model import ModelConfig

        options += [("model", n, ModelConfig.preset(n).to_dict()) for n in MODEL_PRESETS]
    except ImportError:  # the model package is missing: no model options to offer
        pass
    for group, name, node in options:
        if missing(group, name):
            cs.store(group=group, name=name, node=node)
    if missing(None, "config"):
        cs.store(name="config", node={"defaults": _DEFAULTS})
    _registered = True


WORKLOADS: dict[str, WorkloadConfig] = {
    "small": WorkloadConfig(),
    "tiny": WorkloadConfig(
        name="tiny", num_requests=3, prompt_len_min=3, prompt_len_max=12, max_new_tokens=4
    ),
    "shared_prefix": WorkloadConfig(
        name="shared_prefix",
        num_requests=6,
        prompt_len_min=36,
        prompt_len_max=48,
        shared_prefix_len=32,
        max_new_tokens=6,
        arrival_interval=3,
    ),
}


def compose(overrides: list[str] | None = None, config_name: str = "config") -> DictConfig:
    """Compose the runner config with Hydra (same configs as the app) and validate it.

    Works from any working directory. Raises ValueError/TypeError (or Hydra's
    ConfigCompositionException for unknown options and type errors) on bad values.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    overrides = list(overrides or [])
    directory = config_dir()
    saved = GlobalHydra.instance().hydra
    if saved is not None:  # e.g. called from inside a running Hydra app: compose on a fresh one
        GlobalHydra.instance().clear()
    try:
        if directory is not None:
            ctx: Any = initialize_config_dir(config_dir=str(directory), version_base="1.3")
        else:
            ctx = initialize(config_path=None, version_base="1.3")
        with ctx:
            cfg = hydra_compose(config_name=config_name, overrides=overrides)
    finally:
        if saved is not None:
            GlobalHydra.instance().clear()
            GlobalHydra.instance().initialize(saved)
    validate(cfg)
    return cfg
