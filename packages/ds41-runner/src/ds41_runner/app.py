"""The Hydra app `ds41-run` (also `python -m ds41_runner`).

Runs the configured workload batched (continuous batching, chunked prefill), then checks
invariance: every request re-run alone on a cold prefix cache and its log-probs recomputed with
`score`, both compared bitwise with the batched run. Shows progress while it runs, prints a
table, writes report.json, report.md and plot.png to the Hydra output directory; a `-m` sweep
also writes summary.md, summary.json and summary.png to the sweep directory. Exits non-zero when
a config is rejected (printed once, nothing left on disk) or mode=bi and a check failed.

    ds41-run                                   # model=tiny on the CPU
    ds41-run kv_dtype=fp8_ds_mla chunk_size=16 mode=fast
    ds41-run -m chunk_size=1,16 kv_dtype=bf16,nvfp4_ds_mla
    torchrun --nproc-per-node=2 -m ds41_runner parallel.tp=2 model=flash_mini
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
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
from .app_config import (
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


# Libraries that log at INFO into the run's output (matplotlib's "generated new fontManager" on
# a fresh machine, Pillow's plugin scan): the run's own output is the table and the reports.
_QUIET_LOGGERS = ("matplotlib", "PIL")


def quiet_library_logs() -> None:
    """Raise the libraries' loggers to WARNING so their INFO lines stay out of the run output."""
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


class _Progress:
    """Progress of the phases: a live rich bar on a terminal, else a plain line every few seconds.

    Under nox (or any pipe) rich's live display is off, so without the plain lines the job would
    be silent until the table appears.
    """

    PLAIN_EVERY_S = 5.0

    def __init__(self, enabled: bool, console: Console) -> None:
        self.enabled = enabled
        self.console = console
        self.live = enabled and console.is_terminal
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, disable=not self.live, transient=True,
        )  # fmt: skip
        self._task: Any = None
        self._name = ""
        self._unit = ""
        self._total = 0
        self._t0 = self._last = 0.0

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, highlight=False)

    def phase(self, name: str, total: int, unit: str) -> None:
        self._name, self._unit, self._total = name, unit, total
        self._t0 = self._last = time.perf_counter()
        if self.live:
            self._task = self.bar.add_task(name, total=total)
        elif self.enabled:
            self.console.print(f"{name}: 0/{total} {unit}", highlight=False)

    def update(self, done: int, detail: str = "") -> None:
        if self.live:
            self.bar.update(self._task, completed=done)
            return
        now = time.perf_counter()
        if self.enabled and (done >= self._total or now - self._last >= self.PLAIN_EVERY_S):
            self._last = now
            extra = f", {detail}" if detail else ""
            self.console.print(
                f"{self._name}: {done}/{self._total} {self._unit} ({now - self._t0:.0f} s{extra})",
                highlight=False,
            )


def run(cfg: DictConfig | Validated, output_dir: Path | str, console: Console | None = None,
        model_name: str | None = None, engine: Engine | None = None) -> dict[str, Any]:  # fmt: skip
    """Run the workload and the invariance checks; write the reports; return the report.

    `engine`: one already built for this config (default: `Engine.from_config(cfg)`)."""
    quiet_library_logs()
    v = cfg if isinstance(cfg, Validated) else validate(cfg)
    run_cfg = v.run
    out = Path(output_dir)
    console = console or Console()
    # Tensor parallelism: every rank runs the workload; rank 0 alone shows and writes it.
    main_rank = run_cfg.parallel.tp == 1 or int(os.environ.get("RANK", "0")) == 0
    with _Progress(run_cfg.progress and main_rank, console) as progress:
        if engine is None:
            engine = Engine.from_config(v)
        progress.note(
            f"ds41-run: {v.model.n_layers} layers on {engine.device}, mode={run_cfg.mode.name}, "
            f"{run_cfg.workload.num_requests} requests"
        )
        wl = make_workload(run_cfg.workload, v.model.vocab_size)
        progress.phase("batched run", sum(wl.max_new_tokens), "tokens")

        def on_step(eng: Engine, rec: StepRecord) -> None:
            progress.update(eng.stats.generated, f"step {rec.step}")

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
            progress.phase("invariance checks (alone + score)", len(ok), "requests")
            checks = {}
            for n, i in enumerate(ok):
                engine.clear_prefix_cache()  # the alone run is cold
                (alone,) = engine.generate(
                    [wl.prompts[i]], wl.max_new_tokens[i], seeds=[wl.seeds[i]],
                    temperature=wl.temperatures[i],
                )  # fmt: skip
                scored = engine.score([wl.prompts[i] + results[i].tokens], [len(wl.prompts[i])])[0]
                checks[i] = (alone, scored)
                progress.update(n + 1)

    rep_dict = _build_report(v, engine, wl, results, stats, batched_seconds, checks, model_name)
    if not main_rank:
        return rep_dict
    out.mkdir(parents=True, exist_ok=True)
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
        "tensor_parallel": r.parallel.tp,
        "arrivals": list(wl.arrivals),
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
                # (request index, rows of that request in the step, sampled a token); engines
                # without per-request step entries report none.
                "entries": [[int(a), int(b), bool(c)] for a, b, c in getattr(s, "entries", ())],
            }
            for s in stats.records
        ],
        "config_yaml": cfg_yaml,
    }


