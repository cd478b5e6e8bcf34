"""Property-based tests (Hypothesis; profiles in conftest.py, `HYPOTHESIS_PROFILE=long` to fuzz).

Codecs: every format over the whole finite range (near-max values, subnormals, -0, constant
blocks; sometimes NaN/inf, which the checked encoders reject), byte-exact against a float64 numpy reference written from SPEC section 4 (plus the
saturation rule of the package README), identical on the torch and Triton paths, and
`decode(encode(x))` within each format's rounding bound. `sparse_paged_indices`: random page
tables (with holes), positions, top-k rows and out-of-range inputs, torch vs Triton vs a
plain-Python reference.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ds41_cache.codec import decode, encode
from ds41_cache.formats import FORMATS
from ds41_cache.indices import sparse_paged_indices
from ds41_cache.testing import triton_device

BACKENDS = [
    "torch",
    pytest.param("triton", marks=pytest.mark.interpreter),  # on CUDA when present
    pytest.param("cuda", marks=pytest.mark.gpu),
]
F32_MAX = float(np.finfo(np.float32).max)
BF16_MAX = (2 - 2.0**-7) * 2.0**127
D = 64


def where(backend: str) -> tuple[torch.device, str]:
    """(device, backend argument) of a BACKENDS entry."""
    if backend == "torch":
        return torch.device("cpu"), "torch"
    return triton_device() if backend == "triton" else torch.device("cuda"), "triton"


# ---------------------------------------------------------------- reference (float64, numpy)


def _e4m3(code: int) -> float:
    e, m = (code >> 3) & 15, code & 7
    return m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)


E4M3_GRID = np.array([_e4m3(c) for c in range(0x7F)])  # codes 0..126 ascending (0x7F is NaN)
E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
GRID = {"mxfp8": E4M3_GRID, "fp8_index": E4M3_GRID, "nvfp4": E2M1_GRID, "mxfp4": E2M1_GRID}
BLOCK = {"mxfp8": 32, "nvfp4": 16, "mxfp4": 32, "fp8_index": D}


def rne_index(t: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Grid index nearest to each magnitude `t` (ties to the even index), saturating."""
    hi = np.clip(np.searchsorted(grid, t, side="left"), 1, len(grid) - 1)
    lo = hi - 1
    d_lo, d_hi = t - grid[lo], grid[hi] - t
    pick = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.where(t >= grid[-1], len(grid) - 1, pick)


def ceil_log2(q: np.ndarray) -> np.ndarray:
    m, e = np.frexp(q)
    return np.where(m == 0.5, e - 1, e).astype(np.int64)


def top_code(grid: np.ndarray, e: np.ndarray, saturate: bool) -> np.ndarray:
    """Largest code magnitude the encoder may use at exponent e: the grid's top, or (saturating)
    the largest grid value `g` with `g * 2^e` a finite bf16 number."""
    if not saturate:
        return np.full(e.shape, grid[-1])
    fits = grid[None, :] * np.exp2(e.reshape(-1, 1).astype(np.float64)) <= BF16_MAX
    return np.where(fits, grid[None, :], 0.0).max(axis=1).reshape(e.shape)


