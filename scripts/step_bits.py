"""Save (or compare) a model's log-probs over a prefill and decode steps, for a bitwise A/B of
two trees (e.g. a branch against main on the GPU: run it from each checkout, then `--compare`).

    python scripts/step_bits.py --out A.pt [--preset flash_mini] [--mode bi] [--backend auto]
    python scripts/step_bits.py --compare A.pt B.pt

The steps: two requests prefilled together (with a padding row), then decode steps of one,
three and 64 rows (validated and unvalidated forwards alternate, so both code paths run), and
one `nonfinite_stage` forward. `--compare` prints, per step, whether the tensors are bitwise
equal (int32 views) and exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import sys

import torch

from ds41_runner.model import KVState, Model, ModelConfig


def run(preset: str, mode: str, backend: str, device: str) -> list[torch.Tensor]:
    cfg = ModelConfig.preset(preset)
    model = Model(cfg, mode=mode, backend=backend, device=device, seed=0)
    n_req = 66
    kv = KVState(cfg, kv_dtype="nvfp4_ds_mla", max_requests=n_req, max_tokens_per_request=48,
                 num_pages=n_req * 12 + 4, page_size=4, device=device)  # fmt: skip
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, cfg.vocab_size, (40,), generator=g) for _ in range(n_req)]
    steps = [
        [(0, 0, 12), (1, 0, 9)],
        [(0, 12, 1)],
        [(0, 13, 1), (1, 9, 1), (2, 0, 6)],
        [(r, 0, 1) for r in range(3, n_req)] + [(0, 14, 1)],
        [(r, 1, 1) for r in range(3, n_req)] + [(2, 6, 1)],
    ]
    out = []
    for i, st in enumerate(steps):
        toks, reqs, poss = [], [], []
        for r, s0, n in st:
            kv.reserve(r, s0 + n)
            toks += seqs[r][s0 : s0 + n].tolist()
            reqs += [r] * n
            poss += list(range(s0, s0 + n))
        toks.insert(1, 3)
        reqs.insert(1, -1)
        poss.insert(1, 0)
        args = (
            torch.tensor(toks, device=device),
            torch.tensor(reqs, dtype=torch.int32, device=device),
            torch.tensor(poss, dtype=torch.int32, device=device),
            kv,
        )
        stage = torch.empty(len(toks), dtype=torch.int64, device=device)
        lp = model.forward(*args, validate=i % 2 == 0, nonfinite_stage=stage)
        keep = [j for j, r in enumerate(reqs) if r >= 0]
        out.append(lp[keep].float().cpu())
        out.append(stage[keep].cpu())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2)
    ap.add_argument("--preset", default="flash_mini")
    ap.add_argument("--mode", default="bi")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (torch.load(p) for p in args.compare)
        same = [
            x.shape == y.shape and torch.equal(x.view(torch.int32), y.view(torch.int32))
            if x.dtype == torch.float32
            else torch.equal(x, y)
            for x, y in zip(a, b, strict=True)
        ]
        print(f"{args.compare[0]} vs {args.compare[1]}: bitwise equal per tensor: {same}")
        return 0 if all(same) else 1
    with torch.no_grad():
        lps = run(args.preset, args.mode, args.backend, args.device)
    torch.save(lps, args.out)
    sums = [float(x.sum()) for x in lps[::2]]
    print(f"saved {len(lps)} tensors to {args.out}: log-prob sums {sums}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
