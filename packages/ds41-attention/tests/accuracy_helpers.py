"""Adversarial-magnitude problems and the per-element error bound of `sparse_attention`.

`adversarial_problem` builds the inputs of issue 11's accuracy study: latent channel groups
scaled 2^-5..2^5, x40 spikes, |q| up to 300, scores of 1e3..1e4, and near-duplicate keys
(neighbouring compressed entries), so that many heads split their softmax mass between
keys whose scores are large and almost equal: there a score error of a few fp32 ulps moves
the output, which is what the bound below has to cover.

`error_bound` is the bound stated in the package README ("Accuracy"): float64, per output
element, from the float64 reference quantities (softmax mass per key, key values, absolute
scores) and the computed bf16 output (its half ulp). Every GPU implementation (the Triton
kernel, the Gluon kernel, the fast split path) and both CPU paths must stay within it.
"""

from __future__ import annotations

import math

import torch

from ds41_attention.ops.sparse_attention.naive import _entries
from ds41_cache import PagedCache
from ds41_cache.insert import insert

U32 = 2.0**-24
"""fp32 unit roundoff (round to nearest)."""
P_ROUND = 2.0**-8
"""Largest relative error of rounding a softmax weight p in (0, 1] to bf16 (half a bf16 ulp
relative to the value: 8 significant bits)."""
EXP_REL = 2.0**-21
"""Relative error allowed for one fp32 exp (ex2.approx after a multiply by log2 e: ~2^-22)."""
DIV_REL = 2.0**-21
"""Relative error allowed for the final fp32 division (div.full: 2 ulp)."""


def _latents(
    n: int, d: int, gen: torch.Generator, gexp: torch.Tensor, *, dup_frac: float
) -> torch.Tensor:
    """f32 [n, d] latent rows: randn x 2^gexp per 32-channel group, 1/64 of the values x40,
    and a fraction `dup_frac` of rows equal to the previous row plus 2^-7-relative noise."""
    scale = gexp.repeat_interleave(32)[None, :]
    x = torch.randn(n, d, generator=gen) * scale
    spikes = torch.rand(n, d, generator=gen) < 1 / 64
    x = torch.where(spikes, x * 40.0, x)
    dup = torch.rand(n, generator=gen) < dup_frac
    dup[0] = False
    near = torch.roll(x, 1, 0) + 2.0**-7 * torch.randn(n, d, generator=gen) * scale
    return torch.where(dup[:, None], near, x)


