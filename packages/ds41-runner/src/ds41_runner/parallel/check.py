"""Tensor-parallel invariance check: launched with torchrun, compares TP=N with TP=1.

    torchrun --standalone --nproc-per-node=2 -m ds41_runner.parallel.check \\
        --out result.json [--kv-dtypes nvfp4_ds_mla,fp8_ds_mla] [--fast] [--sampling] \\
        -- model=tiny device=cpu

For each kv dtype (mode=bi): every rank runs the app's workload at `parallel.tp=N` (the
batched run, then each request alone and through `score`, compared bitwise by the app); rank 0
then runs the same workload in one process (TP=1, the plain `Model`) and compares every
request's tokens and log-probs bitwise with the TP=N run. `--fast` also runs mode=fast at TP=N
(allowed to differ from TP=1; reported). `--sampling` (mode=bi, the first kv dtype) also
generates a mix of greedy and sampled requests (temperature, top-k, top-p: `SAMPLING_MIX`) at
TP=N, batched and each alone, scores the generated tokens, and compares all of it bitwise with
the batched TP=1 run. Rank 0 writes the verdicts to `--out` (JSON).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console


def _compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    tokens = [x["tokens"] == y["tokens"] for x, y in zip(a, b, strict=True)]
    logprobs = [x["logprobs"] == y["logprobs"] for x, y in zip(a, b, strict=True)]
    diff = 0.0
    for x, y in zip(a, b, strict=True):
        if len(x["logprobs"]) == len(y["logprobs"]):
            pairs = zip(x["logprobs"], y["logprobs"], strict=True)
            diff = max([diff] + [abs(p - q) for p, q in pairs])
        else:
            diff = float("inf")
    return {
        "requests": len(a),
        "tokens_equal": sum(tokens),
        "logprobs_equal": sum(logprobs),
        "bitwise": all(tokens) and all(logprobs),
        "max_abs_diff": diff,
    }


def _requests(rep: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"tokens": r["tokens"], "logprobs": r["logprobs"]} for r in rep["requests"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--kv-dtypes", default="auto")
    p.add_argument("--fast", action="store_true", help="also run mode=fast at TP=N")
    p.add_argument("--sampling", action="store_true", help="also check SAMPLING_MIX (mode=bi)")
    p.add_argument("overrides", nargs="*", help="config overrides (after --)")
    args = p.parse_args(argv)

    import torch

    from ..app import run as app_run
    from ..app_config import ParallelConfig, Validated, compose, validate
    from ..engine import Engine
    from ..engine.engine import resolve_device
    from ..model import Model
    from ..model.weights import init_weights
    from .dist import init_tensor_parallel, shutdown
    from .model import TPModel

    world = int(os.environ.get("WORLD_SIZE", "1"))
    out = Path(args.out)
    quiet = Console(file=open(os.devnull, "w"))  # noqa: SIM115
    base = [*args.overrides, f"parallel.tp={world}", "plot=false", "progress=false"]
    result: dict[str, Any] = {
        "world": world, "overrides": args.overrides, "bi": [], "fast": None, "sampling": None,
    }  # fmt: skip
    modes = ["bi", "fast"] if args.fast else ["bi"]
    kvs = args.kv_dtypes.split(",")
    first = validate(compose([*base, f"kv_dtype={kvs[0]}"]))
    run0 = first.run
    group = init_tensor_parallel(world, resolve_device(run0.device).type, run0.parallel.timeout_s)
    rank = group.rank
    # One draw of the full weights (CPU generator: the weights of `Model`) serves every model.
    full = init_weights(first.model, torch.device("cpu"), seed=run0.seed)
    on_device = _to_device(full, group.device)
    models: dict[str, tuple[Any, Any]] = {}
    for mode in modes:
        tp_model = TPModel(first.model, group=group, mode=mode, backend=run0.backend,
                           seed=run0.seed, full_weights=full)  # fmt: skip
        single = None
        if rank == 0:
            single = Model(first.model, mode=mode, backend=run0.backend, device=group.device,
                           seed=run0.seed, weights=on_device)  # fmt: skip
        models[mode] = (tp_model, single)
    del full, on_device
    try:
        for kv in kvs:
            v = validate(compose([*base, f"kv_dtype={kv}", "mode=bi"]))
            tp_model, one_model = models["bi"]
            t0 = time.perf_counter()
            eng = Engine.from_config(v, model=tp_model)
            rep_n = app_run(v, out.parent / f"tp{world}_{kv}", console=quiet, engine=eng)
            del eng
            entry: dict[str, Any] = {
                "kv_dtype": rep_n["kv_dtype"],
                "tp_seconds": time.perf_counter() - t0,
                "tp_invariance": rep_n["invariance"],
            }
            if rank == 0:
                one = Validated(dataclasses.replace(v.run, parallel=ParallelConfig(tp=1)), v.model)
                eng = Engine.from_config(one, model=one_model)
                rep_1 = app_run(one, out.parent / f"tp1_{kv}", console=quiet, engine=eng)
                del eng
                entry["vs_tp1"] = _compare(_requests(rep_n), _requests(rep_1))
                entry["tp1_invariance"] = rep_1["invariance"]
            result["bi"].append(entry)
            gc.collect()
        if args.sampling:
            v = validate(compose([*base, f"kv_dtype={kvs[0]}", "mode=bi"]))
            tp_model, one_model = models["bi"]
            one = Validated(dataclasses.replace(v.run, parallel=ParallelConfig(tp=1)), v.model)
            result["sampling"] = _sampling_check(
                lambda: Engine.from_config(v, model=tp_model),
                (lambda: Engine.from_config(one, model=one_model)) if rank == 0 else None,
                v.model.vocab_size,
            )
            gc.collect()
        if args.fast:
            v = validate(compose([*base, "mode=fast"]))
            wl_args = _workload(v)
            tp_model, one_model = models["fast"]
            got = Engine.from_config(v, model=tp_model).generate(*wl_args[0], **wl_args[1])
            fast: dict[str, Any] = {"ran": all(r.ok for r in got)}
            if rank == 0:
                one = Validated(dataclasses.replace(v.run, parallel=ParallelConfig(tp=1)), v.model)
                eng = Engine.from_config(one, model=one_model)
                ref = eng.generate(*wl_args[0], **wl_args[1])
                fast["vs_tp1"] = _compare(
                    [{"tokens": r.tokens, "logprobs": r.logprobs} for r in got],
                    [{"tokens": r.tokens, "logprobs": r.logprobs} for r in ref],
                )
            result["fast"] = fast
        import torch.distributed as dist

        dist.barrier()
    finally:
        shutdown()
    if rank == 0:
        out.write_text(json.dumps(result, indent=2))
        print(json.dumps(result, indent=2))
    return 0


SAMPLING_MIX: list[dict[str, Any]] = [
    {"temperature": 0.0, "top_k": 3, "top_p": 1.0},  # greedy: the filters do not apply
    {"temperature": 1.0, "top_k": 0, "top_p": 1.0},
    {"temperature": 0.8, "top_k": 5, "top_p": 1.0},
    {"temperature": 1.3, "top_k": 0, "top_p": 0.7},
    {"temperature": 1.0, "top_k": 40, "top_p": 0.9},
]
"""The `--sampling` requests' parameters (one request each)."""


