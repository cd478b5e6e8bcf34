"""KVState: reserve / trim / free / prefix pages / errors (no forward pass needed)."""

import pytest
import torch

from ds41_cache.allocator import CacheFullError
from ds41_runner.model import KVState, ModelConfig

CFG = ModelConfig.preset("tiny")


def make(**kw) -> KVState:
    args = dict(
        kv_dtype="nvfp4_ds_mla",
        max_requests=4,
        max_tokens_per_request=64,
        num_pages=12,
        page_size=4,
    )
    args.update(kw)
    return KVState(CFG, **args)


def tables(kv: KVState) -> list[torch.Tensor]:
    return [kv.window_alloc.block_table.clone()] + [
        a.block_table.clone() for a in kv.comp_alloc.values()
    ]


def test_layout_formats_and_sharing():
    kv = make()
    assert len(kv.window) == CFG.n_layers and all(c.fmt == "mxfp8" for c in kv.window)
    assert sorted(kv.comp) == [2, 5] and sorted(kv.comp_alloc) == [1, 2]
    assert kv.comp[2].fmt == "nvfp4" and kv.index_keys[5].fmt == "mxfp4"
    assert kv.index_keys[5].dim == CFG.index_head_dim
    assert kv.compressors[2].ratio == 2 and kv.compressors[5].ratio == 1
    for dt, w, c in (("bf16", "bf16", "bf16"), ("fp8_ds_mla", "mxfp8", "mxfp8")):
        k = make(kv_dtype=dt)
        assert k.window[0].fmt == w and k.comp[2].fmt == c and k.index_keys[2].fmt == "mxfp4"


def test_reserve_all_kinds_and_cache_full_changes_nothing():
    kv = make()
    kv.reserve(0, 10)  # window 3 pages, ratio-2 entries 5 -> 2 pages, ratio-1 entries 10 -> 3
    assert kv.free_pages() == {"window": 9, "comp1": 9, "comp2": 10}
    kv.reserve(0, 10)  # idempotent
    assert kv.num_free_pages() == 9
    kv.reserve(1, 32)  # ratio-1 needs 8 pages, only 9 - 8 = 1 left afterwards
    assert kv.free_pages()["comp1"] == 1
    before = tables(kv)
    free_before = kv.free_pages()
    with pytest.raises(CacheFullError, match="request 2 needs 2 more page") as err:
        kv.reserve(2, 8)  # window needs 2 pages (has 1 left), ratio-1 needs 2 (1 left)
    assert err.value.request == 2
    assert kv.free_pages() == free_before
    for a, b in zip(before, tables(kv), strict=True):
        assert torch.equal(a, b)
    assert not kv.is_active(2)
    with pytest.raises(ValueError, match=r"num_tokens must lie in \[0, 64\]"):
        kv.reserve(0, 65)
    with pytest.raises(IndexError, match=r"req must be an int in \[0, 4\)"):
        kv.reserve(4, 1)


def test_trim_releases_old_window_pages_only():
    kv = make()
    kv.reserve(0, 20)
    kv.trim(0, 8)  # window 8: a query at 8 sees positions >= 1: nothing wholly before
    assert kv.window_alloc.pages_of(0)[0] >= 0
    kv.trim(0, 16)  # sees >= 9: pages [0, 4) and [4, 8) go back
    assert kv.window_alloc.pages_of(0)[:3][:2] == [-1, -1]
    assert kv.window_alloc.pages_of(0)[2] >= 0
    assert kv.free_pages()["window"] == 12 - 5 + 2
    assert kv.free_pages()["comp1"] == 12 - 5  # compressed caches keep everything
    kv.reserve(0, 24)  # growing does not re-allocate released pages
    assert kv.window_alloc.pages_of(0)[:2] == [-1, -1] and kv.free_pages()["window"] == 8


def test_free_returns_pages_and_resets_rings():
    kv = make()
    kv.reserve(0, 16)
    kv.compressors[2].state[0].fill_(1.5)
    kv.free(0)
    assert kv.num_free_pages() == 12 and not kv.is_active(0)
    assert float(kv.compressors[2].state[0].abs().max()) == 0.0
    kv.free(0)  # freeing an inactive request is harmless


