"""Issue 11 lab: can a Gluon (triton 3.6) kernel exchange a tile between the two CTAs of a cluster?

The structural lever left for T = 1 and T = 64 is two CTAs a row, each decoding half of D and
exchanging its partial Q.K^T (64 heads x 32 keys, fp32, 8 KB) every tile. Gluon 3.6 has
`num_ctas` (cluster launch) but no distributed-shared-memory API, and its own cross-CTA
`convert_layout` fails to lower (`nvvm.mapa` gets a shared-space pointer: an MLIR verifier
error). This probe does the exchange in inline PTX instead:

- each thread pushes its accumulator elements into the peer CTA's buffer with
  `st.async.shared::cluster.mbarrier::complete_tx::bytes` (address from `mapa`), which also
  counts the bytes on the peer's mbarrier;
- the receiver arms its mbarrier with `mbarrier.expect` (Gluon) and waits on the phase;
- the buffers' shared-memory addresses are `global_smem` plus the allocator's offsets, which
  Gluon does not expose: `--offsets` reads them from the MLIR dump of an offline compile
  (the offsets are constexprs that only appear in asm strings, so passing them does not move
  the allocation). A wrong offset fails the check below, it cannot pass silently.

Ping-pong: both CTAs start from their own tile, exchange, average, exchange again ... N times,
alternating two buffers (a buffer is written again only after the peer has read it: each side
reads the peer's previous tile before it sends the next). After one exchange both CTAs hold
(x0 + x1) / 2 bit for bit; the check compares every cluster's result with that.
Timing: CUDA events, (t(N) - t(1)) / (N - 1) per exchange, beside the same loop with a local
shared-memory round trip and a CTA barrier in place of the exchange.

    python packages/ds41-attention/scripts/cluster_exchange_probe.py --offsets   # offline
    python packages/ds41-attention/scripts/cluster_exchange_probe.py             # H200
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import torch
from gluon_lab import _ARRIVE_REMOTE, _CLUSTER_SYNC, _PEER_BASE, _PUSH_PAIR
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

N_HEADS = 64
N_KEYS = 32
HEADS = gl.constexpr(N_HEADS)
KEYS = gl.constexpr(N_KEYS)
TILE_BYTES = gl.constexpr(N_HEADS * N_KEYS * 4)
# Allocator offsets of x0, x1 and the two barriers for this kernel (`--offsets` re-derives them).
X0_OFFSET = 0
X1_OFFSET = 8192
BAR_OFFSET = 16384

ACC = gl.constexpr(gl.BlockedLayout([1, 2], [8, 4], [4, 1], [1, 0], cga_layout=[[0, 0]]))
THREAD = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0], cga_layout=[[0]]))
PLAIN = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0], cga_layout=[[0, 0]]))

# One element into the peer CTA's buffer ($2: byte offset of the element, $3: the barrier's).
PUSH = gl.constexpr("""{
 .reg .u32 la, ra, lb, rb, peer;
 mov.u32 peer, %cluster_ctarank;
 xor.b32 peer, peer, 1;
 mov.u32 la, global_smem;
 add.u32 la, la, $2;
 mapa.shared::cluster.u32 ra, la, peer;
 mov.u32 lb, global_smem;
 add.u32 lb, lb, $3;
 mapa.shared::cluster.u32 rb, lb, peer;
 st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [ra], $1, [rb];
 mov.u32 $0, 0;
}""")
# The PTX the lab's split kernel uses too: the peer CTA's address of global_smem, two adjacent
# elements to a peer address, one remote release arrive a thread, a sync of both CTAs.
PEER_BASE = _PEER_BASE
PUSH_PAIR = _PUSH_PAIR
ARRIVE_REMOTE = _ARRIVE_REMOTE
CLUSTER_SYNC = _CLUSTER_SYNC
BAR_INIT_FENCE = gl.constexpr("fence.mbarrier_init.release.cluster; mov.u32 $0, 0;")
# Global stores of a layout replicated over the cluster are predicated to CTA 0 by Triton; each
# CTA here stores its own rows, so the store is written out.
STORE = gl.constexpr("st.global.b32 [$1], $2; mov.u32 $0, 0;")
RANK = gl.constexpr("mov.u32 $0, %cluster_ctarank;")
CLUSTER = gl.constexpr("mov.u32 $0, %clusterid.x;")


@gluon.jit
def _exchange(v, hk, t, peer, buf, bar, phase, X_OFF: gl.constexpr, B_OFF: gl.constexpr,
              MODE: gl.constexpr):  # fmt: skip
    if MODE == 1:
        mbarrier.expect(bar, TILE_BYTES)
        args = [v, X_OFF + hk * 4, B_OFF + hk * 0]
        gl.inline_asm_elementwise(PUSH, "=r,r,r,r", args, gl.int32, False, 1)
        mbarrier.wait(bar, phase)
    elif MODE == 2:
        pair = [v.to(gl.int32, bitcast=True), peer + X_OFF + hk * 4]
        gl.inline_asm_elementwise(PUSH_PAIR, "=r,=r,r,r,r,r", pair, gl.int32, False, 2)
        gl.inline_asm_elementwise(ARRIVE_REMOTE, "=r,r", [peer + B_OFF + t * 0], gl.int32, False, 1)
        mbarrier.wait(bar, phase)
    else:
        buf.store(v)
        gl.thread_barrier()
    return (v + buf.load(ACC)) * 0.5


@gluon.jit
def exchange_kernel(
    x_ptr,
    y_ptr,
    n_iter,
    X0: gl.constexpr,
    X1: gl.constexpr,
    BARS: gl.constexpr,
    MODE: gl.constexpr,
):
    """x, y: [clusters, 2, 64, 32] fp32; CTA r of cluster c reads x[c, r], writes y[c, r]."""
    x0 = gl.allocate_shared_memory(gl.float32, [HEADS, KEYS], PLAIN)
    x1 = gl.allocate_shared_memory(gl.float32, [HEADS, KEYS], PLAIN)
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    t = gl.arange(0, 128, layout=THREAD)
    if MODE == 2:  # one arrival from each of the peer's 128 threads
        mbarrier.init(bars.index(0), count=128)
        mbarrier.init(bars.index(1), count=128)
    else:  # one arrival (the local expect), the rest counted in bytes
        mbarrier.init(bars.index(0), count=1)
        mbarrier.init(bars.index(1), count=1)
    gl.inline_asm_elementwise(BAR_INIT_FENCE, "=r,r", [t], gl.int32, False, 1)
    # the peer's barriers are initialized before anything is pushed to them
    gl.inline_asm_elementwise(CLUSTER_SYNC, "=r,r", [t], gl.int32, False, 1)
    rank = gl.max(gl.inline_asm_elementwise(RANK, "=r,r", [t], gl.int32, True, 1), axis=0)
    cluster = gl.max(gl.inline_asm_elementwise(CLUSTER, "=r,r", [t], gl.int32, True, 1), axis=0)
    peer = gl.max(gl.inline_asm_elementwise(PEER_BASE, "=r,r", [t], gl.int32, True, 1), axis=0)
    h = gl.arange(0, HEADS, layout=gl.SliceLayout(1, ACC))
    k = gl.arange(0, KEYS, layout=gl.SliceLayout(0, ACC))
    hk = h[:, None] * KEYS + k[None, :]
    off = (cluster * 2 + rank) * (HEADS * KEYS) + hk
    v = gl.load(x_ptr + off)
    for j in range(n_iter):
        v = _exchange(v, hk, t, peer, x0, bars.index(0), j & 1, X0, BARS, MODE)
        v = _exchange(v, hk, t, peer, x1, bars.index(1), j & 1, X1, BARS + 8, MODE)
    out = [(y_ptr + off).to(gl.int64), v.to(gl.int32, bitcast=True)]
    gl.inline_asm_elementwise(STORE, "=r,l,r", out, gl.int32, False, 1)
    # no CTA exits while the peer may still push into its shared memory
    gl.inline_asm_elementwise(CLUSTER_SYNC, "=r,r", [t], gl.int32, False, 1)


OFFSETS_PROGRAM = """
import sys
sys.path.insert(0, {here!r})
import cluster_exchange_probe as p, triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
sig = {{"x_ptr": "*fp32", "y_ptr": "*fp32", "n_iter": "i32"}}
consts = {{"X0": 0, "X1": 0, "BARS": 0, "MODE": {mode}}}
triton.compile(GluonASTSource(p.exchange_kernel, sig, consts, {{}}),
               target=GPUTarget("cuda", 90, 32), options={{"num_warps": 4, "num_ctas": 2}})
