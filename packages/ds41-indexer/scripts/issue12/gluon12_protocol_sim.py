"""Issue 12, tenth session, second round (helper idx10b): a random-interleaving simulation (pure
Python, no GPU) of the persistent lab kernel's barrier protocol (`gluon12_kernels.py`, PERSIST):
the ring of STAGES stages (`ready`: 32 asynchronous copy arrivals + the producer's factors
arrival; `empty`: the consumer's arrival), the parities the kernel waits on (a tile's stage and
phase from its index in the item, the first STAGES tiles of a program not waiting for a free
stage) and the per-item handover of the range bits (one `xbar` phase an item, two flag slots).
mbarrier parity waits as in PTX: a wait on parity P passes once the phase of parity P has
completed (the barrier's completed-phase count has the other parity). Every schedule must end
(no deadlock) with the consumer reading each tile's own data and factors and each item's own
flag word (items of TILES tiles, TILES a multiple of 2 x STAGES); several programs of one
launch, static (contiguous shares) or DYN (items claimed from a counter pair the last
program sets back to 0, posted to the consumer through two item slots and an mbarrier, the end
posted as an item >= the launch's), every item scored once.

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


def launch(total, nprog, tiles, dyn, ctr, rnd):
    """One launch of nprog programs over `total` items; returns {item: program} as consumed."""
    done = {}
    actors = {}
    inflight = []  # (program state, stage, tag) async copies not landed
    ranges = [(p * total // nprog, (p + 1) * total // nprog) for p in range(nprog)]

    def program(pid):
        st = {
            "ready": [Bar(33) for _ in range(STAGES)],
            "empty": [Bar(1) for _ in range(STAGES)],
            "xbar": Bar(1),
            "ibar": Bar(1),
            "data": [None] * STAGES,
            "fac": [None] * STAGES,
            "flags": [None, None],
            "items": [None, None],
        }

        def issue(m, item, i):
            s = i % STAGES
            if m > 0 or i >= STAGES:
                while not st["empty"][s].ready(((i // STAGES) & 1) ^ 1):
                    yield
            inflight.append((st, s, (item, i)))
            yield

        def finish(item, i):
            s = i % STAGES
            st["fac"][s] = (item, i)
            st["ready"][s].arrive(1)
            yield

        def produce(m, item):
            yield from issue(m, item, 0)
            for i in range(1, tiles):
                yield from issue(m, item, i)
                yield from finish(item, i - 1)
            yield from finish(item, tiles - 1)
            st["flags"][m % 2] = item
            st["xbar"].arrive()
            yield

        def claim():
            old = ctr[0]
            ctr[0] += 1
            return old

        def producer():
            if dyn:
                item, m = claim(), 0
                yield
                while item < total:
                    st["items"][m % 2] = item
                    st["ibar"].arrive()
                    yield from produce(m, item)
                    item, m = claim(), m + 1
                    yield
                st["items"][m % 2] = item
                st["ibar"].arrive()
                yield
                old = ctr[1]
                ctr[1] += 1
                if old == nprog - 1:
                    ctr[0] = ctr[1] = 0
            else:
                e0, e1 = ranges[pid]
                for m in range(e1 - e0):
                    yield from produce(m, e0 + m)

        def consume(m, item):
            for i in range(tiles):
                s = i % STAGES
                while not st["ready"][s].ready((i // STAGES) & 1):
                    yield
                assert st["data"][s] == (item, i) and st["fac"][s] == (item, i)
                yield
                st["empty"][s].arrive()
                yield
            while not st["xbar"].ready(m & 1):
                yield
            assert st["flags"][m % 2] == item
            assert item not in done
            done[item] = pid
            yield

        def read_item(m):
            while not st["ibar"].ready(m & 1):
                yield
            return st["items"][m % 2]

        def consumer():
            if dyn:
                m = 0
                item = yield from read_item(m)
                while item < total:
                    yield from consume(m, item)
                    m += 1
                    item = yield from read_item(m)
            else:
                e0, e1 = ranges[pid]
                for m in range(e1 - e0):
                    yield from consume(m, e0 + m)

        return producer(), consumer()

    for pid in range(nprog):
        actors[(pid, "p")], actors[(pid, "c")] = program(pid)
    steps = 0
    while actors or inflight:
        steps += 1
        assert steps < 10**7, "deadlock"
        choices = list(actors) + (["a"] if inflight else [])
        who = rnd.choice(choices)
        if who == "a":
            st, s, tag = inflight.pop(rnd.randrange(len(inflight)))
            st["data"][s] = tag
            st["ready"][s].arrive(32)
            continue
        try:
            next(actors[who])
        except StopIteration:
            del actors[who]
    return done


def main() -> None:
    rnd = random.Random(0)
    runs = 0
    for tiles in (16, 32, 64, 128):
        for dyn in (False, True):
            ctr = [0, 0]
            for _ in range(60):
                total, nprog = rnd.randint(1, 9), rnd.randint(1, 4)
                nprog = min(nprog, total)
                done = launch(total, nprog, tiles, dyn, ctr, rnd)
                assert sorted(done) == list(range(total))
                assert ctr == [0, 0]
                runs += 1
    print(
        f"{runs} random launches (1..4 programs, 1..9 items of 16 / 32 / 64 / 128 tiles, static "
        "and DYN, a DYN counter pair reused across launches): no deadlock, every tile, flag and "
        "item its own, every item scored once, the counters back at 0 after each launch"
    )


if __name__ == "__main__":
    main()
