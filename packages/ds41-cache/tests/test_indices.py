"""`sparse_paged_indices` (SPEC section 7) against a plain-Python host reference."""

from __future__ import annotations

import random

import pytest
import torch

from ds41_cache.indices import sparse_paged_indices

Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def host_reference(case: dict, t: int) -> tuple[list[int], int, list[int] | None, int | None]:
    """Row `t`'s outputs written out with loops, straight from SPEC section 7."""
    r, p = case["req"][t], case["pos"][t]
    w, ratio = case["window"], case["ratio"]
    k = len(case["topk"][t]) if case["topk"] is not None else 0
    has_comp = ratio > 0 and case["topk"] is not None
    if r < 0:
        return [-1] * w, 0, ([-1] * k if has_comp else None), (0 if has_comp else None)
    ps, table = case["swa_page_size"], case["swa_table"][r]
    lo = max(0, p - w + 1, case["replay_start"][r])
    swa = [table[q // ps] * ps + q % ps for q in range(lo, p + 1)]
    swa_len = len(swa)
    swa += [-1] * (w - swa_len)
    if not has_comp:
        return swa, swa_len, None, None
    cps, ctable = case["comp_page_size"], case["comp_table"][r]
    n_visible = (p + 1) // ratio
    comp = [ctable[e // cps] * cps + e % cps for e in case["topk"][t] if 0 <= e < n_visible]
    comp_len = len(comp)
    return swa, swa_len, comp + [-1] * (k - comp_len), comp_len


def make_case(
    seed: int,
    *,
    ratio: int,
    window: int,
    swa_page_size: int,
    comp_page_size: int,
    k: int,
    num_rows: int = 14,
    num_req: int = 3,
) -> dict:
    rnd = random.Random(seed)
    max_pos = 40
    swa_cols = -(-max_pos // swa_page_size) + 1
    comp_cols = -(-max_pos // comp_page_size) + 1
    rows = []
    for _ in range(num_rows):
        if rnd.random() < 0.15:
            rows.append((-1, rnd.randrange(0, max_pos)))
        else:
            rows.append((rnd.randrange(num_req), rnd.randrange(0, max_pos)))
    replay_start = [rnd.choice([0, 0, 3, 9]) for _ in range(num_req)]
    rows = [(r, max(p, replay_start[r]) if r >= 0 else p) for r, p in rows]
    # Pages are a random permutation; pages wholly before every needed window position are
    # released (-1), as a window cache does.
    pages = list(range(num_req * swa_cols))
    rnd.shuffle(pages)
    swa_table = [pages[i * swa_cols : (i + 1) * swa_cols] for i in range(num_req)]
    for r in range(num_req):
        los = [max(0, p - window + 1, replay_start[r]) for rr, p in rows if rr == r]
        for c in range(min(los, default=0) // swa_page_size):
            swa_table[r][c] = -1
    cpages = list(range(num_req * comp_cols))
    rnd.shuffle(cpages)
    comp_table = [cpages[i * comp_cols : (i + 1) * comp_cols] for i in range(num_req)]
    topk = []
    for _r, p in rows:
        n_visible = (p + 1) // ratio if ratio else 0
        chosen = sorted(rnd.sample(range(n_visible + 3), min(k, n_visible + 3)))
        row = (chosen + [-1] * k)[:k]
        if rnd.random() < 0.2 and k > 2:  # a hole inside the row: valid entries move up
            row[1] = -1
        topk.append(row)
    return {
        "req": [r for r, _ in rows],
        "pos": [p for _, p in rows],
        "window": window,
        "ratio": ratio,
        "replay_start": replay_start,
        "swa_table": swa_table,
        "comp_table": comp_table,
        "topk": topk if ratio else None,
        "swa_page_size": swa_page_size,
        "comp_page_size": comp_page_size,
    }


def tensors(case: dict, device: torch.device) -> list[torch.Tensor | None]:
    """The tensor arguments of a case, in call order (req, pos, swa table, replay, topk, comp
    table)."""
    i32 = {"dtype": torch.int32, "device": device}
    topk = None if case["topk"] is None else torch.tensor(case["topk"], **i32)
    return [
        torch.tensor(case["req"], **i32),
        torch.tensor(case["pos"], **i32),
        torch.tensor(case["swa_table"], **i32),
        torch.tensor(case["replay_start"], **i32),
        topk,
        torch.tensor(case["comp_table"], **i32),
    ]


def call(case: dict, args: list, backend: str, **kw: object) -> Outputs:
    req, pos, swa_table, replay, topk, comp_table = args
    return sparse_paged_indices(
        req,
        pos,
        swa_table,
        case["window"],
        replay,
        topk,
        comp_table,
        case["ratio"],
        swa_page_size=case["swa_page_size"],
        comp_page_size=case["comp_page_size"],
        backend=backend,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def run(case: dict, backend: str, device: torch.device, **kw: object) -> Outputs:
    return call(case, tensors(case, device), backend, **kw)


def check_against_host(case: dict, out: Outputs) -> None:
    swa, swa_len, comp, comp_len = out
    t = len(case["req"])
    assert swa.dtype == torch.int32 and tuple(swa.shape) == (t, case["window"])
    assert swa_len.dtype == torch.int32 and tuple(swa_len.shape) == (t,)
    for i in range(t):
        ref_swa, ref_len, ref_comp, ref_clen = host_reference(case, i)
        assert swa[i].tolist() == ref_swa, i
        assert int(swa_len[i]) == ref_len, i
        if ref_comp is None:
            assert comp is None and comp_len is None
        else:
            assert comp is not None and comp_len is not None
            assert comp.dtype == torch.int32 and comp_len.dtype == torch.int32
            assert comp[i].tolist() == ref_comp, i
            assert int(comp_len[i]) == ref_clen, i


CONFIGS = [
    {"ratio": 2, "window": 8, "swa_page_size": 4, "comp_page_size": 4, "k": 4},
    {"ratio": 1, "window": 5, "swa_page_size": 3, "comp_page_size": 2, "k": 5},
    {"ratio": 2, "window": 4, "swa_page_size": 16, "comp_page_size": 3, "k": 8},
    {"ratio": 0, "window": 8, "swa_page_size": 2, "comp_page_size": 1, "k": 4},
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("cfg", CONFIGS)
def test_torch_matches_host_reference(cfg: dict, seed: int) -> None:
    case = make_case(seed, **cfg)
    check_against_host(case, run(case, "torch", torch.device("cpu")))


@pytest.mark.interpreter
@pytest.mark.parametrize("cfg", CONFIGS)
def test_triton_matches_host_and_torch(cfg: dict, device: torch.device) -> None:
    case = make_case(7, **cfg)
    got = run(case, "triton", device)
    check_against_host(case, tuple(x.cpu() if x is not None else None for x in got))  # type: ignore[arg-type]
    ref = run(case, "torch", torch.device("cpu"))
    for a, b in zip(got, ref, strict=True):
        assert (a is None and b is None) or torch.equal(a.cpu(), b)  # type: ignore[union-attr]


def test_no_topk_or_ratio0_gives_no_comp_outputs() -> None:
    case = make_case(3, **CONFIGS[0])
    case["topk"] = None
    swa, swa_len, comp, comp_len = run(case, "torch", torch.device("cpu"))
    assert comp is None and comp_len is None
    check_against_host(case, (swa, swa_len, None, None))


def _subset(case: dict, rows: list[int | None]) -> dict:
    """The case with its rows reordered/duplicated; None inserts a padding row."""
    out = dict(case)
    out["req"] = [case["req"][i] if i is not None else -1 for i in rows]
    out["pos"] = [case["pos"][i] if i is not None else 5 for i in rows]
    if case["topk"] is not None:
        k = len(case["topk"][0])
        out["topk"] = [case["topk"][i] if i is not None else list(range(k)) for i in rows]
    return out


@pytest.mark.parametrize(
    "backend", ["torch", pytest.param("triton", marks=pytest.mark.interpreter)]
)
def test_rows_do_not_depend_on_the_batch(backend: str, device: torch.device) -> None:
    dev = device if backend == "triton" else torch.device("cpu")
    case = make_case(11, **CONFIGS[0])
    t = len(case["req"])
    base = run(case, backend, dev)
    perm = list(range(t))
    random.Random(5).shuffle(perm)
    variants = [
        perm,  # permuted
        [None, *range(t), None, None],  # padded (CUDA-graph style)
        list(range(t)) + list(range(t)),  # grown
        [3],  # alone
    ]
    for rows in variants:
        got = run(_subset(case, rows), backend, dev)
        for j, i in enumerate(rows):
            for a, b in zip(got, base, strict=True):
                assert a is not None and b is not None
                if i is None:
                    continue
                assert torch.equal(a[j], b[i]), (rows, j)
            if i is None:
                assert int(got[1][j]) == 0 and int(got[3][j]) == 0  # type: ignore[index]
                assert bool((got[0][j] == -1).all()) and bool((got[2][j] == -1).all())  # type: ignore[index]


def _missing_page_case() -> dict:
    case = make_case(2, **CONFIGS[0])
    row = next(i for i, r in enumerate(case["req"]) if r >= 0)
    r, p = case["req"][row], case["pos"][row]
    case["swa_table"][r][p // case["swa_page_size"]] = -1
    return case


def test_missing_page_raises_when_validating() -> None:
    case = _missing_page_case()
    with pytest.raises(IndexError, match="needs a page"):
        run(case, "torch", torch.device("cpu"))
    swa, _, _, _ = run(case, "torch", torch.device("cpu"), validate=False)
    assert bool((swa == -1).any())
    case = make_case(2, **CONFIGS[0])
    case["comp_table"] = [[-1] * len(row) for row in case["comp_table"]]
    with pytest.raises(IndexError, match="needs a page"):
        run(case, "torch", torch.device("cpu"))


@pytest.mark.interpreter
def test_triton_writes_minus_one_for_missing_pages(device: torch.device) -> None:
    case = _missing_page_case()
    with pytest.raises(IndexError, match="needs a page"):
        run(case, "triton", device)
    got = run(case, "triton", device, validate=False)
    ref = run(case, "torch", torch.device("cpu"), validate=False)
    for a, b in zip(got, ref, strict=True):
        assert torch.equal(a.cpu(), b)  # type: ignore[union-attr]


def _good_args() -> dict:
    i32 = torch.int32
    return {
        "req_idx": torch.tensor([0, 1, -1], dtype=i32),
        "pos": torch.tensor([3, 5, 0], dtype=i32),
        "swa_block_table": torch.arange(8, dtype=i32).view(2, 4),
        "window": 4,
        "replay_start": torch.zeros(2, dtype=i32),
        "topk_entries": torch.zeros(3, 2, dtype=i32),
        "comp_block_table": torch.arange(4, dtype=i32).view(2, 2),
        "ratio": 2,
        "swa_page_size": 4,
        "comp_page_size": 4,
        "backend": "torch",
    }


@pytest.mark.parametrize(
    "change,error,match",
    [
        ({"req_idx": torch.tensor([0, 1, -1])}, TypeError, "req_idx must be int32"),
        ({"pos": torch.tensor([3, 5], dtype=torch.int32)}, ValueError, "pos must be int32"),
        (
            {"swa_block_table": torch.zeros(2, 4, dtype=torch.int64)},
            TypeError,
            "swa_block_table must be int32",
        ),
        ({"replay_start": torch.zeros(3, dtype=torch.int32)}, ValueError, "replay_start must be"),
        (
            {"topk_entries": torch.zeros(2, 2, dtype=torch.int32)},
            ValueError,
            "topk_entries must be",
        ),
        ({"comp_block_table": None}, ValueError, "comp_block_table must be"),
        (
            {"comp_block_table": torch.zeros(3, 2, dtype=torch.int32)},
            ValueError,
            "comp_block_table must be",
        ),
        ({"window": 0}, ValueError, "window must be"),
        ({"swa_page_size": -4}, ValueError, "swa_page_size must be"),
        ({"ratio": -1}, ValueError, "ratio must be"),
        ({"backend": "cuda"}, ValueError, "backend must be"),
        (
            {"req_idx": torch.tensor([0, 2, -1], dtype=torch.int32)},
            IndexError,
            r"req_idx must lie in \[-1, 2\)",
        ),
        ({"req_idx": torch.tensor([0, 1, -3], dtype=torch.int32)}, IndexError, "req_idx must lie"),
        ({"pos": torch.tensor([3, -5, 0], dtype=torch.int32)}, ValueError, "pos must be >= 0"),
        (
            {"replay_start": torch.tensor([0, 6], dtype=torch.int32)},
            ValueError,
            "replay_start of request 1",
        ),
    ],
)
def test_bad_inputs(change: dict, error: type, match: str) -> None:
    args = _good_args() | change
    with pytest.raises(error, match=match):
        sparse_paged_indices(**args)


def test_good_args_pass() -> None:
    swa, swa_len, comp, comp_len = sparse_paged_indices(**_good_args())
    assert swa_len.tolist() == [4, 4, 0]
    assert swa.tolist() == [[0, 1, 2, 3], [18, 19, 20, 21], [-1] * 4]  # p=5: positions 2..5
    assert comp is not None and comp_len is not None
    assert comp_len.tolist() == [2, 2, 0]  # entry 0 is visible at p=3 and p=5
    assert comp[0].tolist() == [0, 0]
    assert comp[1].tolist() == [8, 8]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_cuda_graph_replay_matches_eager(backend: str) -> None:
    """validate=False is capturable: a replay on new inputs equals an eager call."""
    dev = torch.device("cuda")
    first, second = make_case(4, **CONFIGS[0]), make_case(5, **CONFIGS[0])
    static = tensors(first, dev)
    fn = lambda: call(first, static, backend, validate=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    for dst, src in zip(static, tensors(second, dev), strict=True):
        assert dst is not None and src is not None
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    check_against_host(second, tuple(x.cpu() if x is not None else None for x in out))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "backend", ["torch", pytest.param("triton", marks=pytest.mark.interpreter)]
)
def test_strided_inputs(backend: str, device: torch.device) -> None:
    """Tables sliced out of wider ones, strided 1-D inputs and a transposed top-k buffer."""
    dev = device if backend == "triton" else torch.device("cpu")
    case = make_case(9, **CONFIGS[2])
    req, pos, swa_table, replay, topk, comp_table = tensors(case, dev)
    assert topk is not None and comp_table is not None

    def widen(x: torch.Tensor) -> torch.Tensor:
        wide = torch.full((x.shape[0], x.shape[1] + 5), 99, dtype=x.dtype, device=dev)
        wide[:, 2 : 2 + x.shape[1]] = x
        return wide[:, 2 : 2 + x.shape[1]]

    def spread(x: torch.Tensor) -> torch.Tensor:
        wide = torch.full((x.shape[0], 2), 77, dtype=x.dtype, device=dev)
        wide[:, 1] = x
        return wide[:, 1]

    topk_t = topk.t().contiguous().t()
    args = [spread(req), spread(pos), widen(swa_table), spread(replay), topk_t, widen(comp_table)]
    assert not args[0].is_contiguous() and not args[2].is_contiguous()
    assert not topk_t.is_contiguous()
    got = call(case, args, backend)
    check_against_host(case, tuple(x.cpu() if x is not None else None for x in got))  # type: ignore[arg-type]