"""


def print_offsets(mode: int) -> None:
    """Offline: compile for sm_90a with the MLIR dump on and print the allocator's offsets."""
    code = OFFSETS_PROGRAM.format(here=os.path.dirname(os.path.abspath(__file__)), mode=mode)
    env = dict(os.environ, MLIR_ENABLE_DUMP="1", TRITON_ALWAYS_COMPILE="1")
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    pattern = r"%(\w+) = ttg.local_alloc \{allocation.offset = (\d+)"
    for name, offset in sorted(set(re.findall(pattern, run.stderr))):
        print(f"mode {mode} {name}: {offset}")


MODES = {
    0: "local smem + CTA barrier",
    1: "st.async b32, bytes counted",
    2: "st v2 + one arrive a thread",
}


def launch(x: torch.Tensor, n_iter: int, mode: int) -> torch.Tensor:
    """One launch of `x.shape[0]` clusters of two CTAs; returns y (NaN where nothing was stored)."""
    y = torch.full_like(x, float("nan"))
    grid = (x.shape[0],)
    exchange_kernel[grid](x, y, n_iter, X0=X0_OFFSET, X1=X1_OFFSET, BARS=BAR_OFFSET,
                          MODE=mode, num_warps=4, num_ctas=2)  # fmt: skip
    return y