def test_prefix_export_import_release_refcounts():
    kv = make()
    kv.reserve(0, 12)
    kv.compressors[2].state[0].fill_(0.25)
    kv.trim(0, 12)  # sees >= 5: page [0, 4) released
    h = kv.export_prefix(0, 12)
    assert h.window_pages[0] == -1 and len(h.window_pages) == 3
    # ratio 2: 6 entries -> one full page shared + a copied tail of 2 entries; ratio 1: 3 pages.
    assert len(h.comp_pages[2]) == 1 and 2 in h.comp_tail and len(h.comp_pages[1]) == 3
    assert 1 not in h.comp_tail
    # Mark the source's tail page bytes so the copy can be checked.
    tail_page = kv.comp_alloc[2].pages_of(0)[1]
    kv.comp[2].storage[tail_page, :8] = 77
    kv.free(0)
    free_after_src = kv.free_pages()
    assert free_after_src["window"] == 12 - 2 and free_after_src["comp1"] == 12 - 3
    kv.import_prefix(h, 3)
    assert kv.window_alloc.pages_of(3)[1:] == h.window_pages[1:]
    assert kv.comp_alloc[1].pages_of(3) == h.comp_pages[1]
    new_tail = kv.comp_alloc[2].pages_of(3)[1]
    assert torch.equal(kv.comp[2].storage[new_tail], h.comp_tail[2]["comp2"])
    assert float(kv.compressors[2].state[3].min()) == 0.25
    with pytest.raises(ValueError, match="dst_req 3 must be free"):
        kv.import_prefix(h, 3)
    kv.release_prefix(h)
    with pytest.raises(ValueError, match="already released"):
        kv.release_prefix(h)
    kv.free(3)
    assert kv.num_free_pages() == 12
    with pytest.raises(ValueError, match="multiple of page_size 4"):
        kv.export_prefix(0, 6)


def test_export_prefixes_equals_one_by_one_and_is_all_or_nothing():
    """The batched export (one ring snapshot and one tail copy per page, shared) gives the
    handles single exports give, and a bad count holds nothing."""
    torch.manual_seed(0)
    one, many = make(), make()
    for kv in (one, many):
        kv.reserve(0, 16)
        for layer, c in kv.compressors.items():
            c.state[0].copy_(
                torch.randn(c.state[0].shape, generator=torch.Generator().manual_seed(layer))
            )
        for m, a in kv.comp_alloc.items():
            for cache in kv._caches_of(m).values():
                for page in a.pages_of(0):
                    cache.storage[page] = torch.randint(
                        0,
                        256,
                        cache.storage[page].shape,
                        generator=torch.Generator().manual_seed(page),
                        dtype=torch.int32,
                    ).to(cache.storage.dtype)
    counts = [4, 8, 12, 16]
    singles = [one.export_prefix(0, n) for n in counts]
    batch = many.export_prefixes(0, counts)
    assert one.free_pages() == many.free_pages()
    for a, b in zip(singles, batch, strict=True):
        assert (a.num_tokens, a.window_pages, a.comp_pages) == (
            b.num_tokens,
            b.window_pages,
            b.comp_pages,
        )
        assert sorted(a.comp_tail) == sorted(b.comp_tail)
        for m in a.comp_tail:
            for name in a.comp_tail[m]:
                assert torch.equal(a.comp_tail[m][name], b.comp_tail[m][name])
        for layer in a.rings:
            assert torch.equal(a.rings[layer], b.rings[layer])
    # ratio 2 at 4 and 12 tokens: 2 and 6 entries end inside page 0 and page 1: one copy each
    assert batch[0].comp_tail[2]["comp2"] is not batch[2].comp_tail[2]["comp2"]
    assert batch[0].rings[2] is batch[3].rings[2]
    held = many.free_pages()
    with pytest.raises(ValueError, match="multiple of page_size 4, got 6"):
        many.export_prefixes(0, [8, 6])
    assert many.free_pages() == held, "a failed batch must hold no page"
    assert many.export_prefixes(0, []) == []


def test_export_refuses_released_window_pages():
    kv = make()
    kv.reserve(0, 24)
    kv.trim(0, 24)  # positions < 17 released wholly: pages [0,4) .. [12,16)
    with pytest.raises(ValueError, match="does not hold window pages"):
        kv.export_prefix(0, 16)  # a query at 16 needs positions >= 9


def test_bytes_per_token():
    kv = make()
    d, di, w = 64, 32, 8
    win = (d + d // 32) * CFG.n_layers  # mxfp8 window rows
    comp = (d // 2 + d // 16) + (di // 2 + di // 32)  # nvfp4 entry + mxfp4 index key
    ctx = 64
    expected = (win * min(ctx, w) + comp * (ctx // 2) + comp * ctx) / ctx
    assert kv.bytes_per_token(ctx) == pytest.approx(expected)
    assert make(kv_dtype="bf16").bytes_per_token(ctx) > kv.bytes_per_token(ctx)
    with pytest.raises(ValueError, match="context_len"):
        kv.bytes_per_token(0)


def test_constructor_errors():
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        make(kv_dtype="auto")
    with pytest.raises(ValueError, match="page_size must be a positive int"):
        make(page_size=0)
    with pytest.raises(ValueError, match="page_size must be a multiple of every compress ratio"):
        make(page_size=5)
    with pytest.raises(ValueError, match="max_tokens_per_request must be <= max_position"):
        make(max_tokens_per_request=4096)