def _guess_model_name(v: Validated) -> str:
    from .app_config import MODEL_PRESETS

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


@dataclass
class _Session:
    """What the jobs of one `ds41-run` invocation leave for `main` (one job, or a `-m` sweep)."""

    failed: list[str]
    jobs: list[tuple[list[str], dict[str, Any]]]  # (the job's overrides, its report)
    sweep_dir: Path | None = None


_SESSION = _Session([], [])


@hydra.main(
    version_base="1.3",
    config_path=str(_CONFIG_DIR) if _CONFIG_DIR is not None else None,
    config_name="config",
)
def _hydra_main(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    quiet_library_logs()
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    label = " ".join(hc.overrides.task) or "(defaults)"
    try:
        v = validate(cfg)
    except (ValueError, TypeError) as exc:
        # Printed here, once; the directory Hydra made for the job is removed again.
        Console(stderr=True).print(f"[red]config error[/red] ({label}): {exc}", highlight=False)
        _SESSION.failed.append("")
        _discard_output_dir(out)
        return float("nan")
    if hc.mode == RunMode.MULTIRUN:
        _SESSION.sweep_dir = Path(hc.sweep.dir)
    report = run(v, out, model_name=hc.runtime.choices.get("model"))
    _SESSION.jobs.append((list(hc.overrides.task), report))
    inv = report["invariance"]
    if v.run.mode.name == "bi" and inv is not None and not inv["passed"]:
        _SESSION.failed.append(f"invariance check failed in {out}")
    return float(report["summary"]["tokens_per_s"])


def _discard_output_dir(path: Path) -> None:
    """Remove what Hydra wrote for a rejected job (`.hydra/`, the job log) and empty parents."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, logging.FileHandler) and Path(h.baseFilename).parent == path:
            root.removeHandler(h)
            h.close()
    shutil.rmtree(path / ".hydra", ignore_errors=True)
    for log in path.glob("*.log"):
        log.unlink()
    # Only directories that are now empty go: the job's, then (inside the working directory
    # only) Hydra's date folder above it.
    try:
        path.rmdir()
        if Path.cwd().resolve() in path.parent.resolve().parents:
            path.parent.rmdir()
    except OSError:
        pass


def _label_jobs(jobs: list[tuple[list[str], dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Each job named by the overrides that vary across the sweep (the common ones dropped)."""
    common = set.intersection(*(set(ov) for ov, _ in jobs))
    return [(" ".join(o for o in ov if o not in common) or "(defaults)", r) for ov, r in jobs]


def worker_rank_overrides(env: dict[str, str], scratch: str) -> list[str]:
    """Hydra overrides for a process that is not rank 0 of a launcher (torchrun sets RANK):
    its Hydra output folders (`.hydra/`, the job log) go to `scratch`, a private folder that
    `main` removes, so only rank 0's run appears under `outputs/` (or `multirun/`)."""
    if env.get("RANK", "0") in ("", "0"):
        return []
    return [f"hydra.run.dir={scratch}", f"hydra.sweep.dir={scratch}", "hydra.output_subdir=null"]


def main() -> None:
    """Console entry point: Hydra CLI; exit status 1 if a config was rejected or a mode=bi
    invariance check failed. A `-m` sweep ends with a summary across its jobs."""
    _SESSION.failed.clear()
    _SESSION.jobs.clear()
    _SESSION.sweep_dir = None
    scratch = None
    if os.environ.get("RANK", "0") not in ("", "0"):
        scratch = tempfile.mkdtemp(prefix=f"ds41_rank{os.environ['RANK']}_")
        sys.argv.extend(worker_rank_overrides(dict(os.environ), scratch))
    try:
        _hydra_main()
    finally:
        from .parallel import shutdown

        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        shutdown()
    if _SESSION.sweep_dir is not None and _SESSION.jobs:
        console = Console()
        jobs = _label_jobs(_SESSION.jobs)
        rep.print_sweep_table(jobs, console)
        rep.write_sweep(jobs, _SESSION.sweep_dir)
        console.print(f"sweep summary written to {_SESSION.sweep_dir}")
    if _SESSION.failed:
        for line in _SESSION.failed:
            if line:
                print(line, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