def adversarial_problem(
    wfmt: str,
    cfmt: str | None,
    rows: int,
    seed: int,
    *,
    heads: int = 64,
    dim: int = 512,
    window: int = 128,
    topk: int = 512,
    page: int = 64,
    qmax: float = 300.0,
    device: torch.device | str = "cpu",
) -> tuple:
    """Arguments of `sparse_attention` (q, window cache, swa slots/lens, compressed cache,
    comp slots/lens, sink, scale) at the adversarial magnitudes of issue 11.

    Each row's keys are contiguous slots (near-duplicate latents are neighbours in its key
    list), with some -1 slots and random lengths (half the rows full). Half the heads of a row
    attend at random (q = randn with per-channel magnitudes 2^-2..2^2, scaled to max |q| =
    `qmax`); each head of the other half ties two distinct keys a, b of its row: q is the
    combination of a + b and a - b with q.a = q.b, plus 1e-3 noise, scaled so that the score
    is 1e3..1e4 (|q| <= `qmax`). Its softmax mass then splits between two different
    vectors at scores whose fp32 ulp is ~1e-3, the worst case for score errors.
    """
    g = torch.Generator().manual_seed(seed)
    gexp = torch.exp2(torch.randint(-5, 6, (dim // 32,), generator=g).float())

    def cache(fmt: str, n: int) -> PagedCache:
        c = PagedCache.allocate(fmt, dim, page, -(-n // page) + 1)
        insert(c, _latents(n, dim, g, gexp, dup_frac=0.4).to(torch.bfloat16), torch.arange(n))
        return c

    def slots(width: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.arange(rows * width, dtype=torch.int32).view(rows, width)
        s = torch.where(torch.rand(rows, width, generator=g) < 0.05, -1, s)
        lens = torch.randint(1, width + 1, (rows,), generator=g)
        lens = torch.where(torch.rand(rows, generator=g) < 0.5, width, lens)
        return s, lens.to(torch.int32)

    wc = cache(wfmt, rows * window)
    ss, sl = slots(window)
    if cfmt is not None:
        cc = cache(cfmt, rows * topk)
        cs, cl = slots(topk)
        comp: tuple = (cc, cs, cl)
    else:
        comp = (None, None, None)
    sink = torch.randn(heads, generator=g)
    scale = dim**-0.5
    kv, valid = _row_entries(wc, ss, sl, *comp)
    q = torch.randn(rows, heads, dim, generator=g)
    q = q * torch.exp2(torch.randint(-2, 3, (rows, 1, dim), generator=g).float())
    q = q * (qmax / q.abs().amax(-1, keepdim=True))
    for t in range(rows):
        idx = torch.nonzero(valid[t]).flatten()
        for h in range(heads // 2, heads):
            if idx.numel() < 2:
                break
            pick = idx[torch.randperm(idx.numel(), generator=g)[:2]]
            a, b = kv[t, pick[0]], kv[t, pick[1]]
            # q . a = q . b exactly before the noise and the bf16 rounding of q
            lam = -float(a @ a - b @ b) / max(float((a - b) @ (a - b)), 1e-30)
            v = (a + b) + lam * (a - b)
            v = v + 1e-3 * v.abs().max() * torch.randn(dim, generator=g, dtype=torch.float64)
            want = float(10 ** (3 + torch.rand(1, generator=g).item()))
            c = want / max(abs(scale * float(v @ a)), 1e-30)
            c = min(c, qmax / float(v.abs().max()))
            q[t, h] = (v * c).float()
    return _to(device, (q.to(torch.bfloat16), wc, ss, sl, *comp, sink, scale))


def _to(device: torch.device | str, args: tuple) -> tuple:
    res = []
    for a in args:
        if isinstance(a, torch.Tensor):
            res.append(a.to(device))
        elif isinstance(a, PagedCache):
            res.append(
                PagedCache(
                    a.fmt, a.dim, a.page_size, a.num_pages, a.page_stride, a.storage.to(device)
                )
            )
        else:
            res.append(a)
    return tuple(res)


def _row_entries(
    wc: PagedCache,
    ss: torch.Tensor,
    sl: torch.Tensor,
    cc: PagedCache | None,
    cs: torch.Tensor | None,
    cl: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoded entries f64 [T, N, D] of each row's key list (window then compressed) and
    their validity bool [T, N], as the reference sees them."""
    kv, valid = _entries(wc, ss, sl)
    if cc is not None and cs is not None and cl is not None:
        ckv, cvalid = _entries(cc, cs, cl)
        kv = torch.cat([kv, ckv], 1)
        valid = torch.cat([valid, cvalid], 1)
    return kv, valid


def _interval_spread(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """max of p (1 - p) over p in [lo, hi] (elementwise)."""
    inside = (lo <= 0.5) & (hi >= 0.5)
    edge = torch.maximum(lo * (1 - lo), hi * (1 - hi))
    return torch.where(inside, torch.full_like(lo, 0.25), edge)


def error_bound(
    args: tuple,
    out: torch.Tensor,
    *,
    p_round: float = P_ROUND,
    qk_rel: float | None = None,
    lazy_log: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-element bound on |out - ref| and on |lse - ref lse| (README, "Accuracy").

    args: the `sparse_attention` arguments; out: the bf16 [T, H, D] output under test.
    p_round: relative error of the P operand of the P.V product (2^-8: bf16; 0: fp32 P, the
    torch path and the interpreter). qk_rel: relative error of the fp32 q.kv dot product in
    units of sum_i |q_i kv_i| (default D * 2^-23, which covers fp32 round-to-nearest in any
    order and the Hopper tensor cores' truncating multi-term adds). lazy_log: the threshold
    of a lazy running max (a head's reference max moves only when a tile's max exceeds it by
    more than lazy_log: the lab kernel `scripts/gluon_lab10.py`, retired, at commit e51d281), 0
    for the eager max every kernel uses.
    Returns (ref f64 [T, H, D], out bound f64 [T, H, D], ref lse f64 [T, H], lse bound f64
    [T, H]); rows without a valid key get bound 0 (the output must be exactly 0 there).

    The score and exp errors are weight errors w_j -> w_j e^(eps_j), |eps_j| <= d_j. Along
    eps -> t eps (t in [0, 1]) the output moves by d out/dt = sum_j pi_j(t) eps_j (kv_j -
    out(t)) (the sink is a key of value 0), and |kv_j - out(t)| <= (1 - pi_j(t)) R_j with
    R_j = max_k |kv_j - kv_k|; so |out' - ref| <= sum_j d_j g_j R_j, g_j = the largest
    pi (1 - pi) that pi_j(t) can reach given the d's. The P rounding, the P.V and l
    accumulation and the division are relative errors on top; then the bf16 half ulp.
    """
    q, wc, ss, sl, cc, cs, cl, sink, scale = _to("cpu", args)
    out = out.cpu().double()
    kv, valid = _row_entries(wc, ss, sl, cc, cs, cl)
    t_rows, heads, dim = q.shape
    n = valid.sum(-1).double()  # valid keys per row [T]
    qd = q.double()
    s = torch.einsum("thd,tnd->thn", qd, kv) * scale
    s_abs = torch.einsum("thd,tnd->thn", qd.abs(), kv.abs()) * scale
    s = s.masked_fill(~valid[:, None, :], -math.inf)
    has = valid.any(-1)[:, None].expand(t_rows, heads)
    m = torch.where(has, s.amax(-1), torch.zeros(()))
    w = torch.exp(s - m[..., None])  # 0 at invalid keys
    sink64 = sink.double()[None, :].expand(t_rows, heads)
    w_s = torch.exp(sink64 - m)
    z = w.sum(-1) + w_s
    pi = w / z[..., None]
    pi_s = w_s / z
    ref = torch.einsum("thn,tnd->thd", pi, kv)
    ref = torch.where(has[..., None], ref, torch.zeros(()))
    l = w.sum(-1)
    ref_lse = torch.where(has, m + torch.log(l.clamp(min=1e-300)), torch.full_like(m, -math.inf))

    eps_qk = dim * 2.0**-23 if qk_rel is None else qk_rel
    # exps on one key's weight chain: its own, one rescale per later tile (tiles of >= 16
    # keys), the split path's combine
    n_exp = (torch.ceil(n / 16) + 4)[:, None, None]
    sm = s.masked_fill(~valid[:, None, :], 0.0)
    # |eps_j|: the dot product, then the fp32 scale multiply, the subtraction of the
    # running max and the multiply by log2 e inside exp (4 roundings of at most U32 each),
    # and the exps' own relative errors
    # a lazy max adds at most 2 lazy_log to the sum of the arguments on a key's chain (the
    # reference max lags the true one by less than lazy_log; a key may exceed it by as much)
    d = eps_qk * s_abs + 4 * U32 * (sm.abs() + (sm - m[..., None]).abs() + 2 * lazy_log)
    d = d + n_exp * EXP_REL
    d = d.masked_fill(~valid[:, None, :], 0.0)
    fin_sink = torch.isfinite(sink64)
    d_s = torch.where(fin_sink, 4 * U32 * ((sink64 - m).abs() + lazy_log), torch.zeros(()))
    d_s = d_s + n_exp[..., 0] * EXP_REL
    # reachable softmax weights: pi_j(t) in [lo_j, hi_j]
    sp = (pi * torch.exp(d)).sum(-1) + pi_s * torch.exp(d_s)  # sum_k pi_k e^(+d_k)
    sm_ = (pi * torch.exp(-d)).sum(-1) + pi_s * torch.exp(-d_s)
    up, dn = pi * torch.exp(d), pi * torch.exp(-d)
    # the other keys' weight, most and least (a relative 1e-12 covers the cancellation)
    o_up = (sp[..., None] - up).clamp(min=0) + 1e-12 * sp[..., None]
    o_dn = (sm_[..., None] - dn).clamp(min=0)
    lo = dn / (dn + o_up)
    hi = (up / (up + o_dn).clamp(min=1e-300)).clamp(max=1.0)
    g = torch.where(valid[:, None, :], _interval_spread(lo, hi), torch.zeros(()))
    ups, dns = pi_s * torch.exp(d_s), pi_s * torch.exp(-d_s)
    lo_s = dns / (dns + (sp - ups).clamp(min=0) + 1e-12 * sp)
    hi_s = (ups / (ups + (sm_ - dns).clamp(min=0)).clamp(min=1e-300)).clamp(max=1.0)
    g_s = torch.where(pi_s > 0, _interval_spread(lo_s, hi_s), torch.zeros(()))
    # R_j = max_k |kv_j - kv_k| over the row's valid keys and the sink's 0 (channel-wise)
    big = torch.finfo(torch.float64).max
    kmax = kv.masked_fill(~valid[..., None], -big).amax(1)  # [T, D]
    kmin = kv.masked_fill(~valid[..., None], big).amin(1)
    sink_on = (pi_s > 0)[..., None]  # [T, H, 1]
    hmax = torch.where(sink_on, kmax[:, None].clamp(min=0), kmax[:, None])  # [T, H, D]
    hmin = torch.where(sink_on, kmin[:, None].clamp(max=0), kmin[:, None])
    t_w = _spread_term(g * d, kv, hmin, hmax)
    t_w = t_w + (g_s * d_s)[..., None] * torch.maximum(hmax.abs(), hmin.abs())
    # P rounded to bf16 (l uses the unrounded p), the P.V and l accumulations in fp32
    lam = (n * 2.0**-23)[:, None, None]
    mass_abs = torch.einsum("thn,tnd->thd", hi, kv.abs())
    t_p = (p_round + lam * (1 + p_round)) * mass_abs + lam * (ref.abs() + t_w)
    b32 = (t_w + t_p) / (1 - lam)
    b32 = b32 + DIV_REL * (ref.abs() + b32)
    half_ulp = torch.exp2(torch.floor(torch.log2(out.abs().clamp(min=2.0**-126))) - 8)
    bound = b32 + torch.where(out == 0, torch.full_like(out, 2.0**-134), half_ulp)
    bound = torch.where(has[..., None], bound, torch.zeros(()))

    # lse = M + log(l): a weight error e^(eps_j) moves log(l) by at most the largest
    # d_j among the keys weighted by the reachable softmax without the sink; then the
    # accumulation of l and the fp32 rounding of M + log(l)
    sig = w / l.clamp(min=1e-300)[..., None]
    lse_b = _lse_shift(sig, d) + 2 * lam[..., 0]
    lse_b = lse_b + 2.0**-20 * (m.abs() + l.log().abs() + lazy_log + 1)
    lse_b = torch.where(has, lse_b, torch.zeros(()))
    return ref, bound, ref_lse, lse_b


def _lse_shift(sig: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Largest |log sum_j sig_j e^(eps_j)| for |eps_j| <= d_j, sum_j sig_j = 1."""
    return torch.maximum(
        torch.log((sig * torch.exp(d)).sum(-1)), -torch.log((sig * torch.exp(-d)).sum(-1))
    )


def _spread_term(
    gd: torch.Tensor, kv: torch.Tensor, hmin: torch.Tensor, hmax: torch.Tensor
) -> torch.Tensor:
    """sum_j gd[t, h, j] R[t, h, j, d] with R = max(kv_j - min, max - kv_j) -> [T, H, D],
    over the keys with gd > 0, a few heads at a time."""
    res = torch.zeros_like(hmin)
    for t in range(gd.shape[0]):
        keys = torch.nonzero(gd[t].amax(0) > 0).flatten()
        if keys.numel() == 0:
            continue
        k = kv[t, keys]  # [n, D]
        for h0 in range(0, gd.shape[1], 8):
            sl = slice(h0, h0 + 8)
            r = torch.maximum(k[None] - hmin[t, sl, None, :], hmax[t, sl, None, :] - k[None])
            res[t, sl] = torch.einsum("hn,hnd->hd", gd[t, sl][:, keys], r)
    return res


# ------------------------------------------------ CPU emulation of the kernels' arithmetic


def rz32(x: torch.Tensor) -> torch.Tensor:
    """f64 -> the f64 value of x truncated (toward zero) to fp32's 24 significant bits."""
    m, e = torch.frexp(x)
    return torch.ldexp(torch.trunc(torch.ldexp(m, torch.full_like(e, 24))), e - 24)


def tc_step(c: torch.Tensor, prods: torch.Tensor, width: int = 25) -> torch.Tensor:
    """One tensor-core step: c [...] + sum of prods [..., k], all terms aligned to the
    largest exponent with `width` significant bits and truncated, then RZ to fp32."""
    terms = torch.cat([c[..., None], prods], -1)
    amax = terms.abs().amax(-1, keepdim=True)
    e = torch.floor(torch.log2(amax.clamp(min=1e-300)))
    lsb = torch.exp2(e - (width - 1))
    tr = torch.trunc(terms / lsb) * lsb
    return rz32(tr.sum(-1))


def channel_order(dim: int, kind: str) -> list[torch.Tensor]:
    """Channel index chunks of 16 in the order the kernel's QK wgmma steps consume them."""
    ev = torch.arange(0, dim, 2)
    od = torch.arange(1, dim, 2)
    if kind == "triton":  # dot(q_od, k_od^T, dot(q_ev, k_ev^T))
        seq = torch.cat([ev, od])
    elif kind == "gluon":  # 4 parts: (half 0 even, half 0 odd, half 1 even, half 1 odd)
        h = dim // 4
        seq = torch.cat([ev[:h], od[:h], ev[h:], od[h:]])
    else:
        raise ValueError(kind)
    return list(seq.split(16))


def scores(q: torch.Tensor, kv: torch.Tensor, mode: str, order: str = "triton") -> torch.Tensor:
    """Unscaled q.kv [T, H, N] in f64 holding the value an fp32 implementation would get.

    mode "f64": exact-ish; "rn32": sequential fp32 round-to-nearest; "tc": tensor-core model.
    """
    qd = q.double()
    if mode == "f64":
        return torch.einsum("thd,tnd->thn", qd, kv)
    t, h, d = q.shape
    c = torch.zeros(t, h, kv.shape[1], dtype=torch.float64)
    if mode == "rn32":
        for i in range(d):
            c = (c + (qd[:, :, i, None] * kv[:, None, :, i])).float().double()
        return c
    for idx in channel_order(d, order):
        prods = qd[:, :, None, idx] * kv[:, None, :, idx]
        c = tc_step(c, prods)
    return c


def emulate(
    args: tuple,
    smode: str | torch.Tensor,
    *,
    p_dtype: torch.dtype | None = torch.bfloat16,
    pv_tc: bool = False,
    block_n: int = 64,
    order: str = "triton",
    lazy: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' online softmax over tiles of `block_n` keys in float64 holding fp32
    values (m, l, acc rounded to fp32 after every operation when the scores are fp32).

    smode: "f64" (exact scores, no fp32 rounding anywhere), "rn32", "tc" (see `scores`), or
    a tensor of fp32 q.kv values [T, H, N] (e.g. measured on a GPU). p_dtype: the P operand
    of P.V rounded to this dtype (None: not rounded). pv_tc: P.V by the tensor-core model
    (16 keys per step), else fp32 round-to-nearest per tile. lazy > 0: a lazy running max (a
    head's max moves to the tile's only when that exceeds it by more than `lazy`; the
    rescale factor is 1 otherwise), as the retired lab kernel `scripts/gluon_lab10.py` (commit
    e51d281).
    Returns (out before the bf16 rounding f64 [T, H, D], lse f64 [T, H]).
    """
    q, wc, ss, sl, cc, cs, cl, sink, scale = args
    kv, valid = _row_entries(wc, ss, sl, cc, cs, cl)
    if isinstance(smode, torch.Tensor):
        raw, f32 = smode.double().cpu(), True
    else:
        raw, f32 = scores(q, kv, smode, order), smode != "f64"

    def r32(x: torch.Tensor) -> torch.Tensor:
        return x.float().double() if f32 else x

    s = r32(raw * scale).masked_fill(~valid[:, None, :], -math.inf)
    t, h, n = s.shape
    m = torch.full((t, h), -math.inf, dtype=torch.float64)
    l = torch.zeros(t, h, dtype=torch.float64)
    acc = torch.zeros(t, h, kv.shape[-1], dtype=torch.float64)
    for i in range(0, n, block_n):
        st = s[:, :, i : i + block_n]
        if lazy > 0:
            mt = st.amax(-1)
            upd = mt > r32(m + lazy)
            mn = torch.where(upd, mt, m)
        else:
            mn = torch.maximum(m, st.amax(-1))
        ms = torch.where(mn == -math.inf, torch.zeros_like(mn), mn)
        alpha = r32(torch.exp(m - ms))
        if lazy > 0:
            alpha = torch.where(upd, alpha, torch.ones_like(alpha))
        p = r32(torch.exp(r32(st - ms[..., None])))
        l = r32(r32(l * alpha) + r32(p.sum(-1)))
        pp = p if p_dtype is None else p.to(p_dtype).double()
        acc = r32(acc * alpha[..., None])
        kt = kv[:, i : i + block_n]
        if pv_tc:
            for j in range(0, kt.shape[1], 16):
                prods = pp[:, :, None, j : j + 16] * kt[:, None, j : j + 16, :].transpose(-1, -2)
                acc = tc_step(acc, prods)
        else:
            acc = r32(acc + torch.einsum("thn,tnd->thd", pp, kt))
        m = mn
    has = m > -math.inf
    ms = torch.where(has, m, torch.zeros_like(m))
    denom = r32(l + r32(torch.exp(sink.double()[None] - ms)))
    o = r32(acc / denom[..., None])
    o = torch.where(has[..., None], o, torch.zeros_like(o))
    lse = torch.where(has, r32(ms + r32(torch.log(l.clamp(min=1e-300)))), -math.inf)
    return o, lse


def check_bound(out: torch.Tensor, lse: torch.Tensor, args: tuple, **kw: float) -> float:
    """Assert |out - ref| <= bound and |lse - ref lse| <= lse bound everywhere; return the
    largest ratio err / bound over the outputs (how much of the bound is used)."""
    ref, bound, rlse, lse_b = error_bound(args, out, **kw)
    o = out.cpu().double()
    err = (o - ref).abs()
    ok = err <= bound
    assert bool(ok.all()), (
        f"{int((~ok).sum())} outputs outside the bound; worst err {err.max().item():.4g} "
        f"ratio {(err / bound.clamp(min=1e-300)).max().item():.3g}"
    )
    lse64 = lse.cpu().double()
    fin = torch.isfinite(rlse)
    assert torch.equal(fin, torch.isfinite(lse64)), "lse finite where the reference is not"
    lerr = (lse64 - rlse)[fin].abs()
    assert bool((lerr <= lse_b[fin]).all()), f"lse err {lerr.max().item():.4g} beyond its bound"
    return float((err / bound.clamp(min=1e-300)).max())
