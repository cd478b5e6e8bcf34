"""The README's error bound ("Accuracy") on the CPU: the torch path, the Triton kernel under
the interpreter and an emulation of the Hopper kernels' arithmetic stay within it at
adversarial magnitudes, and the bound is tight enough to reject real bugs."""

from __future__ import annotations

import pytest
import torch
from accuracy_helpers import adversarial_problem, check_bound, emulate, error_bound
from attn_helpers import random_cache, random_q, random_sink, random_slots

from ds41_attention import sparse_attention

COMBOS = [("mxfp8", "nvfp4"), ("mxfp8", "mxfp8"), ("mxfp8", "bf16"), ("bf16", "bf16")]


def _realistic(rows: int, seed: int, cfmt: str = "nvfp4") -> tuple:
    """The GPU tests' random problem: random records, unit-variance q, H 64, D 512."""
    g = torch.Generator().manual_seed(seed)
    wc = random_cache("mxfp8", 512, 64, 6, g)
    cc = random_cache(cfmt, 512, 64, 12, g)
    ss, sl = random_slots(rows, 128, wc.num_slots, g)
    cs, cl = random_slots(rows, 512, cc.num_slots, g)
    return (random_q(rows, 64, 512, g), wc, ss, sl, cc, cs, cl, random_sink(64, g), 512**-0.5)


