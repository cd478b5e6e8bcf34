#!/usr/bin/env bash
# One GPU call: the working tree's Gluon kernel and `prod_*` variants of it (gluon_profile.py)
# against the previous production kernel (the tree at $OLD_TREE, default `..`: the device copy
# of main, one level above a `.dev_*` copy).
# 1. gluon_profile.py: float64 tolerance, rows alone == in batches, graph == eager on the new
#    kernel (every format pair), quick checks of the variants and the split path, variants
#    bitwise against the old kernel ($BITS), kernel times and tile sweeps;
# 2. with PICK=1: the fastest of $CANDIDATES by the geometric mean of its time over the old
#    kernel's at T = 1, 64, 1024, 4096 (none if >= 1) becomes the production constants of this
#    copy (only here, on the device);
# 3. the package's GPU tests ($TESTS_K: a -k filter) on it; 4. `ds41_attention.bench` of this
#    tree (BENCH=0: none; BENCH_OLD=1: the old one's too).
# Results under $OUT (default /tmp/ab_main). Step time limits: T_PROFILE, T_TESTS, T_BENCH.
set -u -o pipefail
cd "$(dirname "$0")/../../.."
A=packages/ds41-attention
out=${OUT:-/tmp/ab_main}
old=${OLD_TREE:-..}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
echo "== profile"
timeout "${T_PROFILE:-120}" python3 $A/scripts/gluon_profile.py \
  --old "$old/$A/src/ds41_attention/ops/sparse_attention/gluon_kernels.py" \
  --rows 1,8,64,1024,4096 --baselines gluon --variants "${VARIANTS:-old,prod_n32,gluon_s7}" \
  --check gluon --quick "${QUICK:-prod_n32,gluon_s7}" --bits "${BITS:-prod_n32:old}" --bits-quick \
  --tile-sweep --sweep "${SWEEP:-gluon,old}" --sweep-rows "${SWEEP_ROWS:-1,132}" \
  --json "$out/profile.json" 2>&1 | tee "$out/profile.log"
echo "profile rc=$?"
if [ "${PICK:-0}" = 1 ]; then
  echo "== pick"
  python3 - "$out/profile.json" "${CANDIDATES:-gluon}" $A/src/ds41_attention/ops/sparse_attention/gluon_kernels.py <<'PY' 2>&1 | tee "$out/pick.log"
import json, math, re, sys
sys.path.insert(0, "packages/ds41-attention/scripts")
rows = {r["T"]: r for r in json.load(open(sys.argv[1]))["rows"]}
score = {}
for c in sys.argv[2].split(","):
    try:
        score[c] = math.exp(sum(math.log(rows[t][c + "_us"] / rows[t]["old_us"])
                                for t in (1, 64, 1024, 4096)) / 4)
    except KeyError:
        pass
print("geomean time / old:", {k: round(v, 4) for k, v in score.items()})
best = min(score, key=score.get) if score else None
if best is None or score[best] >= 1.0:
    print("PICK none")
    sys.exit(0)
print("PICK", best)
if best.startswith("prod_"):
    from gluon_profile import PROD_SPECS  # noqa: E402
    names = {"BLOCK_N": "GLUON_BLOCK_N", "KSMAIN": "GLUON_KSTAGES", "CHUNK": "GLUON_CHUNK",
             "NRAW": "GLUON_RAW_STAGES"}
    src = open(sys.argv[3]).read()
    for k, v in PROD_SPECS[best[5:]].items():
        if k in names:
            src, n = re.subn(rf"^{names[k]} = \d+", f"{names[k]} = {v}", src, flags=re.M)
        else:
            src, n = re.subn(rf"^{k} = gl\.constexpr\(\d+\)", f"{k} = gl.constexpr({v})", src,
                             flags=re.M)
        assert n == 1, k
    open(sys.argv[3], "w").write(src)
    print("patched", sys.argv[3], PROD_SPECS[best[5:]])
PY
  grep -q "PICK none" "$out/pick.log" && { echo "nothing adopted: no tests"; exit 0; }
fi
echo "== gpu tests"
xd=""
python3 -c "import xdist" 2>/dev/null && xd="-n 4"
timeout "${T_TESTS:-120}" python3 -m pytest -q -m gpu $A/tests -p no:cacheprovider $xd \
  ${TESTS_K:+-k "$TESTS_K"} > "$out/tests.log" 2>&1
echo "pytest rc=$?" >> "$out/tests.log"
grep -v "PytestBenchmarkWarning\|warner(" "$out/tests.log" | tail -12
trees="new"
[ "${BENCH_OLD:-0}" = 1 ] && trees="new old"
[ "${BENCH:-1}" = 1 ] || trees=""
for tree in $trees; do
  echo "== bench $tree"
  pp=$PYTHONPATH
  [ $tree = old ] && pp="/tmp/site:$old/packages/ds41-cache/src:$old/$A/src"
  PYTHONPATH=$pp timeout "${T_BENCH:-60}" python3 -m ds41_attention.bench --rows 1,8,64,1024,4096 \
    --skip torch --reps 20 --json "$out/bench_$tree.json" 2>&1 | tail -8 | tee "$out/bench_$tree.log"
done
