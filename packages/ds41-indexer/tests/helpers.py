"""Test builders: paged index-key caches with poisoned, padded storage and float64 references."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ds41_cache.codec import quantize_dequantize
from ds41_cache.formats import row_layout
from ds41_cache.insert import gather, insert
from ds41_cache.paged import PagedCache, default_page_stride

STRIDE_PAD = 48
"""Extra bytes per page beyond the default stride: kernels must use the stride they are given."""


@dataclass
class Scenario:
    cache: PagedCache
    block_table: torch.Tensor  # int32 [R, P]
    keys: list[torch.Tensor]  # per request: float64 [n_entries_r, Di] (decoded)
    hi: int
    di: int


def make_scenario(
    fmt: str,
    entries_per_req: list[int],
    *,
    di: int = 32,
    hi: int = 4,
    page_size: int = 8,
    pages_per_req: int | None = None,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> Scenario:
    """Random keys for each request written through the public codec into shuffled pages."""
    g = torch.Generator().manual_seed(seed)
    n_req = len(entries_per_req)
    need = [-(-n // page_size) for n in entries_per_req]
    p_cols = max(need + [1]) if pages_per_req is None else pages_per_req
    num_pages = sum(need) + 3
    layout = row_layout(fmt, di)
    stride = default_page_stride(layout, page_size) + STRIDE_PAD
    # Poison: every byte not written below (other pages, padding, unused slots) is random junk.
    storage = torch.randint(0, 256, (num_pages, stride), generator=g, dtype=torch.uint8)
    cache = PagedCache(fmt, di, page_size, num_pages, stride, storage)
    perm = torch.randperm(num_pages, generator=g)
    table = torch.full((n_req, p_cols), -1, dtype=torch.int32)
    keys = []
    used = 0
    for r, n in enumerate(entries_per_req):
        pages = perm[used : used + need[r]]
        used += need[r]
        table[r, : need[r]] = pages.to(torch.int32)
        # Per-block magnitudes differ so that block scales matter.
        x = torch.randn(n, di, generator=g) * torch.exp2(
            torch.randint(-3, 4, (1, di // 32), generator=g).float()
        ).repeat_interleave(32, dim=1)
        e = torch.arange(n)
        slots = table[r].to(torch.int64)[e // page_size] * page_size + e % page_size
        insert(cache, x, slots, backend="torch")
        keys.append(gather(cache, slots, backend="torch").to(torch.float64))
    cache.storage = cache.storage.to(device)
    return Scenario(cache, table.to(device), keys, hi, di)


def make_queries(
    t: int, hi: int, di: int, seed: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = quantize_dequantize("mxfp4", torch.randn(t * hi, di, generator=g), backend="torch")
    w = torch.randn(t, hi, generator=g)
    return q.view(t, hi, di).to(device), w.to(device)


def reference_logits(
    sc: Scenario,
    q: torch.Tensor,
    w: torch.Tensor,
    req_idx: torch.Tensor,
    pos: torch.Tensor,
    ratio: int,
    n_cols: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 logits [T, n_cols] (-inf beyond n(p)) and per-element error bounds."""
    t = q.shape[0]
    out = torch.full((t, n_cols), float("-inf"), dtype=torch.float64)
    bound = torch.zeros((t, n_cols), dtype=torch.float64)
    for i in range(t):
        r, p = int(req_idx[i]), int(pos[i])
        if r < 0:
            continue
        n = min((p + 1) // ratio, n_cols)
        k = sc.keys[r][:n]
        dots = q[i].double().cpu() @ k.T  # [Hi, n]
        wd = w[i].double().cpu()[:, None]
        out[i, :n] = (wd * dots.clamp(min=0)).sum(0)
        bound[i, :n] = (wd.abs() * (q[i].double().cpu().abs() @ k.abs().T)).sum(0)
    return out, bound


def brute_topk(row: list[float], n: int, k: int) -> list[int]:
    """Independent selector: Python sort on (-score, index) over entries < n."""
    chosen = sorted(range(n), key=lambda i: (-row[i], i))[:k]
    return sorted(chosen) + [-1] * (k - len(chosen))


def brute_topk_rows(logits: torch.Tensor, n_visible: torch.Tensor, k: int) -> torch.Tensor:
    rows = [
        brute_topk(logits[i].double().tolist(), int(n_visible[i]), k)
        for i in range(logits.shape[0])
    ]
    return torch.tensor(rows, dtype=torch.int32, device=logits.device).view(logits.shape[0], k)


def scale_edge_scenario(
    device: torch.device | str = "cpu",
) -> tuple[Scenario, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MXFP4 keys (Di 64) whose ue8m0 scale bytes sit at the edges of the kernel's fp16 path:
    request 0 has a page whose two blocks are exactly 32 apart (in both orders) and a page at
    the largest byte (250, the other block 218); request 1 a page at the smallest (10) and one
    at (120, 100); request 2 a page 33 apart (its rows take the general path). Queries:
    request 0's rows times 2^-60, the others' times 2^60 (exact), so nothing overflows or
    underflows fp32; one head spans 2^28. Returns (scenario, q, w, req, pos)."""
    sc = make_scenario("mxfp4", [128, 128, 64], di=64, hi=4, page_size=64, seed=31)
    cache, table = sc.cache, sc.block_table
    view = cache.scale_view()
    for (r, p), (b0, b1) in {
        (0, 0): (140, 108),
        (0, 1): (250, 218),
        (1, 0): (10, 10),
        (1, 1): (120, 100),
        (2, 0): (150, 117),
    }.items():
        page = int(table[r, p])
        view[page, :, 0] = b0
        view[page, :, 1] = b1
    page = int(table[0, 0])
    view[page, 1::2] = view[page, 1::2].flip(-1)
    for r, n in enumerate((128, 128, 64)):
        e = torch.arange(n)
        slots = table[r].long()[e // 64] * 64 + e % 64
        sc.keys[r] = gather(cache, slots, backend="torch").double()
    q, w = make_queries(6, 4, 64, seed=32)
    req = torch.tensor([0, 0, 0, 1, 1, 2], dtype=torch.int32)
    pos = torch.tensor([127, 100, 70, 127, 90, 63], dtype=torch.int32)
    scale = torch.where(req == 0, 2.0**-60, 2.0**60)[:, None, None]
    q = (q.float() * scale).to(torch.bfloat16)
    q[1, 2, :32] = (q[1, 2, :32].float() * 2.0**-28).to(torch.bfloat16)
    sc.cache.storage = sc.cache.storage.to(device)
    sc.block_table = sc.block_table.to(device)
    return sc, q.to(device), w.to(device), req.to(device), pos.to(device)