def _bf16(o_lse: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return o_lse[0].to(torch.bfloat16), o_lse[1].float()


@pytest.mark.parametrize("wfmt,cfmt", COMBOS)
def test_torch_path_within_bound(wfmt, cfmt):
    args = adversarial_problem(wfmt, cfmt, 3, seed=1)
    out, lse = sparse_attention(*args, backend="torch")
    # the torch path keeps P in fp32: the bound without the P rounding holds too
    check_bound(out, lse, args, p_round=0.0)


@pytest.mark.parametrize("wfmt,cfmt", [("mxfp8", "nvfp4"), ("bf16", "bf16")])
def test_interpreter_within_bound(wfmt, cfmt):
    """The Triton kernel under TRITON_INTERPRET=1 (fp32 operands, P not rounded)."""
    from ds41_attention.ops.sparse_attention.launch import launch_sparse_attention

    args = adversarial_problem(wfmt, cfmt, 2, seed=2)
    out, lse = launch_sparse_attention(*args)
    check_bound(out, lse, args, p_round=0.0)


@pytest.mark.parametrize(
    "wfmt,cfmt,order,block_n",
    [(*c, "triton", 64) for c in COMBOS] + [("mxfp8", "nvfp4", "gluon", 32)],
)
def test_tensor_core_emulation_within_bound(wfmt, cfmt, order, block_n):
    """The kernels' arithmetic with the Hopper tensor-core model (25-bit aligned truncating
    adds per 16-product step, RZ to fp32) for q.kv and P.V and bf16 P: within the bound,
    and with room (the bound must hold for any k order and for harder inputs)."""
    args = adversarial_problem(wfmt, cfmt, 2, seed=3)
    out, lse = _bf16(emulate(args, "tc", pv_tc=True, block_n=block_n, order=order))
    assert check_bound(out, lse, args) < 0.75


@pytest.mark.parametrize("lazy_t", [8, 16])
@pytest.mark.parametrize("problem", ["mxfp8+nvfp4", "bf16+bf16", "realistic"])
def test_lazy_rescale_emulation_within_bound(problem, lazy_t):
    """The lazy running max of the retired lab kernel `scripts/gluon_lab10.py` (commit e51d281; a head's max moves only past a
    threshold of t ln 2, so P <= 2^t) in the Gluon kernel's emulated arithmetic: within the
    bound with its lazy term, and its outputs differ from the eager max's (the lazy path ran)."""
    import math

    if problem == "realistic":
        args = _realistic(2, seed=7)
    else:
        args = adversarial_problem(*problem.split("+"), 2, seed=3)
    lazy = lazy_t * math.log(2)
    out, lse = _bf16(emulate(args, "tc", pv_tc=True, block_n=32, order="gluon", lazy=lazy))
    eager, _ = _bf16(emulate(args, "tc", pv_tc=True, block_n=32, order="gluon"))
    assert not torch.equal(out, eager)
    assert check_bound(out, lse, args, lazy_log=lazy) < 0.9


def test_bound_is_nonzero_only_where_needed():
    """Rows without keys get bound 0 (exact zeros required); elsewhere the bound of a head
    whose softmax is one-hot is a few half-ulps, not a multiple of max|kv|."""
    args = list(adversarial_problem("mxfp8", "nvfp4", 3, seed=4))
    args[3] = args[3].clone()
    args[6] = args[6].clone()
    args[3][1] = 0
    args[6][1] = 0
    out, lse = _bf16(emulate(tuple(args), "tc", pv_tc=True))
    ref, bound, _, _ = error_bound(tuple(args), out)
    assert (bound[1] == 0).all() and (out[1] == 0).all()
    check_bound(out, lse, tuple(args))
    vmax = float(ref.abs().max())
    # the random-q heads (first half) have one-hot softmaxes at these magnitudes
    assert float(bound[[0, 2], :32].median()) < 1e-2 * vmax


# ------------------------------------------------------------ the bound rejects real bugs


def _fails(out: torch.Tensor, lse: torch.Tensor, args: tuple, **kw) -> None:
    with pytest.raises(AssertionError):
        check_bound(out, lse, args, **kw)


def _with(args: tuple, **changes) -> tuple:
    names = ["q", "wc", "ss", "sl", "cc", "cs", "cl", "sink", "scale"]
    return tuple(changes.get(n, a) for n, a in zip(names, args, strict=True))


@pytest.mark.parametrize("problem", ["realistic", "adversarial"])
def test_bound_rejects_bugs(problem):
    """Emulated kernels with one deliberate bug each fail the check (the reference and the
    bound always see the correct inputs)."""
    if problem == "realistic":
        args = _realistic(3, seed=5)
        # a sink comparable to the scores' lse, so that it holds a real share of the mass
        args = _with(args, sink=torch.full_like(args[7], 10.0))
    else:
        args = adversarial_problem("mxfp8", "nvfp4", 2, seed=6)
    good = _bf16(emulate(args, "tc"))
    used = check_bound(*good, args)
    if problem == "realistic":
        assert used > 0.2  # not a vacuous bound: the correct kernel uses a real share of it
    # one output element off by 2^-5 of its value (8 bf16 ulps)
    out = good[0].clone()
    i = int(good[0].double().abs().flatten().argmax())
    out.view(-1)[i] = (out.view(-1)[i].double() * (1 + 2.0**-5)).to(torch.bfloat16)
    _fails(out, good[1], args)
    # the softmax scale off by 2^-8 (e.g. D^-0.5 rounded to bf16)
    _fails(*_bf16(emulate(_with(args, scale=args[8] * (1 + 2.0**-8)), "tc")), args)
    # a lossy decode in the q.kv product: every 8th channel of the keys rounded to e4m3
    from accuracy_helpers import _row_entries, scores

    kv, _ = _row_entries(*args[1:7])
    lossy = kv.clone()
    lossy[..., ::8] = lossy[..., ::8].to(torch.float8_e4m3fn).double()
    _fails(*_bf16(emulate(args, scores(args[0], lossy, "f64").float())), args)
    if problem == "realistic":
        # the last valid key of every row dropped (an off-by-one in the lengths; at
        # adversarial magnitudes that key's weight is usually ~0)
        _fails(*_bf16(emulate(_with(args, cl=(args[6] - 1).clamp(min=0)), "tc")), args)
        # the sink ignored (at adversarial magnitudes its weight is ~e^-1000 anyway)
        _fails(*_bf16(emulate(_with(args, sink=torch.full_like(args[7], -torch.inf)), "tc")), args)
        # P rounded to fp8 e4m3 instead of bf16
        _fails(*_bf16(emulate(args, "tc", p_dtype=torch.float8_e4m3fn)), args)
        # scores rounded to bf16 (the torch baseline's bf16 GEMMs)
        s16 = (scores(args[0], kv, "f64") * args[8]).to(torch.bfloat16).double() / args[8]
        _fails(*_bf16(emulate(args, s16)), args)
