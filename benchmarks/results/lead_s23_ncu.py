"""ncu driver (twenty-third session, call 2): one invariant one-CTA launch of the package named
by argv[1] (ds41_attention, or a renamed copy such as ds41_attention_main on sys.path), two
warm-ups and the profiled launch (`ncu --launch-skip 2 --launch-count 1`). argv: MODULE ROWS"""

import importlib
import sys

import torch

from ds41_attention.bench import FLASH, make_problem

mod, rows = sys.argv[1], int(sys.argv[2])
launch = importlib.import_module(mod + ".ops.sparse_attention.gluon_launch")
p = make_problem(FLASH, rows, torch.device("cuda"), seed=rows)
for _ in range(3):
    launch.launch_gluon_sparse_attention(*p.args(), pair=False)
torch.cuda.synchronize()
print("done", mod, rows)
