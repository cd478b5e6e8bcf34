"""Where the GPU error of `sparse_attention` comes from at adversarial magnitudes (issue 11).

CPU (default): emulates the kernels' arithmetic on `accuracy_helpers.adversarial_problem`
inputs and splits the error against float64 into its sources, per cache format pair:
  - "P bf16":  float64 scores, P rounded to bf16 before P.V (everything else float64);
  - "S rn32":  scores by a sequential fp32 round-to-nearest dot product, P float64;
  - "S tc":    scores by a model of the Hopper tensor cores (per 16-product wgmma step:
               exact products aligned to the largest exponent among them and the
               accumulator with 25 significant bits, truncated, summed, the result
               truncated to fp32), in the Triton kernel's channel order, P float64;
  - "kernel":  the whole arithmetic (tc scores, fp32 online softmax in tiles, bf16 P, tc
               P.V), in the Triton kernel's order (tiles of 64) and the Gluon kernel's (32);
printing the largest error beyond the output's bf16 half ulp / max|kv| and the error
against the README bound (`accuracy_helpers.error_bound`).

GPU, one device call (`--gpu`): saves the problems, runs the Triton kernel, the Gluon kernel
(sm_90) and the fast split path on each (parallel worker processes, so the compiles
overlap), and the tensor cores' q.kv alone (a Triton dot in the Triton kernel's order);
everything comes back in one file, $OUT/acc/bundle.pt. Then, on the CPU,
`--analyze DIR` regenerates the problems (checked against the device's digests) and prints
the table: format pair x implementation, error beyond the half ulp / max|kv|, error /
bound, lse error / lse bound; the q.kv error against float64 and whether it matches the
tensor-core model bit for bit; and the decomposition with the GPU's own scores.

    PYTHONPATH=packages/ds41-cache/src:packages/ds41-attention/src \
        python packages/ds41-attention/scripts/accuracy_study.py [--rows 4] [--json F]
    ... accuracy_study.py --lazy --rows 2   # the lazy rescale (retired lab), emulated
    ... accuracy_study.py --gpu --rows 8          # on the device machine
    ... accuracy_study.py --analyze DIR/acc --json F   # here, on the files it returned
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from accuracy_helpers import (  # noqa: E402
    _row_entries,
    _to,
    adversarial_problem,
    channel_order,
    emulate,
    error_bound,
    scores,
    tc_step,
)

COMBOS = [("mxfp8", "nvfp4"), ("mxfp8", "mxfp8"), ("mxfp8", "bf16"), ("bf16", "bf16")]
SEED = 2026


def half_ulp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp2(torch.floor(torch.log2(x.abs().clamp(min=2.0**-126))) - 8)


def summarize(out_bf16: torch.Tensor, args: tuple, ref_pack: tuple, vmax: float) -> dict:
    """Errors of a bf16 output against float64 and against the README bound."""
    ref, bound = ref_pack[0], ref_pack[1]
    o = out_bf16.double()
    err = (o - ref).abs()
    hu = half_ulp(o)
    beyond = (err - hu).clamp(min=0)
    budget = (bound - hu).clamp(min=1e-300)
    return {
        "beyond_halfulp_over_vmax": float(beyond.max() / vmax),
        "max_err_over_vmax": float(err.max() / vmax),
        "err_over_bound": float((err / bound.clamp(min=1e-300)).max()),
        # the error beyond the half ulp against the bound's own part beyond the half ulp
        "beyond_over_bound_beyond": float((beyond / budget).max()),
        "outside_bound": int((err > bound).sum()),
    }


def tie_stats(args: tuple) -> dict:
    q, wc, ss, sl, cc, cs, cl, _, scale = args
    kv, valid = _row_entries(wc, ss, sl, cc, cs, cl)
    s = (torch.einsum("thd,tnd->thn", q.double(), kv) * scale).masked_fill(
        ~valid[:, None, :], -math.inf
    )
    pi = torch.softmax(s, -1)
    top2 = pi.topk(2, -1).values[..., 1]
    return {
        "max_abs_score": float(s[torch.isfinite(s)].abs().max()),
        "heads": int(top2.numel()),
        "heads_2nd_mass_gt_1e-2": int((top2 > 1e-2).sum()),
        "vmax": float(kv.abs().max()),
    }


def cpu_study(rows: int) -> dict:
    res: dict = {}
    for wfmt, cfmt in COMBOS:
        key = f"{wfmt}+{cfmt}"
        args = adversarial_problem(wfmt, cfmt, rows, SEED)
        st = tie_stats(args)
        vmax = st["vmax"]
        variants = {
            "P bf16": emulate(args, "f64")[0],
            "S rn32": emulate(args, "rn32", p_dtype=None)[0],
            "S tc": emulate(args, "tc", p_dtype=None)[0],
            "kernel (triton order)": emulate(args, "tc", pv_tc=True)[0],
            "kernel (gluon order)": emulate(args, "tc", pv_tc=True, block_n=32, order="gluon")[0],
        }
        row = {"ties": st}
        for name, o32 in variants.items():
            ob = o32.to(torch.bfloat16)
            row[name] = summarize(ob, args, error_bound(args, ob), vmax)
        res[key] = row
        print(key, st, flush=True)
        for name in variants:
            r = row[name]
            print(
                f"   {name:22s} beyond half-ulp {r['beyond_halfulp_over_vmax']:.2e} x vmax, "
                f"err/bound {r['err_over_bound']:.3f}, beyond/bound beyond "
                f"{r['beyond_over_bound_beyond']:.3f}, outside {r['outside_bound']}",
                flush=True,
            )
    return res


def lazy_study(rows: int) -> dict:
    """The lazy rescale of the retired `gluon_lab10.py` (commit e51d281; thresholds t ln 2,
    t = 0 the eager max) in the Gluon kernel's emulated arithmetic: relative error (norm) vs
    float64, the largest error / bound (`error_bound(lazy_log=...)`), outputs outside it, lse
    error / bound; on the bench's problem (`ds41_attention.bench.make_problem`, seed 1) and the
    adversarial ones."""
    from ds41_attention.bench import FLASH, make_problem
    from ds41_attention.ops.sparse_attention.naive import reference_sparse_attention

    probs = {"bench": tuple(make_problem(FLASH, rows, torch.device("cpu"), seed=1).args())}
    for wfmt, cfmt in COMBOS:
        probs[f"{wfmt}+{cfmt}"] = adversarial_problem(wfmt, cfmt, rows, SEED)
    res: dict = {}
    for name, args in probs.items():
        ref64 = reference_sparse_attention(*args)[0].double()
        for t in (0, 8, 16, 32):
            lazy = t * math.log(2)
            o, lse = emulate(args, "tc", pv_tc=True, block_n=32, order="gluon", lazy=lazy)
            ob = o.to(torch.bfloat16)
            ref, bound, rlse, lse_b = error_bound(args, ob, lazy_log=lazy)
            err = (ob.double() - ref).abs()
            fin = torch.isfinite(rlse)
            r = {
                "rel_err": float((ob.double() - ref64).norm() / ref64.norm()),
                "err_over_bound": float((err / bound.clamp(min=1e-300)).max()),
                "outside_bound": int((err > bound).sum()),
                "lse_err_over_bound": float(((lse.double() - rlse)[fin].abs() / lse_b[fin]).max()),
            }
            res[f"{name} lazy {t} ln2"] = r
            print(f"{name:12s} lazy {t:2d} ln 2: rel err {r['rel_err']:.3e}, err/bound "
                  f"{r['err_over_bound']:.3f}, outside {r['outside_bound']}, lse err/bound "
                  f"{r['lse_err_over_bound']:.3f}", flush=True)  # fmt: skip
    return res


# ---------------------------------------------------------------- GPU part (one H200 call)


def _load(path: str) -> tuple:
    return tuple(torch.load(path, weights_only=False))


def _worker(impl: str, inputs: str, path: str) -> None:
    """Subprocess: one implementation on one saved problem; saves out and lse (impl "qk":
    the fp32 q.kv of a Triton dot in the Triton kernel's order)."""
    dev = torch.device("cuda")
    args = _to(dev, _load(inputs))
    t0 = time.time()
    if impl == "qk":
        kv, _ = _row_entries(*_load(inputs)[1:7])
        torch.save({"s": _qk_triton(args[0], kv.to(dev)).cpu()}, path)
        return
    if impl == "triton":
        from ds41_attention.ops.sparse_attention.launch import launch_sparse_attention

        out, lse = launch_sparse_attention(*args)
    elif impl == "gluon":
        from ds41_attention.ops.sparse_attention.gluon_launch import (
            launch_gluon_sparse_attention,
        )

        out, lse = launch_gluon_sparse_attention(*args)
    elif impl == "fast":
        from ds41_attention import sparse_attention

        out, lse = sparse_attention(*args, batch_invariant=False)
    else:
        raise ValueError(impl)
    torch.cuda.synchronize()
    torch.save({"out": out.cpu(), "lse": lse.cpu(), "s": time.time() - t0}, path)


def _qk_triton(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """fp32 q.kv [T, H, N] on the tensor cores: tl.dot(q_od, k_od^T, tl.dot(q_ev, k_ev^T))
    over tiles of 64 heads x 64 keys, bf16 operands (the Triton kernel's product)."""
    import triton
    import triton.language as tl

    @triton.jit
    def qk_kernel(q_ptr, k_ptr, s_ptr, N, H: tl.constexpr, D: tl.constexpr, BN: tl.constexpr):
        t = tl.program_id(0)
        nb = tl.program_id(1)
        hh = tl.arange(0, H)
        c = tl.arange(0, D // 2)
        nn = nb * BN + tl.arange(0, BN)
        qb = q_ptr + t * H * D + hh[:, None] * D + 2 * c[None, :]
        kb = k_ptr + t * N * D + nn[:, None] * D + 2 * c[None, :]
        km = nn[:, None] < N
        q_ev = tl.load(qb)
        q_od = tl.load(qb + 1)
        k_ev = tl.load(kb, mask=km, other=0.0)
        k_od = tl.load(kb + 1, mask=km, other=0.0)
        s = tl.dot(q_od, tl.trans(k_od), tl.dot(q_ev, tl.trans(k_ev)))
        tl.store(s_ptr + t * H * N + hh[:, None] * N + nn[None, :], s, mask=nn[None, :] < N)

    t, h, d = q.shape
    n = kv.shape[1]
    out = torch.empty(t, h, n, dtype=torch.float32, device=q.device)
    kb = kv.to(torch.bfloat16).contiguous()
    qk_kernel[(t, triton.cdiv(n, 64))](q.contiguous(), kb, out, n, H=h, D=d, BN=64, num_warps=4)
    return out


def gpu_run(rows: int, outdir: str) -> None:
    """The device call: save the problems, run every implementation in parallel workers."""
    from ds41_attention.ops.sparse_attention.gluon_launch import gluon_supported

    impls = ["triton", "fast", "qk"]
    if gluon_supported(torch.zeros(1, 1, 512, device="cuda", dtype=torch.bfloat16)):
        impls.insert(1, "gluon")
    jobs = []
    t0 = time.time()
    for wfmt, cfmt in COMBOS:
        inputs = os.path.join(outdir, f"inputs_{wfmt}_{cfmt}.pt")
        torch.save(adversarial_problem(wfmt, cfmt, rows, SEED), inputs)
        for impl in impls:
            if impl == "qk" and cfmt != "nvfp4":
                continue
            path = os.path.join(outdir, f"{impl}_{wfmt}_{cfmt}.pt")
            cmd = [sys.executable, __file__, "--worker", impl, inputs, path]
            jobs.append(subprocess.Popen(cmd))
    rcs = [p.wait() for p in jobs]
    print(f"{len(jobs)} workers done in {time.time() - t0:.1f} s, return codes {rcs}", flush=True)
    # one file back (a device call returns at most 8): every result, and a digest of each
    # problem so the CPU analysis can check that it regenerated the same inputs
    bundle: dict = {"rows": rows}
    for name in sorted(os.listdir(outdir)):
        path = os.path.join(outdir, name)
        if name.startswith("inputs_"):
            bundle[name] = _digest(_load(path))
        elif name.endswith(".pt"):
            bundle[name] = torch.load(path)
        os.remove(path)
    torch.save(bundle, os.path.join(outdir, "bundle.pt"))


def _digest(args: tuple) -> list[float]:
    """A few sums that identify a problem's inputs."""
    res = []
    for a in args:
        t = a.storage if hasattr(a, "storage") and not isinstance(a, torch.Tensor) else a
        if isinstance(t, torch.Tensor):
            res.append(float(t.double().sum()) + float((t.double() ** 2).sum()))
    return res


def analyze(outdir: str) -> dict:
    """CPU analysis of a device call's files: errors, bounds, the q.kv model match.

    Reads `bundle.pt` (the problems are regenerated here from the seed and checked against
    the device's digests) or, failing that, the individual files."""
    bpath = os.path.join(outdir, "bundle.pt")
    if os.path.exists(bpath):
        bundle = torch.load(bpath, weights_only=False)
        outdir = os.path.join("/tmp", "acc_unbundled")
        os.makedirs(outdir, exist_ok=True)
        for name, obj in bundle.items():
            if name.startswith("inputs_"):
                w, c = name[len("inputs_") : -len(".pt")].split("_")
                args = adversarial_problem(w, c, bundle["rows"], SEED)
                mine = _digest(args)
                assert all(abs(x - y) <= 1e-9 * abs(y) for x, y in zip(mine, obj, strict=True)), (
                    f"regenerated {name} differs from the device's"
                )
                torch.save(args, os.path.join(outdir, name))
            elif name == "rows":
                continue
            else:
                torch.save(obj, os.path.join(outdir, name))
    files = os.listdir(outdir)
    have = [i for i in ("triton", "gluon", "fast") if any(f.startswith(i + "_") for f in files)]
    res: dict = {"impls": have}
    for wfmt, cfmt in COMBOS:
        key = f"{wfmt}+{cfmt}"
        args = _load(os.path.join(outdir, f"inputs_{wfmt}_{cfmt}.pt"))
        st = tie_stats(args)
        row: dict = {"ties": st}
        for impl in res["impls"]:
            path = os.path.join(outdir, f"{impl}_{wfmt}_{cfmt}.pt")
            if not os.path.exists(path):
                row[impl] = {"error": "no output (worker failed)"}
                continue
            got = torch.load(path)
            pack = error_bound(args, got["out"])
            r = summarize(got["out"], args, pack, st["vmax"])
            fin = torch.isfinite(pack[2])
            lerr = (got["lse"].double() - pack[2])[fin].abs()
            r["lse_err_max"] = float(lerr.max())
            r["lse_err_over_bound"] = float((lerr / pack[3][fin]).max())
            row[impl] = r
        res[key] = row
        path = os.path.join(outdir, f"qk_{wfmt}_{cfmt}.pt")
        if os.path.exists(path):
            s_gpu = torch.load(path)["s"].double()
            res[f"qk {key}"] = qk_stats(args, s_gpu)
            # the GPU's own scores, everything after them in float64 (P not rounded): the
            # share of the kernels' error that the q.kv product causes
            vmax = st["vmax"]
            dec = {}
            for name, o32 in {
                "S gpu, P f64": emulate(args, s_gpu, p_dtype=None)[0],
                "S f64, P bf16": emulate(args, "f64")[0],
                "S gpu, P bf16": emulate(args, s_gpu)[0],
            }.items():
                ob = o32.to(torch.bfloat16)
                dec[name] = summarize(ob, args, error_bound(args, ob), vmax)
            res[f"decomp {key}"] = dec
    return res


def qk_stats(args: tuple, s_gpu: torch.Tensor) -> dict:
    """The GPU's fp32 q.kv against float64 and against the tensor-core and fp32 models."""
    q = args[0]
    kv, valid = _row_entries(*args[1:7])
    s_abs = torch.einsum("thd,tnd->thn", q.double().abs(), kv.abs())
    v = valid[:, None, :].expand_as(s_gpu)
    exact = scores(q, kv, "f64")
    models = {"tc25": scores(q, kv, "tc", "triton"), "rn32": scores(q, kv, "rn32")}
    tc24 = torch.zeros_like(exact)
    for idx in channel_order(q.shape[-1], "triton"):
        tc24 = tc_step(tc24, q.double()[:, :, None, idx] * kv[:, None, :, idx], width=24)
    models["tc24"] = tc24
    ulp = torch.exp2(torch.floor(torch.log2(exact.abs().clamp(min=1e-300))) - 23)
    rel = ((s_gpu - exact).abs() / s_abs.clamp(min=1e-300))[v]
    res = {
        "keys": int(v.sum()),
        "gpu_err_over_sum_abs_max": float(rel.max()),
        "gpu_err_over_sum_abs_mean": float(rel.mean()),
        "bound_D_2^-23": q.shape[-1] * 2.0**-23,
        "gpu_mean_signed_err_in_ulps": float(((s_gpu - exact) / ulp)[v].mean()),
    }
    for name, s in models.items():
        res[f"bitwise_match_{name}"] = float((s_gpu == s)[v].double().mean())
        res[f"{name}_err_over_sum_abs_max"] = float(((s - exact).abs() / s_abs)[v].max())
    return res


def print_table(res: dict) -> None:
    impls = [i for i in res["impls"] if i != "qk"]
    print("\n| window+comp | " + " | ".join(impls) + " |")
    print("|---|" + "---|" * len(impls))
    for wfmt, cfmt in COMBOS:
        row = res[f"{wfmt}+{cfmt}"]
        cells = []
        for impl in impls:
            r = row.get(impl, {})
            if "error" in r or not r:
                cells.append("n/a")
                continue
            cells.append(
                f"{r['beyond_halfulp_over_vmax']:.2e} / {r['err_over_bound']:.3f} / "
                f"{r['beyond_over_bound_beyond']:.3f} (lse {r['lse_err_over_bound']:.3f})"
            )
        print(f"| {wfmt}+{cfmt} | " + " | ".join(cells) + " |")
    print(
        "cells: max error beyond the bf16 half ulp / max|kv| ; max err / bound ; max (err - "
        "half ulp) / (bound - half ulp) ; (max lse err / lse bound)"
    )
    for key, val in res.items():
        if key.startswith("qk") or key.startswith("decomp"):
            print(key, json.dumps(val, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", action="store_true", help="the device call: run the kernels")
    ap.add_argument("--analyze", default="", help="folder of a device call's files")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", nargs=3)
    ap.add_argument("--lazy", action="store_true", help="the lazy rescale study (CPU)")
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    if a.worker:
        _worker(*a.worker)
        return
    if a.gpu:
        outdir = os.path.join(os.environ.get("OUT", "/tmp"), "acc")
        os.makedirs(outdir, exist_ok=True)
        gpu_run(a.rows, outdir)
        return
    if a.lazy:
        res = lazy_study(a.rows)
    else:
        res = analyze(a.analyze) if a.analyze else cpu_study(a.rows)
    if a.analyze:
        print(json.dumps(res, indent=1))
        print_table(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