def _sampling_check(make_tp: Any, make_one: Any, vocab: int, max_new: int = 6) -> dict[str, Any]:
    """SAMPLING_MIX at TP=N: batched, each request alone, and `score` of the batched tokens;
    with `make_one` (rank 0) the batched TP=1 run too. Every comparison is bitwise."""
    import torch

    g = torch.Generator().manual_seed(1234)
    n = len(SAMPLING_MIX)
    prompts = [torch.randint(0, vocab, (5 + 2 * i,), generator=g).tolist() for i in range(n)]
    kw = {k: [m[k] for m in SAMPLING_MIX] for k in ("temperature", "top_k", "top_p")}
    seeds = [77 + i for i in range(n)]

    def run(make: Any, idx: list[int]) -> list[Any]:
        sub = {k: [v[i] for i in idx] for k, v in kw.items()}
        eng = make()
        got: list[Any] = eng.generate(
            [prompts[i] for i in idx], max_new, [seeds[i] for i in idx], **sub
        )
        return got

    batched = run(make_tp, list(range(n)))
    alone = [run(make_tp, [i])[0] for i in range(n)]
    seqs = [prompts[i] + batched[i].tokens for i in range(n)]
    scored = make_tp().score(seqs, [len(p) for p in prompts])

    def rows(rs: list[Any]) -> list[dict[str, Any]]:
        return [{"tokens": r.tokens, "logprobs": r.logprobs} for r in rs]

    out: dict[str, Any] = {
        "ok": all(r.ok for r in batched),
        "alone": _compare(rows(batched), rows(alone)),
        "score": _compare(rows(batched), [{"tokens": r.tokens, "logprobs": lp}
                                          for r, lp in zip(batched, scored, strict=True)]),
        "distinct_tokens": len({t for r in batched for t in r.tokens}),
    }  # fmt: skip
    if make_one is not None:
        out["vs_tp1"] = _compare(rows(batched), rows(run(make_one, list(range(n)))))
    return out


def _to_device(w: Any, device: Any) -> Any:
    """A `ModelWeights` with every tensor on `device` (the one-process model's copy)."""
    from ..model.weights import LayerWeights, ModelWeights

    def mv(t: Any) -> Any:
        return None if t is None else t.to(device)

    layers = [LayerWeights(**{k: mv(v) for k, v in vars(lw).items()}) for lw in w.layers]
    return ModelWeights(mv(w.embed), mv(w.final_norm), mv(w.lm_head), layers)


def _workload(v: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    from ..app import make_workload

    wl = make_workload(v.run.workload, v.model.vocab_size)
    return (wl.prompts, wl.max_new_tokens), {
        "seeds": wl.seeds,
        "arrivals": wl.arrivals,
        "temperature": wl.temperatures,
    }


if __name__ == "__main__":
    sys.exit(main())