def median_us(x: torch.Tensor, n_iter: int, mode: int) -> float:
    launch(x, n_iter, mode)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(5):
        start.record()
        launch(x, n_iter, mode)
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return sorted(samples)[2]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--offsets", action="store_true", help="print the allocator's offsets")
    ap.add_argument("--iters", type=int, default=4097)
    args = ap.parse_args()
    if args.offsets:
        for mode in MODES:
            print_offsets(mode)
        return
    gen = torch.Generator(device="cuda").manual_seed(11)
    rows = []
    for clusters in (1, 66):
        x = torch.randn(clusters, 2, N_HEADS, N_KEYS, device="cuda", generator=gen) * 3.0
        want = ((x[:, 0] + x[:, 1]) * 0.5).unsqueeze(1).expand(-1, 2, -1, -1)
        for mode, kind in MODES.items():
            ok = torch.equal(launch(x, 0, mode), x)
            if mode:
                got = launch(x, 1, mode)
                per_rank = [torch.equal(got[:, r], want[:, r]) for r in range(2)]
                print(f"{clusters} clusters, {kind}: n_iter=0 returns x: {ok}; "
                      f"one exchange bitwise, rank 0 / 1: {per_rank}")  # fmt: skip
                ok = ok and all(per_rank)
            t1 = median_us(x, 1, mode)
            tn = median_us(x, args.iters, mode)
            per = (tn - t1) / (args.iters - 1) / 2
            rows.append((clusters, kind, ok, t1, per))
    print("clusters | exchange                     | bitwise | 1 round us | us per exchange")
    for clusters, kind, ok, t1, per in rows:
        print(f"{clusters:8d} | {kind:28s} | {ok!s:7s} | {t1:10.1f} | {per:.3f}")
    if not all(r[2] for r in rows):
        raise SystemExit("exchange gave wrong bits: the offsets or the protocol are wrong")


if __name__ == "__main__":
    main()
