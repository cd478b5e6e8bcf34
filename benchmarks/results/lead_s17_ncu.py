"""ncu driver (seventeenth session, calls 1 and 4): launch one invariant kernel eagerly, two
warm-ups and the profiled launch (`ncu --launch-skip 2 --launch-count 1`).
argv: pair|onecta ROWS"""

import sys

import torch

from ds41_attention.bench import FLASH, make_problem
from ds41_attention.ops.sparse_attention.gluon_launch import launch_gluon_sparse_attention

kind, rows = sys.argv[1], int(sys.argv[2])
p = make_problem(FLASH, rows, torch.device("cuda"), seed=rows)
for _ in range(3):
    launch_gluon_sparse_attention(*p.args(), pair=(kind == "pair"))
torch.cuda.synchronize()
print("done", kind, rows)
