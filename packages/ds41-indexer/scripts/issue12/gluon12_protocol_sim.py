"""Issue 12, tenth session, second round (helper idx10b): a random-interleaving simulation (pure
Python, no GPU) of the persistent lab kernel's barrier protocol (`gluon12_kernels.py`, PERSIST):
the ring of STAGES stages (`ready`: 32 asynchronous copy arrivals + the producer's factors
arrival; `empty`: the consumer's arrival), the parities the kernel waits on (a tile's stage and
phase from its index in the item, the first STAGES tiles of a program not waiting for a free
stage) and the per-item handover of the range bits (one `xbar` phase an item, two flag slots).
mbarrier parity waits as in PTX: a wait on parity P passes once the phase of parity P has
completed (the barrier's completed-phase count has the other parity). Every schedule must end
(no deadlock) with the consumer reading each tile's own data and factors and each item's own
flag word (items of TILES tiles, TILES a multiple of 2 x STAGES).

    python packages/ds41-indexer/scripts/issue12/gluon12_protocol_sim.py
"""

import random

STAGES = 4


class Bar:
    def __init__(self, count):
        self.count, self.pending, self.done = count, 0, 0

    def arrive(self, n=1):
        self.pending += n
        assert self.pending <= self.count
        if self.pending == self.count:
            self.pending, self.done = 0, self.done + 1

    def ready(self, parity):
        return (self.done & 1) != parity


def run(nitems, tiles, seed):
    rnd = random.Random(seed)
    ready = [Bar(33) for _ in range(STAGES)]
    empty = [Bar(1) for _ in range(STAGES)]
    xbar = Bar(1)
    data = [None] * STAGES
    fac = [None] * STAGES
    flags = [None, None]
    inflight = []  # (stage, tile) async copies not landed

    def issue(m, i):
        k = m * tiles + i
        s = i % STAGES
        if m > 0 or i >= STAGES:
            while not empty[s].ready(((i // STAGES) & 1) ^ 1):
                yield
        inflight.append((s, k))
        yield

    def finish(m, i):
        s = i % STAGES
        fac[s] = m * tiles + i
        ready[s].arrive(1)
        yield

    def producer():
        for m in range(nitems):
            yield from issue(m, 0)
            for i in range(1, tiles):
                yield from issue(m, i)
                yield from finish(m, i - 1)
            yield from finish(m, tiles - 1)
            flags[m % 2] = m
            xbar.arrive()
            yield

    def consumer():
        for m in range(nitems):
            for i in range(tiles):
                k = m * tiles + i
                s = i % STAGES
                while not ready[s].ready((i // STAGES) & 1):
                    yield
                assert data[s] == k and fac[s] == k, (m, i, data[s], fac[s])
                yield
                empty[s].arrive()
                yield
            while not xbar.ready(m & 1):
                yield
            assert flags[m % 2] == m, (m, flags)
            yield

    actors = {"p": producer(), "c": consumer()}
    steps = 0
    while actors or inflight:
        steps += 1
        assert steps < 10**6, "deadlock"
        choices = list(actors) + (["a"] if inflight else [])
        who = rnd.choice(choices)
        if who == "a":
            s, k = inflight.pop(rnd.randrange(len(inflight)))
            data[s] = k
            ready[s].arrive(32)
            continue
        try:
            next(actors[who])
        except StopIteration:
            del actors[who]
    return steps


def main() -> None:
    for tiles in (16, 32, 64, 128):
        for seed in range(800):
            run(1 + seed % 5, tiles, seed)
    print(
        "800 random schedules of 1..5 items of 16 / 32 / 64 / 128 tiles each: no deadlock, "
        "every tile and flag its own"
    )


if __name__ == "__main__":
    main()
