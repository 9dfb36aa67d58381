#!/usr/bin/env bash
# Reproduces the GPU quality table in docs/results.md (documented in docs/jax-and-gpus.md): mixed
# precision's cost in sample quality where float16 runs natively, on a machine with JAX and CUDA but no
# TensorFlow. On a CPU float16 is emulated, so a budget of minutes gives mixed_float16 fewer steps, and
# the equal-step runs there were too few seeds to settle the distances (docs/results.md,
# "mixed_float16 against float32 on swatches"). This is the comparison that can:
# one `python -m acgan.compare` on swatches with the colour table's settings (acgan_cifar, width 0.5,
# batch 64), every policy at the same --steps and training seeds, the runs side by side on the one GPU
# (--parallel; their times are shared-GPU times, their samples do not depend on the run beside them),
# judged by judge 0 on 10,000 samples each, the verdict on the means over the seeds.
#
#   scripts/gpu_benchmark.sh download   # here, with PyPI: the wheels that machine lacks (scripts/gpu_env.sh)
#   scripts/gpu_quality.sh              # there, with .whl/ and data/judges/ copied (the CPU tables' judge 0;
#                                       # without it the judge trains there first, about a minute)
#
# float32 trains with JAX_DEFAULT_MATMUL_PRECISION=highest (full float32 products, as on a CPU; JAX's
# default runs them in TF32 on a GPU that has it); the 16-bit policies' products are 16-bit either way.
# Writes compare.md, compare.json, compare.png and runs.tgz (each run's report, quality, log and final
# grid; no checkpoints) into an output folder given by $OUT when set, else outputs/gpu-quality-<time>/,
# and quality.out, this script's log, beside them. If the budget runs out first, compare is stopped
# (the trainers save their checkpoints), runs.tgz still holds every run's log and report, the step each
# run reached is printed, and the script exits 1.
#
# Environment overrides (defaults in brackets), e.g. to try it on a CPU in a few minutes (docs/jax-and-gpus.md):
#   ACGAN_GPU_STEPS [5000]  ACGAN_GPU_SEEDS [3]  ACGAN_GPU_POLICIES [float32,mixed_float16,mixed_bfloat16]
#   ACGAN_GPU_PARALLEL [runs in all: policies x seeds]  ACGAN_GPU_SAMPLES [10000]  ACGAN_GPU_WIDTH [0.5]
#   ACGAN_GPU_BATCH [64]  ACGAN_GPU_MATMUL [highest; empty: JAX's default]  ACGAN_GPU_DATA_DIR [data]
#   ACGAN_GPU_LOSS [auto: the preset's; or nonsaturating, hinge: acgan.train --loss]
#   ACGAN_GPU_BUDGET_S [480: seconds from start after which compare is stopped]
#   ACGAN_GPU_PYTHON, ACGAN_GPU_WHEELS, ACGAN_GPU_SITE: as scripts/gpu_env.sh
set -euo pipefail

cd "$(dirname "$0")/.."
. scripts/gpu_env.sh   # PY, WHEELS, SITE; gpu_check_wheels, gpu_install

if [ -n "${1:-}" ]; then
    echo "error: unknown argument '$1': scripts/gpu_quality.sh takes none (wheels: scripts/gpu_benchmark.sh download)" >&2
    exit 2
fi
STARTED=$SECONDS
STEPS=${ACGAN_GPU_STEPS:-5000}
SEEDS=${ACGAN_GPU_SEEDS:-3}
POLICIES=${ACGAN_GPU_POLICIES:-float32,mixed_float16,mixed_bfloat16}
IFS=, read -r -a POLICY_LIST <<<"$POLICIES"
PARALLEL=${ACGAN_GPU_PARALLEL:-$((${#POLICY_LIST[@]} * SEEDS))}
BUDGET=${ACGAN_GPU_BUDGET_S:-480}
DATA_DIR=${ACGAN_GPU_DATA_DIR:-data}
gpu_check_wheels
DEST=${OUT:-outputs/gpu-quality-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$DEST" && DEST=$(cd "$DEST" && pwd)
WORK=$(mktemp -d /tmp/acgan-gpu-quality-XXXXXX)   # the runs (their checkpoints are big)
trap 'rm -rf "$WORK"' EXIT

main() {
gpu_install
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # compare sets it for its runs; the judging process too
MATMUL=${ACGAN_GPU_MATMUL-highest}
if [ -n "$MATMUL" ]; then
    export JAX_DEFAULT_MATMUL_PRECISION=$MATMUL
else
    unset JAX_DEFAULT_MATMUL_PRECISION
fi
echo "installed in $((SECONDS - STARTED)) s; matmul precision: ${JAX_DEFAULT_MATMUL_PRECISION:-default}"
# Make the data once, before the runs start side by side (each would otherwise make its own copy).
"$PY" -c "from acgan.data import load_dataset
for split in ('train', 'test'): print(split, len(load_dataset('swatches', split=split, data_dir='$DATA_DIR')), 'images')"

local status=0
timeout -s INT -k 60 $((BUDGET - (SECONDS - STARTED))) "$PY" -m acgan.compare --backend jax --jit \
    --dataset swatches --data_dir "$DATA_DIR" --arch acgan_cifar --width "${ACGAN_GPU_WIDTH:-0.5}" \
    --batch "${ACGAN_GPU_BATCH:-64}" --loss "${ACGAN_GPU_LOSS:-auto}" --policies "$POLICIES" --steps "$STEPS" --seeds "$SEEDS" \
    --parallel "$PARALLEL" --num_samples "${ACGAN_GPU_SAMPLES:-10000}" --output_dir "$WORK/compare" || status=$?

# Every run's report, quality, log and final grid (not its checkpoints), whatever happened.
(cd "$WORK/compare" 2>/dev/null && find . \( -name 'report.*' -o -name quality.json -o -name train.log \
    -o -name final.png -o -name config.json \) -print0 | tar czf "$DEST/runs.tgz" --null -T -) || true
if [ "$status" -eq 0 ]; then
    cp "$WORK/compare"/compare.md "$WORK/compare"/compare.json "$WORK/compare"/compare.png "$DEST/"
    cat "$DEST/compare.md"
    echo "gpu quality: compare done in $((SECONDS - STARTED)) s; $DEST"
    return 0
fi
if [ "$status" -eq 124 ]; then
    echo "compare did not finish: the ${BUDGET} s budget ran out; where each run got to:"
else
    echo "compare failed (status $status); where each run got to:"
fi
local log
for log in "$WORK"/compare/*/train.log; do
    [ -f "$log" ] && echo "  $(basename "$(dirname "$log")"): $(tr '\r' '\n' < "$log" | grep -v '^\s*$' | tail -n 1 | cut -c1-200)"
done
return 1
}

main 2>&1 | tee "$DEST/quality.out"   # pipefail: main's status is the script's
