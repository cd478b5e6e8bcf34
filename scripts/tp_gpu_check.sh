#!/usr/bin/env bash
# Two GPUs (device kind nvidia-h200-x2), one call:
#   1. the `gpu2` test (flash_mini, TP=2 == TP=1 bitwise for nvfp4_ds_mla and fp8_ds_mla, and
#      for greedy / temperature / top-k / top-p requests), then the vocabulary-partials kernel
#      tests on the GPU (test_ops_vocab / test_ops_rowwise, marked interpreter);
#   2. the tensor-parallel benchmark (flash_wide, TP=1 vs TP=2, decode + prefill, comm);
#   3. the decode-step profile at TP=1 and TP=2 (scripts/tp_profile.py);
#   4. all_gather times of the step's sizes under NCCL's own protocol choice
#      (NCCL_PROTO=LL,LL128,Simple), Simple and LL128, and the invariant matmul on the TP=2
#      shard shapes (scripts/tp_comm_matmul.py);
#   5. if a protocol gathers the step's sizes >= 10% faster than LL128 (the launcher's default
#      since branch tp4, `parallel.dist`), the TP=2 benchmark again under it (--skip-tp1);
#   6. the matmul's `gpu` tests (split == one program == row alone, bitwise, flash_mini shapes).
# Each step runs only if enough of TP_TOTAL seconds is left. At the end every JSON result is
# merged into OUTDIR/tp_results.json and every log into OUTDIR/tp_all.log (the device tool
# returns a limited number of files); the parts stay in OUTDIR/parts only with TP_KEEP_PARTS=1.
#   bash scripts/tp_gpu_check.sh OUTDIR
# Run from the repository root with the ds41 packages on PYTHONPATH.
set -u
FINAL=${1:-/tmp/ds41_tp}
OUT=$FINAL/parts
TOTAL=${TP_TOTAL:-300}
mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - start) )); }
# NVLink multicast stays off (the lent machines' rule; it can disable the shared host's GPUs).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
RUN2="python3 -m torch.distributed.run --standalone --nproc-per-node=2"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader | tee "$OUT/gpus.txt"

timeout "${TP_TEST_TIMEOUT:-150}" python3 -m pytest -q -x -m gpu2 -p no:cacheprovider \
  --basetemp="$OUT/pytest" packages/ds41-runner/tests/test_parallel_gpu.py 2>&1 \
  | tail -40 | tee "$OUT/gpu2_test.log"
echo "gpu2 test: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu2_test.log"
find "$OUT/pytest" -name result.json -exec cp {} "$OUT/tp_check.json" \; 2>/dev/null
rm -rf "$OUT/pytest"

step() {  # step NAME MIN_SECONDS COMMAND...: run COMMAND under what is left, logged to NAME.log
  local name=$1 need=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt "$need" ]; then echo "$name: skipped ($l s left)" | tee "$OUT/$name.log"; return; fi
  local t0; t0=$(date +%s)
  timeout "$l" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: rc $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/$name.log"
}
# The vocabulary partials kernel on the GPU against the torch path and float64 (ops.vocab).
step gpu_vocab 20 python3 -m pytest -q -m interpreter -p no:cacheprovider \
  packages/ds41-runner/tests/test_ops_vocab.py packages/ds41-runner/tests/test_ops_rowwise.py
tail -2 "$OUT/gpu_vocab.log"
step tp_bench 40 $RUN2 -m ds41_runner.tp_bench --json "$OUT/tp_bench.json" ${TP_BENCH_ARGS:-}
tail -12 "$OUT/tp_bench.log"
step tp_profile 60 $RUN2 scripts/tp_profile.py --steps 2 --out "$OUT/tp_profile.txt"
step comm_default 15 env NCCL_PROTO=LL,LL128,Simple $RUN2 scripts/tp_comm_matmul.py \
  --json "$OUT/comm_default.json"
for proto in Simple LL128; do
  step "comm_$proto" 12 env NCCL_PROTO=$proto $RUN2 scripts/tp_comm_matmul.py --no-matmul \
    --json "$OUT/comm_$proto.json"
done
cat "$OUT"/comm_*.log | grep -v "^\*\|OMP_NUM\|^$"
best=$(python3 - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def cost(p):  # one decode step's gathers: 16 half totals, the vocab partials, the embedding rows
    g = json.loads(p.read_text())["gather_us"]
    return 16 * g["wo_b/w2 half total f32 64x5120"] + g["vocab partials f32 64x32x6"] \
        + g["embed rows bf16 64x5120"]
costs = {p.stem[5:]: cost(p) for p in out.glob("comm_*.json")}
print(" ".join(f"{k}={v:.0f}us" for k, v in costs.items()), file=sys.stderr)
if "LL128" in costs:  # the launcher's default
    k = min(costs, key=costs.get)
    if k != "LL128" and costs[k] < 0.9 * costs["LL128"]:
        print("LL,LL128,Simple" if k == "default" else k)
EOF
)
echo "protocol for a second TP=2 run: ${best:-none}"
if [ -n "$best" ]; then
  tag=${best//,/_}
  step "tp_bench_$tag" 30 env NCCL_PROTO=$best $RUN2 -m ds41_runner.tp_bench --skip-tp1 \
    --json "$OUT/tp_bench_$tag.json" ${TP_BENCH_ARGS:-}
  tail -12 "$OUT/tp_bench_$tag.log"
fi
step gpu_matmul 25 python3 -m pytest -q -m gpu -p no:cacheprovider \
  packages/ds41-runner/tests/test_ops_linear.py
tail -2 "$OUT/gpu_matmul.log"
echo "total: $(( $(date +%s) - start )) s"
python3 - "$OUT" "$FINAL" <<'EOF'
import json, pathlib, sys
parts, final = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
merged = {}
for p in sorted(parts.glob("*.json")):
    try:
        merged[p.stem] = json.loads(p.read_text())
    except ValueError as exc:
        merged[p.stem] = f"unreadable: {exc}"
(final / "tp_results.json").write_text(json.dumps(merged, indent=1))
logs = sorted(parts.glob("*.log")) + sorted(parts.glob("*.txt"))
(final / "tp_all.log").write_text("".join(f"===== {p.name}\n{p.read_text()}\n" for p in logs))
EOF
[ "${TP_KEEP_PARTS:-0}" = 1 ] || rm -rf "$OUT"
