"""The Hydra app `ds41-run` (also `python -m ds41_runner`).

Runs the configured workload batched (continuous batching, chunked prefill), then checks
invariance: every request re-run alone on a cold prefix cache and its log-probs recomputed with
`score`, both compared bitwise with the batched run. Prints a table, writes report.json,
report.md and plot.png to the Hydra output directory. Exits non-zero when mode=bi and a check
failed.

    ds41-run                                   # model=tiny on the CPU
    ds41-run kv_dtype=fp8_ds_mla chunk_size=16 mode=fast
    ds41-run -m chunk_size=1,16 kv_dtype=bf16,nvfp4_ds_mla
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import report as rep
from .config import (
    Validated,
    WorkloadConfig,
    config_dir,
    register_configs,
    resolve_kv_dtype,
    validate,
)
from .engine import Engine, Result, StepRecord


@dataclass
class Workload:
    prompts: list[list[int]]
    max_new_tokens: list[int]
    seeds: list[int]
    arrivals: list[int]
    temperatures: list[float]


def make_workload(w: WorkloadConfig, vocab_size: int) -> Workload:
    """Deterministic synthetic prompts from `w.seed` (see WorkloadConfig)."""
    g = torch.Generator().manual_seed(w.seed)
    shared = torch.randint(0, vocab_size, (w.shared_prefix_len,), generator=g).tolist()
    lens = torch.randint(w.prompt_len_min, w.prompt_len_max + 1, (w.num_requests,), generator=g)
    prompts = [
        shared + torch.randint(0, vocab_size, (n - len(shared),), generator=g).tolist()
        for n in lens.tolist()
    ]
    n = w.num_requests
    arrivals = (
        list(w.arrivals) if w.arrivals is not None else [i * w.arrival_interval for i in range(n)]
    )
    temps = [float(w.temperatures[i % len(w.temperatures)]) for i in range(n)]
    return Workload(
        prompts, [w.max_new_tokens] * n, [w.seed + i for i in range(n)], arrivals, temps
    )


def _lp_diff(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return float("inf")
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)


def _progress(enabled: bool, console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not enabled, transient=True,
    )  # fmt: skip


def run(cfg: DictConfig | Validated, output_dir: Path | str, console: Console | None = None,
        model_name: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Run the workload and the invariance checks; write the reports; return the report."""
    v = cfg if isinstance(cfg, Validated) else validate(cfg)
    run_cfg = v.run
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    console = console or Console()
    engine = Engine.from_config(v)
    wl = make_workload(run_cfg.workload, v.model.vocab_size)
    total_new = sum(wl.max_new_tokens)

    with _progress(run_cfg.progress, console) as progress:
        task = progress.add_task("batched run", total=total_new)

        def on_step(eng: Engine, rec: StepRecord) -> None:
            progress.update(task, completed=eng.stats.generated)

        engine.on_step = on_step
        t0 = time.perf_counter()
        results = engine.generate(
            wl.prompts, wl.max_new_tokens, seeds=wl.seeds, arrivals=wl.arrivals,
            temperature=wl.temperatures,
        )  # fmt: skip
        batched_seconds = time.perf_counter() - t0
        stats = engine.stats
        engine.on_step = None

        checks = None
        if run_cfg.check_invariance:
            ok = [i for i, r in enumerate(results) if r.ok]
            task2 = progress.add_task("invariance checks", total=len(ok))
            checks = {}
            for i in ok:
                engine.clear_prefix_cache()  # the alone run is cold
                (alone,) = engine.generate(
                    [wl.prompts[i]], wl.max_new_tokens[i], seeds=[wl.seeds[i]],
                    temperature=wl.temperatures[i],
                )  # fmt: skip
                scored = engine.score([wl.prompts[i] + results[i].tokens], [len(wl.prompts[i])])[0]
                checks[i] = (alone, scored)
                progress.advance(task2)

    rep_dict = _build_report(v, engine, wl, results, stats, batched_seconds, checks, model_name)
    rep.write_json(rep_dict, out / "report.json")
    rep.write_markdown(rep_dict, out / "report.md")
    if run_cfg.plot:
        rep.write_plot(rep_dict, out / "plot.png")
    rep.print_table(rep_dict, console)
    console.print(f"reports written to {out}")
    return rep_dict