def ref_encode(fmt: str, x: np.ndarray, saturate: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """SPEC section 4 in float64 (fp32 where the SPEC says fp32); x float32 [N, D]."""
    n, d = x.shape
    f32 = np.float32
    if fmt == "bf16":
        xs = np.clip(x, -BF16_MAX, BF16_MAX) if saturate else x
        b = torch.from_numpy(xs.astype(np.float32)).to(torch.bfloat16)
        return b.view(torch.uint8).numpy().reshape(n, 2 * d), np.zeros((n, 0), np.uint8)
    b = BLOCK[fmt]
    grid = GRID[fmt]
    xb = x.reshape(n, d // b, b)
    amax = np.abs(xb).max(axis=2, keepdims=True)  # fp32, exact
    sign = np.signbit(xb)
    if fmt == "nvfp4":
        s_code = rne_index(np.clip(amax / f32(6), 2.0**-9, 448).astype(np.float64), E4M3_GRID)
        s = E4M3_GRID[s_code].astype(np.float32)
        t = np.abs((xb / s).astype(np.float64))  # fp32 IEEE division, as the SPEC says
        codes = rne_index(t, E2M1_GRID) | np.where(sign, 8, 0)
        packed = (codes.reshape(n, d)[:, 0::2] | (codes.reshape(n, d)[:, 1::2] << 4)).astype(
            np.uint8
        )
        return packed, s_code.reshape(n, -1).astype(np.uint8)
    if fmt == "mxfp4":
        e = np.clip(ceil_log2(np.maximum(amax, f32(6 * 2.0**-126)) / f32(6)), -127, 127)
    else:
        e = ceil_log2(np.maximum(amax, f32(1e-4)) / f32(448))
    lim = top_code(grid, e, saturate)
    t = np.minimum(np.abs(xb.astype(np.float64)) * np.exp2(-e.astype(np.float64)), lim)
    if fmt == "mxfp4":
        codes = (rne_index(t, E2M1_GRID) | np.where(sign, 8, 0)).reshape(n, d)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        return packed, (e + 127).reshape(n, -1).astype(np.uint8)
    codes = (rne_index(t, E4M3_GRID) | np.where(sign, 0x80, 0)).reshape(n, d).astype(np.uint8)
    if fmt == "fp8_index":
        return codes, np.exp2(e.reshape(n, 1).astype(np.float64)).astype(np.float32).view(np.uint8)
    return codes, (e + 127).reshape(n, -1).astype(np.uint8)


def ref_decode(fmt: str, data: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float64 values of the records (before the exact cast to bf16)."""
    n = data.shape[0]
    if fmt == "bf16":
        return torch.from_numpy(data.copy()).view(torch.bfloat16).double().numpy().reshape(n, -1)
    d8 = data.astype(np.int64)
    if fmt in ("mxfp8", "fp8_index"):
        mag = E4M3_GRID[np.minimum(d8 & 0x7F, 0x7E)]
        vals = np.where(d8 & 0x80, -mag, mag)
    else:
        nib = np.stack([d8 & 15, d8 >> 4], axis=-1).reshape(n, -1)
        vals = np.where(nib & 8, -E2M1_GRID[nib & 7], E2M1_GRID[nib & 7])
    if fmt == "fp8_index":
        return vals * scales.view(np.float32).astype(np.float64)
    s8 = scales.astype(np.int64)
    scale = E4M3_GRID[s8 & 0x7F] if fmt == "nvfp4" else np.exp2((s8 - 127).astype(np.float64))
    b = BLOCK[fmt]
    return (vals.reshape(n, -1, b) * scale[..., None]).reshape(n, -1)


def error_bound(fmt: str, x: np.ndarray, data: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Largest |decode(encode(x)) - x| the format allows per element: half the code grid's gap
    around |x| at the record's scale, or the saturation distance past its top code."""
    n = x.shape[0]
    xa = np.abs(x.astype(np.float64))
    if fmt == "bf16":
        # half a bf16 ulp at |x| (exponent of the clamped value), or the distance past the max
        ex = np.frexp(np.minimum(xa, BF16_MAX))[1]
        return np.maximum(np.exp2(np.maximum(ex, -125) - 9.0), xa - BF16_MAX)
    grid = GRID[fmt]
    b = BLOCK[fmt]
    if fmt == "fp8_index":
        scale = np.repeat(scales.view(np.float32).astype(np.float64), D, axis=1)
    else:
        s8 = scales.astype(np.int64)
        s = E4M3_GRID[s8] if fmt == "nvfp4" else np.exp2((s8 - 127).astype(np.float64))
        scale = np.repeat(s, b, axis=1)
    t = xa / scale
    hi = np.clip(np.searchsorted(grid, t, side="left"), 1, len(grid) - 1)
    half_gap = (grid[hi] - grid[hi - 1]) / 2
    top = np.abs(ref_decode(fmt, data, scales)).reshape(n, -1, b).max(axis=2)
    past = xa - np.repeat(top, b, axis=1)  # saturated elements: |x| - the block's top value
    return np.maximum(half_gap * scale, past)


# ---------------------------------------------------------------- input strategy

SPECIALS = [
    0.0,
    -0.0,
    2.0**-149,
    -(2.0**-133),
    2.0**-126,
    1e-4,
    448.0,
    6.0,
    3.5 * 2.0**126,  # MXFP4 overflow threshold
    1.5 * 2.0**127,
    248.0 * 2.0**120,  # MXFP8 overflow threshold
    247.0 * 2.0**120,
    BF16_MAX,
    -BF16_MAX,
    F32_MAX,
]


@st.composite
def codec_inputs(draw: st.DrawFn) -> np.ndarray:
    """float32 [N, D] rows whose 16-channel groups each follow one of several families."""
    n = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    families = draw(st.lists(st.integers(0, 4), min_size=n * D // 16, max_size=n * D // 16))
    rng = np.random.default_rng(seed)
    groups = []
    for fam in families:
        if fam == 0:  # any finite fp32 bit pattern: the whole range, both signs
            bits = rng.integers(0, 2**32, 16, dtype=np.uint64).astype(np.uint32)
            bits = np.where(((bits >> 23) & 0xFF) == 0xFF, bits & 0x807FFFFF, bits)
            g = bits.view(np.float32)
        elif fam == 1:  # gaussian at a random binade, subnormal to near-max
            k = int(rng.integers(-150, 127))
            g = (rng.standard_normal(16) * 2.0**k).astype(np.float32)
        elif fam == 2:  # a constant group
            g = np.full(16, np.float32(rng.standard_normal() * 2.0 ** int(rng.integers(-140, 128))))
        elif fam == 3:  # near the top of the range
            g = (rng.uniform(1.0, 2.0, 16) * 2.0**127 * rng.choice([-1, 1], 16)).astype(np.float32)
        else:  # subnormals and signed zeros
            g = (rng.integers(-64, 64, 16) * 2.0**-149).astype(np.float32)
            g[rng.random(16) < 0.3] = -0.0
        groups.append(g)
    x = np.nan_to_num(np.concatenate(groups).reshape(n, D), posinf=F32_MAX, neginf=-F32_MAX)
    specials = st.tuples(st.integers(0, n * D - 1), st.sampled_from(SPECIALS))
    for pos, val in draw(st.lists(specials, max_size=10)):
        x.flat[pos] = val
    # sometimes NaN / inf: the checked encoders reject them, the unchecked ones sanitize them
    nonfinite = st.tuples(st.integers(0, n * D - 1), st.sampled_from([np.nan, np.inf, -np.inf]))
    if draw(st.integers(0, 3)) == 0:
        for pos, val in draw(st.lists(nonfinite, min_size=1, max_size=3)):
            x.flat[pos] = val
    return x.astype(np.float32)


def as_input(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """The tensor fed to the codec: bf16 inputs are x rounded to bf16, past-max kept finite."""
    t = torch.from_numpy(x.copy())
    if dtype == torch.bfloat16:
        t = torch.where(torch.isfinite(t), torch.clamp(t, -BF16_MAX, BF16_MAX), t)
        t = t.to(torch.bfloat16)
    return t


def sanitized(x: np.ndarray) -> np.ndarray:
    """What the unchecked encoders quantize (README): NaN -> +0, +-inf -> +-fp32 max."""
    return np.nan_to_num(x, nan=0.0, posinf=F32_MAX, neginf=-F32_MAX).astype(np.float32)


# ---------------------------------------------------------------- codec properties


@pytest.mark.parametrize("backend", BACKENDS)
@given(x=codec_inputs(), bf16=st.booleans())
def test_codecs_match_the_reference_over_the_finite_range(
    backend: str, x: np.ndarray, bf16: bool
) -> None:
    dev, be = where(backend)
    xt = as_input(x, torch.bfloat16 if bf16 else torch.float32)
    finite = bool(torch.isfinite(xt).all())
    xf = sanitized(xt.float().numpy())
    xt = xt.to(dev)
    for fmt in FORMATS:
        want_d, want_s = ref_encode(fmt, xf)
        data, scales = encode(fmt, xt, backend=be, check_finite=False)
        assert np.array_equal(data.cpu().numpy(), want_d), fmt
        assert np.array_equal(scales.cpu().numpy(), want_s), fmt
        # the SPEC rule (no saturation) overflows exactly where the checked encoder refuses
        raw_d, raw_s = ref_encode(fmt, xf, saturate=False)
        with np.errstate(over="ignore"):
            overflows = not np.isfinite(ref_decode(fmt, raw_d, raw_s).astype(np.float32)).all()
        if not finite:
            with pytest.raises(ValueError, match="must be finite"):
                encode(fmt, xt, backend=be)
        elif overflows:
            with pytest.raises(ValueError, match="decode to inf"):
                encode(fmt, xt, backend=be)
        else:
            assert np.array_equal(raw_d, want_d) and np.array_equal(raw_s, want_s), fmt
            if be == "torch":  # the checks run before any kernel: one backend is enough
                checked = encode(fmt, xt, backend=be)
                assert torch.equal(checked[0], data) and torch.equal(checked[1], scales), fmt
        y = decode(fmt, data, scales, backend=be).cpu()
        ref = torch.from_numpy(ref_decode(fmt, want_d, want_s)).to(torch.bfloat16)
        assert torch.equal(y.view(torch.int16), ref.view(torch.int16)), fmt
        yf = y.double().numpy()
        assert np.isfinite(yf).all(), fmt
        err = np.abs(yf - xf.astype(np.float64))
        bound = error_bound(fmt, xf, want_d, want_s)
        assert (err <= bound).all(), (fmt, float((err - bound).max()))
        assert (np.signbit(yf) == np.signbit(xf))[yf != 0].all(), fmt


# ---------------------------------------------------------------- sparse_paged_indices


def host_indices(case: dict, t: int) -> tuple[list[int], int, list[int], int, bool]:
    """Row t from SPEC section 7 with loops; a needed page that is -1 (or past the table) gives
    slot -1 and counts in the length. Returns (swa, swa_len, comp, comp_len, missing)."""
    r, p, w, ratio = case["req"][t], case["pos"][t], case["window"], case["ratio"]
    k = len(case["topk"][t])
    num_req = len(case["swa_table"])
    if not 0 <= r < num_req:
        return [-1] * w, 0, [-1] * k, 0, False

    def slot(table: list[int], q: int, ps: int) -> int:
        col = q // ps
        page = table[col] if col < len(table) else -1
        return page * ps + q % ps if page >= 0 else -1

    lo = max(0, p - w + 1, case["replay"][r])
    swa = [slot(case["swa_table"][r], q, case["swa_ps"]) for q in range(lo, p + 1)]
    visible = (p + 1) // ratio if p >= 0 else 0
    comp = [
        slot(case["comp_table"][r], e, case["comp_ps"]) for e in case["topk"][t] if 0 <= e < visible
    ]
    missing = -1 in swa or -1 in comp
    return swa + [-1] * (w - len(swa)), len(swa), comp + [-1] * (k - len(comp)), len(comp), missing


@st.composite
def index_cases(draw: st.DrawFn) -> dict:
    num_req = draw(st.integers(1, 3))
    swa_ps, comp_ps = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    window, ratio, k = draw(st.integers(1, 9)), draw(st.integers(1, 2)), draw(st.integers(1, 6))
    cols, ccols = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    page = st.integers(-1, 40)
    t = draw(st.integers(1, 10))
    in_range = draw(st.booleans())  # else: out-of-range values that only validate=False takes
    req = st.integers(-1, num_req - 1) if in_range else st.integers(-3, num_req + 2)
    pos = st.integers(0, 50) if in_range else st.integers(-3, 60)
    rows = draw(st.lists(st.tuples(req, pos), min_size=t, max_size=t))
    replay = draw(st.lists(st.integers(0, 12), min_size=num_req, max_size=num_req))
    if in_range:  # replay_start <= pos on real rows
        rows = [(r, max(p, replay[r]) if r >= 0 else p) for r, p in rows]
    return {
        "req": [r for r, _ in rows],
        "pos": [p for _, p in rows],
        "window": window,
        "ratio": ratio,
        "replay": replay,
        "swa_ps": swa_ps,
        "comp_ps": comp_ps,
        "swa_table": draw(
            st.lists(
                st.lists(page, min_size=cols, max_size=cols), min_size=num_req, max_size=num_req
            )
        ),
        "comp_table": draw(
            st.lists(
                st.lists(page, min_size=ccols, max_size=ccols), min_size=num_req, max_size=num_req
            )
        ),
        "topk": draw(
            st.lists(st.lists(st.integers(-2, 40), min_size=k, max_size=k), min_size=t, max_size=t)
        ),
        "in_range": in_range,
    }


def call_indices(case: dict, backend: str, validate: bool) -> list[torch.Tensor]:
    dev, be = where(backend)
    i32 = {"dtype": torch.int32, "device": dev}
    out = sparse_paged_indices(
        torch.tensor(case["req"], **i32),
        torch.tensor(case["pos"], **i32),
        torch.tensor(case["swa_table"], **i32),
        case["window"],
        torch.tensor(case["replay"], **i32),
        torch.tensor(case["topk"], **i32),
        torch.tensor(case["comp_table"], **i32),
        case["ratio"],
        swa_page_size=case["swa_ps"],
        comp_page_size=case["comp_ps"],
        backend=be,  # type: ignore[arg-type]
        validate=validate,
    )
    return [t.cpu() for t in out if t is not None]


@pytest.mark.parametrize("backend", BACKENDS)
@given(case=index_cases())
def test_sparse_paged_indices_match_the_host_reference(backend: str, case: dict) -> None:
    swa, swa_len, comp, comp_len = call_indices(case, backend, validate=False)
    missing = False
    for i in range(len(case["req"])):
        r_swa, r_len, r_comp, r_clen, r_missing = host_indices(case, i)
        assert swa[i].tolist() == r_swa, i
        assert int(swa_len[i]) == r_len, i
        assert comp[i].tolist() == r_comp, i
        assert int(comp_len[i]) == r_clen, i
        missing |= r_missing
    if case["in_range"]:
        if missing:
            with pytest.raises(IndexError, match="needs a page"):
                call_indices(case, backend, validate=True)
        else:
            out = call_indices(case, backend, validate=True)
            assert all(
                torch.equal(a, b) for a, b in zip(out, (swa, swa_len, comp, comp_len), strict=True)
            )


def test_reference_bound_is_tight_enough() -> None:
    """The error bound above is not vacuous: an off-by-one code breaks it."""
    x = np.full((1, D), 1.3, np.float32)
    d, s = ref_encode("mxfp8", x)
    bumped = d.copy()
    bumped[0, 0] += 1
    err = np.abs(ref_decode("mxfp8", bumped, s)[0, 0] - 1.3)
    assert err > error_bound("mxfp8", x, d, s)[0, 0]
    assert math.isfinite(float(err))
