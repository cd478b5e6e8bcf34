"""KV compressor of kv-source layers (SPEC section 5).

Ratio 1 normalizes every token's `kv` row into one entry. Ratio 2 pools the pair of tokens
`(2e, 2e+1)` with a per-channel softmax over their gate scores and normalizes the result; the
token closing the pair (odd position) emits entry `e`. Each request keeps a ring of its raw
fp32 `[kv | score]` rows at `p % capacity`, so a pair split across chunks (or decode steps)
finds its first row in a later call.

Batch invariance: every result a row gets is elementwise in its own values and its partner's,
plus a channel reduction in a fixed pairwise order inside the row; nothing reduces across rows.
The partner's fp32 values are the same bits whether they come from this call's input or from
the ring, so a latent does not depend on where a chunk boundary fell, on the other rows, or on
padding.
"""

from __future__ import annotations

import math

import torch

from .backend import resolve_backend
from .codec import require_finite
from .outputs import empty

SUPPORTED_RATIOS: tuple[int, ...] = (1, 2)
"""Compress ratios whose arithmetic is validated (V4.1 uses 1 and 2)."""
DEFAULT_CAPACITY = 8
"""Ring rows per request (SPEC section 5)."""
_POS_BITS = 31
"""Request ids sort above positions in the packed `(req, pos)` key; int32 positions fit."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, *, backend: str = "auto"
) -> torch.Tensor:
    """Row RMSNorm: `x: [T, D]` -> bf16 `[T, D]`, fp32 math.

    `y = bf16((x * rsqrt(ms + eps)) * w)` with `ms = s / D`, where `s` sums `x * x` over the
    channels pairwise (halves added elementwise until one column is left) in that fixed order,
    and `w = float32(weight)`. The order is a function of `D` alone, so a row's result never
    depends on the other rows or the row count.

    `backend`: "auto" (Triton on CUDA tensors), "triton" or "torch". The Triton kernel
    (`ops/norm/`, one launch) serves f32/bf16 `x` with unit column stride and a power-of-two
    `D`, with the torch reference's bits (`ops/norm/naive.py`, tested bitwise on the GPU);
    anything else takes the reference.
    """
    from .ops.norm import naive

    t, d = x.shape
    if (
        resolve_backend(backend, x.device) != "triton"
        or t == 0
        or d < 2
        or d & (d - 1)
        or x.dtype not in (torch.float32, torch.bfloat16)
        or weight.dtype not in (torch.float32, torch.bfloat16)
        or x.stride(1) != 1
        or tuple(weight.shape) != (d,)
    ):
        return naive.rms_norm(x, weight, eps)
    from .ops.norm import triton_kernels

    out = empty((t, d), torch.bfloat16, x.device)
    return triton_kernels.launch_rms_norm(x, weight.contiguous(), float(eps), out)


def pool_pair(
    kv0: torch.Tensor, score0: torch.Tensor, kv1: torch.Tensor, score1: torch.Tensor
) -> torch.Tensor:
    """Softmax pooling of two fp32 rows per channel: `[T, D]` x 4 -> fp32 `[T, D]`.

    `m = max(s0, s1)`, `e_i = exp(s_i - m)`, `w_i = e_i / (e0 + e1)`,
    `pooled = w0 * kv0 + w1 * kv1` (row `0` is the pair's even position).
    """
    m = torch.maximum(score0, score1)
    e0 = torch.exp(score0 - m)
    e1 = torch.exp(score1 - m)
    den = e0 + e1
    return (e0 / den) * kv0 + (e1 / den) * kv1


class Compressor:
    """Per-layer compressor state: fp32 ring `state: [max_requests, capacity, 2*D]`.

    Ratio-2 rows hold raw `[kv | score]` at `p % capacity`. Ratio 1 keeps no state
    (`state` has zero rows per request).
    """

    def __init__(
        self,
        ratio: int,
        dim: int,
        max_requests: int,
        capacity: int = DEFAULT_CAPACITY,
        device: torch.device | str = "cpu",
    ) -> None:
        if not _is_int(ratio) or ratio not in SUPPORTED_RATIOS:
            raise ValueError(f"ratio must be one of {SUPPORTED_RATIOS} (an int), got {ratio!r}")
        if not _is_int(capacity) or capacity < 2 or capacity & (capacity - 1):
            raise ValueError(f"capacity must be a power of two >= 2, got {capacity!r}")
        for name, value in (("dim", dim), ("max_requests", max_requests)):
            if not _is_int(value) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.ratio = ratio
        self.dim = dim
        self.max_requests = max_requests
        self.capacity = capacity
        rows = capacity if ratio == 2 else 0
        # One extra request row absorbs the writes of padding and superseded rows, so the
        # ring update is a single scatter with no data-dependent shapes (graph capturable).
        self._ring = torch.zeros(
            (max_requests + 1, rows, 2 * dim), dtype=torch.float32, device=device
        )
        self.state = self._ring[:max_requests]
        self.device = self._ring.device  # "cuda" resolved to its index, as tensors report it

    # ----------------------------------------------------------------- state
    def reset(self, req: int) -> None:
        """Forget request `req`'s ring (a new request in that slot)."""
        self.state[self._req(req)].zero_()

    def copy_state(self, src_req: int, dst_req: int) -> None:
        """`dst_req`'s ring becomes a copy of `src_req`'s (prefix-cache hit)."""
        src, dst = self._req(src_req, "src_req"), self._req(dst_req, "dst_req")
        if src != dst:
            self.state[dst].copy_(self.state[src])

    def state_snapshot(self, req: int) -> torch.Tensor:
        """A copy of request `req`'s ring: fp32 `[rows, 2*D]` (rows = capacity, or 0 at ratio 1)."""
        return self.state[self._req(req)].clone()

    def load_state(self, req: int, snapshot: torch.Tensor, *, check_finite: bool = True) -> None:
        """Restore a ring saved by `state_snapshot` into request `req`.

        snapshot: f32 `[rows, 2*D]` on the compressor's device, finite (ValueError otherwise,
        and the ring is left as it was). `check_finite=False` skips the finiteness check (a
        host sync): for snapshots this compressor took itself, which are as finite as the ring
        was, so restoring one reproduces what the cold computation would have held.
        """
        req = self._req(req)
        expected = tuple(self.state.shape[1:])
        if snapshot.dtype != torch.float32 or tuple(snapshot.shape) != expected:
            raise ValueError(
                f"snapshot must be float32 {list(expected)}, got {snapshot.dtype} "
                f"{list(snapshot.shape)}"
            )
        if snapshot.device != self.device:
            raise ValueError(f"snapshot is on {snapshot.device}, the compressor on {self.device}")
        # A ring row is a later call's partner: a NaN there would reach a latent (host sync;
        # prefix-cache restores are not graph-captured).
        if check_finite:
            require_finite(snapshot, "snapshot")
        self.state[req].copy_(snapshot)

    # ----------------------------------------------------------------- forward
    def forward(
        self,
        kv: torch.Tensor,
        score: torch.Tensor | None,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        norm_weight: torch.Tensor,
        eps: float,
        *,
        validate: bool = True,
        backend: str = "auto",
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Compress one step's rows.

        kv: f32 (or bf16) `[T, D]`; score: f32 (or bf16) `[T, D]` at ratio 2, None at ratio 1;
        req_idx: int32 `[T]` (-1 = padding row); pos: int32 `[T]`; norm_weight: `[D]` float.
        Returns `latent: bf16 [T, D]` (zeros where nothing is emitted), `emit: bool [T]`,
        `entry: int64 [T]` (`(p + 1) // ratio - 1` where emitted, else -1).

        Ratio 1: `latent = rms_norm(kv)`. Ratio 2: a row at odd `p` emits
        `rms_norm(bf16(pool_pair(row p-1, row p)))`; row `p-1` comes from this call when
        present, else from the ring. Rows of a request come in ascending positions; a ratio-2
        pair split across calls needs its first row fed earlier.

        `validate=True` checks value ranges and finiteness with host syncs, before anything
        changes: req_idx in [-1, max_requests), pos >= 0, unique (req, pos), finite kv/score on
        non-padding rows, finite norm_weight and eps (ValueError naming the input), and finite
        emitted latents (ValueError: e.g. fp32 kv beyond the bf16 range pools to inf); on error
        neither the ring nor any output is written. `validate=False` skips them all, for
        CUDA-graph capture: a req_idx outside [-1, max_requests) is then treated as padding
        (no ring write, no emit), while non-finite kv/score go into the ring and the latent
        unchecked (the caller's responsibility; `insert` then quantizes NaN as 0).
        `backend`: "triton" (or "auto" on CUDA) runs the whole step in two launches
        (`ops/compress/`: the latents, then the ring update) where the width is a power of
        two; "torch" runs the reference. Both give the same bits (latents, emit, entry, ring;
        the Triton path's exp is libdevice's, torch's CUDA one: `ops/compress/triton_kernels.py`),
        and a row the same bits whatever the batch.
        """
        self._check_inputs(kv, score, req_idx, pos, norm_weight, eps, validate)
        if self._kernel_serves(kv, score, norm_weight, backend):
            return self._forward_kernel(kv, score, req_idx, pos, norm_weight, eps, validate)
        t = kv.shape[0]
        latent = empty((t, self.dim), torch.bfloat16, self.device)
        emit = empty((t,), torch.bool, self.device)
        entry = empty((t,), torch.int64, self.device)
        if t == 0:
            return latent, emit, entry
        # Out-of-range request ids are padding (validated away when validate=True), so the
        # ring is never indexed past its rows.
        valid = (req_idx >= 0) & (req_idx < self.max_requests)
        p = pos.to(torch.int64)
        kv32 = kv.to(torch.float32)
        ring_write: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        if self.ratio == 1:
            emits = valid
            values = rms_norm(kv32, norm_weight, eps, backend=backend)
        else:
            assert score is not None
            emits, values, ring_write = self._forward_pairs(
                kv32, score.to(torch.float32), req_idx, p, valid
            )
            values = rms_norm(values.to(torch.bfloat16), norm_weight, eps, backend=backend)
        if validate:
            require_finite(values[emits], "latent (from finite inputs: kv beyond the bf16 range?)")
        if ring_write is not None:
            self._ring.index_put_(ring_write[:2], ring_write[2])
        latent.copy_(torch.where(emits[:, None], values, torch.zeros_like(values)))
        emit.copy_(emits)
        entry.copy_(torch.where(emits, (p + 1) // self.ratio - 1, torch.full_like(p, -1)))
        return latent, emit, entry

    __call__ = forward

    def _kernel_serves(
        self,
        kv: torch.Tensor,
        score: torch.Tensor | None,
        norm_weight: torch.Tensor,
        backend: str,
    ) -> bool:
        """The two-launch Triton path (`ops/compress/`) serves power-of-two widths with unit
        column strides and f32/bf16 weights; anything else takes the torch path."""
        d = self.dim
        return (
            resolve_backend(backend, self.device) == "triton"
            and d >= 2
            and not d & (d - 1)
            and kv.stride(1) == 1
            and (score is None or score.stride(1) == 1)
            and norm_weight.dtype in (torch.float32, torch.bfloat16)
        )

    def _forward_kernel(
        self,
        kv: torch.Tensor,
        score: torch.Tensor | None,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        norm_weight: torch.Tensor,
        eps: float,
        validate: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`forward` in two launches: the latents (reading the ring), then the ring update."""
        from .ops.compress import triton_kernels

        latent, emit, entry, target = triton_kernels.compress_rows(
            kv, score, req_idx, pos, self._ring, norm_weight.contiguous(), eps, self.ratio
        )
        if validate:
            require_finite(latent[emit], "latent (from finite inputs: kv beyond the bf16 range?)")
        if target is not None:
            assert score is not None
            triton_kernels.write_ring(kv, score, pos, target, self._ring)
        return latent, emit, entry

    def _forward_pairs(
        self,
        kv: torch.Tensor,
        score: torch.Tensor,
        req_idx: torch.Tensor,
        p: torch.Tensor,
        valid: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Ratio 2: (emit bool [T], pooled fp32 [T, D], the ring update `(req, row, values)`
        for `index_put_`, applied by the caller once the call is known to succeed)."""
        t = kv.shape[0]
        d = self.dim
        cap = self.capacity
        spare = self.max_requests  # the ring's scratch request row
        req = torch.where(valid, req_idx.to(torch.int64), torch.full_like(p, spare))
        rows = torch.arange(t, device=kv.device)
        # The partner of a row is the row one position earlier of the same request. Sorting
        # the packed (req, pos) keys puts it right before the row when it is in this call.
        key = torch.where(valid, (req << _POS_BITS) + p, ((spare + 1) << _POS_BITS) + rows)
        sorted_key, order = torch.sort(key, stable=True)
        prev_in_call = torch.zeros_like(valid)
        prev_in_call[1:] = sorted_key[1:] == sorted_key[:-1] + 1
        prev_in_call &= sorted_key < (spare << _POS_BITS)  # padding rows have no partner
        prev_row_sorted = torch.cat([order[:1], order[:-1]])
        in_call = torch.empty_like(valid).scatter_(0, order, prev_in_call)
        partner_row = torch.empty_like(order).scatter_(0, order, prev_row_sorted)

        raw = torch.cat([kv, score], dim=1)
        # Read the ring before this call's rows overwrite it.
        from_ring = self._ring[req, (p - 1) % cap]
        partner = torch.where(in_call[:, None], raw[partner_row], from_ring)
        pooled = pool_pair(partner[:, :d], partner[:, d:], kv, score)

        # Only each request's last `capacity` positions survive in the ring; writing just
        # those keeps the scatter free of duplicate targets (deterministic on every device).
        last = torch.full((self.max_requests + 1,), -1, dtype=torch.int64, device=kv.device)
        last.scatter_reduce_(0, req, p, reduce="amax")
        keep = valid & (p > last[req] - cap)
        target = torch.where(keep, req, torch.full_like(req, spare))
        emits = valid & (p % 2 == 1)
        return emits, pooled, (target, p % cap, raw)

    # ----------------------------------------------------------------- checks
    def _req(self, req: int, name: str = "req") -> int:
        if isinstance(req, bool) or not isinstance(req, int) or not 0 <= req < self.max_requests:
            raise IndexError(f"{name} must be an int in [0, {self.max_requests}), got {req!r}")
        return req

    def _check_inputs(
        self,
        kv: torch.Tensor,
        score: torch.Tensor | None,
        req_idx: torch.Tensor,
        pos: torch.Tensor,
        norm_weight: torch.Tensor,
        eps: float,
        validate: bool,
    ) -> None:
        floats = (torch.float32, torch.bfloat16)
        if kv.dim() != 2 or kv.shape[1] != self.dim or kv.dtype not in floats:
            raise TypeError(
                f"kv must be float32/bfloat16 [T, {self.dim}], got {kv.dtype} {list(kv.shape)}"
            )
        t = kv.shape[0]
        if self.ratio == 1 and score is not None:
            raise ValueError("score must be None at ratio 1 (no pooling)")
        if self.ratio == 2:
            if score is None:
                raise ValueError(f"score must be float32 [{t}, {self.dim}] at ratio 2, got None")
            if score.dtype not in floats or tuple(score.shape) != (t, self.dim):
                raise TypeError(
                    f"score must be float32/bfloat16 [{t}, {self.dim}], got {score.dtype} "
                    f"{list(score.shape)}"
                )
        for name, x in (("req_idx", req_idx), ("pos", pos)):
            if x.dtype != torch.int32 or tuple(x.shape) != (t,):
                raise TypeError(f"{name} must be int32 [{t}], got {x.dtype} {list(x.shape)}")
        if not norm_weight.dtype.is_floating_point or tuple(norm_weight.shape) != (self.dim,):
            raise TypeError(
                f"norm_weight must be a float [{self.dim}] tensor, got {norm_weight.dtype} "
                f"{list(norm_weight.shape)}"
            )
        tensors = {"kv": kv, "req_idx": req_idx, "pos": pos, "norm_weight": norm_weight}
        if score is not None:
            tensors["score"] = score
        for name, x in tensors.items():
            if x.device != self.device:
                raise ValueError(f"{name} is on {x.device}, the compressor on {self.device}")
        if not validate or t == 0:
            return
        lo, hi = int(req_idx.min()), int(req_idx.max())
        if lo < -1 or hi >= self.max_requests:
            raise IndexError(
                f"req_idx must lie in [-1, {self.max_requests}), got values in [{lo}, {hi}]"
            )
        valid = req_idx >= 0
        if bool((pos[valid] < 0).any()):
            raise ValueError("pos must be >= 0 on rows with req_idx >= 0")
        key = req_idx[valid].to(torch.int64) * (1 << _POS_BITS) + pos[valid].to(torch.int64)
        sorted_key = torch.sort(key).values
        if bool((sorted_key[1:] == sorted_key[:-1]).any()):
            raise ValueError("each (req_idx, pos) pair may appear at most once in a call")
        try:
            eps_ok = not isinstance(eps, bool) and math.isfinite(float(eps))
        except (TypeError, ValueError):
            eps_ok = False
        if not eps_ok:
            raise ValueError(f"eps must be a finite number, got {eps!r}")
        # Finiteness (issue 13): a NaN latent or an inf score would go into the ring and from
        # there into prefix-cache snapshots; padding rows are never read, so not checked.
        require_finite(kv[valid], "kv on non-padding rows")
        if score is not None:
            require_finite(score[valid], "score on non-padding rows")
        require_finite(norm_weight, "norm_weight")