def _build_report(
    v: Validated,
    engine: Engine,
    wl: Workload,
    results: list[Result],
    stats: Any,
    seconds: float,
    checks: dict[int, tuple[Result, list[float]]] | None,
    model_name: str | None,
) -> dict[str, Any]:
    r = v.run
    requests: list[dict[str, Any]] = []
    alone_eq = score_eq = tok_mis = 0
    worst_alone = worst_score = 0.0
    for i, res in enumerate(results):
        entry: dict[str, Any] = {
            "index": i,
            "prompt_len": len(wl.prompts[i]),
            "arrival": wl.arrivals[i],
            "temperature": wl.temperatures[i],
            "seed": wl.seeds[i],
            "tokens": res.tokens,
            "logprobs": res.logprobs,
            "preemptions": res.preemptions,
            "prefix_hit_tokens": res.prefix_hit_tokens,
            "error": res.error,
        }
        if checks is not None and i in checks:
            alone, scored = checks[i]
            a_eq = alone.tokens == res.tokens and alone.logprobs == res.logprobs
            s_eq = scored == res.logprobs
            da = (
                _lp_diff(alone.logprobs, res.logprobs)
                if alone.tokens == res.tokens
                else float("inf")
            )
            ds = _lp_diff(scored, res.logprobs)
            if alone.tokens != res.tokens:
                tok_mis += 1
            alone_eq += a_eq
            score_eq += s_eq
            worst_alone = max(worst_alone, da)
            worst_score = max(worst_score, ds)
            entry.update(alone_equal=a_eq, score_equal=s_eq, max_abs_diff=max(da, ds),
                         alone_tokens=alone.tokens)  # fmt: skip
        requests.append(entry)

    ok = [res for res in results if res.ok]
    lens = [len(wl.prompts[i]) + len(res.tokens) for i, res in enumerate(results) if res.ok]
    context = max(1, round(sum(lens) / len(lens))) if lens else 1
    invariance = None
    if checks is not None:
        n = len(checks)
        invariance = {
            "alone": {"checked": n, "equal": alone_eq, "max_abs_diff": worst_alone,
                      "token_mismatches": tok_mis},
            "score": {"checked": n, "equal": score_eq, "max_abs_diff": worst_score},
            "passed": alone_eq == n and score_eq == n and len(ok) == len(results),
        }  # fmt: skip
    generated = sum(len(res.tokens) for res in results)
    summary = {
        "requests": len(results),
        "requests_ok": len(ok),
        "generated_tokens": generated,
        "prefill_rows": stats.prefill_rows,
        "decode_rows": stats.decode_rows,
        "steps": stats.steps,
        "seconds": seconds,
        "tokens_per_s": generated / seconds if seconds > 0 else 0.0,
        "rows_per_s": stats.rows / seconds if seconds > 0 else 0.0,
        "context_len": context,
        "cache_bytes_per_token": engine.bytes_per_token(context),
        "preemptions": stats.preemptions,
        "prefix_hit_tokens": stats.prefix_hit_tokens,
        "graph_replays": stats.graph_replays,
    }
    cfg_yaml = OmegaConf.to_yaml(OmegaConf.structured(r))
    return {
        "model_name": model_name or _guess_model_name(v),
        "mode": r.mode.name,
        "kv_dtype": resolve_kv_dtype(r.kv_dtype.name, r.mode.name),
        "device": str(engine.device),
        "backend": getattr(engine.model, "backend", r.backend),
        "graph": r.graph.name if engine.graphs is not None else "eager",
        "chunk_size": r.chunk_size,
        "summary": summary,
        "invariance": invariance,
        "requests": requests,
        "steps": [
            {
                "step": s.step,
                "rows": s.rows,
                "requests": s.requests,
                "decode_only": s.decode_only,
                "graph": s.graph,
                "seconds": s.seconds,
            }
            for s in stats.records
        ],
        "config_yaml": cfg_yaml,
    }


def _guess_model_name(v: Validated) -> str:
    from .config import MODEL_PRESETS

    for name in MODEL_PRESETS:
        try:
            from .model import ModelConfig

            if ModelConfig.preset(name) == v.model:
                return name
        except ValueError:
            continue
    return "custom"


# ---------------------------------------------------------------------------------------------
register_configs()
_CONFIG_DIR = config_dir()
_FAILED: list[str] = []


@hydra.main(
    version_base="1.3",
    config_path=str(_CONFIG_DIR) if _CONFIG_DIR is not None else None,
    config_name="config",
)
def _hydra_main(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    try:
        v = validate(cfg)
    except (ValueError, TypeError) as exc:
        Console(stderr=True).print(f"[red]config error:[/red] {exc}")
        _FAILED.append(f"config error: {exc}")
        return float("nan")
    report = run(v, hc.runtime.output_dir, model_name=hc.runtime.choices.get("model"))
    inv = report["invariance"]
    if v.run.mode.name == "bi" and inv is not None and not inv["passed"]:
        _FAILED.append(f"invariance check failed in {hc.runtime.output_dir}")
    return float(report["summary"]["tokens_per_s"])


def main() -> None:
    """Console entry point: Hydra CLI; exit status 1 if a mode=bi invariance check failed."""
    _FAILED.clear()
    _hydra_main()
    if _FAILED:
        for line in _FAILED:
            print(line, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
